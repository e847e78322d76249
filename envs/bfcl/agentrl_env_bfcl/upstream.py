"""The one module that imports BFCL's package (``bfcl-eval`` on PyPI, pinned: :data:`BFCL_VERSION`).

Everything BFCL-specific the task runs is BFCL's own code: the data files and their loader
(``bfcl_eval.utils.load_dataset_entry``: multi-turn function docs, held-back functions), the
OpenAI function-calling handler's tool compilation, response parsing and decoding
(``OpenAICompletionsHandler``: what BFCL runs for an OpenAI-compatible ``-FC`` model), the
multi-turn executor (``execute_multi_turn_func_call``) and the per-entry evaluators of its eval
runner (``_evaluate_single_multi_turn_entry``, ``_evaluate_single_ast_entry``,
``_evaluate_single_relevance_entry``, which call its multi-turn and AST checkers).

``bfcl-eval`` is installed with ``--no-deps`` (its requirements pin numpy==1.26.4 and pull every
vendor's API client, faiss and sentence-transformers); this package depends on what the modules
above import. Two things are set before the import, both documented in the task's README:

* ``BFCL_PROJECT_ROOT``: BFCL creates its result/score/lock folders under it at import time
  (default: beside its installed package, i.e. in site-packages); unset, it becomes a folder in
  the system's temporary directory.
* ``bfcl_eval.constants.model_config``: the registry of every model BFCL knows; importing it
  imports every vendor's client library. The checkers read one field of it
  (``MODEL_CONFIG_MAPPING[name].underscore_to_dot``), so unless the real module is already
  imported, a module holding only this task's entry (:data:`MODEL`) takes its place.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
import tempfile
import types
from functools import cache
from typing import Any

#: The bfcl-eval release whose data, classes and checkers this task runs.
BFCL_VERSION = "2026.3.23"
#: This task's name for the model in BFCL's registry: an OpenAI-compatible model in
#: function-calling mode, whose tool names have ``.`` replaced by ``_`` (as BFCL's OpenAI handler).
MODEL = "agentrl-envs-FC"

_INSTALL = f"pip install --no-deps bfcl-eval=={BFCL_VERSION}"


class BFCLMissingError(ImportError):
    """BFCL's package is not installed (or not the pinned release)."""


def _prepare() -> None:
    try:
        version = importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError:
        raise BFCLMissingError(f"the bfcl task needs BFCL's package: {_INSTALL} (see envs/bfcl/README.md)") from None
    if version != BFCL_VERSION:
        raise BFCLMissingError(f"the bfcl task runs bfcl-eval {BFCL_VERSION}, found {version}: {_INSTALL}")
    os.environ.setdefault("BFCL_PROJECT_ROOT", os.path.join(tempfile.gettempdir(), f"agentrl-bfcl-{os.getuid()}"))
    name = "bfcl_eval.constants.model_config"
    entry = types.SimpleNamespace(model_name=MODEL, display_name=MODEL, is_fc_model=True, underscore_to_dot=True)
    if name in sys.modules:
        sys.modules[name].MODEL_CONFIG_MAPPING.setdefault(MODEL, entry)
        return
    registry = types.ModuleType(name, "agentrl-env-bfcl's stand-in for BFCL's model registry (see agentrl_env_bfcl.upstream).")
    registry.MODEL_CONFIG_MAPPING = {MODEL: entry}  # type: ignore[attr-defined]
    sys.modules[name] = registry


@cache
def bfcl() -> types.SimpleNamespace:
    """BFCL's modules and functions this task uses, imported once."""
    _prepare()
    from bfcl_eval.constants import category_mapping, default_prompts
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.model_handler.api_inference.openai_completion import OpenAICompletionsHandler
    from bfcl_eval.model_handler.base_handler import BaseHandler
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    # The handler without its OpenAI client (which wants an API key): only its pure methods are used.
    handler = OpenAICompletionsHandler.__new__(OpenAICompletionsHandler)
    BaseHandler.__init__(handler, MODEL, 0.0, MODEL, True)
    handler.model_style = ModelStyle.OPENAI_COMPLETIONS
    return types.SimpleNamespace(
        handler=handler,
        eval_runner=eval_runner,
        multi_turn_utils=multi_turn_utils,
        load_dataset_entry=load_dataset_entry,
        load_ground_truth_entry=load_ground_truth_entry,
        categories=category_mapping,
        max_steps=default_prompts.MAXIMUM_STEP_LIMIT,
        added_functions_prompt=default_prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
    )


def compile_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's function docs as the OpenAI tools BFCL's OpenAI handler sends."""
    return bfcl().handler._compile_tools({}, {"function": functions})["tools"]


def model_responses(message: dict[str, Any]) -> Any:
    """What BFCL's OpenAI handler records of an assistant message (``_parse_query_response_FC``):
    ``[{name: arguments}, ...]`` for tool calls, else the text content."""
    calls = [
        types.SimpleNamespace(id=c.get("id"), function=types.SimpleNamespace(**c["function"]))
        for c in message.get("tool_calls") or []
    ]
    reply = types.SimpleNamespace(tool_calls=calls or None, content=message.get("content"))
    response = types.SimpleNamespace(
        choices=[types.SimpleNamespace(message=reply)], usage=types.SimpleNamespace(prompt_tokens=0, completion_tokens=0)
    )
    return bfcl().handler._parse_query_response_FC(response)["model_responses"]


def decode_execute(responses: Any) -> list[str]:
    """BFCL's decoding of recorded responses into call strings (raises when they do not decode)."""
    return bfcl().handler.decode_execute(responses, has_tool_call_tag=False)


def is_empty_execute_response(decoded: list[Any]) -> bool:
    return bfcl().multi_turn_utils.is_empty_execute_response(decoded)


def execute(
    calls: list[str], entry: dict[str, Any], model_name: str, *, eval_run: bool = False
) -> tuple[list[str], dict[str, Any]]:
    """Run call strings on the entry's class instances of ``model_name`` (BFCL keeps them between
    calls, keyed by model name and entry id): ``(results, {class name: instance})``."""
    return bfcl().multi_turn_utils.execute_multi_turn_func_call(
        calls,
        entry.get("initial_config", {}),
        entry["involved_classes"],
        model_name,
        entry["id"],
        long_context="long_context" in entry["id"] or "composite" in entry["id"],
        is_evaL_run=eval_run,
    )


def release_instances(model_name: str) -> None:
    """Drop every class instance BFCL keeps for ``model_name`` (they live in a module's globals)."""
    store = vars(bfcl().multi_turn_utils)
    for key in [k for k in store if k.startswith(model_name + "_")]:
        del store[key]


def evaluate_multi_turn(entry: dict[str, Any], ground_truth: list[list[str]], results: Any, model_name: str) -> dict[str, Any]:
    """BFCL's verdict on one multi-turn entry (its eval runner's per-entry function)."""
    category = entry["id"].rsplit("_", 1)[0]
    prompt = {k: v for k, v in entry.items() if k != "function"}
    return bfcl().eval_runner._evaluate_single_multi_turn_entry(
        bfcl().handler, entry["id"], results, ground_truth, prompt, model_name, category
    )


def evaluate_single_turn(entry: dict[str, Any], ground_truth: Any, result: Any) -> dict[str, Any]:
    """BFCL's verdict on one single-turn entry: relevance for irrelevance, else its AST checker."""
    runner = bfcl().eval_runner
    category = entry["id"].rsplit("_", 1)[0]
    if "irrelevance" in category or "relevance" in category:
        return runner._evaluate_single_relevance_entry(bfcl().handler, entry["id"], result, entry, MODEL, category)
    from bfcl_eval.constants.enums import Language, ReturnFormat

    return runner._evaluate_single_ast_entry(
        bfcl().handler, entry["id"], result, ground_truth, entry, MODEL, category, Language.PYTHON, ReturnFormat.PYTHON
    )
