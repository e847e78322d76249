"""The Debian root filesystem the bubblewrap sandboxes run in (and the Docker backend imports).

:func:`ensure_rootfs` builds it once with ``debootstrap --variant=minbase`` plus the tools
AgentBench's OS images have (``apt install python3 python3-pip git vim curl wget unzip zip tree``
on Ubuntu) and the ones its task scripts call (``bc``, ``ps``, ``file``, ``column``...), then
keeps it: later calls return the cached path at once. The build goes into a temporary
directory next to the target and is renamed into place, so a half-built tree is never used.

The package mirror and suite come from this machine's own apt configuration (the Debian entry
of ``/etc/apt/sources.list.d/*.sources`` or ``/etc/apt/sources.list``): no mirror is named here.

Location: ``$AGENTRL_ROOTFS`` if set, else ``~/.cache/agentrl-envs/rootfs/debian-<suite>``.
Building needs root and ``debootstrap``; using the result needs neither.

Run ``python -m agentrl_envs.sandbox.rootfs`` to build it and print its path: the path is the
only thing written to stdout (debootstrap's and apt's log go to stderr), so
``path=$(python -m agentrl_envs.sandbox.rootfs)`` is safe.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Packages beyond minbase: AgentBench's image list, then what its task scripts use.
PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-pip",
    "git",
    "vim-tiny",
    "curl",
    "wget",
    "unzip",
    "zip",
    "tree",
    "ca-certificates",
    "procps",
    "psmisc",
    "file",
    "less",
    "bc",
    "sudo",
    "lsof",
    "iproute2",
    "bsdextrautils",
    "perl",
    "gawk",
    "xz-utils",
    "bzip2",
    # Not for the tasks: the containerised OS worker's socket-free mode runs bubblewrap sandboxes
    # in user namespaces from this same tree, their ids mapped by newuidmap/newgidmap
    # (envs/os/Dockerfile, sandbox/_launch.py).
    "bubblewrap",
    "uidmap",
)

#: A file written last into a finished root filesystem: its presence means "complete".
STAMP = ".agentrl-rootfs-complete"
#: What the stamp holds: the recipe of the tree. A tree built by another recipe is rebuilt.
RECIPE = "debootstrap minbase + PACKAGES + user ubuntu (1000, /home/ubuntu) v4\n"

DEFAULT_SUITE = "bookworm"


@dataclass(frozen=True)
class AptSource:
    """One Debian archive entry of the host's apt configuration."""

    uri: str
    suite: str
    components: tuple[str, ...] = ("main",)


def host_debian_source(etc_apt: Path = Path("/etc/apt")) -> AptSource:
    """The host's main Debian archive (not ``-security``/``-updates``), from deb822 or one-line files.

    Raises :class:`RuntimeError` if there is none (then set ``AGENTRL_ROOTFS`` to a prebuilt tree).
    """
    candidates: list[AptSource] = []
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        candidates += _parse_deb822(path.read_text(encoding="utf-8", errors="replace"))
    for path in [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            candidates += _parse_one_line(path.read_text(encoding="utf-8", errors="replace"))
    for src in candidates:
        if re.search(r"/debian/?$", src.uri) and not re.search(r"-(security|updates|backports)$", src.suite):
            return src
    raise RuntimeError(
        "no Debian archive found in /etc/apt (sources.list or sources.list.d/*.sources); "
        "build the root filesystem elsewhere and point AGENTRL_ROOTFS at it"
    )


def _parse_deb822(text: str) -> list[AptSource]:
    out = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
            continue
        comps = tuple(fields.get("components", "main").split()) or ("main",)
        for uri in fields.get("uris", "").split():
            out += [AptSource(uri, suite, comps) for suite in fields.get("suites", "").split()]
    return out


def _parse_one_line(text: str) -> list[AptSource]:
    out = []
    for line in text.splitlines():
        parts = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
        if len(parts) >= 3 and parts[0] == "deb":
            out.append(AptSource(parts[1], parts[2], tuple(parts[3:]) or ("main",)))
    return out


def default_rootfs_path(suite: str | None = None) -> Path:
    """``$AGENTRL_ROOTFS``, else ``~/.cache/agentrl-envs/rootfs/debian-<suite>``."""
    env = os.environ.get("AGENTRL_ROOTFS")
    if env:
        return Path(env).expanduser()
    if suite is None:
        try:
            suite = host_debian_source().suite
        except RuntimeError:
            suite = DEFAULT_SUITE
    return Path.home() / ".cache" / "agentrl-envs" / "rootfs" / f"debian-{suite}"


def is_complete(path: Path) -> bool:
    """True when ``path`` is a finished root filesystem of the current :data:`RECIPE`."""
    stamp = path / STAMP
    return stamp.is_file() and stamp.read_text(errors="replace") == RECIPE and (path / "bin" / "bash").exists()


def ensure_rootfs(target: Path | None = None, *, packages: tuple[str, ...] = PACKAGES, quiet: bool = False) -> Path:
    """Return the path of a complete root filesystem, building it first if needed.

    Idempotent and safe against interruption: the tree is built in ``<target>.tmp-*`` and renamed
    to ``target`` only when complete. Raises :class:`RuntimeError` (with the tool's output) if the
    build fails, or if it is needed but cannot run (not root, no debootstrap).
    """
    target = Path(target) if target is not None else default_rootfs_path()
    if is_complete(target):
        return target
    if os.geteuid() != 0:
        raise RuntimeError(f"root filesystem {target} is missing and building it needs root (sudo .ci/os-sandbox.sh)")
    if shutil.which("debootstrap") is None:
        raise RuntimeError("building the root filesystem needs debootstrap: apt-get install -y debootstrap")
    source = host_debian_source()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.tmp-", dir=target.parent))
    try:
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--components={','.join(source.components)}",
            f"--include={','.join(packages)}",
            source.suite,
            str(work),
            source.uri,
        ]
        _run(cmd, quiet=quiet)
        _finish_tree(work)
        if target.exists():  # an incomplete earlier tree
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


def _run(cmd: list[str], *, quiet: bool) -> None:
    """Run a build tool; its output never reaches our stdout, which carries only the path.

    ``quiet``: the output is captured (and its tail put into the error). Otherwise it goes to our
    stderr, so ``path=$(python -m agentrl_envs.sandbox.rootfs)`` holds the path and nothing else.
    """
    if quiet:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    else:
        sink = _stderr_fd()
        if sink is None:  # stderr is no real file (an in-process capture): relay the output
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            sys.stderr.write(proc.stdout or "")
        else:
            sys.stderr.flush()
            proc = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout or "")[-4000:]
        raise RuntimeError(f"{cmd[0]} failed with exit code {proc.returncode}\n{tail}")


def _stderr_fd() -> int | None:
    """The file descriptor behind ``sys.stderr``, or None when it has none."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _finish_tree(root: Path) -> None:
    """Make the tree usable as a sandbox: no apt caches, a hostname, a prompt-free shell, the stamp."""
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (root / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    (root / "etc" / "hostname").write_text("sandbox\n")
    (root / "etc" / "hosts").write_text("127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n")
    (root / "root").mkdir(exist_ok=True)
    # AgentBench's OS image is `FROM ubuntu`, whose current release has a user `ubuntu` (uid and
    # gid 1000) with a home directory; some problems read /home (dev 8 sizes it with `du`).
    if not (root / "home" / "ubuntu").exists():
        _run(
            ["chroot", str(root), "useradd", "--create-home", "--uid", "1000", "--user-group", "--shell", "/bin/bash", "ubuntu"],
            quiet=True,
        )
    (root / STAMP).write_text(RECIPE)


def rootfs_tarball(path: Path | None = None, out: Path | None = None) -> Path:
    """Pack a complete root filesystem as a tar (for ``docker import``) and return the tar's path.

    ``out`` defaults to ``<path>.tar`` next to the tree; an up-to-date tar (newer than the stamp)
    is reused. Ownership, modes and symlinks are kept (numeric ids).
    """
    path = ensure_rootfs(path)
    out = Path(out) if out is not None else path.with_name(path.name + ".tar")
    if out.is_file() and out.stat().st_mtime >= (path / STAMP).stat().st_mtime:
        return out
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            for entry in sorted(path.iterdir()):
                tar.add(entry, arcname=entry.name, recursive=True)
        tmp.rename(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    """Build (or find) the root filesystem and print its path; ``--tar`` prints the tarball's path."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        path = ensure_rootfs()
        print(rootfs_tarball(path) if "--tar" in args else path)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
