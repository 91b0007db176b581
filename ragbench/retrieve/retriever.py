"""First-stage retrievers — the ``retriever`` axis: ``bm25``, ``dense`` and ``hybrid``.

Each kind plans its query-time stages (see ``ragbench.retrieve.graph``): ``bm25`` searches a BM25
index of the trial's chunks; ``dense`` embeds the queries with the trial's embedder and searches a
dense store of the chunks' vectors; ``hybrid`` does both, ``depth`` candidates each, and fuses
them. With ``bm25_chunker`` the BM25 side indexes another chunking of the corpus (e.g. whole
documents while the dense side sees passages) and the two lists are fused per document.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.protocols import DenseStore, Fusion
from ragbench.registry import ComponentConfig, component_field, components
from ragbench.retrieve.artifacts import (
    RANKING,
    ChunkSet,
    Queries,
    QueryVectors,
    Timed,
    query_texts,
)
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, component_key
from ragbench.retrieve.timed import QUALITY_BATCH, per_query, rows
from ragbench.text.chunk_table import ChunkTable, document_ranking, first_rows
from ragbench.types import Ranking

__all__ = [
    "BM25RetrieverConfig",
    "DenseRetrieverConfig",
    "HybridRetrieverConfig",
    "bm25_search",
    "dense_search",
    "fuse",
    "fuse_documents",
]


def bm25_search(
    g: PlanBuilder, config: BM25Config, k: int, chunker: ComponentConfig | None = None
) -> str:
    """Plan a BM25 search (top ``k`` per query) over the chunks of ``chunker``."""

    def compute(env: Env, index: BM25Index, queries: Sequence[str] | Queries) -> Timed:
        texts = query_texts(queries)
        terms = queries.terms if isinstance(queries, Queries) else None

        def step(s: slice) -> Ranking:
            if terms is not None:  # weighted terms (pseudo-relevance feedback)
                return index.search_weighted(terms[s], k, env.filter)
            return index.search(texts[s], k, env.filter)

        return Timed(*per_query(step, len(texts), k, env.warm_up, QUALITY_BATCH))

    inputs = (g.bm25_index(config, chunker), g.queries)
    found = g.add("bm25", "bm25", inputs, (k,), compute, RANKING, latency="bm25", config=config)
    g.lists.append(("bm25", found))
    return found


def dense_search(g: PlanBuilder, store: ComponentConfig, k: int) -> str:
    """Plan a dense search (top ``k`` per query) of the trial's embedder and chunks."""

    def compute(env: Env, index: DenseStore, queries: QueryVectors) -> Timed:
        vectors = queries.vectors

        def step(s: slice) -> Ranking:
            return index.search(vectors[s], k, env.filter)

        return Timed(*per_query(step, len(vectors), k, env.warm_up, QUALITY_BATCH))

    inputs = (g.dense_index(store), g.query_vectors())
    found = g.add("dense", "dense", inputs, (k,), compute, RANKING, latency="dense", config=store)
    g.lists.append(("dense", found))
    return found


def fuse(
    fusion: Fusion, rankings: Sequence[Ranking], k: int, warm_up: bool = True
) -> tuple[Ranking, np.ndarray]:
    """Fused top-k per query, timed per query (in batches)."""
    n = len(rankings[0].ids)

    def step(s: slice) -> Ranking:
        return fusion.fuse([rows(r, s) for r in rankings], k)

    return per_query(step, n, k, warm_up, QUALITY_BATCH)


def fuse_documents(
    fusion: Fusion,
    dense: Ranking,
    table: ChunkTable,
    bm25: Ranking,
    bm25_table: ChunkTable,
    depth: int,
    k: int,
    warm_up: bool = True,
) -> tuple[Ranking, np.ndarray]:
    """Fuse two chunkings per document — the top ``depth`` documents of each list, as the
    hybrid's ``depth`` promises — then show each document by its best dense chunk (or, when
    the dense list missed it, its first chunk)."""
    lists = [document_ranking(dense, table), document_ranking(bm25, bm25_table)]
    fused, seconds = fuse(fusion, [ranking.head(depth) for ranking in lists], k, warm_up)
    ids = np.full((len(fused.ids), k), "", dtype=object)
    scores = np.full((len(fused.ids), k), -np.inf)
    if len(table) == 0:
        return Ranking(ids, scores), seconds
    shown = _shown_chunks(fused.ids, dense, table)
    known = shown >= 0  # a document this chunking left without chunks drops out
    r, c = np.nonzero(known)
    place = (np.cumsum(known, axis=1) - 1)[r, c]
    ids[r, place] = table.ids[shown[r, c]]
    scores[r, place] = fused.scores[r, c]
    return Ranking(ids, scores), seconds


def _shown_chunks(docs: np.ndarray, dense: Ranking, table: ChunkTable) -> np.ndarray:
    """Per document of ``docs`` (a ranking's ids, one row per query), the row in ``table`` of
    its first chunk in that query's ``dense`` list, else of its first chunk in the table; -1
    for padding and documents without chunks in ``table`` (which must not be empty)."""
    names, codes = table.doc_names, table.doc_codes
    code = np.searchsorted(names, docs).clip(0, len(names) - 1)
    known = (docs != "") & (names[code] == docs)
    shown = np.where(known, np.unique(codes, return_index=True)[1][code], -1)
    best = first_rows(table.rows(dense.ids), key=codes)
    query, column = np.nonzero(best >= 0)
    if len(query) == 0:
        return shown
    best_rows = best[query, column]
    keys = query * len(names) + codes[best_rows]  # (query, document), unique
    order = np.argsort(keys)
    keys, best_rows = keys[order], best_rows[order]
    wanted = np.arange(len(docs))[:, None] * len(names) + code
    at = np.searchsorted(keys, wanted).clip(0, len(keys) - 1)
    return np.where(known & (keys[at] == wanted), best_rows[at], shown)


def _default(family: str, kind: str) -> Any:
    return Field(default_factory=lambda: components(family).parse({"kind": kind}))


class BM25RetrieverConfig(BM25Config, StepConfig):
    """BM25 over the trial's chunks (the BM25 options inline)."""

    colour: ClassVar[int | None] = 0

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """One BM25 search of ``k`` hits."""
        return bm25_search(g, self, k)


class DenseRetrieverConfig(StepConfig):
    """Dense first stage over the trial's embedder."""

    uses: ClassVar[frozenset[str]] = frozenset({"embedder"})
    colour: ClassVar[int | None] = 1
    kind: Literal["dense"] = "dense"
    store: component_field("dense") = _default("dense", "exact")  # type: ignore[valid-type]

    def score_scale(self) -> str | None:
        """Its store's similarity."""
        return self.store.score_scale()

    def ranks_by(self, trial: Mapping[str, ComponentConfig]) -> ComponentConfig | None:
        """The trial's embedder: its hits are ordered by their vectors' similarity alone."""
        return trial.get("embedder")

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """One dense search of ``k`` hits."""
        return dense_search(g, self.store, k)


class HybridRetrieverConfig(StepConfig):
    """Dense and BM25 first stages, ``depth`` candidates each, fused into one ranking."""

    uses: ClassVar[frozenset[str]] = frozenset({"embedder"})
    colour: ClassVar[int | None] = 2
    kind: Literal["hybrid"] = "hybrid"
    store: component_field("dense") = _default("dense", "exact")  # type: ignore[valid-type]
    bm25: BM25Config = Field(default_factory=BM25Config)
    fusion: component_field("fusion") = _default("fusion", "rrf")  # type: ignore[valid-type]
    depth: int = Field(100, gt=0)
    bm25_chunker: component_field("chunker") | None = None  # type: ignore[valid-type]
    """BM25 over another chunking of the corpus (e.g. whole documents while the dense side sees
    passages); both lists are then fused per document, each document scored by its best chunk
    in each list and represented by its best dense chunk."""

    def score_scale(self) -> str | None:
        """Its fusion's scale."""
        return self.fusion.score_scale() or "fused score"

    def parts(self) -> dict[str, ComponentConfig]:
        """Its BM25 and its dense side alone, over its own indexes (none with a
        ``bm25_chunker``: the BM25 side then indexes other chunks than the ranking shows)."""
        if self.bm25_chunker is not None:
            return {}
        retrievers = components("retriever")
        store = self.store.model_dump(mode="json")
        sides = (self.bm25.model_dump(mode="json"), {"kind": "dense", "store": store})
        return {side.kind: side for side in map(retrievers.parse, sides)}

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """Dense and BM25 searches of ``max(depth, k)`` hits each, fused to ``k``."""
        first = max(self.depth, k)
        lists = (
            dense_search(g, self.store, first),
            bm25_search(g, self.bm25, first, self.bm25_chunker),
        )
        fusion = self.fusion
        if self.bm25_chunker is None:

            def compute(env: Env, dense: Timed, bm25: Timed) -> Timed:
                component = env.component("fusion", fusion)
                return Timed(*fuse(component, [dense.ranking, bm25.ranking], k, env.warm_up))

            parts: tuple[str | int, ...] = (component_key(fusion), k)
            return g.add("fusion", "fusion", lists, parts, compute, RANKING, latency="fusion")
        depth = self.depth

        def per_document(
            env: Env, dense: Timed, bm25: Timed, chunks: ChunkSet, lexical: ChunkSet
        ) -> Timed:
            component = env.component("fusion", fusion)
            return Timed(
                *fuse_documents(
                    component,
                    dense.ranking,
                    chunks.table,
                    bm25.ranking,
                    lexical.table,
                    depth,
                    k,
                    env.warm_up,
                )
            )

        inputs = (*lists, g.chunks(), g.chunks(self.bm25_chunker))
        parts = (component_key(fusion), k, "documents", depth)
        return g.add("fusion", "fusion", inputs, parts, per_document, RANKING, latency="fusion")


_RETRIEVERS = components("retriever")
for _config in (BM25RetrieverConfig, DenseRetrieverConfig, HybridRetrieverConfig):
    _RETRIEVERS.register_config(_config)
