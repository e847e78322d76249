"""SQLite backend: each session gets its own in-memory database (offline, no server needed).

Isolation: a ``:memory:`` database belongs to its one connection; ``ATTACH`` and ``VACUUM INTO``
are refused by an authorizer, so a session can neither reach another database nor write files.
Timeouts: a progress handler aborts any statement running past ``statement_timeout_s``.
Blocking sqlite3 calls run in a worker thread (``asyncio.to_thread``), never on the event loop.

Closer to MySQL than plain SQLite: columns are ``TEXT COLLATE NOCASE`` so ``=``, ``ORDER BY``
and ``GROUP BY`` ignore ASCII case, as MySQL's default collation does. Still SQLite: comparing
a TEXT column with a number compares text, and the SQL dialect is SQLite's.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence

from ..hashing import mysql_table_hash, quote_identifier
from .base import TableSpec, format_rows, truncate

#: Cap on any string or blob a statement builds (``randomblob(1e9)`` must not take a GiB).
MAX_VALUE_BYTES = 16 * 1024 * 1024
_FETCH_BATCH = 256
# Progress-handler period in VM instructions: a few microseconds between deadline checks.
_PROGRESS_STEPS = 10_000
_DENIED_ACTIONS = {sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH}


def _authorizer(action: int, arg1: str | None, arg2: str | None, db_name: str | None, trigger: str | None) -> int:
    if action in _DENIED_ACTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


class SQLiteBackend:
    """Shared by all sessions of a worker; holds only the limits."""

    def __init__(self, *, statement_timeout_s: float, max_output_chars: int) -> None:
        self.statement_timeout_s = statement_timeout_s
        self.max_output_chars = max_output_chars

    async def open_database(self) -> SQLiteDatabase:
        return await asyncio.to_thread(SQLiteDatabase, self.statement_timeout_s, self.max_output_chars)

    async def close(self) -> None:
        pass


class SQLiteDatabase:
    """One session's in-memory database. Calls are serialized by a lock (one thread at a time)."""

    def __init__(self, statement_timeout_s: float, max_output_chars: int) -> None:
        self.statement_timeout_s = statement_timeout_s
        self.max_output_chars = max_output_chars
        # isolation_level=None: autocommit, like AgentBench's commit after every statement.
        self._conn: sqlite3.Connection | None = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        self._conn.set_authorizer(_authorizer)
        self._lock = threading.Lock()
        self._deadline = float("inf")
        self._conn.set_progress_handler(self._past_deadline, _PROGRESS_STEPS)

    def _past_deadline(self) -> bool:
        return time.monotonic() > self._deadline

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the database is closed")
        return self._conn

    # ------------------------------------------------------------------ async API

    async def create_tables(self, tables: Sequence[TableSpec]) -> None:
        await asyncio.to_thread(self._create_tables, tables)

    async def execute(self, sql: str) -> str:
        return await asyncio.to_thread(self._execute, sql)

    async def table_hash_result(self, table: TableSpec) -> str:
        return await asyncio.to_thread(self._table_hash_result, table)

    async def close(self) -> None:
        await asyncio.to_thread(self._close)

    # ------------------------------------------------------------------ blocking work (threads)

    def _create_tables(self, tables: Sequence[TableSpec]) -> None:
        with self._lock:
            for table in tables:
                name = quote_identifier(table.name)
                columns = ",".join(f"{quote_identifier(c)} TEXT COLLATE NOCASE" for c in table.columns)
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
                if table.rows:
                    marks = ",".join("?" * len(table.columns))
                    self.conn.executemany(f"INSERT INTO {name} VALUES ({marks})", table.rows)

    def _rows(self, cursor: sqlite3.Cursor) -> Iterator[tuple]:
        while batch := cursor.fetchmany(_FETCH_BATCH):
            yield from batch

    def _execute(self, sql: str) -> str:
        with self._lock:
            self._deadline = time.monotonic() + self.statement_timeout_s
            cursor = self.conn.cursor()
            try:
                cursor.execute(sql)
                return format_rows(self._rows(cursor), self.max_output_chars)
            except sqlite3.Error as e:
                if isinstance(e, sqlite3.OperationalError) and str(e) == "interrupted" and self._past_deadline():
                    return f"Error: SQL execution timed out after {self.statement_timeout_s:g} seconds."
                return truncate(f"SQLite execution error: {e}", self.max_output_chars)
            finally:
                cursor.close()
                self._deadline = float("inf")

    def _table_hash_result(self, table: TableSpec) -> str:
        """AgentBench's hash query, computed in Python from the table's current rows."""
        with self._lock:
            columns = ",".join(quote_identifier(c) for c in table.columns)
            try:
                rows = self.conn.execute(f"SELECT {columns} FROM {quote_identifier(table.name)}").fetchall()
            except sqlite3.Error as e:
                return f"SQLite execution error: {e}"
            return str([(mysql_table_hash(rows),)])

    def _close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
