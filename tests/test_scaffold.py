"""`agentrl-envs new NAME`: the generated package passes the conformance suite as generated.

The package is not pip-installed (that would change the venv): its directory goes on sys.path,
its task class is imported from the files and every conformance check runs on the class (the
reference replay then runs the same controller and worker services in threads of this process,
see agentrl_envs.conformance). The generated tests/test_NAME.py also runs, as its author would.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl_envs.cli import main
from agentrl_envs.conformance import CHECKS, check_task_conformance
from agentrl_envs.scaffold import scaffold

NAME = "sum_demo"
MODULE = f"agentrl_env_{NAME}"


@pytest.fixture
def generated(tmp_path, capsys):
    root = tmp_path / "envs" / NAME
    assert main(["new", NAME, "--dir", str(root)]) == 0
    assert str(root) in capsys.readouterr().out
    sys.path.insert(0, str(root))
    try:
        yield root, importlib.import_module(MODULE)
    finally:
        sys.path.remove(str(root))
        for mod in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
            del sys.modules[mod]


def test_new_writes_the_package(generated):
    root, module = generated
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        "Dockerfile",
        "README.md",
        f"{MODULE}/__init__.py",
        f"{MODULE}/data/dev.jsonl",
        f"{MODULE}/py.typed",
        f"{MODULE}/task.py",
        "conftest.py",
        "pyproject.toml",
        f"tests/test_{NAME}.py",
    ]
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == f"agentrl-env-{NAME}" and "agentrl-envs" in meta["project"]["dependencies"]
    assert meta["project"]["entry-points"]["agentrl_envs.tasks"] == {NAME: f"{MODULE}:SumDemoTask"}
    assert "HEALTHCHECK" in (root / "Dockerfile").read_text() and f"worker {NAME}" in (root / "Dockerfile").read_text()
    assert not any("{{" in p.read_text() for p in root.rglob("*") if p.is_file()), "a placeholder was left unfilled"
    cls = module.SumDemoTask
    assert cls.name == NAME and cls.splits == ("dev",) and len(cls.load_samples("dev")) == 5
    assert set(cls.tool_specs()) == {"add", "submit_answer"}


def test_the_generated_task_passes_every_conformance_check(generated):
    _, module = generated
    results = check_task_conformance(module.SumDemoTask)
    assert list(results) == list(CHECKS)
    assert not any(note.startswith("skipped") for notes in results.values() for note in notes), results


def test_the_generated_test_file_runs_the_suite(generated):
    root, _ = generated
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and f"{len(CHECKS)} passed" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("9lives", "invalid task name"),
        ("My-Task", "invalid task name"),
        ("class", "invalid task name"),
        ("", "invalid task name"),
        ("db", "is installed already"),
    ],
)
def test_new_refuses_a_bad_or_taken_name(name, why, tmp_path, capsys):
    assert main(["new", name, "--dir", str(tmp_path / "x")]) == 2
    assert why in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_new_refuses_an_existing_directory(tmp_path, capsys):
    (tmp_path / "envs" / NAME).mkdir(parents=True)
    assert main(["new", NAME, "--dir", str(tmp_path / "envs" / NAME)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert list((tmp_path / "envs" / NAME).iterdir()) == []


def test_default_directory_is_envs_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = scaffold(NAME)
    assert all(Path(f).parts[:2] == ("envs", NAME) for f in files)
