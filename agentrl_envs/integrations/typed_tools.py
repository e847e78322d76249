"""OpenAI tool definitions turned into typed Python functions with Google-style docstrings.

Both directions of our integrations need it: TRL discovers an environment's tools as methods and
reads their schema from type hints and docstrings (``transformers.utils.get_json_schema``), and a
:class:`~agentrl_envs.task.Task` derives its tool schemas the same way (``@tool`` methods). So a
tool known only as JSON (a task behind a controller, an OpenEnv server's MCP tools) becomes a
function whose signature, annotations and docstring say what the JSON said::

    fn = tool_function(definition, lambda self, name, arguments: ...)
    fn.__name__, inspect.signature(fn), fn.__doc__

JSON Schema types map to Python types (``string`` → ``str``, ``integer`` → ``int``, ``number`` →
``float``, ``boolean`` → ``bool``, ``array`` → ``list[item]``, ``object`` → ``dict[str, Any]``,
``enum`` → ``Literal[...]``, a list of types or ``anyOf`` → a union); what a Python type cannot say
(lengths, patterns, ``additionalProperties``) is lost in the function's own schema, so whoever runs
the call must still validate it against the original definition.
"""

from __future__ import annotations

import inspect
import keyword
import re
from collections.abc import Callable
from typing import Any, Literal, Union

_SIMPLE: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "null": type(None)}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def python_type(schema: dict[str, Any]) -> Any:
    """The Python type hint that says what the JSON Schema ``schema`` says (as far as one can)."""
    if not isinstance(schema, dict):
        return Any
    if "enum" in schema and schema["enum"]:
        return Literal[tuple(schema["enum"])]  # type: ignore[valid-type]
    if "anyOf" in schema or "oneOf" in schema:
        options = [python_type(s) for s in schema.get("anyOf") or schema.get("oneOf") or []]
        return Union[tuple(options)] if options else Any  # noqa: UP007 - built at run time
    kind = schema.get("type")
    if isinstance(kind, list):
        return Union[tuple(python_type({**schema, "type": k}) for k in kind)]  # noqa: UP007
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        return list[python_type(schema.get("items", {}))] if schema.get("items") else list
    if kind == "object":
        return dict[str, Any]
    return Any


def _one_line(text: str) -> str:
    return " ".join(text.split())


def docstring(description: str, parameters: dict[str, Any]) -> str:
    """A Google-style docstring: the description, then ``Args:`` with one line per parameter
    (a parameter the schema leaves undescribed is described by its name, as transformers needs one)."""
    props = parameters.get("properties") or {}
    lines = [description.strip() or "A tool."]
    if props:
        lines += ["", "Args:"]
        lines += [f"    {name}: {_one_line(str(spec.get('description') or name))}" for name, spec in props.items()]
    return "\n".join(lines)


def tool_function(
    definition: dict[str, Any], call: Callable[..., Any], *, reserved: frozenset[str] = frozenset()
) -> Callable[..., Any]:
    """A method ``(self, **arguments)`` for the OpenAI tool ``definition`` that runs
    ``call(self, name, arguments)``; arguments left out are not passed on (the callee applies the
    schema's defaults). ``call`` may be a coroutine function: the method is then ``async``.

    Raises :class:`ValueError` for a tool name a Python attribute cannot carry or that is in
    ``reserved``, and for a parameter name that is not a Python identifier."""
    function = definition.get("function", definition)
    name = function["name"]
    if not _IDENTIFIER.match(name) or keyword.iskeyword(name) or name.startswith("_") or name in reserved:
        raise ValueError(f"tool name {name!r} cannot be a method here (reserved: {sorted(reserved)})")
    parameters = function.get("parameters") or {}
    props: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for pname, spec in props.items():
        if not _IDENTIFIER.match(pname) or keyword.iskeyword(pname):
            raise ValueError(f"tool {name!r}: parameter {pname!r} is not a Python identifier")
        hint = python_type(spec)
        default = inspect.Parameter.empty if pname in required else spec.get("default") if isinstance(spec, dict) else None
        if pname not in required and default is None:
            hint = hint | None if hint is not Any else Any
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[pname] = hint
    annotations["return"] = str

    if inspect.iscoroutinefunction(call):

        async def method(self: Any, **arguments: Any) -> Any:
            return await call(self, name, arguments)

    else:

        def method(self: Any, **arguments: Any) -> Any:  # type: ignore[misc]
            return call(self, name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = docstring(str(function.get("description") or ""), parameters)
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method
