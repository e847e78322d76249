"""The SQLite backend's limits, in-process: what the authorizer allows and refuses, the per-session
database size cap, and closing a database while a statement runs. The same attacks go over the
wire through a real worker in ``tests/security/test_db_attacks.py`` (with the worker-wide heap
limit, the per-session threads and the worker's memory)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator

import pytest
from agentrl_env_db.backends.base import TableSpec
from agentrl_env_db.backends.sqlite import SQLiteBackend, SQLiteDatabase
from agentrl_env_db.backends.sqlite_policy import ALLOWED_FUNCTIONS

from agentrl_envs.errors import TaskError

RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"
#: What the DB task's statements need, in order, each answered without an error.
ALLOWED = [
    "CREATE TABLE t (a TEXT, b INTEGER)",
    "INSERT INTO t VALUES ('x', 1), ('y', 2), ('z', 3)",
    "UPDATE t SET b = b + 1 WHERE a = 'x'",
    "CREATE INDEX i ON t (b)",
    "CREATE VIEW v AS SELECT a FROM t WHERE b > 1",
    "CREATE TRIGGER tr AFTER DELETE ON t BEGIN INSERT INTO t VALUES ('gone', 0); END",
    "DELETE FROM t WHERE a = 'z'",
    "ALTER TABLE t ADD COLUMN c TEXT",
    "ALTER TABLE t RENAME COLUMN c TO d",
    "ALTER TABLE t DROP COLUMN d",
    "BEGIN",
    "SAVEPOINT s",
    "INSERT INTO t VALUES ('w', 9)",
    "ROLLBACK TO s",
    "RELEASE s",
    "COMMIT",
    "CREATE TEMP TABLE tt AS SELECT * FROM t",
    "SELECT a, ROW_NUMBER() OVER (ORDER BY b), LAG(b) OVER (ORDER BY b), SUM(b) OVER () FROM t",
    "SELECT a, COUNT(*), AVG(b), GROUP_CONCAT(a, '|'), MAX(b) FROM t GROUP BY a HAVING COUNT(*) > 0",
    "SELECT UPPER(a), LENGTH(a), SUBSTR(a, 1, 1), REPLACE(a, 'x', 'y'), PRINTF('%05d', b), IIF(b > 1, 'big', 'small') FROM t",
    "SELECT CAST(b AS REAL), ROUND(1.5), ABS(-2), COALESCE(NULL, 1), NULLIF(1, 1), TYPEOF(b), INSTR(a, 'x') FROM t",
    "SELECT DATE('2020-01-31', '+1 month'), STRFTIME('%Y', 'now'), JULIANDAY('2020-01-01'), CURRENT_TIMESTAMP",
    "SELECT SQRT(16), POWER(2, 10), LN(1), FLOOR(1.5), CEIL(1.5), PI()",
    "SELECT JSON_EXTRACT('{\"a\": [1, 2]}', '$.a[1]'), '{\"a\": 1}' ->> 'a', JSON_ARRAY(1, 2), JSON_GROUP_ARRAY(a) FROM t",
    "SELECT key, value FROM JSON_EACH('[1, 2]')",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT SUM(n) FROM r",
    "SELECT * FROM v",
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    "PRAGMA table_info(t)",
    "SELECT name FROM pragma_table_info('t')",
    "PRAGMA index_list(t)",
    "ANALYZE",
    "REINDEX",
    "ALTER TABLE t RENAME TO t2",
    "DROP TRIGGER tr",
    "DROP VIEW v",
    "DROP INDEX i",
    "DROP TABLE tt",
    "DROP TABLE t2",
]
REFUSED = [
    "SELECT fts3_tokenizer('porter')",
    "CREATE VIRTUAL TABLE v USING fts3(a, tokenize=porter)",
    "SELECT load_extension('libsqlite3.so.0')",
    "ATTACH DATABASE ':memory:' AS x",
    "VACUUM",
    "SELECT * FROM dbstat",
    "PRAGMA max_page_count = 1000000",
    "PRAGMA temp_store = FILE",
    "PRAGMA hard_heap_limit = 1",
    "SELECT * FROM pragma_compile_options",
]


def refused(answer: str) -> bool:
    reasons = ("not authorized", "authorization denied", "is prohibited")
    return answer.startswith("SQLite execution error: ") and any(r in answer for r in reasons)


@pytest.fixture
async def db() -> AsyncIterator[SQLiteDatabase]:
    backend = SQLiteBackend(statement_timeout_s=30, max_output_chars=800, max_db_bytes=1 << 20)
    database = await backend.open_database()
    yield database
    await database.close()


async def test_what_the_task_needs_is_allowed(db: SQLiteDatabase) -> None:
    for query in ALLOWED:
        answer = await db.execute(query)
        assert not answer.startswith("SQLite execution error"), (query, answer)
    assert await db.execute("SELECT name FROM sqlite_master WHERE type = 'table'") == "[('sqlite_stat1',)]"  # ANALYZE's


async def test_what_reaches_into_sqlite_is_refused(db: SQLiteDatabase) -> None:
    for query in REFUSED:
        assert refused(await db.execute(query)), query
    assert await db.execute("SELECT 1") == "[(1,)]"


async def test_every_function_of_the_build_outside_the_list_is_refused(db: SQLiteDatabase) -> None:
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        functions = {(name, narg) for name, narg in conn.execute("SELECT name, narg FROM pragma_function_list")}
    outside = sorted((n, a) for n, a in functions if n not in ALLOWED_FUNCTIONS and n.isidentifier())
    assert {"fts3_tokenizer", "load_extension"} <= {n for n, _ in outside}  # this build has both
    for name, narg in outside:
        args = ", ".join(["NULL"] * (1 if narg < 0 else narg))
        assert f"not authorized to use function: {name}" in await db.execute(f"SELECT {name}({args})"), name
    # SQLite's ALTER TABLE helpers are on the list for SQLite's own statements; a client's gets none.
    assert "no such function" in await db.execute("SELECT sqlite_rename_test(1, 2, 3, 4, 5, 6, 7)")


async def test_a_sessions_database_and_temp_database_are_capped(db: SQLiteDatabase) -> None:
    blobs = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 4) SELECT zeroblob(400000) AS b FROM r"
    assert await db.execute(f"CREATE TABLE big AS {blobs}") == "SQLite execution error: database or disk is full"
    assert await db.execute(f"CREATE TEMP TABLE big AS {blobs}") == "SQLite execution error: database or disk is full"
    assert await db.execute(f"CREATE TABLE fits AS {blobs} LIMIT 2") == "[]"  # 800 kB of the 1 MiB
    assert await db.execute("SELECT COUNT(*) FROM fits") == "[(2,)]"


async def test_tables_over_the_cap_are_a_task_error() -> None:
    backend = SQLiteBackend(statement_timeout_s=30, max_output_chars=800, max_db_bytes=64 << 10)
    database = await backend.open_database()
    rows = tuple(("x" * 1000,) for _ in range(200))
    with pytest.raises(TaskError, match="max_db_mb"):
        await database.create_tables([TableSpec("t", ("a",), rows)])
    await database.close()


async def test_closing_stops_a_statement_in_flight(db: SQLiteDatabase) -> None:
    running = asyncio.ensure_future(db.execute(RUNAWAY))  # would run for the 30 s timeout
    while db._deadline == float("inf"):  # noqa: SLF001 - set on the database's thread when the statement starts
        await asyncio.sleep(0.01)
    await db.close()
    assert await running == "SQLite execution error: interrupted"


async def test_each_database_runs_on_a_thread_of_its_own() -> None:
    backend = SQLiteBackend(statement_timeout_s=30, max_output_chars=800)
    databases = [await backend.open_database() for _ in range(3)]
    idents = {await d._call(threading.get_ident) for d in databases}  # noqa: SLF001
    assert len(idents) == 3
    for d in databases:
        await d.close()
