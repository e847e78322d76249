"""The per-layer arithmetic of a Llama-family decoder for CPU inference, with oneDNN-packed weights.

:class:`PackedLlama` reads a transformers Llama-layout model (``llama``, ``mistral`` without a
sliding window, ``qwen2`` without one; LoRA adapters of peft merged in) and exposes the pieces of
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

After the model's weights change (an RL step), call :meth:`PackedLlama.refresh`.
"""

from __future__ import annotations

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


def _cat_bias(biases: list[torch.Tensor | None], sizes: list[int]) -> torch.Tensor | None:
    if all(b is None for b in biases):
        return None
    return torch.cat([b if b is not None else torch.zeros(n) for b, n in zip(biases, sizes, strict=True)])


@dataclass
class _Layer:
    qkv: torch.Tensor  # packed (H*D + 2*KV*D, E)
    qkv_bias: torch.Tensor | None
    o: torch.Tensor  # packed (E, H*D)
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor  # packed (2*I, E)
    down: torch.Tensor  # packed (E, I)
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
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Re-read the model's weights (after they changed): pack them, merge LoRA deltas."""
        base = _base_model(self.model)
        inner = base.model
        H, KV, D = self.n_heads, self.n_kv_heads, self.head_dim
        layers = []
        for layer in inner.layers:
            att, mlp = layer.self_attn, layer.mlp
            (wq, bq), (wk, bk), (wv, bv) = (_weight_and_bias(m) for m in (att.q_proj, att.k_proj, att.v_proj))
            wo, bo = _weight_and_bias(att.o_proj)
            (wg, bg), (wu, bu), (wd, bd) = (_weight_and_bias(m) for m in (mlp.gate_proj, mlp.up_proj, mlp.down_proj))
            if bg is not None or bu is not None or bd is not None:
                raise ValueError("PackedLlama cannot run this model: an MLP with biases")
            layers.append(
                _Layer(
                    qkv=self._pack(torch.cat([wq, wk, wv])),
                    qkv_bias=_cat_bias([bq, bk, bv], [H * D, KV * D, KV * D]),
                    o=self._pack(wo),
                    o_bias=bo,
                    gate_up=self._pack(torch.cat([wg, wu])),
                    down=self._pack(wd),
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
        head, head_bias = _weight_and_bias(base.lm_head)
        self._head = self._pack(head)
        self._head_bias = head_bias
        rotary = inner.rotary_emb
        positions = torch.arange(int(base.config.max_position_embeddings), dtype=torch.float32)
        freqs = positions[:, None] * rotary.inv_freq.float()[None, :]  # (T, D/2), as transformers computes it
        angles = torch.cat([freqs, freqs], dim=-1)  # (T, D)
        scaling = float(getattr(rotary, "attention_scaling", 1.0))
        self._cos = angles.cos() * scaling  # (T, D)
        sin = angles.sin() * scaling
        half = D // 2
        # rotate_half(x) * sin == roll(x, half) * (sin with its first half negated)
        self._sin_signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)  # (T, D)

    @property
    def max_positions(self) -> int:
        return int(self._cos.shape[0])

    def _pack(self, weight: torch.Tensor) -> torch.Tensor:
        weight = weight.to(self.dtype).contiguous()
        return torch.ops.mkldnn._reorder_linear_weight(weight) if self._packed else weight

    def _linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.dtype != torch.float32:  # the product in bfloat16, the result back in float32
            bias = None if bias is None else bias.to(self.dtype)
            return torch.ops.mkldnn._linear_pointwise(x.to(self.dtype), weight, bias, "none", [], "").float()
        if self._packed:
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return F.linear(x, weight, bias)

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
        qkv = self._linear(h, w.qkv, w.qkv_bias)  # (N, (H + 2 KV) D)
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
        x = x + self._linear(attended, w.o, w.o_bias)
        h = self._rms(x, w.norm2, w.eps2)
        gate_up = self._linear(h, w.gate_up)  # (N, 2 I)
        inter = self.intermediate
        return x + self._linear(F.silu(gate_up[:, :inter]) * gate_up[:, inter:], w.down)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(N, E) last hidden states -> (N, V) fp32 logits."""
        return self._linear(self._rms(x, self._norm, self._norm_eps), self._head, self._head_bias).float()


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
