"""Where a CPU demo run's memory goes: the demo (``agentrl_trainer.demo``) with a sampler beside it.

    .venv/bin/python benchmarks/demo_memory.py SAMPLES.jsonl [demo arguments ...]
    .venv/bin/python benchmarks/demo_memory.py --summarize SAMPLES.jsonl [...] --out RESULT.json

Every second it writes one JSON line: the demo process's RSS (``main``), its descendants' summed
RSS (``kids``: the embedded controllers and workers), the bytes of every live fast-decode batch's
KV slot buffers (``slots``, with their (slots, own tokens, rows) shapes and each row's own
tokens) and of the engines' head caches (``cache``), by the batches' and caches' public
``kv_bytes``, ``slots`` and ``own_tokens`` (the live ones from their classes' ``live()``). The
demo's own ``run.json`` has the peak by phase (``agentrl_trainer.memory.TreeMemory``); this says
which part of the process holds it.
``--summarize`` reduces sample files to their peaks (JSON, and a line each on stdout).

The committed results (benchmarks/results/demo_memory/) are 3-step probes of the demo's defaults
(``--max-steps 3 --eval-samples 13 --bfcl-limit 0``), before and after the KV slot bound and the
heap's mmap threshold (issue 39, item 4).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any


def sample_while(path: Path) -> None:
    """Start the sampling thread (a daemon) writing to ``path``."""
    import psutil

    from agentrl_envs.chat.fast_decode import FastDecodeBatch, HeadCache
    from agentrl_trainer.memory import tree_rss

    out = path.open("w")

    def run() -> None:
        me = psutil.Process()
        while True:
            try:
                main, kids, _ = tree_rss(me)
                live = FastDecodeBatch.live()
                rec = {
                    "t": time.time(),
                    "main": main,
                    "kids": kids,
                    "slots": sum(b.kv_bytes for b in live),
                    "slot_shapes": [[*b.slots, len(b.rows)] for b in live],
                    "own": [sorted(b.own_tokens) for b in live],
                    "cache": sum(c.kv_bytes for c in HeadCache.live()),
                }
                out.write(json.dumps(rec) + "\n")
                out.flush()
            except Exception as e:  # a process or batch gone between the listing and the read
                out.write(json.dumps({"error": repr(e)}) + "\n")
            time.sleep(1.0)

    threading.Thread(target=run, name="demo-memory", daemon=True).start()


def summarize(path: Path) -> dict[str, Any]:
    rows = [r for r in map(json.loads, path.read_text().splitlines()) if "t" in r]
    top = max(rows, key=lambda r: r["main"] + r["kids"])
    return {
        "samples": len(rows),
        "seconds": rows[-1]["t"] - rows[0]["t"],
        "peak_total_gb": (top["main"] + top["kids"]) / 1e9,
        "at_peak": {
            "main_gb": top["main"] / 1e9,
            "kids_gb": top["kids"] / 1e9,
            "slots_gb": top["slots"] / 1e9,
            "cache_gb": top["cache"] / 1e9,
        },
        "peak_main_gb": max(r["main"] for r in rows) / 1e9,
        "peak_slots_gb": max(r["slots"] for r in rows) / 1e9,
        "peak_cache_gb": max(r["cache"] for r in rows) / 1e9,
    }


def main() -> None:
    if sys.argv[1:2] == ["--summarize"]:
        import argparse

        p = argparse.ArgumentParser(prog="demo_memory.py --summarize")
        p.add_argument("files", nargs="+", type=Path)
        p.add_argument("--out", type=Path, required=True)
        a = p.parse_args(sys.argv[2:])
        result = {str(f): summarize(f) for f in a.files}
        a.out.write_text(json.dumps(result, indent=1) + "\n")
        for f, s in result.items():
            print(
                f"{f}: peak {s['peak_total_gb']:.2f} GB (main {s['at_peak']['main_gb']:.2f}, slots {s['peak_slots_gb']:.2f} at most)"
            )
        return
    sample_while(Path(sys.argv[1]))
    from agentrl_trainer import demo

    demo.main(sys.argv[2:])


if __name__ == "__main__":
    main()
