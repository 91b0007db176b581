"""The cache of LLM calls: request hash → reply, in one SQLite file shared by processes.

Replies are small and many (one per query, passage or prompt variant), so they live in one
table rather than one directory each; SQLite's own locking makes concurrent sweeps safe, and
WAL mode lets readers go on while a writer commits. A row is written only after a reply was
received in full, so a killed run leaves no half-written entry.

The file is opened on first use, so work that calls no model never touches it. The cache is
only a cache: a file SQLite finds damaged (when it is opened or on any query) is logged with
its path, removed under a lock and started again empty, and the operation is retried; no run
fails because of it. A file that stays locked or cannot be written is one ``DataError``
naming it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

from ragbench.errors import DataError, nearest_folder

__all__ = ["LLM_AREA", "LLMCache"]

T = TypeVar("T")

LLM_AREA = "llm"
"""The folder of the cache root that holds the LLM cache."""

log = logging.getLogger(__name__)

_DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB (primary result codes)
_MOVED = 1032  # SQLITE_READONLY_DBMOVED: the file was replaced under an open connection
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_FILES = ("", "-wal", "-shm", "-journal")  # the database and SQLite's files beside it


def _code(exc: sqlite3.Error) -> int:
    """SQLite's extended result code of ``exc`` (-1 when it carries none)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code if isinstance(code, int) else -1


class LLMCache:
    """Replies by request key, stored in ``<root>/llm/calls.sqlite`` (opened on first use);
    ``timeout`` is how many seconds an operation waits for another process's lock."""

    def __init__(self, root: Path | str, timeout: float = 60.0) -> None:
        self.path = Path(root) / LLM_AREA / "calls.sqlite"
        self.timeout = timeout
        self._local = threading.local()
        self._generation = 0  # moves on when the file is replaced: every thread reconnects
        self._ready = -1  # the generation whose file is known to hold the table
        self._setting_up = threading.Lock()

    # ------------------------------------------------------------ connections

    def _connection(self) -> sqlite3.Connection:
        held = getattr(self._local, "db", None)
        if held is not None and held[1] == self._generation:
            return held[0]
        if held is not None:
            held[0].close()
        generation = self._generation
        if self._ready != generation:
            self._set_up()
            self._ready = generation
        db = sqlite3.connect(self.path, timeout=self.timeout)
        self._local.db = (db, generation)
        return db

    def _set_up(self) -> None:
        """Make the file (when missing) in WAL mode with its table, once, under the lock that
        keeps threads and processes from setting it up (or replacing it) together."""
        nearest_folder(self.path.parent, "LLM cache folder")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataError(
                f"{self.path}: cannot make the LLM cache ({exc.strerror or exc})"
            ) from None
        with self._setting_up, self._file_lock():
            db = sqlite3.connect(self.path, timeout=self.timeout)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, reply TEXT, at REAL)"
                )
                columns = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
                if "at" not in columns:  # a cache written before rows recorded their time
                    db.execute("ALTER TABLE calls ADD COLUMN at REAL")
            finally:
                db.close()

    def _file_lock(self) -> FileLock:
        return FileLock(self.path.with_name(self.path.name + ".lock"))

    def _run(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """``operation`` on this thread's connection; a damaged file is replaced and the
        operation run once more on the new one."""
        try:
            return operation(self._connection())
        except sqlite3.DatabaseError as exc:
            if _code(exc) & 0xFF not in _DAMAGED and _code(exc) != _MOVED:
                raise self._failure(exc) from None
            self._replace(str(exc))
        try:
            return operation(self._connection())
        except sqlite3.DatabaseError as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: sqlite3.Error) -> DataError:
        """The one-line error of a file this process cannot use."""
        if _code(exc) & 0xFF in _BUSY:
            return DataError(
                f"{self.path}: the LLM cache is locked by another process ({exc}); wait for it, "
                "or remove the file (it is only a cache)"
            )
        return DataError(
            f"{self.path}: cannot use the LLM cache ({exc}); check the file's permissions, or "
            "remove it (it is only a cache)"
        )

    def _intact(self) -> bool:
        """Whether the file on disk opens and passes SQLite's quick check."""
        try:
            db = sqlite3.connect(self.path, timeout=self.timeout)
        except sqlite3.DatabaseError:
            return False
        try:
            return db.execute("PRAGMA quick_check(1)").fetchone()[0] == "ok"
        except sqlite3.DatabaseError as exc:
            if _code(exc) & 0xFF in _DAMAGED:
                return False
            raise self._failure(exc) from None
        finally:
            db.close()

    def _replace(self, reason: str) -> None:
        """Remove the file when it is (still) damaged, under a lock so that a process that
        has just replaced it keeps its new one; then every thread reconnects."""
        with self._setting_up, self._file_lock():
            if self.path.exists() and not self._intact():
                log.warning(
                    "LLM cache %s is damaged (%s); removing it (its calls are made again when "
                    "needed)",
                    self.path,
                    reason,
                )
                self._delete()
            self._generation += 1

    def _delete(self) -> None:
        for suffix in _FILES:
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)

    # ------------------------------------------------------------ entries

    def get(self, key: str) -> dict[str, Any] | None:
        """The reply stored under ``key``, or None (an unreadable row counts as missing)."""
        row = self._run(
            lambda db: db.execute("SELECT reply FROM calls WHERE key = ?", (key,)).fetchone()
        )
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except (TypeError, json.JSONDecodeError):
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, reply: dict[str, Any]) -> None:
        """Store ``reply`` under ``key`` (replacing any older one)."""
        text = json.dumps(reply, ensure_ascii=False)

        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute(
                    "INSERT OR REPLACE INTO calls (key, reply, at) VALUES (?, ?, ?)",
                    (key, text, time.time()),
                )

        self._run(write)

    def __len__(self) -> int:
        """Entries stored (0 when the file does not exist; it is not made)."""
        if not self.path.exists():
            return 0
        return int(self._run(lambda db: db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]))

    def size(self) -> int:
        """Bytes on disk (the database and SQLite's files beside it)."""
        files = (self.path.with_name(self.path.name + suffix) for suffix in _FILES)
        return sum(f.stat().st_size for f in files if f.is_file())

    def clear(self, older_than_seconds: float | None = None) -> int:
        """Delete entries (all: the file itself, or those written ``older_than_seconds`` ago
        or earlier); returns how many."""
        if not self.path.exists():
            return 0
        if older_than_seconds is None:
            count = len(self)
            with self._setting_up, self._file_lock():
                self._delete()
                self._generation += 1
            return count
        cutoff = time.time() - older_than_seconds

        def delete(db: sqlite3.Connection) -> int:
            with db:
                return db.execute("DELETE FROM calls WHERE at < ?", (cutoff,)).rowcount

        return int(self._run(delete))
