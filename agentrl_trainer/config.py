"""``AgentRLConfig``: TRL's ``GRPOConfig`` plus what multi-turn, multi-task agent RL needs."""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from trl import GRPOConfig

from .rollout import TEXT_ANSWER_TASKS

__all__ = ["GENERIC_FIELDS", "HONOURED_FIELDS", "REJECTED_FIELDS", "AgentRLConfig"]

# Every field AgentRLConfig inherits from TRL's GRPOConfig (transformers' TrainingArguments
# included) is in exactly one of three tables, so none is accepted and then silently ignored
# (tests/trainer/test_config.py checks the tables against the installed TRL: a field a new TRL
# adds fails the test until it is classified here; docs/trainer-config.md says the same in prose).
#
# * HONOURED: our trainer does what the field says; the value says where.
# * GENERIC: transformers' Trainer machinery that AgentRLTrainer keeps as it is (optimizer,
#   schedule, precision, logging, checkpoints, distribution); some only reach the dataloader of
#   step ticks, where they change nothing.
# * REJECTED: TRL's own generation, reward, loss or evaluation code that AgentRLTrainer replaces;
#   any value other than the default raises ValueError (the value says what to do instead).

HONOURED_FIELDS: dict[str, str] = {
    "output_dir": "transformers' Trainer (checkpoints); the CLI saves the model and agentrl_steps.json there",
    "max_steps": "transformers' Trainer: optimizer steps, one dynamic batch each",
    "seed": "set_seed, the TaskSampler's draws and the pipeline's engine choice",
    "per_device_train_batch_size": "set to num_generations: the dataloader only ticks the step loop (any other value is rejected)",
    "gradient_accumulation_steps": "must be 1: a step trains on the whole dynamic batch (micro_batch_rows and micro_batch_tokens bound memory)",
    "model_init_kwargs": "TRL's GRPOTrainer.__init__ loads the policy (and the reference) with them",
    "trust_remote_code": "TRL's GRPOTrainer.__init__ when it loads the policy",
    "disable_dropout": "TRL's GRPOTrainer.__init__ (policy and reference)",
    "cast_lm_head_to_fp32": "TRL's GRPOTrainer.__init__ patches the LM head; logprobs.py reads the model's logits",
    "num_generations": "the GRPO group size: episodes per sampled task index (RolloutPipeline group_size)",
    "max_completion_length": "tokens per assistant turn (RolloutSettings.max_tokens)",
    "steps_per_generation": "derived (one rollout batch per optimizer step); only the derived value is accepted",
    "generation_batch_size": "derived (per_device_train_batch_size x processes); only the derived value is accepted",
    "temperature": "sampling on every engine, and the logits of the loss (logprobs.token_logprobs)",
    "top_p": "sampling on every engine (RolloutSettings.top_p)",
    "vllm_server_host": "engine='vllm': the host of the trl vllm-serve servers",
    "vllm_server_port": "engine='vllm': the first server's port (engine i uses port + i)",
    "vllm_group_port": "engine='vllm': the first server's weight-update group port (engine i uses port + i)",
    "vllm_server_timeout": "engine='vllm': how long each engine waits for its server to come up",
    "beta": "k3 KL coefficient in loss.policy_loss (0 skips the reference pass)",
    "num_iterations": "must be 1: rollout logprobs are the PPO reference, one pass per batch",
    "epsilon": "PPO clip (low side) in loss.policy_loss",
    "epsilon_high": "PPO clip (high side, DAPO clip-higher) in loss.policy_loss",
    "importance_sampling_level": "'token' only: the PPO ratio is per token",
    "scale_rewards": "'group'/True divides by the group's std, 'none'/False does not (advantages.group_advantages); not 'batch'",
    "loss_type": "'dapo' only: the loss is a token-mean over the step's whole batch (loss.policy_loss)",
}

# Values a field accepts besides its default, where that is not "the default only" or "anything".
_ALSO_ACCEPTED: dict[str, tuple[Any, ...]] = {
    "scale_rewards": ("group", "none", True, False),
    "pad_to_multiple_of": (None,),  # GRPOConfig resolves "auto" to None off Neuron
    "include_num_input_tokens_seen": (False,),  # = "no"; the argument parser's default
}
# What to use instead of a rejected value of an honoured field.
_HONOURED_ONLY: dict[str, str] = {
    "importance_sampling_level": "sequence-level ratios (GSPO) are not implemented; use 'token'",
    "scale_rewards": "batch-level std scaling is not implemented; use 'group' (GRPO) or 'none' (Dr. GRPO)",
    "loss_type": "the loss is AgentRL's token-mean over the step's batch (TRL's 'dapo'); other loss formulations are "
    "not implemented: leave loss_type at 'dapo' (dual_clip and beta shape the AgentRL loss)",
}

GENERIC_FIELDS: frozenset[str] = frozenset(
    # optimizer, schedule, clipping
    "learning_rate lr_scheduler_type lr_scheduler_kwargs warmup_steps optim optim_args optim_target_modules weight_decay "
    "adam_beta1 adam_beta2 adam_epsilon max_grad_norm "
    # precision, memory, compilation
    "bf16 fp16 tf32 gradient_checkpointing gradient_checkpointing_kwargs activation_checkpointing "
    "activation_checkpointing_kwargs torch_compile torch_compile_backend torch_compile_mode torch_empty_cache_steps "
    "use_cache use_cpu full_determinism "
    # logging and progress
    "logging_strategy logging_steps logging_first_step log_on_each_node logging_nan_inf_filter log_level "
    "log_level_replica disable_tqdm report_to run_name project trackio_space_id trackio_bucket_id "
    "trackio_static_space_id skip_memory_metrics debug "
    # checkpoints, resume, hub
    "save_strategy save_steps save_total_limit save_on_each_node save_only_model enable_jit_checkpoint push_to_hub "
    "hub_token hub_private_repo hub_model_id hub_strategy hub_always_push hub_revision resume_from_checkpoint "
    "ignore_data_skip restore_callback_states_from_checkpoint do_train do_eval do_predict "
    # distribution (accelerate / DDP / DeepSpeed / FSDP)
    "local_rank accelerator_config parallelism_config ddp_find_unused_parameters ddp_bucket_cap_mb "
    "ddp_broadcast_buffers ddp_static_graph ddp_backend ddp_timeout fsdp fsdp_config deepspeed "
    # the dataloader of step ticks (no samples flow through it)
    "dataloader_drop_last dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers "
    "dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order remove_unused_columns".split()
)

_NO_DATASET = "AgentRLTrainer has no training dataset: samples come from the controller (tasks, task_weights, seed)"
_NO_EVAL = (
    "AgentRLTrainer has no evaluation loop: play held-out samples with agentrl_trainer.evaluate "
    "(agentrl_trainer.demo shows how); leave the eval fields at their defaults"
)
_OWN_LOSS = (
    "AgentRLTrainer's loss is AgentRL's (loss.policy_loss: PPO clip with epsilon/epsilon_high, dual_clip, k3 KL with "
    "beta), not TRL's, and this term is not implemented; leave it at its default"
)
_OWN_GENERATION = (
    "AgentRLTrainer samples with its own engines (engine, num_engines; temperature, top_p and "
    "max_completion_length per turn), not TRL's generation code; this setting is not implemented"
)
_OWN_VLLM = (
    "AgentRLTrainer drives trl vllm-serve servers itself (engine='vllm', vllm_server_host, vllm_server_port, "
    "vllm_group_port, vllm_server_timeout); this vLLM setting is not used"
)
_NO_IS_CORRECTION = (
    "the PPO ratio is taken against the logprobs of the engine that sampled each token (vLLM's included), so there "
    "is no separate importance-sampling correction; leave the vllm_importance_sampling_* fields at their defaults"
)
_NO_COMPLETION_LOG = (
    "per-turn text is not logged by AgentRLTrainer; per-step rollout metrics are in trainer.step_log / agentrl_steps.json"
)
_REJECTED_GROUPS: dict[str, str] = {
    "num_train_epochs": "there is no dataset to pass over (an 'epoch' is one pass over 64 placeholder rows): set max_steps",
    "data_seed train_sampling_strategy length_column_name label_names shuffle_dataset": _NO_DATASET,
    "pad_to_multiple_of": "batch.build_batch pads each step's rows to the longest one; padding to a multiple is not implemented",
    "include_num_input_tokens_seen": "the dataloader carries no tokens; the step's trained tokens are logged as rollout/trained_tokens",
    "auto_find_batch_size": "the batch is whole GRPO groups; bound memory with micro_batch_rows and micro_batch_tokens",
    "average_tokens_across_devices": "the loss is a token-mean over the step's batch (see loss_type); its normalizer is not configurable",
    "eval_strategy eval_steps eval_delay per_device_eval_batch_size prediction_loss_only eval_on_start "
    "eval_do_concat_batches eval_use_gather_object eval_accumulation_steps include_for_metrics batch_eval_metrics "
    "bf16_full_eval fp16_full_eval load_best_model_at_end metric_for_best_model greater_is_better "
    "num_generations_eval": _NO_EVAL,
    "label_smoothing_factor delta sapo_temperature_neg sapo_temperature_pos vespo_k_pos vespo_lambda_pos vespo_k_neg "
    "vespo_lambda_neg top_entropy_quantile entropy_coef use_adaptive_entropy entropy_coef_min "
    "entropy_coef_max entropy_coef_delta entropy_target off_policy_mask_threshold router_aux_loss_coef": _OWN_LOSS,
    "mask_truncated_completions": "an episode cut short (max_turns, max_context_length, a task's turn limit) is trained "
    "with incomplete_reward instead; set incomplete_reward=None to keep the task's reward",
    "use_bias_correction_kl": "the k3 KL term is not weighted by the importance ratio; leave use_bias_correction_kl False",
    "neftune_noise_alpha": "noise on the embeddings would change the logprobs the PPO ratio compares with the engines'",
    "use_liger_kernel liger_kernel_config": "Liger kernels are untested with AgentRLTrainer's logprob path (TRL deprecates them too)",
    "reward_weights multi_objective_aggregation": "the only reward is the environment's (shaped by incomplete_reward)",
    "sync_ref_model ref_model_mixup_alpha ref_model_sync_steps": "the reference policy stays the initial model; reference syncing is not supported",
    "top_k min_p repetition_penalty generation_kwargs chat_template_kwargs cache_implementation ds3_gather_for_generation "
    "max_tool_calling_iterations use_transformers_continuous_batching transformers_continuous_batching_config "
    "use_transformers_paged": _OWN_GENERATION,
    "use_vllm": "set engine='vllm' (AgentRLTrainer's own vLLM engines), not use_vllm",
    "vllm_mode vllm_model_impl vllm_enable_sleep_mode vllm_structured_outputs_regex vllm_server_base_url "
    "vllm_gpu_memory_utilization vllm_max_model_length vllm_tensor_parallel_size": _OWN_VLLM,
    "vllm_importance_sampling_correction vllm_importance_sampling_mode vllm_importance_sampling_clip_max "
    "vllm_importance_sampling_clip_min vllm_importance_sampling_cap": _NO_IS_CORRECTION,
    "log_completions log_multimodal num_completions_to_print log_unique_prompts log_completions_hub_repo": _NO_COMPLETION_LOG,
}
REJECTED_FIELDS: dict[str, str] = {name: why for names, why in _REJECTED_GROUPS.items() for name in names.split()}


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING  # type: ignore[misc]


def _same(value: Any, accepted: Any) -> bool:
    """Equal, with bools kept apart from numbers (``True == 1``), numbers not (YAML's ``0`` for ``0.0``)."""
    return isinstance(value, bool) == isinstance(accepted, bool) and value == accepted


def _has_bf16_device() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


@dataclass
class AgentRLConfig(GRPOConfig):
    r"""
    Configuration for [`AgentRLTrainer`]. Of TRL's `GRPOConfig`, the trainer machinery applies
    (optimizer, schedule, logging with `report_to`, checkpoints) and so do `num_generations` = GRPO
    group size, `epsilon`/`epsilon_high` = PPO clip, `beta` = KL coefficient, `temperature`,
    `top_p`, `max_completion_length` = tokens per assistant turn, `scale_rewards` ('group' or
    'none'); the rest is rejected (see the end). The fields below add:

    > Model

    - **model_name_or_path**: a local HF model directory or `.gguf` file; empty for the embedded
      SmolLM2-135M-Instruct. Nothing is downloaded.
    - **use_lora**, **lora_r**, **lora_alpha**, **lora_dropout**, **lora_target_modules**: LoRA via peft.

    > Environments

    - **controller_url**: an AgentRL-compatible controller; empty starts an embedded one with a
      worker per task in `tasks`.
    - **tasks**, **task_weights**, **split**, **max_samples_per_task**: which samples are drawn,
      with which per-task weights.

    > Rollout

    - **rollout_mode**: `"async"` (rollout and training overlap) or `"sync"` (the baseline).
    - **min_groups_per_step**, **max_groups_per_step**, **queue_capacity_groups**: the dynamic batch
      (async: every complete group queued, from `min_groups_per_step` up to the queue's capacity).
    - **max_turns**, **max_context_length**, **assistant_prefix**, **constrain_tool_calls**, **close_calls_in_budget**,
      **text_answer_tasks**, **incomplete_reward**.

    > Engines and cross-policy sampling

    - **engine**: `"transformers"` or `"vllm"`; **num_engines**, **engine_max_batch**,
      **engine_max_slot_tokens**, **engine_prefix_cache_tokens** (the bounds on a transformers
      engine's KV slots and on its cache of prompt heads: its memory);
      **engine_device**: where the transformers engines' copies of the model live (empty: with
      the trained model; `"cpu"` samples on the CPU's cores while a GPU trains);
      **engine_threads**: torch threads each transformers engine decodes with (0: all cores).
    - **lagging_fraction**, **lag_steps**, **lagging_prob**: lagging engines take new weights every
      `lag_steps` steps; each turn goes to one with probability `lagging_prob`.

    > Loss

    - **dual_clip**, **task_advantage_norm**, **recompute_activations**, **micro_batch_rows**, **micro_batch_tokens**.

    > TRL fields that do not apply

    TRL's generation, reward, loss-variant and evaluation settings, which AgentRLTrainer replaces,
    raise `ValueError` when set to anything but their default (`vllm_importance_sampling_correction`
    and `use_bias_correction_kl` default to False here, as the trainer does neither). Every
    inherited field is listed in `HONOURED_FIELDS`, `GENERIC_FIELDS` or `REJECTED_FIELDS` in this
    module; docs/trainer-config.md has the table.
    """

    # -- model
    model_name_or_path: str = field(
        default="", metadata={"help": "Local HF model dir or .gguf file; empty = embedded SmolLM2-135M-Instruct."}
    )
    use_lora: bool = field(default=True, metadata={"help": "Train a LoRA adapter (peft) instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (scale = alpha / r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["all-linear"],
        metadata={"help": "Modules to adapt ('all-linear' = every linear layer but the head)."},
    )

    # -- environments
    controller_url: str = field(
        default="", metadata={"help": "URL of an AgentRL-compatible controller; empty starts an embedded one."}
    )
    tasks: list[str] = field(
        default_factory=lambda: ["db"], metadata={"help": "Tasks to train on (names of installed agentrl_envs tasks)."}
    )
    task_weights: list[float] = field(
        default_factory=list, metadata={"help": "Sampling weight per task, same order as `tasks`; empty = equal."}
    )
    split: str = field(default="dev", metadata={"help": "Data split the embedded workers serve."})
    max_samples_per_task: int = field(default=0, metadata={"help": "Use only the first N sample indices of each task (0 = all)."})

    # -- rollout
    rollout_mode: str = field(default="async", metadata={"help": "Rollout/training schedule.", "choices": ["async", "sync"]})
    min_groups_per_step: int = field(
        default=1,
        metadata={
            "help": "Async: a step waits for at least this many complete GRPO groups, then takes every complete "
            "group queued (equal to queue_capacity_groups: turns of current engines are at most one step old)."
        },
    )
    max_groups_per_step: int = field(
        default=4,
        metadata={
            "help": "Sync: the groups of every step. Async: the nominal batch (queue_capacity_groups defaults to twice it)."
        },
    )
    queue_capacity_groups: int = field(
        default=0,
        metadata={
            "help": "Async: queued + in-flight groups at most, so the most groups a step takes (each step drains the "
            "queue); 0 = 2 × max_groups_per_step, as AgentRL."
        },
    )
    max_turns: int = field(
        default=50, metadata={"help": "Safety cap on assistant turns per episode (tasks have their own limits)."}
    )
    max_context_length: int = field(
        default=4096,
        metadata={"help": "Prompt + completion tokens per episode; beyond it the episode ends with 'agent context limit'."},
    )
    assistant_prefix: str = field(
        default="", metadata={"help": "Text written at the start of every assistant turn before sampling (mask 0)."}
    )
    constrain_tool_calls: bool = field(
        default=False,
        metadata={
            "help": "Sample every turn under a tool-call grammar (xgrammar): exactly one well-formed call to one of "
            "the episode's tools. Tokens keep mask 1 and their unconstrained logprobs. Transformers engine only."
        },
    )
    close_calls_in_budget: bool = field(
        default=False,
        metadata={
            "help": "Under constrain_tool_calls: when a turn's tokens left just suffice to complete the call it has "
            "open (end the string, the object, ...), sample only those tokens, so the call ends well-formed instead "
            "of cut at max_completion_length."
        },
    )
    text_answer_tasks: list[str] = field(
        default_factory=lambda: list(TEXT_ANSWER_TASKS),
        metadata={
            "help": "Tasks whose episodes end with a text answer (KG's 'Final Answer: #k'): under constrain_tool_calls "
            "their turns are sampled under the auto tool-call grammar, text allowed, any call well-formed."
        },
    )
    incomplete_reward: float | None = field(
        default=-0.2, metadata={"help": "Reward of an episode that did not end 'completed' (None keeps the task reward)."}
    )

    # -- engines
    engine: str = field(default="transformers", metadata={"help": "Rollout engine.", "choices": ["transformers", "vllm"]})
    num_engines: int = field(
        default=2,
        metadata={
            "help": "Rollout engines (transformers: in-process model copies; vllm: servers on consecutive ports from vllm_server_port)."
        },
    )
    engine_max_batch: int = field(default=32, metadata={"help": "Transformers engine: most turns sampled in one batch."})
    engine_max_slot_tokens: int = field(
        default=8192,
        metadata={
            "help": "Transformers engine (packed decoding): most KV token slots its running turns hold, rows x the "
            "longest row's own tokens (46 KB a slot for SmolLM2 in float32: 0.38 GB); a turn waits until it fits. 0: no bound."
        },
    )
    engine_prefix_cache_tokens: int = field(
        default=8192,
        metadata={
            "help": "Transformers engine: prompt-head tokens whose KV it keeps for later turns (46 KB a token for "
            "SmolLM2 in float32: 0.38 GB). 0: none."
        },
    )
    engine_device: str = field(
        default="",
        metadata={
            "help": "Transformers engine: the device of its model copy ('' = the trained model's; 'cpu' samples on the "
            "CPU while a GPU trains: the packed CPU decoder, weights copied over after each sync)."
        },
    )
    engine_threads: int = field(
        default=0,
        metadata={
            "help": "Transformers engine: torch threads each engine decodes with (0 = all cores). On the CPU the "
            "engines and training share the cores; each engine's own team of all-core threads oversubscribes them."
        },
    )
    lagging_fraction: float = field(
        default=0.25, metadata={"help": "Share of engines that lag (AgentRL: 0.25); rounded, never all."}
    )
    lag_steps: int = field(
        default=25, metadata={"help": "Lagging engines take new weights every K optimizer steps (AgentRL: 25)."}
    )
    lagging_prob: float = field(default=0.25, metadata={"help": "Probability that a turn is generated by a lagging engine."})

    # -- loss
    beta: float = field(
        default=1e-4,
        metadata={"help": "KL coefficient (k3 estimator) to the reference policy (AgentRL: 1e-4; 0 skips the reference pass)."},
    )
    dual_clip: float | None = field(
        default=3.0, metadata={"help": "Dual-clip constant c > 1 for negative advantages (None = off)."}
    )
    task_advantage_norm: bool = field(
        default=True, metadata={"help": "Normalize token advantages to mean 0 / std 1 within each task."}
    )
    share_prompt_prefix: bool = field(
        default=True,
        metadata={
            "help": "Run the rows' common head (system prompt, tools) once per micro-batch and share its cache (needs gradient_checkpointing off)."
        },
    )
    recompute_activations: bool = field(
        default=False,
        metadata={
            "help": "Keep only each decoder layer's input (and a chunk of the LM head's logits) in the forward and "
            "recompute the rest in the backward: the same gradients, the shared prompt head kept, for about a third "
            "more compute; on the CPU a 4,096-token micro-batch then holds ~0.3 GB of activations, not ~6 GB."
        },
    )
    micro_batch_rows: int = field(
        default=8, metadata={"help": "Rows per forward/backward pass (the step's loss is still one token-mean)."}
    )
    micro_batch_tokens: int = field(
        default=0,
        metadata={
            "help": "Also cap a forward/backward pass at this many tokens computed (rows x longest row; with "
            "share_prompt_prefix, their shared head once plus rows x the rest); 0: rows only. "
            "Activation memory follows tokens: ~2 MB a token for SmolLM2-135M + LoRA on CPU."
        },
    )

    # -- TRL defaults that would claim behaviour AgentRLTrainer does not have: off, and rejected if set
    vllm_importance_sampling_correction: bool = field(
        default=False,
        metadata={"help": "Not supported (must stay False): the PPO ratio already uses the sampling engine's logprobs."},
    )
    use_bias_correction_kl: bool = field(
        default=False, metadata={"help": "Not supported (must stay False): the k3 KL term is not weighted by the ratio."}
    )

    def _reject_unsupported_trl_values(self) -> None:
        """Raise for a TRL field set to a value AgentRLTrainer would silently ignore (see REJECTED_FIELDS)."""
        defaults = {f.name: _default(f) for f in fields(self)}
        for name, why in {**_HONOURED_ONLY, **REJECTED_FIELDS}.items():
            value = getattr(self, name)
            accepted = (defaults[name], *_ALSO_ACCEPTED.get(name, ()))
            if not any(_same(value, a) for a in accepted):
                raise ValueError(f"{name}={value!r} is not supported by AgentRLTrainer: {why}")

    def __post_init__(self) -> None:
        self._reject_unsupported_trl_values()
        if self.num_generations is None:
            self.num_generations = 8
        if self.per_device_train_batch_size not in (8, self.num_generations):  # 8: TrainingArguments' default
            raise ValueError(
                f"per_device_train_batch_size={self.per_device_train_batch_size} is not supported by AgentRLTrainer: a step "
                "trains on min_groups_per_step..max_groups_per_step groups of num_generations episodes; leave it unset"
            )
        # One optimizer step consumes one dynamic batch: the dataloader's own batch is only a tick.
        self.per_device_train_batch_size = self.num_generations
        if self.gradient_accumulation_steps != 1:
            raise ValueError(
                "gradient_accumulation_steps must be 1: a step trains on the whole dynamic batch (set micro_batch_rows to bound memory)"
            )
        if getattr(self, "num_iterations", 1) != 1:
            raise ValueError("num_iterations must be 1: rollout logprobs are the PPO reference, one pass per batch")
        given = {"steps_per_generation": self.steps_per_generation, "generation_batch_size": self.generation_batch_size}
        self.steps_per_generation = None
        self.generation_batch_size = None
        self.remove_unused_columns = False
        if self.bf16 is None and not _has_bf16_device():
            self.bf16 = False  # GRPOConfig defaults to bf16; on a CPU-only machine train in fp32
        super().__post_init__()
        for name, value in given.items():  # derived by GRPOConfig; a saved config may carry the derived value
            if value is not None and value != getattr(self, name):
                raise ValueError(
                    f"{name}={value!r} is not supported by AgentRLTrainer: each optimizer step takes one dynamic batch "
                    "(min_groups_per_step..max_groups_per_step groups); leave it unset"
                )
        if self.rollout_mode not in ("async", "sync"):
            raise ValueError(f"rollout_mode must be 'async' or 'sync', not {self.rollout_mode!r}")
        if self.engine not in ("transformers", "vllm"):
            raise ValueError(f"engine must be 'transformers' or 'vllm', not {self.engine!r}")
        if self.engine_device:
            if self.engine != "transformers":
                raise ValueError("engine_device is for engine='transformers' (a vLLM server holds its own copy)")
            import torch

            try:
                torch.device(self.engine_device)
            except RuntimeError as e:
                raise ValueError(f"engine_device {self.engine_device!r} is not a torch device ('cpu', 'cuda:1', ...)") from e
        if self.engine_threads < 0:
            raise ValueError(f"engine_threads must be >= 0 (0: all cores), not {self.engine_threads}")
        if self.close_calls_in_budget and not self.constrain_tool_calls:
            raise ValueError("close_calls_in_budget needs constrain_tool_calls (it completes calls under the grammar)")
        if self.constrain_tool_calls and self.engine != "transformers":
            raise ValueError("constrain_tool_calls needs engine='transformers' (the vLLM engine does not support it yet)")
        if not self.tasks:
            raise ValueError("tasks is empty: name at least one task, e.g. --tasks db os")
        if self.task_weights and len(self.task_weights) != len(self.tasks):
            raise ValueError(
                f"task_weights has {len(self.task_weights)} entries for {len(self.tasks)} tasks; give one per task or none"
            )
        if not 1 <= self.min_groups_per_step <= self.max_groups_per_step:
            raise ValueError(
                f"need 1 <= min_groups_per_step ({self.min_groups_per_step}) <= max_groups_per_step ({self.max_groups_per_step})"
            )
        if self.queue_capacity_groups == 0:
            self.queue_capacity_groups = 2 * self.max_groups_per_step
        if self.queue_capacity_groups < self.max_groups_per_step:
            raise ValueError(
                f"queue_capacity_groups ({self.queue_capacity_groups}) must be at least max_groups_per_step "
                f"({self.max_groups_per_step}); 0 takes twice max_groups_per_step"
            )
        if self.num_engines < 1:
            raise ValueError("num_engines must be at least 1")
        if self.engine_max_slot_tokens < 0:
            raise ValueError("engine_max_slot_tokens must be >= 0 (0: no bound)")
        if self.engine_prefix_cache_tokens < 0:
            raise ValueError("engine_prefix_cache_tokens must be >= 0 (0: no cache)")
        if not 0.0 <= self.lagging_fraction < 1.0 or not 0.0 <= self.lagging_prob <= 1.0:
            raise ValueError("lagging_fraction must be in [0, 1) and lagging_prob in [0, 1]")
        if self.lag_steps < 1:
            raise ValueError("lag_steps must be at least 1")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (AgentRL: 3) or None; got {self.dual_clip}")
        if self.micro_batch_rows < 1:
            raise ValueError("micro_batch_rows must be at least 1")
        if self.micro_batch_tokens < 0:
            raise ValueError("micro_batch_tokens must be 0 (no token cap) or positive")
        if self.max_completion_length is None or self.max_completion_length < 1:
            raise ValueError("max_completion_length (tokens per assistant turn) must be set")
