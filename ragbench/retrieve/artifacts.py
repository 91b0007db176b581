"""The values stages produce — chunk sets, vectors, indexes, timed rankings — and their codecs.

A codec writes an artifact into a cache directory and reads it back; the stage cache (and a
saved collection) stores each artifact in its own directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from ragbench.index.sparse import BM25Index
from ragbench.protocols import DenseStore
from ragbench.registry import ComponentConfig, components
from ragbench.text.chunk_table import ChunkTable
from ragbench.types import Chunk, Ranking

__all__ = [
    "BM25_INDEX",
    "CHUNKS",
    "QUERY_VECTORS",
    "RANKING",
    "TEXTS",
    "VECTORS",
    "ChunkSet",
    "Codec",
    "QueryVectors",
    "Timed",
    "dense_index_codec",
]


@dataclass(frozen=True)
class Codec:
    """How an artifact is written into, and read back from, a directory."""

    save: Callable[[Any, Path], None]
    load: Callable[[Path], Any]


@dataclass(frozen=True, eq=False)
class ChunkSet:
    """The chunks of a corpus under one chunker, with the lookups stages need."""

    chunks: Sequence[Chunk]

    def __len__(self) -> int:
        return len(self.chunks)

    @cached_property
    def table(self) -> ChunkTable:
        """Offsets table (for document projection and span metrics)."""
        return ChunkTable.from_chunks(self.chunks)

    @cached_property
    def texts(self) -> dict[str, str]:
        """Chunk id → text."""
        return {c.id: c.text for c in self.chunks}

    @cached_property
    def by_id(self) -> dict[str, Chunk]:
        """Chunk id → chunk."""
        return {c.id: c for c in self.chunks}

    @property
    def ids(self) -> list[str]:
        """Chunk ids, in order."""
        return [c.id for c in self.chunks]

    @property
    def metadata(self) -> list[Mapping[str, Any]]:
        """Chunk metadata, in order."""
        return [c.metadata for c in self.chunks]


@dataclass
class Timed:
    """A ranking with the seconds each query took in the stage that produced it."""

    ranking: Ranking
    seconds: np.ndarray


@dataclass
class QueryVectors:
    """Query vectors with the seconds each query took to embed."""

    vectors: np.ndarray
    seconds: np.ndarray


def _save_chunks(chunks: ChunkSet, path: Path) -> None:
    items = chunks.chunks
    frame = pd.DataFrame(
        {
            "id": [c.id for c in items],
            "doc_id": [c.doc_id for c in items],
            "index": np.array([c.index for c in items], dtype=np.int64),
            "start": np.array([c.start for c in items], dtype=np.int64),
            "end": np.array([c.end for c in items], dtype=np.int64),
            "text": [c.text for c in items],
            "metadata": [json.dumps(c.metadata, ensure_ascii=False) for c in items],
        }
    )
    frame.to_parquet(path / "chunks.parquet", index=False)


def _load_chunks(path: Path) -> ChunkSet:
    frame = pd.read_parquet(path / "chunks.parquet")
    return ChunkSet(
        [
            Chunk(i, d, int(n), int(s), int(e), t, json.loads(m))
            for i, d, n, s, e, t, m in zip(
                frame["id"],
                frame["doc_id"],
                frame["index"],
                frame["start"],
                frame["end"],
                frame["text"],
                frame["metadata"],
                strict=True,
            )
        ]
    )


def _save_ranking(timed: Timed, path: Path) -> None:
    np.savez(
        path / "ranking.npz",
        ids=timed.ranking.ids.astype(str),
        scores=timed.ranking.scores,
        seconds=timed.seconds,
    )


def _load_ranking(path: Path) -> Timed:
    data = np.load(path / "ranking.npz")
    return Timed(Ranking(data["ids"].astype(object), data["scores"]), data["seconds"])


def _save_query_vectors(value: QueryVectors, path: Path) -> None:
    np.savez(path / "queries.npz", vectors=value.vectors, seconds=value.seconds)


def _load_query_vectors(path: Path) -> QueryVectors:
    data = np.load(path / "queries.npz")
    return QueryVectors(data["vectors"], data["seconds"])


def _save_texts(texts: Sequence[str], path: Path) -> None:
    (path / "texts.json").write_text(json.dumps(list(texts)), "utf-8")


def _load_texts(path: Path) -> list[str]:
    texts: list[str] = json.loads((path / "texts.json").read_text("utf-8"))
    return texts


CHUNKS = Codec(_save_chunks, _load_chunks)
VECTORS = Codec(
    lambda v, p: np.save(p / "vectors.npy", v),
    lambda p: np.load(p / "vectors.npy", mmap_mode="r"),
)
RANKING = Codec(_save_ranking, _load_ranking)
QUERY_VECTORS = Codec(_save_query_vectors, _load_query_vectors)
TEXTS = Codec(_save_texts, _load_texts)
BM25_INDEX = Codec(lambda i, p: i.save(p / "index"), lambda p: BM25Index.load(p / "index"))


def dense_index_codec(store: ComponentConfig) -> Codec:
    """The codec of a dense store of ``store``'s kind (the registered class's ``load``)."""
    cls = cast("type[DenseStore]", components("dense").factory(store.kind))
    return Codec(lambda s, p: s.save(p / "index"), lambda p: cls.load(p / "index"))
