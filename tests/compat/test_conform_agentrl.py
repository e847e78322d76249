"""AgentRL's own workers pass the protocol checks of the wire-level suite (agentrl_envs.conform).

A task written against AgentRL's SDK and served by ``agentrl.worker.TaskWorker`` (agentrl-worker
0.4.0 from PyPI, installed by ``make test``) registers with our controller (idle timeout 2 s) and
passes every check of PROTOCOL_CHECKS. It has no ``/health`` (AgentRL's workers do not serve one):
the health check says so in a note, as it does for any worker without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from stack_helpers import wait_for

from agentrl_envs.conform import PROTOCOL_CHECKS, WireOptions, run_conformance
from agentrl_envs.controller import ControllerService, create_controller_app
from agentrl_envs.stack import ServerThread, free_port

pytestmark = pytest.mark.compat
pytest.importorskip("agentrl.worker.task_worker", reason="agentrl-worker is not installed (make test installs it)")


def test_an_agentrl_worker_task_passes_the_protocol_checks(tmp_path):
    controller = ServerThread(create_controller_app(ControllerService(idle_timeout=2.0))).start()
    port = free_port()
    log = open(tmp_path / "agentrl-worker.log", "wb")  # noqa: SIM115 - closed below
    script = Path(__file__).with_name("agentrl_guess_task.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), f"{controller.url}/api", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_for(
            lambda: proc.poll() is None and bool(httpx.get(f"{controller.url}/api/list_workers").json().get("agentrl-guess")),
            timeout=60,
        )
        report = run_conformance(controller.url, "agentrl-guess", options=WireOptions(idle_timeout=2.0), checks=PROTOCOL_CHECKS)
        assert report.passed and {r.outcome for r in report.results} == {"passed"}, report.text()
        assert [r.name for r in report.results] == PROTOCOL_CHECKS
        assert any("/health answers 404" in note for note in report.result("health").notes), report.text()
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        controller.stop()
