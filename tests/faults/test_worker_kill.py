"""Fault (a): SIGKILL one of two workers of a task under load; restart it on the same port."""

from __future__ import annotations

import signal
import time

import pytest
from fault_stack import Load, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 64


def test_sigkill_a_worker_under_load(faults):
    stack = faults()
    victim, survivor = stack.add_worker(), stack.add_worker()
    load = Load(stack.url, SESSIONS, steps=(8, 16)).start()
    try:
        load.wait_steps(100)
        before = stack.sessions_by_worker()
        assert before[victim.index] and before[survivor.index], before  # both workers carry sessions
        killed_at = time.monotonic()
        stack.kill(victim.proc, signal.SIGKILL)

        # The killed worker's sessions end (the client sees it); the other worker's go on.
        victims = before[victim.index]
        wait_until(lambda: all(r.outcome for r in load.records if r.sid in victims), 30, "the killed worker's sessions end")
        load.wait_completed(after=killed_at, n=SESSIONS // 2)  # new sessions start and finish meanwhile

        # Restarted on the same port, it registers again and gets new sessions.
        stack.start_worker(victim)
        rejoined_at = time.monotonic()
        wait_until(lambda: stack.sessions_by_worker()[victim.index], 30, "the restarted worker gets new sessions")
        load.wait_completed(after=rejoined_at, n=SESSIONS // 2)
    finally:
        report = load.stop()
    print("worker SIGKILL:", report.summary())

    by_sid = {r.sid: r for r in report.sessions}
    assert not report.unaccounted
    assert set(report.outcomes) <= {"completed", "task error"}, report.outcomes
    # Every session the killed worker held ended "task error" naming it (or completed, with an
    # answer it sent before the kill).
    for sid in before[victim.index]:
        r = by_sid[sid]
        assert r.outcome == "completed" or (r.outcome == "task error" and f":{victim.port}" in r.detail), r
    lost = [by_sid[sid] for sid in before[victim.index] if by_sid[sid].outcome == "task error"]
    assert lost, "the kill hit no session"
    print(
        f"  {len(lost)} sessions of the killed worker ended task error, the last {max(r.ended for r in lost) - killed_at:.2f} s after the kill"
    )
    # The other worker's sessions, and every session started after the kill, were not disturbed.
    assert all(by_sid[sid].outcome == "completed" for sid in before[survivor.index])
    assert all(r.outcome == "completed" for r in report.sessions if r.started > killed_at)
    # Nothing is left behind: the controller and both workers hold no session.
    assert stack.list_sessions() == []
    assert stack.worker_current(victim) == 0 and stack.worker_current(survivor) == 0
    assert {w["address"] for w in stack.list_workers() if w["alive"]} == {victim.self_url, survivor.self_url}
