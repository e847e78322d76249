"""OS sandbox latency: session start (docker cold, docker warm pool, bubblewrap) and command round trip.

    python benchmarks/os_sandbox.py [--sessions 20] [--commands 50] [--skip-docker] [--skip-bwrap] [--skip-userns]

Session start is ``await backend.create()`` until the session's persistent shell answers (the
first ``shell("true")`` is included, so every backend is measured to the same point). Docker
"cold" has no pool (``docker run`` on every start); "warm" lets the pool refill between starts,
as a worker does between sessions. Round trip is ``shell("echo hi")`` in a live session.
"bwrap" is the bubblewrap backend on this host as root (root launch mode, cgroups);
"bwrap_userns_container" is the same measurement inside the socket-free OS worker image
(``agentrl/worker-os``, uid 2000, userns launch mode) run with the options ``agentrl-envs up``
gives it (:func:`agentrl_envs.containers.engine.userns_host_config`); "docker" is the socket mode's
backend (a container per session), driven from this host.
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

    rootfs = default_rootfs_path()
    backend = BubblewrapBackend(rootfs, limits=LIMITS)
    problem = missing_requirements(rootfs, userns=backend.userns)
    if problem:
        return {"skipped": problem}
    async with backend:
        return {
            "mode": "userns" if backend.userns else "root",
            "cgroups": bool(backend.cgroup_parents),
            "start": summary(await starts(backend, a.sessions)),
            "round_trip": summary(await round_trips(backend, a.commands)),
        }


def bench_userns_container(a: argparse.Namespace) -> dict[str, Any]:
    """This file's bwrap measurement, run inside the socket-free worker image (built if needed)."""
    try:
        from agentrl_envs.containers.build import build_all
        from agentrl_envs.containers.engine import docker_client, userns_host_config

        ref = next(b.ref for b in build_all(["os"], log=lambda _: None) if b.name == "worker-os")
        client = docker_client()
    except Exception as e:
        return {"skipped": f"{type(e).__name__}: {e}"}
    try:
        api = client.api
        hc = api.create_host_config(
            network_mode="none", binds={str(Path(__file__).resolve()): {"bind": "/bench.py", "mode": "ro"}}
        )
        hc.update(userns_host_config(client.images.get(ref).attrs["Config"].get("User") or ""))
        argv = ["/bench.py", "--inner-bwrap", "--sessions", str(a.sessions), "--commands", str(a.commands)]
        c = api.create_container(
            ref, entrypoint=["python3"], command=argv, host_config=hc, environment={"AGENTRL_ROOTFS": "/opt/agentrl/rootfs"}
        )
        try:
            api.start(c)
            code = api.wait(c, timeout=1800)["StatusCode"]
            out = api.logs(c, stderr=False).decode()
            if code != 0:
                return {"skipped": f"exit {code}: {api.logs(c).decode()[-1500:]}"}
        finally:
            api.remove_container(c, force=True)
        return {**json.loads(out.strip().splitlines()[-1]), "image": ref}
    finally:
        client.close()


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
    ap.add_argument("--skip-userns", action="store_true", help="skip the socket-free worker container")
    ap.add_argument("--inner-bwrap", action="store_true", help=argparse.SUPPRESS)  # inside the container: print JSON
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "os_sandbox.json"))
    a = ap.parse_args()
    if a.inner_bwrap:
        print(json.dumps(asyncio.run(bench_bwrap(a))))
        return 0
    results: dict[str, Any] = {"cpus": os.cpu_count()}
    if not a.skip_bwrap:
        results["bwrap"] = asyncio.run(bench_bwrap(a))
    if not a.skip_userns:
        results["bwrap_userns_container"] = bench_userns_container(a)
    if not a.skip_docker:
        results["docker"] = asyncio.run(bench_docker(a))
    for backend in ("bwrap", "bwrap_userns_container", "docker"):
        for key, value in results.get(backend, {}).items():
            if isinstance(value, dict):
                print(f"{backend:<23}{key:<17} p50 {value['p50_ms']:8.1f} ms   p99 {value['p99_ms']:8.1f} ms   (n={value['n']})")
            else:
                print(f"{backend:<23}{key:<17} {value}")
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
