"""Where a ``make train-demo`` optimizer step's time goes, on real batches (issue 29, item 3).

    .venv/bin/python benchmarks/train_step.py [--batches 2] [--seed 0]
        [--variants demo no-share ...] [--repeats 1] [--out benchmarks/results/train_step.json]
        [--save-batches FILE | --load-batches benchmarks/results/train_step_batches.pt]

The demo's trainer (``agentrl_trainer.demo.trainer_config``: SmolLM2-135M-Instruct + LoRA r 16,
the five tasks' ``easy`` splits, groups of 4, 4 groups a step, 48-token turns, the tool-call
grammar, temperature 0.7) collects ``--batches`` real step batches with its two engines, in the
synchronous mode so that generation is timed alone. The engines are then closed and each
*variant* of the training step (the forward/backward over the batch's micro-batches, what the
record's ``time/train_s`` measures) runs on the same batches, alone on the machine:

* ``demo`` — what the demo does (shared prompt heads; micro-batches of at most 4,096 tokens
  computed, cut where rows stop sharing a head: ``agentrl_trainer.batch.micro_batches``);
* ``padded-chunks`` — the micro-batching before (commit 2a77c7d): at most 4,096 padded tokens,
  rows in task order, cut wherever the cap falls;
* ``no-share`` — every row computes its whole prompt;
* ``mb8192`` — micro-batches of at most 8,192 padded tokens (more rows share a head);
* ``bf16`` — the forward/backward under CPU autocast to bfloat16 (weights stay fp32).

Besides seconds per step it records, per batch: rows, tokens (real and padded, trained),
the forward's and the backward's share (timed separately in one extra pass), and the largest
logprob difference of each variant from ``demo`` on the trained tokens (0 for an exact variant).
CPU time is the process's (``time.process_time``); wall time depends on what else runs.

``benchmarks/results/train_step_batches.pt`` holds the two batches the committed result timed
(collected on 2026-12-04 with ``--save-batches``, seed 0; rollouts as at commit 2a77c7d):
``--load-batches`` re-times them without the engines and the task workers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl_trainer.batch import TrainBatch, select_rows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

VARIANTS = ("demo", "padded-chunks", "no-share", "mb8192", "bf16")


def _variant_config(name: str) -> tuple[dict[str, Any], bool, bool]:
    """(trainer config overrides, autocast to bfloat16, the micro-batching of before) of a variant."""
    return {
        "demo": ({}, False, False),
        "padded-chunks": ({}, False, True),
        "no-share": ({"share_prompt_prefix": False}, False, False),
        "mb8192": ({"micro_batch_tokens": 8192}, False, False),
        "bf16": ({}, True, False),
    }[name]


def padded_chunks(trainer: Any, batch: Any) -> list[list[int]]:
    """The micro-batches of commit 2a77c7d and before: rows in (task, first 64 tokens) order, cut
    at ``micro_batch_rows`` rows or ``micro_batch_tokens`` padded tokens, heads not considered."""
    from agentrl_trainer.batch import micro_batches

    a = trainer.agentrl_args
    order = sorted(range(batch.input_ids.shape[0]), key=lambda r: (batch.row_task[r], batch.input_ids[r, :64].tolist()))
    return micro_batches(order, batch.row_lengths().tolist(), a.micro_batch_rows, a.micro_batch_tokens)


@dataclass
class SavedBatch:
    """The tensors of a :class:`agentrl_trainer.batch.TrainBatch` that a training step reads."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    row_task: list[str]
    turns: int
    # saved since the grammar's behaviour policy (docs/trainer.md); batches saved before have none
    old_free_logprobs: torch.Tensor | None = None
    allowed_at: torch.Tensor | None = None
    allowed_bits: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.old_free_logprobs is None:
            self.old_free_logprobs = self.old_logprobs
        if self.allowed_at is None or self.allowed_bits is None:
            self.allowed_at = torch.zeros((0, 2), dtype=torch.long)
            self.allowed_bits = torch.zeros((0, 0), dtype=torch.uint8)

    @classmethod
    def of(cls, b: Any) -> SavedBatch:
        if isinstance(b, SavedBatch):
            return b
        turns = sum(len(e.trajectory.turns) for e in b.episodes if e.trajectory)
        return cls(
            b.input_ids,
            b.attention_mask,
            b.loss_mask,
            b.old_logprobs,
            b.advantages,
            b.row_task,
            turns,
            b.old_free_logprobs,
            b.allowed_at,
            b.allowed_bits,
        )

    def head_prefixes(self) -> list[tuple[int, ...]]:
        return TrainBatch.head_prefixes(self)  # type: ignore[arg-type]

    def row_lengths(self) -> torch.Tensor:
        return TrainBatch.row_lengths(self)  # type: ignore[arg-type]

    def select(self, rows: list[int]) -> dict[str, torch.Tensor]:
        return select_rows(self, rows)


def batch_stats(batch: Any, chunks: list[list[int]]) -> dict[str, Any]:
    lengths = batch.row_lengths().tolist()
    padded = sum(len(c) * max(lengths[r] for r in c) for c in chunks)
    return {
        "rows": len(lengths),
        "micro_batches": len(chunks),
        "tokens": int(sum(lengths)),
        "padded_tokens": int(padded),
        "trained_tokens": int(batch.loss_mask.sum()),
        "longest_row": int(max(lengths)),
        "turns": SavedBatch.of(batch).turns,
    }


def step_logprobs(trainer: Any, batch: Any, *, bf16: bool, padded: bool = False) -> dict[str, Any]:
    """One training step's forward/backward over ``batch`` as ``training_step`` runs it (gradients
    zeroed after); returns times and the trained tokens' logprobs (for the closeness check)."""
    model = trainer.model
    model.train()
    a = trainer.agentrl_args
    chunks = padded_chunks(trainer, batch) if padded else trainer._micro_batches(batch)
    total = float(batch.loss_mask.sum())
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    picked: dict[int, torch.Tensor] = {}
    fwd = bwd = 0.0
    wall0, cpu0 = time.monotonic(), time.process_time()
    for chunk in chunks:
        rows = batch.select(chunk)
        t = time.monotonic()
        with cast:
            logp, cols, _ = trainer._token_logprobs(model, rows)
        from agentrl_trainer.loss import policy_loss

        terms = policy_loss(
            logp.float(),
            rows["old_logprobs"][:, cols],
            rows["advantages"][:, cols],
            rows["loss_mask"][:, cols],
            dual_clip=a.dual_clip,
            normalizer=total,
        )
        t1 = time.monotonic()
        terms.loss.backward()
        t2 = time.monotonic()
        fwd += t1 - t
        bwd += t2 - t1
        mask = rows["loss_mask"][:, cols].bool()
        for i, r in enumerate(chunk):
            picked[r] = logp[i][mask[i]].detach().float()
    out = {
        "wall_s": time.monotonic() - wall0,
        "cpu_s": time.process_time() - cpu0,
        "forward_s": fwd,
        "backward_s": bwd,
        "stats": batch_stats(batch, chunks),
    }
    model.zero_grad(set_to_none=True)
    out["_logprobs"] = torch.cat([picked[r] for r in sorted(picked)])
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=2, help="real step batches collected (each timed under every variant)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--repeats", type=int, default=1, help="timed passes per variant and batch (the fastest kept)")
    p.add_argument("--out", default=str(RESULTS / "train_step.json"))
    p.add_argument("--save-batches", help="also save the collected batches' tensors here (torch.save)")
    p.add_argument("--load-batches", help="time these saved batches instead of collecting new ones")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)

    from agentrl_trainer import AgentRLTrainer
    from agentrl_trainer.demo import git_state, parse_args, trainer_config

    demo = parse_args(["--seed", str(a.seed)])
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(cores)
    trainer = AgentRLTrainer(trainer_config(demo, Path("/tmp/train_step"), rollout_mode="sync", max_steps=a.batches))
    batches: list[Any] = []
    rollout: list[dict[str, float]] = []
    if a.load_batches:
        batches = [SavedBatch(**b) for b in torch.load(a.load_batches)]
    else:
        trainer.start_rollouts()
        try:
            for i in range(a.batches):
                w, c = time.monotonic(), time.process_time()
                batches.append(trainer._prepare_inputs(None))
                rollout.append({"wall_s": time.monotonic() - w, "cpu_s": time.process_time() - c})
                print(f"batch {i}: collected in {rollout[-1]['wall_s']:.1f} s", flush=True)
        finally:
            trainer.stop_rollouts()
    if a.save_batches:
        torch.save([SavedBatch.of(b).__dict__ for b in batches], a.save_batches)

    step_logprobs(trainer, batches[0], bf16=False)  # warm-up, untimed: allocator arenas, oneDNN primitives
    results: dict[str, list[dict[str, Any]]] = {}
    reference: dict[int, torch.Tensor] = {}
    for name in ["demo", *[v for v in a.variants if v != "demo"]]:
        overrides, bf16, padded = _variant_config(name)
        saved = {k: getattr(trainer.agentrl_args, k) for k in overrides}
        for k, v in overrides.items():
            setattr(trainer.agentrl_args, k, v)
        runs = []
        for b, batch in enumerate(batches):
            best = None
            for _ in range(a.repeats):
                r = step_logprobs(trainer, batch, bf16=bf16, padded=padded)
                if best is None or r["wall_s"] < best["wall_s"]:
                    best = r
            assert best is not None
            lp = best.pop("_logprobs")
            if name == "demo":
                reference[b] = lp
            best["max_abs_logprob_diff_vs_demo"] = float((lp - reference[b]).abs().max())
            runs.append(best)
            print(
                f"{name:9s} batch {b}: {best['wall_s']:6.1f} s wall, {best['cpu_s']:6.1f} s CPU "
                f"(forward {best['forward_s']:.1f}, backward {best['backward_s']:.1f}); "
                f"{best['stats']['tokens']} tokens, {best['stats']['padded_tokens']} padded, "
                f"{best['stats']['micro_batches']} micro-batches; |dlogp| {best['max_abs_logprob_diff_vs_demo']:.2e}",
                flush=True,
            )
        results[name] = runs
        for k, v in saved.items():
            setattr(trainer.agentrl_args, k, v)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    summary = {
        name: {
            "train_wall_s": mean([r["wall_s"] for r in runs]),
            "train_cpu_s": mean([r["cpu_s"] for r in runs]),
            "speedup_vs_demo": mean([r["wall_s"] for r in results["demo"]]) / mean([r["wall_s"] for r in runs]),
            "max_abs_logprob_diff_vs_demo": max(r["max_abs_logprob_diff_vs_demo"] for r in runs),
        }
        for name, runs in results.items()
    }
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git": git_state(),
        "machine": {"cpus": cores, "platform": platform.platform(), "torch": torch.__version__},
        "settings": {"batches": a.batches, "seed": a.seed, "repeats": a.repeats, "demo_defaults": vars(demo)},
        "rollout": {
            "per_batch": rollout,
            "wall_s": mean([r["wall_s"] for r in rollout]) if rollout else None,
            "note": "sync collection of one step's groups by the two engines, nothing else running",
        },
        "variants": results,
        "summary": summary,
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(record, indent=1) + "\n")
    if rollout:
        print(f"\nrollout (sync, alone): {record['rollout']['wall_s']:.1f} s per batch")
    for name, s in summary.items():
        print(
            f"{name:9s} train {s['train_wall_s']:6.1f} s wall ({s['speedup_vs_demo']:.2f}x demo), "
            f"{s['train_cpu_s']:6.1f} s CPU, max |dlogp| vs demo {s['max_abs_logprob_diff_vs_demo']:.2e}"
        )
    print(f"wrote {a.out}")
    return record


if __name__ == "__main__":
    main()
