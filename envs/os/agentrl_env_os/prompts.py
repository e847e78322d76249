"""AgentBench's OS-interaction prompts (function-calling version), verbatim, and the short
prompts of the ``easy`` splits (problems with ``"prompt": "easy"``)."""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = """You are an assistant that will act like a person. I will play the role of a Linux (Ubuntu) operating system.
Your goal is to implement the operations required by me or answer the questions proposed by me.
For each of your turns, you should first think about what you should do, and then call exactly one of the provided tools according to the situation.
If you think the output is too long, I will truncate it. The truncated output is not complete. You have to deal with the truncating problem by yourself.
Attention, your bash code should not contain any input operation. Once again, you should use one tool in each turn, and should not respond without function calling.
Note that if you think the task has been finished, or there is some message missing to completely complete the task, you should respond with calling the function "finish_action", as no additional information will be provided.
Also, note that if you have gotten the answer to the question, you should call the "answer_action" tool instead of simply writing your answer in your response.
Your answers should be exact and precise (for example, a single number), do not answer with full sentences or phrases.
Always use a tool provided instead of simply responding with content."""  # noqa: E501

NO_TOOL_CALL = "No executable tool calls found. Please call a tool instead"
TRUNCATED = "\n[truncated because the output is too long]"


def user_prompt(description: str) -> str:
    return f"Now, I will start a new problem in a new OS. My problem is:\n\n{description}"


#: System prompt of problems with ``"prompt": "easy"`` (the easy splits): short, with two worked
#: examples, so that a small model's prompt stays small; same tools, same judging. The examples
#: are written into the system prompt: ``benchmarks/base_rate.py --tasks os --n 24``
#: (SmolLM2-135M, T=0.7, tool-call grammar) solved 5/24 so, 1/24 with the same examples as chat
#: turns (the model then copied the examples' last call, ``finish_action``, as its first).
EASY_SYSTEM_PROMPT = """You act in a Linux shell as root. To run bash, call bash_action like this:
<tool_call>
{"name": "bash_action", "arguments": {"script": "ls /root"}}
</tool_call>
When the task is done, call finish_action; to answer a question, call answer_action.

Example 1. Task: Write the word lemon into the file /root/fruit.txt. To do it, call bash_action with the script "echo lemon > /root/fruit.txt", then call finish_action.
First turn:
<tool_call>
{"name": "bash_action", "arguments": {"script": "echo lemon > /root/fruit.txt"}}
</tool_call>
Second turn:
<tool_call>
{"name": "finish_action", "arguments": {"thought": "done"}}
</tool_call>

Example 2. Task: What word is stored in the file /root/color.txt? Call bash_action with the script "cat /root/color.txt", then call answer_action with the word.
First turn:
<tool_call>
{"name": "bash_action", "arguments": {"script": "cat /root/color.txt"}}
</tool_call>
The output is "blue". Second turn:
<tool_call>
{"name": "answer_action", "arguments": {"answer": "blue"}}
</tool_call>"""


def opening_prompts(sample: dict[str, Any]) -> tuple[str, str]:
    """(system, user) of a sample: AgentBench's, or for ``"prompt": "easy"`` the short system
    prompt and the bare problem."""
    if sample.get("prompt") == "easy":
        return EASY_SYSTEM_PROMPT, sample["description"]
    return SYSTEM_PROMPT, user_prompt(sample["description"])


def os_output(text: str, limit: int = 800) -> str:
    """AgentBench's tool message: cut past ``limit`` chars to ``limit - 20`` plus a note."""
    if len(text) > limit:
        text = text[: limit - 20] + TRUNCATED
    return f"The output of the OS:\n\n{text}" if text else "The output of the OS is empty."
