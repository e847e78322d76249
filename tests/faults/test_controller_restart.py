"""Fault (b): the controller restarts under load (SIGKILL, or SIGTERM) on the same port."""

from __future__ import annotations

import signal
import time

import pytest
from fault_stack import Load, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSIONS = 64


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_restart_the_controller_under_load(faults, sig):
    stack = faults()
    workers = [stack.add_worker(), stack.add_worker()]
    load = Load(stack.url, SESSIONS, steps=(8, 16)).start()
    try:
        load.wait_steps(100)
        killed_at = time.monotonic()
        stack.kill(stack.controller, sig)
        stack.start_controller()  # a new run of the controller, same port
        restarted_at = time.monotonic()
        for w in workers:
            stack.wait_live(w, timeout=30)  # the workers register again by themselves
        # Every session of the old run gets its answer from the new controller; new ones work.
        wait_until(lambda: all(r.outcome for r in load.records if r.started < killed_at), 60, "old sessions resolved")
        load.wait_completed(after=restarted_at, n=SESSIONS // 2)
    finally:
        report = load.stop()
    print(f"controller {sig.name}:", report.summary())

    assert not report.unaccounted
    assert set(report.outcomes) <= {"completed", "session lost"}, report.outcomes
    old = [r for r in report.sessions if r.started < killed_at]
    lost = [r for r in old if r.outcome == "session lost"]
    assert lost, "the restart cut no session"
    for r in lost:  # the clear error: 410 session_lost saying why
        assert r.via == "410" and "restarted" in r.detail, r
    for r in old:  # an old session either finished on the old run, or is lost: never half-answered
        assert r.outcome == "session lost" or r.ended < restarted_at, r
    assert all(r.outcome == "completed" for r in report.sessions if r.started >= restarted_at)
    print(f"  {len(lost)} sessions lost to the restart (410), {report.start_errors.total()} start attempts refused meanwhile")

    # The new controller knows no leftover session, and the workers hold none (no orphans).
    assert stack.list_sessions() == []
    wait_until(lambda: all(stack.worker_current(w) == 0 for w in workers), 30, "the workers hold no orphaned session")
