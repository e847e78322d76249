"""Session behaviour on every backend: output format, errors, limits, timeouts, isolation, scoring."""

from __future__ import annotations

import asyncio

import pytest
from agentrl_env_db import DBTask
from db_helpers import call, replay, sql, statement_left_running

from agentrl_envs import SampleStatus, TaskRuntime

AMBASSADORS = "`US Ambassadors and Envoy Extraordinary to Colombia`"
INSERT_SAMPLE = 20  # an INSERT into `School Location Table`


async def test_select_result_is_str_of_row_tuples(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    start = await ep.start()
    assert [m["role"] for m in start.messages] == ["system", "user"]
    assert start.messages[1]["content"].endswith("Question: " + runtime.samples[0]["description"] + "\n")
    out = await sql(ep, f"SELECT Representative, Title FROM {AMBASSADORS} LIMIT 2")
    assert out == str(
        [
            ("Dabney H. Maury", "Envoy Extraordinary and Minister Plenipotentiary"),
            ("Luther F. McKinney", "Envoy Extraordinary and Minister Plenipotentiary"),
        ]
    )
    assert await sql(ep, f"UPDATE {AMBASSADORS} SET Title = 'x' WHERE 1 = 0") == "[]"
    await ep.close()


async def test_values_are_stored_as_text(runtime: TaskRuntime) -> None:
    ep = runtime.episode(INSERT_SAMPLE)
    await ep.start()
    assert await sql(ep, "SELECT `Date moved` FROM `School Location Table` LIMIT 1") == "[('1960',)]"
    await ep.close()


async def test_sql_errors_are_tool_output(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    out = await sql(ep, "SELECT * FROM no_such_table")
    assert "no_such_table" in out and not ep.finished
    assert "syntax" in (await sql(ep, "SELEC 1")).lower() or "error" in (await sql(ep, "SELEC 1")).lower()
    await ep.close()


async def test_output_is_truncated_at_800_chars(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    out = await sql(ep, f"SELECT * FROM {AMBASSADORS}")
    assert len(out) == 800 + len("[TRUNCATED]") and out.endswith("[TRUNCATED]") and out.startswith("[('Dabney H. Maury'")
    await ep.close()


async def test_only_one_statement_per_call(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    out = await sql(ep, f"SELECT 1; DROP TABLE {AMBASSADORS}")
    assert out.startswith("Error: only one SQL statement") and "Nothing was executed" in out
    rows = len(runtime.samples[0]["table"]["table_info"]["rows"])
    assert await sql(ep, f"SELECT COUNT(*) FROM {AMBASSADORS};") == f"[({rows},)]"  # the table is intact
    assert await sql(ep, "SELECT ';' -- ; trailing comment") == "[(';',)]"
    await ep.close()


async def test_runaway_recursive_cte_times_out(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    if runtime.config.backend == "mysql":
        # MariaDB stops recursion after max_recursive_iterations (1000); lift it to run forever.
        await sql(ep, "SET SESSION max_recursive_iterations = 4294967295")
    out = await sql(ep, "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT COUNT(*) FROM r")
    assert out == "Error: SQL execution timed out after 1 seconds."
    assert await statement_left_running(runtime, "WITH RECURSIVE") is False  # stopped, not only answered
    assert await sql(ep, "SELECT 1") == "[(1,)]"  # the session still works
    await ep.close()


async def test_wrong_answers_score_zero(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)  # SELECT-type
    await ep.start()
    out = await ep.step([call("commit_final_answer", answers=["nope"])])
    assert out.finish and out.reward == 0.0 and out.status == SampleStatus.COMPLETED
    assert out.metric["is_correct"] is False

    ep = runtime.episode(INSERT_SAMPLE)  # mutation left undone
    await ep.start()
    out = await ep.step([call("commit_final_answer", answers=["done"])])
    assert out.finish and out.reward == 0.0

    ep = runtime.episode(INSERT_SAMPLE)  # the table dropped: the hash query fails, no match
    await ep.start()
    await sql(ep, "DROP TABLE `School Location Table`")
    out = await ep.step([call("commit_final_answer", answers=[])])
    assert out.reward == 0.0 and out.status == SampleStatus.COMPLETED


async def test_mutation_answers_are_ignored(runtime: TaskRuntime) -> None:
    sample = runtime.samples[INSERT_SAMPLE]
    ep = runtime.episode(INSERT_SAMPLE)
    await ep.start()
    await sql(ep, sample["label"][0])
    out = await ep.step([call("commit_final_answer", answers=["anything at all"])])
    assert out.reward == 1.0


async def test_sessions_do_not_share_tables(runtime: TaskRuntime) -> None:
    a, b = runtime.episode(INSERT_SAMPLE), runtime.episode(INSERT_SAMPLE)
    await asyncio.gather(a.start(), b.start())
    await sql(a, "DELETE FROM `School Location Table`")
    assert await sql(a, "SELECT COUNT(*) FROM `School Location Table`") == "[(0,)]"
    assert await sql(b, "SELECT COUNT(*) FROM `School Location Table`") != "[(0,)]"
    await asyncio.gather(a.close(), b.close())


async def test_turn_limit(runtime: TaskRuntime) -> None:
    ep = runtime.episode(0)
    await ep.start()
    for _ in range(15):
        out = await ep.step([call("execute_sql", query="SELECT 1")])
    assert out.finish and out.status == SampleStatus.TASK_LIMIT_REACHED and out.reward == 0.0


async def test_concurrent_replays(runtime: TaskRuntime) -> None:
    rewards = await asyncio.gather(*(replay(runtime, i) for i in range(20, 40)))
    assert rewards == [1.0] * 20


async def test_sqlite_cannot_attach_files(sqlite_runtime: TaskRuntime, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ep = sqlite_runtime.episode(0)
    await ep.start()
    assert "not authorized" in await sql(ep, f"ATTACH DATABASE '{tmp_path / 'x.db'}' AS x")
    assert "denied" in await sql(ep, f"VACUUM INTO '{tmp_path / 'y.db'}'")
    assert list(tmp_path.iterdir()) == []
    await ep.close()


@pytest.mark.mariadb
async def test_mysql_session_cannot_touch_another_session(mysql_runtime: TaskRuntime) -> None:
    a, b = mysql_runtime.episode(INSERT_SAMPLE), mysql_runtime.episode(INSERT_SAMPLE)
    await asyncio.gather(a.start(), b.start())
    other = f"`{b.task.db.name}`"  # type: ignore[attr-defined]
    table = f"{other}.`School Location Table`"
    for attack in (
        f"SELECT * FROM {table}",
        f"DELETE FROM {table}",
        f"DROP TABLE {table}",
        f"DROP DATABASE {other}",
        f"USE {other}",
    ):
        assert "denied" in (await sql(a, attack)).lower(), attack
    assert "denied" in (await sql(a, "SET GLOBAL max_connections = 1")).lower()
    assert b.task.db.name not in await sql(a, "SHOW DATABASES")  # type: ignore[attr-defined]
    before = await mysql_runtime.resources.admin(f"SELECT COUNT(*) FROM {table}")
    assert before[0][0] == len(mysql_runtime.samples[INSERT_SAMPLE]["table"]["table_info"]["rows"])
    await asyncio.gather(a.close(), b.close())


@pytest.mark.mariadb
async def test_mysql_timeout_backstop_kills_the_query(mysql_runtime: TaskRuntime) -> None:
    ep = mysql_runtime.episode(0)
    await ep.start()
    await sql(ep, "SET SESSION max_statement_time = 0")  # the model disables the server's limit
    assert await sql(ep, "SELECT SLEEP(30)") == "Error: SQL execution timed out after 1 seconds."
    assert await statement_left_running(mysql_runtime, "SELECT SLEEP") is False  # the backstop killed it
    assert await sql(ep, "SELECT 1") == "[(1,)]"
    await ep.close()


@pytest.mark.mariadb
async def test_mysql_teardown_drops_database_and_user(mysql_runtime: TaskRuntime) -> None:
    ep = mysql_runtime.episode(0)
    await ep.start()
    name = ep.task.db.name  # type: ignore[attr-defined]
    admin = mysql_runtime.resources.admin
    assert await admin(f"SHOW DATABASES LIKE '{name}'") == [(name,)]
    await ep.step([call("commit_final_answer", answers=["x"])])
    assert await admin(f"SHOW DATABASES LIKE '{name}'") == []
    assert await admin(f"SELECT User FROM mysql.user WHERE User = '{name}'") == []


async def test_empty_answer_md5_is_computed_from_gold_sql(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """AgentBench's fallback: no expected hash → run the gold SQL on a scratch database and hash that."""
    import json

    from db_helpers import replay

    sample = TaskRuntime(DBTask, split="dev").samples[INSERT_SAMPLE] | {"answer_md5": ""}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(sample) + "\n")
    rt = TaskRuntime(DBTask, data=path)
    await rt.open()
    try:
        assert await replay(rt, 0) == 1.0
        ep = rt.episode(0)
        await ep.start()
        assert (await ep.step([call("commit_final_answer", answers=[])])).reward == 0.0
    finally:
        await rt.close()
