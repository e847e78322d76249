"""Which decoded calls may reach BFCL's executor, which runs each call string with Python's ``eval``.

BFCL turns a tool call into ``name(key=repr(value), ...)`` and evaluates it in its executor's
module namespace, so a model that names a builtin (``open(file=..., mode='w')``, ``input()``) or
puts code into a tool or argument name would run it on the worker. A call string is let through
only when it is one call of a public method of the entry's class instances (the names BFCL's
executor binds) with keyword arguments whose values are literals; any other call is *refused*:
the model is told what BFCL would answer for a name it does not know, and the checker sees a call
of :data:`REFUSED` instead (it fails the same way, and state and the emptiness of the turn are
unchanged). Only a call of a Python builtin or of a name the executor module defines is thereby
answered differently from BFCL (BFCL would run it).
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

from .upstream import decode_execute

#: What a refused call becomes for the checker: a name that no namespace defines.
REFUSED = "agentrl_refused_call()"

_LITERAL_NODES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.UnaryOp, ast.UAdd, ast.USub, ast.Load, ast.Name)


def method_names(instances: dict[str, Any]) -> set[str]:
    """The names BFCL's executor binds: the public methods of the entry's class instances."""
    return {
        name
        for instance in instances.values()
        for name, _ in inspect.getmembers(instance, predicate=inspect.ismethod)
        if not name.startswith("_")
    }


def refusal(call: str, allowed: set[str]) -> str | None:
    """``None`` if ``call`` may be executed, else the error text BFCL gives for it (or would give
    for an unknown name)."""
    try:
        tree = compile(call, "<string>", "eval", ast.PyCF_ONLY_AST)
    except SyntaxError as e:  # what eval would raise, without running anything
        return f"Error during execution: {e}"
    body = tree.body
    if not (isinstance(body, ast.Call) and isinstance(body.func, ast.Name)):
        return "Error during execution: not a function call"
    if body.func.id not in allowed:
        return f"Error during execution: name '{body.func.id}' is not defined"
    if body.args or any(k.arg is None for k in body.keywords):
        return "Error during execution: only keyword arguments are accepted"
    for keyword in body.keywords:
        if not all(isinstance(node, _LITERAL_NODES) for node in ast.walk(keyword.value)):
            return f"Error during execution: the value of `{keyword.arg}` is not a literal"
    return None


def for_checker(responses: Any, allowed: set[str]) -> Any:
    """One step's recorded responses (``[{name: arguments}, ...]`` or text) as BFCL's checker may
    decode and run them: a step that decodes keeps its calls, each refused one replaced by a call
    of :data:`REFUSED`; a step that does not decode is returned as it is (the checker skips it)."""
    try:
        calls = decode_execute(responses)
    except Exception:
        return responses
    if len(calls) != len(responses):  # one string per {name: arguments}: else leave it to BFCL
        return responses
    return [
        {REFUSED[:-2]: "{}"} if refusal(call, allowed) is not None else response
        for call, response in zip(calls, responses, strict=True)
    ]
