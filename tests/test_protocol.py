"""``agentrl_envs.schema`` stays importable for code written against it, as a re-export: every
name it offers is the very object of one of the two protocol modules, never a second copy."""

from __future__ import annotations

import agentrl_envs.schema as schema
from agentrl_envs.protocol import agentrl, openai


def test_schema_re_exports_the_protocol_modules_and_defines_nothing() -> None:
    assert schema.__all__
    for name in schema.__all__:
        obj = getattr(schema, name)
        homes = [m for m in (agentrl, openai) if getattr(m, name, None) is obj]
        assert homes, f"schema.{name} is not the object of protocol.agentrl or protocol.openai"
        module = getattr(obj, "__module__", None)
        if module is not None:
            assert module != schema.__name__, f"schema.{name} is defined in schema.py"
