"""Rotating client tokens without a restart: ``agentrl-envs controller --client-tokens-file F``
re-reads F on SIGHUP. A real controller process and worker on loopback."""

from __future__ import annotations

import os
import signal
import sys
import time

import httpx
from stack_helpers import wait_for

from agentrl_envs.stack import ManagedProcess, free_port
from agentrl_envs.transport.auth import WORKER_SECRET_ENV

ALICE, BOB, DAVE = "alice-rot-0123456789", "bob-rot-0123456789", "dave-rot-0123456789"
SECRET = "worker-rot-0123456789"


def h(token: str, sid: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **({"session_id": sid} if sid else {})}


def has_worker(url: str) -> bool:
    try:
        return bool(httpx.get(f"{url.removesuffix('/api')}/health", timeout=2).json()["live_workers"].get("echo"))
    except httpx.HTTPError:
        return False


def test_sighup_reloads_the_tokens_file(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"alice {ALICE}\nbob {BOB} max_sessions=1\n")
    tokens.chmod(0o600)
    env = {**os.environ, WORKER_SECRET_ENV: SECRET}
    cport, wport = free_port(), free_port()
    cli = [sys.executable, "-m", "agentrl_envs.cli"]
    ctrl = ManagedProcess(
        "controller", [*cli, "controller", "--port", str(cport), "--client-tokens-file", str(tokens)], tmp_path / "c.log", env=env
    )
    worker = ManagedProcess(
        "worker",
        [*cli, "worker", "echo", "--port", str(wport), "--controller", f"http://127.0.0.1:{cport}/api"],
        tmp_path / "w.log",
        env=env,
    )
    url = f"http://127.0.0.1:{cport}/api"
    try:
        wait_for(lambda: has_worker(url), timeout=60)
        bob = httpx.post(f"{url}/start_sample", headers=h(BOB), json={"name": "echo", "index": 0})
        assert bob.status_code == 200, bob.text
        sid = bob.headers["session_id"]

        tokens.write_text(f"bob {BOB} max_sessions=1\ndave {DAVE}\n")  # alice out, dave in
        os.kill(ctrl.proc.pid, signal.SIGHUP)
        wait_for(lambda: httpx.get(f"{url}/get_indices?name=echo", headers=h(ALICE)).status_code == 401, timeout=10)
        assert httpx.get(f"{url}/get_indices?name=echo", headers=h(DAVE)).status_code == 200
        # bob kept his principal: his open session answers him, and his quota still counts it
        step = {"messages": [{"role": "assistant", "content": "hi"}]}
        r = httpx.post(f"{url}/interact", headers=h(BOB, sid), json=step)
        assert r.status_code == 200, r.text
        over = httpx.post(f"{url}/start_sample", headers=h(BOB), json={"name": "echo", "index": 0})
        assert over.status_code == 429, over.text

        tokens.write_text("# nobody\n")  # a file without a client token: refused, the old tokens stay
        os.kill(ctrl.proc.pid, signal.SIGHUP)
        wait_for(lambda: "not reloaded" in ctrl.log_tail(), timeout=10)
        time.sleep(0.2)
        assert httpx.get(f"{url}/get_indices?name=echo", headers=h(DAVE)).status_code == 200
        assert ctrl.alive()
        log = (tmp_path / "c.log").read_text()
        assert DAVE not in log and ALICE not in log and BOB not in log  # never logged
    finally:
        worker.stop()
        ctrl.stop()
