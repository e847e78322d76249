"""Samples of the task: BFCL's entries of one category, as BFCL's own loader prepares them.

A sample is ``{"id", "category", "entry", "ground_truth", "max_turns"}``: ``entry`` is what
``bfcl_eval.utils.load_dataset_entry`` returns for it (the question turns, the function docs, for
multi-turn the involved classes, their initial configuration and, for ``miss_func``, the held-back
function docs per turn), ``ground_truth`` the category's possible-answer entry (``None`` for
``irrelevance``, which has none). ``max_turns`` is the most assistant messages BFCL's runner can
ask for: one per single-turn entry, and per user turn of a multi-turn entry the step limit + 1
(BFCL stops an entry whose turn runs past its ``MAXIMUM_STEP_LIMIT`` of 20 steps, and the task
does the same), so the SDK's round limit never ends an episode before BFCL would.
"""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path
from typing import Any

from agentrl_envs.errors import DataError

from .categories import COLLECTIONS, SUPPORTED, UNSUPPORTED, category_of, is_multi_turn
from .upstream import bfcl


@cache
def _load(category: str) -> tuple[dict[str, Any], ...]:
    if category not in SUPPORTED:
        why = UNSUPPORTED.get(category)
        raise DataError(
            f"BFCL category {category!r} is not supported"
            + (f" ({why})" if why else "")
            + f"; the splits are {[*SUPPORTED, *COLLECTIONS]}"
        )
    upstream = bfcl()
    entries = upstream.load_dataset_entry(category, include_prereq=False)
    answers = None if category == "irrelevance" else upstream.load_ground_truth_entry(category)
    if answers is not None and len(answers) != len(entries):
        raise DataError(f"BFCL {category}: {len(entries)} entries but {len(answers)} possible answers")
    return tuple(make_sample(entry, None if answers is None else answers[i]["ground_truth"]) for i, entry in enumerate(entries))


def make_sample(entry: dict[str, Any], ground_truth: Any) -> dict[str, Any]:
    """A sample of a BFCL entry (as ``load_dataset_entry`` gives it) and its ground truth."""
    category = category_of(entry["id"])
    if category not in SUPPORTED:
        raise DataError(f"entry {entry['id']!r}: BFCL category {category!r} is not supported by this task")
    turns = len(entry["question"]) if is_multi_turn(category) else 1
    steps = bfcl().max_steps + 1 if is_multi_turn(category) else 1
    return {"id": entry["id"], "category": category, "entry": entry, "ground_truth": ground_truth, "max_turns": turns * steps}


def load_split(split: str) -> list[dict[str, Any]]:
    """The samples of one category, or of a collection's categories interleaved (see
    :data:`~.categories.COLLECTIONS`). The list is new; the samples are shared: read-only."""
    if split not in COLLECTIONS:
        return list(_load(split))
    columns = [_load(category) for category in COLLECTIONS[split]]
    return [sample for row in itertools.zip_longest(*columns) for sample in row if sample is not None]


def load_file(path: str | Path) -> list[dict[str, Any]]:
    """Samples from a JSON-lines file of ``{"entry": {...}, "ground_truth": ...}`` (entries as
    ``load_dataset_entry`` gives them, e.g. written with ``json.dumps`` from a sample)."""
    samples = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            samples.append(make_sample(record["entry"], record.get("ground_truth")))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise DataError(f"{path}:{number}: expected {{'entry': {{...}}, 'ground_truth': ...}}: {e}") from None
    return samples
