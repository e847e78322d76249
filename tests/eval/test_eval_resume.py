"""--resume: an interrupted run is finished with nothing lost and nothing played twice.

The kill test runs ``agentrl-envs eval`` as a subprocess against the real embedded controller and
``echo`` worker, freezes it with episodes in flight (the scripted model stops answering), kills
it with SIGKILL, cuts its last line in half as a crash mid-write would, and resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from conftest import first_turn_requests

from agentrl_envs.errors import AgentRLEnvsError
from agentrl_envs.eval import run_eval
from agentrl_envs.eval.store import read_records


def scripted(word: str, turn: int) -> tuple[str, str]:
    """river and cloud: wrong then right; stone: always wrong; the rest right at once."""
    if word in ("river", "cloud") and turn == 0:
        return ("call", word + "s")
    if word == "stone":
        return ("call", "pebble")
    return ("call", word)


def keys(records: list[dict]) -> list[tuple]:
    return [(r["model"], r["task"], r["index"], r["run"]) for r in records]


def eval_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "agentrl_envs.cli", "eval", "--no-progress", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_sigkilled_run_resumes_with_nothing_lost_and_nothing_repeated(echo_stack, model, tmp_path):
    fake, base_url = model(name="alpha", policies={"beta": scripted})
    out = tmp_path / "run"
    planned = {(m, "echo", i, r) for m in ("alpha", "beta") for i in range(8) for r in range(2)}
    fake.gate_after = 12  # then every request waits: the run freezes with 3 episodes in flight
    proc = eval_process(
        "--tasks", "echo", "--model", "alpha", "--model", "beta", "--runs", "2", "--max-turns", "3",
        "--concurrency", "3", "--controller", echo_stack, "--base-url", base_url, "--output", str(out),
    )  # fmt: skip
    try:
        wait_for(lambda: fake.waiting == 3 or proc.poll() is not None, "the run to freeze with 3 episodes in flight")
        assert proc.poll() is None, proc.stdout.read()
        # each worker records an episode before it asks for the next one: the journal is complete now
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sys.exc_info()[0] is not None:
            fake.gate.set()  # let the server stop
    assert proc.returncode == -signal.SIGKILL
    journal = out / "trajectories.jsonl"
    records = read_records(journal)
    before = dict(zip(keys(records), records, strict=True))
    assert 0 < len(before) < len(planned) and set(before) <= planned
    assert not (out / "summary.json").exists() and (out / "config.json").exists()
    with journal.open("ab") as f:  # a crash in the middle of a write leaves half a line
        f.write(json.dumps(next(iter(before.values())))[:40].encode())

    # a new run may not overwrite the unfinished one
    with pytest.raises(AgentRLEnvsError, match="unfinished run.*--resume"):
        run_eval({"tasks": "echo", "output": out, "base_url": base_url, "controller": echo_stack})

    fake.gate.set()  # the frozen requests of the dead process get their answers now
    wait_for(lambda: fake.waiting == 0, "the frozen requests to be answered")
    fake.gate_after = None
    fake.requests.clear()
    resumed = eval_process("--resume", str(out), "--concurrency", "4")  # the rest comes from config.json
    printed, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, printed

    final = read_records(journal)
    assert Counter(keys(final)) == Counter(planned)  # every planned episode, each exactly once
    for record in final:  # what was recorded before the kill is kept as it was
        key = (record["model"], record["task"], record["index"], record["run"])
        if key in before:
            assert record == before[key]
    # the resumed process started exactly the episodes that had no record
    assert first_turn_requests(fake) == Counter((m, WORDS[i]) for m, _, i, _ in planned - set(before))
    assert all(r["infra_error"] is None for r in final)

    summary = json.loads((out / "summary.json").read_text())
    beta = summary["by_model"]["beta"]["tasks"]["echo"]
    assert (beta["n"], beta["avg_at_k"], beta["pass_at_k"]) == (16, 7 / 8, 7 / 8)
    assert summary["by_model"]["alpha"]["tasks"]["echo"]["avg_at_k"] == 1.0
    assert f"resumed: {len(before)} episodes were already scored" in printed
    assert "side by side:" in printed and "avg@2" in printed


WORDS = ("apple", "river", "stone", "cloud", "ember", "maple", "quartz", "harbor")


def test_resume_plays_infrastructure_failures_again_and_nothing_else(controller, model, tmp_path):
    fake_controller, url = controller
    _, base_url = model()
    out = tmp_path / "run"
    fake_controller.start_failures = {2: -1}  # never starts
    args = {"tasks": "echo", "limit": 4, "runs": 2, "controller": url, "base_url": base_url, "output": out}
    assert run_eval({**args, "max_retries": 0, "retry_backoff": 0.001, "progress": False}) == 3
    first = read_records(out / "trajectories.jsonl")
    assert sorted(keys(first)) == sorted(("fake-model", "echo", i, r) for i in range(4) for r in range(2))
    assert [r["index"] for r in first if r["infra_error"]] == [2, 2]
    assert dict(fake_controller.starts) == {0: 2, 1: 2, 2: 2, 3: 2}

    fake_controller.start_failures = {}
    assert run_eval({"resume": out, "progress": False}) == 0
    assert dict(fake_controller.starts) == {0: 2, 1: 2, 2: 4, 3: 2}  # only index 2's two runs again
    final = read_records(out / "trajectories.jsonl")
    assert sorted(keys(final)) == sorted(keys(first))
    assert all(r["infra_error"] is None and r["success"] for r in final)
    assert json.loads((out / "summary.json").read_text())["tasks"]["echo"]["infra_failures"] == 0

    # a finished run resumed: nothing to play
    assert run_eval({"resume": out, "progress": False}) == 0
    assert dict(fake_controller.starts) == {0: 2, 1: 2, 2: 4, 3: 2}


def test_resume_refuses_to_change_what_is_measured(controller, model, tmp_path):
    _, url = controller
    _, base_url = model()
    out = tmp_path / "run"
    assert run_eval({"tasks": "echo", "limit": 2, "controller": url, "base_url": base_url, "output": out, "progress": False}) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["model"] == ["fake-model"]  # resolved from /v1/models, so a resume asks the same model
    assert "api_key" not in config["config"] and config["indices"] == {"echo": [0, 1]}

    for given, flag in (
        ({"model": "other"}, "--model"),
        ({"tasks": "echo,db"}, "--tasks"),
        ({"runs": 3}, "--runs"),
        ({"temperature": 0.7}, "--temperature"),
        ({"option": ["echo.level=2"]}, "--task-options"),
        ({"output": tmp_path / "elsewhere"}, "--output"),
    ):
        with pytest.raises(AgentRLEnvsError, match=flag):
            run_eval({"resume": out, **given})
    with pytest.raises(AgentRLEnvsError, match="config.json"):
        run_eval({"resume": tmp_path / "nothing-here"})
    with pytest.raises(AgentRLEnvsError, match="--tasks is required"):
        run_eval({"output": out})
    # the same values, and settings that do not change what is measured, are accepted
    given = {"model": "fake-model", "tasks": ["echo"], "limit": 2, "concurrency": 1, "max_retries": 0, "progress": False}
    assert run_eval({"resume": out, **given}) == 0


def test_resume_refuses_a_controller_serving_other_samples(controller, model, tmp_path):
    fake_controller, url = controller
    _, base_url = model()
    out = tmp_path / "run"
    assert run_eval({"tasks": "echo", "limit": 3, "controller": url, "base_url": base_url, "output": out, "progress": False}) == 0
    os.remove(out / "summary.json")
    saved = json.loads((out / "config.json").read_text())
    saved["indices"]["echo"] = [5, 6, 7]  # as if the run had started on another split
    (out / "config.json").write_text(json.dumps(saved))
    with pytest.raises(AgentRLEnvsError, match="other samples of task 'echo'"):
        run_eval({"resume": out, "progress": False})
    assert sum(fake_controller.starts.values()) == 3  # nothing was played
