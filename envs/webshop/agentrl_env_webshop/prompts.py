"""AgentBench's WebShop prompt (its text reproduced as data) and its message formats."""

from __future__ import annotations

from typing import Any

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
        {"role": "user", "content": f"The initial observation:\n{observation}\n\nAvailable Actions:\n{available_actions}"},
    ]


def tool_output(action: str, observation: str, available_actions: str) -> str:
    """What a tool call returns: AgentBench's ``Action: … Observation: … Available Actions: …``."""
    return f"Action: {action}\n\nObservation:\n{observation}\n\nAvailable Actions:\n{available_actions}"
