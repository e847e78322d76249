"""AgentBench's WebShop prompt (its text reproduced as data) and its message formats, and the
short system prompt and worked example of the ``easy`` splits (samples with ``"prompt": "easy"``)."""

from __future__ import annotations

import ast
import json
from importlib import resources
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


#: System prompt of samples with ``"prompt": "easy"`` (the easy splits): short, so that a small
#: model's prompt stays small; same tools, pages and reward. Followed by :data:`EASY_EXAMPLES`.
EASY_SYSTEM_PROMPT = """You are web shopping. Do the steps of the instruction in order, one tool call per turn: \
search "x" is search_action with keywords "x", click "y" is click_action with value "y"."""

#: File of the worked example (``python -m agentrl_env_webshop.make_easy --example`` writes it).
EASY_EXAMPLE_FILE = "easy_example.json"


def _load_easy_examples() -> list[dict[str, Any]]:
    return json.loads(resources.files(__package__).joinpath(EASY_EXAMPLE_FILE).read_text(encoding="utf-8"))


#: The worked example that opens every ``easy`` episode as chat turns after the system prompt
#: (AgentBench's one-shot style): a spelled-out purchase of a product no split targets, played
#: through the real task (its opening page, the tool calls and the pages they returned).
EASY_EXAMPLES: list[dict[str, Any]] = _load_easy_examples()


def opening_messages(observation: str, available_actions: str, prompt: str | None = None) -> list[dict[str, Any]]:
    """The messages an episode starts with: the system prompt, then the opening page. For
    ``prompt="easy"``: the short system prompt, the worked example, then the page as
    ``observation`` alone (its compact text, which shows its clickables itself)."""
    if prompt == "easy":
        return [{"role": "system", "content": EASY_SYSTEM_PROMPT}, *EASY_EXAMPLES, {"role": "user", "content": observation}]
    opening = {"role": "user", "content": f"{OPENING_HEAD}{observation}{_ACTIONS_HEAD}{available_actions}"}
    return [{"role": "system", "content": SYSTEM_PROMPT}, opening]


def tool_output(action: str, observation: str, available_actions: str, prompt: str | None = None) -> str:
    """What a tool call returns: AgentBench's ``Action: … Observation: … Available Actions: …``;
    for ``prompt="easy"`` the (compact) observation alone, right after the call that led to it."""
    if prompt == "easy":
        return observation
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
