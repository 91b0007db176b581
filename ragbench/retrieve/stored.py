"""A collection's documents and chunks on disk: one SQLite file, read a row at a time.

A deployed collection can hold millions of chunks; none of its texts needs to be in memory at
once. ``ChunkStore`` keeps, in ``store.sqlite``, every document (id, content hash, the source it
was indexed from, and its text only when a stage reads the corpus), every chunk of every
chunking stage in index order, the batches an ingest committed (what each added and removed)
and small facts (``meta``). ``StoredChunkSet`` is a chunk set whose chunks stay in that file:
lookups by id are queries, iteration streams rows, and extending it inserts rows — so the
stage graph's steps run on it as on a chunk set in memory. Each batch commits in one
transaction (``ChunkStore.batch``): a killed ingest loses at most the batch it was writing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, overload

import numpy as np

from ragbench.errors import DataError
from ragbench.retrieve.artifacts import ChunkSet
from ragbench.text.chunk_table import ChunkTable
from ragbench.types import Chunk, Document

__all__ = ["STORE_FILE", "ChunkStore", "StoredChunkSet", "StoredDocument"]

STORE_FILE = "store.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY, hash TEXT NOT NULL, origin TEXT NOT NULL, batch INTEGER NOT NULL,
    text TEXT, metadata TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    stage TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, doc_id TEXT NOT NULL,
    batch INTEGER NOT NULL, idx INTEGER NOT NULL, start INTEGER NOT NULL, stop INTEGER NOT NULL,
    text TEXT NOT NULL, metadata TEXT NOT NULL, PRIMARY KEY (stage, id));
CREATE INDEX IF NOT EXISTS chunks_seq ON chunks (stage, seq);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks (stage, doc_id);
CREATE INDEX IF NOT EXISTS chunks_batch ON chunks (stage, batch);
CREATE TABLE IF NOT EXISTS batches (
    n INTEGER PRIMARY KEY, removed TEXT NOT NULL, documents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_TABLES = ("documents", "chunks", "batches", "meta")
_CHUNK_COLUMNS = "id, doc_id, idx, start, stop, text, metadata"


@dataclass(frozen=True)
class StoredDocument:
    """What the store keeps of an indexed document: its content hash, where it was indexed
    from (``origin``: a folder, file or URL; "" when unknown) and the batch that indexed it."""

    hash: str
    origin: str
    batch: int


def _metadata(text: Any, where: Path, what: str) -> dict[str, Any]:
    """A row's metadata (JSON text of an object); anything else is damage, named."""
    try:
        found = json.loads(text)
    except (TypeError, ValueError):
        found = None
    if not isinstance(found, dict):
        raise DataError(f"{where}: the metadata of {what} is not a JSON object")
    return found


def _chunk(row: Sequence[Any], where: Path) -> Chunk:
    cid, doc_id, idx, start, stop, text, metadata = row
    try:
        return Chunk(
            cid, doc_id, int(idx), int(start), int(stop), text, _metadata(metadata, where, cid)
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{where}: chunk {cid!r} is damaged ({exc})") from None


class ChunkStore:
    """The documents, chunks and batches of one collection, in ``<folder>/store.sqlite``.

    One connection per thread; a writer holds the collection's lock (``collection_lock``), so
    readers (search, serve) read committed batches only, as SQLite's WAL mode lets them.
    """

    def __init__(self, folder: Path | str | None, *, create: bool = False) -> None:
        if folder is None:  # in memory, shared by this process's connections
            self.path = Path(f"file:ragbench-{uuid.uuid4().hex}?mode=memory&cache=shared")
            self._uri = True
            self._keep = sqlite3.connect(str(self.path), uri=True)  # holds the database
        else:
            self.path = Path(folder) / STORE_FILE
            self._uri = False
            if not create and not self.path.is_file():
                raise DataError(f"{self.path}: no such file (the collection's store)")
        self._local = threading.local()
        try:
            with self._db() as db:
                if not create and not self._uri:
                    self._check_tables(db)
                db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise DataError(f"{self.path}: not a readable collection store ({exc})") from None
        self._seq: dict[str, int] = {}

    def _check_tables(self, db: sqlite3.Connection) -> None:
        """An existing store holds every table an ingest made: one that is gone (an emptied
        file, a table dropped) is damage, never an empty collection."""
        found = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in _TABLES if t not in found]
        if missing:
            raise DataError(
                f"{self.path}: no table {', '.join(missing)} (the collection's store was emptied "
                "or damaged); ingest its source into a new collection"
            )

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, uri=self._uri)
            if not self._uri:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        return db

    def checkpoint(self) -> None:
        """Move what the write-ahead log holds into the store's file (an ingest ends so: the
        file is then the whole store)."""
        if not self._uri:
            self._query("PRAGMA wal_checkpoint(TRUNCATE)")

    def copy_to(self, folder: Path) -> ChunkStore:
        """A copy of the whole store in ``folder`` (SQLite's online backup: consistent while
        others read)."""
        target = sqlite3.connect(folder / STORE_FILE)
        try:
            self._db().backup(target)
        finally:
            target.close()
        return ChunkStore(folder)

    def close(self) -> None:
        """Close this thread's connection (others close with their threads)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._db().execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise DataError(f"{self.path}: not a readable collection store ({exc})") from None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction: every write inside commits together, or none does."""
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            self._seq.clear()
            raise
        db.execute("COMMIT")

    # ------------------------------------------------------------ documents

    def document(self, doc_id: str) -> StoredDocument | None:
        """What the store keeps of ``doc_id``, or None."""
        rows = self._query("SELECT hash, origin, batch FROM documents WHERE id = ?", (doc_id,))
        return StoredDocument(rows[0][0], rows[0][1], int(rows[0][2])) if rows else None

    def put_document(self, doc: Document, origin: str, batch: int, keep_text: bool) -> None:
        """Record ``doc`` (its text too when ``keep_text``), indexed by ``batch``."""
        self._db().execute(
            "INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?, ?, ?)",
            (
                doc.id,
                doc.hash,
                origin,
                batch,
                doc.text if keep_text else None,
                json.dumps(doc.metadata, ensure_ascii=False),
            ),
        )

    def adopt(self, doc_id: str, origin: str) -> None:
        """Record that ``doc_id``, indexed from no known source, comes from ``origin``."""
        self._db().execute("UPDATE documents SET origin = ? WHERE id = ?", (origin, doc_id))

    def delete_documents(self, doc_ids: Collection[str]) -> None:
        """Forget the documents ``doc_ids`` (their chunks go with ``StoredChunkSet.removing``)."""
        self._db().executemany("DELETE FROM documents WHERE id = ?", [(d,) for d in doc_ids])

    @contextmanager
    def seen(self) -> Iterator[Callable[[str], None]]:
        """A pass over a source: the function it yields records each document id the source
        gave (``unseen`` then names the others), forgotten when the pass ends."""
        db = self._db()
        db.execute("CREATE TEMP TABLE IF NOT EXISTS seen (id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM seen")

        def saw(doc_id: str) -> None:
            db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (doc_id,))

        try:
            yield saw
        finally:
            db.execute("DELETE FROM seen")

    def unseen(self, origin: str) -> list[str]:
        """Ids of the documents indexed from ``origin`` that the current pass did not give."""
        sql = (
            "SELECT id FROM documents WHERE origin = ? AND id NOT IN (SELECT id FROM seen) "
            "ORDER BY id"
        )
        return [r[0] for r in self._query(sql, (origin,))]

    def document_ids(self, origin: str | None = None) -> list[str]:
        """Ids of the documents (those indexed from ``origin`` only, when given), in id order."""
        if origin is None:
            return [r[0] for r in self._query("SELECT id FROM documents ORDER BY id")]
        sql = "SELECT id FROM documents WHERE origin = ? ORDER BY id"
        return [r[0] for r in self._query(sql, (origin,))]

    def origins(self) -> list[str]:
        """The sources the documents were indexed from, each once."""
        return [r[0] for r in self._query("SELECT DISTINCT origin FROM documents ORDER BY 1")]

    def count_documents(self) -> int:
        """Number of documents."""
        return int(self._query("SELECT COUNT(*) FROM documents")[0][0])

    def corpus(self) -> Iterator[Document]:
        """The documents whose text is kept, in id order."""
        sql = "SELECT id, text, metadata FROM documents WHERE text IS NOT NULL ORDER BY id"
        for doc_id, text, metadata in self._query(sql):
            yield Document(doc_id, text, _metadata(metadata, self.path, repr(doc_id)))

    # ------------------------------------------------------------ chunks

    def chunk_set(self, stage: str) -> StoredChunkSet:
        """The chunks of ``stage`` as a chunk set that stays on disk."""
        return StoredChunkSet(self, stage)

    def add_chunks(self, stage: str, chunks: Sequence[Chunk], batch: int) -> None:
        """Append ``chunks`` to ``stage``, after its last chunk (index order)."""
        if stage not in self._seq:
            found = self._query("SELECT MAX(seq) FROM chunks WHERE stage = ?", (stage,))
            self._seq[stage] = -1 if found[0][0] is None else int(found[0][0])
        start = self._seq[stage] + 1
        self._seq[stage] += len(chunks)
        self._db().executemany(
            "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    stage,
                    start + i,
                    c.id,
                    c.doc_id,
                    batch,
                    c.index,
                    c.start,
                    c.end,
                    c.text,
                    json.dumps(c.metadata, ensure_ascii=False),
                )
                for i, c in enumerate(chunks)
            ],
        )

    def remove_chunks(self, stage: str, doc_ids: Collection[str]) -> list[str]:
        """Delete the chunks of ``doc_ids`` from ``stage``; returns their ids (index order)."""
        removed: list[str] = []
        for doc_id in doc_ids:
            sql = "SELECT id FROM chunks WHERE stage = ? AND doc_id = ? ORDER BY seq"
            removed += [r[0] for r in self._query(sql, (stage, doc_id))]
        self._db().executemany(
            "DELETE FROM chunks WHERE stage = ? AND doc_id = ?", [(stage, d) for d in doc_ids]
        )
        return removed

    def chunk_ids_of(self, stage: str, doc_id: str) -> list[str]:
        """Ids of ``doc_id``'s chunks in ``stage``, in order."""
        sql = "SELECT id FROM chunks WHERE stage = ? AND doc_id = ? ORDER BY seq"
        return [r[0] for r in self._query(sql, (stage, doc_id))]

    def batch_chunks(self, stage: str, batch: int) -> list[Chunk]:
        """The chunks ``batch`` added to ``stage`` (those still there), in index order."""
        sql = f"SELECT {_CHUNK_COLUMNS} FROM chunks WHERE stage = ? AND batch = ? ORDER BY seq"
        return [_chunk(r, self.path) for r in self._query(sql, (stage, batch))]

    # ------------------------------------------------------------ batches and facts

    def record_batch(self, n: int, removed: Mapping[str, list[str]], documents: int) -> None:
        """Record that batch ``n`` committed: the chunk ids it removed (by stage)."""
        self._db().execute(
            "INSERT INTO batches VALUES (?, ?, ?)", (n, json.dumps(dict(removed)), documents)
        )

    def batches(self, after: int = -1) -> list[tuple[int, dict[str, list[str]]]]:
        """The committed batches after batch ``after``: number and removed chunk ids."""
        rows = self._query("SELECT n, removed FROM batches WHERE n > ? ORDER BY n", (after,))
        return [(int(n), json.loads(removed)) for n, removed in rows]

    def last_batch(self) -> int:
        """The number of the last committed batch (-1 before the first)."""
        found = self._query("SELECT MAX(n) FROM batches")[0][0]
        return -1 if found is None else int(found)

    def get(self, key: str, default: str | None = None) -> str | None:
        """A fact of the collection (``meta``), or ``default``."""
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else default

    def set(self, key: str, value: str) -> None:
        """Record a fact of the collection."""
        self._db().execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------ for StoredChunkSet

    def has_chunks(self, stage: str, upto: int) -> bool:
        """Whether ``stage`` holds a chunk a batch up to ``upto`` added."""
        sql = "SELECT 1 FROM chunks WHERE stage = ? AND batch <= ? LIMIT 1"
        return bool(self._query(sql, (stage, upto)))

    def count_chunks(self, stage: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM chunks WHERE stage = ?", (stage,))[0][0])

    def iter_chunks(self, stage: str, columns: str = _CHUNK_COLUMNS) -> Iterator[Any]:
        """Rows of ``stage`` in index order, read a page at a time."""
        last, page = -1, 10_000
        while True:
            sql = (
                f"SELECT seq, {columns} FROM chunks WHERE stage = ? AND seq > ? "
                "ORDER BY seq LIMIT ?"
            )
            rows = self._query(sql, (stage, last, page))
            yield from (row[1:] for row in rows)
            if len(rows) < page:
                return
            last = int(rows[-1][0])

    def lookup(self, stage: str, chunk_id: str, columns: str = _CHUNK_COLUMNS) -> Any:
        rows = self._query(
            f"SELECT {columns} FROM chunks WHERE stage = ? AND id = ?", (stage, chunk_id)
        )
        if not rows:
            raise KeyError(chunk_id)
        return rows[0]

    def has_chunk(self, stage: str, chunk_id: str) -> bool:
        sql = "SELECT 1 FROM chunks WHERE stage = ? AND id = ?"
        return bool(self._query(sql, (stage, chunk_id)))


class _Rows(Sequence[Chunk]):
    """The chunks of a stored stage as a sequence, streamed in index order."""

    def __init__(self, store: ChunkStore, stage: str) -> None:
        self.store, self.stage = store, stage

    def __len__(self) -> int:
        return self.store.count_chunks(self.stage)

    def __iter__(self) -> Iterator[Chunk]:
        return (_chunk(row, self.store.path) for row in self.store.iter_chunks(self.stage))

    @overload
    def __getitem__(self, at: int) -> Chunk: ...

    @overload
    def __getitem__(self, at: slice) -> Sequence[Chunk]: ...

    def __getitem__(self, at: int | slice) -> Chunk | Sequence[Chunk]:
        return list(self)[at]


class _ById(Mapping[str, Any]):
    """Chunk id → chunk (or one column of it), looked up in the store."""

    def __init__(self, store: ChunkStore, stage: str, text_only: bool) -> None:
        self.store, self.stage, self.text_only = store, stage, text_only

    def __getitem__(self, chunk_id: str) -> Any:
        if self.text_only:
            return self.store.lookup(self.stage, chunk_id, "text")[0]
        return _chunk(self.store.lookup(self.stage, chunk_id), self.store.path)

    def __contains__(self, chunk_id: object) -> bool:
        return isinstance(chunk_id, str) and self.store.has_chunk(self.stage, chunk_id)

    def __iter__(self) -> Iterator[str]:
        return (row[0] for row in self.store.iter_chunks(self.stage, "id"))

    def __len__(self) -> int:
        return self.store.count_chunks(self.stage)


class StoredChunkSet(ChunkSet):
    """The chunks of one chunking stage of a collection, kept in its ``ChunkStore``: the same
    lookups as a ``ChunkSet`` (by id, texts, the offsets table), answered from disk."""

    def __init__(self, store: ChunkStore, stage: str) -> None:  # no chunks held
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "stage", stage)

    _store: ChunkStore
    stage: str

    @property
    def chunks(self) -> Sequence[Chunk]:
        """The chunks, streamed from the store in index order."""
        return _Rows(self._store, self.stage)

    def __len__(self) -> int:
        return self._store.count_chunks(self.stage)

    @property
    def texts(self) -> Mapping[str, str]:
        """Chunk id → text, looked up when asked."""
        return _ById(self._store, self.stage, text_only=True)

    @property
    def by_id(self) -> Mapping[str, Chunk]:
        """Chunk id → chunk, looked up when asked."""
        return _ById(self._store, self.stage, text_only=False)

    @property
    def ids(self) -> list[str]:
        """Chunk ids, in index order."""
        return [row[0] for row in self._store.iter_chunks(self.stage, "id")]

    @property
    def metadata(self) -> list[Mapping[str, Any]]:
        """Chunk metadata, in index order."""
        rows = self._store.iter_chunks(self.stage, "id, metadata")
        return [_metadata(row[1], self._store.path, row[0]) for row in rows]

    @cached_property
    def table(self) -> ChunkTable:
        """Offsets table (ids, documents, ranges; no texts), read once."""
        rows = list(self._store.iter_chunks(self.stage, "id, doc_id, start, stop"))
        return ChunkTable(
            ids=np.array([r[0] for r in rows], dtype=object),
            doc_ids=np.array([r[1] for r in rows], dtype=object),
            starts=np.array([r[2] for r in rows], dtype=np.int64),
            ends=np.array([r[3] for r in rows], dtype=np.int64),
        )

    def extended(self, batch: ChunkSet, number: int) -> ChunkSet:
        """Itself, with the chunks of ``batch`` written to the store (inside the ingest's
        transaction: ``ChunkStore.batch``)."""
        self._store.add_chunks(self.stage, batch.chunks, number)
        self.__dict__.pop("table", None)
        return self

    def removing(self, doc_ids: Collection[str]) -> tuple[ChunkSet, list[str]]:
        """Itself, with the chunks of ``doc_ids`` deleted from the store, and their ids."""
        removed = self._store.remove_chunks(self.stage, doc_ids)
        if removed:
            self.__dict__.pop("table", None)
        return self, removed
