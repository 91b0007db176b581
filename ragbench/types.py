"""Core value types shared by every layer: documents, chunks, queries, hits and rankings.

They are plain frozen dataclasses with ``__slots__``: cheap to build in the hundreds of
thousands, picklable, and safe to pass between processes. Metadata dicts are treated as
read-only by convention (components copy before changing them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

__all__ = ["Chunk", "Document", "Hit", "Query", "Ranking", "content_hash"]


def content_hash(text: str) -> str:
    """Stable SHA-256 hex digest of ``text`` (UTF-8), used for dedup and cache keys."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _Hashed:
    """What a value with a ``text`` gets: its content hash."""

    __slots__ = ()
    text: str

    @property
    def hash(self) -> str:
        """Content hash of the text (an unchanged text is not embedded again)."""
        return content_hash(self.text)


@dataclass(frozen=True, slots=True)
class Document(_Hashed):
    """A source document before chunking; ``id`` is stable (e.g. a path relative to its root)."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True, slots=True)
class Chunk(_Hashed):
    """A contiguous piece of a document: ``document.text[start:end] == text`` always holds."""

    id: str
    doc_id: str
    index: int
    start: int
    end: int
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Query:
    """A query to retrieve for."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved chunk with its score and 1-based rank, as returned to applications."""

    chunk: Chunk
    score: float
    rank: int


class Ranking(NamedTuple):
    """Top-k chunk ids and scores for a batch of queries, as dense arrays.

    Row ``i`` belongs to query ``i``. Rows shorter than ``k`` are padded with ``""`` ids and
    ``-inf`` scores, so whole batches stay vectorised from first stage to metrics.
    """

    ids: np.ndarray
    scores: np.ndarray

    @property
    def depth(self) -> int:
        """Number of columns (the k of the batch)."""
        return int(self.ids.shape[1]) if self.ids.ndim == 2 else 0

    def row(self, i: int) -> list[tuple[str, float]]:
        """The non-padded (id, score) pairs of query ``i`` in rank order."""
        ids, scores = self.ids[i].tolist(), self.scores[i].tolist()
        return [(c, float(s)) for c, s in zip(ids, scores, strict=True) if c]

    def head(self, k: int) -> Ranking:
        """The first ``k`` columns."""
        return Ranking(self.ids[:, :k], self.scores[:, :k])

    @staticmethod
    def from_rows(rows: list[list[tuple[str, float]]], k: int | None = None) -> Ranking:
        """Build a padded ranking from per-query lists of (id, score) in rank order."""
        depth = k if k is not None else max((len(r) for r in rows), default=0)
        ids = np.full((len(rows), depth), "", dtype=object)
        scores = np.full((len(rows), depth), -np.inf, dtype=np.float64)
        for i, row in enumerate(rows):
            row = row[:depth]
            if row:
                ids[i, : len(row)] = [c for c, _ in row]
                scores[i, : len(row)] = [s for _, s in row]
        return Ranking(ids, scores)
