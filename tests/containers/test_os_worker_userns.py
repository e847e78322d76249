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
    script = (
        "id -u; grep -E '^(CapEff|CapBnd|Seccomp):' /proc/self/status; ls /var/run/docker.sock 2>&1; "
        "find / -xdev -perm /6000 -type f ! -path '/opt/agentrl/rootfs/*' 2>/dev/null | sort; "
        "python3 -c \"import os; print(*(os.getxattr(f, 'security.capability').hex() for f in ('/usr/bin/newuidmap', '/usr/bin/newgidmap')))\"; "
        "stat -c '%u:%g %n' /opt/agentrl/rootfs/etc /opt/agentrl/rootfs/home/ubuntu /opt/agentrl/rootfs/etc/shadow"
    )
    code, out = run_in_worker_image(client, img.id, ["sh", "-c", script])
    assert code == 0, out
    lines = out.splitlines()
    status = dict(line.split(":\t") for line in lines[1:4])
    assert lines[0] == "2000", out  # not root
    assert int(status["CapEff"], 16) == 0, out  # holds no capability
    assert int(status["CapBnd"], 16) == (1 << 6) | (1 << 7), out  # only SETGID, SETUID, for the two helpers
    assert status["Seccomp"] == "2", out  # a filter is on
    assert "No such file" in lines[4]  # no engine socket
    # No setuid program (nothing can become root); the two helpers hold CAP_SETUID / CAP_SETGID
    # (effective, permitted) as file capabilities.
    assert lines[5] == "0100000280000000000000000000000000000000 0100000240000000000000000000000000000000", out
    # root -> 2000, ubuntu (1000) -> 100999, group shadow (42) -> 100041
    assert lines[6:9] == [
        "2000:2000 /opt/agentrl/rootfs/etc",
        "100999:100999 /opt/agentrl/rootfs/home/ubuntu",
        "2000:100041 /opt/agentrl/rootfs/etc/shadow",
    ], out


def test_scripts_may_chown_to_other_users_as_on_a_host(built_images, client):  # noqa: F811
    """Init and check scripts run in the session's user namespace, where ids 1..65536 exist."""
    code = (
        "import asyncio\n"
        "from agentrl_envs.sandbox.bwrap import BubblewrapBackend\n"
        "async def main():\n"
        "    async with BubblewrapBackend('/opt/agentrl/rootfs', base_dir='/var/lib/agentrl-sandboxes/b') as b:\n"
        "        box = await b.create()\n"
        "        r = await box.exec('useradd -m bob && mkdir /srv/x && chown bob:bob /srv/x && chmod 700 /srv/x && touch /srv/x/f && stat -c %U /srv/x /home/bob')\n"
        "        print('exec', r.exit_code, r.output.split())\n"
        "        r = await box.shell('id bob; ls /srv/x')\n"
        "        print('shell', r.exit_code, r.output.strip())\n"
        "        await box.close()\n"
        "    import os; print('left', os.listdir('/var/lib/agentrl-sandboxes/b'))\n"
        "asyncio.run(main())\n"
    )
    rc, out = run_in_worker_image(client, built_images["worker-os"].ref, ["python3", "-c", code])
    assert rc == 0, out
    assert "exec 0 ['bob', 'bob']" in out, out
    assert "uid=1001(bob)" in out, out  # the shell (root only, as bubblewrap maps it) sees the same files
    assert "left []" in out, out  # a dir owned by another user is removed too


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
