"""The per-layer arithmetic of a Llama-family decoder for CPU inference, with oneDNN-packed weights.

:class:`PackedLlama` reads a transformers Llama-layout model (``llama``, ``mistral`` without a
sliding window, ``qwen2`` without one; peft's LoRA adapters applied beside the base weights, as
peft computes them unmerged) and exposes the pieces of
its forward: :meth:`~PackedLlama.embed`, :meth:`~PackedLlama.rotary` (the rotary embedding's
factors, once per forward), :meth:`~PackedLlama.qkv` (projections, rotary embedding applied),
:meth:`~PackedLlama.finish_layer` (output projection, MLP, residuals) and :meth:`~PackedLlama.logits`. Attention is the caller's (:mod:`.fast_decode` keeps the KV cache
and attends over shared prompt heads once for every row). The arithmetic is transformers' own
(``modeling_llama``: RMSNorm in fp32, rotate-half rotary, SiLU-gated MLP) in the same dtype;
only the summation order of the matrix products differs (measured: logprobs within 1e-4).

Why packed weights: on this project's CPUs (AMD EPYC, AVX-512) an fp32 ``F.linear`` goes to
MKL, which takes a slow path on non-Intel CPUs; oneDNN's fp32 kernels on weights reordered once
(``torch.ops.mkldnn._reorder_linear_weight``, the packing ``torch.compile``'s CPU freezing uses)
measured 2.1-2.3x faster at 16 rows (3072x576: 716 -> 309 us; the 49152x576 LM head: 21.2 ->
5.7 ms) and 2.2x for one row on the LM head (10.5 -> 4.8 ms), on 2 cores. Where oneDNN is
missing from the torch build, plain ``F.linear`` is used.

``dtype=torch.bfloat16`` (opt-in; the model server's ``--dtype bfloat16``) packs the matrices in
bfloat16 and rounds their inputs to it; norms, rotary embedding, attention, residuals and the KV
cache stay float32. Decoding one row streams every weight once per token, so halving their bytes
is what moves it: a 30-layer pass measured 42.5 -> 24.5 ms at one row, 64 -> 40 ms at 16 (one
core, AVX-512 BF16). Not exact: logprobs move by up to ~0.1 and a greedy completion can part
from float32's, so the trainer's engines stay float32 (its importance ratios use their logprobs).

After the model's weights change (an RL step), call :meth:`PackedLlama.refresh`. The packed copies
of a peft model's frozen weights are shared by every PackedLlama over the same tensors (the RL
trainer's engines are copies of one model that share its base weights), so each further engine
costs its adapters, not another packed model, and reloading an adapter repacks nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["DTYPES", "PackedLlama", "bfloat16_available", "unsupported_reason"]

#: the matrix-product precisions :class:`PackedLlama` computes in, by name
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

#: transformers ``model_type`` values whose layers this module computes exactly
SUPPORTED_TYPES = ("llama", "mistral", "qwen2")


def unsupported_reason(model: Any) -> str | None:
    """Why :class:`PackedLlama` cannot run ``model`` (``None``: it can)."""
    model = _base_model(model)
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in SUPPORTED_TYPES:
        return f"model_type {kind!r} is not one of {SUPPORTED_TYPES}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r} (only silu)"
    if getattr(config, "sliding_window", None) and (kind != "qwen2" or getattr(config, "use_sliding_window", False)):
        if int(config.sliding_window) < int(config.max_position_embeddings):
            return "a sliding attention window"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) in ("dynamic", "longrope"):
        return f"rope_type {rope.get('rope_type')!r} changes with the sequence length"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "no model.layers / model.rotary_emb"
    if model.dtype != torch.float32:
        return f"dtype {model.dtype} (only float32)"
    return None


def _base_model(model: Any) -> Any:
    """The transformers model inside a peft wrapper (or the model itself)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def _weight_and_bias(linear: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight a (possibly LoRA-wrapped) linear layer applies: base + active adapters' deltas."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight.detach(), None if linear.bias is None else linear.bias.detach()
    weight = base.weight.detach()
    if not getattr(linear, "merged", False) and not getattr(linear, "disable_adapters", False):
        for name in linear.active_adapters:
            if name in getattr(linear, "lora_A", {}):
                weight = weight + linear.get_delta_weight(name).detach()
    return weight, None if base.bias is None else base.bias.detach()


def _plain_adapters(linear: Any) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """A LoRA-wrapped linear layer's active adapters as ``(A, B * scaling)`` pairs, to apply beside
    its base weight: ``x A^T (sB)^T`` is peft's unmerged forward in eval mode. ``None`` where the
    layer is not LoRA-wrapped, is merged, or has an adapter that is not a plain low-rank product
    (DoRA, an adapter bias): :func:`_weight_and_bias` merges those."""
    if getattr(linear, "base_layer", None) is None or getattr(linear, "merged", False):
        return None
    if getattr(linear, "disable_adapters", False):
        return []
    pairs = []
    for name in linear.active_adapters:
        if name not in getattr(linear, "lora_A", {}):
            continue
        if getattr(linear, "use_dora", {}).get(name) or getattr(linear, "lora_bias", {}).get(name):
            return None
        if getattr(linear, "fan_in_fan_out", False):
            return None
        a, b = linear.lora_A[name].weight.detach(), linear.lora_B[name].weight.detach()
        pairs.append((a.float(), (b * linear.scaling[name]).float()))
    return pairs


def _cat_bias(biases: list[torch.Tensor | None], sizes: list[int]) -> torch.Tensor | None:
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else torch.zeros(n) for b, n in zip(biases, sizes, strict=True)])


def _stack(weights: list[torch.Tensor]) -> torch.Tensor:
    return weights[0] if len(weights) == 1 else torch.cat(weights)


# Packed copies of frozen weights, shared by every PackedLlama that reads the same tensors: the
# RL trainer's engines are copies of one peft model whose base weights are the trained model's own
# tensors (agentrl_trainer.distributed.share_frozen_weights), so each engine packing its own copy
# held the same 0.54 GB (SmolLM2-135M, float32) once per engine (measured in the demo: two engines,
# 1.08 GB). Keyed by the sources' address, shape, stride and dtype (not their version counters:
# a parameter pointed at another's storage, ``p.data = q.data``, counts its own); a refresh told
# that a source changed repacks it and replaces the entry. An entry lives while some PackedLlama
# holds it, and that one's model keeps the sources alive, so an address is not reused under it.
_SHARED_PACKS: weakref.WeakValueDictionary[tuple[Any, ...], torch.Tensor] = weakref.WeakValueDictionary()


@dataclass
class _Linear:
    """One (possibly fused) projection: a packed weight and bias, and the LoRA adapters applied
    beside it (``lora_a`` (R, in), ``lora_b`` (out, R) with the scaling in; ``None``: none)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    lora_a: torch.Tensor | None = None
    lora_b: torch.Tensor | None = None


@dataclass
class _Layer:
    qkv: _Linear  # (H*D + 2*KV*D, E)
    o: _Linear  # (E, H*D)
    gate_up: _Linear  # (2*I, E)
    down: _Linear  # (E, I)
    norm1: torch.Tensor  # (E,)
    norm2: torch.Tensor  # (E,)
    eps1: float
    eps2: float


class PackedLlama:
    """A Llama-layout model's inference arithmetic over packed copies of its weights (see module doc).

    ``n_layers``, ``n_heads``, ``n_kv_heads``, ``head_dim``, ``vocab_size`` describe it. Raises
    ``ValueError`` with :func:`unsupported_reason` for a model it cannot compute exactly, and for
    a ``dtype`` other than float32 / bfloat16 or bfloat16 without oneDNN's bfloat16 kernels.
    """

    def __init__(self, model: Any, dtype: torch.dtype = torch.float32) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"PackedLlama cannot run this model: {reason}")
        if dtype not in DTYPES.values():
            raise ValueError(f"PackedLlama computes in {' or '.join(DTYPES)}, not {dtype}")
        if dtype == torch.bfloat16 and not bfloat16_available():
            raise ValueError("bfloat16 matrix products need a torch build with oneDNN and a CPU with bfloat16 support")
        self.dtype = dtype
        self.model = model
        base = _base_model(model)
        config = base.config
        self.n_layers = int(config.num_hidden_layers)
        self.n_heads = int(config.num_attention_heads)
        self.n_kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.n_heads)
        self.hidden = int(config.hidden_size)
        self.intermediate = int(config.intermediate_size)
        self.vocab_size = int(config.vocab_size)
        self.scale = self.head_dim**-0.5
        self._packed = _oneDNN_available()
        self.refresh(changed=())

    @torch.no_grad()
    def refresh(self, changed: Collection[torch.Tensor] | None = None) -> None:
        """Re-read the model's weights after ``changed`` (tensors of its parameters) changed;
        ``None``: any may have, so everything is repacked.

        A peft model's LoRA adapters are applied beside its base weights, as peft computes them
        unmerged, and the packed base weights are shared with every other PackedLlama over the
        same frozen tensors (``_SHARED_PACKS``): reloading an adapter repacks nothing. A base
        weight in ``changed`` is repacked (and replaces the shared entry; other PackedLlamas over
        it follow when they refresh). Other weights, and adapters that are not a plain low-rank
        product (DoRA), are merged and packed at every refresh.
        """
        moved = None if changed is None else {t.data_ptr() for t in changed}
        base = _base_model(self.model)
        inner = base.model
        layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            gate_up, down = self._fuse([mlp.gate_proj, mlp.up_proj], moved), self._fuse([mlp.down_proj], moved)
            if gate_up.bias is not None or down.bias is not None:
                raise ValueError("PackedLlama cannot run this model: an MLP with biases")
            layers.append(
                _Layer(
                    qkv=self._fuse([att.q_proj, att.k_proj, att.v_proj], moved),
                    o=self._fuse([att.o_proj], moved),
                    gate_up=gate_up,
                    down=down,
                    norm1=layer.input_layernorm.weight.detach(),
                    norm2=layer.post_attention_layernorm.weight.detach(),
                    eps1=float(layer.input_layernorm.variance_epsilon),
                    eps2=float(layer.post_attention_layernorm.variance_epsilon),
                )
            )
        self._layers = layers
        self._embed = inner.embed_tokens.weight.detach()
        self._norm = inner.norm.weight.detach()
        self._norm_eps = float(inner.norm.variance_epsilon)
        self._head = self._fuse([base.lm_head], moved)
        rotary = inner.rotary_emb
        positions = torch.arange(int(base.config.max_position_embeddings), dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.float()[None, :]  # (T, D/2), as transformers computes it
        angles = torch.cat([freqs, freqs], dim=-1)  # (T, D)
        scaling = float(getattr(rotary, "attention_scaling", 1.0))
        self._cos = angles.cos() * scaling  # (T, D)
        sin = angles.sin() * scaling
        D = self.head_dim
        half = D // 2
        # rotate_half(x) * sin == roll(x, half) * (sin with its first half negated)
        self._sin_signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)  # (T, D)

    @property
    def max_positions(self) -> int:
        return int(self._cos.shape[0])

    def _pack(self, weight: torch.Tensor) -> torch.Tensor:
        weight = weight.to(self.dtype).contiguous()
        return torch.ops.mkldnn._reorder_linear_weight(weight) if self._packed else weight

    def _fuse(self, linears: list[Any], moved: set[int] | None) -> _Linear:
        """``linears`` (same input) as one projection: their weights stacked and packed, their
        LoRA adapters stacked beside (A's rows stacked, B block-diagonal). ``moved``: the
        addresses of the tensors that changed (``None``: any may have)."""
        shareable = hasattr(self.model, "get_base_model")  # peft freezes every weight but the adapters'
        sources, biases, adapters = [], [], []
        for linear in linears:
            pairs = _plain_adapters(linear)
            if pairs is not None:  # LoRA-wrapped: its base weight, adapters beside
                layer = linear.base_layer
            elif getattr(linear, "base_layer", None) is None:
                layer, pairs = linear, []
            else:  # merged, or an adapter kept merged: a weight of this PackedLlama's own
                weight, bias = _weight_and_bias(linear)
                sources.append(weight)
                biases.append(bias)
                adapters.append([])
                shareable = False
                continue
            sources.append(layer.weight.detach())
            biases.append(None if layer.bias is None else layer.bias.detach())
            adapters.append(pairs)
        sizes = [int(w.shape[0]) for w in sources]
        packed = self._pack_shared(sources, moved) if shareable else self._pack(_stack(sources))
        fused = _Linear(packed, _cat_bias(biases, sizes))
        if any(adapters):
            rank = sum(int(a.shape[0]) for pairs in adapters for a, _ in pairs)
            lora_b = torch.zeros(sum(sizes), rank)
            row = col = 0
            for size, pairs in zip(sizes, adapters, strict=True):
                for _, b in pairs:
                    lora_b[row : row + size, col : col + b.shape[1]] = b
                    col += b.shape[1]
                row += size
            fused.lora_a = torch.cat([a for pairs in adapters for a, _ in pairs]).t().contiguous()  # (in, R)
            fused.lora_b = lora_b.t().contiguous()  # (R, out)
        return fused

    def _pack_shared(self, sources: list[torch.Tensor], moved: set[int] | None) -> torch.Tensor:
        key = (self.dtype, self._packed, tuple((t.data_ptr(), tuple(t.shape), t.stride(), t.dtype) for t in sources))
        packed = _SHARED_PACKS.get(key)
        if packed is None or moved is None or any(t.data_ptr() in moved for t in sources):
            packed = self._pack(_stack(sources))
            _SHARED_PACKS[key] = packed
        return packed

    def _linear(self, x: torch.Tensor, weight: _Linear) -> torch.Tensor:
        if self.dtype != torch.float32:  # the product in bfloat16, the result back in float32
            bias = None if weight.bias is None else weight.bias.to(self.dtype)
            y = torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), weight.weight, bias, "none", [], "").float()
        elif self._packed:
            y = torch.ops.mkldnn._linear_pointwise(x, weight.weight, weight.bias, "none", [], "")
        else:
            y = F.linear(x, weight.weight, weight.bias)
        if weight.lora_a is not None:  # peft's unmerged forward: x A^T (sB)^T, in float32
            y = y.addmm_(x.mm(weight.lora_a), weight.lora_b)
        return y

    @staticmethod
    def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        # transformers' weight * (x * rsqrt(mean(x^2) + eps)) in one call: bit-identical on this
        # CPU (measured at 1, 16 and 300 rows), 6 Python-level ops fewer per norm
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    # ------------------------------------------------------------------ the forward, in pieces

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(N,) token ids -> (N, E) hidden states."""
        return self._embed[ids]

    def rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary embedding's (cos, signed sin) at ``positions`` (N,), each (N, 1, D): computed
        once per forward, used by every layer's :meth:`qkv`."""
        return self._cos[positions][:, None], self._sin_signed[positions][:, None]

    def qkv(
        self, i: int, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer ``i``'s queries (N, H, D), keys (N, KV, D) and values (N, KV, D) of hidden states
        ``x`` (N, E), rotary embedding (:meth:`rotary` of their positions) applied to queries and keys."""
        w = self._layers[i]
        H, KV, D = self.n_heads, self.n_kv_heads, self.head_dim
        h = self._rms(x, w.norm1, w.eps1)
        qkv = self._linear(h, w.qkv)  # (N, (H + 2 KV) D)
        N = qkv.shape[0]
        qk = qkv[:, : (H + KV) * D].view(N, H + KV, D)
        cos, sin = rotary  # (N, 1, D)
        qk = qk * cos + qk.roll(D // 2, dims=-1) * sin  # (N, H + KV, D)
        v = qkv[:, (H + KV) * D :].view(N, KV, D)
        return qk[:, :H], qk[:, H:], v

    def finish_layer(self, i: int, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Layer ``i``'s output: ``x`` (N, E) plus the projected attention ``attended`` (N, H*D),
        then the MLP block."""
        w = self._layers[i]
        x = x + self._linear(attended, w.o)
        h = self._rms(x, w.norm2, w.eps2)
        gate_up = self._linear(h, w.gate_up)  # (N, 2 I)
        inter = self.intermediate
        return x + self._linear(F.silu(gate_up[:, :inter]) * gate_up[:, inter:], w.down)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(N, E) last hidden states -> (N, V) fp32 logits."""
        return self._linear(self._rms(x, self._norm, self._norm_eps), self._head).float()


def bfloat16_available() -> bool:
    """Whether this torch build and CPU run oneDNN's bfloat16 matrix products (``dtype=torch.bfloat16``):
    the CPU needs AVX-512 BF16 or AMX (e.g. AMD Zen 4, Intel Sapphire Rapids)."""
    if not _oneDNN_available():
        return False
    try:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return False
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(2, 2, dtype=torch.bfloat16))
        torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2, dtype=torch.bfloat16), w, None, "none", [], "")
    except (AttributeError, RuntimeError):
        return False
    return True


def _oneDNN_available() -> bool:
    try:
        w = torch.ops.mkldnn._reorder_linear_weight(torch.ones(2, 2))
        torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2), w, None, "none", [], "")
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False
    return True
