"""Data-parallel training: two processes (gloo on CPU) take the same first step as one process
on the same global batch, and what that needs: sample shards, task statistics and step metrics
over processes, engine copies built from gathered weights."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl_trainer.advantages import normalize_by_task
from agentrl_trainer.distributed import (
    build_copy,
    gather_merged_weights,
    gather_weights,
    merge_step_metrics,
    normalize_with_moments,
    shard_indices,
    task_moments,
)

HERE = Path(__file__).parent
# float32 sums in another order (each process's half, then DDP's all-reduce): a few ulp
ATOL = 1e-6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd: list[str], env: dict[str, str], timeout: float) -> None:
    """Run ``cmd`` in its own process group; kill the whole group if it overruns or fails."""
    proc = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd[:6]} did not finish in {timeout} s:\n{out.decode(errors='replace')[-4000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, f"{cmd[:6]} exited {proc.returncode}:\n{out.decode(errors='replace')[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One process, then two under ``accelerate launch`` (torchrun, gloo), on the same batch."""
    root = tmp_path_factory.mktemp("dp")
    env = {
        **os.environ,
        "HF_HOME": str(root / "hf"),  # no user accelerate config, nothing from a hub
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "ACCELERATE_USE_CPU": "true",  # TrainingArguments: CPU processes, gloo
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    model = root / "model"
    run([sys.executable, "dp_step.py", "--make-model", str(model), str(root / "one")], env, timeout=240)
    launch = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_ip", "127.0.0.1", "--main_process_port", str(free_port()),
        "dp_step.py", str(model), str(root / "two"),
    ]  # fmt: skip
    run(launch, env, timeout=300)
    return root


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("variant", ["lora", "full"])
def test_two_processes_take_the_step_of_one_on_the_same_global_batch(runs: Path, variant: str) -> None:
    one = torch.load(runs / "one" / f"{variant}-rank0.pt")
    ranks = [torch.load(runs / "two" / f"{variant}-rank{r}.pt") for r in range(2)]
    assert one["world"] == 1 and [r["world"] for r in ranks] == [2, 2]
    # each process trained its own share: different rows, micro-batch counts and task mixes
    assert ranks[0]["groups"] == [0, 2, 4] and ranks[1]["groups"] == [1, 3]
    assert one["groups"] == [0, 1, 2, 3, 4]
    for r in ranks:
        assert max_diff(r["before"], one["before"]) == 0.0
    change = max_diff(one["after"], one["before"])
    assert change > 1000 * ATOL, "the step must move the parameters for the comparison to mean anything"
    for r in ranks:
        diff = max_diff(r["after"], one["after"])
        print(f"{variant} rank {r['rank']}: max |2-proc - 1-proc| = {diff:.3g} (step moved them by {change:.3g})")
        assert diff <= ATOL
        # one publish per step: the start (every engine), then step 1, from the synced weights
        assert r["published"] == [0, 1]
        assert max_diff(r["engine"], r["after"]) == 0.0
    assert max_diff(ranks[0]["after"], ranks[1]["after"]) == 0.0
    # the step's metrics cover the whole global batch on every process
    for r in ranks:
        (m,) = r["step_log"]
        assert m["rollout/groups"] == 5 and m["rollout/episodes"] == 10
        assert m["reward/mean"] == pytest.approx(one["step_log"][0]["reward/mean"])
        assert m["rollout/trained_tokens"] == one["step_log"][0]["rollout/trained_tokens"]
    # the importance-ratio record (agentrl_trainer/ratios.py): the old logprobs are the initial
    # model's and the weights do not move within a step, so every ratio is 1; the outliers are
    # three trained tokens of the step
    for r in (one, *ranks):
        (m,) = r["step_log"]
        assert 0.0 <= m["loss/log_ratio_abs_max"] < 1e-4 and m["loss/log_ratio_over_1"] == 0.0
        assert m["loss/free_log_ratio_abs_max"] < 1e-4 and m["loss/free_log_ratio_over_1"] == 0.0
        (outliers,) = r["ratio_outliers"]
        assert outliers["step"] == 1 and len(outliers["largest"]) == len(outliers["largest_unconstrained"]) == 3
        assert {t["token"] for t in outliers["largest"]} <= set(r["trained_ids"])


# ---------------------------------------------------------------------- the pieces, in one process


def test_shard_indices_split_each_task_without_overlap() -> None:
    indices = {"db": list(range(7)), "os": ["a", "b"], "kg": [0]}
    shards = [shard_indices(indices, r, 2) for r in range(2)]
    assert shards[0] == {"db": [0, 2, 4, 6], "os": ["a"], "kg": [0]}
    assert shards[1] == {"db": [1, 3, 5], "os": ["b"], "kg": [0]}  # kg: too small to split
    assert shard_indices(indices, 0, 1) == indices
    with pytest.raises(ValueError, match="rank"):
        shard_indices(indices, 2, 2)


def test_task_moments_summed_over_processes_normalize_as_one_batch() -> None:
    gen = torch.Generator().manual_seed(0)
    adv = torch.randn(6, 5, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).long()
    tasks = ["a", "b", "a", "a", "b", "c"]
    whole = normalize_by_task(adv * mask, mask, tasks)
    names = ["a", "b", "c"]
    parts = [slice(0, 2), slice(2, 6)]  # process 0 has no "c"
    moments = sum(task_moments(adv[p] * mask[p], mask[p], tasks[p], names) for p in parts)
    got = torch.cat([normalize_with_moments(adv[p] * mask[p], mask[p], tasks[p], names, moments) for p in parts])
    assert torch.allclose(got, whole, atol=1e-6)
    assert not torch.allclose(normalize_by_task(adv[:2] * mask[:2], mask[:2], tasks[:2]), whole[:2], atol=1e-3)


def test_merge_step_metrics_sums_counts_maxes_maxima_weights_means_by_episodes() -> None:
    parts = [
        {"rollout/episodes": 6, "reward/mean": 0.5, "rollout/staleness_max": 2, "reward/db": 1.0},
        {"rollout/episodes": 2, "reward/mean": 1.0, "rollout/staleness_max": 5},
    ]
    assert merge_step_metrics(parts) == {
        "rollout/episodes": 8,
        "reward/mean": pytest.approx(0.625),
        "rollout/staleness_max": 5,
        "reward/db": 1.0,
    }


def tiny_llama(tie: bool = False):
    transformers = pytest.importorskip("transformers")
    from dp_step import tiny_llama_config

    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(tiny_llama_config(tie_word_embeddings=tie))


def with_lora(model):
    peft = pytest.importorskip("peft")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return peft.get_peft_model(model, lora)


@pytest.mark.parametrize("kind", ["plain", "tied", "lora"])
def test_build_copy_is_an_independent_model_with_the_same_outputs(kind: str) -> None:
    model = tiny_llama(tie=kind == "tied")
    if kind == "lora":
        model = with_lora(model)
    model.eval()
    ids = torch.tensor([[3, 5, 7, 11, 13, 17]])
    copy_ = build_copy(model).eval()
    with torch.no_grad():
        assert torch.equal(copy_(input_ids=ids).logits, model(input_ids=ids).logits)
    assert copy_.state_dict().keys() == model.state_dict().keys()
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(copy_.parameters(), model.parameters(), strict=True))
    if kind == "tied":
        base = copy_
        assert base.lm_head.weight is base.model.embed_tokens.weight
    # the copy takes published weights by the trainer model's names
    trainable = gather_weights(model, trainable_only=True)
    assert trainable and all(model.get_parameter(n).requires_grad for n in trainable)
    bumped = {n: t + 1.0 for n, t in trainable.items()}
    copy_.load_state_dict(bumped, strict=False)
    assert torch.equal(copy_.get_parameter(next(iter(bumped))), next(iter(bumped.values())))


def test_gather_merged_weights_folds_lora_into_base_names_and_leaves_the_adapter() -> None:
    model = with_lora(tiny_llama()).eval()
    before = copy.deepcopy(model.state_dict())
    merged = gather_merged_weights(model)
    assert not any("lora_" in n or "base_layer" in n for n in merged)
    plain = tiny_llama()
    plain.load_state_dict(merged)
    ids = torch.tensor([[3, 5, 7, 11]])
    with torch.no_grad():
        assert torch.allclose(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    after = model.state_dict()
    # unmerged again (W + BA - BA: equal up to rounding, as peft's unmerge)
    assert all(torch.allclose(before[n], after[n], atol=1e-6) for n in before)


def test_shipped_accelerate_configs_load_and_point_at_the_deepspeed_json() -> None:
    """deploy/accelerate parses as accelerate reads it (DeepSpeed itself is not installed here)."""
    import json

    from accelerate.commands.config.config_args import load_config_from_file

    root = HERE.parents[1]
    assert load_config_from_file(str(root / "deploy/accelerate/ddp.yaml")).distributed_type == "MULTI_GPU"
    zero3 = load_config_from_file(str(root / "deploy/accelerate/zero3.yaml"))
    assert zero3.distributed_type == "DEEPSPEED"
    ds = json.loads((root / zero3.deepspeed_config["deepspeed_config_file"]).read_text())
    assert ds["zero_optimization"]["stage"] == 3
    # one optimizer step per batch (AgentRLConfig requires accumulation 1): filled in by transformers
    assert ds["gradient_accumulation_steps"] == "auto" and ds["train_micro_batch_size_per_gpu"] == "auto"
