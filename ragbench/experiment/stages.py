"""The stages of a trial, each a content-addressed artifact in the stage cache.

A stage's key is the hash of its own config plus the keys of its inputs (corpus fingerprint,
upstream stage keys, model identity), so keys are known before anything is computed: a dry run
can tell which artifacts exist, and trials that share a prefix share its artifacts — on disk,
across processes and sessions, and in memory within a process.

Stages: chunks → document vectors → dense index → (query vectors →) dense ranking;
chunks → BM25 index → BM25 ranking; fused ranking; reranked ranking. Query vectors are their
own artifact (a text embedded as a query is not the same entry as the same text as a document)
and record the embedding time per query; every ranking records its search time per query, so
warm reruns report the latency measured when the artifact was built.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from ragbench.evaluate.labels import ChunkTable
from ragbench.index.cache import ArtifactCache, CachedEmbedder, EmbeddingCache
from ragbench.index.sparse import BM25Index
from ragbench.models import model_identity
from ragbench.protocols import Embedder
from ragbench.registry import ComponentConfig, registry
from ragbench.retrieve import retriever as stage_fns
from ragbench.text.chunkers import chunk_documents
from ragbench.types import Chunk, Document, Ranking

__all__ = ["QueryVectors", "StageCache", "Timed", "component_key", "stage_key"]

T = TypeVar("T")


def stage_key(stage: str, *parts: str | int) -> str:
    """Hash of a stage name and its inputs' keys."""
    payload = json.dumps([stage, *parts], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _models(value: Any) -> list[str]:
    """Every ``model`` string inside a config dump (nested components included)."""
    if isinstance(value, dict):
        found = [str(value["model"])] if isinstance(value.get("model"), str) else []
        return found + [m for v in value.values() for m in _models(v)]
    if isinstance(value, list | tuple):
        return [m for v in value for m in _models(v)]
    return []


def component_key(config: ComponentConfig) -> str:
    """Config hash plus the identity of every model it names (local files are hashed)."""
    models = _models(config.model_dump(mode="json"))
    return stage_key("component", config.key(), *(model_identity(m) for m in models))


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


@dataclass
class StageCache:
    """Artifacts on disk (``ArtifactCache``) plus an in-process memo, with hit counters."""

    root: Path
    hits: int = 0
    misses: int = 0
    build_seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.artifacts = ArtifactCache(self.root)
        self.embeddings = EmbeddingCache(self.root)
        self._memo: dict[tuple[str, str], Any] = {}

    def has(self, stage: str, key: str) -> bool:
        """Whether the artifact exists on disk."""
        return self.artifacts.has(stage, key)

    def get(
        self,
        stage: str,
        key: str,
        compute: Callable[[], T],
        save: Callable[[T, Path], None],
        load: Callable[[Path], T],
    ) -> T:
        """The artifact's value: from memory, from disk, or computed (timed) and stored."""
        if (stage, key) in self._memo:
            self.hits += 1
            return self._memo[(stage, key)]
        fresh: list[T] = []

        def build(tmp: Path) -> None:
            started = time.perf_counter()
            value = compute()
            seconds = time.perf_counter() - started
            save(value, tmp)
            (tmp / "meta.json").write_text(json.dumps({"seconds": seconds}), "utf-8")
            fresh.append(value)

        path, cached = self.artifacts.get_or_build(stage, key, build)
        if cached:
            self.hits += 1
            value = load(path)
        else:
            self.misses += 1
            value = fresh[0]
        meta = json.loads((path / "meta.json").read_text("utf-8"))
        self.build_seconds[f"{stage}:{key}"] = float(meta["seconds"])
        self._memo[(stage, key)] = value
        return value

    def recorded_seconds(self, stage: str, key: str) -> float:
        """Build time recorded with an artifact (0 when it does not exist)."""
        if f"{stage}:{key}" in self.build_seconds:
            return self.build_seconds[f"{stage}:{key}"]
        meta = self.artifacts.path(stage, key) / "meta.json"
        return float(json.loads(meta.read_text("utf-8"))["seconds"]) if meta.is_file() else 0.0

    # ------------------------------------------------------------ stages

    def chunks(
        self, key: str, docs: Sequence[Document], chunker: ComponentConfig
    ) -> tuple[list[Chunk], ChunkTable]:
        """Chunks of the corpus and their offset table."""
        chunks = self.get(
            "chunks",
            key,
            lambda: chunk_documents(registry("chunker").build(chunker), docs),
            _save_chunks,
            _load_chunks,
        )
        if ("table", key) not in self._memo:
            self._memo[("table", key)] = ChunkTable.from_chunks(chunks)
        return chunks, self._memo[("table", key)]

    def doc_vectors(self, key: str, chunks: Sequence[Chunk], embedder: Embedder) -> np.ndarray:
        """Document vectors of the chunks (texts seen before come from the embedding cache)."""
        cached = CachedEmbedder(embedder, self.embeddings)
        return self.get(
            "doc_vectors",
            key,
            lambda: cached.embed([c.text for c in chunks], "document"),
            lambda v, p: np.save(p / "vectors.npy", v),
            lambda p: np.load(p / "vectors.npy", mmap_mode="r"),
        )

    def dense_index(
        self, key: str, chunks: Sequence[Chunk], vectors: np.ndarray, store: ComponentConfig
    ) -> Any:
        """A dense store over the document vectors."""

        def build() -> Any:
            index = registry("dense").build(store)
            index.add([c.id for c in chunks], np.asarray(vectors), [c.metadata for c in chunks])
            return index

        cls = registry("dense").factory(store.kind)
        return self.get(
            "dense_index",
            key,
            build,
            lambda s, p: s.save(p / "index"),
            lambda p: cls.load(p / "index"),
        )

    def query_vectors(self, key: str, texts: Sequence[str], embedder: Embedder) -> QueryVectors:
        """Query vectors, embedded one query at a time so the latency is honest."""
        return self.get(
            "query_vectors",
            key,
            lambda: QueryVectors(*stage_fns.embed_queries(embedder, texts)),
            _save_vectors,
            _load_vectors,
        )

    def bm25_index(self, key: str, chunks: Sequence[Chunk], config: ComponentConfig) -> BM25Index:
        """A BM25 index over the chunk texts."""

        def build() -> BM25Index:
            index = BM25Index(config)  # type: ignore[arg-type]
            index.add(
                [c.id for c in chunks], [c.text for c in chunks], [c.metadata for c in chunks]
            )
            index.search(["warm up"], 1)  # builds the backend index inside the timed step
            return index

        return self.get(
            "bm25_index",
            key,
            build,
            lambda i, p: i.save(p / "index"),
            lambda p: BM25Index.load(p / "index"),
        )

    def ranking(
        self, stage: str, key: str, compute: Callable[[], tuple[Ranking, np.ndarray]]
    ) -> Timed:
        """A ranking stage (dense, bm25, fused, reranked) with per-query seconds."""
        return self.get(stage, key, lambda: Timed(*compute()), _save_ranking, _load_ranking)


def _save_chunks(chunks: Sequence[Chunk], path: Path) -> None:
    frame = pd.DataFrame(
        {
            "id": [c.id for c in chunks],
            "doc_id": [c.doc_id for c in chunks],
            "index": np.array([c.index for c in chunks], dtype=np.int64),
            "start": np.array([c.start for c in chunks], dtype=np.int64),
            "end": np.array([c.end for c in chunks], dtype=np.int64),
            "text": [c.text for c in chunks],
            "metadata": [json.dumps(c.metadata, ensure_ascii=False) for c in chunks],
        }
    )
    frame.to_parquet(path / "chunks.parquet", index=False)


def _load_chunks(path: Path) -> list[Chunk]:
    frame = pd.read_parquet(path / "chunks.parquet")
    return [
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


def _save_vectors(value: QueryVectors, path: Path) -> None:
    np.savez(path / "queries.npz", vectors=value.vectors, seconds=value.seconds)


def _load_vectors(path: Path) -> QueryVectors:
    data = np.load(path / "queries.npz")
    return QueryVectors(data["vectors"], data["seconds"])
