"""Scale benchmark: echo-K sessions (K = 10) against one worker, alone and through the controller,
at 64, 1,024 and 10,000 concurrent sessions.

For each level and set-up, fresh server processes are pinned to core 0 (`taskset`; the worker
alone, or the controller and the worker sharing that core) and a closed-loop load generator to
core 1 (``benchmarks/loadgen.py``, or the compiled ``goload`` with ``--goload PATH``). Reports
steps/s, p50/p99 step latency, sessions ok/failed, and the servers' CPU time per step (µs, from
/proc: robust to other work on the machine, unlike steps/s), then checks the targets: worker
>= 5,000 steps/s at 10,000 sessions, controller path >= 0.6x the worker alone at every level,
p99 <= 3x p50. Results: ``benchmarks/results/session_scale.json``.

Modes: ``worker`` (the worker alone), ``controller`` (through the controller, which speaks to
the worker over the multiplexed transport, ``agentrl_envs.transport.mux``) and ``controller-http``
(through the controller with ``--worker-transport http``: one HTTP/1.1 request per step per
connection, as to AgentRL's own workers). Besides steps/s, each level reports the ratio of the
servers' CPU per step (worker alone over controller + worker): with both on one saturated core
that is what the steps/s ratio measures, and it is robust to other work on the machine.

    python benchmarks/session_scale.py [--levels 64,1024,10000] [--modes worker,controller,controller-http]
                                       [--duration 20] [--goload /tmp/goload] [--repeat 3]

``--repeat N``: at each level the modes run in turn N times (interleaved, so that the machine's
own drift in speed falls on every mode alike); each mode's figures are those of its median run
(by steps/s), each ratio is the median of the N paired ratios (run i of one mode over run i of
the worker alone), and failed sessions are summed over all runs. Every run is kept in the JSON.
Each run also records the load generator's CPU share of its core (``generator_cpu_share``: near
1.0 the generator itself queues answers and adds to the measured latency) and the time the
hypervisor took from the servers' core (``server_core_stolen_ms``, /proc/stat's steal: a stall
of a few ms weighs most on the p99/p50 of the level with the lowest p50, the worker alone at 64),
and how much the machine's speed moved during the run (``machine_speed``: the servers' CPU time
per write in 100 ms windows, p10 / p50 / p90 and the spread p90/p10, see ``SpeedProbe``; ~1.1-1.2
on a steady machine; the latency of a closed loop follows it).

Needs 2+ cores for the pinning (without it, runs unpinned and says so) and file descriptors for
2 x sessions + slack (the servers raise their soft limit to the hard one and refuse to start,
naming the limit, when that is too low).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from agentrl_envs.stack import ManagedProcess, listening_socket

HERE = Path(__file__).resolve().parent
TICKS = os.sysconf("SC_CLK_TCK")
SERVER_CORE, GEN_CORE = 0, 1  # when pinning: the servers on one core, the generator (and this process) on the other


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def stolen_s(core: int | None) -> float:
    """CPU time the hypervisor gave to others while this machine's ``core`` (or all, if None)
    wanted to run (``steal`` in /proc/stat): a burst of it stalls every step in flight."""
    name = "cpu" if core is None else f"cpu{core}"
    for line in Path("/proc/stat").read_text().splitlines():
        fields = line.split()
        if fields[0] == name and len(fields) > 8:
            return int(fields[8]) / TICKS
    return 0.0


def cpu_ns_and_writes(pid: int) -> tuple[int, int]:
    """A process's CPU time so far in ns (schedstat, summed over its threads: ns resolution,
    where /proc/<pid>/stat counts 10 ms ticks) and its write syscalls (/proc/<pid>/io: one per
    answer written, so a count of work done that costs the server nothing to keep)."""
    cpu = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass  # a thread that ended between the listing and the read
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return cpu, int(io["syscw"])


class SpeedProbe:
    """Samples the servers' CPU time and writes every ``period`` s during a run, from /proc (no
    request to the servers, ~0.1 ms of the generator's core per sample).

    The servers do the same work for every step, so their CPU time per write follows the
    machine's speed: on this shared, virtualised host it moved by 2.2x within one 8 s run (38 to
    83 µs a step in 100 ms windows, worker alone at 64 sessions) with the worker on CPU 95-100% of
    every window and no steal in /proc/stat. A closed-loop run's latency follows that speed, so
    the spread of this cost over the run (90th percentile window over 10th) tells a tail the
    machine made from one the software made. In that run p99/p50 was 3.05 over the run and
    mostly 2-3 within a 100 ms window; four 8 s runs had spreads 1.14 / 1.21 / 1.36 / 1.45 and
    p99/p50 2.68 / 2.66 / 2.94 / 2.89.
    """

    def __init__(self, pids: list[int], period: float = 0.1) -> None:
        self.pids, self.period = pids, period
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="speed-probe", daemon=True)

    def _sample(self) -> None:
        try:
            per = [cpu_ns_and_writes(pid) for pid in self.pids]
        except (FileNotFoundError, ProcessLookupError):
            return  # a server exited: the run reports it
        self.samples.append((sum(c for c, _ in per), sum(w for _, w in per)))

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def __enter__(self) -> SpeedProbe:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self, min_writes: int = 50) -> dict:
        """µs of server CPU per write in each window (windows with under ``min_writes``
        writes, i.e. the run's ramp-down, left out): p10, p50, p90 and spread p90/p10."""
        costs = sorted(
            (c1 - c0) / (w1 - w0) / 1000
            for (c0, w0), (c1, w1) in zip(self.samples, self.samples[1:], strict=False)
            if w1 - w0 >= min_writes
        )
        if len(costs) < 10:
            return {}
        p10, p50, p90 = (costs[int(q * (len(costs) - 1))] for q in (0.1, 0.5, 0.9))
        return {
            "windows": len(costs),
            "us_per_write_p10": round(p10, 1),
            "us_per_write_p50": round(p50, 1),
            "us_per_write_p90": round(p90, 1),
            "spread_p90_over_p10": round(p90 / p10, 2),
        }


def wait_until(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("servers did not come up")


def pinned(core: int | None, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *argv] if core is not None else argv


def one_run(mode: str, sessions: int, a: argparse.Namespace, pin: bool) -> dict:
    cli = [sys.executable, "-m", "agentrl_envs.cli"]
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "agentrl-bench"
    logs.mkdir(parents=True, exist_ok=True)
    server_core, gen_core = (SERVER_CORE, GEN_CORE) if pin else (None, None)
    # Each server serves a socket bound here (--fd), so no port is taken between choosing and binding it.
    wlisten = listening_socket()
    wport = wlisten.getsockname()[1]
    worker_cmd = [*cli, "worker", "echo", "--split", "load", "--option", f"steps={a.k}", "--port", str(wport)]
    worker_cmd += ["--concurrency", str(max(sessions * 2, 64)), "--log-level", "warning"]
    procs: list[ManagedProcess] = []
    try:
        if mode.startswith("controller"):
            clisten = listening_socket()
            cport = clisten.getsockname()[1]
            ctrl_cmd = [*cli, "controller", "--port", str(cport), "--log-level", "warning"]
            if mode == "controller-http":
                ctrl_cmd += ["--worker-transport", "http"]
            procs.append(
                ManagedProcess(
                    "controller",
                    pinned(server_core, ctrl_cmd),
                    logs / "scale-controller.log",
                    listen=clisten,
                )
            )
            worker_cmd += ["--controller", f"http://127.0.0.1:{cport}/api"]
            base = f"http://127.0.0.1:{cport}/api"
        else:
            base = f"http://127.0.0.1:{wport}/api"
        procs.append(ManagedProcess("worker", pinned(server_core, worker_cmd), logs / "scale-worker.log", listen=wlisten))
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{wport}/health", timeout=1).status_code == 200)
        if mode.startswith("controller"):
            wait_until(lambda: httpx.get(f"{base}/list_workers", timeout=1).json().get("echo"))

        def generator(concurrent: int, seconds: float) -> list[str]:
            if a.goload:
                gen = [a.goload, "-proto", "agentrl" if mode == "worker" else "agentrl-client", "-base", base]
                return [*gen, "-task", "echo", "-c", str(concurrent), "-k", str(a.k), "-duration", f"{seconds}s"]
            gen = [sys.executable, str(HERE / "loadgen.py"), "--proto", mode.split("-")[0], "--base", base]
            return [*gen, "-c", str(concurrent), "-k", str(a.k), "--duration", str(seconds)]

        gen = generator(sessions, a.duration)
        if a.warmup > 0:  # first requests pay for lazy imports and set-up: not counted
            warm = generator(min(sessions, 64), a.warmup)
            subprocess.run(pinned(gen_core, warm), capture_output=True, text=True, timeout=a.warmup + 120, check=True)
        load_before = os.getloadavg()[0]
        cpu0 = {p.name: cpu_seconds(p.proc.pid) for p in procs}
        children0, wall0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        steal0 = stolen_s(server_core)
        with SpeedProbe([p.proc.pid for p in procs]) as probe:
            done = subprocess.run(pinned(gen_core, gen), capture_output=True, text=True, timeout=a.duration + 180)
        children1, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - wall0
        steal = stolen_s(server_core) - steal0
        gen_cpu = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
        by_process = {p.name: cpu_seconds(p.proc.pid) - cpu0[p.name] for p in procs}
        cpu = sum(by_process.values())
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        for p in procs:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} exited during the run; see {p.log_path}")
    finally:
        for p in reversed(procs):
            p.stop()
    steps = result["steps"]
    return {
        "mode": mode,
        "sessions": sessions,
        "steps": steps,
        "steps_per_s": round(result["steps_per_s"], 1),
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "p99_over_p50": round(result["p99_ms"] / result["p50_ms"], 2) if result["p50_ms"] else None,
        "sessions_ok": result["sessions_ok"],
        "sessions_failed": result["sessions_failed"],
        "errors": result["errors"],
        "server_cpu_s": round(cpu, 2),
        "server_cpu_us_per_step": round(1e6 * cpu / steps, 1) if steps else None,
        "cpu_us_per_step_by_process": {k: round(1e6 * v / steps, 1) for k, v in by_process.items()} if steps else {},
        "load_average_before": round(load_before, 2),
        "generator_cpu_share": round(gen_cpu / wall, 2) if wall else None,
        "server_core_stolen_ms": round(1000 * steal),
        "machine_speed": probe.summary(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="64,1024,10000")
    ap.add_argument("--modes", default="worker,controller")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of new sessions per run")
    ap.add_argument("-k", type=int, default=10, help="steps per session")
    ap.add_argument("--goload", help="path of a compiled goload to drive the load instead of loadgen.py")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load (at most 64 sessions) before each measured run")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mode per level, interleaved (figures: medians)")
    ap.add_argument("--no-pin", action="store_true", help="do not pin servers and generator to cores 0 and 1")
    ap.add_argument("--output", default=str(HERE / "results" / "session_scale.json"))
    a = ap.parse_args()
    pin = not a.no_pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    if pin:  # the speed probe's thread with the generator, off the servers' core
        os.sched_setaffinity(0, {GEN_CORE})
    else:
        print("not pinning (needs 2+ cores and taskset): figures include the generator's contention", flush=True)
    levels = [int(x) for x in a.levels.split(",")]
    modes = a.modes.split(",")
    runs: list[dict] = []
    for n in levels:
        for rep in range(a.repeat):
            for mode in modes:
                r = one_run(mode, n, a, pin)
                r["repetition"] = rep
                runs.append(r)
                print(
                    f"{mode:<10} {n:>6} sessions: {r['steps_per_s']:8.0f} steps/s  p50 {r['p50_ms']:8.1f} ms  "
                    f"p99 {r['p99_ms']:8.1f} ms ({r['p99_over_p50']}x)  {r['server_cpu_us_per_step']} µs CPU/step "
                    f"{r['cpu_us_per_step_by_process']}  generator {r['generator_cpu_share']:.0%} busy  "
                    f"stolen {r['server_core_stolen_ms']} ms  "
                    f"speed spread {r['machine_speed'].get('spread_p90_over_p10')}  "
                    f"sessions ok {r['sessions_ok']} failed {r['sessions_failed']} {r['errors'] or ''}",
                    flush=True,
                )
    all_of: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        all_of.setdefault((r["mode"], r["sessions"]), []).append(r)
    # each mode and level: its median run by steps/s (the run itself for --repeat 1)
    by = {key: sorted(rs, key=lambda r: r["steps_per_s"])[(len(rs) - 1) // 2] for key, rs in all_of.items()}
    checks = []
    ratios = []
    for n in levels:
        w, c = by.get(("worker", n)), by.get(("controller", n))
        ws = all_of.get(("worker", n), [])
        for m in ("controller", "controller-http"):
            cs = all_of.get((m, n), [])
            pairs = [(wr, cr) for wr, cr in zip(ws, cs, strict=False) if wr["steps_per_s"] and cr["server_cpu_us_per_step"]]
            if pairs:
                ratios.append(
                    {
                        "sessions": n,
                        "mode": m,
                        "steps_per_s_ratio": round(
                            statistics.median(cr["steps_per_s"] / wr["steps_per_s"] for wr, cr in pairs), 2
                        ),
                        "cpu_per_step_ratio": round(
                            statistics.median(wr["server_cpu_us_per_step"] / cr["server_cpu_us_per_step"] for wr, cr in pairs), 2
                        ),
                        "steps_per_s_ratio_each": [round(cr["steps_per_s"] / wr["steps_per_s"], 2) for wr, cr in pairs],
                    }
                )
        ratio = next((r["steps_per_s_ratio"] for r in ratios if r["sessions"] == n and r["mode"] == "controller"), None)
        if ratio is not None:
            checks.append({"check": f"controller/worker steps/s at {n} >= 0.6", "value": ratio, "ok": ratio >= 0.6})
        for r in (w, c):
            if r:
                checks.append(
                    {
                        "check": f"{r['mode']} p99/p50 at {n} <= 3",
                        "value": r["p99_over_p50"],
                        "ok": (r["p99_over_p50"] or 99) <= 3,
                    }
                )
                failed = sum(x["sessions_failed"] for x in all_of[(r["mode"], n)])
                checks.append({"check": f"{r['mode']} failed sessions at {n} == 0", "value": failed, "ok": failed == 0})
    if ("worker", 10000) in by:
        v = by[("worker", 10000)]["steps_per_s"]
        checks.append({"check": "worker steps/s at 10000 >= 5000", "value": v, "ok": v >= 5000})
    print("\nthrough the controller / worker alone (steps/s; CPU per step, worker alone over both servers):")
    for r in ratios:
        each = " ".join(f"{x:.2f}" for x in r["steps_per_s_ratio_each"])
        print(
            f"  {r['mode']:<16} {r['sessions']:>6}: {r['steps_per_s_ratio']:.2f}  (CPU: {r['cpu_per_step_ratio']:.2f}; runs: {each})"
        )
    print("\ntargets:")
    for c in checks:
        print(f"  [{'ok' if c['ok'] else 'MISS'}] {c['check']}: {c['value']}")
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": commit,
        "cpus": os.cpu_count(),
        "pinned": pin,
        "generator": "goload" if a.goload else "loadgen.py",
        "k": a.k,
        "duration_s": a.duration,
        "repeat": a.repeat,
        "warmup_s": a.warmup,
        "figures": "each mode and level: its median run by steps/s; ratios: medians of the paired runs",
    }
    summary = [by[key] for key in sorted(by, key=lambda k: (k[1], k[0]))]
    out.write_text(json.dumps({**meta, "summary": summary, "ratios": ratios, "checks": checks, "runs": runs}, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
