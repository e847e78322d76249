"""``AgentRLTrainer``: TRL's GRPO trainer with multi-turn rollouts through an AgentRL controller.

What comes from TRL (and transformers' Trainer under it): model loading, LoRA through peft,
the optimizer and schedule, accelerate / DeepSpeed / FSDP, checkpoints and resume, logging
(``report_to``), the metrics plumbing. What this class replaces is where a GRPO batch comes
from and the loss:

* ``_prepare_inputs`` takes complete groups from the :class:`RolloutPipeline` (async: whatever
  is ready, within bounds; sync: a full batch generated now) and builds the tensors
  (:func:`agentrl_trainer.batch.build_batch`);
* ``training_step`` runs the batch in micro-batches against one token-mean
  (:func:`agentrl_trainer.loss.policy_loss`: PPO clip + dual clip against the producing
  engine's logprobs, k3 KL to the reference);
* after each optimizer step a callback publishes the new weights to the engines
  (lagging ones every ``lag_steps``).

Data parallel (``accelerate launch --num_processes N``, docs/data-parallel.md): each process runs
its own pipeline and engines on its own shard of each task's samples; DDP / DeepSpeed / FSDP
average the gradients, and the loss is normalized by the global token count so that N processes
train exactly as one process on the union of their batches. Every process then gathers whole
weights (:mod:`agentrl_trainer.distributed`, a collective under ZeRO-3/FSDP) and loads its own
engines.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoTokenizer, TrainerCallback
from trl import GRPOTrainer

from agentrl_envs.chat.loading import model_directory
from agentrl_envs.client import ControllerClient
from agentrl_envs.stack import LocalStack

from .advantages import shape_reward
from .batch import TrainBatch, build_batch, micro_batches
from .config import AgentRLConfig
from .distributed import (
    build_copy,
    gather_merged_weights,
    gather_weights,
    merge_step_metrics,
    normalize_with_moments,
    shard_indices,
    share_frozen_weights,
    task_moments,
)
from .engines import LocalEngine
from .logprobs import TokenLogprobs, token_logprobs
from .loss import policy_loss
from .memory import release_freed_memory
from .pipeline import Group, PipelineEngine, RolloutPipeline, TaskSampler
from .ratios import RatioRecord
from .rollout import RolloutSettings

__all__ = ["AgentRLTrainer"]

log = logging.getLogger(__name__)


def environment_reward(
    completions: Any = None, *, env_reward: Sequence[float], completed: Sequence[bool], incomplete_reward: float | None, **_: Any
) -> list[float]:
    """TRL reward function: the reward the environment gave each episode, shaped (AgentRL: an
    episode that did not end ``completed`` gets ``incomplete_reward``). The trainer's only
    reward source; TRL requires one to be registered."""
    return [shape_reward(r, c, incomplete_reward) for r, c in zip(env_reward, completed, strict=True)]


class _PublishWeights(TrainerCallback):
    def __init__(self, trainer: AgentRLTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # After a resume the checkpoint's weights are loaded by now: every engine takes them.
        self.trainer.publish_weights(state.global_step, every_engine=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer.publish_weights(state.global_step)


class AgentRLTrainer(GRPOTrainer):
    """Async multi-turn GRPO over AgentRL environments.

    ``model``: a model directory, ``.gguf`` file or loaded model; ``None`` takes
    ``args.model_name_or_path`` (empty: the embedded SmolLM2-135M-Instruct). ``engines``: rollout
    engines to use instead of building them from ``args`` (e.g. simulated ones).
    ``controller_url`` overrides ``args.controller_url``.
    """

    _tag_names = ["trl", "agentrl", "grpo"]

    def __init__(
        self,
        args: AgentRLConfig,
        model: Any = None,
        processing_class: Any = None,
        *,
        engines: Sequence[PipelineEngine] | None = None,
        controller_url: str | None = None,
        callbacks: list[TrainerCallback] | None = None,
        peft_config: Any = None,
    ) -> None:
        if model is None or isinstance(model, str):
            model = str(model_directory(model or args.model_name_or_path or None))
        if processing_class is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            processing_class = AutoTokenizer.from_pretrained(name, local_files_only=True)
        if peft_config is None and args.use_lora:
            from peft import LoraConfig

            targets: Any = args.lora_target_modules
            peft_config = LoraConfig(
                r=args.lora_r,
                lora_alpha=args.lora_alpha,
                lora_dropout=args.lora_dropout,
                target_modules=targets[0] if targets == ["all-linear"] else targets,
                task_type="CAUSAL_LM",
            )
        if args.ddp_broadcast_buffers is None:
            # DDP would broadcast buffers (RoPE's inv_freq: constants) at the start of forwards, a
            # collective; processes run different numbers of forwards (the shared prompt head
            # takes one more), which must not deadlock.
            args.ddp_broadcast_buffers = False
        # The dataloader only ticks the step loop; the samples come from the controller.
        ticks = Dataset.from_dict({"prompt": ["step"] * 64})
        super().__init__(
            model=model,
            reward_funcs=[environment_reward],
            args=args,
            train_dataset=ticks,
            processing_class=processing_class,
            callbacks=callbacks,
            peft_config=peft_config,
        )
        self.agentrl_args = args
        self.controller_url = controller_url or args.controller_url or None
        self._given_engines = list(engines) if engines else None
        self.engines: list[PipelineEngine] = []
        self.pipeline: RolloutPipeline | None = None
        self._stack: LocalStack | None = None
        self._stopping = threading.Lock()
        self.step_log: list[dict[str, float]] = []
        #: per step, the trained tokens with the largest |log ratio| (the loss's and the
        #: unconstrained one's: agentrl_trainer.ratios)
        self.ratio_outliers: list[dict[str, Any]] = []
        self.add_callback(_PublishWeights(self))
        self._pad_id = (
            processing_class.pad_token_id if processing_class.pad_token_id is not None else processing_class.eos_token_id
        )

    # ------------------------------------------------------------------ set-up

    def _trainable(self) -> dict[str, torch.Tensor]:
        """Whole copies of the trainable parameters (gathered under ZeRO-3/FSDP: a collective)."""
        return gather_weights(self.model, trainable_only=True)

    def _build_engines(self) -> list[PipelineEngine]:
        args = self.agentrl_args
        if self._given_engines is not None:
            return self._given_engines
        if args.engine == "vllm":
            if self.accelerator.num_processes > 1:
                raise ValueError(
                    "engine='vllm' with more than one training process is not supported yet: each process would "
                    "push weights to the same servers. Train with one process, or engine='transformers'."
                )
            from .engines import VLLMEngine

            # one server per engine on consecutive ports, each its own NCCL rendezvous port
            return [
                VLLMEngine(
                    args.vllm_server_host,
                    args.vllm_server_port + i,
                    args.vllm_group_port + i,
                    tokenizer=self.processing_class,  # for the chat template's end-of-turn token
                    timeout=args.vllm_server_timeout,
                )
                for i in range(args.num_engines)
            ]
        return [self.local_engine(f"engine{i}", max_batch=args.engine_max_batch) for i in range(args.num_engines)]

    def local_engine(self, name: str, max_batch: int = 32) -> LocalEngine:
        """A transformers engine holding a copy of the model as it is now (the caller closes it).

        The copy is built from whole weights gathered the way TRL gathers them (never a deepcopy
        of a sharded module): under ZeRO-3/FSDP every process must call this at the same point.
        The frozen weights (LoRA's base) are the trained model's own tensors, not a copy, where
        the engine lives on the same device (:func:`~agentrl_trainer.distributed.share_frozen_weights`).
        """
        args = self.agentrl_args
        model = build_copy(self.model)
        if args.engine_device:  # e.g. sample on the CPU's cores while the GPU trains
            model = model.to(args.engine_device)
        share_frozen_weights(model, self.model)
        return LocalEngine.from_model(
            model,
            self.processing_class,
            max_batch=max_batch,
            max_slot_tokens=args.engine_max_slot_tokens,
            prefix_cache_tokens=args.engine_prefix_cache_tokens,
            name=name,
            num_threads=args.engine_threads or None,
        )

    def rollout_settings(self) -> RolloutSettings:
        """How an episode is played (per-turn tokens, limits, sampling), from the config."""
        args = self.agentrl_args
        return RolloutSettings(
            max_tokens=args.max_completion_length,
            max_turns=args.max_turns,
            max_context=args.max_context_length,
            temperature=args.temperature,
            top_p=args.top_p,
            assistant_prefix=args.assistant_prefix,
            constrain_tool_calls=args.constrain_tool_calls,
            close_calls_in_budget=args.close_calls_in_budget,
            text_answer_tasks=tuple(args.text_answer_tasks),
            seed=args.seed + self.accelerator.process_index,  # each data-parallel process its own draws
        )

    def start_rollouts(self) -> RolloutPipeline:
        """Start the embedded stack (if no controller is given), the engines and the pipeline."""
        if self.pipeline is not None:
            return self.pipeline
        args = self.agentrl_args
        if self.controller_url is None:
            self._stack = LocalStack(list(args.tasks), split=args.split).__enter__()
            self.controller_url = self._stack.url
        with ControllerClient(self.controller_url) as client:
            indices = {t: client.get_indices(t) for t in args.tasks}
        if args.max_samples_per_task:
            indices = {t: v[: args.max_samples_per_task] for t, v in indices.items()}
        # Data parallel: each process plays its own shard, with its own seeds.
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        indices = shard_indices(indices, rank, world)
        weights = dict(zip(args.tasks, args.task_weights, strict=False)) if args.task_weights else None
        self.engines = self._build_engines()
        first = self.engines[0]
        stop_ids = getattr(first, "stop_token_ids", None) or [self.processing_class.eos_token_id]
        self.pipeline = RolloutPipeline(
            self.controller_url,
            self.engines,
            self.processing_class,
            list(stop_ids),
            TaskSampler(indices, weights, seed=args.seed + rank),
            self.rollout_settings(),
            group_size=args.num_generations,
            mode=args.rollout_mode,  # type: ignore[arg-type]
            capacity_groups=args.queue_capacity_groups,
            lagging_fraction=args.lagging_fraction,
            lag_steps=args.lag_steps,
            lagging_prob=args.lagging_prob,
            seed=args.seed + rank,
        ).start()
        return self.pipeline

    def stop_rollouts(self) -> None:
        """Stop the pipeline, close the engines, stop the embedded stack. Safe to call from another
        thread than training's (an interrupted run stops them from its main thread), and twice:
        each thing is taken under a lock, so only one caller stops it."""
        with self._stopping:
            pipeline, self.pipeline = self.pipeline, None
            engines, self.engines = self.engines, []
            stack, self._stack = self._stack, None
        if pipeline is not None:
            pipeline.stop()
        for e in engines:
            e.close()
        if stack is not None:
            stack.__exit__(None, None, None)
            self.controller_url = self.agentrl_args.controller_url or None

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self.start_rollouts()
        try:
            return super().train(*args, **kwargs)
        finally:
            self.stop_rollouts()

    def publish_weights(self, step: int, every_engine: bool = False) -> None:
        """Send the current weights to the engines due at ``step`` (all of them with ``every_engine``).

        Every process publishes to its own engines from its own weights: DDP keeps the processes'
        parameters identical (same start, same averaged gradients), and under ZeRO-3/FSDP every
        process takes part in the gather anyway, so each ends up with the whole weights without
        a broadcast from rank 0.
        """
        if self.pipeline is None:
            return
        if any(getattr(e, "merged_weights", False) for e in self.engines):
            named = self._merged_weights()
        else:
            named = self._trainable()
        self.pipeline.publish(step, named, every_engine=every_engine)

    def _merged_weights(self) -> dict[str, torch.Tensor]:
        """Whole weights by base-model names (LoRA merged) for engines that load whole models."""
        return gather_merged_weights(self.model)

    # ------------------------------------------------------------------ batches

    def _next_groups(self) -> list[Group]:
        assert self.pipeline is not None, "call train() (or start_rollouts()) first"
        args = self.agentrl_args
        if args.rollout_mode == "sync":
            return self.pipeline.collect(args.max_groups_per_step)
        return self.pipeline.get_batch(args.min_groups_per_step)

    def _prepare_inputs(self, generation_batch: Any) -> TrainBatch:  # type: ignore[override]
        waited = time.monotonic()
        groups = self._next_groups()
        waited = time.monotonic() - waited
        episodes = [e for g in groups for e in g.episodes]
        rewards = self.reward_funcs[0](
            env_reward=[e.reward for e in episodes],
            completed=[e.completed for e in episodes],
            incomplete_reward=self.agentrl_args.incomplete_reward,
        )
        # With several processes a task's token statistics come from all their batches (below).
        alone = self.accelerator.num_processes == 1
        batch = build_batch(
            groups,
            rewards,
            pad_token_id=self._pad_id,
            scale_rewards=self.agentrl_args.scale_rewards != "none",
            task_norm=self.agentrl_args.task_advantage_norm and alone,
        )
        if self.agentrl_args.task_advantage_norm and not alone:
            batch.advantages = self._normalize_by_task_across_processes(batch)
        self._record_batch(groups, batch, waited)
        return batch

    @torch.no_grad()
    def _normalize_by_task_across_processes(self, batch: TrainBatch) -> torch.Tensor:
        """Task advantage normalization over the union of the processes' batches: each task's
        token count, sum and sum of squares summed over the processes (collectives: every
        process calls this), then this process's rows normalized."""
        from accelerate.utils import gather_object

        tasks = sorted({t for part in gather_object([sorted(set(batch.row_task))]) for t in part})
        moments = task_moments(batch.advantages, batch.loss_mask, batch.row_task, tasks)  # (K, 3)
        moments = self.accelerator.reduce(moments.to(self.accelerator.device), reduction="sum").cpu()
        return normalize_with_moments(batch.advantages, batch.loss_mask, batch.row_task, tasks, moments)

    def _record_batch(self, groups: list[Group], batch: TrainBatch, waited: float) -> None:
        step = self.state.global_step + 1
        m: dict[str, float] = {"rollout/groups": len(groups), "rollout/episodes": len(batch.episodes), "rollout/wait_s": waited}
        per_task: dict[str, list[float]] = defaultdict(list)
        for e in batch.episodes:
            per_task[e.spec.task].append(e.reward)
        for task, rs in per_task.items():
            m[f"reward/{task}"] = sum(rs) / len(rs)
        raw = [e.reward for e in batch.episodes]
        m["reward/mean"] = sum(raw) / len(raw)
        m["reward/shaped_mean"] = float(batch.rewards.mean())
        # exploration: the share of groups whose (shaped) rewards differ, the groups with a signal
        by_group: dict[int, set[float]] = defaultdict(set)
        for e, r in zip(batch.episodes, batch.rewards.tolist(), strict=True):
            by_group[e.spec.group_id].add(r)
        m["rollout/mixed_reward_groups"] = sum(len(v) > 1 for v in by_group.values()) / len(by_group)
        turns = [t for e in batch.episodes if e.trajectory for t in e.trajectory.turns]
        m["rollout/turns_per_episode"] = len(turns) / len(batch.episodes)
        if turns:
            stale = [step - 1 - t.version for t in turns]
            m["rollout/staleness_mean"] = sum(stale) / len(stale)
            m["rollout/staleness_max"] = max(stale)
            m["rollout/lagging_turn_fraction"] = sum(t.lagging for t in turns) / len(turns)
        m["rollout/drift_turns"] = sum(e.trajectory.drift_turns for e in batch.episodes if e.trajectory)
        m["rollout/forks"] = sum(e.trajectory.forks for e in batch.episodes if e.trajectory)
        m["rollout/dropped_infra"] = sum(g.dropped for g in groups)
        m["rollout/trained_tokens"] = float(batch.loss_mask.sum())
        if self.pipeline is not None:
            m["rollout/queued_groups"] = self.pipeline.queued
            m["rollout/engine_idle_fraction"] = self.pipeline.stats()["engine_idle_fraction"]
        if self.accelerator.num_processes > 1:
            m = self._across_processes(m)
        for k, v in m.items():
            self._metrics["train"][k].append(float(v))
        self.step_log.append({"step": float(step), **m})

    def _across_processes(self, m: dict[str, float]) -> dict[str, float]:
        """A data-parallel step's metrics over all processes (a collective: every process calls it)."""
        from accelerate.utils import gather_object

        return merge_step_metrics(gather_object([m]))

    # ------------------------------------------------------------------ loss

    def _shares_head(self) -> bool:
        # Under ZeRO-3/FSDP each forward gathers parameters (a collective), so every process must
        # run the same forwards; sharing the head takes a data-dependent extra one.
        sharded = self._dist.is_zero3 or self._dist.is_fsdp
        return self.agentrl_args.share_prompt_prefix and not self.args.gradient_checkpointing and not sharded

    def _token_logprobs(self, model: Any, rows: dict[str, torch.Tensor]) -> TokenLogprobs:
        recompute = self.agentrl_args.recompute_activations and model.training and torch.is_grad_enabled()
        return token_logprobs(model, rows, self.temperature, share_head=self._shares_head(), recompute=recompute)

    def _micro_loss(self, model: Any, rows: dict[str, torch.Tensor], normalizer: float, record: RatioRecord | None = None) -> Any:
        """The policy loss of one micro-batch (its importance ratios added to ``record``)."""
        device = self.accelerator.device
        rows = {k: v.to(device) for k, v in rows.items()}
        scored = self._token_logprobs(model, rows)
        logp, cols = scored.logp, scored.cols
        ref = None
        if self.beta != 0.0:
            with torch.no_grad():
                unwrapped = self.accelerator.unwrap_model(model)
                if self.ref_model is not None:
                    ref = self._token_logprobs(self.ref_model, rows).logp
                else:
                    with unwrapped.disable_adapter():
                        ref = self._token_logprobs(model, rows).logp
        mask = rows["loss_mask"][:, cols]
        if record is not None:
            record.add(rows, cols, logp, scored.free, self.processing_class.decode)
        return policy_loss(
            logp,
            rows["old_logprobs"][:, cols],
            rows["advantages"][:, cols],
            mask,
            ref,
            clip_eps=self.epsilon_low,
            clip_eps_high=self.epsilon_high,
            dual_clip=self.agentrl_args.dual_clip,
            kl_coef=self.beta,
            normalizer=normalizer,
        )

    def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
        batch: TrainBatch = inputs
        terms = self._micro_loss(model, batch.rows(0, batch.input_ids.shape[0]), float(batch.loss_mask.sum()))
        return terms.loss

    def _micro_batches(self, batch: TrainBatch) -> list[list[int]]:
        """The step's micro-batches (row indices). Rows with the same head (a task's system prompt
        and tools; a group's first prompt) go in the same micro-batch, so the forward can share
        it; the loss does not depend on the order."""
        prefixes = batch.head_prefixes()
        order = sorted(range(len(prefixes)), key=lambda r: (batch.row_task[r], prefixes[r]))
        a = self.agentrl_args
        share = prefixes if self._shares_head() else None
        return micro_batches(order, batch.row_lengths().tolist(), a.micro_batch_rows, a.micro_batch_tokens, share)

    def _step_plan(self, local_tokens: float, local_chunks: int) -> tuple[float, int]:
        """``(normalizer, chunks)``: what each process divides its token-loss sum by, and how many
        micro-batches every process runs.

        DDP, DeepSpeed and FSDP average the processes' gradients, so a token-mean over the global
        batch is each process's sum divided by (global tokens / processes). Processes run as many
        micro-batches as the busiest one (extra ones weigh 0): under ZeRO/FSDP every forward and
        backward is a collective.
        """
        world = self.accelerator.num_processes
        if world == 1:
            return local_tokens, local_chunks
        mine = torch.tensor([[local_tokens, float(local_chunks)]], dtype=torch.float64, device=self.accelerator.device)
        every = self.accelerator.gather(mine)  # (world, 2)
        return float(every[:, 0].sum()) / world, int(every[:, 1].max())

    @contextmanager
    def _gradient_sync(self, model: Any, sync: bool) -> Iterator[None]:
        """Around one micro-batch's backward: gradients are reduced across processes (and
        DeepSpeed steps) only on the step's last one; the others accumulate locally."""
        if sync:
            yield
            return
        state = self.accelerator.gradient_state
        before = state.sync_gradients
        state._set_sync_gradients(False)  # DeepSpeed: no engine.step, not an accumulation boundary
        try:
            with self.accelerator.no_sync(model):  # DDP / FSDP: no all-reduce
                yield
        finally:
            state._set_sync_gradients(before)

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        model.train()
        batch = self._prepare_inputs(inputs)
        total = float(batch.loss_mask.sum())
        started = time.monotonic()
        sums: dict[str, float] = defaultdict(float)
        loss_total = torch.zeros((), device=self.accelerator.device)
        chunks = self._micro_batches(batch)
        normalizer, planned = self._step_plan(total, len(chunks))
        ratios = RatioRecord()
        for i in range(planned):
            padding = i >= len(chunks)  # a repeat of the first micro-batch, weighted 0
            rows = batch.select(chunks[0] if padding else chunks[i])
            weight = 0.0 if padding else float(rows["loss_mask"][:, 1:].sum()) / max(total, 1.0)
            with self._gradient_sync(model, sync=i == planned - 1):
                with self.compute_loss_context_manager():
                    terms = self._micro_loss(model, rows, normalizer, None if padding else ratios)
                loss = terms.loss * 0.0 if padding else terms.loss
                self.accelerator.backward(loss)
            loss_total += loss.detach()
            for key in ("pg_loss", "kl", "clip_fraction", "dual_clip_fraction", "ratio_mean"):
                sums[key] += float(getattr(terms, key)) * weight
        sums.update(ratios.metrics())
        self.ratio_outliers.append(ratios.outliers(self.state.global_step + 1))
        for key, value in sums.items():
            self._metrics["train"][f"loss/{key}"].append(value)
        self._metrics["train"]["time/train_s"].append(time.monotonic() - started)
        if self.step_log:
            self.step_log[-1].update({f"loss/{k}": v for k, v in sums.items()})
            self.step_log[-1]["loss"] = float(loss_total)
            self.step_log[-1]["time/train_s"] = time.monotonic() - started
        if self.accelerator.device.type == "cpu":
            release_freed_memory()  # the step's activations, before the engines' arenas grow (memory.py)
        return loss_total
