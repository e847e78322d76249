"""MySQL 8's table hash, computed in Python (for backends that cannot run the real query).

AgentBench scores a mutation by running, per table::

    SELECT md5(group_concat(rowhash ORDER BY rowhash)) FROM (
        SELECT substring(md5(concat_ws(',', `c1`, `c2`, ...)), 1, 5) AS rowhash FROM `t`) AS sub;

:func:`mysql_table_hash` reproduces it value for value: ``concat_ws`` skips NULLs (a row of only
NULLs hashes the empty string), strings are hashed as UTF-8 bytes (utf8mb4), ``group_concat``
joins with ``,`` and truncates its result to ``group_concat_max_len`` bytes (1024 by default on
MySQL 8), and a table without rows gives NULL (``None``). Row hashes are lowercase hex, so every
collation orders them as plain byte strings do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

#: MySQL 8's default ``group_concat_max_len`` (MariaDB's is 1 MiB; AgentBench ran MySQL 8).
GROUP_CONCAT_MAX_LEN = 1024


def _md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _as_text(value: Any) -> str:
    """A column value as MySQL would render it in a string context."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def concat_ws(separator: str, values: Sequence[Any]) -> str:
    """MySQL ``CONCAT_WS``: join the non-NULL values (``None`` is NULL)."""
    return separator.join(_as_text(v) for v in values if v is not None)


def row_hash(row: Sequence[Any]) -> str:
    """``substring(md5(concat_ws(',', cols...)), 1, 5)`` of one row."""
    return _md5_hex(concat_ws(",", row).encode("utf-8"))[:5]


def group_concat(values: Iterable[str], max_len: int = GROUP_CONCAT_MAX_LEN) -> str | None:
    """MySQL ``GROUP_CONCAT(v ORDER BY v)`` with separator ``,``; ``None`` for no rows."""
    ordered = sorted(values)
    if not ordered:
        return None
    joined = ",".join(ordered).encode("utf-8")
    # MySQL cuts the result at max_len bytes (never inside a character; row hashes are ASCII).
    return joined[:max_len].decode("utf-8", errors="ignore")


def mysql_table_hash(rows: Iterable[Sequence[Any]], max_len: int = GROUP_CONCAT_MAX_LEN) -> str | None:
    """The hash AgentBench's query returns for a table with these rows; ``None`` when empty."""
    concatenated = group_concat((row_hash(row) for row in rows), max_len)
    return None if concatenated is None else _md5_hex(concatenated.encode("utf-8"))


def hash_query(table_name: str, column_names: Sequence[str], *, schema: str | None = None) -> str:
    """AgentBench's hash query for one table (identifiers quoted with backticks)."""
    columns = ",".join(quote_identifier(c) for c in column_names)
    table = quote_identifier(table_name) if schema is None else f"{quote_identifier(schema)}.{quote_identifier(table_name)}"
    return (
        "select md5(group_concat(rowhash order by rowhash)) as hash "
        f"from( SELECT substring(MD5(CONCAT_WS(',', {columns})), 1, 5) AS rowhash "
        f"FROM {table}) as sub;"
    )


def quote_identifier(name: str) -> str:
    """Backtick-quote an identifier (MySQL and SQLite both accept backticks)."""
    return "`" + name.replace("`", "``") + "`"
