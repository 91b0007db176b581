"""Query-time work done one query at a time, timed per query.

The question users ask is the latency of one query, not the throughput of a batch, so every
query-time stage runs each query alone and records its wall time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ragbench.protocols import Embedder
from ragbench.types import Ranking

__all__ = ["embed_queries", "per_query", "percentiles_ms", "rows"]


def per_query(
    step: Callable[[slice], Ranking], n: int, k: int, warm_up: bool = True
) -> tuple[Ranking, np.ndarray]:
    """Run ``step`` on each query alone (a one-row slice), timing each call.

    With ``warm_up``, one untimed call on the first query comes first, so loading a model or
    building an index lazily is not charged to the first query's latency.
    """
    if n and warm_up:
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


def embed_queries(
    embedder: Embedder, queries: Sequence[str], warm_up: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors, each embedded alone and timed (seconds per query; with ``warm_up`` the
    model is loaded by an untimed call first)."""
    if queries and warm_up:
        embedder.embed([queries[0]], "query")
    seconds = np.zeros(len(queries))
    found = []
    for i, text in enumerate(queries):
        started = time.perf_counter()
        found.append(embedder.embed([text], "query"))
        seconds[i] = time.perf_counter() - started
    dim = found[0].shape[1] if found else embedder.dimension
    vectors = np.concatenate(found) if found else np.zeros((0, dim), np.float32)
    return vectors, seconds


def rows(ranking: Ranking, s: slice) -> Ranking:
    """The rows ``s`` of ``ranking``."""
    return Ranking(ranking.ids[s], ranking.scores[s])


def percentiles_ms(seconds: np.ndarray | Sequence[float]) -> tuple[float, float]:
    """(p50, p95) of per-query seconds, in milliseconds; NaN for no queries."""
    values = np.asarray(seconds, dtype=np.float64)
    if len(values) == 0:
        return float("nan"), float("nan")
    p50, p95 = np.percentile(values * 1000.0, [50, 95])
    return float(p50), float(p95)
