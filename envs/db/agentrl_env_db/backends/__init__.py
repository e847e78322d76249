"""Database backends of the DB task: one shared :class:`Backend` per worker, one
:class:`Database` (a fresh, private database) per session. See :mod:`.base` for the contract."""

from __future__ import annotations

from .base import Backend, Database, TableSpec

__all__ = ["Backend", "Database", "TableSpec"]
