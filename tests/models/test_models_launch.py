"""LocalModelServer: a real child process, reached over HTTP, stopped by PID."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import pytest

from agentrl_envs.chat.errors import ModelLoadError
from agentrl_envs.chat.llama import bfloat16_available
from agentrl_envs.errors import InfrastructureError
from agentrl_envs.models.launch import LocalModelServer


def test_a_taken_port_is_refused_before_the_model_loads() -> None:
    """The launcher binds the server's socket itself and passes it down (``--fd``): a port that is
    taken fails at once, naming it, with no server process started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LocalModelServer(port=port)
        with pytest.raises(InfrastructureError, match=f"cannot listen on 127.0.0.1:{port}"):
            server.start()
        assert server.process is None


def test_an_unknown_dtype_is_refused_by_the_servers_flags() -> None:
    import argparse

    from agentrl_envs.models.launch import add_server_arguments

    p = argparse.ArgumentParser()
    add_server_arguments(p)
    assert p.parse_args([]).dtype == "float32" and p.parse_args(["--dtype", "bfloat16"]).dtype == "bfloat16"
    with pytest.raises(SystemExit):
        p.parse_args(["--dtype", "float16"])


def test_a_missing_model_fails_fast_with_the_server_log(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    with pytest.raises(ModelLoadError) as info:
        with LocalModelServer(model=tmp_path / "nothing.gguf", startup_timeout=60):
            pass
    assert "exited with code" in str(info.value) and "no model at" in str(info.value)


def test_an_error_the_server_knows_reaches_the_caller_as_one_line(tmp_path: Path) -> None:
    """What the server reported (the fix included) comes back alone, not under its traceback."""
    pytest.importorskip("torch")
    with pytest.raises(ModelLoadError) as info, LocalModelServer(model=tmp_path / "nothing.gguf", startup_timeout=60):
        pass
    assert "\n" not in str(info.value) and str(info.value).startswith("the model server exited with code 2: no model at ")


@pytest.mark.model
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_local_model_server_serves_and_stops(dtype: str) -> None:
    if dtype == "bfloat16" and not bfloat16_available():  # the server refuses it, saying why
        with (
            pytest.raises(ModelLoadError, match="bfloat16 matrix products need"),
            LocalModelServer(startup_timeout=180, dtype=dtype),
        ):
            pass
        pytest.skip("this CPU has no oneDNN bfloat16 products: only the refusal was checked")
    with LocalModelServer(startup_timeout=180, dtype=dtype) as server:
        assert f"packed {dtype} decode" in server.log_tail(200)
        assert server.base_url.endswith("/v1") and server.base_url.startswith("http://127.0.0.1:")
        pid = server.process.proc.pid  # type: ignore[union-attr]
        assert "--fd" in server.process.proc.args  # type: ignore[union-attr]  # serves the socket the launcher bound
        r = httpx.post(
            server.base_url + "/chat/completions",
            json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 5, "temperature": 0},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 5
    assert server.process is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
