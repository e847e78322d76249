"""AgentBench's DB prompts (the text is AgentBench's, reproduced as data)."""

from __future__ import annotations

from typing import Any

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


def user_prompt(sample: dict[str, Any]) -> str:
    """Evidence (if any), the table description (if any), then the question; one per line."""
    parts = []
    if sample.get("evidence"):
        parts.append(f"Evidence about the question: {sample['evidence']}\n")
    if sample.get("add_description"):
        parts.append(f"Additional table information about the question: {sample['add_description']}\n")
    parts.append(f"Question: {sample['description']}\n")
    return "".join(parts)
