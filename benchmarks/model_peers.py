"""The CPU engine against its peer and against the hardware, in one run, side by side.

    .venv/bin/python benchmarks/model_peers.py [--llama-server PATH --llama-gguf FILE [--llama-gguf FILE]]
        [--levels 1 16] [--max-tokens 128] [--requests-per-level 32] [--out FILE]

Same machine, same SmolLM2-135M-Instruct weights, same prompts (chat requests asking for a long
text, no tools, temperature 0.7 seeded per request, ``--max-tokens`` completion tokens at most),
each level ``L`` keeping ``L`` requests in flight through the official ``openai`` client:

* **built-in server** (``agentrl_envs.models``: the packed decode path, continuous batching), for
  each ``--dtypes``: ``float32`` (exact, the default) and ``bfloat16`` (``--dtype bfloat16``: the
  matrix products in bfloat16, everything else float32);
* **llama.cpp's server** (``llama-server -np 16 -t <cores>``, continuous batching), for each
  ``--llama-gguf``: the F32 conversion of the shipped Q4_1 file is the same precision as ours (its
  values are exactly the dequantized weights); Q4_1 is what llama.cpp reads by default. llama.cpp
  is not a dependency: build ``llama-server`` from the llama.cpp sources PyPI's
  ``llama-cpp-python`` sdist vendors (``cmake -B build && cmake --build build --target
  llama-server``) and make the F32 file with its ``llama-quantize --allow-requantize IN OUT F32``;
* **transformers ``generate``** in-process, static cache, the same prompts batched 1 and L at a
  time (greedy: sampling costs the same and keeps the figure comparable);
* **the hardware's limits**: fp32 matmul rate of this CPU (a 3072x576 weight times 64 rows, oneDNN
  and MKL), the memory bandwidth (a 256 MB sum), and from them the best a fp32 forward could do:
  one token reads all 540 MB of weights (bandwidth bound), 16 tokens do 16 x 0.27 GFLOP (FLOP
  bound).

Tokens/s = completion tokens (the servers' ``usage``) / wall time of the level. Results:
``benchmarks/results/model_peers.json``; a summary is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
PROMPTS = [
    f"Write a long, detailed story about {topic}. Use at least five paragraphs."
    for topic in (
        "a cat who learns to sail",
        "a lighthouse keeper on a stormy night",
        "the first day of a new school",
        "a robot that grows a garden",
        "two friends crossing a desert",
        "a baker who opens a shop in the mountains",
        "a lost dog finding its way home",
        "a city that never sleeps",
    )
]


async def level_throughput(base_url: str, model: str, level: int, requests: int, max_tokens: int) -> dict[str, Any]:
    import openai

    async with openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=900) as client:

        async def one(i: int) -> int:
            r = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                max_tokens=max_tokens,
                temperature=0.7,
                seed=i,
            )
            return r.usage.completion_tokens

        await one(0)  # warm-up
        queue = list(range(requests))
        counts: list[int] = []

        async def lane() -> None:
            while queue:
                counts.append(await one(queue.pop()))

        t0 = time.monotonic()
        await asyncio.gather(*(lane() for _ in range(level)))
        wall = time.monotonic() - t0
    return {
        "requests": len(counts),
        "completion_tokens": sum(counts),
        "wall_s": round(wall, 2),
        "tokens_per_s": round(sum(counts) / wall, 1),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def run_llama(binary: str, gguf: str, levels: list[int], requests: int, max_tokens: int) -> dict[str, Any]:
    port = _free_port()
    cores = len(os.sched_getaffinity(0))
    argv = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-np", str(max(levels)), "-t", str(cores)]
    argv += ["-c", str(max(levels) * 1024)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_health(f"http://127.0.0.1:{port}", proc)
        return {
            str(lv): asyncio.run(level_throughput(f"http://127.0.0.1:{port}/v1", "model", lv, requests, max_tokens))
            for lv in levels
        }
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_ours(levels: list[int], requests: int, max_tokens: int, dtype: str = "float32") -> dict[str, Any]:
    from agentrl_envs.models.launch import LocalModelServer

    with LocalModelServer(startup_timeout=300, dtype=dtype) as server:
        return {str(lv): asyncio.run(level_throughput(server.base_url, "default", lv, requests, max_tokens)) for lv in levels}


def run_transformers(levels: list[int], max_tokens: int) -> dict[str, Any]:
    import torch

    from agentrl_envs.chat.loading import load_model

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    tokenizer, model, _ = load_model(None)
    tokenizer.padding_side = "left"
    out = {}
    for level in levels:
        texts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], tokenize=False, add_generation_prompt=True
            )
            for i in range(level)
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        kwargs = dict(max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False, cache_implementation="static")
        with torch.inference_mode():
            model.generate(**batch, max_new_tokens=4, do_sample=False, cache_implementation="static")  # warm-up
            t0 = time.monotonic()
            model.generate(**batch, **kwargs)
            wall = time.monotonic() - t0
        out[str(level)] = {
            "completion_tokens": level * max_tokens,
            "wall_s": round(wall, 2),
            "tokens_per_s": round(level * max_tokens / wall, 1),
        }
    return out


def bench(fn: Any, n: int) -> float:
    """Seconds per call of ``fn`` over ``n`` calls, after three warm-up calls."""
    for _ in range(3):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def memory_bandwidth() -> float:
    """GB/s of a sum over 256 MB, with torch's current thread count."""
    import torch

    big = torch.randn(64 * 1024 * 1024)
    return big.numel() * 4 / bench(big.sum, 10) / 1e9


def hardware_limits() -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    w, x = torch.randn(3072, 576), torch.randn(64, 576)
    packed = torch.ops.mkldnn._reorder_linear_weight(w)
    flops = 2 * 64 * 3072 * 576
    onednn = flops / bench(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), 50) / 1e9
    mkl = flops / bench(lambda: F.linear(x, w), 50) / 1e9
    bandwidth = memory_bandwidth()
    weights_gb, gflop_per_token = 0.540, 0.27
    return {
        "matmul_gflops_onednn": round(onednn, 1),
        "matmul_gflops_mkl": round(mkl, 1),
        "memory_gb_per_s": round(bandwidth, 1),
        "bound_tokens_per_s_1": round(bandwidth / weights_gb, 1),
        "bound_tokens_per_s_16": round(min(16 * bandwidth / weights_gb, max(onednn, mkl) / gflop_per_token), 1),
        "note": "fp32 weights (540 MB) read once per forward; 0.27 GFLOP per token; 16 rows share one read",
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", type=int, nargs="+", default=[1, 16])
    p.add_argument("--requests-per-level", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--llama-server", default=shutil.which("llama-server"), help="llama.cpp's server binary (skipped without)")
    p.add_argument("--llama-gguf", action="append", default=[], help="GGUF files for llama.cpp (repeatable)")
    p.add_argument("--no-transformers", action="store_true")
    p.add_argument(
        "--dtypes",
        nargs="+",
        choices=("float32", "bfloat16"),
        default=["float32", "bfloat16"],
        help="the built-in server's --dtype values",
    )
    p.add_argument("--out", default=str(RESULTS / "model_peers.json"))
    a = p.parse_args(argv)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpus": len(os.sched_getaffinity(0)), "platform": platform.platform(), "python": platform.python_version()},
        "settings": {"levels": a.levels, "requests_per_level": a.requests_per_level, "max_tokens": a.max_tokens},
        "limits": hardware_limits(),
    }
    print("limits:", result["limits"], flush=True)
    for dtype in a.dtypes:  # float32 under "ours" (the exact path), others under "ours_<dtype>"
        key = "ours" if dtype == "float32" else f"ours_{dtype}"
        result[key] = run_ours(a.levels, a.requests_per_level, a.max_tokens, dtype)
        print(f"built-in server ({dtype}):", result[key], flush=True)
    if a.llama_server and a.llama_gguf:
        result["llama.cpp"] = {}
        for gguf in a.llama_gguf:
            result["llama.cpp"][Path(gguf).name] = run_llama(a.llama_server, gguf, a.levels, a.requests_per_level, a.max_tokens)
            print(f"llama.cpp {Path(gguf).name}:", result["llama.cpp"][Path(gguf).name], flush=True)
    if not a.no_transformers:
        result["transformers_generate"] = run_transformers(a.levels, a.max_tokens)
        print("transformers generate:", result["transformers_generate"], flush=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    top = str(max(a.levels))
    if "llama.cpp" in result:
        best = max(v[top]["tokens_per_s"] for v in result["llama.cpp"].values())
        for key in [k for k in ("ours", "ours_bfloat16") if k in result]:
            result[f"{key}_over_best_llama_cpp_at_top_level"] = round(result[key][top]["tokens_per_s"] / best, 2)
            print(f"at {top} in flight: {key} / best llama.cpp = {result[f'{key}_over_best_llama_cpp_at_top_level']}")
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {a.out}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
