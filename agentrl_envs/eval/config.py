"""Configuration of ``agentrl-envs eval``: one dataclass, every field documented.

Parameters
----------
What to evaluate
    ``tasks``, ``split``, ``limit``, ``runs``, ``task_options``.
Which models
    ``model``, ``base_url``, ``api_key`` (each a list: one entry per model, or one shared by all),
    ``temperature``, ``max_tokens``, ``seed``, ``tool_choice``.
Where the environments run
    ``controller`` (``None``: the embedded stack is started by :func:`agentrl_envs.eval.run_eval`).
How the run behaves
    ``concurrency``, ``max_turns``, ``max_retries``, ``retry_backoff``, ``capacity_timeout``,
    ``model_timeout``, ``sdk_max_retries``, ``progress``.
Where results go
    ``output``.

The fields in :data:`RUN_DEFINING` decide *what* a run measures; ``--resume`` refuses to change
them. The others (where the services are, how fast and how patiently it runs) may change.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: Fields a resumed run must keep: changing one would mix two different evaluations in one file.
RUN_DEFINING = (
    "tasks",
    "split",
    "limit",
    "runs",
    "model",
    "temperature",
    "max_tokens",
    "seed",
    "tool_choice",
    "max_turns",
    "task_options",
    "model_dtype",
)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


def _as_list(value: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """``"a,b"`` or ``["a", "b,c"]`` → ``["a", "b", "c"]``; ``None`` stays ``None``."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


@dataclass(frozen=True)
class ModelSlot:
    """One model of a run: its name (``None``: the server's first), its base URL (``None``: the
    built-in server) and its API key (``None``: ``$OPENAI_API_KEY``, else ``EMPTY``)."""

    model: str | None
    base_url: str | None
    api_key: str | None


@dataclass
class EvalConfig:
    """Options of one evaluation run (the CLI flags of ``agentrl-envs eval``)."""

    tasks: list[str] = field(metadata=_help("Tasks to evaluate, e.g. ['db', 'os'] (a comma-separated string is accepted)."))
    split: str | None = field(
        default="dev", metadata=_help("Split the embedded stack serves (a running controller serves its own).")
    )
    limit: int | None = field(default=None, metadata=_help("Evaluate only the first N indices of each task (None: all)."))
    runs: int = field(
        default=1,
        metadata=_help("Independent episodes per sample (K); the summary reports avg@K and pass@K per task."),
    )
    model: list[str] | None = field(
        default=None,
        metadata=_help(
            "Model name(s), comma-separated or repeated: several models are evaluated side by side"
            " (None: the first model listed by the server's /v1/models)."
        ),
    )
    base_url: list[str] | None = field(
        default=None,
        metadata=_help(
            "OpenAI-compatible base URL ending in /v1: one shared by every model or one per model"
            " (None: the built-in model server)."
        ),
    )
    api_key: list[str] | None = field(
        default=None, metadata=_help("API key, one shared or one per model (None: $OPENAI_API_KEY, else 'EMPTY').")
    )
    controller: str | None = field(default=None, metadata=_help("Controller base URL; None: start the embedded stack."))
    model_dtype: str = field(
        default="float32",
        metadata=_help(
            "Precision of the built-in model server's matrix products, when no --base-url is given: 'float32' (exact)"
            " or 'bfloat16' (~1.6x faster decoding on CPUs with bfloat16 support; a greedy completion may differ)."
        ),
    )
    output: Path | None = field(
        default=None,
        metadata=_help("Directory for config.json, trajectories.jsonl, summary.json and report.html (./eval_results)."),
    )
    concurrency: int = field(default=8, metadata=_help("Episodes in flight at once, over all tasks and models."))
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
    progress: bool = field(default=True, metadata=_help("Show one tqdm progress bar per task (per model and task)."))

    def __post_init__(self) -> None:
        self.tasks = list(dict.fromkeys(_as_list(self.tasks) or []))
        if not self.tasks:
            raise ValueError("EvalConfig.tasks is empty: pass at least one task, e.g. --tasks db,os")
        self.model, self.base_url, self.api_key = _as_list(self.model), _as_list(self.base_url), _as_list(self.api_key)
        if self.model is not None and len(set(self.model)) != len(self.model):
            raise ValueError(f"model lists a model twice: {self.model}")
        lengths = {len(v) for v in (self.model, self.base_url, self.api_key) if v} - {1}
        if len(lengths) > 1:
            given = (("model names", self.model), ("base URLs", self.base_url), ("API keys", self.api_key))
            counts = ", ".join(f"{len(v)} {label}" for label, v in given if v)
            raise ValueError(f"{counts}: give one value shared by every model or one per model")
        for name in ("model", "base_url", "api_key"):
            if getattr(self, name) == []:
                setattr(self, name, None)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {self.limit}")
        if self.runs < 1:
            raise ValueError(f"runs must be >= 1, got {self.runs}")
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
        if self.model_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"model_dtype must be 'float32' or 'bfloat16', got {self.model_dtype!r}")
        if self.output is not None:
            self.output = Path(self.output)

    def model_slots(self) -> list[ModelSlot]:
        """One :class:`ModelSlot` per model evaluated; a single value of a list is shared by every model."""
        lists = [self.model or [None], self.base_url or [None], self.api_key or [None]]
        count = max(len(values) for values in lists)
        models, urls, keys = ([values[i] if len(values) > 1 else values[0] for i in range(count)] for values in lists)
        return [ModelSlot(m, u, k) for m, u, k in zip(models, urls, keys, strict=True)]

    def to_json(self) -> dict[str, Any]:
        """The fields as JSON values, without the API keys (secrets are never written to disk)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "api_key":
                continue
            value = getattr(self, f.name)
            out[f.name] = str(value) if isinstance(value, Path) else value
        return out

    @classmethod
    def from_args(cls, args: argparse.Namespace | Mapping[str, Any]) -> EvalConfig:
        """Build a config from an argparse namespace or a mapping; unknown keys and ``None`` values are ignored
        (``None`` keeps the field's default)."""
        values = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names and v is not None})
