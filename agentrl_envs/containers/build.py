"""``agentrl-envs build [TASK...]``: every image built locally, reused while its inputs are unchanged.

Images (tags are the first 12 hex digits of a hash of the image's inputs; ``latest`` follows):

* ``agentrl/base`` — ``docker import`` of the Debian root filesystem that
  :func:`agentrl_envs.sandbox.rootfs.ensure_rootfs` builds (python3, pip, git, curl, ...).
  No registry is needed anywhere.
* ``agentrl/controller`` — ``docker/controller.Dockerfile`` FROM the base.
* ``agentrl/worker-<task>`` — the task's own ``envs/<task>/Dockerfile`` FROM the base.

The Dockerfiles take ``ARG BASE_IMAGE`` and a build context holding ``wheels/``: wheels of
agentrl-envs and of the task package, built here with ``pip wheel --no-deps``. Their dependencies
come from PyPI inside ``docker build`` (``deps="pypi"``, host network), or are fetched on the
host into ``wheels/`` and installed with ``--no-index`` (``deps="host"``: for an image whose pip
cannot reach PyPI itself). The host runs ``pip wheel``, not ``pip download``: a dependency
published as source only (ALFWorld's ``fast-downward-textworld``) is compiled here, so images need
no compiler. Building needs a source checkout (``pyproject.toml`` next to the packages), the
docker SDK and an engine.
"""

from __future__ import annotations

import hashlib
import inspect
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import AgentRLEnvsError
from .engine import BASE_REPO, CONTROLLER_REPO, INPUTS_LABEL, docker_client, image_exists, worker_repo

Deps = Literal["pypi", "host"]
Log = Callable[[str], None]

#: What ``docker import`` sets on the base image (a tarball has no config of its own).
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache", "tests", "wheels", "build", "dist"}


class BuildError(AgentRLEnvsError):
    """An image could not be built; ``message`` ends with the tail of the build log."""

    code = "build_error"


@dataclass(frozen=True)
class Built:
    """One image: its reference (``repo:tag``), whether it was reused, seconds spent."""

    name: str
    ref: str
    reused: bool
    seconds: float


def repo_root() -> Path:
    """The source checkout agentrl_envs is imported from (holds ``pyproject.toml``)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise BuildError(f"`agentrl-envs build` needs a source checkout; {root} has no pyproject.toml")
    return root


def task_dir(task: str) -> Path:
    """The task package's project directory (``pyproject.toml`` + ``Dockerfile``), e.g. ``envs/db``."""
    from ..registry import get_task

    path = Path(inspect.getfile(get_task(task))).resolve()
    for parent in path.parents:
        if (parent / "pyproject.toml").is_file():
            if not (parent / "Dockerfile").is_file():
                raise BuildError(f"task {task!r} ({parent}) has no Dockerfile")
            if parent == repo_root():
                raise BuildError(f"task {task!r} is built into agentrl-envs; only task packages (envs/<task>) have images")
            return parent
    raise BuildError(f"task {task!r} is not installed from a source directory ({path})")


def buildable_tasks() -> list[str]:
    """Installed tasks whose project directory has a Dockerfile."""
    from ..registry import task_names

    out = []
    for name in task_names():
        try:
            task_dir(name)
        except (BuildError, AgentRLEnvsError):
            continue
        out.append(name)
    return out


def fingerprint(*parts: str | Path) -> str:
    """sha256 over strings and files/trees (relative path + bytes; caches, tests, egg-info skipped)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, str):
            h.update(b"s\0" + part.encode() + b"\0")
            continue
        files = [part] if part.is_file() else sorted(p for p in part.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(part) if f != part else Path(f.name)
            if _SKIP_PARTS.intersection(rel.parts) or any(x.endswith(".egg-info") for x in rel.parts) or f.suffix == ".pyc":
                continue
            h.update(b"f\0" + str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def project_inputs(project: Path) -> list[Path]:
    """What a project's wheel is made of: ``pyproject.toml``, ``README.md`` and its packages."""
    files = [project / n for n in ("pyproject.toml", "README.md") if (project / n).is_file()]
    return files + sorted(d for d in project.iterdir() if (d / "__init__.py").is_file())


# ---------------------------------------------------------------------------- base


def ensure_base(client: Any, *, tarball: Path | None = None, log: Log = print) -> Built:
    """``agentrl/base:<tag>`` from the root filesystem tarball, imported once per tarball."""
    t0 = time.monotonic()
    if tarball is None:
        from ..sandbox.rootfs import ensure_rootfs, rootfs_tarball

        tarball = rootfs_tarball(ensure_rootfs())
    st = tarball.stat()
    tag = fingerprint(str(tarball.resolve()), str(st.st_size), str(st.st_mtime_ns), *BASE_CHANGES)[:12]
    ref = f"{BASE_REPO}:{tag}"
    reused = image_exists(client, ref)
    if not reused:
        log(f"importing {tarball} as {ref}")
        client.api.import_image_from_file(str(tarball), repository=BASE_REPO, tag=tag, changes=list(BASE_CHANGES))
        if not image_exists(client, ref):
            raise BuildError(f"docker import of {tarball} did not produce {ref}")
    client.images.get(ref).tag(BASE_REPO, "latest")
    return Built("base", ref, reused, time.monotonic() - t0)


# ---------------------------------------------------------------------------- images FROM the base


def _pip(*args: str, log: Log) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}")


def _wheels(projects: Iterable[Path], dest: Path, deps: Deps, log: Log) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    _pip("wheel", "-q", "--no-deps", "-w", str(dest), *map(str, projects), log=log)
    if deps == "host":
        # Same interpreter version as the base image's python3 (both 3.11 on Debian bookworm).
        # agentrl-envs with its docker extra: a worker whose sessions are containers needs the SDK.
        reqs = [f"{w}[docker]" if w.name.startswith("agentrl_envs-") else str(w) for w in sorted(dest.glob("*.whl"))]
        # `pip wheel`: wheels are copied as they are, source-only packages are built here (pip caches the build).
        _pip("wheel", "-q", "-w", str(dest), *reqs, log=log)


def build_image(
    client: Any,
    *,
    name: str,
    repo: str,
    dockerfile: Path,
    projects: list[Path],
    base: str,
    deps: Deps = "host",
    rebuild: bool = False,
    log: Log = print,
) -> Built:
    """Build ``repo:<inputs hash>`` from ``dockerfile`` FROM ``base`` with wheels of ``projects``.

    The hash covers the Dockerfile, the base image id, the projects' sources and ``deps``; an
    image with that tag is reused unless ``rebuild``. ``repo:latest`` points at the result.
    Raises :class:`BuildError` with the build log's tail.
    """
    t0 = time.monotonic()
    base_id = client.images.get(base).id
    fp = fingerprint(dockerfile, base_id, deps, *(f for p in projects for f in project_inputs(p)))
    ref = f"{repo}:{fp[:12]}"
    if image_exists(client, ref) and not rebuild:
        client.images.get(ref).tag(repo, "latest")
        return Built(name, ref, True, time.monotonic() - t0)
    log(f"building {ref} from {dockerfile}")
    with tempfile.TemporaryDirectory(prefix="agentrl-build-") as tmp:
        ctx = Path(tmp)
        shutil.copy(dockerfile, ctx / "Dockerfile")
        _wheels(projects, ctx / "wheels", deps, log)
        lines: list[str] = []
        stream = client.api.build(
            path=str(ctx),
            tag=ref,
            buildargs={"BASE_IMAGE": base, "PIP_INSTALL_ARGS": "--no-index" if deps == "host" else ""},
            network_mode="host",
            labels={INPUTS_LABEL: fp},
            rm=True,
            forcerm=True,
            nocache=rebuild,
            decode=True,
        )
        for chunk in stream:
            if "stream" in chunk:
                lines += chunk["stream"].splitlines()
            if "error" in chunk:
                tail = "\n".join(lines[-30:])
                raise BuildError(f"building {ref} failed: {chunk['error']}\n{tail}")
    if not image_exists(client, ref):
        raise BuildError(f"building {ref} produced no image:\n" + "\n".join(lines[-30:]))
    client.images.get(ref).tag(repo, "latest")
    prune_superseded(client, repo, ref)
    return Built(name, ref, False, time.monotonic() - t0)


def prune_superseded(client: Any, repo: str, keep: str) -> None:
    """Remove older builds of ``repo`` (images we labelled) that no container uses; keep ``keep``."""
    keep_id = client.images.get(keep).id
    for image in client.images.list(name=repo, filters={"label": INPUTS_LABEL}):
        if image.id != keep_id:
            for tag in image.tags:
                try:
                    client.images.remove(tag)  # not forced: an image a container uses stays
                except Exception:
                    pass


def build_all(
    tasks: list[str] | None = None,
    *,
    deps: Deps = "host",
    rebuild: bool = False,
    tarball: Path | None = None,
    log: Log = print,
) -> list[Built]:
    """Base, controller and one worker image per task (default: every buildable task), in that order."""
    tasks = list(tasks) if tasks else buildable_tasks()
    dirs = {t: task_dir(t) for t in tasks}  # fail on a bad name before anything slow
    root = repo_root()
    client = docker_client()
    try:
        out = [ensure_base(client, tarball=tarball, log=log)]
        base = out[0].ref
        common = dict(base=base, deps=deps, rebuild=rebuild, log=log)
        out.append(
            build_image(
                client, name="controller", repo=CONTROLLER_REPO, dockerfile=root / "docker" / "controller.Dockerfile",
                projects=[root], **common,
            )
        )  # fmt: skip
        for task, d in dirs.items():
            out.append(
                build_image(
                    client, name=f"worker-{task}", repo=worker_repo(task), dockerfile=d / "Dockerfile", projects=[root, d],
                    **common,
                )
            )  # fmt: skip
        return out
    finally:
        client.close()


def cmd_build(a: Any) -> int:
    """The ``build`` subcommand: prints one line per image."""
    t0 = time.monotonic()
    for b in build_all(a.tasks, deps=a.deps, rebuild=a.rebuild, log=lambda s: print(s, flush=True)):
        print(f"{b.name:<20} {b.ref:<40} {'reused' if b.reused else 'built'} in {b.seconds:.1f} s", flush=True)
    print(f"done in {time.monotonic() - t0:.1f} s", flush=True)
    return 0
