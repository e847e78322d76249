"""`agentrl-envs up --backend docker`: the DB task served from containers, checked and evaluated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from docker_helpers import built_images, client  # noqa: F401 - fixtures
from fastapi import FastAPI, Request
from stack_helpers import ServerThread

from agentrl_envs.containers.engine import STACK_LABEL
from agentrl_envs.containers.up import DockerStack
from agentrl_envs.stack import free_port

pytestmark = pytest.mark.docker


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentrl_envs.cli", *args]


def answer_zero_model() -> FastAPI:
    """An OpenAI-compatible endpoint that answers at once: ``commit_final_answer(["0"])`` (db), ``answer_action("0")`` (os)."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "zero", "object": "model", "created": 0, "owned_by": "test"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        tools = {t["function"]["name"] for t in (await request.json()).get("tools", [])}
        name, args = (
            ("answer_action", '{"answer": "0"}') if "answer_action" in tools else ("commit_final_answer", '{"answers": ["0"]}')
        )
        call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {
            "id": "x", "object": "chat.completion", "created": 0, "model": "zero",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip

    return app


def test_db_and_os_from_containers_pass_check_and_eval(built_images, client, tmp_path):  # noqa: F811
    model = ServerThread(answer_zero_model()).start()
    try:
        with DockerStack(["db", "os"]) as stack:
            assert set(stack.health().values()) == {"healthy"}
            ids = {c.id for c in stack.containers.values()}
            assert {c.id for c in client.containers.list(filters={"label": f"{STACK_LABEL}={stack.id}"})} == ids
            check = subprocess.run(cli("check", "db", "--controller", stack.url, "--json"), capture_output=True, text=True)
            assert check.returncode == 0, check.stderr[-2000:]
            assert json.loads(check.stdout)["solved"] == 60
            check = subprocess.run(cli("check", "os", "--controller", stack.url, "--json"), capture_output=True, text=True)
            assert check.returncode == 0, check.stderr[-2000:]
            assert json.loads(check.stdout)["solved"] >= 24, "every dev sample with a reference solution"
            out = tmp_path / "eval"
            ev = subprocess.run(
                cli("eval", "--tasks", "db,os", "--limit", "2", "--controller", stack.url, "--base-url", f"{model.url}/v1",
                    "--output", str(out), "--no-progress"),
                capture_output=True, text=True,
            )  # fmt: skip
            assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-2000:]
            lines = (out / "trajectories.jsonl").read_text().splitlines()
            assert sorted(json.loads(line)["task"] for line in lines) == ["db", "db", "os", "os"]
        assert not client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={stack.id}"}), "teardown by id"
        assert not client.containers.list(all=True, filters={"label": "agentrl.sandbox"}), "no OS session container left"
    finally:
        model.stop()


def test_os_worker_modes_socket_free_by_default_socket_opt_in(built_images, client):  # noqa: F811
    """Default: the OS worker has no engine socket and no capability, its sessions are sandboxes
    inside it (no session container appears). With the option backend=docker it gets the socket
    and its sessions are sibling containers. Both pass the OS task's reference check."""
    for options, socket in (({}, False), ({"backend": "docker"}, True)):
        with DockerStack(["os"], task_options={"os": options}) as stack:
            attrs = stack.containers["worker-os"].attrs
            binds = attrs["HostConfig"].get("Binds") or []
            assert any("docker.sock" in b for b in binds) is socket, binds
            if not socket:
                assert attrs["HostConfig"]["CapDrop"] == ["ALL"] and attrs["Config"]["User"] == "2000:2000"
            check = subprocess.run(cli("check", "os", "--controller", stack.url, "--json"), capture_output=True, text=True)
            assert check.returncode == 0, check.stderr[-2000:]
            assert json.loads(check.stdout)["solved"] >= 24, "every dev sample with a reference solution"
            sessions = client.containers.list(all=True, filters={"label": "agentrl.sandbox"})
            assert bool(sessions) is socket, "sessions are containers only in the socket mode (a warm pool stays)"
        assert not client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={stack.id}"}), "teardown by id"
        assert not client.containers.list(all=True, filters={"label": "agentrl.sandbox"}), "no session container left"


def test_docker_stack_with_tokens(built_images, client):  # noqa: F811
    """Tokens reach the containers through their environment (not their command line): the
    controller refuses a client without the token, the worker registered with the secret, and a
    client with the token checks the task. Loopback, as every test here."""
    with DockerStack(["db"], client_token="c-token-dock", worker_secret="w-secret-dock") as stack:
        assert httpx.get(f"{stack.url}/health").status_code == 200
        assert httpx.get(f"{stack.url}/api/list_workers").status_code == 401
        workers = httpx.get(f"{stack.url}/api/list_workers", headers={"Authorization": "Bearer c-token-dock"}).json()
        assert "db" in json.dumps(workers)
        env = {**os.environ, "AGENTRL_CLIENT_TOKEN": "c-token-dock"}
        check = subprocess.run(cli("check", "db", "--controller", stack.url, "--json"), capture_output=True, text=True, env=env)
        assert check.returncode == 0, check.stderr[-2000:]
        assert json.loads(check.stdout)["solved"] == 60
        for role, c in stack.containers.items():
            c.reload()
            assert "c-token-dock" not in " ".join(c.attrs["Args"]) and "w-secret-dock" not in " ".join(c.attrs["Args"])
            env_vars = c.attrs["Config"]["Env"]
            assert ("AGENTRL_CLIENT_TOKEN=c-token-dock" in env_vars) is (role == "controller"), role
            assert "AGENTRL_WORKER_SECRET=w-secret-dock" in env_vars
            assert "c-token-dock" not in c.logs().decode(errors="replace")


def test_kg_from_a_container_passes_check(built_images, client):  # noqa: F811
    with DockerStack(["kg"]) as stack:
        assert set(stack.health().values()) == {"healthy"}
        check = subprocess.run(cli("check", "kg", "--controller", stack.url, "--json"), capture_output=True, text=True)
        assert check.returncode == 0, check.stderr[-2000:]
        report = json.loads(check.stdout)
        assert report["solved"] == report["total"] == 36
    assert not client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={stack.id}"}), "teardown by id"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_up_backend_docker_serves_then_removes_its_containers(built_images, client, sig):  # noqa: F811
    port = free_port()
    proc = subprocess.Popen(
        cli("up", "--backend", "docker", "--tasks", "db", "--port", str(port)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while not any(STACK_LABEL in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stdout.readline())
        assert f"http://127.0.0.1:{port}/api" in "".join(lines)
        stack_id = next(line for line in lines if STACK_LABEL in line).split(f"{STACK_LABEL}=")[1].split()[0]
        r = httpx.post(f"http://127.0.0.1:{port}/api/start_sample", json={"name": "db", "index": 0})
        assert r.status_code == 200 and r.json()["tools"][0]["function"]["name"] == "execute_sql"
        assert len(client.containers.list(filters={"label": f"{STACK_LABEL}={stack_id}"})) == 2
        proc.send_signal(sig)
        assert proc.wait(60) == 0
        assert not client.containers.list(all=True, filters={"label": f"{STACK_LABEL}={stack_id}"})
    finally:
        if proc.poll() is None:
            proc.kill()
