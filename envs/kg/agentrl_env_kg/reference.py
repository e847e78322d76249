"""The reference policy: AgentBench's gold ``actions``, replayed on the episode's own variables.

Gold actions name variables by the order the gold run created them (``#0``, ``#1``…); an episode
numbers its variables by the calls it actually made. The policy reads each observation
(``Observation: variable #3, …``) to map gold numbers to the episode's, calls entities by the name
the question lists (as a model would), and ends with ``Final Answer: #k`` for the gold run's last
variable.
"""

from __future__ import annotations

import re
from typing import Any

from agentrl_envs.policy import call_turn, last_tool_output

#: Argument names of each tool, in AgentBench's order (its TOOLS_PARAM_ORDER).
PARAMS = {
    "get_relations": ("variable",),
    "get_neighbors": ("variable", "relation"),
    "intersection": ("variable1", "variable2"),
    "get_attributes": ("variable",),
    "argmax": ("variable", "attribute"),
    "argmin": ("variable", "attribute"),
    "count": ("variable",),
}
_ACTION = re.compile(r"^\s*(\w+)\((.*)\)\s*$")
_NEW_VARIABLE = re.compile(r"^Observation: variable #(\d+),")


def parse_action(action: str) -> tuple[str, list[str]]:
    """``get_neighbors(#0,film.film.starring)`` → ``("get_neighbors", ["#0", "film.film.starring"])``."""
    m = _ACTION.match(action)
    if not m or m.group(1) not in PARAMS:
        raise ValueError(f"not a KG action: {action!r}")
    name, args = m.group(1), [a.strip() for a in m.group(2).split(",")]
    if len(args) != len(PARAMS[name]):
        raise ValueError(f"{name} takes {len(PARAMS[name])} argument(s): {action!r}")
    return name, args


class GoldActions:
    """A fresh policy per episode (it keeps the gold→episode variable map)."""

    def __init__(self, sample: dict[str, Any]) -> None:
        self.actions = [parse_action(a) for a in sample["actions"]]
        self.name_of = {mid: name for name, mid in sample.get("entities", {}).items()}
        self.step = 0
        self.gold_vars = 0  # variables the gold run had made before the current step
        self.mapping: dict[int, int] = {}
        self.pending = False  # the last call should have made a variable

    def _arg(self, value: str) -> str:
        if value.startswith("#"):
            return f"#{self.mapping[int(value[1:])]}"
        return self.name_of.get(value, value)

    async def act(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any] | None:
        if self.pending:
            m = _NEW_VARIABLE.match(last_tool_output(messages) or "")
            if m is None:
                return None  # the call failed: nothing to map, the reference cannot go on
            self.mapping[self.gold_vars] = int(m.group(1))
            self.gold_vars += 1
            self.pending = False
        if self.step >= len(self.actions):
            if not self.mapping:
                return None
            return {"role": "assistant", "content": f"Final Answer: #{self.mapping[self.gold_vars - 1]}"}
        name, args = self.actions[self.step]
        self.step += 1
        self.pending = name not in ("get_relations", "get_attributes")
        return call_turn(name, {p: self._arg(a) for p, a in zip(PARAMS[name], args, strict=True)})
