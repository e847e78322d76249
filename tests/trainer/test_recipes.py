"""The paper recipes (agentrl_trainer/recipes/*.yaml) parse through agentrl-train's own parser,
hold the settings the design reference states for AgentRL, and say where every value comes from.
They cannot run here (no GPU, no Qwen weights): this checks the files, not a training run."""

from __future__ import annotations

import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

pytest.importorskip("trl")
yaml = pytest.importorskip("yaml")

from agentrl_trainer.config import AgentRLConfig  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / "agentrl_trainer" / "recipes").glob("*.yaml"))
TAG = re.compile(r"#\s*\[(PAPER|ISSUE|CHOSEN)\]")

#: What DESIGN.md section 1 states for AgentRL (the paper and its code), tagged [PAPER] in every recipe.
PAPER = {
    "tasks": ["alfworld", "db", "kg", "os", "webshop"],
    "rollout_mode": "async",
    "queue_capacity_groups": 0,  # 0 = 2 x max_groups_per_step
    "lagging_fraction": 0.25,
    "lag_steps": 25,
    "incomplete_reward": -0.2,
    "epsilon": 0.2,
    "dual_clip": 3.0,
    "beta": 1e-4,
    "loss_type": "dapo",
    "task_advantage_norm": True,
}


def test_both_paper_models_have_a_recipe() -> None:
    assert [p.name for p in RECIPES] == ["qwen2.5-32b.yaml", "qwen2.5-7b.yaml"]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_parses_through_the_agentrl_train_parser(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import TrlParser

    # The recipes train in bf16 on GPUs; transformers refuses bf16 on a machine without one.
    monkeypatch.setattr("transformers.training_args.is_torch_bf16_gpu_available", lambda: True)
    monkeypatch.setattr(sys, "argv", ["agentrl-train", "--config", str(path)])
    (config,) = TrlParser((AgentRLConfig,)).parse_args_and_config()
    raw = yaml.safe_load(path.read_text())
    assert set(raw) <= {f.name for f in fields(AgentRLConfig)}, "a key that is not a config field"
    for key, value in PAPER.items():
        assert raw[key] == value, key
    assert config.queue_capacity_groups == 2 * config.max_groups_per_step
    assert config.engine == "vllm" and config.bf16 is True and config.use_lora is False
    assert config.num_engines >= 4  # 25% lagging rounds to at least one lagging engine
    size = path.stem.removeprefix("qwen2.5-").upper()
    assert config.model_name_or_path.endswith(f"Qwen2.5-{size}-Instruct")


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_value_names_its_source(path: Path) -> None:
    settings = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    assert settings
    untagged = [line for line in settings if not TAG.search(line)]
    assert untagged == []
    for line in settings:
        key = line.split(":", 1)[0]
        if key in PAPER:
            assert "[PAPER]" in line, line
        elif "[PAPER]" in line:
            pytest.fail(f"{key} is tagged [PAPER] but DESIGN.md's summary (PAPER above) does not state it")


def test_docs_give_the_commands_for_each_recipe() -> None:
    doc = (ROOT / "docs" / "recipes.md").read_text()
    for path in RECIPES:
        assert f"agentrl_trainer/recipes/{path.name}" in doc
    for command in ("agentrl-envs", "trl vllm-serve", "accelerate launch"):
        assert command in doc
    assert "not run" in doc.lower()
