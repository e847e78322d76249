"""AgentBench's WebShop prompt (its text reproduced as data) and its message formats."""

from __future__ import annotations

import ast
from typing import Any

OPENING_HEAD = "The initial observation:\n"
OBSERVATION_HEAD = "\n\nObservation:\n"
_ACTIONS_HEAD = "\n\nAvailable Actions:\n"

SYSTEM_PROMPT = """
You are web shopping.
I will give you instructions about what to do.
You have to follow the instructions.
Every round I will give you an observation and a list of available actions,
you have to respond with calling a tool provided based on the state and instruction.
You can use search tool if search is available.
You can click one of the buttons in clickables.
If the action is not valid, perform nothing.
Keywords in search are up to you, but the value in click must be a value in the list of available actions.
Remember that your keywords in search should be carefully designed.
Your should first think about what to do, then call a tool correspondingly.
You should always use a tool, even if you have questions to confirm. You can use whatever tool is available and do not need permission from the user.
"""


def opening_messages(observation: str, available_actions: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{OPENING_HEAD}{observation}{_ACTIONS_HEAD}{available_actions}"},
    ]


def tool_output(action: str, observation: str, available_actions: str) -> str:
    """What a tool call returns: AgentBench's ``Action: … Observation: … Available Actions: …``."""
    return f"Action: {action}{OBSERVATION_HEAD}{observation}{_ACTIONS_HEAD}{available_actions}"


def split_available_actions(text: str) -> tuple[str, dict[str, Any]] | None:
    """``(text before, the Available Actions dict)`` of a message in these formats, or ``None``."""
    head, sep, tail = text.rpartition(_ACTIONS_HEAD)
    if not sep:
        return None
    try:
        value = ast.literal_eval(tail.strip())
    except (ValueError, SyntaxError):
        return None
    return (head, value) if isinstance(value, dict) and "clickables" in value else None
