"""AgentRL parity of the controller and worker (issue 15 item 5), over real loopback HTTP:
session renewal, cancel with notice, the admin endpoints clean_worker / clean_session / sync_all,
cancel_all's confirmation, and the Prometheus series of sessions, workers and connections."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import httpx
import pytest
from ci_helpers import require
from prometheus_client.parser import text_string_to_metric_families
from stack_helpers import wait_for
from tasks_for_tests import Calc, call

from agentrl_envs.agent import AgentSession
from agentrl_envs.client import AsyncControllerClient
from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.episode import TaskRuntime
from agentrl_envs.stack import ServerThread
from agentrl_envs.tasks.echo import EchoTask
from agentrl_envs.worker import WorkerService

RENEWAL = {"role": "assistant", "content": ""}


def start(url: str, name: str = "calc", index: int = 0) -> int:
    r = httpx.post(f"{url}/api/start_sample", json={"name": name, "index": index})
    assert r.status_code == 200, r.text
    return int(r.headers["session_id"])


def interact(url: str, sid: int, message: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/api/interact", headers={"session_id": str(sid)}, json={"messages": [message]}, timeout=timeout)


def open_sessions(url: str) -> set[int]:
    return {s["session_id"] for s in httpx.get(f"{url}/api/list_sessions").json()}


def worker_sessions(worker: ServerThread) -> set[int]:
    return {int(k) for k in httpx.get(f"{worker.url}/api/get_sessions").json()}


def assert_error(r: httpx.Response, status: int, code: str, text: str = "") -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and text in body["detail"], body
    return body


class _NoSweep(ControllerService):
    """A controller whose background sweep never runs: only the admin endpoints clean up."""

    async def _sweep_loop(self) -> None:
        await asyncio.Event().wait()


def without_sweep(stack, **kwargs) -> None:
    """Restart ``stack``'s controller (no worker registered yet) as a :class:`_NoSweep` one."""
    port = stack.controller.port
    stack.controller.stop()
    stack.service = _NoSweep(**kwargs)
    stack.controller = ServerThread(create_controller_app(stack.service), port=port).start()


# --------------------------------------------------------------------------- renewal


def test_renewal_keeps_a_session_alive_past_both_idle_timeouts_and_is_not_a_turn(make_stack):
    stack = make_stack(idle_timeout=1.0)
    worker = stack.add_worker(Calc, idle_timeout=1.0)
    renewed = start(stack.url)
    idle = start(stack.url, index=1)
    deadline = time.monotonic() + 2.5  # well past both idle timeouts
    while time.monotonic() < deadline:
        r = interact(stack.url, renewed, RENEWAL)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["status"] == "running" and not out["finish"], out
        # Nothing new from the task: the renewal message itself (agentrl-eval needs non-empty messages).
        assert out["messages"] == [RENEWAL]
        assert out["metrics"] == {"turns": 0, "tool_errors": 0}
        time.sleep(0.25)
    # The session that was not renewed expired on both sides; the renewed one is open on both.
    wait_for(lambda: idle not in open_sessions(stack.url) and idle not in worker_sessions(worker), timeout=10)
    assert renewed in open_sessions(stack.url) and renewed in worker_sessions(worker)
    out = interact(stack.url, renewed, call("add", '{"x": 2, "y": 3}')).json()
    assert out["messages"] == [{"role": "tool", "tool_call_id": "c1", "content": "5"}]
    assert out["metrics"]["turns"] == 1  # renewals were not turns
    metrics = httpx.get(f"{stack.url}/metrics").text
    assert 'agentrl_interacts_total{status="running",task="calc"} 1.0' in metrics  # steps only


def test_the_worker_answers_a_renewal_without_touching_the_episode_even_during_a_step(make_stack):
    stack = make_stack()
    worker = stack.add_worker(Calc)
    sid = start(stack.url)
    body = {"session_id": sid, "messages": [RENEWAL]}
    r = httpx.post(f"{worker.url}/api/interact", json=body)
    assert r.status_code == 200, r.text
    env_out = r.json()["env_out"]
    assert env_out["status"] == "running" and not env_out["finish"] and env_out["messages"] == [RENEWAL]
    assert env_out["metric"]["turns"] == 0
    # A renewal while a step runs takes no lock: answered at once, and the step is not disturbed.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        step = pool.submit(interact, stack.url, sid, call("nap", '{"seconds": 1.0}'))
        wait_for(lambda: any(s["busy"] for s in httpx.get(f"{stack.url}/api/list_sessions").json()))
        assert interact(stack.url, sid, RENEWAL).json()["status"] == "running"  # through the controller
        direct = httpx.post(f"{worker.url}/api/interact", json=body)  # to the worker, which holds the lock
        assert direct.status_code == 200 and direct.json()["env_out"]["status"] == "running", direct.text
        assert not step.done()
        out = step.result().json()
    assert out["messages"][0]["content"] == "awake" and out["metrics"]["turns"] == 1


async def test_worker_service_renewal_returns_no_messages_and_restarts_the_idle_clock():
    service = WorkerService(TaskRuntime(Calc, split="dev"))
    await service.startup()
    try:
        await service.start_sample(7, 0)
        session = service.sessions[7]
        session.last_active -= 100
        before = session.last_active
        out = await service.interact(7, [dict(RENEWAL)])
        assert out.messages == [] and out.status.value == "running" and not out.finish
        assert session.last_active > before and session.episode.turns == 0
    finally:
        await service.shutdown()


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": None},
        {"role": "assistant"},
        {"role": "assistant", "content": "", "reasoning_content": "thinking..."},
        {"role": "assistant", "content": " "},
    ],
)
def test_other_empty_replies_are_steps_not_renewals(make_stack, message):
    stack = make_stack()
    stack.add_worker(Calc)
    sid = start(stack.url)
    out = interact(stack.url, sid, message).json()
    assert out["messages"][0]["role"] == "user" and out["metrics"]["turns"] == 1


async def test_the_agent_loop_sends_an_empty_reply_as_content_null_so_it_counts_as_a_turn(make_stack):
    stack = make_stack()
    stack.add_worker(Calc)
    async with AsyncControllerClient(stack.url) as client:
        session = AgentSession(client, "calc", 0)
        await session.start()
        new = await session.act({"role": "assistant", "content": ""})
        assert [m["role"] for m in new] == ["user"]  # the task's answer to a reply without a tool call
        assert session.transcript.messages[-2] == {"role": "assistant", "content": None}
        assert session.transcript.metrics["turns"] == 1
        await session.close()


async def test_agentrl_eval_controller_client_renew_works_against_our_stack(make_stack):
    agentrl_controller = require("agentrl.eval.session.controller", "agentrl-eval")
    stack = make_stack(idle_timeout=1.0)
    stack.add_worker(EchoTask, idle_timeout=1.0)
    client = agentrl_controller.ControllerClient(f"{stack.url}/api/", proxy_url=None)
    try:
        sid, _ = await client.start_sample("echo", 2)
        for _ in range(8):  # 2 s: twice the idle timeouts
            assert await client.renew(sid) is None
            await asyncio.sleep(0.25)
        word = EchoTask.load_samples()[2]["word"]
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "echo", "arguments": f'{{"text": "{word}"}}'}}],
        }
        out = await client.interact(sid, [msg])
        assert out.finish and out.reward == 1.0 and out.metrics["turns"] == 1
    finally:
        await client.close()


# --------------------------------------------------------------------------- cancel with notice


def test_cancel_notice_ends_the_session_and_frees_its_slot(make_stack):
    stack = make_stack()
    stack.add_worker(Calc)  # concurrency 2
    worker = stack.workers[0]
    a, b = start(stack.url), start(stack.url)
    # As a worker does after a cancel with notice: it cancels the session, then tells the controller.
    assert httpx.post(f"{worker.url}/api/cancel", json={"session_id": a}).status_code == 200
    r = httpx.post(f"{stack.url}/api/cancel_notice", headers={"session_id": str(a)}, json={"session_id": a})
    assert r.status_code == 200 and r.json() == {"session_id": a, "ended": True}
    assert a not in open_sessions(stack.url)
    assert_error(interact(stack.url, a, call("add", '{"x": 1}')), 409, "session_finished", "cancel notice")
    c = start(stack.url)  # its slot on the controller is free
    # A notice for a session its worker still holds is refused (tests/security/test_cancel_notice_owner.py).
    r = httpx.post(f"{stack.url}/api/cancel_notice", json={"session_id": b})
    assert r.status_code == 200 and r.json()["ended"] is False and "still holds" in r.json()["detail"]
    assert b in open_sessions(stack.url)
    # The body names the session when the header is missing; unknown sessions are only logged.
    assert httpx.post(f"{worker.url}/api/cancel", json={"session_id": b}).status_code == 200
    r = httpx.post(f"{stack.url}/api/cancel_notice", json={"session_id": b})
    assert r.status_code == 200 and r.json() == {"session_id": b, "ended": True}
    assert b not in open_sessions(stack.url) and c in open_sessions(stack.url)
    r = httpx.post(f"{stack.url}/api/cancel_notice", headers={"session_id": "123"})
    assert r.status_code == 200 and r.json()["ended"] is False and "not open" in r.json()["detail"]
    assert_error(httpx.post(f"{stack.url}/api/cancel_notice", headers={"session_id": "x"}), 400, "session_error", "integer")
    assert_error(httpx.post(f"{stack.url}/api/cancel_notice"), 400, "session_error", "missing")


class SlowTeardown(EchoTask):
    name = "slow-teardown"
    torn_down = threading.Event()

    async def teardown(self) -> None:
        await asyncio.sleep(0.5)
        SlowTeardown.torn_down.set()


def test_worker_cancel_with_notice_answers_at_once_then_notifies_the_controller(make_stack):
    stack = make_stack()
    worker = stack.add_worker(SlowTeardown)
    sid = start(stack.url, "slow-teardown")
    SlowTeardown.torn_down.clear()
    r = httpx.post(f"{worker.url}/api/cancel_with_notice", json={"session_id": sid})
    assert r.status_code == 200 and r.json() == {"session_id": sid}
    assert not SlowTeardown.torn_down.is_set()  # answered before the session was closed
    assert sid not in worker_sessions(worker)
    wait_for(lambda: sid not in open_sessions(stack.url))  # the notice arrived
    assert SlowTeardown.torn_down.is_set()  # ... after the close
    assert_error(interact(stack.url, sid, call("echo", '{"text": "x"}')), 409, "session_finished", "cancel notice")
    assert_error(httpx.post(f"{worker.url}/api/cancel_with_notice", json={"session_id": sid}), 404, "unknown_session")

    ids = {start(stack.url, "slow-teardown", i) for i in range(3)}
    r = httpx.post(f"{worker.url}/api/cancel_all_with_notice")
    assert r.status_code == 200 and r.json() == {"cancelled": 3}
    assert worker_sessions(worker) == set()
    wait_for(lambda: not (ids & open_sessions(stack.url)))
    assert httpx.get(f"{worker.url}/api/worker_status").json()["current"] == 0


# --------------------------------------------------------------------------- admin endpoints


def test_cancel_all_needs_a_name_or_force_when_several_tasks_are_registered(make_stack):
    stack = make_stack()
    stack.add_worker(Calc)
    calc = start(stack.url)
    r = httpx.post(f"{stack.url}/api/cancel_all")  # one task: no confirmation needed
    assert r.status_code == 200 and r.json() == {"cancelled": 1} and calc not in open_sessions(stack.url)

    stack.add_worker(EchoTask)
    calc, echo = start(stack.url), start(stack.url, "echo")
    body = assert_error(httpx.post(f"{stack.url}/api/cancel_all"), 403, "confirmation_required", "multiple tasks are running!")
    assert body["data"] == {"tasks": ["calc", "echo"]}
    assert open_sessions(stack.url) == {calc, echo}
    r = httpx.post(f"{stack.url}/api/cancel_all", params={"name": "echo"})
    assert r.status_code == 200 and r.json() == {"cancelled": 1} and open_sessions(stack.url) == {calc}
    echo = start(stack.url, "echo")
    r = httpx.post(f"{stack.url}/api/cancel_all", params={"force": "true"})
    assert r.status_code == 200 and r.json() == {"cancelled": 2} and open_sessions(stack.url) == set()


def test_clean_session_expires_idle_sessions_now(make_stack):
    stack = make_stack()
    without_sweep(stack, idle_timeout=2.0)
    worker = stack.add_worker(Calc)
    old = start(stack.url)
    time.sleep(2.3)
    new = start(stack.url)
    r = httpx.post(f"{stack.url}/api/clean_session")
    assert r.status_code == 200 and r.json() == {"cancelled": [old]}
    assert open_sessions(stack.url) == {new} and worker_sessions(worker) == {new}
    assert_error(interact(stack.url, old, call("add", '{"x": 1}')), 409, "session_finished", "idle timeout")


def test_clean_worker_drops_silent_workers_that_do_not_answer_and_keeps_those_that_do(make_stack):
    stack = make_stack()
    without_sweep(stack, heartbeat_timeout=2.0, dead_after=2.0)
    live = stack.add_worker(Calc, heartbeat_interval=60)
    dead = stack.add_worker(EchoTask, heartbeat_interval=60)
    sid = start(stack.url, "echo")
    dead.stop()
    time.sleep(2.5)  # both silent past dead_after (they beat every 60 s); no sweep ran
    assert len(stack.service.workers) == 2
    r = httpx.post(f"{stack.url}/api/clean_worker")
    assert r.status_code == 200, r.text
    assert r.json() == {
        "probed": 2,
        "dropped": [{"worker": f"{dead.url}/api", "task": "echo"}],
        "kept": [{"worker": f"{live.url}/api", "task": "calc"}],
    }
    assert [w["address"] for ws in httpx.get(f"{stack.url}/api/list_workers").json().values() for w in ws] == [f"{live.url}/api"]
    assert_error(interact(stack.url, sid, call("echo", '{"text": "x"}')), 409, "session_finished", "/health did not answer")


def test_sync_all_cancels_orphans_on_workers_and_ends_sessions_workers_lost(make_stack):
    stack = make_stack()
    worker = stack.add_worker(Calc, concurrency=4)
    kept, lost = start(stack.url), start(stack.url)
    # Behind the controller's back: the worker loses one session and gains one it never started.
    assert httpx.post(f"{worker.url}/api/cancel", json={"session_id": lost}).status_code == 200
    orphan = 424242
    r = httpx.post(f"{worker.url}/api/start_sample", json={"index": 0, "session_id": orphan})
    assert r.status_code == 200, r.text
    assert worker_sessions(worker) == {kept, orphan}

    r = httpx.post(f"{stack.url}/api/sync_all")
    assert r.status_code == 200, r.text
    assert r.json() == {"workers": 1, "failed": [], "cancelled_on_workers": 1, "ended": [lost]}
    assert worker_sessions(worker) == {kept} and open_sessions(stack.url) == {kept}
    assert_error(interact(stack.url, lost, call("add", '{"x": 1}')), 409, "session_finished", "no longer holds this session")
    assert interact(stack.url, kept, call("answer", '{"value": 5}')).json()["status"] == "completed"

    worker.stop()  # still registered (dead_after is 30 s): the sync says it could not reach it
    r = httpx.post(f"{stack.url}/api/sync_all").json()
    assert r["workers"] == 1 and [f["worker"] for f in r["failed"]] == [f"{worker.url}/api"] and r["ended"] == []


# --------------------------------------------------------------------------- metrics


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    text = httpx.get(f"{url}/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value for family in text_string_to_metric_families(text) for s in family.samples
    }


def test_metrics_report_sessions_by_state_ended_sessions_workers_and_waiting_requests(make_stack):
    # HTTP/1.1 to the worker, so that requests can wait for a connection (tests/test_mux.py: the
    # multiplexed connection's metrics)
    stack = make_stack(heartbeat_timeout=2.0, dead_after=4.0, multiplex=False)
    worker = stack.add_worker(Calc, concurrency=4, heartbeat_interval=0.2)
    address = f"{worker.url}/api"
    idle, a, b = start(stack.url), start(stack.url), start(stack.url)
    stack.service._http.max_connections = 1  # one connection to the worker: a second step waits for it

    def labels(**kw: str) -> frozenset:
        return frozenset(kw.items())

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        first = pool.submit(interact, stack.url, a, call("nap", '{"seconds": 1.5}'))
        wait_for(
            lambda: (
                scrape(stack.url).get(("agentrl_upstream_connections", labels(task="calc", worker=address, state="busy"))) == 1
            )
        )
        second = pool.submit(interact, stack.url, b, call("nap", '{"seconds": 0.1}'))
        wait_for(lambda: scrape(stack.url).get(("agentrl_upstream_waiting", labels(task="calc", worker=address))) == 1)
        m = scrape(stack.url)
        assert m[("agentrl_sessions", labels(task="calc", state="busy"))] == 2
        assert m[("agentrl_sessions", labels(task="calc", state="running"))] == 1
        assert m[("agentrl_worker_up", labels(task="calc", worker=address))] == 1
        assert first.result().status_code == 200 and second.result().status_code == 200
    m = scrape(stack.url)
    assert m[("agentrl_upstream_waiting", labels(task="calc", worker=address))] == 0
    assert m[("agentrl_sessions", labels(task="calc", state="busy"))] == 0
    assert m[("agentrl_sessions", labels(task="calc", state="running"))] == 3
    assert m[("agentrl_interacts_total", labels(task="calc", status="running"))] == 2

    interact(stack.url, a, call("answer", '{"value": 5}'))
    httpx.post(f"{stack.url}/api/cancel", headers={"session_id": str(b)})
    interact(stack.url, idle, RENEWAL)
    m = scrape(stack.url)
    assert m[("agentrl_sessions_ended_total", labels(task="calc", status="completed"))] == 1
    assert m[("agentrl_sessions_ended_total", labels(task="calc", status="cancelled"))] == 1
    assert m[("agentrl_renewals_total", labels(task="calc"))] == 1
    assert m[("agentrl_interacts_total", labels(task="calc", status="completed"))] == 1
    assert ("agentrl_request_seconds_bucket", labels(endpoint="interact", task="calc", le="+Inf")) in m

    worker.stop()
    out = interact(stack.url, idle, call("add", '{"x": 1}')).json()
    assert out["status"] == "task error"
    m = scrape(stack.url)
    assert m[("agentrl_workers_dead_total", labels(task="calc"))] == 1
    assert m[("agentrl_worker_up", labels(task="calc", worker=address))] == 0  # declared dead, not forgotten
    assert m[("agentrl_sessions_ended_total", labels(task="calc", status="task error"))] == 1
    assert m.get(("agentrl_sessions", labels(task="calc", state="running")), 0) == 0
