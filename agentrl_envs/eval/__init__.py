"""``agentrl-envs eval``: evaluate any OpenAI-compatible model on any mix of tasks.

    from agentrl_envs.eval import EvalConfig, evaluate, write_outputs
    result = await evaluate(EvalConfig(tasks=["db"], controller="http://127.0.0.1:5020", base_url="http://host/v1"))
    write_outputs(result, "out/")

The CLI calls :func:`run_eval` with its parsed arguments; it starts the embedded controller and
model server when ``--controller`` / ``--base-url`` are not given.
"""

from __future__ import annotations

from .command import add_arguments, embedded_services, main, run, run_eval
from .config import EvalConfig
from .report import format_table, print_table, summarize, write_outputs
from .runner import EpisodeResult, EvalResult, evaluate

__all__ = [
    "EpisodeResult",
    "EvalConfig",
    "EvalResult",
    "add_arguments",
    "embedded_services",
    "evaluate",
    "format_table",
    "main",
    "print_table",
    "run",
    "run_eval",
    "summarize",
    "write_outputs",
]
