"""The Python table hash against MySQL semantics (and, with a server, against the real query)."""

from __future__ import annotations

import hashlib

import pytest
from agentrl_env_db.hashing import concat_ws, group_concat, hash_query, mysql_table_hash, row_hash


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def test_concat_ws_skips_nulls() -> None:
    assert concat_ws(",", ["a", None, "b"]) == "a,b"
    assert concat_ws(",", [None, None]) == ""


def test_row_hash_is_five_hex_chars_of_md5() -> None:
    assert row_hash(["a", "b"]) == md5("a,b")[:5]
    assert row_hash(["é"]) == hashlib.md5("é".encode()).hexdigest()[:5]  # utf8mb4 bytes


def test_group_concat_sorts_and_truncates_at_1024_bytes() -> None:
    assert group_concat(["b", "a"]) == "a,b"
    assert group_concat([]) is None
    values = [f"{i:05x}" for i in range(300)]  # 300 * 6 - 1 bytes > 1024
    assert len(group_concat(values)) == 1024
    assert group_concat(values, max_len=10_000) == ",".join(values)


def test_table_hash() -> None:
    rows = [["x", "1"], ["y", None]]
    expected = md5(",".join(sorted([md5("x,1")[:5], md5("y")[:5]])))
    assert mysql_table_hash(rows) == expected
    assert mysql_table_hash([]) is None


def test_hash_query_quotes_identifiers() -> None:
    q = hash_query("my `table`", ["a b"], schema="db")
    assert "FROM `db`.`my ``table```" in q and "CONCAT_WS(',', `a b`)" in q


@pytest.mark.mariadb
async def test_python_hash_equals_server_hash(mysql_runtime) -> None:  # type: ignore[no-untyped-def]
    """Edge cases the dev set lacks: NULLs, all-NULL rows, non-ASCII, >170 rows (truncation), empty."""
    from agentrl_env_db.backends.base import TableSpec

    backend = mysql_runtime.resources
    db = await backend.open_database()
    try:
        table = TableSpec("t", ("a", "b"), ())
        await db.create_tables([table])
        assert await db.table_hash_result(table) == "[(None,)]"
        await db.execute("INSERT INTO t VALUES ('x', NULL), (NULL, NULL), ('é', 'ß'), ('1', '2')")
        for i in range(300):
            await db.execute(f"INSERT INTO t VALUES ('{i}', 'v{i}')")
        rows = [("x", None), (None, None), ("é", "ß"), ("1", "2")] + [(str(i), f"v{i}") for i in range(300)]
        assert await db.table_hash_result(table) == str([(mysql_table_hash(rows),)])
    finally:
        await db.close()
