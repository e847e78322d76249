"""AgentBench's ALFWorld text, word for word (``src/server/tasks/alfworld/task.py`` and
``utils.py`` of THUDM/AgentBench, the function-calling version): the system prompt, the opening
user message, the tool's description and how an observation is shown to the model."""

from __future__ import annotations

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


def opening_messages(intro: str, commands: list[str]) -> list[dict[str, Any]]:
    """The system prompt, then ``Here is your task. `` + the intro without its welcome banner
    (its paragraphs joined by single newlines, as AgentBench does) + the available actions."""
    body = "\n".join(intro.split("\n\n")[1:])
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Here is your task. " + body + available_actions(commands)},
    ]


def observation_message(text: str, commands: list[str]) -> str:
    """A step's tool message: the observation, then the actions now available."""
    return process_ob(text) + available_actions(commands)


def parse_available_actions(message: str) -> list[str]:
    """The admissible commands listed at the end of an observation or the opening message."""
    _, sep, tail = message.rpartition(AVAILABLE_ACTIONS)
    return [line for line in tail.split("\n") if line] if sep else []
