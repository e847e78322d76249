"""Controller and worker over real loopback HTTP: protocol, bad inputs, isolation, failures."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import httpx
from stack_helpers import wait_for
from tasks_for_tests import Calc, call

from agentrl_envs import tool
from agentrl_envs.tasks.echo import EchoTask


def start(url: str, name: str = "calc", index: int = 0) -> tuple[int, dict]:
    r = httpx.post(f"{url}/api/start_sample", json={"name": name, "index": index})
    assert r.status_code == 200, r.text
    return int(r.headers["session_id"]), r.json()


def interact(url: str, sid: int, message: dict, timeout: float = 30) -> httpx.Response:
    return httpx.post(f"{url}/api/interact", headers={"session_id": str(sid)}, json={"messages": [message]}, timeout=timeout)


def assert_error(r: httpx.Response, status: int, code: str, text: str = "") -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and text in body["detail"], body


def test_full_episode_through_controller(make_stack):
    stack = make_stack()
    stack.add_worker(Calc)
    assert httpx.get(f"{stack.url}/api/get_indices", params={"name": "calc"}).json() == [0, 1]
    sid, first = start(stack.url)
    assert first["messages"][0]["content"] == "What is 2 + 3?"
    assert {t["function"]["name"] for t in first["tools"]} == {"add", "answer", "nap", "explode"}
    out = interact(stack.url, sid, call("add", '{"x": 2, "y": 3}')).json()
    assert out == {
        "finish": False,
        "reward": 0,
        "status": "running",
        "messages": [{"role": "tool", "tool_call_id": "c1", "content": "5"}],
        "metrics": {"turns": 1, "tool_errors": 0},
    }
    out = interact(stack.url, sid, call("answer", '{"value": 5}')).json()
    assert out["finish"] and out["reward"] == 1.0 and out["status"] == "completed"
    assert sid not in {s["session_id"] for s in httpx.get(f"{stack.url}/api/list_sessions").json()}
    metrics = httpx.get(f"{stack.url}/metrics").text
    assert 'agentrl_interacts_total{status="completed",task="calc"} 1.0' in metrics
    assert "agentrl_request_seconds_bucket" in metrics and "agentrl_active_sessions" in metrics
    assert httpx.get(f"{stack.url}/health").json()["live_workers"] == {"calc": 1}


def test_bad_inputs_get_clear_errors_and_leave_other_sessions_alone(make_stack):
    stack = make_stack()
    stack.add_worker(Calc, concurrency=3)
    url = stack.url
    bystander, _ = start(url, index=1)
    victim, _ = start(url)

    # Transport-level mistakes: HTTP errors in one shape.
    assert_error(
        httpx.post(f"{url}/api/interact", headers={"session_id": str(victim)}, content=b"{not json"),
        400,
        "session_error",
        "not valid JSON",
    )
    assert_error(
        httpx.post(f"{url}/api/interact", headers={"session_id": str(victim)}, json={"msgs": []}),
        422,
        "invalid_request",
        "messages",
    )
    assert_error(httpx.post(f"{url}/api/interact", json={"messages": []}), 400, "session_error", "missing `session_id` header")
    assert_error(
        httpx.post(f"{url}/api/interact", headers={"session_id": "abc"}, json={"messages": []}),
        400,
        "session_error",
        "must be an integer",
    )
    assert_error(interact(url, 123456789, call("add", '{"x": 1}')), 404, "unknown_session", "no session 123456789")
    assert_error(httpx.post(f"{url}/api/start_sample", content=b"[]"), 422, "invalid_request", "invalid request body")
    assert_error(httpx.post(f"{url}/api/start_sample", json={"name": "calc", "index": 9}), 404, "unknown_sample", "no sample 9")
    assert_error(
        httpx.post(f"{url}/api/start_sample", json={"name": "nope", "index": 0}),
        503,
        "no_worker",
        "no live worker serves task 'nope'",
    )
    assert_error(
        interact(url, victim, {"role": "assistant", "tool_calls": [{"id": "x"}]}),
        422,
        "invalid_request",
        "invalid assistant message",
    )

    # Model mistakes: readable tool messages, the episode goes on.
    for args, text in [("{oops", "not valid JSON"), ('{"x": "a"}', "valid integer"), ("{}", "missing required argument `x`")]:
        out = interact(url, victim, call("add", args)).json()
        assert not out["finish"] and text in out["messages"][0]["content"]

    # Two concurrent interacts on one session: exactly one runs, the other is refused.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        slow = pool.submit(interact, url, bystander, call("nap", '{"seconds": 1.0}'))
        time.sleep(0.3)
        second = interact(url, bystander, call("add", '{"x": 1}'))
        assert_error(second, 409, "session_busy", "one step at a time")
        assert slow.result().json()["messages"][0]["content"] == "awake"

    # Interact on a finished session.
    out = interact(url, victim, call("answer", '{"value": 5}')).json()
    assert out["finish"] and out["status"] == "completed"
    assert_error(interact(url, victim, call("add", '{"x": 1}')), 409, "session_finished", "already ended with status 'completed'")

    # The bystander was never disturbed: it still finishes normally.
    out = interact(url, bystander, call("answer", '{"value": 6}')).json()
    assert out["finish"] and out["reward"] == 1.0


def test_capacity_limit_is_406_with_data_and_frees_on_cancel(make_stack):
    stack = make_stack()
    stack.add_worker(Calc)  # Calc.concurrency == 2
    a, _ = start(stack.url)
    start(stack.url)
    r = httpx.post(f"{stack.url}/api/start_sample", json={"name": "calc", "index": 0})
    assert_error(r, 406, "capacity_exceeded", "full")
    assert r.json()["data"] == {"active_sessions": 2, "max_sessions": 2}
    assert httpx.post(f"{stack.url}/api/cancel", headers={"session_id": str(a)}).status_code == 200
    assert_error(interact(stack.url, a, call("add", '{"x": 1}')), 409, "session_finished", "cancelled")
    start(stack.url)


def test_dispatch_prefers_the_worker_with_most_free_slots_and_skips_stale(make_stack):
    stack = make_stack()
    w1 = stack.add_worker(Calc, concurrency=4)
    w2 = stack.add_worker(Calc, concurrency=4)
    sids = [start(stack.url)[0] for _ in range(4)]
    per_worker = {w["address"]: w["current"] for w in httpx.get(f"{stack.url}/api/list_workers").json()["calc"]}
    assert sorted(per_worker.values()) == [2, 2], per_worker
    workers = httpx.get(f"{stack.url}/api/list_workers").json()["calc"]
    stale = next(w for w in workers if w["address"] == f"{w1.url}/api")
    assert (
        httpx.post(f"{stack.url}/api/mark_stale", json={"name": "calc", "worker_id": stale["id"], "stale": True}).status_code
        == 200
    )
    new = [start(stack.url)[0] for _ in range(2)]
    after = {w["address"]: w["current"] for w in httpx.get(f"{stack.url}/api/list_workers").json()["calc"]}
    assert after[f"{w1.url}/api"] == 2 and after[f"{w2.url}/api"] == 4
    assert len(set(sids + new)) == 6


def test_worker_death_ends_its_sessions_as_task_error_and_rejoin_works(make_stack):
    stack = make_stack(heartbeat_timeout=1.0, dead_after=2.0)
    worker = stack.add_worker(Calc)
    sid, _ = start(stack.url)
    worker.stop()
    out = interact(stack.url, sid, call("add", '{"x": 1}')).json()
    assert out["finish"] and out["status"] == "task error" and "died" in out["metrics"]["error"]
    assert_error(interact(stack.url, sid, call("add", '{"x": 1}')), 409, "session_finished", "task error")
    r = httpx.post(f"{stack.url}/api/start_sample", json={"name": "calc", "index": 0})
    assert_error(r, 503, "no_worker")
    stack.add_worker(Calc, port=worker.port)  # the same address comes back and re-registers
    sid2, _ = start(stack.url)
    assert interact(stack.url, sid2, call("answer", '{"value": 5}')).json()["reward"] == 1.0


def _silence_heartbeats(service) -> None:
    """From now on the controller drops every heartbeat (as when the worker's beats are starved)."""
    known = service.heartbeat

    def drop(req):
        for w in service.workers.values():
            if w.name == req.name and w.address == req.address:
                return w
        return known(req)

    service.heartbeat = drop
    for w in service.workers.values():
        w.last_heartbeat -= 5


def test_a_silent_worker_that_answers_keeps_its_sessions_and_gets_new_ones_only_while_it_answers(make_stack):
    stack = make_stack(heartbeat_timeout=0.5, dead_after=1.0)
    stack.add_worker(EchoTask)
    sid, _ = start(stack.url, "echo")
    service = stack.service
    _silence_heartbeats(service)
    [worker] = service.workers.values()
    wait_for(lambda: worker.last_probe > 0 and not worker.probing, timeout=10)  # probed, answered
    time.sleep(1.5)  # past dead_after again: probed again, still alive
    assert list(service.workers.values()) == [worker] and not worker.dead
    r = httpx.post(f"{stack.url}/api/start_sample", json={"name": "echo", "index": 0})
    assert_error(r, 503, "no_worker")  # no heartbeat and no routed answer lately: no new sessions
    out = interact(stack.url, sid, call("echo", '{"text": "x"}'))
    assert out.status_code == 200 and out.json()["status"] != "task error"  # its session goes on
    # Answering a routed request shows it serves: late heartbeats alone do not stop dispatch
    # (under load the controller itself queues them behind session traffic).
    start(stack.url, "echo")


def test_a_silent_worker_that_does_not_answer_is_dead_and_its_sessions_end(make_stack):
    stack = make_stack(heartbeat_timeout=0.5, dead_after=1.0)
    worker = stack.add_worker(EchoTask)
    sid, _ = start(stack.url, "echo")
    service = stack.service
    _silence_heartbeats(service)
    worker.stop()
    wait_for(lambda: not service.workers)
    assert_error(interact(stack.url, sid, call("echo", '{"text": "x"}')), 409, "session_finished", "/health did not answer")


def test_idle_sessions_expire_on_the_worker(make_stack):
    stack = make_stack()
    stack.add_worker(Calc, idle_timeout=0.3)
    sid, _ = start(stack.url)
    time.sleep(1.0)
    out = interact(stack.url, sid, call("add", '{"x": 1}')).json()
    assert out["finish"] and out["status"] == "task error" and "rejected the step (404)" in out["metrics"]["error"]


def test_a_step_past_the_interaction_timeout_ends_as_task_error(make_stack):
    stack = make_stack()
    stack.add_worker(Calc, interaction_timeout=0.3)
    sid, _ = start(stack.url)
    out = interact(stack.url, sid, call("nap", '{"seconds": 5}')).json()
    assert out["finish"] and out["status"] == "task error" and "step exceeded 0.3 s" in out["metrics"]["error"]


class StallingEcho(EchoTask):
    name = "stall"

    @tool
    async def stall(self, seconds: float) -> str:
        """Block the worker's event loop (a badly written tool, or a loop saturated by traffic).

        Args:
            seconds: How long to block.
        """
        time.sleep(seconds)
        return "done"


def test_heartbeats_go_on_while_the_workers_event_loop_is_blocked(make_stack):
    """The worker beats from a thread of its own: a loop blocked for 3 s (past dead_after, and the
    /health probe cannot be answered either) does not get the worker declared dead."""
    stack = make_stack(heartbeat_timeout=0.5, dead_after=1.0)
    stack.add_worker(StallingEcho, heartbeat_interval=0.2)
    sid, _ = start(stack.url, "stall")
    [worker] = stack.service.workers.values()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stalled = pool.submit(interact, stack.url, sid, call("stall", '{"seconds": 3}'))
        time.sleep(2.5)  # the loop is blocked; the heartbeat thread still beats
        assert list(stack.service.workers.values()) == [worker] and not worker.dead
        out = stalled.result()
    assert out.status_code == 200 and out.json()["messages"][0]["content"] == "done"


def test_a_restarted_controller_reports_lost_sessions_and_reconciles_its_workers(make_stack):
    """After a controller restart: a session of the earlier run is ``session_lost`` (410, an
    infrastructure failure to retry), not "unknown"; the worker re-registers, the sessions it
    still holds are cancelled (nothing idles until the idle timeout), new sessions work."""
    from agentrl_envs.controller import ControllerService, create_controller_app
    from agentrl_envs.stack import ServerThread

    stack = make_stack(heartbeat_timeout=2.0)
    worker = stack.add_worker(Calc, heartbeat_interval=0.2)
    sid, _ = start(stack.url)
    assert httpx.get(f"{worker.url}/api/worker_status").json()["current"] == 1
    port = stack.controller.port
    stack.controller.stop()
    time.sleep(0.002)  # the next run's ids start from a later millisecond
    stack.service = ControllerService(heartbeat_timeout=2.0)
    stack.controller = ServerThread(create_controller_app(stack.service), port=port).start()
    assert_error(interact(stack.url, sid, call("add", '{"x": 1}')), 410, "session_lost", "earlier run of this controller")
    assert_error(httpx.post(f"{stack.url}/api/cancel", headers={"session_id": str(sid)}), 410, "session_lost")
    assert_error(interact(stack.url, 123, call("add", '{"x": 1}')), 404, "unknown_session")
    wait_for(lambda: httpx.get(f"{stack.url}/api/list_workers").json().get("calc"))
    wait_for(lambda: httpx.get(f"{worker.url}/api/worker_status").json()["current"] == 0)
    new, _ = start(stack.url)
    assert interact(stack.url, new, call("answer", '{"value": 5}')).json()["status"] == "completed"


class HangingEcho(EchoTask):
    name = "hang"
    finished = threading.Event()

    @tool
    async def hang(self, seconds: float) -> str:
        """Block the worker's event loop, as a hung (SIGSTOPped) worker would.

        Args:
            seconds: How long to block.
        """
        time.sleep(seconds)
        HangingEcho.finished.set()
        return "done"


def test_requests_in_flight_to_a_worker_declared_dead_are_answered_at_once(make_stack):
    """A worker that stops answering everything (heartbeats, requests, /health) is declared dead
    after dead_after and a failed probe; the step in flight to it is answered ``task error`` then,
    while the worker is still hung, not when the interaction timeout fires."""
    from agentrl_envs.episode import TaskRuntime
    from agentrl_envs.stack import ServerThread
    from agentrl_envs.worker import WorkerService, create_worker_app

    stack = make_stack(heartbeat_timeout=0.5, dead_after=1.0, interaction_timeout=60.0)
    # No heartbeat thread: the test beats for the worker, and stops beating when it hangs.
    service = WorkerService(TaskRuntime(HangingEcho, split="dev"))
    worker = ServerThread(create_worker_app(service)).start()
    stack.workers.append(worker)
    beat = {"name": "hang", "address": f"{worker.url}/api", "concurrency": 8, "indices": list(range(8))}
    assert httpx.post(f"{stack.url}/api/receive_heartbeat", json=beat).status_code == 200
    sid, _ = start(stack.url, "hang")
    HangingEcho.finished.clear()
    out = interact(stack.url, sid, call("hang", '{"seconds": 8}'), timeout=60)
    assert not HangingEcho.finished.is_set(), "answered only after the worker came back"
    body = out.json()
    assert out.status_code == 200 and body["finish"] and body["status"] == "task error", body
    assert "did not answer" in body["metrics"]["error"], body
    HangingEcho.finished.wait(30)
