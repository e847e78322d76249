"""`agentrl-envs conform --controller URL --task NAME`: the conformance suite over the wire
(agentrl_envs.conformance.wire) passes on workers that keep the protocol, through a real controller.

* The example Node.js worker (examples/node_worker, run with `node`, no Docker) passes every
  check, through the command line as a user runs it.
* Every task of ours, its worker a process of `agentrl-envs worker` (2 slots, so the capacity
  check fills it in two starts), passes; echo's round limit (1,000,000) is too long to play and
  its turn-limit check is skipped with the reason, as in the in-process suite.
* The example is exactly what `agentrl-envs new NAME --container` writes.

The controllers run in this process with an idle timeout of 2 s. The os task needs its sandbox
(tests/test_conformance.py's rule: skipped without it, failed under CI=true). Without `node` on
the PATH the Node worker's tests skip (fail under CI=true) (the container test in tests/containers/ builds its own).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from stack_helpers import wait_for
from test_conformance import require_runnable

import agentrl_envs
from agentrl_envs.cli import main
from agentrl_envs.conformance.wire import CHECKS, WireOptions, run_conformance
from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.stack import ManagedProcess, ServerThread, free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "node_worker"
IDLE_S = 2.0
# Its 24 reference replays take ~40 s through a worker of 2 slots; the same replays through a
# controller and a worker over HTTP (LocalStack) are tests/test_conformance.py's reference_replay.
REPLAYED_ELSEWHERE = {"alfworld"}


@pytest.fixture
def controller() -> Iterator[str]:
    server = ServerThread(create_controller_app(ControllerService(idle_timeout=IDLE_S))).start()
    yield server.url
    server.stop()


def start_worker(argv: list[str], controller: str, task: str, log: Path, timeout: float = 120.0) -> ManagedProcess:
    """A worker process that registers ``task`` with ``controller``, once it is live."""
    proc = ManagedProcess(task, argv, log)

    def live() -> bool:
        assert proc.alive(), f"the worker of {task} exited:\n{proc.log_tail()}"
        return any(w["alive"] for w in httpx.get(f"{controller}/api/list_workers").json().get(task, []))

    try:
        wait_for(live, timeout=timeout, interval=0.2)
    except BaseException:
        proc.stop()
        raise
    return proc


@pytest.fixture
def node_worker(controller: str, tmp_path: Path) -> Iterator[str]:
    """The example worker (`node worker.js`, 3 slots, its own idle timeout 2 s) behind ``controller``."""
    if shutil.which("node") is None:
        if os.environ.get("CI", "").lower() == "true":  # .ci/run installs Debian's nodejs
            pytest.fail("node is not on the PATH")
        pytest.skip("node is not on the PATH")
    argv = ["node", str(EXAMPLE / "worker.js"), "--controller", f"{controller}/api", "--port", str(free_port())]
    argv += ["--concurrency", "3", "--idle-timeout", str(IDLE_S), "--heartbeat-interval", "1", "--log-level", "warning"]
    proc = start_worker(argv, controller, "node_sum", tmp_path / "node.log", timeout=30)
    yield controller
    proc.stop()


def test_the_node_worker_passes_every_check_through_the_cli(node_worker):
    argv = [sys.executable, "-m", "agentrl_envs.cli", "conform", "--controller", node_worker, "--task", "node_sum"]
    argv += ["--idle-timeout", str(IDLE_S), "--worker-idle-timeout", str(IDLE_S), "--turn-limit", "10", "--settle", "3", "--json"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["passed"] and report["task"] == "node_sum"
    assert {r["name"]: r["outcome"] for r in report["results"]} == dict.fromkeys(CHECKS, "passed"), run.stdout
    notes = {r["name"]: r["notes"] for r in report["results"]}
    assert notes["turn_limit"] == ["round limit: 10"]
    assert any("its own idle timeout" in n for n in notes["idle_expiry"]), notes


def test_conform_exits_1_and_says_why_when_a_check_fails(node_worker):
    # The example's round limit is 10: told 5 or 12, the turn-limit check must fail and say so.
    argv = [sys.executable, "-m", "agentrl_envs.cli", "conform", "--controller", node_worker, "--task", "node_sum"]
    for limit, says in (
        ("5", "sample 0: expected the episode to end 'task limit reached' at round 5, got it still running"),
        ("12", "round 10 without a tool call: expected the episode to end at round 12 (the round limit), got it ended here"),
    ):
        run = subprocess.run([*argv, "--checks", "turn_limit", "--turn-limit", limit], capture_output=True, text=True, timeout=60)
        assert run.returncode == 1, run.stdout + run.stderr
        assert "FAILED  turn_limit" in run.stdout and says in run.stdout, run.stdout


@pytest.mark.parametrize("task", agentrl_envs.task_names())
def test_every_task_of_ours_passes_over_the_wire(task, controller, tmp_path):
    require_runnable(task)
    argv = [sys.executable, "-m", "agentrl_envs.cli", "worker", task, "--controller", f"{controller}/api"]
    argv += ["--port", str(free_port()), "--concurrency", "2", "--heartbeat-interval", "1", "--log-level", "warning"]
    proc = start_worker(argv, controller, task, tmp_path / f"{task}.log")
    checks = [c for c in CHECKS if not (c == "reference_replay" and task in REPLAYED_ELSEWHERE)]
    try:
        report = run_conformance(controller, task, options=WireOptions(idle_timeout=IDLE_S), checks=checks)
    finally:
        proc.stop()
    outcomes = {r.name: r.outcome for r in report.results}
    # a limit above what the checks play (echo's 1,000,000) and no move that ends the episode
    skipped = {"turn_limit", "ended_session"} if agentrl_envs.get_task(task).max_turns > 40 else set()
    if task == "bfcl":  # replies without a call end BFCL's user turns, then the entry: its verdict, no round limit
        skipped = {"turn_limit"}
    assert outcomes == {name: "skipped" if name in skipped else "passed" for name in checks}, report.text()
    if task == "bfcl":
        assert "the task ended the episode (status 'completed'" in report.result("turn_limit").message
    elif skipped:
        assert "no end within 40 rounds" in report.result("turn_limit").message
        assert "no end within 42 rounds" in report.result("ended_session").message
    if "reference_replay" in checks:  # replayed only once the worker's samples are seen to be the installed task's
        notes = report.result("reference_replay").notes
        assert notes[0] == "reference_policy of the task installed here", notes
        assert notes[1].startswith("for this worker's samples: ") and "the same tools and opening messages" in notes[1], notes


def test_the_example_is_what_new_container_writes(tmp_path, capsys):
    assert main(["new", "node_sum", "--container", "--dir", str(tmp_path / "w")]) == 0
    assert "agentrl-envs conform --image agentrl/worker-node_sum" in capsys.readouterr().out
    written = {p.relative_to(tmp_path / "w"): p.read_text() for p in (tmp_path / "w").rglob("*") if p.is_file()}
    example = {p.relative_to(EXAMPLE): p.read_text() for p in EXAMPLE.rglob("*") if p.is_file()}
    assert sorted(map(str, written)) == [
        "Dockerfile", "README.md", "data/dev.jsonl", "package.json", "protocol.js", "task.js", "worker.js",
    ]  # fmt: skip
    assert written == example, "examples/node_worker differs from `agentrl-envs new node_sum --container`: regenerate it"
    assert "HEALTHCHECK" in written[Path("Dockerfile")] and "ARG BASE_IMAGE=agentrl/base:latest" in written[Path("Dockerfile")]
    assert not any("{{" in text for text in written.values()), "a placeholder was left unfilled"


def test_conform_refuses_a_bad_option_saying_how_to_fix_it(capsys):
    assert main(["conform", "--controller", "http://127.0.0.1:9", "--task", "x", "--max-fill", "0"]) == 2
    assert "max_fill must be positive, got 0 (leave it unset for the default)" in capsys.readouterr().err
    assert main(["conform", "--controller", "http://127.0.0.1:9", "--task", "x", "--checks", "health,nope"]) == 2
    assert "unknown checks ['nope']" in capsys.readouterr().err
