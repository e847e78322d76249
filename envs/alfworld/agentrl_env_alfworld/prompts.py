"""AgentBench's ALFWorld text, word for word (``src/server/tasks/alfworld/task.py`` and
``utils.py`` of THUDM/AgentBench, the function-calling version): the system prompt, the opening
user message, the tool's description and how an observation is shown to the model. And the
opening of the ``easy`` splits' games (samples with ``"prompt": "easy"``): a short system prompt,
a worked example as chat turns, and messages without the list of available actions that end
with the next action that wins the game."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

#: ``ALFWorld.get_task_instruction()`` (typos included: the model was evaluated with them).
SYSTEM_PROMPT = """Interact with a household to solve a task. Imagine you are an intelligent agent in a household environment and your target is to perform actions to complete) the task goal. At the beginning of your interactions, you will be given the detailed description of the current environment and your goal to accomplish. A tool will be provided for you to use to submit the action you want to take. This tool is the only tool you should and must take in order to operate any action in the environment. The way you perform action is to place the action chosen by you in the arguments field of your tool call. For each of your turn, you will be given a list of actions which you can choose one to perform in this turn. The action you would like to take should be offered in this format: "the name of your next action", and you should fill it in the argument field of your tool call. Note that you should always call a tool to operate an action from the given choices. After your each turn, the environment will give you immediate feedback based on which you plan your next few steps. if the environment output "Nothing happened", that means the previous action is invalid and you should try more options.
 Reminder:
1. the action must be chosen from the given available actions. Any actions except provided available actions will be regarded as illegal.
2. Always call the tool to hand in your next action and think when necessary."""

#: What AgentBench answers an assistant message without a tool call (a user message).
NO_TOOL_CALL = "No executable tool calls found. Please call a tool instead"

AVAILABLE_ACTIONS = " AVAILABLE ACTIONS: "


def available_actions(commands: list[str]) -> str:
    """``ALFWorld.get_available_actions``: the admissible commands, one per line."""
    return AVAILABLE_ACTIONS + "\n".join(commands) + "\n"


def process_ob(text: str) -> str:
    """``utils.process_ob``: drop the ``You arrive at loc N. `` that ALFWorld 2.1.1 games say."""
    if text.startswith("You arrive at loc "):
        text = text[text.find(". ") + 2 :]
    return text


#: System prompt of games with ``"prompt": "easy"`` (the easy splits): short, so that a small
#: model's prompt stays small; same tool, same game. Followed by :func:`easy_example`.
EASY_SYSTEM_PROMPT = """You act in a household. Every message ends with the next action. Take it by calling take_action like this:
<tool_call>
{"name": "take_action", "arguments": {"action": "go to desk 1"}}
</tool_call>"""

#: The worked example of the easy games, played (``python -m agentrl_env_alfworld.make_easy``).
EASY_EXAMPLE = Path(__file__).parent / "data" / "easy_example.json"
#: What precedes the action spelled out at the end of an easy game's message.
NEXT_ACTION = "Next action: "


@cache
def _easy_example() -> str:
    return EASY_EXAMPLE.read_text(encoding="utf-8")


def easy_example() -> list[dict[str, Any]]:
    """The worked example that opens every easy game (AgentBench's one-shot style): a game outside
    the easy splits, its opening message, then each winning action as an assistant tool call and
    the engine's answer as the tool message."""
    return json.loads(_easy_example())


def next_action(plan: list[str], done: int, commands: list[str]) -> str | None:
    """The action an easy game spells out after ``done`` of its ``plan``'s actions: the next one;
    when the game does not offer it (the agent went elsewhere, so a ``take``/``put`` is not
    possible here), the ``go to`` before it; ``None`` when the plan is done."""
    if done >= len(plan):
        return None
    action = plan[done]
    if action not in commands and done > 0 and plan[done - 1].startswith("go to ") and plan[done - 1] in commands:
        return plan[done - 1]
    return action


def easy_message(text: str, action: str | None) -> str:
    """An easy game's message: the game's text (no list of available actions: a small model
    copies from it instead of the spelled-out action), then ``Next action: ...`` on its own line
    (none once the plan is done)."""
    return text if action is None else text + "\n" + NEXT_ACTION + action


def task_message(intro: str, commands: list[str] | None = None) -> str:
    """The opening user message: ``Here is your task. `` + the intro without its welcome banner
    (its paragraphs joined by single newlines, as AgentBench does) + the available actions
    (``None``: without them, as easy games show it)."""
    body = "\n".join(intro.split("\n\n")[1:])
    return "Here is your task. " + body + (available_actions(commands) if commands is not None else "")


def opening_messages(intro: str, commands: list[str], sample: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """AgentBench's system prompt and :func:`task_message`; for an easy sample, the easy system
    prompt, the worked example, and the task (without the available actions) with the plan's
    first action spelled out."""
    if sample is not None and sample.get("prompt") == "easy":
        return [
            {"role": "system", "content": EASY_SYSTEM_PROMPT},
            *easy_example(),
            {"role": "user", "content": easy_message(task_message(intro), next_action(sample["plan"], 0, commands))},
        ]
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task_message(intro, commands)}]


def observation_message(text: str, commands: list[str]) -> str:
    """A step's tool message: the observation, then the actions now available."""
    return process_ob(text) + available_actions(commands)


def parse_available_actions(message: str) -> list[str]:
    """The admissible commands listed at the end of an observation or the opening message."""
    _, sep, tail = message.rpartition(AVAILABLE_ACTIONS)
    return [line for line in tail.split("\n") if line] if sep else []
