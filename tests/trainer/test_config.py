"""AgentRLConfig: validation, AgentRL defaults, and the agentrl-train command line (no training)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace
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
        (
            {"max_groups_per_step": 4, "queue_capacity_groups": 3},
            r"queue_capacity_groups \(3\) must be at least max_groups_per_step \(4\)",
        ),
        ({"dual_clip": 1.0}, "dual_clip must be > 1"),
        ({"dual_clip": 0.5}, "dual_clip must be > 1"),
        ({"lagging_fraction": 1.0}, "lagging_fraction must be in"),
        ({"lagging_prob": 1.5}, "lagging_prob in"),
        ({"lag_steps": 0}, "lag_steps must be at least 1"),
        ({"num_engines": 0}, "num_engines must be at least 1"),
        ({"micro_batch_rows": 0}, "micro_batch_rows must be at least 1"),
        ({"micro_batch_tokens": -1}, "micro_batch_tokens must be 0"),
        ({"engine_device": "gpu"}, "engine_device 'gpu' is not a torch device"),
        ({"close_calls_in_budget": True}, "close_calls_in_budget needs constrain_tool_calls"),
        ({"engine_threads": -1}, "engine_threads must be >= 0"),
        ({"engine_device": "cpu", "engine": "vllm", "constrain_tool_calls": False}, "engine_device is for engine='transformers'"),
    ],
)
def test_validation_messages(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        config(tmp_path, **kwargs)


def test_valid_non_defaults_pass(tmp_path: Path) -> None:
    c = config(tmp_path, tasks=["db", "os"], task_weights=[2.0, 1.0], rollout_mode="sync", dual_clip=None, lagging_fraction=0.0)
    assert c.task_weights == [2.0, 1.0] and c.rollout_mode == "sync" and c.dual_clip is None
    assert config(tmp_path, engine_device="cuda:1").engine_device == "cuda:1"  # checked by name, not against the machine


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
            self.accelerator = SimpleNamespace(is_main_process=True)  # one process: it writes the step log

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


# ---------------------------------------------------------------------------------------- TRL fields
#
# Every field inherited from TRL's GRPOConfig must be honoured, generic or rejected: a field that a
# new TRL adds fails test_every_trl_field_is_classified until it is put in one of config.py's tables.

# A realistic non-default value for each rejected field that is neither a bool nor a number.
NON_DEFAULT: dict[str, Any] = {
    "cache_implementation": "static",
    "chat_template_kwargs": {"enable_thinking": False},
    "data_seed": 7,
    "delta": 1.5,
    "eval_accumulation_steps": 2,
    "eval_steps": 10,
    "eval_strategy": "steps",
    "generation_kwargs": {"top_k": 5},
    "greater_is_better": True,
    "include_for_metrics": ["loss"],
    "include_num_input_tokens_seen": "all",
    "label_names": ["labels"],
    "length_column_name": "len",
    "liger_kernel_config": {"rope": True},
    "log_completions_hub_repo": "me/completions",
    "max_tool_calling_iterations": 5,
    "metric_for_best_model": "reward",
    "min_p": 0.1,
    "multi_objective_aggregation": "normalize_then_sum",
    "neftune_noise_alpha": 5.0,
    "num_completions_to_print": 2,
    "num_generations_eval": 4,
    "off_policy_mask_threshold": 0.5,
    "pad_to_multiple_of": 64,
    "reward_weights": [2.0],
    "router_aux_loss_coef": 0.01,
    "train_sampling_strategy": "sequential",
    "transformers_continuous_batching_config": {"max_batch_tokens": 512},
    "vllm_importance_sampling_cap": 2.0,
    "vllm_importance_sampling_clip_min": 0.5,
    "vllm_importance_sampling_mode": "token_truncate",
    "vllm_max_model_length": 4096,
    "vllm_mode": "server",
    "vllm_model_impl": "transformers",
    "vllm_server_base_url": "http://localhost:8000",
    "vllm_structured_outputs_regex": r"\d+",
}


def non_default(name: str) -> Any:
    """A value of field ``name`` other than AgentRLConfig's default: a flipped bool, a number + 1,
    or NON_DEFAULT's entry (a new rejected field of another kind needs one there)."""
    import dataclasses

    f = next(f for f in dataclasses.fields(AgentRLConfig) if f.name == name)
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    return NON_DEFAULT[name]


def test_every_trl_field_is_classified() -> None:
    import dataclasses

    from trl import GRPOConfig

    from agentrl_trainer.config import GENERIC_FIELDS, HONOURED_FIELDS, REJECTED_FIELDS

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    tables = {"honoured": set(HONOURED_FIELDS), "generic": set(GENERIC_FIELDS), "rejected": set(REJECTED_FIELDS)}
    classified = set().union(*tables.values())
    assert sorted(trl_fields - classified) == [], "TRL fields in no table of agentrl_trainer/config.py"
    assert sorted(classified - trl_fields) == [], "table entries that are not GRPOConfig fields (renamed or removed in TRL?)"
    for a, b in (("honoured", "generic"), ("honoured", "rejected"), ("generic", "rejected")):
        assert tables[a].isdisjoint(tables[b]), (a, b, sorted(tables[a] & tables[b]))
    assert all(HONOURED_FIELDS.values()) and all(REJECTED_FIELDS.values())  # each says where, or what instead


@pytest.mark.parametrize("name", sorted(__import__("agentrl_trainer.config").config.REJECTED_FIELDS))
def test_setting_a_rejected_trl_field_raises(tmp_path: Path, name: str) -> None:
    value = non_default(name)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{name}={value!r}')} is not supported by AgentRLTrainer: .{{20}}"):
        config(tmp_path, **{name: value})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"loss_type": "grpo"}, r"loss_type='grpo' is not supported by AgentRLTrainer: .*leave loss_type at 'dapo'"),
        ({"loss_type": "dr_grpo"}, r"loss_type='dr_grpo'"),
        ({"loss_type": "bnpo"}, r"loss_type='bnpo'"),
        ({"loss_type": "cispo"}, r"loss_type='cispo'"),
        (
            {"scale_rewards": "batch"},
            r"scale_rewards='batch' is not supported by AgentRLTrainer: .*use 'group' \(GRPO\) or 'none'",
        ),
        ({"importance_sampling_level": "sequence"}, r"importance_sampling_level='sequence' .*use 'token'"),
        ({"mask_truncated_completions": True}, r"mask_truncated_completions=True .*incomplete_reward"),
        ({"vllm_importance_sampling_correction": True}, r"vllm_importance_sampling_correction=True .*sampled each token"),
        ({"use_vllm": True}, r"use_vllm=True .*set engine='vllm'"),
        ({"per_device_train_batch_size": 4}, r"per_device_train_batch_size=4 is not supported by AgentRLTrainer"),
        ({"steps_per_generation": 2}, r"steps_per_generation=2 is not supported by AgentRLTrainer"),
        ({"generation_batch_size": 16}, r"generation_batch_size=16 is not supported by AgentRLTrainer"),
        ({"scale_rewards": 1}, r"scale_rewards=1 is not supported"),  # a number is not a bool
    ],
)
def test_unimplemented_values_of_honoured_trl_fields_raise(tmp_path: Path, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        config(tmp_path, **kwargs)


@pytest.mark.parametrize(("given", "stored"), [("group", "group"), (True, "group"), ("none", "none"), (False, "none")])
def test_scale_rewards_group_and_none_are_honoured(tmp_path: Path, given: Any, stored: str) -> None:
    assert config(tmp_path, scale_rewards=given).scale_rewards == stored  # what trainer.py reads (!= "none")


def test_trl_defaults_that_claim_unimplemented_behaviour_are_off(tmp_path: Path) -> None:
    c = config(tmp_path)
    assert c.vllm_importance_sampling_correction is False and c.use_bias_correction_kl is False
    assert c.loss_type == "dapo" and c.importance_sampling_level == "token" and c.scale_rewards == "group"


def test_numbers_written_as_ints_are_not_mistaken_for_changes(tmp_path: Path) -> None:
    c = config(tmp_path, entropy_coef=0, top_entropy_quantile=1, vllm_gpu_memory_utilization=0.3, top_k=0)
    assert c.entropy_coef == 0


def test_honoured_and_generic_fields_may_be_set(tmp_path: Path) -> None:
    c = config(
        tmp_path,
        num_generations=4,
        per_device_train_batch_size=4,
        epsilon=0.1,
        epsilon_high=0.3,
        temperature=0.7,
        top_p=0.9,
        learning_rate=1e-5,
        max_steps=3,
        vllm_server_port=8100,
        vllm_server_timeout=30.0,
        disable_dropout=True,
        loss_type="dapo",
    )
    assert (c.epsilon, c.epsilon_high, c.temperature, c.top_p, c.max_steps) == (0.1, 0.3, 0.7, 0.9, 3)
    assert c.per_device_train_batch_size == 4 and c.steps_per_generation == 1


@pytest.mark.parametrize("num_generations", [4, 8])
def test_a_config_rebuilt_from_its_own_fields_is_accepted(tmp_path: Path, num_generations: int) -> None:
    """A saved config (derived fields filled in: generation_batch_size, pad_to_multiple_of=None, ...) loads again."""
    import dataclasses

    c = config(tmp_path, num_generations=num_generations, scale_rewards=False)
    again = AgentRLConfig(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.init})
    assert again.num_generations == num_generations and again.generation_batch_size == c.generation_batch_size


def test_yaml_with_a_rejected_trl_field_fails_with_its_message(tmp_path: Path) -> None:
    from trl import TrlParser

    path = write_yaml(tmp_path)
    path.write_text(path.read_text() + "loss_type: grpo\n")
    with pytest.raises(ValueError, match="loss_type='grpo' is not supported by AgentRLTrainer"):
        TrlParser((AgentRLConfig,)).parse_args_and_config(args=["--config", str(path)])


def test_the_config_doc_names_every_honoured_and_rejected_field() -> None:
    from agentrl_trainer.config import HONOURED_FIELDS, REJECTED_FIELDS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "trainer-config.md").read_text()
    missing = [name for name in [*HONOURED_FIELDS, *REJECTED_FIELDS] if f"`{name}`" not in doc]
    assert missing == [], "docs/trainer-config.md does not name these fields"


def test_engine_threads_reach_the_trainers_rollout_engines(tmp_path: Path) -> None:
    """``engine_threads`` is the thread count the engines decode with (0: all cores)."""
    import types

    import transformers
    from model_helpers import TinyTokenizer

    from agentrl_trainer.trainer import AgentRLTrainer

    model = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    )

    for threads, expected in ((1, 1), (0, len(os.sched_getaffinity(0)))):
        owner = types.SimpleNamespace(
            model=model, processing_class=TinyTokenizer(), agentrl_args=config(tmp_path, engine_threads=threads)
        )
        engine = AgentRLTrainer.local_engine(owner, "e")  # type: ignore[arg-type]
        try:
            assert engine.engine.num_threads == expected
        finally:
            engine.close()
