"""``AgentRLConfig``: TRL's ``GRPOConfig`` plus what multi-turn, multi-task agent RL needs."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

__all__ = ["AgentRLConfig"]


def _has_bf16_device() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


@dataclass
class AgentRLConfig(GRPOConfig):
    r"""
    Configuration for [`AgentRLTrainer`]. Everything of TRL's `GRPOConfig` applies (optimizer,
    schedule, logging with `report_to`, checkpoints, `num_generations` = GRPO group size,
    `epsilon`/`epsilon_high` = PPO clip, `beta` = KL coefficient, `temperature`, `top_p`,
    `max_completion_length` = tokens per assistant turn). The fields below add:

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
    - **min_groups_per_step**, **max_groups_per_step**, **queue_capacity_groups**: the dynamic batch.
    - **max_turns**, **max_context_length**, **assistant_prefix**, **constrain_tool_calls**, **incomplete_reward**.

    > Engines and cross-policy sampling

    - **engine**: `"transformers"` or `"vllm"`; **num_engines**, **engine_max_batch**.
    - **lagging_fraction**, **lag_steps**, **lagging_prob**: lagging engines take new weights every
      `lag_steps` steps; each turn goes to one with probability `lagging_prob`.

    > Loss

    - **dual_clip**, **task_advantage_norm**, **micro_batch_rows**.
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
        default=1, metadata={"help": "Async: a step waits for at least this many complete GRPO groups."}
    )
    max_groups_per_step: int = field(
        default=4, metadata={"help": "Async: at most this many groups per step. Sync: exactly this many."}
    )
    queue_capacity_groups: int = field(
        default=0, metadata={"help": "Queued + in-flight groups at most (0 = 2 × max_groups_per_step, as AgentRL)."}
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
    micro_batch_rows: int = field(
        default=8, metadata={"help": "Rows per forward/backward pass (the step's loss is still one token-mean)."}
    )

    def __post_init__(self) -> None:
        if self.num_generations is None:
            self.num_generations = 8
        # One optimizer step consumes one dynamic batch: the dataloader's own batch is only a tick.
        self.per_device_train_batch_size = self.num_generations
        if self.gradient_accumulation_steps != 1:
            raise ValueError(
                "gradient_accumulation_steps must be 1: a step trains on the whole dynamic batch (set micro_batch_rows to bound memory)"
            )
        if getattr(self, "num_iterations", 1) != 1:
            raise ValueError("num_iterations must be 1: rollout logprobs are the PPO reference, one pass per batch")
        self.steps_per_generation = None
        self.generation_batch_size = None
        self.remove_unused_columns = False
        if self.bf16 is None and not _has_bf16_device():
            self.bf16 = False  # GRPOConfig defaults to bf16; on a CPU-only machine train in fp32
        super().__post_init__()
        if self.rollout_mode not in ("async", "sync"):
            raise ValueError(f"rollout_mode must be 'async' or 'sync', not {self.rollout_mode!r}")
        if self.engine not in ("transformers", "vllm"):
            raise ValueError(f"engine must be 'transformers' or 'vllm', not {self.engine!r}")
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
            raise ValueError("queue_capacity_groups must be at least max_groups_per_step")
        if self.num_engines < 1:
            raise ValueError("num_engines must be at least 1")
        if not 0.0 <= self.lagging_fraction < 1.0 or not 0.0 <= self.lagging_prob <= 1.0:
            raise ValueError("lagging_fraction must be in [0, 1) and lagging_prob in [0, 1]")
        if self.lag_steps < 1:
            raise ValueError("lag_steps must be at least 1")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (AgentRL: 3) or None; got {self.dual_clip}")
        if self.micro_batch_rows < 1:
            raise ValueError("micro_batch_rows must be at least 1")
        if self.max_completion_length is None or self.max_completion_length < 1:
            raise ValueError("max_completion_length (tokens per assistant turn) must be set")
