"""Nothing left behind on MySQL: a worker drops what a dead worker sharing the server left, at its
start and on its timer, and never what a live worker still uses.

Workers here are real ``agentrl-envs worker db`` processes on one MariaDB; "dead" means killed with
SIGKILL, so nothing of theirs runs at exit."""

from __future__ import annotations

import ast
import asyncio
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import asyncmy
import httpx
import pytest
from agentrl_env_db.backends.mysql import MySQLBackend, ServerAddress, owner_lock, owner_of
from db_helpers import call, require_mysql

from agentrl_envs.stack import listening_socket

pytestmark = pytest.mark.mariadb


class Worker:
    """One ``agentrl-envs worker db --option backend=mysql`` process on 127.0.0.1."""

    def __init__(self, url: str, reap_interval_s: float) -> None:
        listen = listening_socket()  # the worker inherits it (--fd): no port changes hands
        self.port = listen.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        options = {"backend": "mysql", "mysql_url": url, "reap_interval_s": reap_interval_s}
        argv = [sys.executable, "-m", "agentrl_envs.cli", "worker", "db", "--port", str(self.port), "--log-level", "warning"]
        argv += [a for k, v in options.items() for a in ("--option", f"{k}={v}")]
        argv += ["--fd", str(listen.fileno())]
        with listen:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(listen.fileno(),))
        self.http = httpx.AsyncClient(timeout=30)

    async def started(self) -> Worker:
        """Wait until it serves: its start-up (and so its first sweep) is over."""
        for _ in range(600):
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited {self.proc.returncode}: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if (await self.http.get(f"{self.base}/health")).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError("worker did not start in 60 s")

    async def open_session(self, session_id: int) -> str:
        """Start a session of sample 0; return the name of its database (asked with SQL)."""
        r = await self.http.post(f"{self.base}/api/start_sample", json={"index": 0, "session_id": session_id})
        assert r.status_code == 200, r.text
        out = await self.sql(session_id, "SELECT DATABASE()")
        return ast.literal_eval(out)[0][0]

    async def sql(self, session_id: int, query: str) -> str:
        body = {"session_id": session_id, "messages": [call("execute_sql", query=query)]}
        r = await self.http.post(f"{self.base}/api/interact", json=body)
        assert r.status_code == 200, r.text
        return r.json()["env_out"]["messages"][0]["content"]

    async def stop(self) -> None:
        await self.http.aclose()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
async def workers() -> AsyncIterator[Any]:
    url = require_mysql()
    started: list[Worker] = []

    async def start(reap_interval_s: float = 3600) -> Worker:
        w = Worker(url, reap_interval_s)
        started.append(w)
        return await w.started()

    yield start
    for w in started:
        await w.stop()


async def query(sql: str) -> list[tuple]:
    a = ServerAddress.parse(require_mysql())
    conn = await asyncmy.connect(host=a.host, port=a.port, user=a.user, password=a.password, autocommit=True)
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
            return list(await cur.fetchall())
    finally:
        await conn.ensure_closed()


async def existing(names: list[str]) -> dict[str, tuple[bool, bool]]:
    """``{name: (database exists, user exists)}``."""
    quoted = ",".join(f"'{n}'" for n in names)
    dbs = {r[0] for r in await query(f"SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN ({quoted})")}
    users = {r[0] for r in await query(f"SELECT User FROM mysql.user WHERE User IN ({quoted})")}
    return {n: (n in dbs, n in users) for n in names}


async def test_next_worker_drops_a_killed_workers_databases_but_not_a_live_ones(workers: Any) -> None:
    killed, live = await workers(), await workers()
    killed_names = [await killed.open_session(1), await killed.open_session(2)]
    live_name = await live.open_session(3)
    assert {owner_of(n) for n in killed_names} != {owner_of(live_name)} and None not in {owner_of(n) for n in killed_names}

    killed.kill()
    assert await existing(killed_names) == {n: (True, True) for n in killed_names}, "SIGKILL leaves them (until a sweep)"

    await workers()  # its start-up sweep runs before it serves
    assert await existing(killed_names) == {n: (False, False) for n in killed_names}
    assert await existing([live_name]) == {live_name: (True, True)}
    assert await live.sql(3, "SELECT COUNT(*) > 0 FROM `US Ambassadors and Envoy Extraordinary to Colombia`") == "[(1,)]"

    await live.stop()  # a clean stop drops its own
    assert await existing([live_name]) == {live_name: (False, False)}


async def test_a_running_worker_drops_a_killed_workers_databases_on_its_timer(workers: Any) -> None:
    killed, live = await workers(), await workers(reap_interval_s=0.5)
    killed_names = [await killed.open_session(1)]
    live_name = await live.open_session(2)
    killed.kill()
    for _ in range(200):
        if await existing(killed_names) == {n: (False, False) for n in killed_names}:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"still there 20 s after the kill: {await existing(killed_names)}")
    assert await existing([live_name]) == {live_name: (True, True)}
    assert await live.sql(2, "SELECT 1") == "[(1,)]"


async def test_sweep_spares_held_owners_and_foreign_names(mysql_runtime: Any) -> None:
    """The liveness signal itself: an owner whose lock some connection holds is alive; names of
    another shape (older versions' ``agentrl_db_<16 hex>``) are nobody's to judge."""
    backend: MySQLBackend = mysql_runtime.resources
    held, free = secrets.token_hex(4), secrets.token_hex(4)
    names = [
        f"agentrl_db_{held}_{secrets.token_hex(6)}",
        f"agentrl_db_{free}_{secrets.token_hex(6)}",
        f"agentrl_db_{secrets.token_hex(8)}",
    ]
    a = ServerAddress.parse(require_mysql())
    holder = await asyncmy.connect(host=a.host, port=a.port, user=a.user, password=a.password, autocommit=True)
    try:
        async with holder.cursor() as cur:
            await cur.execute(f"SELECT GET_LOCK('{owner_lock(held)}', 0)")
            assert (await cur.fetchone())[0] == 1
        for n in names:
            await backend.admin(f"CREATE DATABASE `{n}`", f"CREATE USER '{n}'@'%' IDENTIFIED BY 'x'")
        dropped = await backend.reap()
        assert names[1] in dropped and names[0] not in dropped and names[2] not in dropped
        assert await existing(names) == {names[0]: (True, True), names[1]: (False, False), names[2]: (True, True)}
    finally:
        await holder.ensure_closed()
        for n in names:
            await backend.admin(f"DROP DATABASE IF EXISTS `{n}`", f"DROP USER IF EXISTS '{n}'@'%'")
