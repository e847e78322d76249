"""A server past its file-descriptor budget answers new connections 503 ``overloaded`` at once
(a clear error) instead of leaving them unaccepted in the listen backlog (a hang)."""

from __future__ import annotations

import json
import resource
import socket
import sys
from pathlib import Path

import httpx
from stack_helpers import wait_for

from agentrl_envs.stack import ManagedProcess, free_port


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_connections_past_the_fd_budget_get_503_overloaded_not_a_hang(tmp_path: Path):
    port = free_port()
    # Limit 200 descriptors: the worker keeps a quarter in reserve and admits 150 connections.
    cmd = [sys.executable, "-c", "import resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)); "
           "from agentrl_envs.cli import main; sys.exit(main(sys.argv[1:]))",
           "worker", "echo", "--port", str(port), "--log-level", "warning"]  # fmt: skip
    worker = ManagedProcess("worker", cmd, tmp_path / "worker.log")
    socks: list[socket.socket] = []
    try:
        wait_for(lambda: not worker.alive() or healthy(port))
        assert "admitting up to 150 connections" in (tmp_path / "worker.log").read_text()
        answers: list[bytes] = []
        for _ in range(170):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            socks.append(s)  # kept open: the connections pile up
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            answers.append(s.recv(65536))  # a hang would time out here
        ok = [a for a in answers if a.startswith(b"HTTP/1.1 200")]
        refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
        assert len(ok) + len(refused) == 170 and 140 <= len(ok) <= 150 and len(refused) >= 20
        body = json.loads(refused[-1].split(b"\r\n\r\n", 1)[1])
        assert body["error"] == "overloaded" and body["data"]["max_connections"] == 150, body
        assert "ulimit -n" in body["detail"]
        for s in socks:
            s.close()
        socks.clear()
        wait_for(lambda: healthy(port))  # room again
        assert worker.alive()
    finally:
        for s in socks:
            s.close()
        worker.stop()


def test_the_soft_fd_limit_is_raised_to_the_hard_one():
    from agentrl_envs.transport.serve import raise_fd_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if hard != resource.RLIM_INFINITY and hard > 256:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        admitted = raise_fd_limit(512)
        now_soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert now_soft == (hard if hard != resource.RLIM_INFINITY else 1 << 20)
        assert admitted == now_soft - min(512, now_soft // 4)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_request_pipelined_behind_a_fast_route_is_refused_not_answered_out_of_order():
    """start_sample and interact are answered from the protocol, one at a time per connection: a
    second request sent before the first answer gets a clear 400 and the connection closes."""
    from agentrl_envs.episode import TaskRuntime
    from agentrl_envs.stack import ServerThread
    from agentrl_envs.tasks.echo import EchoTask
    from agentrl_envs.worker import WorkerService, create_worker_app

    server = ServerThread(create_worker_app(WorkerService(TaskRuntime(EchoTask, split="dev")))).start()
    try:

        def request(sid: int) -> bytes:
            body = json.dumps({"index": 0, "session_id": sid}).encode()
            return b"POST /api/start_sample HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(request(1))
            first = s.recv(65536)
            assert first.startswith(b"HTTP/1.1 200") and b"session_id: 1" in first  # one at a time: fine
            s.sendall(request(2) + request(3))
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 400") and b"pipelining is not supported" in answer
    finally:
        server.stop()
