"""A vLLM engine: one ``trl vllm-serve`` server on a GPU, driven through TRL's ``VLLMClient``.

Start the server (one GPU for vLLM, the others for training)::

    CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model <model dir> --port 8000
    CUDA_VISIBLE_DEVICES=1 agentrl-train --config train.yaml --engine vllm --vllm_server_port 8000

Generation is token in / token out (``prompts`` as token ids, ``logprobs=0`` returns the
sampled token's logprob). Weights go over TRL's NCCL weight-update group
(``init_communicator``), full tensors by the base model's parameter names; the trainer merges a
LoRA adapter before sending. Requires the ``vllm`` extra and a CUDA device.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import torch

from .busy import BusyClock

__all__ = ["VLLMEngine"]


class VLLMEngine:
    merged_weights = True  # load_weights wants full tensors by base-model names

    def __init__(self, host: str = "127.0.0.1", port: int = 8000, group_port: int = 51216, timeout: float = 240.0) -> None:
        from trl.generation.vllm_client import VLLMClient  # needs the vllm extra

        self.client = VLLMClient(host=host, server_port=port, group_port=group_port, connection_timeout=timeout)
        self.client.init_communicator(device=torch.cuda.current_device())
        self.version = 0
        self._clock = BusyClock()

    @property
    def busy_seconds(self) -> float:
        """Wall time with at least one generation in flight, the current busy period included."""
        return self._clock.seconds

    async def generate(
        self, prompt_ids: list[int], max_tokens: int, temperature: float, top_p: float, tools: Any = None
    ) -> tuple[list[int], list[float]]:
        if tools:
            raise NotImplementedError("constrain_tool_calls is not supported with the vLLM engine yet (transformers engine only)")
        with self._clock.busy():
            out = await asyncio.to_thread(
                self.client.generate, [list(prompt_ids)], temperature=temperature, top_p=top_p, max_tokens=max_tokens, logprobs=0
            )
        ids = list(out["completion_ids"][0])
        logprobs = [float(tok[0]) for tok in out["logprobs"][0]]
        return ids, logprobs

    def load_weights(self, named: Mapping[str, torch.Tensor], version: int) -> None:
        with self.client.weight_update():
            for name, tensor in named.items():
                self.client.update_named_param(name, tensor)
        self.client.reset_prefix_cache()
        self.version = version

    def close(self) -> None:
        self.client.close_communicator()
