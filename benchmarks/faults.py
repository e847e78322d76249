"""Fault benchmark: faults injected again and again under load, every session accounted for.

For each fault a fresh stack (a controller and two ``echo`` workers, real processes on
127.0.0.1) carries ``--sessions`` concurrent session loops (the fault suite's load driver,
``tests/faults/fault_stack.py``: each loop starts a session, steps it 8-16 times, finishes it
and starts the next, through the real ``AsyncControllerClient``), and the fault is injected and
recovered ``--rounds`` times:

* ``worker-kill``: SIGKILL a worker (alternately the one and the other), restart it on its port;
* ``controller-kill`` / ``controller-term``: SIGKILL / SIGTERM the controller, start a new one
  on the same port;
* ``worker-stop``: SIGSTOP a worker until the controller has declared it dead, then SIGCONT;
* ``partition``: cut a worker off behind a loopback proxy (both directions dropped), then heal.

The load saturates the machine on purpose (``--think 0``: each loop steps again as soon as it
has its answer): the client-side times (when the load driver saw a session end) include the
queueing of a saturated driver, controller and workers on shared cores; the controller-side
times (polled from ``/api/list_sessions`` and ``/api/list_workers``) show when the system
itself acted. ``--think S`` adds up to S seconds between a loop's steps (an agent's model time).

Every session ends in exactly one outcome the client saw (``completed``, ``task error``,
``session lost``; ``hung`` / ``unresolved`` / ``error: ...`` would be failures) and the run
checks that the controller and the workers hold no session afterwards (no orphans). Per round
it records how long detection and recovery took. Times are measurements of one shared 2-core
machine, not targets. Results: ``benchmarks/results/faults.json``.

    python benchmarks/faults.py [--sessions 200] [--rounds 3] [--faults worker-kill,controller-kill,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "faults"))

from fault_stack import FaultStack, Load, LoadReport, Worker, wait_until  # noqa: E402

FAULTS = ("worker-kill", "controller-kill", "controller-term", "worker-stop", "partition")
GUARD_S = 120.0  # timeout guard for each wait; the interaction timeout stays at its 240 s default
ALLOWED = {
    "worker-kill": {"completed", "task error"},
    "controller-kill": {"completed", "session lost"},
    "controller-term": {"completed", "session lost"},
    "worker-stop": {"completed", "task error"},
    "partition": {"completed", "task error"},
}


def _rate(load: Load, seconds: float) -> float:
    before, t0 = load.total_steps, time.monotonic()
    time.sleep(seconds)
    return (load.total_steps - before) / (time.monotonic() - t0)


def _spread(values: list[float]) -> dict[str, float] | None:
    """p50 / p90 / max of ``values`` (seconds), or None when there are none."""
    if not values:
        return None
    v = sorted(values)
    return {"p50": round(v[len(v) // 2], 3), "p90": round(v[int(len(v) * 0.9)], 3), "max": round(v[-1], 3)}


def _controller_drops(stack: FaultStack, held: set[int]) -> float:
    """Seconds until the controller holds none of ``held`` (it has ended them all)."""
    return wait_until(
        lambda: not held & {s["session_id"] for s in stack.list_sessions()}, GUARD_S, "the controller ends them", 0.05
    )


def _wait_or_diagnose(stack: FaultStack, load: Load, held: set[int]) -> list[dict[str, Any]]:
    """Wait until the client saw every session of ``held`` end. Any still open after 30 s is
    diagnosed (what the client sent and when, what the controller says of it), then waited for
    up to the guard: a step the controller never answers ends ``hung`` at the request timeout."""
    try:
        wait_until(lambda: all(r.outcome for r in load.records if r.sid in held), 30, "its sessions end")
        return []
    except AssertionError:
        pass
    now = time.monotonic()
    controller = {x["session_id"]: x for x in stack.list_sessions()}
    stuck = [
        {
            "sid": r.sid,
            "steps": r.steps,
            "step_in_flight_for_s": round(now - r.inflight_since, 3) if r.inflight_since else None,
            "controller_view": controller.get(r.sid, "not listed (ended)"),
        }
        for r in load.records
        if r.sid in held and r.outcome is None
    ]
    print(f"    stuck after 30 s: {stuck}", flush=True)
    wait_until(lambda: all(r.outcome for r in load.records if r.sid in held), GUARD_S + 30, "its sessions end")
    return stuck


def _round_worker_kill(stack: FaultStack, load: Load, victim: Worker, sessions: int) -> dict[str, Any]:
    held = stack.sessions_by_worker()[victim.index]
    t0 = time.monotonic()
    stack.kill(victim.proc, signal.SIGKILL)
    ended_at_controller = time.monotonic() - t0 + _controller_drops(stack, held)
    wait_until(lambda: all(r.outcome for r in load.records if r.sid in held), GUARD_S, "the killed worker's sessions end")
    ended = [r for r in load.records if r.sid in held and r.ended is not None and r.ended >= t0]
    load.wait_completed(after=t0, n=sessions // 2, timeout=GUARD_S)
    t1 = time.monotonic()
    stack.start_worker(victim)
    live = time.monotonic() - t1
    wait_until(lambda: stack.sessions_by_worker()[victim.index], GUARD_S, "the restarted worker gets sessions")
    got = time.monotonic() - t1
    return {
        "victim_sessions": len(held),
        "victims_task_error": sum(1 for r in ended if r.outcome == "task error"),
        "controller_ended_them_s": round(ended_at_controller, 3),
        "client_saw_end_s": _spread([r.ended - t0 for r in ended]),
        "restart_to_live_s": round(live, 3),
        "restart_to_first_session_s": round(got, 3),
    }


def _round_controller(stack: FaultStack, load: Load, workers: list[Worker], sig: signal.Signals, sessions: int) -> dict[str, Any]:
    open_before = {r.sid for r in load.records if r.outcome is None}
    t0 = time.monotonic()
    stack.kill(stack.controller, sig, timeout=GUARD_S)
    down = time.monotonic() - t0
    stack.start_controller()
    up = time.monotonic() - t0
    for w in workers:
        stack.wait_live(w, timeout=GUARD_S)
    live = time.monotonic() - t0
    wait_until(lambda: all(r.outcome for r in load.records if r.started < t0), GUARD_S, "the old run's sessions resolved")
    resolved = time.monotonic() - t0
    load.wait_completed(after=t0 + up, n=sessions // 2, timeout=GUARD_S)
    old = [r for r in load.records if r.sid in open_before]
    lost = [r for r in old if r.outcome == "session lost" and r.ended is not None]
    return {
        "open_sessions": len(open_before),
        "lost_410": sum(1 for r in old if r.outcome == "session lost"),
        "finished_before_kill": sum(1 for r in old if r.outcome == "completed"),
        "old_controller_exit_s": round(down, 3),
        "new_controller_up_s": round(up, 3),
        "workers_live_again_s": round(live, 3),
        "client_saw_410_s": _spread([r.ended - t0 for r in lost]),
        "old_sessions_resolved_s": round(resolved, 3),
    }


def _round_silence(stack: FaultStack, load: Load, victim: Worker, cut: Any, restore: Any, sessions: int) -> dict[str, Any]:
    held = stack.sessions_by_worker()[victim.index]
    t0 = time.monotonic()
    restored = False
    try:
        cut()
        # Halfway to dead_after, the steps the controller still waits for on its sessions are stuck.
        time.sleep(stack.dead_after / 2)
        in_flight = stack.busy_sessions() & held
        wait_until(lambda: not stack.registered(victim), GUARD_S, "the silent worker is declared dead", 0.05)
        dead = time.monotonic() - t0
        ended_at_controller = time.monotonic() - t0 + _controller_drops(stack, held)
        diagnosis = _wait_or_diagnose(stack, load, held)
        load.wait_completed(after=t0, n=sessions // 2, timeout=GUARD_S)
        t1 = time.monotonic()
        restore()
        restored = True
        stack.wait_live(victim, timeout=GUARD_S)
        live = time.monotonic() - t1
        wait_until(lambda: stack.sessions_by_worker()[victim.index], GUARD_S, "the returning worker gets sessions")
        got = time.monotonic() - t1
    finally:
        if not restored:
            restore()
    ended = [r for r in load.records if r.sid in held and r.ended is not None and r.ended >= t0]
    answered = [r for r in load.records if r.sid in in_flight]
    return {
        "victim_sessions": len(held),
        "stuck_steps": len(in_flight),
        "stuck_steps_answered_task_error": sum(1 for r in answered if r.outcome == "task error" and r.via == "answer"),
        "stuck_steps_answered_s": _spread([r.ended - t0 for r in answered if r.ended is not None]),
        "victims_task_error": sum(1 for r in ended if r.outcome == "task error"),
        "declared_dead_s": round(dead, 3),
        "controller_ended_them_s": round(ended_at_controller, 3),
        "client_saw_end_s": _spread([r.ended - t0 for r in ended]),
        "stuck_after_30_s": diagnosis,
        "restore_to_live_s": round(live, 3),
        "restore_to_first_session_s": round(got, 3),
    }


def run_fault(fault: str, a: argparse.Namespace) -> dict[str, Any]:
    stack = FaultStack()
    stack.start_controller()
    workers = [stack.add_worker(behind_proxy=fault == "partition"), stack.add_worker()]
    load = Load(
        stack.url, a.sessions, steps=(8, 16), think=a.think, request_timeout=GUARD_S, resolve_timeout=GUARD_S, seed=a.seed
    ).start()
    rounds: list[dict[str, Any]] = []
    failure = None
    steady: float | None = None
    report: LoadReport | None = None
    try:
        load.wait_steps(2 * a.sessions, timeout=GUARD_S)
        steady = _rate(load, a.measure)
        for n in range(a.rounds):
            victim = workers[0] if fault == "partition" else workers[n % 2]
            if fault == "worker-kill":
                r = _round_worker_kill(stack, load, victim, a.sessions)
            elif fault in ("controller-kill", "controller-term"):
                sig = signal.SIGKILL if fault == "controller-kill" else signal.SIGTERM
                r = _round_controller(stack, load, workers, sig, a.sessions)
            elif fault == "worker-stop":
                r = _round_silence(
                    stack,
                    load,
                    victim,
                    lambda v=victim: stack.send(v.proc, signal.SIGSTOP),
                    lambda v=victim: stack.send(v.proc, signal.SIGCONT),
                    a.sessions,
                )
            else:
                r = _round_silence(
                    stack, load, victim, lambda v=victim: stack.partition(v), lambda v=victim: stack.heal(v), a.sessions
                )
            r["steps_per_s_after"] = round(_rate(load, a.measure), 1)
            rounds.append(r)
            print(f"  {fault} round {n + 1}: {r}", flush=True)
    except AssertionError as e:
        failure = str(e)
    finally:
        try:
            report = load.stop(timeout=GUARD_S)
        except AssertionError as e:
            failure = failure or str(e)
        leftover = orphans = None
        try:
            leftover = len(stack.list_sessions())
            wait_until(lambda: all(stack.worker_current(w) == 0 for w in workers), 30, "no orphans")
            orphans = 0
        except AssertionError:
            orphans = sum(stack.worker_current(w) for w in workers)
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on with the next fault
            failure = failure or f"{type(e).__name__}: {e}"
        if failure:
            print(stack.logs(10), file=sys.stderr)
        stack.close()
    summary = report.summary() if report else {}
    outcomes = summary.get("outcomes", {})
    problems = [f"outcome {k!r}: {v}" for k, v in outcomes.items() if k not in ALLOWED[fault]]
    if report and report.unaccounted:
        problems.append(f"{len(report.unaccounted)} sessions unaccounted")
    if leftover:
        problems.append(f"the controller still lists {leftover} sessions")
    if orphans:
        problems.append(f"the workers hold {orphans} orphaned sessions")
    if failure:
        problems.append(failure)
    if problems:
        print(f"    logs kept in {stack.log_dir}", file=sys.stderr)
    else:
        shutil.rmtree(stack.log_dir, ignore_errors=True)
    return {
        "fault": fault,
        "ok": not problems,
        "problems": problems,
        "steps_per_s_steady": round(steady, 1) if steady is not None else None,
        "rounds": rounds,
        "controller_sessions_after": leftover,
        "worker_orphans_after": orphans,
        **summary,
    }


def _code_version() -> dict[str, Any]:
    """Which agentrl_envs ran: its path, and the repository commit (and whether it was modified)."""
    import subprocess

    import agentrl_envs

    pkg = Path(agentrl_envs.__file__).resolve().parent
    out: dict[str, Any] = {"agentrl_envs": str(pkg)}
    try:
        git = ["git", "-C", str(ROOT)]
        out["repo_head"] = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        if pkg.is_relative_to(ROOT):
            dirty = subprocess.run([*git, "status", "--porcelain", "--", "agentrl_envs"], capture_output=True, text=True)
            out["agentrl_envs_modified"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=200, help="concurrent session loops")
    p.add_argument("--rounds", type=int, default=3, help="times each fault is injected and recovered")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    p.add_argument("--measure", type=float, default=5.0, help="seconds over which steps/s is measured")
    p.add_argument("--think", type=float, default=0.0, help="up to this many seconds between a loop's steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "faults.json"))
    a = p.parse_args(argv)
    faults = [f for f in a.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        p.error(f"unknown faults {sorted(unknown)}; choose from {FAULTS}")
    started = time.monotonic()
    results = []
    for fault in faults:
        print(f"{fault}: {a.sessions} sessions, {a.rounds} rounds", flush=True)
        results.append(run_fault(fault, a))
    out = {
        "config": {
            "sessions": a.sessions,
            "rounds": a.rounds,
            "session_steps": [8, 16],
            "think_s": a.think,
            "heartbeat_interval_s": 0.5,
            "heartbeat_timeout_s": 1.5,
            "dead_after_s": 3.0,
            "interaction_timeout_s": 240.0,
            "seed": a.seed,
        },
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "code": _code_version(),
        "seconds": round(time.monotonic() - started, 1),
        "faults": results,
    }
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    Path(a.output).write_text(json.dumps(out, indent=2) + "\n")
    print()
    print(
        f"{'fault':<16}{'ok':<4}{'sessions':>9}{'completed':>10}{'task err':>9}{'lost 410':>9}{'other':>6}  per round (min-max)"
    )
    for r in results:
        o = r.get("outcomes", {})
        other = sum(v for k, v in o.items() if k not in ("completed", "task error", "session lost"))
        rounds = r["rounds"]

        def span(key: str, sub: str | None = None, rounds: list[dict[str, Any]] = rounds) -> str:
            vals = [x[key][sub] if sub else x[key] for x in rounds if x.get(key) is not None]
            return f"{min(vals):.1f}-{max(vals):.1f} s" if vals else "-"

        if r["fault"] == "worker-kill":
            detail = (
                f"controller ended its sessions {span('controller_ended_them_s')}, clients saw all by"
                f" {span('client_saw_end_s', 'max')}; restarted, live {span('restart_to_live_s')}"
            )
        elif r["fault"].startswith("controller"):
            detail = (
                f"new one up {span('new_controller_up_s')}, workers live {span('workers_live_again_s')},"
                f" clients saw all 410s by {span('client_saw_410_s', 'max')}"
            )
        else:
            detail = (
                f"declared dead {span('declared_dead_s')}, stuck steps answered by {span('stuck_steps_answered_s', 'max')};"
                f" back, live {span('restore_to_live_s')}"
            )
        print(
            f"{r['fault']:<16}{'yes' if r['ok'] else 'NO':<4}{r.get('sessions', 0):>9}{o.get('completed', 0):>10}"
            f"{o.get('task error', 0):>9}{o.get('session lost', 0):>9}{other:>6}  {detail}"
        )
        for problem in r["problems"]:
            print(f"    problem: {problem}")
    print(f"results: {a.output}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
