"""DB samples: AgentBench's ``dbbench/*.jsonl`` format, validated on load.

One sample (one JSON object; extra keys are kept)::

    {"description": "...", "add_description": "...", "evidence": "...",   # evidence optional
     "type": ["INSERT"],                       # first item decides scoring
     "table": {"table_name": "t", "table_info": {"columns": [{"name": "c", "type": "TEXT"}],
                                                 "rows": [["v"], ...]}},   # or a list of tables
     "label": [...],                           # SELECT-type: the answers; mutations: gold SQL
     "answer_md5": "[('<md5>',)]",             # mutations: the expected table hash
     "sql": {"query": "SELECT ..."},           # SELECT-type: the gold SQL (optional)
     "prompt": "easy", "max_turns": 3}         # optional: short system prompt, fewer rounds

Anything malformed raises :class:`~agentrl_envs.errors.DataError` naming the file, the line or
index, and the field.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentrl_envs.errors import DataError

from .scoring import is_mutation


class Column(BaseModel):
    model_config = ConfigDict(extra="allow")
    # May be empty (dev.jsonl has one); TableSpec names such a column by its position.
    name: str


class TableInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    columns: list[Column] = Field(min_length=1)
    rows: list[list[Any]]

    @model_validator(mode="after")
    def _rows_fit_columns(self) -> TableInfo:
        width = len(self.columns)
        for i, row in enumerate(self.rows):
            if len(row) != width:
                raise ValueError(f"row {i} has {len(row)} values but the table has {width} columns")
        return self


class Table(BaseModel):
    model_config = ConfigDict(extra="allow")
    table_name: str = Field(min_length=1)
    table_info: TableInfo


class SampleModel(BaseModel):
    """The fields the task reads; validation only (samples stay plain dicts)."""

    model_config = ConfigDict(extra="allow")
    description: str
    add_description: str = ""
    evidence: str = ""
    type: list[str] = Field(min_length=1)
    table: Table | list[Table]
    label: list[Any] | None = None
    answer_md5: str | None = None
    prompt: Literal["agentbench", "easy"] | None = None
    max_turns: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _has_expected_answer(self) -> SampleModel:
        if is_mutation(self.type[0]):
            if self.answer_md5 is None and not self.label:
                raise ValueError(f"a {self.type[0]} sample needs `answer_md5` (or the gold SQL in `label`)")
        elif self.label is None:
            raise ValueError(f"a {self.type[0]!r} sample needs `label` (the list of answers)")
        return self


def tables_of(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The sample's tables as a list (AgentBench allows one table or a list)."""
    table = sample["table"]
    return table if isinstance(table, list) else [table]


def query_type(sample: dict[str, Any]) -> str:
    return sample["type"][0]


def gold_sql(sample: dict[str, Any]) -> str | None:
    """The gold SQL: ``sql.query``, else (mutations) the first item of ``label``."""
    sql = sample.get("sql")
    if isinstance(sql, dict) and isinstance(sql.get("query"), str):
        return sql["query"]
    label = sample.get("label")
    if is_mutation(query_type(sample)) and label and isinstance(label[0], str):
        return label[0]
    return None


def validate_sample(sample: Any, where: str) -> dict[str, Any]:
    """Return ``sample`` if it is a valid DB sample, else raise :class:`DataError` about ``where``."""
    if not isinstance(sample, dict):
        raise DataError(f"{where}: a DB sample must be a JSON object, got {type(sample).__name__}")
    try:
        SampleModel.model_validate(sample)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'sample'}: {err['msg']}" for err in e.errors())
        raise DataError(f"{where}: invalid DB sample: {problems}") from None
    return sample


def _parse(text: str, source: str) -> list[Any]:
    if source.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{source}: invalid JSON ({e.msg} at line {e.lineno})") from None
        if not isinstance(data, list):
            raise DataError(f"{source}: a .json data file must hold a list of samples, got {type(data).__name__}")
        return data
    items = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise DataError(f"{source}:{lineno}: invalid JSON ({e.msg})") from None
    return items


def load_file(path: str | Path) -> list[dict[str, Any]]:
    """Samples from a ``.jsonl`` file (one per line) or a ``.json`` file (a list)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"DB data file {str(path)!r} does not exist (give a .jsonl or .json file)")
    return _validate_all(_parse(path.read_text(encoding="utf-8"), str(path)), str(path))


def load_split(split: str) -> list[dict[str, Any]]:
    """A split shipped in the package (``data/<split>.jsonl``)."""
    ref = resources.files(__package__).joinpath("data", f"{split}.jsonl")
    if not ref.is_file():
        raise DataError(f"the DB task ships no split {split!r}")
    return _validate_all(_parse(ref.read_text(encoding="utf-8"), f"{split}.jsonl"), f"{split}.jsonl")


def _validate_all(items: list[Any], source: str) -> list[dict[str, Any]]:
    label = "line" if source.endswith(".jsonl") else "sample"
    samples = [validate_sample(item, f"{source} {label} {i + 1}") for i, item in enumerate(items)]
    if not samples:
        raise DataError(f"{source}: no samples")
    return samples
