"""What data-parallel training needs beyond TRL: whole weights out of sharded models, rollout
engine copies built from them, each process's share of the samples, and the statistics that must
span all processes (task advantage normalization, step metrics).

**Weights.** Under DeepSpeed ZeRO-3 each parameter holds only this process's shard (ZeRO marks it
with a ``ds_id``); under FSDP1 the root module owns flat shards; under FSDP2 parameters are
``DTensor`` shards. ``copy.deepcopy`` of such a module copies shards, and ``named_parameters``
reads them. So weights are gathered the way TRL gathers them for vLLM
(``trl/generation/vllm_generation.py``, ``VLLMGeneration._iter_named_params``):
``deepspeed.zero.GatheredParameters`` (one parameter at a time, or all of them around a LoRA
merge), ``FSDP.summon_full_params`` and ``DTensor.full_tensor``; and an engine's model is a fresh
module of the same architecture that loads such a gathered state dict. Gathering is a
collective: when the model is sharded every process must call these functions at the same
point, in the same order (the trainer calls them from its per-step callback, which every process
runs). With one process or DDP every parameter is whole and nothing is communicated.

**Statistics.** The rest are pure functions; the trainer does the collectives around them.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch

__all__ = [
    "build_copy",
    "share_frozen_weights",
    "gather_merged_weights",
    "gather_weights",
    "merge_step_metrics",
    "normalize_with_moments",
    "shard_indices",
    "task_moments",
]

# Wrappers that FSDP and activation checkpointing put into parameter names.
_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def _clean(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def _strip_data_parallel(model: Any) -> Any:
    """Peel DDP and DeepSpeed's engine (whose parameters are the module's); FSDP stays wrapped."""
    while type(model).__name__ in ("DistributedDataParallel", "DeepSpeedEngine"):
        model = model.module
    return model


def _is_zero3(param: torch.Tensor) -> bool:
    return hasattr(param, "ds_id")


def _is_fsdp1(model: Any) -> bool:
    return type(model).__name__ == "FullyShardedDataParallel"


def _whole(t: torch.Tensor) -> torch.Tensor:
    """FSDP2 shards are DTensors: ``full_tensor`` all-gathers them (a collective)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


@contextmanager
def _gathered(model: Any, params: list[torch.Tensor]) -> Iterator[None]:
    """Inside, ``params`` of ``model`` are whole on this process (for reading: changes are dropped)."""
    zero3 = [p for p in params if _is_zero3(p)]
    if zero3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(zero3):
            yield
    elif _is_fsdp1(model):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.summon_full_params(model, writeback=False):
            yield
    else:
        yield


@torch.no_grad()
def gather_weights(model: Any, *, trainable_only: bool = False) -> dict[str, torch.Tensor]:
    """Whole ``model`` parameters by name (``trainable_only``: those that require grad); gathered
    ones are copies, whole ones are the (detached) parameters themselves.

    Names are the unwrapped model's (what ``named_parameters`` gives without DDP/FSDP wrappers),
    so they load into a copy built by :func:`build_copy`. A collective when the model is sharded.
    """
    model = _strip_data_parallel(model)
    out: dict[str, torch.Tensor] = {}
    if _is_fsdp1(model):
        with _gathered(model, []):  # inside, named_parameters gives the original, whole parameters
            for name, p in model.named_parameters():
                if p.requires_grad or not trainable_only:
                    out[_clean(name)] = p.detach().clone()
        return out
    for name, p in model.named_parameters():
        if trainable_only and not p.requires_grad:
            continue
        if _is_zero3(p):
            with _gathered(model, [p]):  # one at a time, as TRL does for vLLM; released on exit
                out[_clean(name)] = p.detach().clone()
        else:  # whole already (one process, DDP), or all-gathered into a new tensor (FSDP2)
            out[_clean(name)] = _whole(p.detach())
    return out


@torch.no_grad()
def gather_merged_weights(model: Any) -> dict[str, torch.Tensor]:
    """Whole weights by base-model names, a PEFT model's LoRA merged in (for engines that load
    whole models). Merging needs every parameter whole, so all are gathered at once (as TRL does);
    the merge is undone before the shards are released."""
    model = _strip_data_parallel(model)
    inner = model.module if _is_fsdp1(model) else model
    if not hasattr(inner, "merge_adapter"):
        return gather_weights(model)
    out: dict[str, torch.Tensor] = {}
    with _gathered(model, list(model.parameters())):
        inner.merge_adapter()
        try:
            for name, p in model.named_parameters():
                name = _clean(name)
                if "lora_" in name:
                    continue
                clean = name.removeprefix("base_model.model.").replace(".base_layer", "")
                out[clean] = _whole(p.detach()).clone()
        finally:
            inner.unmerge_adapter()
    return out


def _persistent_buffers(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Buffers that belong in a state dict (ZeRO-3 and FSDP leave buffers whole)."""
    out = {}
    for mod_name, mod in model.named_modules():
        for b_name, b in mod.named_buffers(recurse=False):
            if b_name not in mod._non_persistent_buffers_set:
                out[_clean(f"{mod_name}.{b_name}" if mod_name else b_name)] = b.detach().clone()
    return out


def _fresh(model: Any) -> torch.nn.Module:
    """A new, unsharded module of ``model``'s architecture (random weights, to be overwritten)."""
    if hasattr(model, "peft_config") and hasattr(model, "get_base_model"):
        from peft import get_peft_model

        adapter = model.active_adapter
        config = copy.deepcopy(model.peft_config[adapter])
        config.inference_mode = False
        return get_peft_model(_fresh(model.get_base_model()), config, adapter_name=adapter)
    if not hasattr(model, "config"):
        raise TypeError(f"cannot rebuild a {type(model).__name__} from its config: pass a transformers or peft model")
    # The plain constructor: from_config would partition the new module again under ZeRO-3.
    fresh = type(model)(copy.deepcopy(model.config))
    if getattr(model, "generation_config", None) is not None:
        fresh.generation_config = copy.deepcopy(model.generation_config)
    return fresh


def build_copy(model: Any, weights: dict[str, torch.Tensor] | None = None) -> torch.nn.Module:
    """An unsharded copy of ``model`` (a transformers or peft model, possibly wrapped and sharded)
    holding ``weights`` (default: :func:`gather_weights` of it, a collective when sharded).

    The copy is built from the model's config and loads the gathered state dict, never a
    ``deepcopy`` of a sharded module; it is on the weights' device and dtype.
    """
    model = _strip_data_parallel(model)
    if weights is None:
        weights = gather_weights(model)
    inner = model.module if _is_fsdp1(model) else model
    state = {**_persistent_buffers(inner), **weights}
    fresh = _fresh(inner).to(next(iter(weights.values())).device)
    own = dict(fresh.named_parameters())
    for name, tensor in weights.items():
        if name in own:  # each parameter in the dtype it trains in (a LoRA adapter may differ from its base)
            own[name].data = own[name].data.to(tensor.dtype)
    missing, unexpected = fresh.load_state_dict(state, strict=False)
    # A tied weight (lm_head = embed_tokens) is named once in named_parameters: its alias shows
    # up as missing, but it is the very parameter that was loaded.
    own = dict(fresh.named_parameters(remove_duplicate=False))
    loaded = {id(own[n]) for n in state if n in own}
    absent = [k for k in missing if k in own and id(own[k]) not in loaded]
    if unexpected or absent:
        raise RuntimeError(
            f"the copy of {type(inner).__name__} does not match the gathered weights: "
            f"unexpected {sorted(unexpected)[:5]}, missing {absent[:5]}"
        )
    return fresh


@torch.no_grad()
def share_frozen_weights(copy_: torch.nn.Module, model: Any) -> int:
    """Point ``copy_``'s parameters at ``model``'s own tensors where those are frozen (a LoRA
    adapter's base weights), instead of keeping a copy; returns the bytes no longer duplicated.

    Frozen weights never change, so an engine's copy can read the trained model's: a rollout or
    evaluation engine of SmolLM2-135M + LoRA then holds its adapter and its packed decoding copy,
    not another 0.54 GB of base weights. Only whole parameters of the same shape, dtype and device
    are shared (sharded ones, ZeRO-3 / FSDP, stay copies)."""
    model = _strip_data_parallel(model)
    if _is_fsdp1(model):
        return 0
    source = dict(model.named_parameters())
    shared = 0
    for name, p in copy_.named_parameters():
        src = source.get(name)
        if src is None or src.requires_grad or _is_zero3(src) or hasattr(src, "full_tensor"):
            continue
        if src.shape != p.shape or src.dtype != p.dtype or src.device != p.device or src.data_ptr() == p.data_ptr():
            continue
        p.data = src.data
        shared += src.numel() * src.element_size()
    return shared


# ---------------------------------------------------------------------- samples and statistics

# Step metrics that add up over the processes (the others are averaged, "_max" ones maxed).
SUMMED_METRICS = frozenset(
    {
        "rollout/groups",
        "rollout/episodes",
        "rollout/drift_turns",
        "rollout/forks",
        "rollout/dropped_infra",
        "rollout/trained_tokens",
        "rollout/queued_groups",
    }
)


def shard_indices(indices: Mapping[str, Sequence[Any]], rank: int, world: int) -> dict[str, list[Any]]:
    """Process ``rank``'s share of each task's sample indices in a ``world``-process run: every
    ``world``-th one from ``rank``, so processes do not play the same samples. A task with fewer
    samples than processes is not split (each process draws from all of it, with its own seed)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}); got {rank}")
    return {t: list(v[rank::world]) if len(v) >= world else list(v) for t, v in indices.items()}


def task_moments(
    advantages: torch.Tensor, loss_mask: torch.Tensor, task_ids: Sequence[Hashable], tasks: Sequence[Hashable]
) -> torch.Tensor:
    """Per task of ``tasks``: (token count, sum, sum of squares) of ``advantages`` over the
    loss-masked tokens of its rows. (R, T), (R, T), R ids -> (K, 3) float64; summed over
    processes they are the moments of the union of their batches."""
    adv = advantages.to(torch.float64)  # (R, T)
    mask = loss_mask.to(torch.bool)  # (R, T)
    out = torch.zeros((len(tasks), 3), dtype=torch.float64)  # (K, 3)
    for k, task in enumerate(tasks):
        rows = [r for r, t in enumerate(task_ids) if t == task]
        values = adv[rows][mask[rows]]  # (N,)
        out[k, 0] = values.numel()
        out[k, 1] = values.sum()
        out[k, 2] = (values * values).sum()
    return out


def normalize_with_moments(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    task_ids: Sequence[Hashable],
    tasks: Sequence[Hashable],
    moments: torch.Tensor,
    eps: float = 1e-6,
) -> torch.Tensor:
    """:func:`agentrl_trainer.advantages.normalize_by_task` with each task's mean and population
    std taken from ``moments`` (:func:`task_moments`, summed over processes). (R, T) -> (R, T)
    float32, 0 off-mask."""
    adv = advantages.to(torch.float64)  # (R, T)
    mask = loss_mask.to(torch.bool)  # (R, T)
    out = torch.zeros_like(adv)  # (R, T)
    for (count, total, squares), task in zip(moments.tolist(), tasks, strict=True):
        rows = [r for r, t in enumerate(task_ids) if t == task]
        if count == 0 or not rows:
            continue
        sel = torch.zeros_like(mask)
        sel[rows] = mask[rows]  # (R, T): this task's trained tokens here
        mu = total / count
        sigma = max(squares / count - mu * mu, 0.0) ** 0.5
        out[sel] = (adv[sel] - mu) / (sigma + eps)
    return out.to(torch.float32)


def merge_step_metrics(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """One step's metrics from every process's: counts (:data:`SUMMED_METRICS`) summed, ``_max``
    ones maxed, the rest averaged over the processes that report them, weighted by their
    ``rollout/episodes`` (so ``reward/mean`` is the mean over all episodes)."""
    parts = list(parts)
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for part in parts for k in part):
        have = [part for part in parts if key in part]
        values = [float(part[key]) for part in have]
        if key in SUMMED_METRICS:
            out[key] = sum(values)
        elif key.endswith("_max"):
            out[key] = max(values)
        else:
            weights = [float(part.get("rollout/episodes", 1.0)) for part in have]
            total = sum(weights)
            out[key] = sum(w * v for w, v in zip(weights, values, strict=True)) / total if total else sum(values) / len(values)
    return out
