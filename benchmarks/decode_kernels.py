"""What the weight products of one decode step cost on this CPU, per kernel: the ceiling they put
on the built-in model's tokens/s (issue 29, item 1).

    .venv/bin/python benchmarks/decode_kernels.py [--rows 1 16] [--repeats 15] [--no-inductor]
        [--out benchmarks/results/decode_kernels.json]

A decode step of SmolLM2-135M-Instruct multiplies every row's hidden state by all of the model's
weights: per layer the fused q/k/v (960x576), the output projection (576x576), the fused
gate/up (3072x576) and down (576x1536), 30 layers, then the 49,152x576 LM head: 538 MB of fp32
read once per step, 0.27 GFLOP per row. This script times exactly those products, in the
model's order, with the embedded model's own weights (so nothing stays in cache from one product
to the next, as in a real step), at ``--rows`` rows, for each kernel:

* ``onednn_packed`` — what the built-in engine uses (:class:`agentrl_envs.chat.llama.PackedLlama`:
  weights reordered once for oneDNN);
* ``mkl`` — plain ``F.linear`` (MKL), the reference path;
* ``inductor_cpp_gemm`` — ``torch.compile`` with freezing and ``max_autotune`` on the CPP GEMM
  template (PyTorch's own generated AVX-512 micro-kernels, autotuned against MKL per shape);
  compiled once per row count (~35 s each here), skipped with ``--no-inductor``;
* ``int4pack_fp32`` — the route that would read fewer bytes with the same values: the layers'
  weights *are* Q4_1 (the GGUF's 4-bit values, dequantized once at load), so PyTorch's
  ``_weight_int4pack_mm_for_cpu`` on those 4-bit values with fp32 activations computes the same
  weights (checked here bit for bit) from a sixth of the bytes; the LM head (Q8_0 in the file, no
  such kernel) stays ``onednn_packed``. Fewer ``--repeats`` (it is slow).

Beside them: the memory bandwidth (the sum of 256 MB, 1 and all threads), a real in-process step
of the built-in engine (:class:`agentrl_envs.chat.fast_decode.FastDecodeBatch`, sampled rows on
the model server benchmark's prompts; products + attention + norms + sampling), and the ceiling
``rows / (products' seconds)``: the tokens/s no decode with that kernel can pass on this machine
even if everything but the products took no time. ``targets`` are issue 29's (70 at one row, 400
at 16); ``llama_cpp`` is copied from ``benchmarks/results/model_peers.json`` when it exists.
Results: ``benchmarks/results/decode_kernels.json``; a summary is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from model_peers import PROMPTS, bench, memory_bandwidth  # benchmarks/ is the script's directory

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = {"1": 70.0, "16": 400.0}


def model_weights(engine: Any) -> list[torch.Tensor]:
    """The step's weight matrices (out, in), fp32, in the order a forward reads them."""
    base = engine.model  # the embedded model: a plain transformers Llama, no adapter
    mats = []
    for layer in base.model.layers:
        att, mlp = layer.self_attn, layer.mlp
        mats.append(torch.cat([att.q_proj.weight, att.k_proj.weight, att.v_proj.weight]).detach().contiguous())
        mats.append(att.o_proj.weight.detach().contiguous())
        mats.append(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach().contiguous())
        mats.append(mlp.down_proj.weight.detach().contiguous())
    mats.append(base.lm_head.weight.detach().contiguous())
    return mats


def _inputs(mats: list[torch.Tensor], rows: int) -> dict[int, torch.Tensor]:
    return {w.shape[1]: torch.randn(rows, w.shape[1]) for w in mats}


def eager_products(mats: list[torch.Tensor], rows: int, repeats: int, kernel: str) -> float:
    """Seconds for all of ``mats`` times ``rows`` rows with an eager kernel."""
    xs = _inputs(mats, rows)
    if kernel == "onednn_packed":
        packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in mats]

        def step() -> None:
            for w in packed:
                torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], w, None, "none", [], "")

    else:

        def step() -> None:
            for w in mats:
                F.linear(xs[w.shape[1]], w)

    with torch.inference_mode():
        return bench(step, repeats)


def inductor_products(mats: list[torch.Tensor], rows: int, repeats: int) -> tuple[float, float]:
    """(seconds for the products, compile seconds) with inductor's autotuned CPP GEMM."""
    import torch._inductor.config as inductor_config

    class Products(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linears = torch.nn.ModuleList()
            for w in mats:
                linear = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
                linear.weight = torch.nn.Parameter(w, requires_grad=False)
                self.linears.append(linear)

        def forward(self, xs: dict[int, torch.Tensor]) -> list[torch.Tensor]:
            return [linear(xs[linear.in_features]) for linear in self.linears]

    xs = _inputs(mats, rows)
    with inductor_config.patch(freezing=True, max_autotune=True, max_autotune_gemm_backends="CPP,ATEN"):
        compiled = torch.compile(Products().eval(), dynamic=False)
        with torch.no_grad():
            t0 = time.perf_counter()
            compiled(xs)
            compile_s = time.perf_counter() - t0
            return bench(lambda: compiled(xs), repeats), compile_s


def int4_layers(mats: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor, int]] | str:
    """The layer matrices as ``_weight_int4pack_mm_for_cpu`` operands made from the GGUF's Q4_1
    blocks (scale ``d``, offset ``m + 8 d``: the kernel computes ``(q - 8) * scale + offset``),
    each checked to multiply out to the model's fp32 weight exactly; or why not."""
    import numpy as np
    from gguf import GGUFReader

    from agentrl_envs.chat.loading import default_gguf_path

    tensors = {t.name: t for t in GGUFReader(str(default_gguf_path())).tensors}
    names = [("attn_q", "attn_k", "attn_v"), ("attn_output",), ("ffn_gate", "ffn_up"), ("ffn_down",)]
    out = []
    for index, weight in enumerate(mats[:-1]):
        layer, part = divmod(index, 4)
        qs, scales, offsets = [], [], []
        for name in names[part]:
            t = tensors[f"blk.{layer}.{name}.weight"]
            if t.tensor_type.name != "Q4_1":
                return f"blk.{layer}.{name} is {t.tensor_type.name}, not Q4_1"
            blocks = np.asarray(t.data).reshape(t.data.shape[0], -1, 20)  # per 32 values: d, m (fp16), 16 bytes
            d = torch.from_numpy(blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32))
            m = torch.from_numpy(blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32))
            nibbles = torch.from_numpy(blocks[..., 4:].astype(np.int32))
            qs.append(torch.cat([nibbles & 15, nibbles >> 4], dim=-1).reshape(nibbles.shape[0], -1))
            scales.append(d)
            offsets.append(m + 8 * d)
        q, d, zero = torch.cat(qs), torch.cat(scales), torch.cat(offsets)
        # the kernel's weights, as it computes them: (q - 8) * scale + offset
        dq = ((q.view(q.shape[0], -1, 32) - 8).float() * d[..., None] + zero[..., None]).view(q.shape)
        if part == 0:  # transformers un-permutes llama.cpp's q/k rows when it loads a GGUF: match rows by value
            order = _row_order(dq, weight)
            if order is None:
                return f"layer {layer}: q/k/v rows do not match the model's weights"
            q, d, zero, dq = q[order], d[order], zero[order], dq[order]
        if not torch.equal(dq, weight):
            return f"layer {layer}: the 4-bit values do not dequantize to the model's weights"
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2)
        scale_zero = torch.stack([d, zero], dim=-1).transpose(0, 1).contiguous()  # (K/32, N, 2)
        if index < 4:  # the kernel itself, bit for bit, on layer 0 (its fp32 path is slow: ~2 s a matrix)
            eye = torch.eye(weight.shape[1])
            if not torch.equal(torch.ops.aten._weight_int4pack_mm_for_cpu(eye, packed, 32, scale_zero), weight.t()):
                return f"layer {layer}: the 4-bit operand does not multiply out to the model's weight"
        out.append((packed, scale_zero, weight.shape[1]))
    return out


def _row_order(rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor | None:
    """For each row of ``weight``, the index of the equal row of ``rows`` (None if one is missing)."""
    index = {tuple(r.tolist()): i for i, r in enumerate(rows)}
    order = [index.get(tuple(r.tolist())) for r in weight]
    return None if any(i is None for i in order) else torch.tensor(order)


def int4_products(layers: list[tuple[torch.Tensor, torch.Tensor, int]], head: torch.Tensor, rows: int, repeats: int) -> float:
    xs = {k: torch.randn(rows, k) for _, _, k in layers}
    packed_head = torch.ops.mkldnn._reorder_linear_weight(head)
    x_head = torch.randn(rows, head.shape[1])

    def step() -> None:
        for packed, scale_zero, k in layers:
            torch.ops.aten._weight_int4pack_mm_for_cpu(xs[k], packed, 32, scale_zero)
        torch.ops.mkldnn._linear_pointwise(x_head, packed_head, None, "none", [], "")

    with torch.inference_mode():
        return bench(step, repeats)


def engine_step(engine: Any, rows: int, steps: int = 64) -> float:
    """Seconds per step of the built-in engine decoding ``rows`` sampled rows (after their prefill)."""
    from agentrl_envs.chat.decode import DecodeRow
    from agentrl_envs.protocol.openai import Message

    batch = engine.new_batch(None, engine.new_prefix_cache(0))
    prompts = [engine.encode_prompt([Message(role="user", content=PROMPTS[i % len(PROMPTS)])]) for i in range(rows)]
    batch.add([DecodeRow(prompt_ids=p, max_tokens=steps + 8, temperature=0.7, seed=i) for i, p in enumerate(prompts)])
    for _ in range(4):
        batch.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        batch.step()
    return (time.perf_counter() - t0) / steps


def bandwidth(threads: int) -> float:
    torch.set_num_threads(threads)
    return memory_bandwidth()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 16])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile's CPP GEMM (needs a C++ compiler)")
    p.add_argument("--out", type=Path, default=RESULTS / "decode_kernels.json")
    a = p.parse_args(argv)
    if any(r < 1 for r in a.rows) or a.repeats < 1:
        p.error("--rows and --repeats must be positive")

    from agentrl_envs.chat.engine import TransformersEngine

    cores = len(os.sched_getaffinity(0))
    engine = TransformersEngine(num_threads=cores)
    if engine.packed is None:
        sys.exit("the embedded model did not load on the packed path (oneDNN missing?): nothing to compare")
    torch.set_num_threads(cores)
    mats = model_weights(engine)
    weight_mb = sum(w.numel() for w in mats) * 4 / 1e6
    gflop_per_row = 2 * sum(w.numel() for w in mats) / 1e9
    kernels: dict[str, dict[str, Any]] = {}
    int4 = int4_layers(mats)
    if isinstance(int4, str):
        kernels["int4pack_fp32"] = {"all": {"error": int4}}
    else:  # the 4-bit layers, their scales and offsets, and the fp32 LM head
        int4_read_mb = (sum(p.numel() * p.element_size() + s.numel() * 4 for p, s, _ in int4) + mats[-1].numel() * 4) / 1e6
    steps: dict[str, float] = {}
    for rows in a.rows:
        key = str(rows)
        for kernel in ("onednn_packed", "mkl"):
            kernels.setdefault(kernel, {})[key] = {"products_ms": round(1e3 * eager_products(mats, rows, a.repeats, kernel), 2)}
            print(f"rows {rows:3d}  {kernel:18s} {kernels[kernel][key]['products_ms']:7.2f} ms", flush=True)
        if not a.no_inductor:
            try:
                seconds, compile_s = inductor_products(mats, rows, a.repeats)
                kernels.setdefault("inductor_cpp_gemm", {})[key] = {
                    "products_ms": round(1e3 * seconds, 2),
                    "compile_s": round(compile_s, 1),
                }
            except Exception as e:  # no C++ compiler, an inductor change: record why, keep the rest
                kernels.setdefault("inductor_cpp_gemm", {})[key] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"rows {rows:3d}  inductor_cpp_gemm  {kernels['inductor_cpp_gemm'][key]}", flush=True)
        if not isinstance(int4, str):
            ms = 1e3 * int4_products(int4, mats[-1], rows, max(1, a.repeats // 5))
            kernels.setdefault("int4pack_fp32", {})[key] = {"products_ms": round(ms, 2), "read_mb": round(int4_read_mb, 1)}
            print(f"rows {rows:3d}  int4pack_fp32      {ms:7.2f} ms", flush=True)
        torch.set_num_threads(cores)
        steps[key] = round(1e3 * engine_step(engine, rows), 2)
        print(f"rows {rows:3d}  built-in engine step {steps[key]:.2f} ms", flush=True)
    for by_rows in kernels.values():
        for key, entry in by_rows.items():
            if "products_ms" in entry:
                ms = entry["products_ms"]
                entry["weights_gb_per_s"] = round(entry.get("read_mb", weight_mb) / ms, 1)
                entry["gflops"] = round(int(key) * gflop_per_row / ms * 1e3, 1)
                entry["ceiling_tokens_per_s"] = round(int(key) / ms * 1e3, 1)
    peers = RESULTS / "model_peers.json"
    llama_cpp = None
    if peers.exists():
        record = json.loads(peers.read_text())
        llama_cpp = {
            gguf: {k: v["tokens_per_s"] for k, v in levels.items()} for gguf, levels in record.get("llama.cpp", {}).items()
        }
    from agentrl_trainer.demo import git_state

    memory = {"1_thread": round(bandwidth(1), 1), f"{cores}_threads": round(bandwidth(cores), 1)}
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/decode_kernels.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "git": git_state(ROOT),
        "machine": {"cpus": cores, "platform": platform.platform(), "torch": torch.__version__},
        "model": {"weights_mb": round(weight_mb, 1), "gflop_per_row": round(gflop_per_row, 3), "matrices": len(mats)},
        "memory_gb_per_s": memory,
        # any kernel reading the fp32 weights once per step: one row cannot pass this
        "bandwidth_ceiling_tokens_per_s_1": round(max(memory.values()) * 1e3 / weight_mb, 1),
        "kernels": kernels,
        "engine_step_ms": steps,
        "engine_tokens_per_s": {k: round(int(k) / v * 1e3, 1) for k, v in steps.items()},
        "targets_tokens_per_s": TARGETS,
        "llama_cpp_tokens_per_s": llama_cpp,
        "note": "ceiling = rows / products' time: what a decode using that kernel cannot pass here, even with "
        "attention, norms, sampling and the server taking no time",
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"weights {weight_mb:.0f} MB fp32, memory {memory} GB/s: one row reading them is bound to "
        f"{result['bandwidth_ceiling_tokens_per_s_1']} tok/s"
    )
    for kernel, by_rows in kernels.items():
        for key, entry in by_rows.items():
            if "products_ms" in entry:
                target = TARGETS.get(key)
                print(
                    f"{kernel:18s} rows {key:>3}: products {entry['products_ms']:6.2f} ms, {entry['weights_gb_per_s']:5.1f} GB/s, "
                    f"{entry['gflops']:6.1f} GFLOPS, ceiling {entry['ceiling_tokens_per_s']:6.1f} tok/s"
                    + (f" (target {target:g})" if target else "")
                )
    print("built-in engine, in-process:", result["engine_tokens_per_s"], "tok/s;", "llama.cpp (server):", llama_cpp)
    print(f"wrote {a.out}")
    return result


if __name__ == "__main__":
    main()
