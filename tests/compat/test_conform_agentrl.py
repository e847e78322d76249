"""Workers written the way AgentRL writes them pass the wire-level suite (agentrl_envs.conformance.wire);
deliberately broken ones fail the check whose rule they break, saying what was expected and what came.

Each task is written against AgentRL's SDK and served by its ``TaskWorker`` (agentrl-worker 0.4.0
from PyPI, installed by ``make test``), a process registered with a controller of this process
(idle timeout 2 s):

* ``agentrl_calc_task.py``, in the style of AgentRL's simple-calculator example: a round without a
  tool call *ends* the episode ``agent validation failed``; arguments without descriptions;
* ``agentrl_guess_task.py``: a round without a tool call gets a reminder and the episode goes on;
  run with an idle timeout of its own.

Both pass every check that applies: ``reference_replay`` is skipped (they offer no references),
``/health``'s 404 is a note, the missing descriptions are advice. The broken ones: a worker that
never releases a cancelled session (the synchronous task that does not catch
``AgentCancelledException``), one that leaks a session past its idle time, one that answers a
step of a session its task ended with 200. A worker of another task that takes the name of one
installed here (``echo``) does not get that task's references replayed against it.

Under CI=true a missing agentrl-worker fails these tests instead of skipping them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agentrl_workers import agentrl_worker
from ci_helpers import require

from agentrl_envs.conformance.wire import CHECKS, WireOptions, run_conformance
from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.stack import ServerThread

pytestmark = pytest.mark.compat
require("agentrl.worker.task_worker")

IDLE_S = 2.0
OPTIONS = WireOptions(idle_timeout=IDLE_S, settle=3.0)


@pytest.fixture
def controller() -> Iterator[str]:
    server = ServerThread(create_controller_app(ControllerService(idle_timeout=IDLE_S))).start()
    yield server.url
    server.stop()


def notes_of(report: Any, check: str) -> str:
    return "\n".join(report.result(check).notes)


def test_a_task_that_ends_on_a_round_without_a_tool_call_passes(controller, tmp_path):
    with agentrl_worker("agentrl_calc_task.py", controller, "agentrl-calc", tmp_path / "calc.log"):
        report = run_conformance(controller, "agentrl-calc", options=OPTIONS)
    outcomes = {r.name: r.outcome for r in report.results}
    assert outcomes == {**dict.fromkeys(CHECKS, "passed"), "reference_replay": "skipped"}, report.text()
    assert "offers no reference" in report.result("reference_replay").message
    assert "/health answers 404" in notes_of(report, "health")
    # advice, not failure: OpenAI's schema asks for no argument descriptions
    assert "advice: " in notes_of(report, "tool_schemas") and "got none for ['a', 'b']" in notes_of(report, "tool_schemas")
    assert "a message without a tool call: the episode ends (status 'agent validation failed'" in notes_of(report, "bad_calls")
    assert "the answer does not mention 'JSON'" in notes_of(report, "bad_calls")
    # the round limit is reached with a call the worker advertises, since a round without one ends the episode
    assert report.result("turn_limit").notes == [
        'played calling add({"a": 0, "b": 0}): a round without a tool call ends the episode',
        "round limit: 5",
    ]
    assert report.result("ended_session").notes == ["ended at round 1 without a tool call: status 'agent validation failed'"]


def test_a_task_that_goes_on_after_a_round_without_a_tool_call_passes(controller, tmp_path):
    options = WireOptions(idle_timeout=IDLE_S, worker_idle_timeout=1.0, settle=3.0)
    with agentrl_worker("agentrl_guess_task.py", controller, "agentrl-guess", tmp_path / "guess.log", "--idle-timeout", "1"):
        report = run_conformance(controller, "agentrl-guess", options=options)
    outcomes = {r.name: r.outcome for r in report.results}
    assert outcomes == {**dict.fromkeys(CHECKS, "passed"), "reference_replay": "skipped"}, report.text()
    assert report.result("turn_limit").notes == ["round limit: 6"]
    assert report.result("ended_session").notes == ["ended at round 6 calling guess({\"n\": 0}): status 'task limit reached'"]
    assert "dropped by the worker after its own idle timeout (1 s)" in notes_of(report, "idle_expiry")
    assert not [n for n in notes_of(report, "tool_schemas").splitlines() if n], "its tools are fully described"


# (script, task, script arguments, options, checks run (None: all), the check that must fail, fragments of its message)
BROKEN: dict[str, tuple[str, str, list[str], WireOptions, list[str] | None, str, list[str]]] = {
    "a worker that never releases a cancelled session": (
        "agentrl_calc_task.py",
        "agentrl-calc",
        ["--broken", "keeps-cancelled"],
        OPTIONS,
        ["cancel"],
        "cancel",
        ["to release session", "after it was cancelled within 3 s, got it still in the worker's get_sessions"],
    ),
    "the same worker, its session expired by the controller": (
        "agentrl_calc_task.py",
        "agentrl-calc",
        ["--broken", "keeps-cancelled"],
        OPTIONS,
        ["idle_expiry"],
        "idle_expiry",
        [
            "to release session",
            "left idle for the controller's idle timeout (2 s) within 5 s, got it still in the worker's get_sessions",
        ],
    ),
    "a worker that leaks a session past its idle time": (
        "agentrl_guess_task.py",
        "agentrl-guess",
        ["--idle-timeout", "1", "--broken", "leaks-idle"],
        WireOptions(idle_timeout=IDLE_S, worker_idle_timeout=1.0, settle=3.0),
        None,
        "idle_expiry",
        ["to drop session", "idle for its own idle timeout (1 s), within 4 s; got it still in get_sessions"],
    ),
    "a task that reads its arguments catching only ValueError": (
        "agentrl_calc_task.py",
        "agentrl-calc",
        ["--broken", "reads-value-errors"],
        OPTIONS,
        ["bad_calls"],
        "bad_calls",
        [
            "round 3 (arguments nested too deeply): expected the episode to go on, or to end with a status that puts"
            " the mistake on the model",
            "got it ended (status 'task error'",
        ],
    ),
    "a worker that answers a step of an ended session with 200": (
        "agentrl_calc_task.py",
        "agentrl-calc",
        ["--broken", "answers-ended"],
        OPTIONS,
        None,
        "ended_session",
        [
            "to refuse a step of session",
            "after it ended (status 'agent validation failed', reward 0, round 1 without a tool call) (HTTP 4xx),"
            " got POST /api/interact -> HTTP 200",
        ],
    ),
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_broken_agentrl_worker_fails_the_right_check(broken, controller, tmp_path):
    script, task, args, options, checks, check, fragments = BROKEN[broken]
    with agentrl_worker(script, controller, task, tmp_path / "worker.log", *args):
        report = run_conformance(controller, task, options=options, checks=checks)
    failed = {r.name for r in report.results if r.outcome == "failed"}
    assert failed == {check}, report.text()
    message = report.result(check).message
    assert message.startswith(f"task {task!r} at {controller}"), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


@pytest.mark.parametrize(
    ("samples", "says"),
    [
        ("100", "the worker serves 100 samples, the task 'echo' installed here (split 'dev') has 8: its references are not for"),
        ("8", "sample 0's tools ['add', 'subtract', 'submit'] are not those of the task 'echo' installed here (split 'dev')"),
    ],
)
def test_the_references_of_another_task_of_the_same_name_are_not_replayed(samples, says, controller, tmp_path):
    args = ["--name", "echo", "--samples", samples]
    with agentrl_worker("agentrl_calc_task.py", controller, "echo", tmp_path / "echo.log", *args):
        report = run_conformance(controller, "echo", options=OPTIONS, checks=["reference_replay"])
    result = report.result("reference_replay")
    assert result.outcome == "skipped", report.text()
    assert says in result.message and "and the worker offers no reference" in result.message, result.message
