"""Measure the embedded model on this machine (not a test): load time, speed, tool-call rate.

    HF_HUB_OFFLINE=1 python tests/models/bench_model.py [--cold]

``--cold`` loads from the GGUF with a fresh, throw-away dequantization cache.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DB_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "execute_sql",
            "description": "Execute one SQL query on the MySQL database and return the rows.",
            "parameters": {
                "type": "object",
                "properties": {"sql": {"type": "string", "description": "the SQL query"}},
                "required": ["sql"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "commit_final_answer",
            "description": "Submit the final answer to the question.",
            "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
        },
    },
]
SYSTEM = "You are an agent that answers questions about a database. Use the execute_sql tool to query it; when you know the answer, call commit_final_answer."
ONE_SHOT = (
    "\n\nExample of a tool call:\n<tool_call>\n"
    '{"name": "execute_sql", "arguments": {"sql": "SELECT COUNT(*) FROM employees"}}\n</tool_call>'
)
QUESTIONS = [
    "Table employees(id, name, salary). How many employees are there?",
    "Table orders(id, customer, total). What is the largest order total?",
    "Table students(name, grade). List the names of students with grade A.",
    "Table products(id, name, price). What is the average price of the products?",
    "Table movies(title, year). How many movies were released in 1999?",
    "Table cities(name, country, population). Which city has the largest population?",
    "Table employees(id, name, department). Insert a new employee named Bob in the Sales department.",
    "Table books(title, author). Who wrote 'Dune'?",
    "Table sales(region, amount). What is the total amount of sales in the North region?",
    "Table users(id, email). Delete the user with id 7.",
    "Table flights(id, origin, destination). How many flights leave from Paris?",
    "Table teams(name, wins). Which team has the most wins?",
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cold", action="store_true")
    p.add_argument("--samples", type=int, default=0, help="sampled completions per question (temperature 0.7) besides greedy")
    p.add_argument("--questions", type=int, default=len(QUESTIONS))
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--no-speed", action="store_true")
    p.add_argument("--tool-choice", default=None, help='e.g. "required" (forces a <tool_call> prefix)')
    p.add_argument("--one-shot", action="store_true", help="put one example tool call into the system prompt")
    a = p.parse_args()
    if a.cold:
        os.environ["AGENTRL_ENVS_MODEL_CACHE"] = tempfile.mkdtemp(prefix="bench-cache-")
    started = time.perf_counter()
    from agentrl_envs.chat.engine import TransformersEngine
    from agentrl_envs.protocol.openai import Message, ToolDefinition

    engine = TransformersEngine()
    print(f"load: {engine.load_seconds:.1f} s in the engine, {time.perf_counter() - started:.1f} s with imports (cold={a.cold})")

    if not a.no_speed:
        _speed(engine)
    system = SYSTEM + (ONE_SHOT if a.one_shot else "")
    tools = [ToolDefinition.model_validate(d) for d in DB_TOOLS]
    names = [t.function.name for t in tools]
    rows = []
    for q in QUESTIONS[: a.questions]:
        messages = [Message(role="system", content=system), Message(role="user", content=q)]
        for temp, seed in [(0.0, None)] + [(0.7, s) for s in range(a.samples)]:
            msg, finish, usage = engine.generate(
                messages, tools, max_tokens=a.max_tokens, temperature=temp, seed=seed, tool_choice=a.tool_choice
            )
            calls = msg.tool_calls or []
            valid = [c for c in calls if c.function.name in names and _is_json(c.function.arguments)]
            rows.append((temp, bool(calls), bool(valid)))
            text = (msg.content or "")[:70].replace("\n", " ")
            call_text = "; ".join(f"{c.function.name}({c.function.arguments[:60]})" for c in calls)
            print(f"T={temp} {finish:10s} calls={len(calls)} valid={len(valid)} | {call_text or text}", flush=True)
    for temp in sorted({r[0] for r in rows}):
        sel = [r for r in rows if r[0] == temp]
        print(
            f"T={temp}: any tool call {sum(r[1] for r in sel)}/{len(sel)}, valid (known tool + JSON args) {sum(r[2] for r in sel)}/{len(sel)}"
        )


def _speed(engine: Any) -> None:
    from agentrl_envs.protocol.openai import Message

    filler = "The quick brown fox jumps over the lazy dog. " * 200
    prompt_ids = engine.encode_prompt([Message(role="user", content=filler)])[:800]
    t = time.perf_counter()
    engine.generate_tokens(prompt_ids, 1, temperature=0)
    prefill = time.perf_counter() - t
    t = time.perf_counter()
    ids, _ = engine.generate_tokens(prompt_ids, 128, temperature=0.7, seed=0, stop_token_ids=[])
    total = time.perf_counter() - t
    print(
        f"prompt 800 + 128 new: prefill {prefill:.2f} s, total {total:.2f} s, {len(ids) / total:.1f} tok/s overall, {(len(ids) - 1) / (total - prefill):.1f} tok/s decode"
    )


def _is_json(text: str) -> bool:
    import json

    try:
        json.loads(text)
        return True
    except ValueError:
        return False


if __name__ == "__main__":
    main()
