"""OS sandbox latency: session start (docker cold, docker warm pool, bubblewrap) and command round trip.

    python benchmarks/os_sandbox.py [--sessions 20] [--commands 50] [--skip-docker] [--skip-bwrap]

Session start is ``await backend.create()`` until the session's persistent shell answers (the
first ``shell("true")`` is included, so every backend is measured to the same point). Docker
"cold" has no pool (``docker run`` on every start); "warm" lets the pool refill between starts,
as a worker does between sessions. Round trip is ``shell("echo hi")`` in a live session.
Results go to ``benchmarks/results/os_sandbox.json``. Needs root; bubblewrap needs the rootfs
(``.ci/os-sandbox.sh``), docker a running engine (``.ci/docker.sh``) and ``agentrl-envs build``'s
base image (built on first use).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agentrl_envs.sandbox import SandboxLimits
from agentrl_envs.sandbox.base import SandboxBackend

LIMITS = SandboxLimits(memory_mb=512, pids=256, command_timeout_s=30)


def summary(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(1000 * s for s in samples_s)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "max_ms": round(ms[-1], 2),
    }


async def starts(backend: SandboxBackend, n: int, before_each: Any = None) -> list[float]:
    out = []
    for _ in range(n):
        if before_each is not None:
            await before_each()
        t0 = time.perf_counter()
        box = await backend.create()
        result = await box.shell("true")
        out.append(time.perf_counter() - t0)
        assert result.exit_code == 0, result
        await box.close()
    return out


async def round_trips(backend: SandboxBackend, n: int) -> list[float]:
    box = await backend.create()
    try:
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            result = await box.shell("echo hi")
            out.append(time.perf_counter() - t0)
            assert result.output.strip() == "hi", result
        return out
    finally:
        await box.close()


async def bench_bwrap(a: argparse.Namespace) -> dict[str, Any]:
    from agentrl_envs.sandbox.bwrap import BubblewrapBackend, missing_requirements
    from agentrl_envs.sandbox.rootfs import default_rootfs_path

    problem = missing_requirements(default_rootfs_path())
    if problem:
        return {"skipped": problem}
    async with BubblewrapBackend(limits=LIMITS) as backend:
        return {
            "start": summary(await starts(backend, a.sessions)),
            "round_trip": summary(await round_trips(backend, a.commands)),
        }


async def bench_docker(a: argparse.Namespace) -> dict[str, Any]:
    from agentrl_envs.sandbox.docker import DockerBackend

    out: dict[str, Any] = {}
    try:
        async with DockerBackend(LIMITS, pool_size=0) as cold:
            out["start_cold"] = summary(await starts(cold, max(3, a.sessions // 2)))
            out["round_trip"] = summary(await round_trips(cold, a.commands))
        async with DockerBackend(LIMITS, pool_size=1) as warm:

            async def refilled() -> None:
                # Between sessions a worker's pool refills; wait for that (private queue: a benchmark peeks).
                deadline = time.monotonic() + 60
                while warm._pool.qsize() < 1 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)

            out["start_warm_pool"] = summary(await starts(warm, a.sessions, refilled))
    except Exception as e:  # no engine, no image: say so in the results
        out["skipped"] = f"{type(e).__name__}: {e}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--commands", type=int, default=50)
    ap.add_argument("--skip-docker", action="store_true")
    ap.add_argument("--skip-bwrap", action="store_true")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "os_sandbox.json"))
    a = ap.parse_args()
    results: dict[str, Any] = {"cpus": os.cpu_count()}
    if not a.skip_bwrap:
        results["bwrap"] = asyncio.run(bench_bwrap(a))
    if not a.skip_docker:
        results["docker"] = asyncio.run(bench_docker(a))
    for backend in ("bwrap", "docker"):
        for key, value in results.get(backend, {}).items():
            if isinstance(value, dict):
                print(f"{backend:<7}{key:<17} p50 {value['p50_ms']:8.1f} ms   p99 {value['p99_ms']:8.1f} ms   (n={value['n']})")
            else:
                print(f"{backend:<7}{key:<17} {value}")
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
