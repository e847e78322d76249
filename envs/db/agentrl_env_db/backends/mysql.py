"""MySQL / MariaDB backend: one database *and one user* per session on a shared server.

The worker holds a small pool of *admin* connections (the ``mysql_url`` user, which needs
CREATE, DROP, CREATE USER, GRANT OPTION, the right to KILL other users' queries and, for the
sweep below, SELECT on ``mysql.user`` and PROCESS). For each session the admin creates database
``agentrl_db_<owner>_<session>`` and a user of the same name whose only grant is
``ALL ON that_db.*``; the model's statements run on a connection of that user, so a session cannot
read, change or drop another session's tables, change global settings, or kill other queries.
``close`` drops the database and the user.

Leftovers of dead workers: several workers may share one server, and a worker killed with SIGKILL
cannot drop its sessions' databases. Each backend therefore has an *owner id* (8 random hex
digits) that every name it creates carries, ``agentrl_db_<owner>_<session>``, and holds the
server's named lock ``agentrl_db_owner_<owner>`` (``GET_LOCK``) on a connection of its own for its
whole life. The server frees the lock the moment that connection drops, which it does when the
process dies, however it dies. :meth:`MySQLBackend.reap` drops every ``agentrl_db_<owner>_…``
database and user whose owner's lock is free (no live worker holds it); it runs when the backend
connects and then every ``reap_interval_s`` seconds. Names of another shape (older versions'
``agentrl_db_<16 hex>``) are never touched: nothing says whether their worker lives.

Timeouts: the session connection sets ``max_statement_time`` (MariaDB) or
``max_execution_time`` (MySQL, SELECT only); as a backstop, a statement still running after the
timeout (the model may change its own session variables) is stopped with ``KILL QUERY`` from an
admin connection.

Hashing runs AgentBench's real query on an admin connection (so the model's session variables
cannot change it) with ``group_concat_max_len = 1024``, MySQL 8's default (MariaDB's is 1 MiB).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncmy
from asyncmy.cursors import SSCursor
from asyncmy.errors import MySQLError

from ..hashing import GROUP_CONCAT_MAX_LEN, hash_query, quote_identifier
from .base import TableSpec, format_rows, truncate

log = logging.getLogger(__name__)

#: Seconds to wait for a killed statement to return before dropping its connection.
_KILL_GRACE_S = 5.0
_CHARSET = "utf8mb4"
#: Every session database and user is named ``agentrl_db_<owner>_<session>`` (32 characters:
#: MySQL's limit on user names).
PREFIX = "agentrl_db_"
_OWNED_NAME = re.compile(r"^agentrl_db_([0-9a-f]{8})_[0-9a-f]{12}$")
#: The lock connection must outlive any idle time: the server's default wait_timeout is 8 h.
_LOCK_WAIT_TIMEOUT_S = 31536000


def owner_of(name: str) -> str | None:
    """The owner id in a session database/user name, or ``None`` for a name of another shape."""
    m = _OWNED_NAME.match(name)
    return m.group(1) if m else None


def owner_lock(owner: str) -> str:
    """The named lock a live backend with owner id ``owner`` holds."""
    return f"agentrl_db_owner_{owner}"


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
    """The worker-wide admin pool and owner lock; opens per-session databases, reaps dead workers' ones."""

    def __init__(
        self,
        address: ServerAddress,
        pool: Any,
        *,
        mariadb: bool,
        statement_timeout_s: float,
        max_output_chars: int,
        owner: str,
        lock_conn: Any,
    ) -> None:
        self.address = address
        self.pool = pool
        self.mariadb = mariadb
        self.statement_timeout_s = statement_timeout_s
        self.max_output_chars = max_output_chars
        self.owner = owner
        self._lock_conn = lock_conn
        self._reaper: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        statement_timeout_s: float,
        max_output_chars: int,
        pool_size: int = 8,
        reap_interval_s: float = 60.0,
    ) -> MySQLBackend:
        """Open the admin pool, take an owner id and its lock, reap dead workers' leftovers, and
        (``reap_interval_s > 0``) keep reaping every ``reap_interval_s`` seconds until :meth:`close`."""
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
        try:
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute("SELECT VERSION()")
                (version,) = await cur.fetchone()
            owner = secrets.token_hex(4)
            lock_conn = await _lock_connection(address, owner)
        except BaseException:
            pool.close()
            await pool.wait_closed()
            raise
        backend = cls(
            address,
            pool,
            mariadb="mariadb" in version.lower(),
            statement_timeout_s=statement_timeout_s,
            max_output_chars=max_output_chars,
            owner=owner,
            lock_conn=lock_conn,
        )
        try:
            await backend.reap()
        except BaseException:
            await backend.close()
            raise
        if reap_interval_s > 0:
            backend._reaper = asyncio.get_running_loop().create_task(backend._reap_every(reap_interval_s))
        return backend

    async def admin(self, *statements: str) -> list[tuple]:
        """Run statements on an admin connection; the last one's rows are returned."""
        rows: list[tuple] = []
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)
                rows = list(await cur.fetchall()) if cur.description else []
        return rows

    def bounded(self, select: str) -> str:
        """``select`` stopped by the server after ``statement_timeout_s``: admin connections have
        no limit of their own, and the admin pool is shared by every session (a 4 M-row table a
        session built in three statements took 17.5 s to hash)."""
        if self.mariadb:
            return f"SET STATEMENT max_statement_time = {self.statement_timeout_s:g} FOR {select}"
        head, rest = select.split(None, 1)  # MySQL: an optimizer hint right after SELECT
        return f"{head} /*+ MAX_EXECUTION_TIME({int(self.statement_timeout_s * 1000)}) */ {rest}"

    async def open_database(self) -> MySQLDatabase:
        name = f"{PREFIX}{self.owner}_{secrets.token_hex(6)}"
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

    # ------------------------------------------------------------------ leftovers of dead workers

    async def reap(self) -> list[str]:
        """Drop the session databases and users of every owner whose lock no connection holds.

        Never touches this backend's own names, nor names of another shape. Safe against a worker
        starting meanwhile: a backend takes its lock before it creates anything. Returns the
        names dropped (a database and its user share one)."""
        databases, users = await self._names(PREFIX)
        owners = {owner_of(n) for n in databases | users} - {None, self.owner}
        dead = {o for o in owners if o is not None and await self._owner_is_dead(o)}
        names = sorted(n for n in databases | users if owner_of(n) in dead)
        for name in names:
            await self._drop(name, drop_database=name in databases, drop_user=name in users)
        if names:
            log.info("dropped %d databases/users of dead DB workers: %s", len(names), ", ".join(names))
        return names

    async def _owner_is_dead(self, owner: str) -> bool:
        rows = await self.admin(f"SELECT IS_USED_LOCK('{owner_lock(owner)}')")
        return rows[0][0] is None

    async def _drop(self, name: str, *, drop_database: bool = True, drop_user: bool = True) -> None:
        """Drop one session's database and user; a statement of the dead worker's session that is
        still running (it keeps the table locked) is killed first."""
        try:
            if drop_user:
                for (conn_id,) in await self.admin(f"SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{name}'"):
                    with contextlib.suppress(MySQLError):  # it may have ended meanwhile
                        await self.admin(f"KILL {int(conn_id)}")
            if drop_database:
                await self.admin(f"DROP DATABASE IF EXISTS {quote_identifier(name)}")
            if drop_user:
                await self.admin(f"DROP USER IF EXISTS '{name}'@'%'")
        except MySQLError:
            log.warning("could not drop MySQL database/user %s of a dead worker", name, exc_info=True)

    async def _reap_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self._keep_lock()
                await self.reap()
            except Exception:
                log.warning("reaping dead DB workers' databases failed; retrying in %g s", interval_s, exc_info=True)

    async def _keep_lock(self) -> None:
        """Check that this backend still holds its owner lock; retake it on a new connection if
        the lock connection was lost (server restart, network): until then other workers may take
        this worker for dead."""
        try:
            async with self._lock_conn.cursor() as cur:
                await cur.execute(f"SELECT IS_USED_LOCK('{owner_lock(self.owner)}') = CONNECTION_ID()")
                (held,) = await cur.fetchone()
            if held:
                return
        except Exception:
            pass
        log.warning("the owner lock of DB worker %s was lost; taking it again", self.owner)
        old, self._lock_conn = self._lock_conn, await _lock_connection(self.address, self.owner)
        old.close()

    async def close(self) -> None:
        """Stop reaping, drop what this worker still has, release the owner lock and the pool."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reaper
            self._reaper = None
        try:
            await self._drop_own()
        except Exception:
            log.warning("could not drop the databases DB worker %s still had", self.owner, exc_info=True)
        if self._lock_conn is not None:
            with contextlib.suppress(Exception):
                await self._lock_conn.ensure_closed()
            self._lock_conn = None
        self.pool.close()
        await self.pool.wait_closed()

    async def _drop_own(self) -> None:
        databases, users = await self._names(f"{PREFIX}{self.owner}_")
        for name in sorted(databases | users):
            await self._drop(name, drop_database=name in databases, drop_user=name in users)

    async def _names(self, prefix: str) -> tuple[set[str], set[str]]:
        """The databases and the users whose name starts with ``prefix``."""
        like = "'" + prefix.replace("_", "!_") + "%' ESCAPE '!'"
        schemata = await self.admin(f"SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE {like}")
        users = await self.admin(f"SELECT DISTINCT User FROM mysql.user WHERE User LIKE {like}")
        return {r[0] for r in schemata}, {r[0] for r in users}


async def _lock_connection(address: ServerAddress, owner: str) -> Any:
    """A connection of its own holding ``owner``'s lock: the proof, for other workers, that it lives."""
    conn = await asyncmy.connect(
        host=address.host, port=address.port, user=address.user, password=address.password, charset=_CHARSET, autocommit=True
    )
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"SET SESSION wait_timeout = {_LOCK_WAIT_TIMEOUT_S}")
            await cur.execute(f"SELECT GET_LOCK('{owner_lock(owner)}', 0)")
            (got,) = await cur.fetchone()
    except BaseException:
        conn.close()
        raise
    if got != 1:
        conn.close()
        raise RuntimeError(f"another connection holds the owner lock {owner_lock(owner)!r}")
    return conn


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
            cur = self._conn.cursor(SSCursor)  # unbuffered: rows are read as they are used
            rows: list[tuple] = []
            complete = True
            try:
                await cur.execute(sql)
                if cur.description:
                    rows, complete = await self._read_rows(cur, limit)
            finally:
                if complete:
                    await cur.close()
                else:
                    await self._abandon(cur)
            return format_rows(rows, limit)
        except MySQLError as e:
            if self._timed_out(e):
                return f"Error: SQL execution timed out after {self.backend.statement_timeout_s:g} seconds."
            return truncate(_error_text(e), limit)

    @staticmethod
    async def _read_rows(cur: Any, limit: int) -> tuple[list[tuple], bool]:
        """The rows of an unbuffered result until their text passes ``limit`` characters (what
        :func:`format_rows` shows), and whether that was the whole result. Reading more would
        only bring a result the model never sees into the worker's memory (issue 38: a 900 MB
        result took the worker from 120 to 1,015 MiB)."""
        rows: list[tuple] = []
        length = 1
        while length <= limit:
            row = await cur.fetchone()  # a row at a time: one row may be max_allowed_packet long
            if row is None:
                return rows, True
            rows.append(row)
            length += len(repr(tuple(row))) + 2
        return rows, False

    async def _abandon(self, cur: Any) -> None:
        """Stop the server sending the rest of a result nobody reads, then read what is in flight."""
        with contextlib.suppress(MySQLError):
            await self.backend.admin(f"KILL QUERY {int(self._connection_id or 0)}")
        with contextlib.suppress(MySQLError):  # the rest ends with "Query execution was interrupted"
            await cur.close()

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
        query = self.backend.bounded(hash_query(table.name, table.columns, schema=self.name))
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
