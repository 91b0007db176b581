"""Query-time work over many queries, timed per query.

A quality pass (every query of a sweep, or a ``RAGPipeline.search`` of many) runs searches,
fusion and query embedding ``QUALITY_BATCH`` queries per call, as fast as the stages allow; a
query's seconds are then its share of its batch's wall time. The latency of one query is what
the latency pass (``ragbench.experiment.latency``) measures: it runs these stages on one query
at a time, where batches are one query long.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from ragbench.protocols import Embedder
from ragbench.types import Ranking

__all__ = ["QUALITY_BATCH", "cpu_wait", "embed_queries", "per_query", "percentiles_ms", "rows"]

QUALITY_BATCH = 256
"""Queries per call of a batched stage: large enough that a call's overhead vanishes, small
enough that a batch of dense scores (queries × chunks) stays in memory."""


def per_query(
    step: Callable[[slice], Ranking], n: int, k: int, warm_up: bool = True, batch: int = 1
) -> tuple[Ranking, np.ndarray]:
    """Run ``step`` on ``batch`` queries at a time (a slice of rows), timing each call; a
    query's seconds are its share of its call's (its own call's when ``batch`` is 1).

    With ``warm_up``, one untimed call on the first query comes first, so loading a model or
    building an index lazily is not charged to the first query's latency.
    """
    if n and warm_up:
        step(slice(0, 1))
    ids = np.full((n, k), "", dtype=object)
    scores = np.full((n, k), -np.inf)
    seconds = np.zeros(n)
    size = max(1, batch)
    for start in range(0, n, size):
        rows = slice(start, min(n, start + size))
        began = time.perf_counter()
        part = step(rows)
        seconds[rows] = (time.perf_counter() - began) / (rows.stop - rows.start)
        width = min(k, part.depth)
        ids[rows, :width] = part.ids[:, :width]
        scores[rows, :width] = part.scores[:, :width]
    return Ranking(ids, scores), seconds


def embed_queries(
    embedder: Embedder, queries: Sequence[str], warm_up: bool = True, batch: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Query vectors, embedded ``batch`` per call and timed (a query's seconds: its share of
    its call's; with ``warm_up`` the model is loaded by an untimed call first)."""
    if queries and warm_up:
        embedder.embed([queries[0]], "query")
    seconds = np.zeros(len(queries))
    found = []
    size = max(1, batch)
    for start in range(0, len(queries), size):
        part = list(queries[start : start + size])
        began = time.perf_counter()
        found.append(embedder.embed(part, "query"))
        seconds[start : start + len(part)] = (time.perf_counter() - began) / len(part)
    dim = found[0].shape[1] if found else embedder.dimension
    vectors = np.concatenate(found) if found else np.zeros((0, dim), np.float32)
    return vectors, seconds


class _Schedstat:
    """One thread's ``/proc/thread-self/schedstat``, open: a read is then one ``pread`` (under
    a microsecond, where opening the file costs ~15 µs); closed with the thread."""

    def __init__(self) -> None:
        self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)

    def __del__(self) -> None:
        os.close(self.fd)


_threads = threading.local()


def cpu_wait() -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU — time other
    processes took from it (Linux schedstat; 0 where it is missing, so nothing is corrected)."""
    try:
        own = _threads.__dict__.get("schedstat")
        if own is None:
            own = _threads.schedstat = _Schedstat()
        return int(os.pread(own.fd, 128, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


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
