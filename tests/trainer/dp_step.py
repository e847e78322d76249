"""One optimizer step of ``AgentRLTrainer`` on a fixed global batch: alone, or as one process of
a data-parallel run (the helper that tests/trainer/test_data_parallel.py launches).

    python dp_step.py [--make-model] MODEL_DIR OUT_DIR     # one process (first writing the model)
    ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes 2 dp_step.py MODEL_DIR OUT_DIR

The global batch is ``GROUPS`` GRPO groups of two tasks; process ``r`` of ``N`` trains on groups
``r, r + N, ...`` (so in two processes they hold different numbers of rows, micro-batches and
task mixes). For each variant (LoRA with the KL through the disabled adapter; full fine-tuning
with TRL's reference model) it writes ``OUT_DIR/<variant>-rank<r>.pt``: the trainable parameters
before and after the step, and the weights the step's publish loaded into a rollout engine
built by ``trainer.local_engine``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentrl_trainer.config import AgentRLConfig
from agentrl_trainer.pipeline import Group
from agentrl_trainer.rollout import Episode, EpisodeSpec
from agentrl_trainer.trainer import AgentRLTrainer
from agentrl_trainer.trajectory import Segment

# (task, rewards of the group's two episodes, prompt length, completion lengths)
GROUPS = [
    ("a", (1.0, 0.0), 7, (5, 3)),
    ("a", (0.0, 1.0), 9, (4, 6)),
    ("b", (1.0, 0.5), 6, (7, 2)),
    ("b", (0.0, 0.25), 8, (3, 5)),
    ("a", (0.75, 0.0), 5, (6, 4)),
]
VARIANTS = {"lora": {"use_lora": True, "lora_r": 4, "lora_alpha": 8}, "full": {"use_lora": False}}


@dataclass
class Trajectory:
    """What the trainer reads of a TokenTrajectory."""

    segments: list[Segment]
    turns: list[Any] = field(default_factory=list)
    drift_turns: int = 0
    forks: int = 0


@torch.no_grad()
def fixed_groups(model: Any) -> list[Group]:
    """The global batch; old logprobs are the initial model's, so the PPO ratio starts at 1."""
    gen = torch.Generator().manual_seed(1234)
    vocab = model.config.vocab_size
    groups = []
    for gid, (task, rewards, prompt_len, lengths) in enumerate(GROUPS):
        prompt = torch.randint(2, vocab, (prompt_len,), generator=gen).tolist()
        episodes = []
        for j, (reward, n) in enumerate(zip(rewards, lengths, strict=True)):
            ids = prompt + torch.randint(2, vocab, (n,), generator=gen).tolist()
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()  # (T, V)
            logp = torch.log_softmax(logits, -1)[:-1].gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]  # (T-1,)
            mask = [0] * prompt_len + [1] * n
            lps = [0.0] + [float(v) if m else 0.0 for v, m in zip(logp, mask[1:], strict=True)]
            spec = EpisodeSpec(task, gid, gid, 2 * gid + j)
            episodes.append(Episode(spec, "completed", reward, False, Trajectory([Segment(ids, mask, lps)])))  # type: ignore[arg-type]
        groups.append(Group(gid, task, gid, episodes))
    return groups


class FixedPipeline:
    """Stands in for the RolloutPipeline: hands out this process's groups, publishes to one engine."""

    def __init__(self, groups: list[Group], engines: list[Any]) -> None:
        self.groups, self.engines, self.queued = groups, engines, 0
        self.published: list[int] = []

    def get_batch(self, min_groups: int, timeout: float | None = None) -> list[Group]:
        return self.groups

    def publish(self, step: int, named: dict[str, torch.Tensor], every_engine: bool = False) -> list[int]:
        for engine in self.engines:
            engine.load_weights(named, step)
        self.published.append(step)
        return list(range(len(self.engines)))

    def stats(self) -> dict[str, float]:
        return {"engine_idle_fraction": 0.0}

    def stop(self) -> None:
        pass


def run(model_dir: str, out: Path, variant: str) -> None:
    args = AgentRLConfig(
        output_dir=str(out / f"trainer-{variant}"),
        tasks=["a", "b"],
        num_generations=2,
        max_groups_per_step=len(GROUPS),
        micro_batch_rows=2,
        max_completion_length=8,
        max_steps=1,
        optim="sgd",  # the step is lr × gradient: a clean comparison of the synced gradients
        learning_rate=0.5,
        lr_scheduler_type="constant",
        beta=0.05,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        seed=0,
        **VARIANTS[variant],
    )
    trainer = AgentRLTrainer(args, model=model_dir)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    mine = fixed_groups(trainer.accelerator.unwrap_model(trainer.model))[rank::world]
    engine = trainer.local_engine(f"engine-{variant}")
    trainer.engines = [engine]
    pipeline = FixedPipeline(mine, [engine])
    trainer.pipeline = pipeline  # type: ignore[assignment]

    def trainable() -> dict[str, torch.Tensor]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    before = trainable()
    trainer.train()
    after = trainable()
    engine_state = {n: t.detach().clone() for n, t in engine.engine.model.state_dict().items() if n in after}
    torch.save(
        {
            "world": world,
            "rank": rank,
            "groups": [g.group_id for g in mine],
            "before": before,
            "after": after,
            "engine": engine_state,
            "published": pipeline.published,
            "step_log": trainer.step_log,
            "ratio_outliers": trainer.ratio_outliers,
            "trained_ids": sorted(
                {
                    t
                    for g in mine
                    for e in g.episodes
                    for seg in e.trajectory.segments
                    for t, m in zip(seg.input_ids, seg.loss_mask, strict=True)
                    if m
                }
            ),
        },
        out / f"{variant}-rank{rank}.pt",
    )


def tiny_llama_config(**overrides: Any) -> Any:
    """A 2-layer Llama of width 32 (the size tests/trainer/test_logprobs.py uses)."""
    import transformers

    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    return transformers.LlamaConfig(**{"vocab_size": 97, **sizes, "num_key_value_heads": 2, **overrides})


def make_tiny_model(path: Path) -> None:
    """A 2-layer Llama and a word-level tokenizer saved as a local model directory (no hub)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "</s>": 1, **{f"t{i}": i for i in range(2, 97)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="</s>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>")
    torch.manual_seed(0)
    config = tiny_llama_config(vocab_size=len(vocab), pad_token_id=0, eos_token_id=1, bos_token_id=1)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    fast.save_pretrained(path)


def main() -> None:
    model_dir, out_dir = [a for a in sys.argv[1:] if a != "--make-model"]
    if "--make-model" in sys.argv:
        make_tiny_model(Path(model_dir))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for variant in VARIANTS:
        run(model_dir, out, variant)


if __name__ == "__main__":
    main()
