"""How long `make eval` takes on a warm install (the quickstart's second and later runs).

    .venv/bin/python benchmarks/make_eval_time.py [--runs 3] [--out FILE] [-- MAKE_VARIABLES...]

Runs ``make eval OUTPUT=<fresh directory>`` ``--runs`` times from the repository root, one after
the other, with ``.venv`` installed and up to date (``make -q install``; the ``install`` target then only
checks its stamp):
each run starts the built-in model server, a controller and the DB worker, evaluates the 20
``easy-test`` samples and stops them, as a user's ``make eval`` does. Per run: wall seconds, the CPU
seconds of the whole process tree (user + system, from ``wait4``: on this shared, drifting machine
a steadier figure than wall time), the score and the tokens from the run's ``summary.json``.

Results: ``benchmarks/results/make_eval_warm.json``; a summary is printed. The first ``make eval``
of a fresh clone (the install) is measured separately (docs/evaluation.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="`make eval` runs, one after the other")
    p.add_argument("--out", default=str(RESULTS / "make_eval_warm.json"))
    p.add_argument("make_vars", nargs="*", help="extra VAR=value for make (after --)")
    a = p.parse_args(argv)
    if a.runs < 1:
        p.error("--runs must be >= 1")
    # `make -q install` exits 0 only when the install is up to date: otherwise the first run would time a reinstall
    if subprocess.run(["make", "-q", "install"], cwd=ROOT, capture_output=True).returncode != 0:
        p.error("no warm install (missing, or older than Makefile / pyproject.toml): run `make install` first")
    return a


def one_run(output: Path, make_vars: list[str]) -> dict[str, Any]:
    """One ``make eval`` into ``output``: its wall and process-tree CPU seconds and its scores."""
    cmd = ["make", "--no-print-directory", "eval", f"OUTPUT={output}", *make_vars]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed (exit {proc.returncode})")
    summary = json.loads((output / "summary.json").read_text())
    overall = summary["overall"]
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "success_rate": overall["success_rate"],
        "n": overall["n"],
        "infra_failures": overall["infra_failures"],
        "prompt_tokens": overall["prompt_tokens"],
        "completion_tokens": overall["completion_tokens"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from agentrl_trainer.demo import git_state  # commit and dirty files, as the demo and ablation records have

    a = parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="make-eval-") as tmp:
        for i in range(a.runs):
            r = one_run(Path(tmp) / f"run{i}", a.make_vars)
            runs.append(r)
            print(
                f"run {i + 1}/{a.runs}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                f"{r['success_rate']:.0%} of {r['n']} solved, {r['completion_tokens']} completion tokens",
                flush=True,
            )
    walls = [r["wall_s"] for r in runs]
    result = {
        "command": " ".join(["make", "eval", *a.make_vars]),
        "git": git_state(ROOT),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]},
        "runs": runs,
        "wall_s_median": statistics.median(walls),
        "wall_s_max": max(walls),
        "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(
        f"make eval, warm: median {result['wall_s_median']:.1f} s wall (max {result['wall_s_max']:.1f}), "
        f"median {result['cpu_s_median']:.1f} s CPU over {a.runs} runs -> {a.out}"
    )
    return result


if __name__ == "__main__":
    main()
