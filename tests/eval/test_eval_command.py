"""run_eval(): the CLI entry, embedded services when --controller / --base-url are missing."""

from __future__ import annotations

import argparse
import json
import sys
import types

import pytest

from agentrl_envs.eval import EvalConfig, add_arguments, run_eval
from agentrl_envs.eval.command import parse_options


@pytest.fixture
def stand_ins(monkeypatch, controller, model):
    """Replace LocalStack and LocalModelServer with context managers over the in-process fakes."""
    fake_controller, controller_url = controller
    _, base_url = model()
    calls: dict[str, list] = {"stack": [], "server": [], "exited": []}

    class LocalStack:
        def __init__(self, tasks, **kwargs):
            calls["stack"].append({"tasks": tasks, **kwargs})
            self.url = controller_url

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls["exited"].append("stack")

    class LocalModelServer:
        def __init__(self, **kwargs):
            calls["server"].append(kwargs)
            self.base_url = base_url

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            calls["exited"].append("server")

    monkeypatch.setitem(sys.modules, "agentrl_envs.stack", types.SimpleNamespace(LocalStack=LocalStack))
    monkeypatch.setitem(sys.modules, "agentrl_envs.models.launch", types.SimpleNamespace(LocalModelServer=LocalModelServer))
    return fake_controller, calls


def test_embedded_defaults_start_and_stop_both_services(stand_ins, tmp_path, capsys):
    _, calls = stand_ins
    code = run_eval({"tasks": "echo", "limit": 3, "output": tmp_path, "progress": False, "option": ["echo.level=2"]})
    assert code == 0
    assert calls["stack"] == [{"tasks": ["echo"], "split": "dev", "task_options": {"echo": {"level": "2"}}}]
    assert calls["server"] == [{"dtype": "float32"}]
    assert sorted(calls["exited"]) == ["server", "stack"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tasks"]["echo"]["n"] == 3 and summary["tasks"]["echo"]["success_rate"] == 1.0
    out = capsys.readouterr().out
    assert "model: fake-model" in out and "echo" in out and "100.0%" in out


def test_given_urls_start_nothing(stand_ins, controller, model, tmp_path):
    _, calls = stand_ins
    _, url = controller
    _, base_url = model()
    code = run_eval({"tasks": "echo", "limit": 1, "controller": url, "base_url": base_url, "output": tmp_path, "progress": False})
    assert code == 0 and calls["stack"] == [] and calls["server"] == []


def eval_parser() -> argparse.ArgumentParser:
    """The flags of `agentrl-envs eval` (the whole CLI parser also imports the model server's module,
    which the stand-ins replace)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def test_cli_parses_flags_and_exit_code_reports_infra_failures(stand_ins, tmp_path, capsys):
    fake_controller, _ = stand_ins
    fake_controller.start_failures = {1: -1}
    argv = ["--tasks", "echo", "--limit", "2", "--max-retries", "0", "--retry-backoff", "0.001", "--no-progress"]
    args = eval_parser().parse_args([*argv, "--output", str(tmp_path), "--temperature", "0.3", "--max-tokens", "64"])
    assert (args.limit, args.temperature, args.max_tokens, args.progress) == (2, 0.3, 64, False)
    assert run_eval(args) == 3  # files are still written
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["tasks"]["echo"]["infra_failures"] == 1 and summary["tasks"]["echo"]["n"] == 1


def test_list_flags_take_commas_and_repeat():
    args = eval_parser().parse_args(["--tasks", "db,os", "--tasks", "kg", "--model", "a", "--model", "b,c", "--runs", "4"])
    config = EvalConfig.from_args(args)
    assert config.tasks == ["db", "os", "kg"] and config.model == ["a", "b", "c"] and config.runs == 4
    assert [s.model for s in config.model_slots()] == ["a", "b", "c"]
    assert {s.base_url for s in config.model_slots()} == {None}  # the built-in server for all
    shared = EvalConfig(tasks="db", model="a,b", base_url="http://h/v1", api_key="k1,k2")
    assert [(s.model, s.base_url, s.api_key) for s in shared.model_slots()] == [
        ("a", "http://h/v1", "k1"),
        ("b", "http://h/v1", "k2"),
    ]
    with pytest.raises(ValueError, match="3 model names, 2 base URLs: give one value shared by every model or one per model"):
        EvalConfig(tasks="db", model="a,b,c", base_url="http://x/v1,http://y/v1")
    with pytest.raises(ValueError, match="twice"):
        EvalConfig(tasks="db", model="a,a")
    with pytest.raises(ValueError, match="runs"):
        EvalConfig(tasks="db", runs=0)


def test_model_dtype_goes_to_the_built_in_server(stand_ins, tmp_path):
    _, calls = stand_ins
    assert run_eval({"tasks": "echo", "limit": 1, "output": tmp_path, "progress": False, "model_dtype": "bfloat16"}) == 0
    assert calls["server"] == [{"dtype": "bfloat16"}]
    assert json.loads((tmp_path / "config.json").read_text())["config"]["model_dtype"] == "bfloat16"


def test_bad_options_are_user_errors(tmp_path):
    from agentrl_envs.errors import AgentRLEnvsError

    with pytest.raises(AgentRLEnvsError, match="concurrency"):
        run_eval({"tasks": "echo", "concurrency": 0, "output": tmp_path})
    with pytest.raises(AgentRLEnvsError, match="TASK.KEY=VALUE"):
        run_eval({"tasks": "echo", "option": ["nodot=1"], "output": tmp_path})
    with pytest.raises(AgentRLEnvsError, match="model_dtype must be 'float32' or 'bfloat16'"):
        run_eval({"tasks": "echo", "model_dtype": "float16", "output": tmp_path})


def test_parse_options():
    assert parse_options(["db.backend=sqlite", "db.x=a=b", "os.y="]) == {"db": {"backend": "sqlite", "x": "a=b"}, "os": {"y": ""}}
    with pytest.raises(ValueError, match="TASK.KEY=VALUE"):
        parse_options(["backend=sqlite"])


@pytest.mark.slow
def test_real_local_stack_end_to_end(model, tmp_path):
    """The real embedded controller + echo worker (subprocesses), with the scripted model."""
    pytest.importorskip("agentrl_envs.stack")
    _, base_url = model()
    code = run_eval({"tasks": "echo", "limit": 3, "base_url": base_url, "output": tmp_path, "progress": False})
    assert code == 0
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(line)["status"] == "completed" for line in lines)
