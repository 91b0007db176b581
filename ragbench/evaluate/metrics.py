"""Rank metrics with trec_eval's exact semantics, vectorised over queries: ``evaluate`` (a
ranking matrix) and ``evaluate_run`` (a TREC-style run), and the rank kernels they compute.

The metrics themselves — names, aliases, cutoffs, levels, directions, parsing — are rows of the
metric table (``ragbench.evaluate.metric_table``); the rank metrics register there from here:
``ndcg@k``, ``recall@k``, ``precision@k`` (``p@k``), ``mrr`` / ``mrr@k``, ``map`` / ``map@k``,
``hit_rate@k`` (``success@k``), ``r_precision``. The table's names are importable from here
too (``from ragbench.evaluate.metrics import MetricSpec, register_metric``), as they always
were.

trec_eval semantics: each query's results are ordered by score descending, then document id
descending (byte order), whatever order they come in; a repeated id keeps its first occurrence.
A document is relevant when its grade is >= ``relevance_level`` (trec_eval ``-l``, >= 1). nDCG
uses the grades themselves as gains (grades <= 0 gain nothing) whatever the relevance level, as
trec_eval's ``ndcg_cut`` does. A query with judgements but no results scores 0 everywhere, and
so does a query without relevant judgements. Which queries to score is the caller's choice
(``query_ids``); ``evaluate_run`` defaults to those with a relevant judgement
(``relevant_query_ids``), since the others can only score 0. trec_eval itself scores every query
present in both qrels and run, or every qrels query with ``-c``.

How: document ids become an Arrow string array; one stable Arrow sort by (query, score desc,
id desc) gives every result its rank; a hash lookup (``index_in``) plus a binary search over
integer (query, document) keys finds the judged ones (``RankedHits``). Every rank kernel is then
a few array operations over the retrieved *judged* documents only, so cost grows with the run
size once, not with the number of metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ragbench.data.labeled import Qrels
from ragbench.evaluate.metric_table import (
    MAX_CUTOFF,
    TIE_RTOL,
    Cutoff,
    Metric,
    MetricLevel,
    MetricNamespace,
    MetricSpec,
    Need,
    _add,
    _rank_metrics,
    _ratio,
    allowed_forms,
    best_first,
    best_index,
    best_indices,
    higher_is_better,
    metric_table,
    parse_metric,
    parse_metrics,
    register_metric,
    register_namespace,
    unregister_metric,
)
from ragbench.types import Ranking

__all__ = [  # the metric table's names as well: the place users have always imported them from
    "MAX_CUTOFF",
    "TIE_RTOL",
    "Cutoff",
    "Judgements",
    "Metric",
    "MetricLevel",
    "MetricNamespace",
    "MetricSpec",
    "Need",
    "RankKernel",
    "RankedHits",
    "allowed_forms",
    "best_first",
    "best_index",
    "best_indices",
    "evaluate",
    "evaluate_run",
    "higher_is_better",
    "mean",
    "metric_table",
    "parse_metric",
    "parse_metrics",
    "register_metric",
    "register_namespace",
    "relevant_query_ids",
    "unregister_metric",
]


def relevant_query_ids(qrels: Qrels, relevance_level: int = 1) -> list[str]:
    """Query ids (in qrels order) with at least one judgement of grade >= ``relevance_level``."""
    return [q for q, judged in qrels.items() if any(g >= relevance_level for g in judged.values())]


def mean(values: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Mean over queries of each metric's per-query values (NaN for no queries)."""
    return {name: float(v.mean()) if len(v) else float("nan") for name, v in values.items()}


def evaluate(
    qrels: Qrels,
    ranking: Ranking,
    query_ids: Sequence[str],
    metrics: Sequence[str | Metric],
    relevance_level: int = 1,
) -> dict[str, np.ndarray]:
    """Per-query values of ranking metrics; row ``i`` of ``ranking`` is ``query_ids[i]``.

    Ids in the ranking are document ids (padding ``""`` is skipped). Returns canonical metric
    name → float array aligned with ``query_ids``, so ``pandas.DataFrame(result,
    index=query_ids)`` is the per-query table. Every query in ``query_ids`` is scored, those
    without relevant judgements as 0 (``relevant_query_ids`` lists the others).
    """
    parsed = _rank_metrics(metrics)
    ids, scores = np.asarray(ranking.ids), np.asarray(ranking.scores, dtype=np.float64)
    if ids.ndim != 2 or ids.shape != scores.shape or ids.shape[0] != len(query_ids):
        raise ValueError(
            f"ranking ids {ids.shape} and scores {scores.shape} must both be "
            f"(len(query_ids)={len(query_ids)}, depth)"
        )
    present = ids != ""
    rows = np.repeat(np.arange(len(ids)), present.sum(axis=1))
    entries = _Entries(rows, _strings(ids[present]), scores[present])
    entries = entries.take(_first_occurrences(entries))
    return _evaluate_entries(qrels, entries, query_ids, parsed, relevance_level)


def evaluate_run(
    qrels: Qrels,
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str | Metric],
    relevance_level: int = 1,
    query_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-query metrics of a TREC-style run (query id → doc id → score) as a DataFrame.

    Rows are ``query_ids``, by default the queries of ``qrels`` with a relevant judgement
    (``list(qrels)`` is trec_eval ``-c``); a query missing from the run scores 0. Columns are the
    canonical metric names; ``frame.mean()`` gives the averages.
    """
    parsed = _rank_metrics(metrics)
    if query_ids is None:
        query_ids = relevant_query_ids(qrels, relevance_level)
    results = [run.get(q) or {} for q in query_ids]
    counts = np.fromiter(map(len, results), dtype=np.int64, count=len(results))
    total = int(counts.sum())
    entries = _Entries(
        rows=np.repeat(np.arange(len(results)), counts),
        ids=_strings(list(chain.from_iterable(results))),
        scores=np.fromiter(
            chain.from_iterable(r.values() for r in results), dtype=np.float64, count=total
        ),
    )
    values = _evaluate_entries(qrels, entries, query_ids, parsed, relevance_level)
    return pd.DataFrame(values, index=pd.Index(list(query_ids), name="query_id"))


def _strings(values: Sequence[str] | np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.string())


class _Entries(NamedTuple):
    """Flat run entries: query row, document id, score."""

    rows: np.ndarray
    ids: pa.Array
    scores: np.ndarray

    def take(self, index: np.ndarray | None) -> _Entries:
        if index is None:
            return self
        return _Entries(self.rows[index], self.ids.take(pa.array(index)), self.scores[index])


def _first_occurrences(entries: _Entries) -> np.ndarray | None:
    """Indices of the first occurrence of each (query, id), or None when there are no repeats.

    A stable sort by (query, id) puts repeats next to each other, earliest first.
    """
    if len(entries.rows) < 2:
        return None
    table = pa.table({"row": entries.rows, "id": entries.ids})
    order = pc.sort_indices(table, sort_keys=[("row", "ascending"), ("id", "ascending")])
    rows, ids = entries.rows[order.to_numpy()], entries.ids.take(order)
    repeat = (rows[1:] == rows[:-1]) & pc.equal(ids[1:], ids[:-1]).to_numpy(zero_copy_only=False)
    if not repeat.any():
        return None
    keep = np.ones(len(rows), dtype=bool)
    keep[order.to_numpy()[1:][repeat]] = False
    return np.flatnonzero(keep)


@dataclass(frozen=True, eq=False)
class Judgements:
    """The qrels of the evaluated queries, as a rank kernel sees them (query ``i`` is row ``i``).

    Every judgement, sorted by its integer key ``row * len(docs) + index of the document in
    docs``: ``rows``, ``keys``, ``grades``. Per query: ``num_rel``, the number of judged
    documents with grade >= the relevance level (floats). ``ideal_gains(depth)``: the best
    gains for ideal DCG.
    """

    docs: pa.Array
    rows: np.ndarray
    keys: np.ndarray
    grades: np.ndarray
    num_rel: np.ndarray

    @cached_property
    def _best_first(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Judgements by (query, gain descending): row, position within the query, gain."""
        gains = np.maximum(self.grades, 0)
        order = np.lexsort((-gains, self.rows))
        rows = self.rows[order]
        return rows, np.arange(len(rows)) - np.searchsorted(rows, rows), gains[order]

    def ideal_gains(self, depth: int) -> np.ndarray:
        """Each query's ``depth`` best gains (grades, <= 0 gaining nothing), descending, as a
        zero-padded ``(n_queries, depth)`` matrix."""
        rows, position, gains = self._best_first
        top = position < depth
        ideal = np.zeros((len(self.num_rel), depth), dtype=np.float64)
        ideal[rows[top], position[top]] = gains[top]
        return ideal


def _judgements(qrels: Qrels, query_ids: Sequence[str], relevance_level: int) -> Judgements:
    judgements = [qrels.get(q) or {} for q in query_ids]
    counts = np.fromiter(map(len, judgements), dtype=np.int64, count=len(judgements))
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(judgements)), counts)
    grades = np.fromiter(
        chain.from_iterable(j.values() for j in judgements), dtype=np.int64, count=total
    )
    encoded = _strings(list(chain.from_iterable(judgements))).dictionary_encode()
    docs = encoded.dictionary
    keys = rows * len(docs) + encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(keys, kind="stable")
    num_rel = np.bincount(rows, weights=grades >= relevance_level, minlength=len(judgements))
    return Judgements(docs, rows[order], keys[order], grades[order], num_rel)


class RankedHits(NamedTuple):
    """The retrieved documents that are judged, as a rank kernel sees a ranking.

    One entry per retrieved judged document, in (query, rank) order: ``rows`` (query index),
    ``ranks`` (0-based position among the query's results in trec_eval order, unjudged
    documents included), ``grades`` and ``relevant`` (grade >= the relevance level).
    """

    rows: np.ndarray
    ranks: np.ndarray
    grades: np.ndarray
    relevant: np.ndarray

    def within(self, k: int | None) -> RankedHits:
        """The hits ranked in the top ``k`` (all of them when ``k`` is None)."""
        if k is None:
            return self
        keep = self.ranks < k
        return RankedHits(*(a[keep] for a in self))

    def relevant_only(self) -> RankedHits:
        """The relevant hits."""
        return RankedHits(*(a[self.relevant] for a in self))


RankKernel = Callable[[RankedHits, Judgements, int | None, int], np.ndarray]
"""``kernel(hits, judged, k, n)``: per-query values (float array of length ``n``, the number of
queries) of a rank metric at cutoff ``k`` (None without one)."""


def _hits(entries: _Entries, judged: Judgements, relevance_level: int, n: int) -> RankedHits:
    """Rank entries like trec_eval (score desc, id desc) and keep the judged ones."""
    table = pa.table({"row": entries.rows, "score": entries.scores, "id": entries.ids})
    order = pc.sort_indices(
        table,
        sort_keys=[("row", "ascending"), ("score", "descending"), ("id", "descending")],
    )
    order = order.to_numpy()
    rows = entries.rows[order]
    doc = pc.index_in(entries.ids, value_set=judged.docs).fill_null(-1)
    doc = doc.to_numpy(zero_copy_only=False).astype(np.int64)[order]
    candidates = np.flatnonzero(doc >= 0)
    keys = rows[candidates] * len(judged.docs) + doc[candidates]
    at = np.minimum(np.searchsorted(judged.keys, keys), len(judged.keys) - 1)
    match = judged.keys[at] == keys
    found, grades = candidates[match], judged.grades[at[match]]
    relevant = grades >= relevance_level
    row_start = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))[:-1]])
    ranks = found - row_start[rows[found]]
    return RankedHits(rows[found], ranks, grades, relevant)


def _evaluate_entries(
    qrels: Qrels,
    entries: _Entries,
    query_ids: Sequence[str],
    metrics: Sequence[Metric],
    relevance_level: int,
) -> dict[str, np.ndarray]:
    if relevance_level < 1:
        raise ValueError(f"relevance_level must be >= 1, got {relevance_level}")
    if np.isnan(entries.scores).any():
        raise ValueError("ranking scores contain NaN; trec_eval ordering is undefined for them")
    judged = _judgements(qrels, query_ids, relevance_level)
    n = len(query_ids)
    hits = _hits(entries, judged, relevance_level, n)
    return {m.name: m.spec.kernel(hits, judged, m.k, n) for m in metrics}


def _count(rows: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(rows, weights=weights, minlength=n).astype(np.float64)


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal rows (rows are sorted)."""
    return np.concatenate([[True], rows[1:] != rows[:-1]]) if len(rows) else rows.astype(bool)


def _precision(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """P@k = |relevant in top k| / k (k even when fewer results), trec_eval ``P_k``."""
    assert k is not None  # precision's cutoff is required (its cutoff rule in the metric table)
    cutoff = int(k)
    return _count(hits.within(cutoff).relevant_only().rows, n) / cutoff


def _recall(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """recall@k = |relevant in top k| / |relevant judged|, trec_eval ``recall_k``."""
    return _ratio(_count(hits.within(k).relevant_only().rows, n), judged.num_rel)


def _hit_rate(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """hit_rate@k = 1 if any relevant document is in the top k else 0, trec_eval ``success_k``."""
    return (_count(hits.within(k).relevant_only().rows, n) > 0).astype(np.float64)


def _mrr(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """mrr@k = 1 / rank of the first relevant document within the top k (0 if none),
    trec_eval ``recip_rank`` on the run cut at k."""
    rel = hits.within(k).relevant_only()
    first = _first_per_row(rel.rows)
    out = np.zeros(n, dtype=np.float64)
    out[rel.rows[first]] = 1.0 / (rel.ranks[first] + 1)
    return out


def _map(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """AP@k = Σ over relevant documents at rank r <= k of precision@r, / |relevant judged|,
    trec_eval ``map_cut_k`` (``map`` without k)."""
    rel = hits.within(k).relevant_only()
    first = _first_per_row(rel.rows)
    group_start = np.flatnonzero(first)[np.cumsum(first) - 1]
    seen = np.arange(len(rel.rows)) - group_start + 1
    return _ratio(_count(rel.rows, n, seen / (rel.ranks + 1)), judged.num_rel)


def _r_precision(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """R-precision = |relevant in top R| / R with R = |relevant judged|, trec_eval ``Rprec``."""
    rel = hits.relevant_only()
    inside = rel.ranks < judged.num_rel[rel.rows]
    return _ratio(_count(rel.rows[inside], n), judged.num_rel)


def _ndcg(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """nDCG@k = DCG@k / ideal DCG@k with DCG@k = Σ_{r<=k} gain_r / log2(r + 1), gain = grade
    (<= 0 gains nothing) and the ideal over all the query's judged grades, trec_eval
    ``ndcg_cut_k``."""
    assert k is not None  # nDCG's cutoff is required (its cutoff rule in the metric table)
    cutoff = int(k)
    top = hits.within(cutoff)
    dcg = _count(top.rows, n, np.maximum(top.grades, 0) / np.log2(top.ranks + 2.0))
    idcg = judged.ideal_gains(cutoff) @ (1.0 / np.log2(np.arange(cutoff) + 2.0))
    return _ratio(dcg, idcg)


for _spec in (
    MetricSpec("ndcg", _ndcg, "Normalised discounted cumulative gain of the top k."),
    MetricSpec("recall", _recall, "Share of the relevant documents that are in the top k."),
    MetricSpec("precision", _precision, "Share of the top k that is relevant.", aliases=("p",)),
    MetricSpec("mrr", _mrr, "1 / rank of the first relevant result.", cutoff="optional"),
    MetricSpec("map", _map, "Average precision over the relevant documents.", cutoff="optional"),
    MetricSpec(
        "hit_rate", _hit_rate, "1 when the top k holds a relevant document.", aliases=("success",)
    ),
    MetricSpec("r_precision", _r_precision, "Precision at R = |relevant|.", cutoff="none"),
):
    _add(_spec)
