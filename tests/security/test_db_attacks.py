"""The outside probe of issue 38, replayed against the DB worker as an attacker would: a client
with a token, over the wire, through a controller and a real DB worker process (SQLite backend),
every statement sent with ``execute_sql``.

* Finding 2: ``fts3_tokenizer`` (an address out, a pointer in, a segfault through ``CREATE VIRTUAL
  TABLE … tokenize=evil``) and its friends are refused as SQL errors; the worker lives on and its
  other sessions still work.
* Finding 4: sessions' statements do not share a thread pool: while more sessions than Python's
  default pool has threads run long recursive CTEs, another session's ``SELECT 1`` is answered.
* Finding 5: a session's database is capped (``max_db_mb``), the worker's SQLite memory as a whole
  too (``heap_limit_mb``), and the memory of a session's database goes back when it ends.
* Held: ``ATTACH``, ``VACUUM INTO``, ``load_extension`` and several statements in one call
  refused; sessions' databases isolated; a runaway CTE stopped at the statement timeout. The same
  are tested in-process on both backends in ``envs/db/tests/test_db_sessions.py``; here they are
  replayed over the wire.

Loopback only; no wall-clock assertion (finding 4 checks which answer comes first; finding 5
compares the worker's resident memory with its limits).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agentrl_envs.stack import LocalStack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOKEN = "client-" + secrets.token_hex(12)
SECRET = "worker-" + secrets.token_hex(12)
STATEMENT_TIMEOUT_S = 15
MAX_DB_MB = 32
HEAP_LIMIT_MB = 128
MiB = 1 << 20
INSERT_SAMPLE = 20  # an INSERT into `School Location Table`
RUNAWAY = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r"


def _db_stack(tmp_path_factory: pytest.TempPathFactory, options: dict) -> LocalStack:
    return LocalStack(
        ["db"],
        split="dev",
        client_token=TOKEN,
        worker_secret=SECRET,
        task_options={"db": {"statement_timeout_s": STATEMENT_TIMEOUT_S, **options}},
        log_dir=tmp_path_factory.mktemp("db-attack-logs"),
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with _db_stack(tmp_path_factory, {"max_db_mb": MAX_DB_MB, "heap_limit_mb": HEAP_LIMIT_MB}) as s:
        yield s


@pytest.fixture(scope="module")
def mysql_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    url = os.environ.get("AGENTRL_TEST_MYSQL_URL")
    if not url:  # under CI=true, tests/conftest.py refuses to run without it
        pytest.skip('set AGENTRL_TEST_MYSQL_URL (e.g. eval "$(.ci/mariadb.sh | tail -n1)")')
    with _db_stack(tmp_path_factory, {"backend": "mysql", "mysql_url": url}) as s:
        yield s


def _client(stack: LocalStack) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"{stack.url}/api", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)


def _worker(stack: LocalStack):  # type: ignore[no-untyped-def]
    return next(p for p in stack.processes if p.name == "worker-db")


async def start(http: httpx.AsyncClient, index: int = 0) -> str:
    r = await http.post("/start_sample", json={"name": "db", "index": index})
    assert r.status_code == 200, r.text
    return r.headers["session_id"]


async def sql(http: httpx.AsyncClient, sid: str, query: str) -> str:
    call = {"id": "c1", "type": "function", "function": {"name": "execute_sql", "arguments": json.dumps({"query": query})}}
    r = await http.post(
        "/interact", headers={"session_id": sid}, json={"messages": [{"role": "assistant", "tool_calls": [call]}]}
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert not answer["finish"], answer
    return "\n".join(m.get("content") or "" for m in answer["messages"])


async def cancel(http: httpx.AsyncClient, *sids: str) -> None:
    for sid in sids:
        await http.post("/cancel", headers={"session_id": sid})


def refused(answer: str) -> bool:
    """SQLite's authorizer said no (its words depend on what was refused), as the model reads it."""
    reasons = ("not authorized", "authorization denied", "is prohibited")
    return answer.startswith("SQLite execution error: ") and any(r in answer for r in reasons)


def _status_kib(pid: int, field: str) -> int:
    """A ``/proc/PID/status`` memory field (``VmRSS``, ``VmHWM``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _reset_peak(pid: int) -> None:
    """Start ``VmHWM`` (the peak resident memory) afresh from the current resident memory."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _thread_cpu(pid: int) -> dict[int, int]:
    """CPU clock ticks (user + system) each thread of ``pid`` has used, by thread id."""
    ticks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        ticks[int(task.name)] = int(fields[11]) + int(fields[12])  # utime, stime
    return ticks


# ---------------------------------------------------------------------------- finding 2

FTS3_TOKENIZER = [
    "SELECT fts3_tokenizer('porter')",  # was: the address of porter's module (ASLR defeated)
    "SELECT fts3_tokenizer('evil', x'4141414141414141')",  # was: a client-chosen pointer registered
    "CREATE VIRTUAL TABLE v USING fts3(a, tokenize=evil)",  # was: a general protection fault
]
FRIENDS = [
    "SELECT fts3_tokenizer('simple')",
    "SELECT sqlite_compileoption_get(0)",
    "SELECT rtreenode(2, x'00')",
    "CREATE VIRTUAL TABLE f USING fts5(a)",
    "CREATE VIRTUAL TABLE t USING fts3tokenize(simple)",
    "CREATE VIRTUAL TABLE r USING rtree(id, x0, x1)",
    "SELECT * FROM dbstat",
    "SELECT * FROM sqlite_stmt",
    "SELECT * FROM pragma_compile_options",
    "PRAGMA max_page_count = 1000000000",
    "PRAGMA temp.max_page_count = 1000000000",
    "PRAGMA temp_store = FILE",
    "PRAGMA soft_heap_limit = 0",
    "PRAGMA writable_schema = ON",
    "PRAGMA trusted_schema = ON",
]


async def test_fts3_tokenizer_and_friends_are_refused_and_the_worker_lives(stack):
    async with _client(stack) as http:
        bystander, answers = await start(http), {}
        for i, query in enumerate(FTS3_TOKENIZER + FRIENDS):
            if i % 10 == 0:  # a session has 15 turns
                attacker = await start(http)
            answers[query] = await sql(http, attacker, query)
        assert _worker(stack).alive()
        after = await sql(http, bystander, "SELECT 1")
        own = await sql(http, attacker, "SELECT 1")
        await cancel(http, attacker, bystander)
    for query, answer in answers.items():
        assert refused(answer), (query, answer)
    assert after == own == "[(1,)]"


# ---------------------------------------------------------------------------- finding 4


async def test_long_statements_of_many_sessions_hold_no_other_session(stack):
    pid = _worker(stack).proc.pid
    # More long statements than Python's default pool has threads (the old code ran SQL there).
    pool = min(32, (os.cpu_count() or 1) + 4)
    n = min(31, pool + 1)
    async with _client(stack) as http:
        runners = [await start(http) for _ in range(n)]
        probe = await start(http)
        before = _thread_cpu(pid)
        running = [asyncio.create_task(sql(http, sid, RUNAWAY)) for sid in runners]
        # Event, not time: wait until as many threads of the worker (not its event loop) run SQL
        # as the old pool had, so every thread the old code had is taken when the probe comes.
        while sum(t != pid and ticks - before.get(t, 0) >= 3 for t, ticks in _thread_cpu(pid).items()) < min(n, pool):
            assert not any(r.done() for r in running), [r.result() for r in running if r.done()]
            await asyncio.sleep(0.05)
        answered = await sql(http, probe, "SELECT 1")
        still_running = sum(not r.done() for r in running)
        await cancel(http, probe, *runners)
        await asyncio.gather(*running, return_exceptions=True)
    assert answered == "[(1,)]"
    assert still_running == n  # before: the probe waited until a runner timed out


# ---------------------------------------------------------------------------- finding 5


async def test_the_zeroblob_attack_is_capped_and_its_memory_returned(stack):
    pid = _worker(stack).proc.pid
    async with _client(stack) as http:
        warm = await start(http)
        await sql(http, warm, "SELECT 1")
        await cancel(http, warm)
        _reset_peak(pid)
        rss_before = _status_kib(pid, "VmRSS")
        attacker = await start(http)
        create = await sql(
            http,
            attacker,
            "CREATE TABLE big AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 50) "
            "SELECT zeroblob(16000000) AS b FROM r",
        )
        double = await sql(http, attacker, "INSERT INTO big SELECT b FROM big")
        peak = _status_kib(pid, "VmHWM")
        await cancel(http, attacker)
        rss_after = _status_kib(pid, "VmRSS")
    print(f"worker RSS {rss_before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB, {rss_after / 1024:.0f} MiB after")
    assert create == "SQLite execution error: database or disk is full", create
    assert "no such table: big" in double, double
    # The database may hold MAX_DB_MB; the statement in flight holds a few 16 MB values besides.
    assert (peak - rss_before) * 1024 < (MAX_DB_MB + 4 * 16) * MiB, (rss_before, peak)
    assert (rss_after - rss_before) * 1024 < 16 * MiB, (rss_before, rss_after)  # before: 2.4 GB stayed


@pytest.mark.mariadb
async def test_mysql_a_huge_result_is_not_held_in_the_worker(mysql_stack):
    pid = _worker(mysql_stack).proc.pid
    # 899 rows of 1 MB each; the model sees 800 characters of it.
    huge = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 899) SELECT REPEAT('x', 1000000) FROM r"
    async with _client(mysql_stack) as http:
        sid = await start(http)
        await sql(http, sid, "SELECT 1")
        _reset_peak(pid)
        rss_before = _status_kib(pid, "VmRSS")
        out = await sql(http, sid, huge)
        peak = _status_kib(pid, "VmHWM")
        after = await sql(http, sid, "SELECT 1")
        await cancel(http, sid)
    print(f"worker RSS {rss_before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB")
    assert out.startswith("[('xxxx") and out.endswith("[TRUNCATED]"), out[:100]
    assert after == "[(1,)]"
    assert (peak - rss_before) * 1024 < 64 * MiB, (rss_before, peak)


async def test_sessions_together_are_held_by_the_worker_heap_limit(stack):
    pid = _worker(stack).proc.pid
    # Each session fills 28 of its MAX_DB_MB; HEAP_LIMIT_MB holds about four of them.
    fill = (
        "CREATE TABLE f AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 28) "
        "SELECT zeroblob(1000000) AS b FROM r"
    )
    sessions = HEAP_LIMIT_MB // 28 + 2
    async with _client(stack) as http:
        rss_before = _status_kib(pid, "VmRSS")
        sids = [await start(http) for _ in range(sessions)]
        answers = [await sql(http, sid, fill) for sid in sids]
        rss_full = _status_kib(pid, "VmRSS")
        alive = await sql(http, sids[0], "SELECT COUNT(*) FROM f")
        await cancel(http, *sids)
        rss_after = _status_kib(pid, "VmRSS")
    print(f"worker RSS {rss_before / 1024:.0f} MiB before, {rss_full / 1024:.0f} MiB full, {rss_after / 1024:.0f} MiB after")
    assert answers[0] == "[]" and alive == "[(28,)]"
    assert "SQLite execution error: out of memory" in answers, answers
    assert (rss_full - rss_before) * 1024 < (HEAP_LIMIT_MB + 64) * MiB, (rss_before, rss_full)
    assert (rss_after - rss_before) * 1024 < 16 * MiB, (rss_before, rss_after)


# ---------------------------------------------------------------------------- held


async def test_attach_vacuum_into_load_extension_and_several_statements_are_refused(stack, tmp_path):
    async with _client(stack) as http:
        sid = await start(http)
        attach = await sql(http, sid, f"ATTACH DATABASE '{tmp_path / 'x.db'}' AS x")
        vacuum = await sql(http, sid, f"VACUUM INTO '{tmp_path / 'y.db'}'")
        extension = await sql(http, sid, "SELECT load_extension('libsqlite3.so.0')")
        several = await sql(http, sid, "SELECT 1; DROP TABLE `US Ambassadors and Envoy Extraordinary to Colombia`")
        count = await sql(http, sid, "SELECT COUNT(*) FROM `US Ambassadors and Envoy Extraordinary to Colombia`")
        await cancel(http, sid)
    for answer in (attach, vacuum, extension):
        assert refused(answer), answer
    assert several.startswith("Error: only one SQL statement") and "Nothing was executed" in several
    assert count != "[(0,)]" and "error" not in count.lower()
    assert list(tmp_path.iterdir()) == []


async def test_sessions_databases_are_isolated(stack):
    table = "`School Location Table`"
    async with _client(stack) as http:
        a, b = await start(http, INSERT_SAMPLE), await start(http, INSERT_SAMPLE)
        await sql(http, a, f"DELETE FROM {table}")
        await sql(http, a, "CREATE TABLE planted (x)")
        in_a = await sql(http, a, f"SELECT COUNT(*) FROM {table}")
        in_b = await sql(http, b, f"SELECT COUNT(*) FROM {table}")
        planted = await sql(http, b, "SELECT * FROM planted")
        await cancel(http, a, b)
    assert in_a == "[(0,)]" and in_b not in ("[(0,)]", in_a) and "error" not in in_b.lower()
    assert "no such table: planted" in planted


async def test_a_runaway_cte_is_stopped_at_the_statement_timeout(stack):
    async with _client(stack) as http:
        sid = await start(http)
        stopped = await sql(http, sid, RUNAWAY)
        after = await sql(http, sid, "SELECT 1")
        await cancel(http, sid)
    assert stopped == f"Error: SQL execution timed out after {STATEMENT_TIMEOUT_S} seconds."
    assert after == "[(1,)]"
