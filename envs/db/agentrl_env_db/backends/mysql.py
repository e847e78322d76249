"""MySQL / MariaDB backend: one database *and one user* per session on a shared server.

The worker holds a small pool of *admin* connections (the ``mysql_url`` user, which needs
CREATE, DROP, CREATE USER, GRANT OPTION and the right to KILL other users' queries). For each
session the admin creates database ``agentrl_db_<random>`` and a user of the same name whose
only grant is ``ALL ON that_db.*``; the model's statements run on a connection of that user, so
a session cannot read, change or drop another session's tables, change global settings, or kill
other queries. ``close`` drops the database and the user.

Timeouts: the session connection sets ``max_statement_time`` (MariaDB) or
``max_execution_time`` (MySQL, SELECT only); as a backstop, a statement still running after the
timeout (the model may change its own session variables) is stopped with ``KILL QUERY`` from an
admin connection.

Hashing runs AgentBench's real query on an admin connection (so the model's session variables
cannot change it) with ``group_concat_max_len = 1024``, MySQL 8's default (MariaDB's is 1 MiB).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncmy
from asyncmy.errors import MySQLError

from ..hashing import GROUP_CONCAT_MAX_LEN, hash_query, quote_identifier
from .base import TableSpec, format_rows, truncate

log = logging.getLogger(__name__)

#: Seconds to wait for a killed statement to return before dropping its connection.
_KILL_GRACE_S = 5.0
_CHARSET = "utf8mb4"


@dataclass(frozen=True)
class ServerAddress:
    host: str
    port: int
    user: str
    password: str

    @classmethod
    def parse(cls, url: str) -> ServerAddress:
        """``mysql://user:password@host:port`` (any path is ignored)."""
        parts = urlsplit(url)
        if parts.scheme not in ("mysql", "mariadb") or not parts.hostname or not parts.username:
            raise ValueError(f"expected mysql://USER:PASSWORD@HOST:PORT, got {url!r}")
        return cls(parts.hostname, parts.port or 3306, unquote(parts.username), unquote(parts.password or ""))


def _error_text(e: BaseException) -> str:
    """``1064: You have an error…`` — the server's code and message, as the model should see them."""
    if isinstance(e, MySQLError) and len(e.args) >= 2:
        return f"{e.args[0]}: {e.args[1]}"
    return str(e)


def _escape_percent(sql: str) -> str:
    """asyncmy formats queries that take parameters with ``%``: protect identifiers that hold one."""
    return sql.replace("%", "%%")


class MySQLBackend:
    """The worker-wide admin pool; opens per-session databases."""

    def __init__(
        self, address: ServerAddress, pool: Any, *, mariadb: bool, statement_timeout_s: float, max_output_chars: int
    ) -> None:
        self.address = address
        self.pool = pool
        self.mariadb = mariadb
        self.statement_timeout_s = statement_timeout_s
        self.max_output_chars = max_output_chars

    @classmethod
    async def connect(cls, url: str, *, statement_timeout_s: float, max_output_chars: int, pool_size: int = 8) -> MySQLBackend:
        address = ServerAddress.parse(url)
        pool = await asyncmy.create_pool(
            minsize=1,
            maxsize=pool_size,
            host=address.host,
            port=address.port,
            user=address.user,
            password=address.password,
            charset=_CHARSET,
            autocommit=True,
        )
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute("SELECT VERSION()")
            (version,) = await cur.fetchone()
        return cls(
            address,
            pool,
            mariadb="mariadb" in version.lower(),
            statement_timeout_s=statement_timeout_s,
            max_output_chars=max_output_chars,
        )

    async def admin(self, *statements: str) -> list[tuple]:
        """Run statements on an admin connection; the last one's rows are returned."""
        rows: list[tuple] = []
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)
                rows = list(await cur.fetchall()) if cur.description else []
        return rows

    async def open_database(self) -> MySQLDatabase:
        name = f"agentrl_db_{secrets.token_hex(8)}"
        password = secrets.token_urlsafe(18)
        db = quote_identifier(name)
        account = f"'{name}'@'%'"
        await self.admin(
            f"CREATE DATABASE {db} CHARACTER SET {_CHARSET}",
            f"CREATE USER {account} IDENTIFIED BY '{password}' WITH MAX_USER_CONNECTIONS 2",
            f"GRANT ALL PRIVILEGES ON {db}.* TO {account}",
        )
        database = MySQLDatabase(self, name)
        try:
            await database.connect(password)
        except BaseException:
            await database.close()
            raise
        return database

    async def close(self) -> None:
        self.pool.close()
        await self.pool.wait_closed()


class MySQLDatabase:
    """One session's database, reached through its own user's connection."""

    def __init__(self, backend: MySQLBackend, name: str) -> None:
        self.backend = backend
        self.name = name
        self._conn: Any = None
        self._connection_id: int | None = None
        self._password: str | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    async def connect(self, password: str) -> None:
        self._password = password
        a = self.backend.address
        self._conn = await asyncmy.connect(
            host=a.host, port=a.port, user=self.name, password=password, database=self.name, charset=_CHARSET, autocommit=True
        )
        timeout = self.backend.statement_timeout_s
        limit = f"max_statement_time = {timeout:g}" if self.backend.mariadb else f"max_execution_time = {int(timeout * 1000)}"
        async with self._conn.cursor() as cur:
            await cur.execute(f"SET SESSION {limit}, group_concat_max_len = {GROUP_CONCAT_MAX_LEN}")
            await cur.execute("SELECT CONNECTION_ID()")
            (self._connection_id,) = await cur.fetchone()

    async def create_tables(self, tables: Sequence[TableSpec]) -> None:
        async with self._lock, self._conn.cursor() as cur:
            for table in tables:
                name = quote_identifier(table.name)
                columns = ",".join(f"{quote_identifier(c)} TEXT" for c in table.columns)
                await cur.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
                if table.rows:
                    names = ",".join(quote_identifier(c) for c in table.columns)
                    marks = ",".join(["%s"] * len(table.columns))
                    await cur.executemany(_escape_percent(f"INSERT INTO {name} ({names}) VALUES ") + f"({marks})", table.rows)

    async def execute(self, sql: str) -> str:
        async with self._lock:
            run = asyncio.ensure_future(self._run(sql))
            done, _ = await asyncio.wait({run}, timeout=self.backend.statement_timeout_s + 1.0)
            if done:
                return run.result()
            await self._kill_running(run)
            return f"Error: SQL execution timed out after {self.backend.statement_timeout_s:g} seconds."

    async def _run(self, sql: str) -> str:
        limit = self.backend.max_output_chars
        try:
            async with self._conn.cursor() as cur:
                await cur.execute(sql)
                rows = await cur.fetchall() if cur.description else []
                return format_rows(rows, limit)
        except MySQLError as e:
            if self._timed_out(e):
                return f"Error: SQL execution timed out after {self.backend.statement_timeout_s:g} seconds."
            return truncate(_error_text(e), limit)

    @staticmethod
    def _timed_out(e: MySQLError) -> bool:
        # 1969: MariaDB "Query execution was interrupted (max_statement_time exceeded)";
        # 3024: MySQL "maximum statement execution time exceeded".
        return bool(e.args) and e.args[0] in (1969, 3024)

    async def _kill_running(self, run: asyncio.Future) -> None:
        """Stop a statement that outlived its timeout; reconnect if the connection is unusable."""
        try:
            await self.backend.admin(f"KILL QUERY {int(self._connection_id or 0)}")
            await asyncio.wait_for(run, _KILL_GRACE_S)
        except Exception:
            log.warning("statement on %s did not stop after KILL QUERY; reconnecting", self.name, exc_info=True)
            run.cancel()
            await self._drop_connection()
            if self._password is not None:
                await self.connect(self._password)

    async def table_hash_result(self, table: TableSpec) -> str:
        query = hash_query(table.name, table.columns, schema=self.name)
        try:
            rows = await self.backend.admin(f"SET SESSION group_concat_max_len = {GROUP_CONCAT_MAX_LEN}", query)
        except MySQLError as e:
            return _error_text(e)
        return str(rows)

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.ensure_closed()
            except Exception:
                conn.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._drop_connection()
        try:
            await self.backend.admin(
                f"DROP DATABASE IF EXISTS {quote_identifier(self.name)}", f"DROP USER IF EXISTS '{self.name}'@'%'"
            )
        except Exception:
            log.exception("could not drop MySQL database/user %s", self.name)
