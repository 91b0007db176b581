"""The chunk table: per chunk its document and character range, in arrays, and the projection
of a chunk ranking onto documents.

Rankings are always of chunks; this table is how stages (per-document fusion) and evaluation
(document, chunk and span labels) find which document and characters each chunk covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragbench.errors import DataError
from ragbench.types import Chunk, Ranking

__all__ = ["ChunkTable", "document_ranking", "first_rows"]

_FEW = 4096
"""Up to this many ids, ``ChunkTable.rows`` looks them up in a dict; more go through arrow."""


@dataclass(frozen=True, eq=False)
class ChunkTable:
    """Per chunk: id, document id, ``[start, end)`` character range and (optionally) text.

    Parallel arrays; ids are unique. Build it once per chunked corpus (``from_chunks``) and reuse
    it: id lookups and document codes are cached on it; chunk qrels and span coordinates are
    cached per (table, labeled set) pair.
    """

    ids: np.ndarray
    doc_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    texts: np.ndarray | None = None

    def __post_init__(self) -> None:
        columns = {
            "ids": np.asarray(self.ids, dtype=object),
            "doc_ids": np.asarray(self.doc_ids, dtype=object),
            "starts": np.asarray(self.starts, dtype=np.int64),
            "ends": np.asarray(self.ends, dtype=np.int64),
        }
        if self.texts is not None:
            columns["texts"] = np.asarray(self.texts, dtype=object)
        for name, column in columns.items():
            object.__setattr__(self, name, column)
        if len({len(c) for c in columns.values()}) > 1:
            sizes = ", ".join(f"{name}={len(c)}" for name, c in columns.items())
            raise DataError(f"chunk table columns differ in length: {sizes}")
        if len(set(self.ids)) != len(self.ids):
            raise DataError("chunk table: chunk ids are not unique")
        if (self.ends < self.starts).any():
            bad = self.ids[np.argmax(self.ends < self.starts)]
            raise DataError(f"chunk table: chunk {bad!r} ends before it starts")

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk]) -> ChunkTable:
        """The table of ``chunks`` (with their texts)."""
        return cls(
            ids=np.array([c.id for c in chunks], dtype=object),
            doc_ids=np.array([c.doc_id for c in chunks], dtype=object),
            starts=np.array([c.start for c in chunks], dtype=np.int64),
            ends=np.array([c.end for c in chunks], dtype=np.int64),
            texts=np.array([c.text for c in chunks], dtype=object),
        )

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def lengths(self) -> np.ndarray:
        """Chunk lengths in characters."""
        return self.ends - self.starts

    @cached_property
    def _arrow_ids(self) -> pa.Array:
        return pa.array(self.ids, type=pa.string())

    @cached_property
    def row_of(self) -> dict[str, int]:
        """Chunk id → its row."""
        return {str(cid): row for row, cid in enumerate(self.ids)}

    @cached_property
    def _documents(self) -> tuple[np.ndarray, np.ndarray]:
        names, codes = np.unique(self.doc_ids, return_inverse=True)
        return names, codes.astype(np.int64)

    @property
    def doc_names(self) -> np.ndarray:
        """Distinct document ids, sorted."""
        return self._documents[0]

    @property
    def doc_codes(self) -> np.ndarray:
        """Per chunk, the index of its document in ``doc_names``."""
        return self._documents[1]

    @cached_property
    def _rows_by_doc(self) -> dict[str, np.ndarray]:
        order = np.argsort(self.doc_codes, kind="stable")
        bounds = np.searchsorted(self.doc_codes[order], np.arange(len(self.doc_names) + 1))
        return {
            str(name): order[bounds[i] : bounds[i + 1]] for i, name in enumerate(self.doc_names)
        }

    def doc_rows(self, doc_id: str) -> np.ndarray:
        """Rows of the chunks of ``doc_id`` (empty when it has none)."""
        return self._rows_by_doc.get(doc_id, np.empty(0, dtype=np.int64))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Row of each chunk id (same shape), -1 for ``""`` padding; unknown ids raise."""
        ids = np.asarray(ids, dtype=object)
        if ids.size <= _FEW:  # one query's hits: a dict beats arrow's per-call hash table
            row_of = self.row_of
            rows = np.fromiter((row_of.get(c, -1) for c in ids.ravel()), np.int64, ids.size)
        else:
            flat = pa.array(ids.ravel(), type=pa.string())
            found = pc.index_in(flat, value_set=self._arrow_ids).fill_null(-1)
            rows = found.to_numpy(zero_copy_only=False).astype(np.int64)
        unknown = (rows < 0) & (ids.ravel() != "")
        if unknown.any():
            first = ids.ravel()[np.argmax(unknown)]
            raise DataError(
                f"ranking has {int(unknown.sum())} chunk ids missing from the chunk table, "
                f"e.g. {first!r}"
            )
        return rows.reshape(ids.shape)


_RECENT_DOCUMENT_RANKINGS = 4
_recent: list[tuple[Ranking, ChunkTable, Ranking]] = []


def document_ranking(ranking: Ranking, table: ChunkTable) -> Ranking:
    """Chunk ranking → document ranking: each document appears once, at the position of its
    first chunk in the ranking and with that chunk's score.

    The last few results are kept by the identity of their inputs: every per-document fusion
    of a sweep projects the same first-stage ranking again (rankings are not modified in
    place)."""
    for seen, seen_table, found in _recent:
        if seen is ranking and seen_table is table:
            return found
    found = _document_ranking(ranking, table)
    _recent.insert(0, (ranking, table, found))
    del _recent[_RECENT_DOCUMENT_RANKINGS:]
    return found


def _document_ranking(ranking: Ranking, table: ChunkTable) -> Ranking:
    rows = first_rows(table.rows(ranking.ids), key=table.doc_codes)
    keep = rows >= 0
    width = int(keep.sum(axis=1).max(initial=0))
    ids = np.full((len(rows), width), "", dtype=object)
    scores = np.full((len(rows), width), -np.inf)
    r, c = np.nonzero(keep)
    column = (np.cumsum(keep, axis=1) - 1)[r, c]
    ids[r, column] = table.doc_names[table.doc_codes[rows[r, c]]]
    scores[r, column] = np.asarray(ranking.scores)[r, c]
    return Ranking(ids, scores)


def first_rows(rows: np.ndarray, key: np.ndarray | None = None) -> np.ndarray:
    """``rows`` with every entry after the first of its ``key`` (default: the row itself) in
    the same ranking row set to -1."""
    valid = rows >= 0
    keys = np.full(rows.shape, -1, dtype=np.int64)
    keys[valid] = key[rows[valid]] if key is not None else rows[valid]
    order = np.argsort(keys, axis=1, kind="stable")  # per ranking row: short sorts
    ordered = np.take_along_axis(keys, order, axis=1)
    starts = np.ones(rows.shape, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.zeros(rows.shape, dtype=bool)
    np.put_along_axis(first, order, starts, axis=1)
    return np.where(first & valid, rows, -1)
