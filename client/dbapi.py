"""A bridge, to delete at the merge: ``client/mapstore.py`` (on its way to ``client/map/``)
still imports the connection protocol from here; it lives in ``client/plumbing/dbapi.py``."""

from __future__ import annotations

from deplog.client.plumbing.dbapi import Connection, Cursor, insert_rows

__all__ = ["Connection", "Cursor", "insert_rows"]
