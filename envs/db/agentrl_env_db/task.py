"""``db``: AgentBench's FC DB task — answer a question or change a table with SQL.

The model gets AgentBench's system prompt and the question, runs SQL with ``execute_sql`` and
ends with ``commit_final_answer``. Scoring (see :mod:`.scoring`): SELECT-type samples compare
the committed answers with ``label``; INSERT/UPDATE/DELETE samples ignore the answers and
compare the hash of the tables (:mod:`.hashing`) with ``answer_md5``. Reward is 1 or 0.

Samples of the ``easy`` splits (:mod:`.make_easy`) carry ``"prompt": "easy"`` (a short system
prompt) and ``"max_turns": 3``: a session's round limit is the ``max_turns`` option if set, else
its sample's ``max_turns``, else 15. Everything else (tools, scoring) is the same.

Each session has its own database (see :mod:`.backends`), created in ``setup`` and dropped in
``teardown``; on MySQL, what a killed worker left is dropped by the next worker (see
:mod:`.backends.mysql`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from agentrl_envs.task import Task, TaskConfig, tool

from .backends import Backend, Database, TableSpec
from .backends.base import count_statements
from .prompts import opening_messages
from .samples import gold_sql, load_file, load_split, query_type, tables_of, validate_sample
from .scoring import combine_table_hashes, compare_results, hash_from_result, is_mutation


class DBConfig(TaskConfig):
    """Options of the DB task.

    Backend:
        backend: ``sqlite`` (in-process, offline) or ``mysql`` (a MySQL 8 / MariaDB server).
        mysql_url: ``mysql://USER:PASSWORD@HOST:PORT`` of the server; required for ``mysql``.
        reap_interval_s: ``mysql``: seconds between sweeps that drop the databases and users of
            dead workers sharing the server (one sweep always runs at start; 0: only that one).

    Limits:
        statement_timeout_s: a statement running longer is stopped and reported as timed out.
        max_output_chars: tool output is cut here and ``[TRUNCATED]`` appended (AgentBench: 800).
        max_turns: round limit of every session (unset: the sample's ``max_turns``, else 15).
        max_db_mb: ``sqlite``: MiB a session's database may hold (its temporary database as much
            again); a statement that would grow it further fails with ``database or disk is full``.
        heap_limit_mb: ``sqlite``: MiB of memory SQLite may use in the worker process, all
            sessions together (SQLite's hard heap limit is process-wide); a statement that would
            pass it fails with ``out of memory``. 0: no limit.
    """

    backend: Literal["sqlite", "mysql"] = Field("sqlite", description="Database engine: 'sqlite' or 'mysql'.")
    mysql_url: str | None = Field(None, description="mysql://USER:PASSWORD@HOST:PORT (backend 'mysql' only).")
    reap_interval_s: float = Field(
        60.0, ge=0, description="mysql: seconds between sweeps for dead workers' databases (0: only at start)."
    )
    statement_timeout_s: float = Field(10.0, gt=0, description="Seconds one SQL statement may run.")
    max_output_chars: int = Field(800, gt=0, description="Characters of tool output before truncation.")
    max_db_mb: int = Field(64, ge=1, description="sqlite: MiB one session's database may hold (temporary tables as much again).")
    heap_limit_mb: int = Field(
        1024, ge=0, description="sqlite: MiB SQLite may use in the worker, all sessions together (0: no limit)."
    )

    @model_validator(mode="after")
    def _mysql_needs_url(self) -> DBConfig:
        if self.backend == "mysql" and not self.mysql_url:
            raise ValueError("backend 'mysql' needs mysql_url, e.g. --option mysql_url=mysql://user:pw@127.0.0.1:3306")
        return self


class DBTask(Task):
    name = "db"
    max_turns = 15
    #: ``easy`` (200 samples), ``easy-test`` (100, held out, for reporting) and ``easy-val`` (100,
    #: held out, for choosing settings): see :mod:`.make_easy`.
    splits = ("dev", "easy", "easy-test", "easy-val")
    concurrency = 32
    Config = DBConfig

    # ------------------------------------------------------------------ data

    load_split = staticmethod(load_split)
    load_data = staticmethod(load_file)  # a .jsonl or .json file

    @classmethod
    def sample_from_custom(cls, custom_task: dict[str, Any]) -> dict[str, Any]:
        return validate_sample(custom_task, "custom_task")

    @classmethod
    def reference_policy(cls, sample: dict[str, Any]) -> list[dict[str, Any]]:
        """Run the gold SQL, then commit ``label`` (SELECT-type) or nothing (mutations)."""
        calls = []
        sql = gold_sql(sample)
        if sql is not None:
            calls.append({"name": "execute_sql", "arguments": {"query": sql}})
        answers = [] if is_mutation(query_type(sample)) else [str(v) for v in sample["label"]]
        calls.append({"name": "commit_final_answer", "arguments": {"answers": answers}})
        return calls

    # ------------------------------------------------------------------ worker resources

    @classmethod
    async def open_resources(cls, config: BaseModel) -> Backend:
        assert isinstance(config, DBConfig)
        if config.backend == "mysql":
            from .backends.mysql import MySQLBackend  # asyncmy is only needed for this backend

            assert config.mysql_url is not None
            return await MySQLBackend.connect(
                config.mysql_url,
                statement_timeout_s=config.statement_timeout_s,
                max_output_chars=config.max_output_chars,
                reap_interval_s=config.reap_interval_s,
            )
        from .backends.sqlite import SQLiteBackend

        return SQLiteBackend(
            statement_timeout_s=config.statement_timeout_s,
            max_output_chars=config.max_output_chars,
            max_db_bytes=config.max_db_mb << 20,
            heap_limit_bytes=config.heap_limit_mb << 20,
        )

    # ------------------------------------------------------------------ session

    def __init__(self, sample: dict[str, Any], *, config: BaseModel | None = None, resources: Any = None) -> None:
        super().__init__(sample, config=config, resources=resources)
        self.tables = [TableSpec.from_sample_table(t) for t in tables_of(sample)]
        self.query_type = query_type(sample)
        self.db: Database | None = None

    async def setup(self) -> list[dict[str, Any]]:
        if self.resources is None:
            raise RuntimeError("the DB task needs its backend: open it with TaskRuntime.open() / open_resources")
        self.db = await self.resources.open_database()
        await self.db.create_tables(self.tables)
        return opening_messages(self.sample)

    async def teardown(self) -> None:
        if self.db is not None:
            db, self.db = self.db, None
            await db.close()

    @tool
    async def execute_sql(self, query: str) -> str:
        """Executes a given SQL statement on the database and returns the result.

        Args:
            query: The SQL query to be executed.
        """
        assert self.db is not None
        statements = count_statements(query)
        if statements > 1:
            return (
                f"Error: only one SQL statement can be executed per call, but the query holds {statements}. Nothing was executed."
            )
        return await self.db.execute(query) or "No response from database."

    @tool
    async def commit_final_answer(self, answers: list[str]) -> str:
        """Commits the final answer after all operations are completed.

        Args:
            answers: The list of final answers to commit.
        """
        if is_mutation(self.query_type):
            submitted: Any = await self._tables_hash()
            expected = self.sample.get("answer_md5") or await self._expected_hash()
        else:
            submitted, expected = answers, self.sample["label"]
        correct = compare_results(submitted, expected, self.query_type)
        self.finish(1.0 if correct else 0.0, is_correct=correct, type=self.query_type)
        return "Your answer has been committed."

    async def _tables_hash(self, db: Database | None = None) -> str:
        db = db or self.db
        assert db is not None
        return combine_table_hashes([hash_from_result(await db.table_hash_result(t)) for t in self.tables])

    async def _expected_hash(self) -> str | None:
        """No ``answer_md5``: hash the tables after running the gold SQL on a scratch database,
        as AgentBench does for samples whose expected hash is empty."""
        sql = gold_sql(self.sample)
        if sql is None:
            return None
        scratch = await self.resources.open_database()
        try:
            await scratch.create_tables(self.tables)
            await scratch.execute(sql)
            return await self._tables_hash(scratch)
        finally:
            await scratch.close()
