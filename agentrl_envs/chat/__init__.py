"""The chat layer: one implementation of prompts, tool calls and sampling for every consumer.

The model server (:mod:`agentrl_envs.models`), the eval client and the RL trainer
(``agentrl_trainer``) all use these modules, so the text a policy is trained on is the text it is
served and evaluated with:

* :mod:`.toolcalls` — prompt rendering with tools, completion parsing (pure; no torch)
* :mod:`.grammar` — the tool-call grammar (xgrammar) for forced calls
* :mod:`.loading` — loading a model offline (GGUF dequantized once and cached, or an HF directory)
* :mod:`.engine` — :class:`TransformersEngine`: a causal LM that answers chat requests
* :mod:`.decode` — the decode core: rows joining and leaving a running batch, the prefix cache
* :mod:`.sampling` — :class:`BatchSampler`: concurrent requests continuously batched on one thread
* :mod:`.errors` — what loading and sampling raise

The names below are imported lazily: ``import agentrl_envs.chat`` (or ``.toolcalls``) does not
import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "render_prompt": "toolcalls",
    "parse_completion": "toolcalls",
    "ParsedCompletion": "toolcalls",
    "ToolCallGrammar": "grammar",
    "tool_call_schema": "grammar",
    "default_gguf_path": "loading",
    "load_model": "loading",
    "model_directory": "loading",
    "TransformersEngine": "engine",
    "ChatGeneration": "engine",
    "PreparedChat": "engine",
    "DecodeBatch": "hf_decode",
    "DecodeRow": "decode",
    "shared_head_length": "decode",
    "BatchSampler": "sampling",
    "Completion": "sampling",
    "BadModelRequestError": "errors",
    "ContextLengthError": "errors",
    "ModelLoadError": "errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
