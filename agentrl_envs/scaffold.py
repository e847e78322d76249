"""``agentrl-envs new NAME``: write a new task package that passes the conformance suite as generated.

The package (``envs/NAME/`` by default)::

    pyproject.toml            agentrl-env-NAME, entry point NAME = "agentrl_env_NAME:<Class>"
    README.md  Dockerfile     how to test, check and build it; the worker image with a HEALTHCHECK
    conftest.py               lets pytest import the package before it is installed
    agentrl_env_NAME/         __init__.py, task.py (the Task class: read its docstring), py.typed,
                              data/dev.jsonl
    tests/test_NAME.py        the conformance suite (:mod:`agentrl_envs.conformance`) on it

``agentrl-envs new NAME --container`` writes a worker in another language instead: Node.js,
standard library only, speaking the worker protocol itself (``examples/node_worker/`` is one)::

    worker.js  protocol.js    the entry point; the protocol (endpoints, sessions, 406, idle expiry, heartbeats)
    task.js  data/dev.jsonl   the task (the same sum example) and its samples
    Dockerfile  README.md     the image (FROM agentrl/base, Node.js from Debian), how to run and `conform` it
    package.json

The files come from ``scaffold_template/`` (a task package) or ``scaffold_container/`` (a
container worker) next to this module (``*.tmpl``, with ``{{name}}``, ``{{module}}`` and
``{{class_name}}`` placeholders; ``package/`` becomes ``agentrl_env_NAME/``).
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from .errors import AgentRLEnvsError

TEMPLATE_DIR = Path(__file__).parent / "scaffold_template"
CONTAINER_TEMPLATE_DIR = Path(__file__).parent / "scaffold_container"
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def class_name(name: str) -> str:
    """``my_task`` → ``MyTaskTask``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) + "Task"


def validate_name(name: str) -> None:
    """Refuse a name that is not a lowercase Python identifier, or is a task installed already."""
    if not _NAME.fullmatch(name) or keyword.iskeyword(name):
        raise AgentRLEnvsError(
            f"invalid task name {name!r}: use a lowercase Python identifier (a letter, then letters, digits or _),"
            " e.g. my_task; it names the module agentrl_env_NAME and the worker image"
        )
    from .registry import task_names

    if name in task_names():
        raise AgentRLEnvsError(f"a task named {name!r} is installed already; choose another name")


def render(text: str, name: str) -> str:
    for key, value in (("name", name), ("module", f"agentrl_env_{name}"), ("class_name", class_name(name))):
        text = text.replace("{{" + key + "}}", value)
    return text


def package_dir(name: str, directory: str | Path | None = None) -> Path:
    """Where :func:`scaffold` writes: ``directory``, else ``envs/NAME``."""
    return Path(directory) if directory is not None else Path("envs") / name


def scaffold(name: str, directory: str | Path | None = None, *, container: bool = False) -> list[Path]:
    """Write the package of task ``name`` into ``directory`` (default ``envs/NAME``); return the
    files. ``container``: the Node.js worker and its Dockerfile instead of a Python package.

    Raises :class:`AgentRLEnvsError` for a bad or installed name, or a directory that exists."""
    validate_name(name)
    root = package_dir(name, directory)
    if root.exists():
        raise AgentRLEnvsError(f"{root} exists already: choose another name or --dir")
    module = f"agentrl_env_{name}"
    templates = CONTAINER_TEMPLATE_DIR if container else TEMPLATE_DIR
    written: list[Path] = []
    for template in sorted(templates.rglob("*.tmpl")):
        rel = template.relative_to(templates).with_suffix("")  # drop .tmpl
        parts = [module if p == "package" else p for p in rel.parts]
        if parts[-1] == "test_name.py":
            parts[-1] = f"test_{name}.py"
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(render(template.read_text(encoding="utf-8"), name), encoding="utf-8")
        written.append(target)
    return written
