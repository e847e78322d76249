"""The set-up scripts' stdout is exactly the line to eval, whatever their tools print.

``.ci/run`` and ``make train-demo`` do ``eval "$(.ci/os-sandbox.sh | tail -n1)"``: if debootstrap's or
apt's log reaches stdout, the wrong line is evaluated. The root filesystem builder must print only
its path (the build log goes to stderr), and each script's stdout must carry only its ``export``
line. Fake tools on ``PATH`` print noise on stdout (including a decoy ``export`` line); the
tests assert none of it arrives. Most tests are hermetic (no root, no network, no real
debootstrap); the few that need root or the real sandbox skip without it, and fail under
``CI=true`` (``.ci/run`` runs as root and builds the sandbox first).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_envs.sandbox import rootfs
from agentrl_envs.sandbox.rootfs import RECIPE, STAMP, default_rootfs_path, is_complete

REPO = Path(__file__).resolve().parents[1]
CI = os.environ.get("CI", "").lower() == "true"
NOISE = "export AGENTRL_ROOTFS=/decoy-from-a-tool"

# A fake debootstrap: noise on stdout (its own and a grandchild's) and stderr, then a minimal tree
# in its target directory (the second-last argument). FAKE_DEBOOTSTRAP_RC makes it fail.
FAKE_DEBOOTSTRAP = f"""#!/bin/sh
echo "I: Retrieving InRelease (debootstrap noise on stdout)"
echo "{NOISE}"
echo "W: debootstrap noise on stderr" >&2
sh -c 'echo "Setting up python3 (apt noise from a grandchild on stdout)"'
eval "work=\\${{$(($# - 1))}}"
mkdir -p "$work/bin" "$work/etc" "$work/var/cache/apt/archives" "$work/var/lib/apt/lists"
printf '#!/bin/sh\\n' > "$work/bin/bash"
exit "${{FAKE_DEBOOTSTRAP_RC:-0}}"
"""

# rootfs.main() as `python -m agentrl_envs.sandbox.rootfs` runs it, without needing root or a
# Debian apt configuration (the fake debootstrap needs neither).
RUNNER = """
import os, sys
from agentrl_envs.sandbox import rootfs
os.geteuid = lambda: 0
rootfs.host_debian_source = lambda *a, **k: rootfs.AptSource("http://deb.example.invalid/debian", "bookworm")
raise SystemExit(rootfs.main(sys.argv[1:]))
"""


def require(ok: bool, why: str) -> None:
    """Skip when ``ok`` is false, but fail under CI=true (CI runs as root with the sandbox built)."""
    if not ok:
        if CI:
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A directory of fake tools, first on PATH: debootstrap (builds a tiny tree), chroot and bwrap."""
    d = tmp_path / "fakebin"
    write_exe(d / "debootstrap", FAKE_DEBOOTSTRAP)
    write_exe(d / "bwrap", "#!/bin/sh\necho 'bwrap noise'\n")
    write_exe(d / "chroot", f"#!/bin/sh\necho '{NOISE}'\nexit 0\n")  # the tree's finishing (useradd in it)
    return d


def env_with(fake_bin: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{fake_bin}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def noisy_python(tmp_path: Path) -> Path:
    """A stand-in for $PYTHON: `-m pip ...` only prints noise (the test must not reinstall packages
    in the venv it runs from); anything else runs this interpreter."""
    return write_exe(
        tmp_path / "python",
        f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pip ]; then echo "Successfully installed (pip noise)"; echo "{NOISE}"; exit 0; fi\n'
        f'exec "{sys.executable}" "$@"\n',
    )


def fake_tree(path: Path) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "bash").write_text("#!/bin/sh\n")
    (path / STAMP).write_text(RECIPE)
    assert is_complete(path)
    return path


# -- the root filesystem builder ------------------------------------------------------------------


@pytest.mark.parametrize("tar", [False, True])
def test_rootfs_main_prints_only_the_path(tmp_path: Path, fake_bin: Path, tar: bool) -> None:
    target = tmp_path / "cache" / "debian-bookworm"
    args = ["--tar"] if tar else []
    proc = run([sys.executable, "-c", RUNNER, *args], env_with(fake_bin, AGENTRL_ROOTFS=str(target)))
    assert proc.returncode == 0, proc.stderr
    expected = f"{target}.tar" if tar else str(target)
    assert proc.stdout == expected + "\n"
    # the tool's noise went to stderr, all of it
    assert NOISE in proc.stderr and "grandchild" in proc.stderr and "noise on stderr" in proc.stderr
    assert is_complete(target)


def test_rootfs_main_failure_writes_nothing_to_stdout(tmp_path: Path, fake_bin: Path) -> None:
    target = tmp_path / "cache" / "debian-bookworm"
    env = env_with(fake_bin, AGENTRL_ROOTFS=str(target), FAKE_DEBOOTSTRAP_RC="3")
    proc = run([sys.executable, "-c", RUNNER], env)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "error: debootstrap failed with exit code 3" in proc.stderr and NOISE in proc.stderr
    assert not target.exists() and list(target.parent.iterdir()) == []  # the half-built tree is gone


@pytest.mark.parametrize("quiet", [False, True])
def test_ensure_rootfs_in_process_keeps_fd1_clean(
    tmp_path: Path, fake_bin: Path, quiet: bool, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 0)
    monkeypatch.setattr(rootfs, "host_debian_source", lambda *a, **k: rootfs.AptSource("http://x.invalid/debian", "bookworm"))
    target = rootfs.ensure_rootfs(tmp_path / "tree", quiet=quiet)
    out, err = capfd.readouterr()
    assert out == ""
    assert (NOISE in err) is not quiet  # quiet: captured, shown only in the error on failure
    assert is_complete(target)


def test_python_m_rootfs_prints_only_the_path(tmp_path: Path, fake_bin: Path) -> None:
    """The real `python -m agentrl_envs.sandbox.rootfs` (root and the host's apt config needed)."""
    require(os.geteuid() == 0, "not root: building the root filesystem needs root")
    try:
        rootfs.host_debian_source()
    except RuntimeError as e:
        require(False, str(e))
    target = tmp_path / "debian"
    proc = run([sys.executable, "-m", "agentrl_envs.sandbox.rootfs"], env_with(fake_bin, AGENTRL_ROOTFS=str(target)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{target}\n"
    assert NOISE in proc.stderr


# -- the shell scripts ----------------------------------------------------------------------------


def test_os_sandbox_sh_stdout_is_one_export_line(tmp_path: Path, fake_bin: Path) -> None:
    """Root filesystem already there (the common case): stdout is exactly the export line."""
    tree = fake_tree(tmp_path / "rootfs with space")
    env = env_with(fake_bin, AGENTRL_ROOTFS=str(tree), PYTHON=str(noisy_python(tmp_path)))
    proc = run(["bash", ".ci/os-sandbox.sh"], env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("export AGENTRL_ROOTFS="), proc.stdout
    assert NOISE in proc.stderr  # pip's noise went to stderr
    # and the line evaluates to the path, quoting included
    shown = run(["bash", "-c", f'{lines[0]}; printf %s "$AGENTRL_ROOTFS"'], dict(os.environ))
    assert shown.stdout == str(tree)


def test_os_sandbox_sh_fresh_build_stdout_is_one_export_line(tmp_path: Path, fake_bin: Path) -> None:
    """The fresh-machine case (issue 10): the script builds the tree and debootstrap is noisy."""
    require(os.geteuid() == 0, "not root: the script builds the root filesystem as root")
    try:
        rootfs.host_debian_source()
    except RuntimeError as e:
        require(False, str(e))
    target = tmp_path / "fresh" / "debian"
    env = env_with(fake_bin, AGENTRL_ROOTFS=str(target), PYTHON=str(noisy_python(tmp_path)))
    proc = run(["bash", ".ci/os-sandbox.sh"], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"export AGENTRL_ROOTFS={target}\n"
    assert "grandchild" in proc.stderr and is_complete(target)
    # `| tail -n1`, as .ci/run and older docs use it, gives the same line
    piped = run(["bash", "-c", "bash .ci/os-sandbox.sh | tail -n1"], env)
    assert piped.stdout == proc.stdout


def test_os_sandbox_sh_on_the_real_rootfs(tmp_path: Path) -> None:
    """The real script, tools and cached root filesystem (skips unless set up; runs under CI)."""
    require(os.geteuid() == 0, "not root (.ci/os-sandbox.sh needs root)")
    require(shutil.which("bwrap") is not None and shutil.which("debootstrap") is not None, "bwrap/debootstrap missing")
    real = default_rootfs_path()
    require(is_complete(real), f"no root filesystem at {real} (run .ci/os-sandbox.sh)")
    env = dict(os.environ, PYTHON=str(noisy_python(tmp_path)))
    proc = run(["bash", ".ci/os-sandbox.sh"], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"export AGENTRL_ROOTFS={real}\n"


def test_mariadb_sh_stdout_is_one_export_line(tmp_path: Path) -> None:
    """Fake MariaDB tools that answer everything and chatter on stdout."""
    d = tmp_path / "fakebin"
    for name in ("mariadbd", "mariadb-admin"):
        write_exe(d / name, f'#!/bin/sh\necho "{name} noise"\n')
    write_exe(d / "mariadb", f'#!/bin/sh\ncat >/dev/null\necho "10.11.6-MariaDB"\necho "{NOISE}"\n')
    proc = run(["bash", ".ci/mariadb.sh"], env_with(d, MARIADB_PORT="3399"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "export AGENTRL_TEST_MYSQL_URL=mysql://agentrl:agentrl@127.0.0.1:3399\n"
    assert NOISE in proc.stderr


def test_docker_sh_writes_nothing_to_stdout(tmp_path: Path) -> None:
    """An engine that answers at once; the script's only output is its log, on stderr."""
    d = tmp_path / "fakebin"
    write_exe(d / "dockerd", "#!/bin/sh\necho 'dockerd noise'\n")
    write_exe(d / "docker", f'#!/bin/sh\necho "27.0.0"\necho "{NOISE}"\n')
    proc = run(["bash", ".ci/docker.sh"], env_with(d))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "is up" in proc.stderr


def test_kg_sparql_sh_returns_while_its_server_keeps_running(tmp_path: Path) -> None:
    """A fake Virtuoso that stays up (as the real one does) and chatters on stdout: the script
    must return its one line at once. A server that inherited the caller's stdout would keep
    ``line=$(bash .ci/kg-sparql.sh)`` waiting until it exits (here: the test's 120 s timeout),
    as mariadb.sh once did to CI for its whole 90 minutes."""
    d = tmp_path / "fakebin"
    vdir = tmp_path / "virtuoso"
    write_exe(d / "virtuoso-t", f'#!/bin/sh\necho "{NOISE}"\ntouch "{vdir}/up"\nexec sleep 300\n')
    write_exe(d / "curl", f'#!/bin/sh\necho "{NOISE}"\ntest -e "{vdir}/up"\n')
    write_exe(d / "isql-vt", f'#!/bin/sh\necho "isql noise"\necho "{NOISE}"\n')
    env = env_with(d, AGENTRL_VIRTUOSO_DIR=str(vdir), AGENTRL_VIRTUOSO_HTTP_PORT="8899")
    try:
        proc = run(["bash", ".ci/kg-sparql.sh"], env)
    finally:
        pid_file = vdir / "virtuoso.pid"
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), 9)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "export AGENTRL_TEST_SPARQL_URL=http://127.0.0.1:8899/sparql\n"
    assert "starting virtuoso-t" in proc.stderr and NOISE in (vdir / "virtuoso.out").read_text()
