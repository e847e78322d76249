"""The backend contract and the pieces every backend shares (output format, statement count).

A :class:`Backend` is opened once per worker (``DBTask.open_resources``); each session asks it
for a :class:`Database` — a fresh database no other session can see — fills it with the sample's
tables, runs the model's statements, hashes tables for scoring and closes it in ``teardown``.

Output contract (AgentBench's): a statement's result is ``str()`` of the list of row tuples
(``"[]"`` for statements without rows); an error is its message as text, never an exception;
the text is cut at ``max_output_chars`` and ``[TRUNCATED]`` appended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

TRUNCATION_NOTE = "[TRUNCATED]"


@dataclass(frozen=True)
class TableSpec:
    """One table of a sample: every column is created as TEXT, every value inserted as ``str(v)``."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    @classmethod
    def from_sample_table(cls, table: dict[str, Any]) -> TableSpec:
        info = table["table_info"]
        # str(value), as AgentBench does: None becomes 'None', 3 becomes '3'.
        rows = tuple(tuple(str(v) for v in row) for row in info["rows"])
        # MySQL refuses an empty column name (AgentBench's setup fails there): name it by position.
        columns = tuple(c["name"] or f"column_{i + 1}" for i, c in enumerate(info["columns"]))
        return cls(table["table_name"], columns, rows)


class Database(Protocol):
    """One session's private database."""

    async def create_tables(self, tables: Sequence[TableSpec]) -> None:
        """Create and fill the tables; raises on failure (a task error, not the model's)."""

    async def execute(self, sql: str) -> str:
        """Run one statement; return its result or error as text (see the output contract)."""

    async def table_hash_result(self, table: TableSpec) -> str:
        """The raw text result of AgentBench's hash query on ``table`` (e.g. ``"[('ab12…',)]"``)."""

    async def close(self) -> None:
        """Drop the database and release its connection; idempotent."""


class Backend(Protocol):
    async def open_database(self) -> Database: ...

    async def close(self) -> None: ...


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + TRUNCATION_NOTE


def format_rows(rows: Iterable[Sequence[Any]], limit: int) -> str:
    """``str(list_of_row_tuples)`` cut at ``limit`` characters, reading only as many rows as needed.

    ``str([r1, r2])`` is ``"[" + repr(r1) + ", " + repr(r2) + "]"``, so the text can be built row
    by row and reading can stop once it is longer than ``limit`` (a huge result costs no memory)."""
    parts = ["["]
    length = 1
    for i, row in enumerate(rows):
        piece = (", " if i else "") + repr(tuple(row))
        parts.append(piece)
        length += len(piece)
        if length > limit:
            return truncate("".join(parts), limit)
    parts.append("]")
    return truncate("".join(parts), limit)


def count_statements(sql: str) -> int:
    """How many non-empty statements ``sql`` holds, splitting on ``;`` outside quotes and comments.

    Understands '…', "…", `…` (with doubled-quote and backslash escapes), ``-- ``, ``#`` and
    ``/* */`` comments. Used only to refuse several statements in one call; the database parses
    the statement itself."""
    count = 0
    has_content = False
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            has_content = True
            i += 1
            while i < n:
                if sql[i] == "\\" and ch != "`":
                    i += 2
                    continue
                if sql[i] == ch:
                    if i + 1 < n and sql[i + 1] == ch:  # doubled quote: an escaped quote
                        i += 2
                        continue
                    break
                i += 1
        elif ch == "#" or (ch == "-" and sql.startswith("--", i)):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch == "/" and sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        elif ch == ";":
            count += has_content
            has_content = False
        elif not ch.isspace():
            has_content = True
        i += 1
    return count + has_content
