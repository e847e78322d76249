"""AgentRL's own evaluation CLI, ``agentrl-eval`` 0.1.2, end to end against our stack.

The real CLI runs as a subprocess with its OpenAI client and its defaults (``max_output_tokens``
16000, ``parallel_tool_calls``, ``prompt_cache_key``...) against *our* controller and DB worker
(:class:`~agentrl_envs.stack.LocalStack`) and *our* built-in model server
(:class:`~agentrl_envs.models.launch.LocalModelServer`), once over Chat Completions
(``--chat-completions``) and once over the Responses API (its default). Every episode must get a
real outcome from the environment: a status AgentRL counts as completed, with a reward, never
``server error`` / ``model error`` / ``workflow error``.

agentrl-eval writes ``OUTPUT/<model>-<task>-<YYYYmmddHHMM>/results.jsonl`` (one JSON row per
episode: ``status``, ``metric_reward``, ``index`` as ``{"int_value", "str_value"}``, ``raw_trace``
relative to that folder). The folder name has minute resolution and a run re-uses a folder with
the same name, skipping episodes already completed there: each run gets its own OUTPUT.

Runtime on 2 cores: ~30 s for the file on an idle machine (model start ~7 s, agentrl-eval's
"Say hi." check, two DB samples of at most 3 rounds each, per mode); 3 min with the cores busy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ci_helpers import require

pytestmark = [pytest.mark.compat, pytest.mark.model, pytest.mark.slow]
require("agentrl.eval.cli.settings", "agentrl-eval or one of its dependencies")
require("torch", "the [local] extra (torch)")
require("transformers", "the [local] extra (transformers)")

from agentrl_envs.models.launch import LocalModelServer  # noqa: E402
from agentrl_envs.stack import LocalStack  # noqa: E402

INDICES = (0, 1)
# Outcomes AgentRL scores (SampleStatus.completed_statuses() less "unknown", the default it fills in
# when a finished response carries no status).
REAL_OUTCOMES = {"completed", "agent validation failed", "agent invalid action", "task limit reached"}
FALLBACK_WARNING = "falling back to Chat Completions API"


@pytest.fixture(scope="module")
def model_server():
    with LocalModelServer(startup_timeout=300) as server:
        yield server


@pytest.fixture(scope="module")
def db_stack():
    # max_turns 3: the round limit bounds each episode (an episode that hits it ends "task limit reached").
    with LocalStack(["db"], split="easy-test", task_options={"db": {"max_turns": 3}}) as stack:
        yield stack


def run_agentrl_eval(tmp_path: Path, model_server, db_stack, *extra: str) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "results"
    argv = [
        sys.executable,
        "-m",
        "agentrl.eval",
        "--no-interactive",
        "--verbose",
        "--client",
        "openai",
        "--base-url",
        model_server.base_url,
        "--controller",
        f"{db_stack.url}/api/",
        "--indices-range",
        f"{INDICES[0]}-{INDICES[-1]}",
        "--concurrency",
        str(len(INDICES)),
        "--temperature",
        "0",
        "--output",
        str(out),
        *extra,
        "db",
    ]
    # No stray configuration: agentrl-eval reads AGENTRL_EVAL_* and a .env in its working directory.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRL_EVAL_", "OPENAI_"))}
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)


def read_results(out: Path) -> list[dict]:
    stores = [p for p in out.iterdir() if p.is_dir()] if out.is_dir() else []
    assert len(stores) == 1, f"expected one result store under {out}, found {stores}"
    rows = [json.loads(line) for line in (stores[0] / "results.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:
        trace = json.loads((stores[0] / row["raw_trace"]).read_text()) if row.get("raw_trace") else []
        row["trace"] = trace
    return rows


def is_model_turn(item: dict) -> bool:
    """An item of agentrl-eval's trace that the model wrote (not one of the task's few-shot turns,
    whose call ids start with ``example_``): a chat assistant message, or a Responses output item."""
    if item.get("role") == "assistant":
        ids = [call.get("id") or "" for call in item.get("tool_calls") or []]
        return not ids or not all(i.startswith("example_") for i in ids)
    return item.get("type") == "function_call"


def assert_every_episode_scored(proc: subprocess.CompletedProcess[str], out: Path) -> None:
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    rows = read_results(out)
    by_index = {row["index"]["int_value"]: row for row in rows}
    assert sorted(by_index) == list(INDICES), log[-4000:]
    for index, row in by_index.items():
        assert row["status"] in REAL_OUTCOMES, f"sample {index}: {row['status']!r} ({row['result']})\n{log[-4000:]}"
        assert row["metric_reward"] is not None and 0.0 <= row["metric_reward"] <= 1.0, row
        assert any(is_model_turn(item) for item in row["trace"]), f"sample {index}: no model turn in {row['trace']}"
    assert "error in task=" not in log, log[-4000:]


def test_agentrl_eval_chat_completions(tmp_path, model_server, db_stack):
    proc = run_agentrl_eval(tmp_path, model_server, db_stack, "--chat-completions")
    assert_every_episode_scored(proc, tmp_path / "results")


def test_agentrl_eval_responses_api(tmp_path, model_server, db_stack):
    proc = run_agentrl_eval(tmp_path, model_server, db_stack)
    log = proc.stdout + proc.stderr
    # agentrl-eval silently switches to Chat Completions on a 400/500 from /v1/responses: not a pass.
    assert FALLBACK_WARNING not in log, log[-4000:]
    assert_every_episode_scored(proc, tmp_path / "results")
