"""Load benchmark: steps/s and latency of the worker, directly and through the controller.

Drives the trivial ``echo`` task (each step echoes its tool call) with 1, 64 and 1,000 concurrent
sessions (configurable), first straight against one worker process (the worker protocol), then
through the controller (the client protocol), and prints steps/s, p50/p99 latency and the
controller/direct ratios. Results go to ``benchmarks/results/controller_load.json``.

    python benchmarks/controller_load.py [--sessions 1,64,1000] [--duration 5]

Every server and the load generator run on 127.0.0.1, as separate processes; the load generator
is one asyncio process with aiohttp and uvloop. On a 2-core machine the worker, the controller
and the load generator share the cores: compare ratios within one run, not across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import orjson
import uvloop

from agentrl_envs.stack import ManagedProcess, free_port

STEP = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "ping"}'}}],
}


def wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def drive(base: str, mode: str, sessions: int, duration: float, warmup: float) -> dict[str, float]:
    """Open ``sessions`` sessions, step them all as fast as possible for ``duration`` seconds."""
    conn = aiohttp.TCPConnector(limit=0)
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as http:
        sids: list[int] = []
        for i in range(sessions):
            if mode == "direct":
                sid = 10_000 + i
                async with http.post(f"{base}/api/start_sample", data=orjson.dumps({"index": i % 8, "session_id": sid})) as r:
                    assert r.status == 200, await r.text()
            else:
                async with http.post(f"{base}/api/start_sample", data=orjson.dumps({"name": "echo", "index": i % 8})) as r:
                    assert r.status == 200, await r.text()
                    sid = int(r.headers["session_id"])
            sids.append(sid)
        measuring_from = time.perf_counter() + warmup
        stop_at = measuring_from + duration

        async def one(sid: int) -> None:
            nonlocal errors
            if mode == "direct":
                url, headers, body = f"{base}/api/interact", None, orjson.dumps({"session_id": sid, "messages": [STEP]})
            else:
                url, headers, body = f"{base}/api/interact", {"session_id": str(sid)}, orjson.dumps({"messages": [STEP]})
            while True:
                t0 = time.perf_counter()
                if t0 >= stop_at:
                    return
                async with http.post(url, data=body, headers=headers) as r:
                    await r.read()
                    ok = r.status == 200
                t1 = time.perf_counter()
                if t0 >= measuring_from:
                    if ok:
                        latencies.append(t1 - t0)
                    else:
                        errors += 1

        await asyncio.gather(*(one(s) for s in sids))
        for sid in sids:  # leave the servers clean for the next round
            if mode == "direct":
                await (await http.post(f"{base}/api/cancel", data=orjson.dumps({"session_id": sid}))).release()
            else:
                await (await http.post(f"{base}/api/cancel", headers={"session_id": str(sid)})).release()
    latencies.sort()
    n = len(latencies)
    return {
        "sessions": sessions,
        "steps": n,
        "errors": errors,
        "steps_per_s": n / duration,
        "p50_ms": 1000 * latencies[n // 2] if n else float("nan"),
        "p99_ms": 1000 * latencies[min(n - 1, int(n * 0.99))] if n else float("nan"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", default="1,64,1000")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per level; the median is reported")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "controller_load.json"))
    a = ap.parse_args()
    levels = [int(s) for s in a.sessions.split(",")]
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "agentrl-bench"
    logs.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "agentrl_envs.cli"]
    quiet = ["--log-level", "warning"]
    results: dict[str, list[dict[str, float]]] = {"direct": [], "controller": []}

    # Both set-ups run side by side and are measured alternately, `--rounds` times per level, so
    # that noise from other work on the machine hits both alike; each figure is the median round.
    wport, cport, cwport = free_port(), free_port(), free_port()
    direct_url, curl = f"http://127.0.0.1:{wport}", f"http://127.0.0.1:{cport}"
    procs = [
        ManagedProcess(
            "worker-direct",
            [*cli, "worker", "echo", "--port", str(wport), "--concurrency", "100000", *quiet],
            logs / "worker-direct.log",
        ),
        ManagedProcess("controller", [*cli, "controller", "--port", str(cport), *quiet], logs / "controller.log"),
        ManagedProcess(
            "worker",
            [*cli, "worker", "echo", "--port", str(cwport), "--controller", curl, "--concurrency", "100000", *quiet],
            logs / "worker.log",
        ),
    ]
    try:
        wait_http(f"{direct_url}/health")
        wait_http(f"{curl}/health")
        deadline = time.monotonic() + 30
        while not httpx.get(f"{curl}/api/list_workers").json().get("echo") and time.monotonic() < deadline:
            time.sleep(0.1)
        for n in levels:
            rounds: dict[str, list[dict[str, float]]] = {"direct": [], "controller": []}
            for _ in range(a.rounds):
                rounds["direct"].append(uvloop.run(drive(direct_url, "direct", n, a.duration, a.warmup)))
                rounds["controller"].append(uvloop.run(drive(curl, "controller", n, a.duration, a.warmup)))
            for mode, rs in rounds.items():
                r = sorted(rs, key=lambda x: x["steps_per_s"])[len(rs) // 2]
                r["rounds_steps_per_s"] = [round(x["steps_per_s"]) for x in rs]
                results[mode].append(r)
                print(
                    f"{mode:<11} {n:>5} sessions: {r['steps_per_s']:8.0f} steps/s  p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms"
                    f"  errors {r['errors']}  (rounds: {r['rounds_steps_per_s']})",
                    flush=True,
                )
    finally:
        for p in reversed(procs):
            p.stop()

    ratios = []
    for d, c in zip(results["direct"], results["controller"], strict=True):
        ratios.append(
            {
                "sessions": d["sessions"],
                "throughput_ratio_direct_over_controller": d["steps_per_s"] / c["steps_per_s"]
                if c["steps_per_s"]
                else float("inf"),
                "p50_ratio_controller_over_direct": c["p50_ms"] / d["p50_ms"],
            }
        )
    print("\ncost of the controller path (direct/controller throughput, controller/direct p50):")
    for r in ratios:
        print(
            f"  {r['sessions']:>5} sessions: {r['throughput_ratio_direct_over_controller']:.2f}x throughput, {r['p50_ratio_controller_over_direct']:.2f}x p50"
        )
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"duration_s": a.duration, "rounds": a.rounds, "cpus": os.cpu_count(), **results, "ratios": ratios}, indent=2)
    )
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
