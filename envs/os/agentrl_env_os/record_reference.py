"""Record reference solutions for samples whose expected answer is only known at run time.

A check chain starting with ``null`` compares the answer with what ``example`` prints in the
session's sandbox, so no static answer exists. This runs each such sample once in a fresh sandbox
(init, start, then ``example`` in the persistent shell), takes the stripped output as the answer,
replays ``[bash_action(example), answer_action(output)]`` through a real episode, and keeps the
calls only if that episode scores 1. Writes ``data/reference.json`` (``{split: {index: calls}}``).

Usage: ``python -m agentrl_env_os.record_reference [SPLIT...]`` (needs a working bwrap sandbox).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agentrl_envs import TaskRuntime
from agentrl_envs.episode import Episode
from agentrl_envs.schema import function_call

from .samples import data_dir
from .task import OSTask


def _turn(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [function_call("call_0", name, arguments)]}


async def _try(runtime: TaskRuntime, index: int) -> list[dict[str, Any]] | None:
    sample = runtime.samples[index]
    ex = sample.get("example")
    if not sample.get("check") or None not in sample["check"] or not ex or ex["language"] != "bash":
        return None
    ep: Episode = runtime.episode(index)
    await ep.start()
    try:
        assert ep.task.box is not None
        out = (await ep.task.box.shell(ex["code"])).output.strip()
    finally:
        await ep.close()
    calls = [
        {"name": "bash_action", "arguments": {"script": ex["code"]}},
        {"name": "answer_action", "arguments": {"answer": out}},
    ]
    ep = runtime.episode(index)
    await ep.start()
    try:
        for c in calls:
            result = await ep.step([_turn(c["name"], c["arguments"])])
            if result.finish:
                break
    finally:
        await ep.close()
    return calls if ep.task.reward == 1.0 else None


async def record(splits: list[str]) -> dict[str, dict[str, Any]]:
    path = data_dir() / "reference.json"
    refs: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.is_file() else {}
    for split in splits:
        runtime = TaskRuntime(OSTask, split=split)
        await runtime.open()
        try:
            found = await asyncio.gather(*(_try(runtime, i) for i in runtime.indices))
        finally:
            await runtime.close()
        refs[split] = {str(i): calls for i, calls in enumerate(found) if calls is not None}
        print(f"{split}: recorded {len(refs[split])} of {len(found)}", file=sys.stderr)
    path.write_text(json.dumps(refs, indent=1, sort_keys=True) + "\n")
    return refs


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1:] or ["dev"]))
