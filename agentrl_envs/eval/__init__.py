"""``agentrl-envs eval``: evaluate any OpenAI-compatible model on any mix of tasks.

    from agentrl_envs.eval import EvalConfig, evaluate, write_outputs
    result = await evaluate(EvalConfig(tasks=["db"], controller="http://127.0.0.1:5020", base_url="http://host/v1"))
    write_outputs(result, "out/")

The CLI calls :func:`run_eval` with its parsed arguments; it starts the embedded controller and
model server when ``--controller`` / ``--base-url`` are not given. ``runs`` plays every sample K
times (avg@K, pass@K); several models (``model=["a", "b"]``) are evaluated side by side; a
:class:`RunStore` records each episode as it ends, so ``--resume DIR`` finishes an interrupted
run; :func:`eval_report` (``agentrl-envs eval-report``) compares finished runs.
"""

from __future__ import annotations

from .command import add_arguments, embedded_services, main, resume_config, run, run_eval
from .compare import eval_report
from .config import EvalConfig
from .report import format_comparison, format_table, pass_at_k, print_table, summarize, write_outputs
from .results import EpisodeResult, EvalResult
from .runner import evaluate
from .store import RunStore

__all__ = [
    "EpisodeResult",
    "EvalConfig",
    "EvalResult",
    "RunStore",
    "add_arguments",
    "embedded_services",
    "eval_report",
    "evaluate",
    "format_comparison",
    "format_table",
    "main",
    "pass_at_k",
    "print_table",
    "resume_config",
    "run",
    "run_eval",
    "summarize",
    "write_outputs",
]
