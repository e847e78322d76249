"""SQLite backend: each session gets its own in-memory database (offline, no server needed).

Isolation: a ``:memory:`` database belongs to its one connection; an authorizer
(:mod:`.sqlite_policy`) allows a listed set of statements, functions and PRAGMAs and refuses
everything else (``ATTACH``, ``VACUUM INTO``, ``load_extension``, ``fts3_tokenizer``, virtual
tables…), so a session can neither reach another database, write files, nor touch SQLite's
internals.

Threads: each database has a thread of its own (a one-thread executor, started at open, shut down
at close) that runs all of its blocking sqlite3 calls, so one session's long statement holds no
other session's, and the worker's session limit (``DBTask.concurrency``) bounds the threads.

Limits: a progress handler aborts any statement running past ``statement_timeout_s``. A session's
database and its temporary database may each hold ``max_db_bytes`` (``PRAGMA max_page_count``, set
before the authorizer; temporary storage is kept in memory, never in files). SQLite's hard heap
limit (``PRAGMA hard_heap_limit``) bounds the memory of *all* sessions of the process together: it
is process-wide in SQLite, so the lowest limit any backend of the process asked for holds, and a
statement that would pass it fails with ``out of memory``. After a database is closed, glibc's
``malloc_trim`` hands the freed memory back to the system (:mod:`.process_memory`).

Closer to MySQL than plain SQLite: columns are ``TEXT COLLATE NOCASE`` so ``=``, ``ORDER BY``
and ``GROUP BY`` ignore ASCII case, as MySQL's default collation does. Still SQLite: comparing
a TEXT column with a number compares text, and the SQL dialect is SQLite's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from agentrl_envs.errors import TaskError

from ..hashing import mysql_table_hash, quote_identifier
from .base import TableSpec, format_rows, truncate
from .process_memory import release_freed_memory, return_freed_memory_eagerly, set_sqlite_heap_limit
from .sqlite_policy import authorize

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Cap on any string or blob a statement builds (``randomblob(1e9)`` must not take a GiB).
MAX_VALUE_BYTES = 16 * 1024 * 1024
_FETCH_BATCH = 256
# Progress-handler period in VM instructions: a few microseconds between deadline checks.
_PROGRESS_STEPS = 10_000


class SQLiteBackend:
    """Shared by all sessions of a worker; holds the limits. Creating it sets two things for the
    whole process (see :mod:`.process_memory`): SQLite's hard heap limit (``heap_limit_bytes``;
    0 leaves it as it is) and glibc's trim threshold."""

    def __init__(
        self,
        *,
        statement_timeout_s: float,
        max_output_chars: int,
        max_db_bytes: int = 64 << 20,
        heap_limit_bytes: int = 1 << 30,
    ) -> None:
        self.statement_timeout_s = statement_timeout_s
        self.max_output_chars = max_output_chars
        self.max_db_bytes = max_db_bytes
        self.heap_limit_bytes = set_sqlite_heap_limit(heap_limit_bytes)
        return_freed_memory_eagerly()
        if heap_limit_bytes and self.heap_limit_bytes < heap_limit_bytes:
            log.warning(
                "SQLite's heap limit stays %d bytes, below the %d asked for (it is process-wide)",
                self.heap_limit_bytes,
                heap_limit_bytes,
            )

    async def open_database(self) -> SQLiteDatabase:
        return await SQLiteDatabase.open(self)

    async def close(self) -> None:
        pass


class SQLiteDatabase:
    """One session's in-memory database; every call runs on the database's own thread, one at a time."""

    def __init__(self, backend: SQLiteBackend, executor: ThreadPoolExecutor) -> None:
        self.statement_timeout_s = backend.statement_timeout_s
        self.max_output_chars = backend.max_output_chars
        self.max_db_bytes = backend.max_db_bytes
        self._executor = executor
        self._conn: sqlite3.Connection | None = None
        self._deadline = float("inf")
        self._closed = False

    @classmethod
    async def open(cls, backend: SQLiteBackend) -> SQLiteDatabase:
        db = cls(backend, ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-session"))
        try:
            await db._call(db._connect)
        except BaseException:
            db._executor.shutdown(wait=False)
            raise
        return db

    def _stop_now(self) -> bool:
        """Progress handler: abort the statement once past its deadline or the database is closing."""
        return self._closed or time.monotonic() > self._deadline

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the database is closed")
        return self._conn

    # ------------------------------------------------------------------ async API

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args))

    async def create_tables(self, tables: Sequence[TableSpec]) -> None:
        await self._call(self._create_tables, tables)

    async def execute(self, sql: str) -> str:
        return await self._call(self._execute, sql)

    async def table_hash_result(self, table: TableSpec) -> str:
        return await self._call(self._table_hash_result, table)

    async def close(self) -> None:
        """Stop a statement in flight, close the connection and the thread; idempotent."""
        if self._closed:
            return
        self._closed = True  # the progress handler aborts a statement still running
        try:
            await self._call(self._close)
        finally:
            self._executor.shutdown(wait=False)

    # ------------------------------------------------------------------ blocking work (the database's thread)

    def _connect(self) -> None:
        conn = sqlite3.connect(":memory:", isolation_level=None)  # autocommit, as AgentBench commits each statement
        try:
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_WORKER_THREADS, 0)
            # Set before the authorizer, which refuses every PRAGMA that could change them back.
            pages = max(1, self.max_db_bytes // conn.execute("PRAGMA page_size").fetchone()[0])
            conn.execute("PRAGMA temp_store = MEMORY")  # temporary tables and sorts: no files
            conn.execute(f"PRAGMA main.max_page_count = {pages}")
            conn.execute(f"PRAGMA temp.max_page_count = {pages}")
            conn.set_authorizer(authorize)
            conn.set_progress_handler(self._stop_now, _PROGRESS_STEPS)
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _create_tables(self, tables: Sequence[TableSpec]) -> None:
        try:
            for table in tables:
                name = quote_identifier(table.name)
                columns = ",".join(f"{quote_identifier(c)} TEXT COLLATE NOCASE" for c in table.columns)
                self.conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
                if table.rows:
                    marks = ",".join("?" * len(table.columns))
                    self.conn.executemany(f"INSERT INTO {name} VALUES ({marks})", table.rows)
        except sqlite3.OperationalError as e:
            if e.sqlite_errorname != "SQLITE_FULL":
                raise
            raise TaskError(
                f"the sample's tables do not fit in max_db_mb={self.max_db_bytes / 2**20:g}: raise it (--option max_db_mb=N)"
            ) from e
        except MemoryError as e:
            raise TaskError("SQLite's heap limit is reached: raise heap_limit_mb or run fewer sessions per worker") from e

    def _rows(self, cursor: sqlite3.Cursor) -> Iterator[tuple]:
        while batch := cursor.fetchmany(_FETCH_BATCH):
            yield from batch

    def _execute(self, sql: str) -> str:
        self._deadline = time.monotonic() + self.statement_timeout_s
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql)
            return format_rows(self._rows(cursor), self.max_output_chars)
        except sqlite3.Error as e:
            if isinstance(e, sqlite3.OperationalError) and str(e) == "interrupted" and time.monotonic() > self._deadline:
                return f"Error: SQL execution timed out after {self.statement_timeout_s:g} seconds."
            return truncate(f"SQLite execution error: {e}", self.max_output_chars)
        except MemoryError:  # Python's sqlite3 raises SQLITE_NOMEM as MemoryError: the heap limit
            return "SQLite execution error: out of memory"
        finally:
            cursor.close()
            self._deadline = float("inf")

    def _table_hash_result(self, table: TableSpec) -> str:
        """AgentBench's hash query, computed in Python from the table's current rows."""
        columns = ",".join(quote_identifier(c) for c in table.columns)
        try:
            rows = self.conn.execute(f"SELECT {columns} FROM {quote_identifier(table.name)}").fetchall()
        except sqlite3.Error as e:
            return f"SQLite execution error: {e}"
        except MemoryError:
            return "SQLite execution error: out of memory"
        return str([(mysql_table_hash(rows),)])

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        release_freed_memory()
