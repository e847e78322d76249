"""BFCL's own harness fed with recorded model outputs, and the same outputs played through our task.

:class:`ScriptedHandler` is BFCL's ``OpenAICompletionsHandler`` whose model call (``_query_FC``)
returns the next recorded assistant message instead of calling an API; everything else (turn
flow, held-back functions, decoding, execution, and the eval runner's per-entry evaluator) is
BFCL's code. :func:`play_ours` sends the same messages through ``bfcl`` in-process. Both ask for
the next message at the points their runner asks, so a difference in turn flow shows up as a
different request sequence or verdict.
"""

from __future__ import annotations

import copy
import secrets
import types
from typing import Any

from agentrl_env_bfcl import upstream

from agentrl_envs import TaskRuntime, get_task
from agentrl_envs.agent import InProcessSessions, run_episode

#: What a script answers once its messages run out: text, which ends the turn in both runners.
EXHAUSTED = {"role": "assistant", "content": "I have nothing more to do."}


def _response(message: dict[str, Any]) -> Any:
    calls = [
        types.SimpleNamespace(id=c["id"], type="function", function=types.SimpleNamespace(**c["function"]))
        for c in message.get("tool_calls") or []
    ]
    reply = types.SimpleNamespace(tool_calls=calls or None, content=message.get("content"))
    return types.SimpleNamespace(
        choices=[types.SimpleNamespace(message=reply)], usage=types.SimpleNamespace(prompt_tokens=0, completion_tokens=0)
    )


def scripted_handler(script: list[dict[str, Any]]) -> Any:
    """BFCL's OpenAI FC handler answering from ``script``; ``.requests`` records what it was asked
    with: (tool names, the newest user message's content) per model call."""
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler

    class ScriptedHandler(OpenAICompletionsHandler):
        def __init__(self) -> None:  # no OpenAI client: the "model" is the script
            name = f"bfclref_{secrets.token_hex(6)}"
            super(OpenAICompletionsHandler, self).__init__(name, 0.0, upstream.MODEL, True)
            from bfcl_eval.constants.enums import ModelStyle

            self.model_style = ModelStyle.OPENAI_COMPLETIONS
            self.script = list(script)
            self.requests: list[tuple[list[str], str | None]] = []

        def _query_FC(self, inference_data: dict) -> tuple[Any, float]:
            users = [m for m in inference_data["message"] if isinstance(m, dict) and m.get("role") == "user"]
            self.requests.append(
                ([t["function"]["name"] for t in inference_data["tools"]], users[-1]["content"] if users else None)
            )
            return _response(self.script.pop(0) if self.script else EXHAUSTED), 0.0

    upstream.bfcl()  # the stand-in model registry before BFCL's handler module is imported
    return ScriptedHandler()


def play_bfcl(sample: dict[str, Any], script: list[dict[str, Any]]) -> tuple[bool, list[Any]]:
    """BFCL's verdict on ``script`` (its runner, then its eval runner), and its request sequence."""
    handler = scripted_handler(script)
    entry = copy.deepcopy(sample["entry"])
    try:
        if sample["category"].startswith("multi_turn"):
            results, _ = handler.inference_multi_turn_FC(entry, include_input_log=False, exclude_state_log=True)
            verdict = upstream.bfcl().eval_runner._evaluate_single_multi_turn_entry(
                handler,
                entry["id"],
                results,
                sample["ground_truth"],
                copy.deepcopy(sample["entry"]),
                handler.model_name_underline_replaced,
                sample["category"],
            )
        else:
            result, _ = handler.inference_single_turn_FC(entry, include_input_log=False)
            verdict = upstream.evaluate_single_turn(sample["entry"], sample["ground_truth"], result)
    finally:
        upstream.release_instances(handler.model_name_underline_replaced)
    return bool(verdict["valid"]), handler.requests


class RecordingPolicy:
    """Sends ``script`` (then :data:`EXHAUSTED`) and records (tool names, newest user message) per request."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[tuple[list[str], str | None]] = []

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        users = [m for m in messages if m.get("role") == "user"]
        self.requests.append(([t["function"]["name"] for t in tools], users[-1]["content"] if users else None))
        return copy.deepcopy(self.script.pop(0) if self.script else EXHAUSTED)


async def play_ours(runtime: TaskRuntime, index: int, script: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """Our task's transcript of ``script`` on sample ``index``, and its request sequence."""
    policy = RecordingPolicy(script)
    transcript = await run_episode(InProcessSessions(runtime), "bfcl", index, policy)
    return transcript, policy.requests


def runtime(split: str) -> TaskRuntime:
    return TaskRuntime(get_task("bfcl"), split=split)
