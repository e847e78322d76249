"""Rollout engines: where the trainer's episodes are sampled.

* :class:`LocalEngine` — a transformers model in this process (CPU or GPU) that batches the
  requests of concurrent episodes; weights are copied in place between batches.
* :class:`VLLMEngine` — a ``trl vllm-serve`` server on a GPU, over HTTP; weight sync over NCCL
  needs the optional extra ``vllm`` (docs/vllm.md).
* :class:`SimulatedEngine` — no model: scripted tokens after a latency drawn from a long-tailed
  distribution. It exists for the async-vs-sync benchmark and is labelled as a simulation.
"""

from __future__ import annotations

from .local import LocalEngine
from .simulated import SimulatedEngine
from .vllm import VLLMEngine

__all__ = ["LocalEngine", "SimulatedEngine", "VLLMEngine"]
