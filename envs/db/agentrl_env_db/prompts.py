"""AgentBench's DB prompts (the text is AgentBench's, reproduced as data), and the short
system prompt and worked examples of the ``easy`` splits (samples with ``"prompt": "easy"``)."""

from __future__ import annotations

from typing import Any

from agentrl_envs.protocol.openai import worked_example

SYSTEM_PROMPT = """I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer with the two specific tools provided.
If you should execute a SQL query, use the `execute_sql` function, Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then use the `commit_final_answer` function.
DO NOT use this tool unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
You should always use the tools provided to submit your answer. Be careful not to write it in the content field.
Your input will be raw MySQL response, you have to deal with it by yourself."""


#: System prompt of samples with ``"prompt": "easy"`` (the easy splits): short, so that a small
#: model's prompt stays small; same tools, same rules. Followed by :data:`EASY_EXAMPLES`.
EASY_SYSTEM_PROMPT = """You operate a database with SQL. To run a SQL statement, call execute_sql like this:
<tool_call>
{"name": "execute_sql", "arguments": {"query": "SELECT * FROM t"}}
</tool_call>
When you are done, call commit_final_answer, e.g. {"name": "commit_final_answer", "arguments": {"answers": ["42"]}}."""

SYSTEM_PROMPTS = {"agentbench": SYSTEM_PROMPT, "easy": EASY_SYSTEM_PROMPT}

#: Worked examples that open every ``easy`` episode as chat turns after the system prompt
#: (AgentBench's one-shot style): a change run and committed, then a lookup answered at once.
#: Tables and values are outside the easy splits' pools. Measured with
#: ``benchmarks/base_rate.py --tasks db --n 40`` (SmolLM2-135M, T=0.7, tool-call grammar): 17/40
#: solved with these turns, 1/40 with the same examples written into the system prompt instead.
EASY_EXAMPLES: list[dict[str, Any]] = [
    *worked_example(
        "Question: Delete the row of the fruits table whose name is 'fig'. To do it, call execute_sql with the query "
        "\"DELETE FROM fruits WHERE name = 'fig'\", then call commit_final_answer.\n",
        [
            ("execute_sql", {"query": "DELETE FROM fruits WHERE name = 'fig'"}, "[]"),
            ("commit_final_answer", {"answers": []}, "The answer was committed."),
        ],
        id_prefix="example_change",
    ),
    *worked_example(
        "Question: The fruits table has one row: name = kiwi, color = green, weight = 30. What is the color of kiwi? "
        "Commit the answer with commit_final_answer.\n",
        [("commit_final_answer", {"answers": ["green"]}, "The answer was committed.")],
        id_prefix="example_lookup",
    ),
]


def opening_messages(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages an episode starts with: the system prompt, for ``easy`` samples the worked
    examples, then the user prompt."""
    examples = EASY_EXAMPLES if sample.get("prompt") == "easy" else []
    return [{"role": "system", "content": system_prompt(sample)}, *examples, {"role": "user", "content": user_prompt(sample)}]


def system_prompt(sample: dict[str, Any]) -> str:
    """The sample's system prompt: ``SYSTEM_PROMPTS[sample["prompt"]]``, AgentBench's by default."""
    return SYSTEM_PROMPTS[sample.get("prompt") or "agentbench"]


def user_prompt(sample: dict[str, Any]) -> str:
    """Evidence (if any), the table description (if any), then the question; one per line."""
    parts = []
    if sample.get("evidence"):
        parts.append(f"Evidence about the question: {sample['evidence']}\n")
    if sample.get("add_description"):
        parts.append(f"Additional table information about the question: {sample['add_description']}\n")
    parts.append(f"Question: {sample['description']}\n")
    return "".join(parts)
