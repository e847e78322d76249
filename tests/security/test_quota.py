"""Quotas (issue 17 part 3): per-token limits on sessions open and on starts per minute, answered
429 ``quota_exceeded`` in the one error shape; a client over its quota does not starve another."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from security_helpers import ALICE, BOB, CAROL, auth

from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.errors import QuotaExceededError
from agentrl_envs.transport.auth import Principal


def start(url: str, token: str) -> httpx.Response:
    return httpx.post(f"{url}/api/start_sample", headers=auth(token), json={"name": "calc", "index": 0}, timeout=30)


def start_until_refused(url: str, token: str, allowed: int) -> tuple[list[httpx.Response], dict]:
    """``allowed`` starts that succeed, then one refused 429: (the started, the refusal's body)."""
    started = [start(url, token) for _ in range(allowed)]
    assert all(r.status_code == 200 for r in started), [r.text for r in started]
    over = start(url, token)
    assert over.status_code == 429, over.text
    body = over.json()
    assert body["error"] == "quota_exceeded", body
    return started, body


def cancel(url: str, token: str, sid: str) -> None:
    assert httpx.post(f"{url}/api/cancel", headers={**auth(token), "session_id": sid}).status_code == 200


def test_sessions_over_the_quota_are_refused_and_others_still_start(secure_stack):
    url = secure_stack.url
    alice, body = start_until_refused(url, ALICE, 2)
    assert "alice" in body["detail"] and "limit is 2" in body["detail"]
    assert body["data"] == {"client": "alice", "limit": "max_sessions", "active_sessions": 2, "max_sessions": 2}
    # Bob is not held back by Alice's quota, nor by her refused starts.
    bob = [start(url, BOB) for _ in range(3)]
    assert all(r.status_code == 200 for r in bob), [r.text for r in bob]
    # Ending one of Alice's sessions gives her the slot back.
    cancel(url, ALICE, alice[0].headers["session_id"])
    again = start(url, ALICE)
    assert again.status_code == 200, again.text
    for r in (alice[1], again):
        cancel(url, ALICE, r.headers["session_id"])
    for r in bob:
        cancel(url, BOB, r.headers["session_id"])


async def test_a_burst_from_one_client_cannot_starve_another(secure_stack):
    """Alice fires 12 starts at once at a worker with 8 slots: 2 get in, 10 get 429, and Bob then
    finds the slots she could not take."""
    async with (
        AsyncControllerClient(secure_stack.url, token=ALICE) as alice,
        AsyncControllerClient(secure_stack.url, token=BOB) as bob,
    ):
        results = await asyncio.gather(*(alice.start_sample("calc", 0) for _ in range(12)), return_exceptions=True)
        ok = [r for r in results if not isinstance(r, BaseException)]
        refused = [r for r in results if isinstance(r, QuotaExceededError)]
        assert len(ok) == 2 and len(refused) == 10, results
        assert refused[0].data["limit"] == "max_sessions"
        bobs = await asyncio.gather(*(bob.start_sample("calc", 1) for _ in range(6)))
        assert len(bobs) == 6
        for sid, _ in ok:
            await alice.cancel(sid)
        for sid, _ in bobs:
            await bob.cancel(sid)


def test_start_rate_is_limited_per_token(secure_stack):
    url = secure_stack.url
    carol, body = start_until_refused(url, CAROL, 2)
    assert body["data"]["limit"] == "starts_per_minute"
    assert body["data"]["retry_after_s"] > 0 and "retry in" in body["detail"]
    r = start(url, BOB)
    assert r.status_code == 200, r.text
    for c in carol:
        cancel(url, CAROL, c.headers["session_id"])
    cancel(url, BOB, r.headers["session_id"])


def test_a_failed_start_gives_the_slot_back(secure_stack):
    r = httpx.post(f"{secure_stack.url}/api/start_sample", headers=auth(ALICE), json={"name": "calc", "index": 99})
    assert r.status_code == 404 and r.json()["error"] == "unknown_sample", r.text
    alice = next(p for p in secure_stack.controller.server.config.app.auth._tokens.values() if p[1].name == "alice")[1]
    assert alice.active == 0


def test_token_bucket_refills():
    p = Principal("p", frozenset({"client"}), starts_per_minute=60.0)
    for _ in range(60):
        p.reserve_session()
    with pytest.raises(QuotaExceededError):
        p.reserve_session()
    p._refilled -= 1.0  # a second later: one more start
    p.reserve_session()
