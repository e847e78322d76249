"""LocalModelServer: a real child process, reached over HTTP, stopped by PID."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import httpx
import pytest

from agentrl_envs.chat.errors import ModelLoadError
from agentrl_envs.chat.llama import bfloat16_available
from agentrl_envs.models.launch import LocalModelServer, free_port


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


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
        r = httpx.post(
            server.base_url + "/chat/completions",
            json={"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 5, "temperature": 0},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 5
    assert server.process is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
