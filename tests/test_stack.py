"""LocalStack: processes and temporary logs are gone after a clean exit; logs stay after an error."""

from __future__ import annotations

import shutil

import httpx
import pytest

from agentrl_envs.stack import LocalStack


def test_clean_exit_removes_processes_and_its_temporary_logs():
    with LocalStack(["echo"]) as stack:
        procs = [p.proc for p in stack.processes]
        assert httpx.get(f"{stack.url}/health").json()["live_workers"] == {"echo": 1}
        log_dir = stack.log_dir
        assert (log_dir / "controller.log").exists()
    assert all(p.poll() is not None for p in procs)
    assert not log_dir.exists()


def test_an_error_inside_keeps_the_logs_and_a_named_dir_is_kept(tmp_path):
    with pytest.raises(RuntimeError):
        with LocalStack(["echo"]) as stack:
            log_dir = stack.log_dir
            raise RuntimeError("boom")
    assert (log_dir / "worker-echo.log").exists()
    shutil.rmtree(log_dir)
    with LocalStack(["echo"], log_dir=tmp_path / "logs"):
        pass
    assert (tmp_path / "logs" / "controller.log").exists()
