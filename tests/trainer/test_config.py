"""AgentRLConfig: validation, AgentRL defaults, and the agentrl-train command line (no training)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from agentrl_trainer.config import AgentRLConfig  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def config(tmp_path: Path, **kwargs: Any) -> AgentRLConfig:
    return AgentRLConfig(output_dir=str(tmp_path / "out"), report_to="none", **kwargs)


def test_agentrl_defaults(tmp_path: Path) -> None:
    c = config(tmp_path)
    assert c.beta == 1e-4
    assert c.lag_steps == 25
    assert c.lagging_fraction == 0.25
    assert c.lagging_prob == 0.25
    assert c.dual_clip == 3.0
    assert c.incomplete_reward == -0.2
    assert c.rollout_mode == "async"
    assert c.task_advantage_norm is True
    assert c.tasks == ["db"] and c.task_weights == []
    assert c.max_groups_per_step == 4 and c.queue_capacity_groups == 8  # 2 × max_groups_per_step
    assert c.num_generations == 8 and c.per_device_train_batch_size == 8
    assert c.gradient_accumulation_steps == 1
    assert c.remove_unused_columns is False


def test_queue_capacity_follows_max_groups_unless_given(tmp_path: Path) -> None:
    assert config(tmp_path, max_groups_per_step=6).queue_capacity_groups == 12
    assert config(tmp_path, max_groups_per_step=6, queue_capacity_groups=7).queue_capacity_groups == 7


def test_group_size_comes_from_num_generations(tmp_path: Path) -> None:
    c = config(tmp_path, num_generations=4)
    assert c.num_generations == 4 and c.per_device_train_batch_size == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gradient_accumulation_steps": 2}, "gradient_accumulation_steps must be 1"),
        ({"rollout_mode": "batch"}, "rollout_mode must be 'async' or 'sync', not 'batch'"),
        ({"engine": "llama"}, "engine must be 'transformers' or 'vllm'"),
        ({"tasks": []}, "tasks is empty"),
        ({"tasks": ["db", "os"], "task_weights": [1.0]}, "task_weights has 1 entries for 2 tasks"),
        ({"min_groups_per_step": 5, "max_groups_per_step": 4}, r"min_groups_per_step \(5\) <= max_groups_per_step \(4\)"),
        ({"min_groups_per_step": 0}, "min_groups_per_step"),
        ({"max_groups_per_step": 4, "queue_capacity_groups": 3}, "queue_capacity_groups must be at least max_groups_per_step"),
        ({"dual_clip": 1.0}, "dual_clip must be > 1"),
        ({"dual_clip": 0.5}, "dual_clip must be > 1"),
        ({"lagging_fraction": 1.0}, "lagging_fraction must be in"),
        ({"lagging_prob": 1.5}, "lagging_prob in"),
        ({"lag_steps": 0}, "lag_steps must be at least 1"),
        ({"num_engines": 0}, "num_engines must be at least 1"),
        ({"micro_batch_rows": 0}, "micro_batch_rows must be at least 1"),
    ],
)
def test_validation_messages(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        config(tmp_path, **kwargs)


def test_valid_non_defaults_pass(tmp_path: Path) -> None:
    c = config(tmp_path, tasks=["db", "os"], task_weights=[2.0, 1.0], rollout_mode="sync", dual_clip=None, lagging_fraction=0.0)
    assert c.task_weights == [2.0, 1.0] and c.rollout_mode == "sync" and c.dual_clip is None


def test_help_lists_the_agentrl_fields(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from agentrl_trainer import cli

    monkeypatch.setattr(sys, "argv", ["agentrl-train"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--rollout_mode",
        "--tasks",
        "--task_weights",
        "--lag_steps",
        "--lagging_fraction",
        "--lagging_prob",
        "--dual_clip",
        "--task_advantage_norm",
        "--queue_capacity_groups",
        "--incomplete_reward",
        "--num_generations",  # TRL's own fields too
    ):
        assert flag in out, flag


def write_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(
        f"output_dir: {tmp_path / 'out'}\n"
        "report_to: none\n"
        "tasks: [db, os]\n"
        "task_weights: [3.0, 1.0]\n"
        "rollout_mode: sync\n"
        "max_groups_per_step: 3\n"
        "lag_steps: 5\n"
        "beta: 0.0\n"
        "num_generations: 4\n"
    )
    return path


def test_yaml_config_is_parsed_and_flags_override_it(tmp_path: Path) -> None:
    from trl import TrlParser

    (args,) = TrlParser((AgentRLConfig,)).parse_args_and_config(args=["--config", str(write_yaml(tmp_path)), "--lag_steps", "7"])
    assert isinstance(args, AgentRLConfig)
    assert args.tasks == ["db", "os"] and args.task_weights == [3.0, 1.0]
    assert args.rollout_mode == "sync"
    assert args.max_groups_per_step == 3 and args.queue_capacity_groups == 6
    assert args.beta == 0.0 and args.num_generations == 4
    assert args.lag_steps == 7  # the flag after --config wins


def test_yaml_config_is_validated(tmp_path: Path) -> None:
    from trl import TrlParser

    path = write_yaml(tmp_path)
    path.write_text(path.read_text() + "min_groups_per_step: 4\n")
    with pytest.raises(ValueError, match="min_groups_per_step"):
        TrlParser((AgentRLConfig,)).parse_args_and_config(args=["--config", str(path)])


def test_cli_main_builds_the_trainer_from_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentrl_trainer.trainer as trainer_module
    from agentrl_trainer import cli

    seen: dict[str, Any] = {}

    class FakeTrainer:  # stands in for AgentRLTrainer: nothing is trained
        def __init__(self, args: AgentRLConfig) -> None:
            seen["args"] = args
            self.step_log = [{"step": 1.0, "reward/mean": 0.5}]

        def train(self) -> None:
            seen["trained"] = True

        def save_model(self, output_dir: str) -> None:
            Path(output_dir).mkdir(parents=True)  # as the real one does
            seen["saved"] = output_dir

    monkeypatch.setattr(trainer_module, "AgentRLTrainer", FakeTrainer)
    monkeypatch.setattr(sys, "argv", ["agentrl-train"])
    cli.main(["--config", str(write_yaml(tmp_path)), "--rollout_mode", "async"])
    args = seen["args"]
    assert args.rollout_mode == "async" and args.tasks == ["db", "os"] and args.lag_steps == 5
    assert seen["trained"] is True and seen["saved"] == str(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "agentrl_steps.json").read_text()) == [{"step": 1.0, "reward/mean": 0.5}]
