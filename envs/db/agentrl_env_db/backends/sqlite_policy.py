"""What a session's statements may do on its SQLite database: an authorizer that allows a listed
set of actions, functions, PRAGMAs and virtual tables and refuses everything else.

Why a list of what is allowed: SQLite builds differ in what they compile in, and some of it must
not reach a client. Debian's libsqlite3 (the one Python's images use) is built with
``ENABLE_FTS3_TOKENIZER``: ``fts3_tokenizer()`` hands out and takes raw C pointers (issue 38: a
library address out, a client's pointer in, and ``CREATE VIRTUAL TABLE … tokenize=…`` then
crashed the worker). A refused action fails the statement with ``not authorized``, which the model
reads as ``SQLite execution error: not authorized``.

Allowed: SELECT (recursive CTEs, views, window functions), INSERT, UPDATE, DELETE, CREATE / DROP /
ALTER TABLE, CREATE / DROP INDEX, VIEW and TRIGGER (temporary ones too), transactions and
savepoints, ANALYZE, REINDEX; SQLite's core scalar, aggregate, window, date and time, math and
JSON functions (:data:`ALLOWED_FUNCTIONS`); the read-only PRAGMAs of :data:`ALLOWED_PRAGMAS`,
statement and table-valued forms (``pragma_table_info('t')``); the ``json_each`` and
``json_tree`` table-valued functions.

Refused: ATTACH and DETACH (other files), VACUUM (it attaches a database itself), CREATE and DROP
VIRTUAL TABLE (FTS3/4/5, R*Tree and the FTS3 tokenizer hook), every other virtual table the build
has (``dbstat``, ``sqlite_stmt``, ``sqlite_dbpage``…), every other function (``fts3_tokenizer``,
``load_extension``, ``sqlite_compileoption_*``, R*Tree's and FTS's helpers, anything unknown) and
every other PRAGMA, so a session cannot lift the limits its database was opened with
(``max_page_count``, ``temp_store``) or change the connection (``writable_schema``).
"""

from __future__ import annotations

import contextlib
import sqlite3

ALLOWED_FUNCTIONS = frozenset(
    # core scalar functions (https://sqlite.org/lang_corefunc.html)
    "abs changes char coalesce concat concat_ws format glob hex if ifnull iif instr last_insert_rowid "
    "length like likelihood likely lower ltrim max min nullif octet_length printf quote random "
    "randomblob replace round rtrim sign soundex sqlite_version substr substring total_changes trim "
    "typeof unhex unicode unistr unlikely upper zeroblob "
    # aggregate functions (lang_aggfunc.html)
    "avg count group_concat median percentile percentile_cont percentile_disc string_agg sum total "
    # window functions (windowfunctions.html)
    "row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value "
    # date and time (lang_datefunc.html); CURRENT_DATE and friends are functions too
    "date time datetime julianday unixepoch strftime timediff current_date current_time current_timestamp "
    # math (lang_mathfunc.html)
    "acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log log10 log2 "
    "mod pi pow power radians sin sinh sqrt tan tanh trunc "
    # JSON (json1.html), the -> and ->> operators included
    "json jsonb json_array jsonb_array json_array_length json_error_position json_extract jsonb_extract "
    "json_insert jsonb_insert json_object jsonb_object json_patch jsonb_patch json_pretty json_remove "
    "jsonb_remove json_replace jsonb_replace json_set jsonb_set json_type json_valid json_quote "
    "json_group_array jsonb_group_array json_group_object jsonb_group_object -> ->> "
    # SQLite's own statements for ALTER TABLE call these; SQLite refuses them to a client's
    # statement itself ("no such function"), after the authorizer has been asked.
    "sqlite_rename_column sqlite_rename_table sqlite_rename_test sqlite_rename_quotefix sqlite_drop_column".split()
)

#: PRAGMAs that only read the schema; as statements and as table-valued functions.
ALLOWED_PRAGMAS = frozenset("table_info table_xinfo table_list index_list index_info index_xinfo foreign_key_list".split())

#: Virtual tables a statement may read: the JSON table-valued functions.
ALLOWED_VIRTUAL_TABLES = frozenset({"json_each", "json_tree"})

_ALLOWED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_TRANSACTION,
        sqlite3.SQLITE_SAVEPOINT,
        sqlite3.SQLITE_CREATE_TABLE,
        sqlite3.SQLITE_CREATE_TEMP_TABLE,
        sqlite3.SQLITE_DROP_TABLE,
        sqlite3.SQLITE_DROP_TEMP_TABLE,
        sqlite3.SQLITE_ALTER_TABLE,
        sqlite3.SQLITE_CREATE_INDEX,
        sqlite3.SQLITE_CREATE_TEMP_INDEX,
        sqlite3.SQLITE_DROP_INDEX,
        sqlite3.SQLITE_DROP_TEMP_INDEX,
        sqlite3.SQLITE_CREATE_VIEW,
        sqlite3.SQLITE_CREATE_TEMP_VIEW,
        sqlite3.SQLITE_DROP_VIEW,
        sqlite3.SQLITE_DROP_TEMP_VIEW,
        sqlite3.SQLITE_CREATE_TRIGGER,
        sqlite3.SQLITE_CREATE_TEMP_TRIGGER,
        sqlite3.SQLITE_DROP_TRIGGER,
        sqlite3.SQLITE_DROP_TEMP_TRIGGER,
        sqlite3.SQLITE_ANALYZE,
        sqlite3.SQLITE_REINDEX,
    }
)
#: Actions on a table (arg1): allowed unless the table is a refused virtual table.
_TABLE_ACTIONS = frozenset({sqlite3.SQLITE_READ, sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})

#: Eponymous virtual tables some builds have, refused even where ``PRAGMA module_list`` is missing.
_KNOWN_VIRTUAL_TABLES = frozenset(
    {"dbstat", "sqlite_dbpage", "sqlite_stmt", "sqlite_dbdata", "sqlite_dbptr", "sqlite_memstat", "bytecode", "tables_used"}
)


def _build_modules() -> frozenset[str]:
    """Every virtual table module this process's SQLite has (each eponymous one is a table of the
    same name a statement could read or write)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        try:
            return frozenset(name.lower() for (name,) in conn.execute("PRAGMA module_list"))
        except sqlite3.Error:  # a build without the introspection PRAGMAs
            return frozenset()


#: Table names refused for reading and writing: the build's virtual table modules but JSON's.
REFUSED_TABLES = (_build_modules() | _KNOWN_VIRTUAL_TABLES) - ALLOWED_VIRTUAL_TABLES


def authorize(action: int, arg1: str | None, arg2: str | None, db_name: str | None, trigger: str | None) -> int:
    """``sqlite3.Connection.set_authorizer`` callback: ``SQLITE_OK`` for what the module docstring
    allows, ``SQLITE_DENY`` for everything else."""
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action in _TABLE_ACTIONS:
        allowed = (arg1 or "").lower() not in REFUSED_TABLES
    elif action == sqlite3.SQLITE_FUNCTION:
        allowed = (arg2 or "").lower() in ALLOWED_FUNCTIONS
    elif action == sqlite3.SQLITE_PRAGMA:
        allowed = (arg1 or "").lower() in ALLOWED_PRAGMAS
    else:  # ATTACH, DETACH (VACUUM), CREATE/DROP VIRTUAL TABLE, and any action SQLite adds later
        allowed = False
    return sqlite3.SQLITE_OK if allowed else sqlite3.SQLITE_DENY
