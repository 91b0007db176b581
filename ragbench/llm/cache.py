"""The cache of LLM calls: request hash → reply, in one SQLite file shared by processes.

Replies are small and many (one per query, passage or prompt variant), so they live in one
table rather than one directory each; SQLite's own locking makes concurrent sweeps safe, and
WAL mode lets readers go on while a writer commits. A row is written only after a reply was
received in full, so a killed run leaves no half-written entry.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

__all__ = ["LLMCache"]


class LLMCache:
    """Replies by request key, stored in ``<root>/llm/calls.sqlite``."""

    def __init__(self, root: Path | str) -> None:
        self.path = Path(root) / "llm" / "calls.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._connection() as db:
            db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, reply TEXT)")

    def _connection(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db = db
        return db

    def get(self, key: str) -> dict[str, Any] | None:
        """The reply stored under ``key``, or None (an unreadable row counts as missing)."""
        row = self._connection().execute("SELECT reply FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, reply: dict[str, Any]) -> None:
        """Store ``reply`` under ``key`` (replacing any older one)."""
        with self._connection() as db:
            db.execute(
                "INSERT OR REPLACE INTO calls (key, reply) VALUES (?, ?)",
                (key, json.dumps(reply, ensure_ascii=False)),
            )

    def __len__(self) -> int:
        return int(self._connection().execute("SELECT COUNT(*) FROM calls").fetchone()[0])
