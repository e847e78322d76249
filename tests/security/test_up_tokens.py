"""The command line's wiring of tokens: ``agentrl-envs controller`` and ``worker`` take them from
the environment (never needing them on a command line), and ``up`` generates and prints them when
it listens beyond loopback. Loopback only: the stack below listens on 127.0.0.1 with tokens set."""

from __future__ import annotations

import httpx

from agentrl_envs import cli
from agentrl_envs.client import ControllerClient
from agentrl_envs.errors import AuthenticationError
from agentrl_envs.stack import LocalStack
from agentrl_envs.transport.auth import CLIENT_TOKEN_ENV, WORKER_SECRET_ENV


def test_a_local_stack_with_tokens(tmp_path):
    with LocalStack(["echo"], client_token="c-token-xyz", worker_secret="w-secret-xyz", log_dir=tmp_path) as stack:
        assert httpx.get(f"{stack.url}/health").status_code == 200
        assert httpx.get(f"{stack.url}/api/list_workers").status_code == 401
        with ControllerClient(stack.url, token="c-token-xyz") as c:
            sid, _ = c.start_sample("echo", 0)
            c.cancel(sid)
        try:
            ControllerClient(stack.url, token="wrong").get_indices("echo")
            raise AssertionError("a wrong token was let in")
        except AuthenticationError as e:
            assert "wrong token" in e.message
        procs = " ".join(" ".join(p.proc.args) for p in stack.processes)
        assert "c-token-xyz" not in procs and "w-secret-xyz" not in procs  # environment, not argv
    for log in tmp_path.glob("*.log"):
        text = log.read_text(errors="replace")
        assert "c-token-xyz" not in text and "w-secret-xyz" not in text


def test_up_beyond_loopback_generates_and_prints_tokens(monkeypatch, capsys):
    seen = {}

    class Exited:
        name = "controller"

        def alive(self) -> bool:
            return False  # `up` stops at its first look, after printing what it started

    class FakeStack:
        def __init__(self, tasks, **kwargs):
            seen.update(kwargs)
            self.url, self.port, self.log_dir, self.processes = "http://127.0.0.1:5020", 5020, "/tmp/x", [Exited()]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def failure(self):
            return "the controller exited"  # as LocalStack.failure() says when processes[0] exited

    monkeypatch.delenv(CLIENT_TOKEN_ENV, raising=False)
    monkeypatch.delenv(WORKER_SECRET_ENV, raising=False)
    monkeypatch.setattr("agentrl_envs.stack.LocalStack", FakeStack)
    for host, expect_tokens in (("0.0.0.0", True), ("127.0.0.1", False)):
        seen.clear()
        assert cli.main(["up", "--tasks", "echo", "--host", host]) == 1
        out = capsys.readouterr().out
        assert bool(seen["client_token"]) == expect_tokens and bool(seen["worker_secret"]) == expect_tokens
        if expect_tokens:
            assert len(seen["client_token"]) >= 40 and seen["client_token"] != seen["worker_secret"]
            assert f"{CLIENT_TOKEN_ENV}={seen['client_token']}" in out and f"{WORKER_SECRET_ENV}={seen['worker_secret']}" in out
        else:
            assert "tokens required" not in out


def test_up_backend_docker_beyond_loopback_passes_generated_tokens(monkeypatch, capsys):
    seen = {}

    def fake_up_docker(a, options, **kwargs):
        seen.update(kwargs)
        kwargs["announce"](5020)
        return 0

    monkeypatch.delenv(CLIENT_TOKEN_ENV, raising=False)
    monkeypatch.delenv(WORKER_SECRET_ENV, raising=False)
    monkeypatch.setattr("agentrl_envs.containers.up.cmd_up_docker", fake_up_docker)
    assert cli.main(["up", "--backend", "docker", "--tasks", "echo", "--host", "0.0.0.0"]) == 0
    out = capsys.readouterr().out
    assert len(seen["client_token"]) >= 40 and len(seen["worker_secret"]) >= 40 and not seen["insecure"]
    assert f"{CLIENT_TOKEN_ENV}={seen['client_token']}" in out and f"{WORKER_SECRET_ENV}={seen['worker_secret']}" in out
    seen.clear()
    assert cli.main(["up", "--backend", "docker", "--tasks", "echo", "--host", "0.0.0.0", "--insecure"]) == 0
    assert seen["client_token"] is None and seen["insecure"] is True
