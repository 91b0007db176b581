"""Retriever composition: dense | bm25 | hybrid (both + fusion) → reranker → threshold → top-k.

The retriever kinds (registry family ``retriever``) are what a sweep's ``retriever`` axis names:
``bm25`` (BM25 options inline), ``dense`` (a dense store; the embedder is the trial's), and
``hybrid`` (a store, BM25 options and a fusion, each with ``depth`` candidates per list).

Each stage runs query by query and records its wall time per query, because the question users
ask is the latency of one query, not the throughput of a batch. The stage functions here are
shared by ``Retriever`` (applications) and the experiment engine (which caches between them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field

from ragbench.errors import ConfigError
from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.protocols import DenseStore, Embedder, Fusion, Reranker, SparseIndex
from ragbench.registry import ComponentConfig, component_field, registry
from ragbench.types import Chunk, Ranking

__all__ = [
    "DenseRetrieverConfig",
    "HybridRetrieverConfig",
    "Retrieval",
    "Retriever",
    "apply_threshold",
    "dense_search",
    "embed_queries",
    "fuse",
    "per_query",
    "rerank",
    "sparse_search",
]

Filter = Mapping[str, Any] | None


class DenseRetrieverConfig(ComponentConfig):
    """Dense first stage over the trial's embedder."""

    kind: Literal["dense"] = "dense"
    store: component_field("dense") = Field(  # type: ignore[valid-type]
        default_factory=lambda: registry("dense").parse({"kind": "exact"})
    )


class HybridRetrieverConfig(ComponentConfig):
    """Dense and BM25 first stages, ``depth`` candidates each, fused into one ranking."""

    kind: Literal["hybrid"] = "hybrid"
    store: component_field("dense") = Field(  # type: ignore[valid-type]
        default_factory=lambda: registry("dense").parse({"kind": "exact"})
    )
    bm25: BM25Config = Field(default_factory=BM25Config)
    fusion: component_field("fusion") = Field(  # type: ignore[valid-type]
        default_factory=lambda: registry("fusion").parse({"kind": "rrf"})
    )
    depth: int = Field(100, gt=0)
    bm25_chunker: component_field("chunker") | None = None  # type: ignore[valid-type]
    """In sweeps: BM25 over another chunking of the corpus (e.g. whole documents while the dense
    side sees passages); both lists are then fused per document, each document scored by its
    best chunk in each list and represented by its best dense chunk."""


@dataclass
class Retrieval:
    """A ranking plus the wall time of every stage, in seconds per query."""

    ranking: Ranking
    timings: dict[str, np.ndarray] = field(default_factory=dict)

    def latency_ms(self) -> dict[str, tuple[float, float]]:
        """(p50, p95) in milliseconds per stage, and for the total."""
        out = {s: _p50_p95(t) for s, t in self.timings.items()}
        if self.timings:
            out["total"] = _p50_p95(np.sum(list(self.timings.values()), axis=0))
        return out


def _p50_p95(seconds: np.ndarray) -> tuple[float, float]:
    if len(seconds) == 0:
        return (0.0, 0.0)
    p50, p95 = np.percentile(seconds * 1000.0, [50, 95])
    return float(p50), float(p95)


def per_query(step: Callable[[slice], Ranking], n: int, k: int) -> tuple[Ranking, np.ndarray]:
    """Run ``step`` on each query alone (a one-row slice), timing each call.

    One untimed call on the first query comes first, so loading a model or building an index
    lazily is not charged to the first query's latency.
    """
    if n:
        step(slice(0, 1))
    ids = np.full((n, k), "", dtype=object)
    scores = np.full((n, k), -np.inf)
    seconds = np.zeros(n)
    for i in range(n):
        started = time.perf_counter()
        part = step(slice(i, i + 1))
        seconds[i] = time.perf_counter() - started
        width = min(k, part.depth)
        ids[i, :width] = part.ids[0, :width]
        scores[i, :width] = part.scores[0, :width]
    return Ranking(ids, scores), seconds


def embed_queries(embedder: Embedder, queries: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors, each embedded alone and timed (seconds per query; the model is loaded
    by an untimed call first)."""
    if queries:
        embedder.embed([queries[0]], "query")
    seconds = np.zeros(len(queries))
    rows = []
    for i, text in enumerate(queries):
        started = time.perf_counter()
        rows.append(embedder.embed([text], "query"))
        seconds[i] = time.perf_counter() - started
    dim = rows[0].shape[1] if rows else embedder.dimension
    vectors = np.concatenate(rows) if rows else np.zeros((0, dim), np.float32)
    return vectors, seconds


def dense_search(
    store: DenseStore, vectors: np.ndarray, k: int, filter: Filter = None
) -> tuple[Ranking, np.ndarray]:
    """Top-k per query vector from a dense store, timed per query."""
    return per_query(lambda s: store.search(vectors[s], k, filter), len(vectors), k)


def sparse_search(
    index: SparseIndex, queries: Sequence[str], k: int, filter: Filter = None
) -> tuple[Ranking, np.ndarray]:
    """Top-k per query text from a lexical index, timed per query."""
    return per_query(lambda s: index.search(queries[s], k, filter), len(queries), k)


def fuse(fusion: Fusion, rankings: Sequence[Ranking], k: int) -> tuple[Ranking, np.ndarray]:
    """Fused top-k per query, timed per query."""
    n = len(rankings[0].ids)
    return per_query(lambda s: fusion.fuse([_rows(r, s) for r in rankings], k), n, k)


def rerank(
    reranker: Reranker,
    queries: Sequence[str],
    ranking: Ranking,
    texts: Mapping[str, str],
    k: int,
) -> tuple[Ranking, np.ndarray]:
    """Reranked top-k per query, timed per query.

    A reranker rescores only its ``candidates``; when ``k`` is larger, the first-stage hits
    after them follow in their original order, scored below every reranked hit (so recall@k
    keeps the first stage's depth, as in BEIR's reranking setup).
    """

    def step(s: slice) -> Ranking:
        rows = _rows(ranking, s)
        return _with_tail(reranker.rerank(queries[s], rows, texts, k), rows, k)

    return per_query(step, len(queries), k)


def _with_tail(head: Ranking, first: Ranking, k: int) -> Ranking:
    """One-row ``head`` followed by the rest of ``first`` (up to ``k``), scored below it."""
    hits = head.row(0)
    taken = {c for c, _ in hits}
    tail = [c for c, _ in first.row(0) if c not in taken][: k - len(hits)]
    if not tail:
        return head
    floor = min((s for _, s in hits), default=0.0)
    rows = hits + [(c, floor - 1.0 - i) for i, c in enumerate(tail)]
    return Ranking.from_rows([rows], k)


def _rows(ranking: Ranking, s: slice) -> Ranking:
    return Ranking(ranking.ids[s], ranking.scores[s])


def apply_threshold(ranking: Ranking, threshold: float | None) -> Ranking:
    """Pad away hits scoring below ``threshold`` (None keeps everything)."""
    if threshold is None:
        return ranking
    drop = ranking.scores < threshold
    return Ranking(np.where(drop, "", ranking.ids), np.where(drop, -np.inf, ranking.scores))


class Retriever:
    """Indexes chunks and answers batches of queries through the configured stages.

    Which first stages run follows from what is given: a dense ``store`` (needs ``embedder``),
    a ``sparse`` index, or both (then ``fusion`` combines ``depth`` candidates of each).
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        store: DenseStore | None = None,
        sparse: SparseIndex | None = None,
        fusion: Fusion | None = None,
        reranker: Reranker | None = None,
        depth: int = 100,
        score_threshold: float | None = None,
    ) -> None:
        if store is None and sparse is None:
            raise ValueError("a retriever needs a dense store, a sparse index, or both")
        if store is not None and embedder is None:
            raise ValueError("a dense store needs an embedder")
        if store is not None and sparse is not None and fusion is None:
            fusion = registry("fusion").build({"kind": "rrf"})
        self.embedder, self.store, self.sparse = embedder, store, sparse
        self.fusion, self.reranker = fusion, reranker
        self.depth, self.score_threshold = depth, score_threshold
        self.texts: dict[str, str] = {}

    @classmethod
    def from_config(
        cls,
        config: ComponentConfig | Mapping[str, Any],
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        score_threshold: float | None = None,
    ) -> Retriever:
        """Build from a ``retriever`` spec (``bm25`` / ``dense`` / ``hybrid``)."""
        config = registry("retriever").parse(config)
        if isinstance(config, BM25Config):
            return cls(sparse=BM25Index(config), reranker=reranker, score_threshold=score_threshold)
        store = registry("dense").build(config.store)
        if getattr(config, "bm25_chunker", None) is not None:
            raise ConfigError(
                "retriever.bm25_chunker: only sweeps fuse two chunkings; a Retriever indexes one"
            )
        if isinstance(config, DenseRetrieverConfig):
            return cls(embedder, store, reranker=reranker, score_threshold=score_threshold)
        return cls(
            embedder,
            store,
            BM25Index(config.bm25),
            registry("fusion").build(config.fusion),
            reranker,
            config.depth,
            score_threshold,
        )

    def add(self, chunks: Sequence[Chunk], vectors: np.ndarray | None = None) -> None:
        """Index chunks (vectors are computed with the embedder unless given)."""
        if not chunks:
            return
        ids = [c.id for c in chunks]
        metadata = [c.metadata for c in chunks]
        if self.store is not None:
            if vectors is None:
                assert self.embedder is not None  # guaranteed by __init__
                vectors = self.embedder.embed([c.text for c in chunks], "document")
            self.store.add(ids, vectors, metadata)
        if self.sparse is not None:
            self.sparse.add(ids, [c.text for c in chunks], metadata)
        self.texts.update((c.id, c.text) for c in chunks)

    def delete(self, ids: Sequence[str]) -> None:
        """Remove chunk ids from every index."""
        for index in (self.store, self.sparse):
            if index is not None:
                index.delete(ids)
        for id_ in ids:
            self.texts.pop(id_, None)

    def search(self, queries: Sequence[str], k: int, filter: Filter = None) -> Retrieval:
        """Top-k chunk ids per query, with per-stage timings."""
        timings: dict[str, np.ndarray] = {}
        want = max(k, getattr(getattr(self.reranker, "config", None), "candidates", k))
        hybrid = self.store is not None and self.sparse is not None
        first_k = max(self.depth, want) if hybrid else want
        lists = []
        if self.store is not None:
            assert self.embedder is not None  # guaranteed by __init__
            vectors, timings["embed_query"] = embed_queries(self.embedder, queries)
            ranking, timings["dense"] = dense_search(self.store, vectors, first_k, filter)
            lists.append(ranking)
        if self.sparse is not None:
            ranking, timings["bm25"] = sparse_search(self.sparse, queries, first_k, filter)
            lists.append(ranking)
        if len(lists) == 2:
            assert self.fusion is not None  # guaranteed by __init__
            ranking, timings["fusion"] = fuse(self.fusion, lists, want)
        if self.reranker is not None:
            ranking, timings["rerank"] = rerank(self.reranker, queries, ranking, self.texts, k)
        ranking = apply_threshold(ranking.head(k), self.score_threshold)
        return Retrieval(ranking, timings)


_RETRIEVERS = registry("retriever")
_RETRIEVERS.register(BM25Config)(Retriever.from_config)
_RETRIEVERS.register(DenseRetrieverConfig)(Retriever.from_config)
_RETRIEVERS.register(HybridRetrieverConfig)(Retriever.from_config)
