"""Starting the model server: in this process (:func:`serve_model`) or as a child process.

:class:`LocalModelServer` is what ``agentrl-envs eval`` uses when no model URL is given::

    with LocalModelServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="none")
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from ..stack import ManagedProcess, free_port
from .errors import ModelLoadError

log = logging.getLogger(__name__)


def serve_model(
    host: str = "127.0.0.1",
    port: int = 8000,
    model: str | os.PathLike[str] | None = None,
    *,
    served_model_name: str | None = None,
    num_threads: int | None = None,
    log_level: str = "info",
    max_batch: int = 16,
) -> None:
    """Load the model, then serve the OpenAI API with uvicorn until interrupted (blocking).

    Up to ``max_batch`` concurrent requests are sampled in one batched decode (:mod:`.batching`).

    The socket opens only after the model is loaded, so ``/health`` answering means ready.
    """
    import uvicorn

    from .batching import BatchedChat
    from .engine import TransformersEngine
    from .server import create_app

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine = TransformersEngine(model, num_threads=num_threads)
    log.info("model %s loaded in %.1f s; serving on http://%s:%d/v1", engine.name, engine.load_seconds, host, port)
    chat = BatchedChat(engine, max_batch=max_batch)
    try:
        uvicorn.run(create_app(chat, served_model_name=served_model_name), host=host, port=port, log_level=log_level)
    finally:
        chat.close()


class LocalModelServer:
    """The model server as a child process, for a ``with`` block.

    On enter: starts ``python -m agentrl_envs.models.server`` on ``host:port`` (``port=0``: a
    free one), waits until ``/health`` answers (loading takes seconds; ~30 s the first time, when
    the GGUF is dequantized and cached), and raises :class:`ModelLoadError` with the end of the
    server's log if the process exits or ``startup_timeout`` passes first. The child runs with
    ``HF_HUB_OFFLINE=1``. On exit: SIGTERM to its PID, SIGKILL after ``stop_timeout``.
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
    ) -> None:
        self.model = model
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
        if self.port == 0:
            self.port = free_port(self.host)
        cmd = [sys.executable, "-m", "agentrl_envs.models.server", "--host", self.host, "--port", str(self.port)]
        if self.model is not None:
            cmd += ["--model", str(self.model)]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        fd, name = tempfile.mkstemp(prefix="agentrl-model-server-", suffix=".log")
        os.close(fd)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"}
        self.process = ManagedProcess("model server", cmd, Path(name), env)
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
