"""``agentrl-envs conform --image IMAGE``: a worker image checked from the outside.

The image is started as ``agentrl-envs up --backend docker`` starts a worker (host network,
``HOST``/``PORT`` in its environment, the options its labels ask for, the arguments
``--controller URL --log-level warning`` and then ``worker_args``), against a controller this
process runs on loopback with an idle timeout of :data:`IMAGE_IDLE_TIMEOUT` seconds. Once the
worker has registered (its first heartbeat names the task) and its HEALTHCHECK has reported, the
wire-level suite runs over HTTP; the container is removed afterwards (by id), whatever happened.
"""

from __future__ import annotations

import dataclasses
import time

import httpx

from ...containers.engine import docker_client, image_exists
from ...containers.up import DockerStack
from ...errors import InfrastructureError
from ...stack import ServerThread, free_port
from .options import WireOptions
from .run import Report, run_conformance

#: The idle timeout of the controller an image is checked against (the idle-expiry check waits it out).
IMAGE_IDLE_TIMEOUT = 4.0


class ImageWorker(DockerStack):
    """One worker container of ``image`` pointed at the controller on ``controller_port`` (loopback)."""

    def __init__(self, image: str, controller_port: int, worker_args: list[str]) -> None:
        super().__init__([image], port=controller_port)
        self.image = image
        self.worker_args = worker_args

    def start(self) -> None:
        self._client = docker_client()
        if not image_exists(self._client, self.image):
            raise InfrastructureError(f"image {self.image!r} is not on this Docker engine: build it first")
        args = ["--controller", f"{self.url}/api", "--log-level", "warning", *self.worker_args]
        self._run("worker", self.image, free_port(), args)

    def container_health(self) -> str | None:
        """The container's HEALTHCHECK status (``starting``, ``healthy``, ``unhealthy``); None without one."""
        c = self.containers["worker"]
        c.reload()
        health = c.attrs.get("State", {}).get("Health")
        return health.get("Status") if isinstance(health, dict) else None


def _registered(url: str, worker: ImageWorker, task: str | None, timeout: float) -> str:
    """The task the container's worker registered, once it is live and its HEALTHCHECK answered."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0) as http:
        while True:
            if worker.dead():
                raise InfrastructureError(f"the container of {worker.image} exited:\n{worker.logs_tail('worker', 30)}")
            try:
                listed = http.get(f"{url}/api/list_workers").json()
            except (httpx.HTTPError, ValueError):
                listed = {}
            live = sorted(name for name, ws in listed.items() if any(w.get("alive") for w in ws) and task in (None, name))
            if live and worker.container_health() in (None, "healthy", "unhealthy"):
                return live[0]
            if time.monotonic() > deadline:
                state = f"registered: {sorted(listed) or 'nothing'}, health: {worker.container_health()}"
                raise InfrastructureError(
                    f"the worker of {worker.image} was not ready within {timeout:g} s ({state}):\n{worker.logs_tail('worker', 30)}"
                )
            time.sleep(0.3)


def conform_image(
    image: str,
    *,
    task: str | None = None,
    options: WireOptions | None = None,
    checks: list[str] | None = None,
    worker_args: list[str] | None = None,
    startup_timeout: float = 120.0,
) -> Report:
    """Start ``image`` against a controller of this process, run the suite on the task it serves
    (``task``, else the one it registers), remove the container; the report carries the
    container's log tail when a check failed."""
    from ...controller import ControllerService, create_controller_app

    options = options or WireOptions()
    if options.idle_timeout is None:
        options = dataclasses.replace(options, idle_timeout=IMAGE_IDLE_TIMEOUT)
    controller = ServerThread(create_controller_app(ControllerService(idle_timeout=options.idle_timeout))).start()
    try:
        with ImageWorker(image, controller.port, list(worker_args or [])) as worker:
            name = _registered(controller.url, worker, task, startup_timeout)
            report = run_conformance(
                controller.url, name, options=options, checks=checks, container_health=worker.container_health
            )
            if not report.passed:
                report.logs = worker.logs_tail("worker", 40)
            return report
    finally:
        controller.stop()
