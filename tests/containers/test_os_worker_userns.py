"""The socket-free OS worker container: no engine socket, no capability, not root; its sessions are
bubblewrap sandboxes in user namespaces (``agentrl.sandbox-profile=userns``).

The OS task's own escape suite (``envs/os/tests/test_os_sandbox_security.py``, and the shell tests)
runs *inside* the worker image under exactly the options ``up`` gives it
(:func:`agentrl_envs.containers.engine.userns_host_config`): pytest and its plugins are copied from
this environment into a folder mounted next to the suite (same Python, 3.11, as the image)."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
from pathlib import Path

import pytest
from docker_helpers import built_images, client  # noqa: F401 - fixtures

from agentrl_envs.containers.engine import SANDBOX_DIR, SANDBOX_PROFILE_LABEL, SOCKET_OPTION_LABEL, userns_host_config

pytestmark = pytest.mark.docker

SUITE = Path(__file__).resolve().parents[2] / "envs" / "os" / "tests"
TEST_DISTS = ("pytest", "pytest-asyncio", "pytest-timeout")


def copy_dists(dest: Path) -> Path:
    """The files of :data:`TEST_DISTS` and what they require, as installed here, under ``dest`` (a path entry)."""
    from packaging.requirements import Requirement

    todo, seen = list(TEST_DISTS), set()
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        for req in map(Requirement, dist.requires or []):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f)))
            if ".." in f.parts or not src.is_file() or f.suffix == ".pyc":
                continue
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


def run_in_worker_image(client, image: str, command: list[str], *, profile: bool = True, mounts=None, timeout: int = 600):  # noqa: F811
    """Run ``command`` in ``image`` (entrypoint replaced) with the userns profile ``up`` uses; (exit code, output)."""
    api = client.api
    img = client.images.get(image)
    binds = {str(k): {"bind": v, "mode": "ro"} for k, v in (mounts or {}).items()}
    hc = api.create_host_config(network_mode="none", binds=binds or None)
    if profile:
        hc.update(userns_host_config(img.attrs["Config"].get("User") or ""))
    c = api.create_container(
        image,
        entrypoint=command[:1],
        command=command[1:],
        environment={"AGENTRL_ROOTFS": "/opt/agentrl/rootfs", "PYTHONPATH": "/testsite", "PYTHONDONTWRITEBYTECODE": "1"},
        host_config=hc,
    )
    try:
        api.start(c)
        code = api.wait(c, timeout=timeout)["StatusCode"]
        return code, api.logs(c).decode(errors="replace")
    finally:
        api.remove_container(c, force=True)


def test_worker_image_is_socket_free_by_default(built_images, client):  # noqa: F811
    img = client.images.get(built_images["worker-os"].ref)
    assert img.labels[SANDBOX_PROFILE_LABEL] == "userns"
    assert img.labels[SOCKET_OPTION_LABEL] == "backend=docker"
    assert img.attrs["Config"]["User"] == "2000:2000"
    code, out = run_in_worker_image(
        client, img.id, ["sh", "-c", "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ls /var/run/docker.sock 2>&1; true"]
    )
    assert code == 0, out
    lines = dict(line.split(":\t") for line in out.splitlines()[1:5])
    assert out.splitlines()[0] == "2000"
    assert int(lines["CapEff"], 16) == 0 and int(lines["CapBnd"], 16) == 0, out  # not even in the bounding set
    assert lines["NoNewPrivs"] == "1" and lines["Seccomp"] == "2", out  # no setuid gains; a filter is on
    assert "No such file" in out  # no engine socket


def test_escape_suite_passes_in_the_socket_free_worker(built_images, client, tmp_path):  # noqa: F811
    # Not test_os_reap.py: it checks the sweep of dead workers' cgroups, which a container without
    # writable cgroups has none of; its sessions die with the container (the worker is its pid 1,
    # their dirs are on its tmpfs). test_worker_killed_leaves_nothing_behind runs here.
    site = copy_dists(tmp_path / "site")
    cmd = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "asyncio_mode=auto", "--rootdir=/suite"]
    cmd += ["-o", "asyncio_default_fixture_loop_scope=function"]
    cmd += ["--basetemp", f"{SANDBOX_DIR}/pytest", "/suite/test_os_sandbox_security.py", "/suite/test_os_sandbox_shell.py"]
    code, out = run_in_worker_image(client, built_images["worker-os"].ref, cmd, mounts={SUITE: "/suite", site: "/testsite"})
    print(out[-3000:])
    assert code == 0, out[-5000:]
    m = re.search(r"(\d+) passed", out)
    assert m and int(m.group(1)) >= 10 and "skipped" not in out and "failed" not in out, out[-3000:]


def test_without_the_profile_the_worker_says_what_it_needs(built_images, client):  # noqa: F811
    """Docker's defaults (its seccomp profile refuses unshare; /proc is masked): a clear error, not a hang."""
    probe = "import asyncio; from agentrl_envs.sandbox.bwrap import BubblewrapBackend as B; asyncio.run(B('/opt/agentrl/rootfs', base_dir='/tmp/b').open())"
    code, out = run_in_worker_image(client, built_images["worker-os"].ref, ["python3", "-c", probe], profile=False)
    assert code != 0
    assert "seccomp-userns.json" in out and "systempaths=unconfined" in out, out[-2000:]
