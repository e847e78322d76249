"""Finding 6 of issue 38: ``POST /api/cancel_notice`` is checked against the worker that owns the
session. The worker secret is shared by every worker, so the notice itself proves nothing; the
controller asks the owning worker, and ends the session only once that worker no longer holds it.

A controller with tokens and two workers of one task, over real loopback HTTP: a notice for worker
A's session sent with the secret while A still holds it (as worker B, or anyone with the secret,
could send it) ends nothing; A's own cancel with notice still ends it. AgentRL's own worker
(agentrl-worker on PyPI) sends genuine notices too, and they still end its sessions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ci_helpers import require
from security_helpers import ADMIN, WORKER, agentrl_counter_worker, auth
from stack_helpers import wait_for
from tasks_for_tests import Calc

from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.episode import TaskRuntime
from agentrl_envs.stack import ServerThread, listening_socket
from agentrl_envs.transport.auth import controller_authenticator, worker_authenticator
from agentrl_envs.worker import WorkerService, create_worker_app


def call(name: str, args: dict, call_id: str = "c1") -> dict:
    fn = {"name": name, "arguments": json.dumps(args)}
    return {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}


def notice(url: str, sid: int) -> httpx.Response:
    """A cancel notice as a worker sends it: the secret, the session in the header and the body."""
    return httpx.post(f"{url}/api/cancel_notice", headers={**auth(WORKER), "session_id": str(sid)}, json={"session_id": sid})


def open_sessions(url: str) -> dict[int, str]:
    """Session id -> the address of the worker that holds it, as the controller sees them."""
    workers = {
        w["id"]: w["address"] for ws in httpx.get(f"{url}/api/list_workers", headers=auth(ADMIN)).json().values() for w in ws
    }
    return {s["session_id"]: workers[s["worker_id"]] for s in httpx.get(f"{url}/api/list_sessions", headers=auth(ADMIN)).json()}


def worker_sessions(worker_url: str) -> set[int]:
    return {int(k) for k in httpx.get(f"{worker_url}/api/get_sessions", headers=auth(WORKER)).json()}


def start(url: str, task: str = "calc") -> int:
    r = httpx.post(f"{url}/api/start_sample", headers=auth(ADMIN), json={"name": task, "index": 0})
    assert r.status_code == 200, r.text
    return int(r.headers["session_id"])


def interact(url: str, sid: int, message: dict) -> httpx.Response:
    return httpx.post(f"{url}/api/interact", headers={**auth(ADMIN), "session_id": str(sid)}, json={"messages": [message]})


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """(controller URL, [worker A URL, worker B URL]): tokens on, both workers hold the secret."""
    service = ControllerService(worker_secret=WORKER)
    cauth = controller_authenticator(client_tokens=[ADMIN], worker_secret=WORKER)
    controller = ServerThread(create_controller_app(service, auth=cauth)).start()
    servers = [controller]
    try:
        for _ in range(2):
            listen = listening_socket()
            port = listen.getsockname()[1]
            worker = WorkerService(
                TaskRuntime(Calc, split="dev"),
                concurrency=4,
                controller_url=f"{controller.url}/api",
                self_address=f"http://127.0.0.1:{port}/api",
                heartbeat_interval=0.5,
                worker_secret=WORKER,
            )
            servers.append(ServerThread(create_worker_app(worker, auth=worker_authenticator(WORKER)), listen=listen).start())
        addresses = {f"{s.url}/api" for s in servers[1:]}
        wait_for(
            lambda: (
                {
                    w["address"]
                    for w in httpx.get(f"{controller.url}/api/list_workers", headers=auth(ADMIN)).json().get("calc", [])
                }
                == addresses
            )
        )
        yield controller.url, [s.url for s in servers[1:]]
    finally:
        for s in reversed(servers):
            s.stop()


def test_a_notice_for_a_session_its_worker_still_holds_does_not_end_it(two_workers):
    url, (a_url, b_url) = two_workers
    ids = [start(url) for _ in range(4)]  # dispatch to the most free slots: two on each worker
    where = open_sessions(url)
    on_a = [sid for sid in ids if where[sid] == f"{a_url}/api"]
    on_b = [sid for sid in ids if where[sid] == f"{b_url}/api"]
    assert len(on_a) == 2 and len(on_b) == 2, where
    victim, other = on_a

    # Forged: the secret, but worker A still holds the session (B, or anyone with the secret, sent it).
    r = notice(url, victim)
    assert r.status_code == 200 and r.json()["ended"] is False, r.text
    assert "still holds" in r.json()["detail"]
    assert victim in open_sessions(url) and victim in worker_sessions(a_url)
    out = interact(url, victim, call("add", {"x": 2, "y": 3}))
    assert out.status_code == 200 and out.json()["status"] == "running", out.text  # the episode goes on
    # Both forms the protocol accepts (the body alone names the session too), and many at once.
    r = httpx.post(f"{url}/api/cancel_notice", headers=auth(WORKER), json={"session_id": victim})
    assert r.json()["ended"] is False
    for sid in [*on_a, *on_b] * 3:
        assert notice(url, sid).json()["ended"] is False
    assert set(open_sessions(url)) == set(ids)

    # Genuine: worker A cancels with notice (drops the session, then tells the controller); it ends.
    r = httpx.post(f"{a_url}/api/cancel_with_notice", headers=auth(WORKER), json={"session_id": victim})
    assert r.status_code == 200, r.text
    wait_for(lambda: victim not in open_sessions(url))
    finished = interact(url, victim, call("add", {"x": 1}))
    assert finished.status_code == 409 and "cancel notice" in finished.json()["detail"], finished.text
    # Nothing else ended; A's other session and B's go on.
    assert set(open_sessions(url)) == {other, *on_b}
    out = interact(url, other, call("answer", {"value": 5}))
    assert out.json()["status"] == "completed" and out.json()["reward"] == 1

    # A cancel_all_with_notice on B: every notice is genuine, every session ends.
    assert httpx.post(f"{b_url}/api/cancel_all_with_notice", headers=auth(WORKER)).json() == {"cancelled": 2}
    wait_for(lambda: not open_sessions(url))


@pytest.mark.compat
def test_agentrl_workers_genuine_notice_still_ends_the_session(two_workers, tmp_path):
    """AgentRL's TaskWorker pops the session, then posts the notice (the secret in its controller
    URL's userinfo, sent as HTTP Basic): the controller asks it, finds the session gone, ends it."""
    require("agentrl.worker.task_worker")
    url, _ = two_workers
    log = tmp_path / "agentrl-worker.log"
    with agentrl_counter_worker(url, log) as port:
        sid, kept = start(url, "agentrl-counter"), start(url, "agentrl-counter")
        assert notice(url, sid).json()["ended"] is False  # it still holds it
        r = httpx.post(f"http://127.0.0.1:{port}/api/cancel_with_notice", json={"session_id": sid})
        assert r.status_code == 200, r.text
        wait_for(lambda: sid not in open_sessions(url), timeout=30)
        assert interact(url, sid, call("count", {"n": 1})).status_code == 409
        assert set(open_sessions(url)) == {kept}
    assert "Controller returned error" not in log.read_text(errors="replace")
