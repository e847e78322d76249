"""`agentrl-envs list`, `describe` and `serve-model` as a user runs them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest
from stack_helpers import wait_for

from agentrl_envs.cli import main
from agentrl_envs.stack import free_port


def test_list_shows_tasks_splits_sizes_and_tools(capsys):
    assert main(["list", "--json"]) == 0
    rows = {(r["task"], r["split"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows[("db", "dev")]["samples"] == 60 and rows[("db", "dev")]["max_turns"] == 15
    assert rows[("db", "dev")]["tools"] == ["execute_sql", "commit_final_answer"]
    assert rows[("echo", "dev")]["samples"] == 8
    assert main(["list"]) == 0
    table = capsys.readouterr().out
    assert "db" in table and "execute_sql, commit_final_answer" in table


def test_describe_shows_a_tasks_splits_tools_and_the_options_it_accepts(capsys):
    assert main(["describe", "db", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["task"] == "db" and info["splits"]["dev"] == 60 and info["max_turns"] == 15
    assert [t["function"]["name"] for t in info["tools"]] == ["execute_sql", "commit_final_answer"]
    backend = next(o for o in info["options"] if o["name"] == "backend")
    assert backend["default"] == "sqlite" and backend["env"] == "AGENTRL_DB_BACKEND" and not backend["required"]
    # every option listed is one --option accepts, and no other
    from agentrl_envs.task_info import task_options

    names = {o["name"] for o in info["options"]}
    assert task_options("db", [f"{n}=x" for n in names]).keys() == names
    with pytest.raises(Exception, match="has no option"):
        task_options("db", ["no_such_option=1"])
    assert main(["describe", "echo"]) == 0
    text = capsys.readouterr().out
    assert "echo(text: string)" in text and "steps: int | None, default None  [AGENTRL_ECHO_STEPS]" in text
    assert "dev (8)" in text and "load (100)" in text
    assert main(["describe", "nosuchtask"]) == 2
    assert "unknown task 'nosuchtask'; installed tasks: " in capsys.readouterr().err


@pytest.mark.model
def test_serve_model_command_serves_openai_api_and_stops_on_sigterm():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl_envs.cli", "serve-model", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def healthy() -> bool:
            assert proc.poll() is None, "serve-model exited"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, timeout=180, interval=0.5)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models").json()
        assert models["data"][0]["id"]
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises SIGTERM: exit status 128 + 15.
        assert proc.wait(30) in (0, 143)
    finally:
        if proc.poll() is None:
            proc.kill()
