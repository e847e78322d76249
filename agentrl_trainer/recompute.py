"""Activation recomputation for the training forward, with the shared prompt head kept.

A forward/backward of SmolLM2-135M + LoRA kept ~1.5 MB of activations a token (measured with
``torch.autograd.graph.saved_tensors_hooks``; ~3 MB at the backward's peak), so one micro-batch
of 4,096 tokens peaked at 9-10 GB RSS on the CPU. :func:`recomputed_layers` makes each decoder
layer keep only its input in the forward and recompute itself in the backward (non-reentrant
``torch.utils.checkpoint``, transformers' own per-layer hook), and :func:`chunked` does the same
for the LM head over the trained tokens, a chunk at a time.

transformers drops the KV cache of a checkpointed layer, because a cache that a layer *writes*
would be written again by the backward's recompute. The shared prompt head needs a cache, so it
gets two that replay safely: :class:`HeadCache` (the head's own pass: a layer's first update
stores its KV, a recompute's update stores nothing) and :class:`PrefixCache` (the rows' pass:
every update returns the head's KV followed by the rows' own and stores nothing). With them a
layer may keep its cache under checkpointing (``_can_checkpoint_with_cache``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint
from transformers import DynamicCache

__all__ = ["HeadCache", "PrefixCache", "chunked", "recomputed_layers"]


class HeadCache(DynamicCache):
    """The shared head's pass: each layer's first update stores its KV and returns it; a later
    update of the same layer (the backward recomputing it) returns its input unchanged, which is
    what the first one returned on an empty cache, and stores nothing."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        if layer_idx < len(self.layers) and getattr(self.layers[layer_idx], "is_initialized", False):
            return key_states, value_states
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


class PrefixCache(DynamicCache):
    """The rows' pass over a shared head: holds the head's KV for every row and returns it
    followed by the rows' own on every update, storing nothing (so a recompute sees the same)."""

    @classmethod
    def over(cls, head: DynamicCache, rows: int, config: Any) -> PrefixCache:
        """The head's KV (1, KV, P, D) per layer, for ``rows`` rows (with their gradient path)."""
        cache = cls(config=config)
        for i, layer in enumerate(head.layers):
            keys = layer.keys.expand(rows, -1, -1, -1)  # (R, KV, P, D)
            values = layer.values.expand(rows, -1, -1, -1)
            DynamicCache.update(cache, keys, values, i)
        return cache

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        layer = self.layers[layer_idx]
        return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)


def decoder_layers(model: Any) -> list[Any]:
    """The model's transformers decoder layers that can checkpoint themselves."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


@contextmanager
def recomputed_layers(model: Any) -> Iterator[None]:
    """Within the block, a forward with gradients through ``model`` keeps only each decoder layer's
    input and recomputes the layer in the backward; a layer keeps its KV cache (use
    :class:`HeadCache` / :class:`PrefixCache`, which replay safely). The layers' settings are
    restored on exit (the backward needs none of them). Raises ``ValueError`` for a model without
    transformers' checkpointable layers."""
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no transformers GradientCheckpointingLayer to recompute")
    before = [(layer.__dict__.copy()) for layer in layers]
    recompute = functools.partial(checkpoint, use_reentrant=False)
    for layer in layers:
        layer.gradient_checkpointing = True
        layer._gradient_checkpointing_func = recompute
        layer._can_checkpoint_with_cache = True  # only our replay-safe caches reach it (see the module doc)
    try:
        yield
    finally:
        for layer, saved in zip(layers, before, strict=True):
            for key in ("gradient_checkpointing", "_gradient_checkpointing_func", "_can_checkpoint_with_cache"):
                if key in saved:
                    setattr(layer, key, saved[key])
                else:
                    layer.__dict__.pop(key, None)


def chunked(fn: Callable[..., tuple[torch.Tensor, ...]], rows: int, *tensors: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """``fn(*tensors)`` over chunks of ``rows`` rows (the first dimension; a ``None`` stays
    ``None``), each recomputed in the backward instead of kept, the results concatenated. For the
    LM head over the trained tokens: a chunk's (rows, V) logits live only while it is computed."""
    n = next(t for t in tensors if t is not None).shape[0]
    parts = []
    for start in range(0, n, rows):
        piece = [None if t is None else t[start : start + rows] for t in tensors]
        if torch.is_grad_enabled():
            parts.append(checkpoint(fn, *piece, use_reentrant=False))
        else:
            parts.append(fn(*piece))
    return tuple(torch.cat(outs) for outs in zip(*parts, strict=True))
