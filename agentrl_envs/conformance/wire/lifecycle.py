"""The checks of how sessions end on the worker: ``cancel``, ``ended_session``, ``idle_expiry``.

However a session ends (a client cancels it, the task ends it, it is left idle), neither the
controller nor the worker holds it afterwards and both refuse a step of it with a 4xx
(:func:`released`).
"""

from __future__ import annotations

from typing import Any

from ..common import NO_CALL, ConformanceSkip
from .moves import Move, ended, env_out, keep_open, moves
from .options import WireOptions
from .target import WireTarget, Worker


def released(t: WireTarget, w: Worker, sid: int, what: str, seconds: float) -> None:
    """Neither the controller nor worker ``w`` holds session ``sid`` (within ``seconds``), and
    both refuse a step of it (4xx): the worker asked directly, as the controller would."""
    if not t.wait(lambda: str(sid) not in t.held(w) and sid not in t.open_sessions(), seconds):
        where = "in the worker's get_sessions" if str(sid) in t.held(w) else "in the controller's list_sessions"
        raise AssertionError(
            f"{t.who}: expected worker {w.address} and the controller to release session {sid} {what} within {seconds:g} s,"
            f" got it still {where}"
        )
    a = t.on_worker(w, "POST", "interact", json={"session_id": sid, "messages": [dict(NO_CALL)]})
    assert 400 <= a.status < 500, (
        f"{t.who}: expected worker {w.address} to refuse a step of session {sid} {what} (HTTP 4xx), got {a.what()}"
    )
    a = t.interact(sid, dict(NO_CALL))
    assert 400 <= a.status < 500, (
        f"{t.who}: expected the controller to refuse a step of session {sid} {what} (HTTP 4xx), got {a.what()}"
    )


# --------------------------------------------------------------------------- cancel


def check_cancel(t: WireTarget, o: WireOptions) -> list[str]:
    """A session cancelled through the controller after one round (of the move that keeps a
    session open, :func:`~.moves.keep_open`) is released by its worker: gone from its
    ``get_sessions``, ``worker_status`` counting one less, a step of it refused (4xx). Where every
    move ends the episode at once, the session is cancelled right after its start (a note)."""
    found = keep_open(t)
    notes = [] if found.move is not None else [f"{found.why_none()}: cancelled right after the start"]
    index = t.first_index()
    with t.session(index) as (sid, _):
        w = t.worker_of(sid)
        if found.move is not None:
            where = f"{t.who}, sample {index!r}, round 1 {found.move.what}"
            body = env_out(t.interact(sid, found.move.message(1)), where)
            assert not body["finish"], f"{where}: expected the episode to go on, as it did before, got it ended ({ended(body)})"
        assert str(sid) in t.held(w), (
            f"{t.who}: expected worker {w.address} to list session {sid} in get_sessions, got {t.held(w)}"
        )
        _, before = t.worker_status(w)
        a = t.cancel(sid)
        assert a.ok, f"{t.who}: expected the cancel of session {sid} to be accepted, got {a.what()}"
        released(t, w, sid, "after it was cancelled", o.settle)
        _, after = t.worker_status(w)
    if after >= before:
        notes.append(
            f"worker_status counted {before} sessions before the cancel and {after} after (other clients starting sessions?)"
        )
    return notes


# --------------------------------------------------------------------------- a session the task ended


def check_ended_session(t: WireTarget, o: WireOptions) -> list[str]:
    """A session the task ended is released: gone from the worker's ``get_sessions`` and the
    controller's sessions, a step of it refused (4xx) by both (the worker asked directly). To
    end one, each of :func:`~.moves.moves` is played once, then those that kept the session open
    in turn, until the episode ends; no end within ``turn_limit`` (or ``max_rounds``) more rounds:
    skipped, saying so."""
    index = t.first_index()
    cap = o.turn_limit or o.max_rounds
    with t.session(index) as (sid, first):
        w = t.worker_of(sid)
        plan = moves(first.get("tools") or [])
        going: list[Move] = []
        body: dict[str, Any] = {}
        for turn in range(1, len(plan) + cap + 1):
            move = plan[turn - 1] if turn <= len(plan) else going[(turn - 1 - len(plan)) % len(going)]
            body = env_out(t.interact(sid, move.message(turn)), f"{t.who}, sample {index!r}, round {turn} {move.what}")
            if body["finish"]:
                break
            if turn <= len(plan):
                going.append(move)
        else:
            raise ConformanceSkip(
                f"{t.who}: no end within {turn} rounds (each move once, then those that kept the session open):"
                " pass --turn-limit N, or --max-rounds N to play more"
            )
        released(t, w, sid, f"after it ended ({ended(body)}, round {turn} {move.what})", o.settle)
    return [f"ended at round {turn} {move.what}: status {body['status']!r}"]


# --------------------------------------------------------------------------- idle expiry


def check_idle_expiry(t: WireTarget, o: WireOptions) -> list[str]:
    """A session left idle is dropped: by the controller after its idle timeout (the worker then
    releases it), and by the worker itself after its own (``worker_idle_timeout``), if given."""
    if o.idle_timeout is None and o.worker_idle_timeout is None:
        raise ConformanceSkip(
            f"{t.who}: the controller's idle timeout is not known (pass --idle-timeout S, or --worker-idle-timeout S"
            " for the worker's own)"
        )
    notes = []
    index = t.first_index()
    if o.idle_timeout is not None:
        with t.session(index) as (sid, _):
            w = t.worker_of(sid)
            released(t, w, sid, f"left idle for the controller's idle timeout ({o.idle_timeout:g} s)", o.idle_timeout + o.settle)
        notes.append(f"released after the controller's idle timeout ({o.idle_timeout:g} s)")
    if o.worker_idle_timeout is not None:
        w = t.live_workers()[0]
        sid = t.private_id()
        a = t.start_on(w, index, sid)
        assert a.ok, f"{t.who}: expected a session started on worker {w.address} directly to start, got {a.what()}"
        try:
            if not t.wait(lambda: str(sid) not in t.held(w), o.worker_idle_timeout + o.settle):
                raise AssertionError(
                    f"{t.who}: expected worker {w.address} to drop session {sid}, idle for its own idle timeout"
                    f" ({o.worker_idle_timeout:g} s), within {o.worker_idle_timeout + o.settle:g} s; got it still in get_sessions"
                )
        finally:
            t.on_worker(w, "POST", "cancel", json={"session_id": sid})
        notes.append(f"dropped by the worker after its own idle timeout ({o.worker_idle_timeout:g} s)")
    return notes
