"""Configuration of ``agentrl-envs eval``: one dataclass, every field documented.

Parameters
----------
What to evaluate
    ``tasks``, ``split``, ``limit``, ``task_options``.
Which model
    ``model``, ``base_url``, ``api_key``, ``temperature``, ``max_tokens``, ``seed``, ``tool_choice``.
Where the environments run
    ``controller`` (``None``: the embedded stack is started by :func:`agentrl_envs.eval.run_eval`).
How the run behaves
    ``concurrency``, ``max_turns``, ``max_retries``, ``retry_backoff``, ``capacity_timeout``,
    ``model_timeout``, ``sdk_max_retries``, ``progress``.
Where results go
    ``output``.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class EvalConfig:
    """Options of one evaluation run (the CLI flags of ``agentrl-envs eval``)."""

    tasks: list[str] = field(metadata=_help("Tasks to evaluate, e.g. ['db', 'os'] (a comma-separated string is accepted)."))
    split: str | None = field(
        default="dev", metadata=_help("Split the embedded stack serves (a running controller serves its own).")
    )
    limit: int | None = field(default=None, metadata=_help("Evaluate only the first N indices of each task (None: all)."))
    model: str | None = field(
        default=None, metadata=_help("Model name; None: the first model listed by the server's /v1/models.")
    )
    base_url: str | None = field(
        default=None, metadata=_help("OpenAI-compatible base URL ending in /v1; None: the built-in model server.")
    )
    api_key: str | None = field(default=None, metadata=_help("API key; None: $OPENAI_API_KEY, else 'EMPTY'."))
    controller: str | None = field(default=None, metadata=_help("Controller base URL; None: start the embedded stack."))
    output: Path | None = field(default=None, metadata=_help("Directory for summary.json, trajectories.jsonl and report.html."))
    concurrency: int = field(default=8, metadata=_help("Episodes in flight at once, over all tasks."))
    temperature: float = field(default=0.0, metadata=_help("Sampling temperature of every model call."))
    max_tokens: int = field(default=256, metadata=_help("Completion tokens per turn."))
    seed: int | None = field(default=None, metadata=_help("Sampling seed passed to the model API (None: not sent)."))
    tool_choice: str | None = field(
        default=None,
        metadata=_help(
            "OpenAI tool_choice sent with the tools: 'auto', 'required' (the built-in server then samples one well-formed"
            " call under its grammar) or 'none' (None: not sent)."
        ),
    )
    max_turns: int | None = field(
        default=100,
        metadata=_help(
            "Client-side cap on assistant turns; an episode that reaches it ends as 'task limit reached' (None: no cap)."
        ),
    )
    max_retries: int = field(
        default=3, metadata=_help("Times an episode hit by an infrastructure or model-API failure is restarted from scratch.")
    )
    retry_backoff: float = field(default=1.0, metadata=_help("Base of the exponential back-off between retries, in seconds."))
    capacity_timeout: float = field(
        default=600.0,
        metadata=_help("Seconds an episode keeps waiting for a free worker slot (HTTP 406) before it counts as a failure."),
    )
    model_timeout: float = field(default=600.0, metadata=_help("Timeout of one model call, in seconds."))
    sdk_max_retries: int = field(default=2, metadata=_help("Retries the OpenAI SDK itself makes for one call (429s, 5xx)."))
    task_options: dict[str, dict[str, Any]] = field(
        default_factory=dict, metadata=_help("Per-task options for the embedded stack, e.g. {'db': {'backend': 'sqlite'}}.")
    )
    progress: bool = field(default=True, metadata=_help("Show one tqdm progress bar per task."))

    def __post_init__(self) -> None:
        if isinstance(self.tasks, str):
            self.tasks = [t.strip() for t in self.tasks.split(",") if t.strip()]
        self.tasks = list(dict.fromkeys(self.tasks))
        if not self.tasks:
            raise ValueError("EvalConfig.tasks is empty: pass at least one task, e.g. --tasks db,os")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {self.limit}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None, got {self.max_turns}")
        if self.tool_choice is not None and self.tool_choice not in ("auto", "required", "none"):
            raise ValueError(f"tool_choice must be 'auto', 'required' or 'none', got {self.tool_choice!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.output is not None:
            self.output = Path(self.output)

    @classmethod
    def from_args(cls, args: argparse.Namespace | Mapping[str, Any]) -> EvalConfig:
        """Build a config from an argparse namespace or a mapping; unknown keys and ``None`` values are ignored
        (``None`` keeps the field's default)."""
        values = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names and v is not None})
