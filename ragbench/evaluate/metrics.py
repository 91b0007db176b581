"""Ranking metrics with trec_eval's exact semantics, vectorised over queries.

Metric strings (case-insensitive, canonical form lowercase): ``ndcg@k``, ``recall@k``,
``precision@k`` (``p@k``), ``mrr`` / ``mrr@k``, ``map`` / ``map@k``, ``hit_rate@k``
(``success@k``), ``r_precision``, and the span metrics ``span_recall@k``, ``span_precision@k``,
``span_iou@k``, ``recall@Ntok`` whose names are parsed here but which are computed by
``ragbench.evaluate.labels`` (they need chunk offsets).

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
integer (query, document) keys finds the judged ones. Every metric is then a few array
operations over the retrieved *judged* documents only, so cost grows with the run size once,
not with the number of metrics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Literal, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ragbench.data.labeled import Qrels
from ragbench.errors import ConfigError
from ragbench.types import Ranking

__all__ = [
    "Metric",
    "evaluate",
    "evaluate_run",
    "mean",
    "parse_metric",
    "parse_metrics",
    "relevant_query_ids",
]

Family = Literal[
    "ndcg",
    "recall",
    "precision",
    "mrr",
    "map",
    "hit_rate",
    "r_precision",
    "span_recall",
    "span_precision",
    "span_iou",
    "token_recall",
]

SPAN_FAMILIES: frozenset[str] = frozenset(
    {"span_recall", "span_precision", "span_iou", "token_recall"}
)

_ALIASES: dict[str, Family] = {
    "ndcg": "ndcg",
    "recall": "recall",
    "precision": "precision",
    "p": "precision",
    "mrr": "mrr",
    "map": "map",
    "hit_rate": "hit_rate",
    "success": "hit_rate",
    "r_precision": "r_precision",
    "span_recall": "span_recall",
    "span_precision": "span_precision",
    "span_iou": "span_iou",
}
_CUTOFF_OPTIONAL = frozenset({"mrr", "map"})
_NO_CUTOFF = frozenset({"r_precision"})
_PATTERN = re.compile(r"(?P<name>[a-z_]+)(?:@(?P<k>\d+)(?P<tok>tok)?)?")
_ALLOWED_FORMS = (
    "ndcg@K, recall@K, precision@K (p@K), mrr, mrr@K, map, map@K, hit_rate@K (success@K), "
    "r_precision, span_recall@K, span_precision@K, span_iou@K, recall@Ntok "
    "(K and N positive integers)"
)


@dataclass(frozen=True, slots=True)
class Metric:
    """A parsed metric: canonical ``name``, ``family``, rank cutoff ``k`` or token ``budget``.

    ``k`` is None for metrics over the whole ranking (``mrr``, ``map``, ``r_precision``).
    """

    name: str
    family: Family
    k: int | None = None
    budget: int | None = None

    @property
    def is_span(self) -> bool:
        """Whether the metric needs chunk offsets and span evidence (see ``labels``)."""
        return self.family in SPAN_FAMILIES

    def __str__(self) -> str:
        return self.name


def parse_metric(spec: str | Metric) -> Metric:
    """Parse a metric string such as ``nDCG@10``, ``p@5`` or ``recall@2000tok``.

    Raises ``ConfigError`` naming the string and listing the allowed forms.
    """
    if isinstance(spec, Metric):
        return spec
    text = str(spec).strip().lower()
    match = _PATTERN.fullmatch(text)
    family = _ALIASES.get(match["name"]) if match else None
    if match is None or family is None:
        raise ConfigError(f"unknown metric {spec!r}; allowed forms: {_ALLOWED_FORMS}")
    k = int(match["k"]) if match["k"] is not None else None
    if k is not None and k < 1:
        raise ConfigError(f"metric {spec!r}: the cutoff must be >= 1; allowed: {_ALLOWED_FORMS}")
    if match["tok"]:
        if family != "recall":
            raise ConfigError(
                f"metric {spec!r}: a token budget is only allowed on recall; "
                f"allowed forms: {_ALLOWED_FORMS}"
            )
        return Metric(f"recall@{k}tok", "token_recall", budget=k)
    if k is None and family not in _CUTOFF_OPTIONAL | _NO_CUTOFF:
        raise ConfigError(f"metric {spec!r} needs a cutoff @K; allowed forms: {_ALLOWED_FORMS}")
    if k is not None and family in _NO_CUTOFF:
        raise ConfigError(f"metric {spec!r} takes no cutoff; allowed forms: {_ALLOWED_FORMS}")
    return Metric(family if k is None else f"{family}@{k}", family, k=k)


def parse_metrics(specs: Sequence[str | Metric]) -> list[Metric]:
    """Parse several metrics, dropping repeats (same canonical name) and keeping order."""
    parsed = {m.name: m for m in map(parse_metric, specs)}
    return list(parsed.values())


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


def _rank_metrics(metrics: Sequence[str | Metric]) -> list[Metric]:
    parsed = parse_metrics(metrics)
    for m in parsed:
        if m.is_span:
            raise ConfigError(
                f"metric {m.name!r} needs chunk offsets and span evidence; "
                "use ragbench.evaluate.labels.evaluate_chunks"
            )
    return parsed


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


class _Judged(NamedTuple):
    """Qrels of the evaluated queries as sorted integer keys ``row * n_docs + doc``."""

    docs: pa.Array
    keys: np.ndarray
    grades: np.ndarray
    num_rel: np.ndarray
    ideal: np.ndarray  # (n_queries, depth) best positive grades, descending, zero-padded


def _judged(
    qrels: Qrels, query_ids: Sequence[str], relevance_level: int, ideal_depth: int
) -> _Judged:
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
    relevant = grades >= relevance_level
    num_rel = np.bincount(rows, weights=relevant, minlength=len(judgements))
    ideal = _ideal_gains(rows, grades, counts, ideal_depth)
    return _Judged(docs, keys[order], grades[order], num_rel, ideal)


def _ideal_gains(
    rows: np.ndarray, grades: np.ndarray, counts: np.ndarray, depth: int
) -> np.ndarray:
    """Each query's ``depth`` best positive grades, descending, as a zero-padded matrix."""
    gains = np.maximum(grades, 0)
    order = np.lexsort((-gains, rows))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    position = np.arange(len(rows)) - starts[rows[order]]
    top = position < depth
    ideal = np.zeros((len(counts), depth), dtype=np.float64)
    ideal[rows[order][top], position[top]] = gains[order][top]
    return ideal


class _Hits(NamedTuple):
    """Retrieved judged documents in (query, rank) order: row, 0-based rank, grade, relevance."""

    rows: np.ndarray
    ranks: np.ndarray
    grades: np.ndarray
    relevant: np.ndarray

    def within(self, k: int | None) -> _Hits:
        if k is None:
            return self
        keep = self.ranks < k
        return _Hits(*(a[keep] for a in self))

    def relevant_only(self) -> _Hits:
        return _Hits(*(a[self.relevant] for a in self))


def _hits(entries: _Entries, judged: _Judged, relevance_level: int, n: int) -> _Hits:
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
    return _Hits(rows[found], ranks, grades, relevant)


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
    ideal_depth = max((m.k or 0 for m in metrics if m.family == "ndcg"), default=0)
    judged = _judged(qrels, query_ids, relevance_level, ideal_depth)
    n = len(query_ids)
    hits = _hits(entries, judged, relevance_level, n)
    return {m.name: _KERNELS[m.family](hits, judged, m.k, n) for m in metrics}


def _count(rows: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(rows, weights=weights, minlength=n).astype(np.float64)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    out = np.zeros_like(numerator, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal rows (rows are sorted)."""
    return np.concatenate([[True], rows[1:] != rows[:-1]]) if len(rows) else rows.astype(bool)


def _precision(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """P@k = |relevant in top k| / k (k even when fewer results), trec_eval ``P_k``."""
    cutoff = int(k)  # type: ignore[arg-type]  # parse_metric gives precision a cutoff
    return _count(hits.within(cutoff).relevant_only().rows, n) / cutoff


def _recall(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """recall@k = |relevant in top k| / |relevant judged|, trec_eval ``recall_k``."""
    return _ratio(_count(hits.within(k).relevant_only().rows, n), judged.num_rel)


def _hit_rate(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """hit_rate@k = 1 if any relevant document is in the top k else 0, trec_eval ``success_k``."""
    return (_count(hits.within(k).relevant_only().rows, n) > 0).astype(np.float64)


def _mrr(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """mrr@k = 1 / rank of the first relevant document within the top k (0 if none),
    trec_eval ``recip_rank`` on the run cut at k."""
    rel = hits.within(k).relevant_only()
    first = _first_per_row(rel.rows)
    out = np.zeros(n, dtype=np.float64)
    out[rel.rows[first]] = 1.0 / (rel.ranks[first] + 1)
    return out


def _map(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """AP@k = Σ over relevant documents at rank r <= k of precision@r, / |relevant judged|,
    trec_eval ``map_cut_k`` (``map`` without k)."""
    rel = hits.within(k).relevant_only()
    first = _first_per_row(rel.rows)
    group_start = np.flatnonzero(first)[np.cumsum(first) - 1]
    seen = np.arange(len(rel.rows)) - group_start + 1
    return _ratio(_count(rel.rows, n, seen / (rel.ranks + 1)), judged.num_rel)


def _r_precision(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """R-precision = |relevant in top R| / R with R = |relevant judged|, trec_eval ``Rprec``."""
    rel = hits.relevant_only()
    inside = rel.ranks < judged.num_rel[rel.rows]
    return _ratio(_count(rel.rows[inside], n), judged.num_rel)


def _ndcg(hits: _Hits, judged: _Judged, k: int | None, n: int) -> np.ndarray:
    """nDCG@k = DCG@k / ideal DCG@k with DCG@k = Σ_{r<=k} gain_r / log2(r + 1), gain = grade
    (<= 0 gains nothing) and the ideal over all the query's judged grades, trec_eval
    ``ndcg_cut_k``."""
    top = hits.within(k)
    dcg = _count(top.rows, n, np.maximum(top.grades, 0) / np.log2(top.ranks + 2.0))
    ideal = judged.ideal[:, :k]
    idcg = ideal @ (1.0 / np.log2(np.arange(ideal.shape[1]) + 2.0))
    return _ratio(dcg, idcg)


_KERNELS = {
    "ndcg": _ndcg,
    "recall": _recall,
    "precision": _precision,
    "mrr": _mrr,
    "map": _map,
    "hit_rate": _hit_rate,
    "r_precision": _r_precision,
}
