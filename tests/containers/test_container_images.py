"""`agentrl-envs build`: the Dockerfiles' shape, input hashing, and the images it builds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from docker_helpers import TASKS, built_images, client  # noqa: F401 - fixtures

from agentrl_envs.containers.build import build_all, fingerprint, project_inputs, repo_root, task_dir
from agentrl_envs.containers.engine import INPUTS_LABEL

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(ROOT.glob("envs/*/Dockerfile")) + [ROOT / "docker" / "controller.Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dockerfiles_take_a_base_image_and_check_health(path):
    text = path.read_text()
    assert re.search(r"^ARG BASE_IMAGE=agentrl/base:latest$", text, re.M), "registry-independent base"
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", text, re.M), "OpenEnv shape: a HEALTHCHECK on /health"
    assert "COPY wheels/" in text


def test_task_dir_and_fingerprint_cover_what_the_wheel_holds(tmp_path):
    assert task_dir("db") == ROOT / "envs" / "db" and repo_root() == ROOT
    inputs = project_inputs(ROOT / "envs" / "db")
    assert ROOT / "envs" / "db" / "pyproject.toml" in inputs and ROOT / "envs" / "db" / "agentrl_env_db" in inputs
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    first = fingerprint(tmp_path, "host")
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"junk")
    assert fingerprint(tmp_path, "host") == first, "caches do not change the hash"
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert fingerprint(tmp_path, "host") != first
    assert fingerprint(tmp_path, "pypi") != fingerprint(tmp_path, "host")


@pytest.mark.docker
def test_build_makes_images_with_healthchecks_and_reuses_them(built_images, client):  # noqa: F811
    names = ["base", "controller", *(f"worker-{t}" for t in TASKS)]
    assert list(built_images) == names
    for name in names[1:]:
        image = client.images.get(built_images[name].ref)
        health = image.attrs["Config"]["Healthcheck"]["Test"]
        assert any("/health" in part for part in health), health
        assert image.labels[INPUTS_LABEL].startswith(built_images[name].ref.rsplit(":", 1)[1])
        assert client.images.get(built_images[name].ref.rsplit(":", 1)[0] + ":latest").id == image.id
    # Two builds back to back (sources edited since the session's build just make the first rebuild).
    first = build_all(TASKS, log=lambda _: None)
    again = build_all(TASKS, log=lambda _: None)
    assert all(b.reused for b in again), "unchanged inputs reuse every image"
    assert [b.ref for b in again] == [b.ref for b in first]
    labels = client.images.get(built_images["worker-os"].ref).labels
    assert labels["agentrl.sandbox-profile"] == "userns" and labels["agentrl.socket-option"] == "backend=docker"


@pytest.mark.docker
def test_worker_image_runs_the_installed_task(built_images, client):  # noqa: F811
    out = client.containers.run(
        built_images["worker-db"].ref, entrypoint=["agentrl-envs", "list"], network_mode="none", remove=True
    ).decode()
    assert re.search(r"^db\s+dev\s+60\b", out, re.M), out
