"""The ``reference_replay`` check: known solutions replayed through the controller.

References come from one of two places, and are replayed only when they are for *this* worker's
samples:

* a task installed here under the task's name: its ``reference_policy``, when the worker serves
  the same samples (:func:`installed_mismatch`: the same number and indices, the same tools, the
  same opening messages of the first and last sample, computed here by starting them in-process);
  a worker that merely shares the name (AgentRL's own ``echo``, say) is not replayed against;
* else the worker's own: ``GET {worker}/reference?index=I`` (``{index, messages}``, 404 where none).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ...protocol.agentrl import SampleStatus
from .. import replay as in_process
from ..common import ConformanceSkip, shorten
from .moves import ended
from .options import WireOptions
from .target import WireTarget


def _installed_task(name: str) -> Any:
    from ...registry import get_task, task_names

    return get_task(name) if name in task_names() else None


def _split(cls: Any, o: WireOptions) -> str | None:
    # The split `agentrl-envs worker` serves by default, as `agentrl-envs check` assumes.
    return o.split or (cls.splits[0] if cls.splits else None)


async def _start_here(cls: Any, split: str | None, index: int) -> tuple[list[dict[str, Any]], Any]:
    """Sample ``index``'s opening messages and tools from the installed task, started (and torn down) here."""
    from ...episode import TaskRuntime

    runtime = TaskRuntime(cls, split=split)
    await runtime.open()
    try:
        episode = runtime.episode(index)
        try:
            out = await episode.start()
        finally:
            await episode.close()
    finally:
        await runtime.close()
    if out.finish:
        raise RuntimeError(f"it ended at its start ({out.status.value}: {shorten(out.metric.get('error'), 200)})")
    return [m if isinstance(m, dict) else m.model_dump(exclude_none=True) for m in out.messages], out.tools


def _said(messages: Any) -> list[tuple[Any, Any]]:
    return [(m.get("role"), m.get("content")) for m in messages or [] if isinstance(m, dict)]


def _names(tools: Any) -> list[Any]:
    return [t.get("function", {}).get("name") for t in tools or [] if isinstance(t, dict)]


def installed_mismatch(cls: Any, t: WireTarget, o: WireOptions) -> tuple[str | None, list[str]]:
    """Why the installed task's references are not for the worker's samples (None when they are),
    and notes on what was compared. The first and last samples are started on the worker and,
    in-process, from the installed task; where that fails here (it may need what this machine
    lacks: a sandbox, a database), only the number of samples and the class's tools are compared."""
    split = _split(cls, o)
    here = f"the task {cls.name!r} installed here (split {split!r})"
    not_for = "its references are not for this worker's samples"
    try:
        samples = cls.load_samples(split=split)
    except Exception as e:  # its data may not be on this machine
        return f"{t.who}: the samples of {here} do not load here ({shorten(e, 200)}): its references cannot be checked", []
    indices = t.indices()
    if len(indices) != len(samples):
        return (
            f"{t.who}: the worker serves {len(indices)} samples, {here} has {len(samples)}: {not_for}"
            " (--split S names the split the worker serves)",
            [],
        )
    if [str(i) for i in indices] != [str(i) for i in range(len(samples))]:
        return f"{t.who}: the worker's sample indices {shorten(indices, 120)} are not those of {here}: {not_for}", []
    compared = sorted({0, len(samples) - 1})
    notes: list[str] = []
    for i in compared:
        with t.session(indices[i]) as (_, theirs):
            pass
        try:
            opening, tools = asyncio.run(_start_here(cls, split, i))
        except Exception as e:
            opening, tools = None, cls.tool_definitions() or None
            notes.append(f"sample {i}'s content not compared: it did not start here ({shorten(e, 200)})")
        if tools is not None and json.dumps(theirs.get("tools"), sort_keys=True) != json.dumps(tools, sort_keys=True):
            return (
                f"{t.who}: sample {i}'s tools {_names(theirs.get('tools'))} are not those of {here}"
                f" ({_names(tools)}, or their schemas differ): {not_for}",
                [],
            )
        if opening is not None and _said(theirs.get("messages")) != _said(opening):
            return (
                f"{t.who}: sample {i}'s opening messages are not those of {here}: {not_for};"
                f" the worker's: {shorten(theirs.get('messages'), 160)}; here: {shorten(opening, 160)}",
                [],
            )
    same = "the same tools" + ("" if notes else f" and opening messages of samples {compared}")
    return None, [f"for this worker's samples: {len(samples)} of split {split!r}, {same}", *notes]


def check_reference_replay(t: WireTarget, o: WireOptions) -> list[str]:
    """Every reference for the worker's samples (see the module docstring) is replayed through
    the controller and must end ``completed`` with reward 1; with the installed task's, nothing is
    left open afterwards (the in-process check). No references for these samples: skipped, saying why."""
    cls = _installed_task(t.task)
    mismatch = None
    if cls is not None:
        mismatch, notes = installed_mismatch(cls, t, o)
        if mismatch is None:
            replayed = in_process.check_reference_replay(cls, _split(cls, o), controller_url=t.controller)
            return ["reference_policy of the task installed here", *notes, *replayed]
    w = t.live_workers()[0]
    indices = t.indices()[: o.limit] if o.limit else t.indices()
    references: dict[Any, list[dict[str, Any]]] = {}
    for index in indices:
        a = t.on_worker(w, "GET", "reference", params={"index": index})
        if a.status == 404:
            continue
        body = a.body if isinstance(a.body, dict) else {}
        assert a.ok and isinstance(body.get("messages"), list) and body["messages"], (
            f"{t.who}, worker {w.address}: expected GET reference?index={index} to answer {{index, messages: [assistant"
            f" message, ...]}} or 404, got {a.what()}"
        )
        references[index] = body["messages"]
    if not references:
        offers = f"the worker offers no reference (GET {w.address}/reference?index=I answers 404)"
        raise ConformanceSkip(f"{mismatch}; and {offers}" if mismatch else f"{t.who}: {offers}")
    failed = [line for index, messages in references.items() if (line := _replay(t, index, messages))]
    if failed:
        raise AssertionError(
            f"{t.who}: expected every reference replay to end 'completed' with reward 1, got {len(failed)} of {len(references)}"
            " not solved:\n  " + "\n  ".join(failed[:10]) + (f"; and {len(failed) - 10} more" if len(failed) > 10 else "")
        )
    missing = len(indices) - len(references)
    notes = [f"the installed task's are not: {mismatch}"] if mismatch else []
    return notes + ([f"{missing} of {len(indices)} samples have no reference (404)"] if missing else [])


def _replay(t: WireTarget, index: Any, messages: list[dict[str, Any]]) -> str | None:
    """Play one reference; None if it solved the sample, else what happened (the check's line)."""
    with t.session(index) as (sid, _):
        body: dict[str, Any] = {}
        for turn, message in enumerate(messages, start=1):
            a = t.interact(sid, message)
            if not a.ok or not isinstance(a.body, dict):
                return f"sample {index}: turn {turn}: {a.what()}"
            body = a.body
            if body.get("finish"):
                break
        if body.get("finish") and body.get("status") == SampleStatus.COMPLETED.value and body.get("reward") == 1:
            return None
        state = ended(body) if body.get("finish") else "still running"
        return f"sample {index}: {state} after {turn} of {len(messages)} reference turns"
