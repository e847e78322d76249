"""Faults (c) and (d): a worker that stops answering under load, hung (SIGSTOP) or cut off by a
network partition (a proxy that drops all traffic in both directions); then it comes back.

The controller runs with its default 240 s interaction timeout: the steps in flight to the
hung worker must be answered once the worker is declared dead (``--dead-after`` 3 s of silence,
then a failed ``/health`` probe), not when the interaction timeout expires.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable

import pytest
from fault_stack import FaultStack, Load, Worker, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 64
GUARD_S = 60.0  # a timeout guard for "answered once declared dead" (the interaction timeout is 240 s)


def _hang_and_recover(stack: FaultStack, victim: Worker, survivor: Worker, cut: Callable[[], None], restore: Callable[[], None]):
    load = Load(stack.url, SESSIONS, steps=(8, 16)).start()
    restored = False
    try:
        load.wait_steps(100)
        before = stack.sessions_by_worker()
        assert before[victim.index] and before[survivor.index], before
        cut_at = time.monotonic()
        cut()
        # Halfway to dead_after, the steps the controller is still waiting for on the silent
        # worker's sessions are stuck there (it cannot be declared dead yet): each must be
        # answered "task error" once it is.
        time.sleep(stack.dead_after / 2)
        in_flight = stack.busy_sessions() & before[victim.index]
        ended_early = [r for r in load.records if r.sid in before[victim.index] and r.outcome == "task error"]

        # Declared dead (dropped by the controller), and its sessions answered "task error".
        wait_until(lambda: not stack.registered(victim), GUARD_S, "the silent worker is declared dead")
        dead_at = time.monotonic()
        victims = before[victim.index]
        wait_until(lambda: all(r.outcome for r in load.records if r.sid in victims), GUARD_S, "its sessions end")
        load.wait_completed(after=cut_at, n=SESSIONS // 2)  # the other worker carries the load meanwhile

        restore()
        restored = True
        back_at = time.monotonic()
        stack.wait_live(victim, timeout=GUARD_S)  # it beats again and registers anew
        wait_until(lambda: stack.sessions_by_worker()[victim.index], 30, "the returning worker gets new sessions")
        load.wait_completed(after=back_at, n=SESSIONS // 2)
    finally:
        if not restored:
            restore()  # whatever happened: never leave a worker stopped or a link cut
        report = load.stop()
    return report, before, in_flight, ended_early, cut_at, dead_at


def _check(stack, report, before, in_flight, ended_early, cut_at, dead_at, victim, survivor, name):
    print(f"{name}:", report.summary())
    by_sid = {r.sid: r for r in report.sessions}
    assert not report.unaccounted
    assert set(report.outcomes) <= {"completed", "task error"}, report.outcomes
    # The silent worker's sessions end "task error" (a few may have completed with answers it
    # sent just before the cut) ...
    held = [by_sid[s] for s in before[victim.index]]
    assert all(r.outcome in ("completed", "task error") for r in held)
    hit = [r for r in held if r.outcome == "task error"]
    assert hit and all(r.ended > cut_at for r in hit)
    # ... not before the worker was silent for dead_after (a slow worker is not a dead one): none
    # had ended halfway there ...
    assert not ended_early, ended_early
    # ... and the steps that were waiting on it were answered then, with the status (not a 409
    # later), by the controller declaring it dead after dead_after of silence (not by the 240 s
    # interaction timeout).
    assert in_flight, "no step was in flight to the worker when it went silent"
    for sid in in_flight:
        r = by_sid[sid]
        assert r.outcome == "task error" and r.via == "answer", r
        silent = re.search(r"died: no heartbeat or answer for (\d+) s, and /health did not answer", r.detail)
        assert silent and int(silent.group(1)) >= stack.dead_after, r.detail
    last = max(r.ended for r in hit) - cut_at
    print(f"  declared dead {dead_at - cut_at:.1f} s after going silent; {len(hit)} sessions ended task error"
          f" ({len(in_flight)} answered in flight), the last {last:.1f} s after")  # fmt: skip
    assert all(by_sid[s].outcome == "completed" for s in before[survivor.index])
    # After it came back: no session left anywhere, none orphaned on the worker that hung.
    assert stack.list_sessions() == []
    wait_until(lambda: stack.worker_current(survivor) == 0, 30, "the other worker holds no session")
    wait_until(lambda: stack.worker_current(victim) == 0, 30, "the returning worker holds no orphaned session")


def test_a_hung_worker_sigstop_is_declared_dead_and_rejoins_after_sigcont(faults):
    stack = faults()
    victim, survivor = stack.add_worker(), stack.add_worker()
    result = _hang_and_recover(
        stack,
        victim,
        survivor,
        cut=lambda: stack.send(victim.proc, signal.SIGSTOP),
        restore=lambda: stack.send(victim.proc, signal.SIGCONT),
    )
    _check(stack, *result, victim, survivor, "worker SIGSTOP")


def test_a_partitioned_worker_is_declared_dead_and_rejoins_after_the_heal(faults):
    stack = faults()
    victim, survivor = stack.add_worker(behind_proxy=True), stack.add_worker()
    result = _hang_and_recover(stack, victim, survivor, cut=lambda: stack.partition(victim), restore=lambda: stack.heal(victim))
    _check(stack, *result, victim, survivor, "network partition")
