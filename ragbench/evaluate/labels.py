"""Project chunk rankings onto labels that survive any chunker: documents, chunks, spans.

Rankings are always of chunks; a ``ChunkTable`` says which document and character range each
chunk covers. Three projections:

- ``document``: each document takes the position and score of its first chunk in the ranking,
  then the set's graded document qrels apply (``document_ranking``).
- ``chunk``: a chunk is relevant when it overlaps a span of evidence enough (``chunk_qrels``).
- ``span``: the evidence characters covered by the top-k chunks (Chroma's chunking-evaluation
  definitions): ``span_recall@k``, ``span_precision@k``, ``span_iou@k`` and ``recall@Ntok``,
  registered here in the metric table of ``ragbench.evaluate.metrics`` with level ``span``.

``evaluate_chunks`` routes each metric by its level in the metric table;
``chunking_diagnostics`` says how well a chunking keeps the evidence together. Span arithmetic
works on intervals, never on sets of characters: every document gets its own stretch of one
global character axis, so a span is a single pair of ints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

import numpy as np

from ragbench.data.labeled import LabeledSet, Qrels
from ragbench.errors import ConfigError
from ragbench.evaluate.metric_table import (
    Metric,
    MetricSpec,
    _ranking_metrics,
    _ratio,
    parse_metrics,
    register_metric,
)
from ragbench.evaluate.metrics import evaluate
from ragbench.protocols import TokenCounter
from ragbench.text.chunk_table import ChunkTable, document_ranking, first_rows
from ragbench.text.tokenize import token_counter
from ragbench.types import Ranking

__all__ = [
    "ChunkingDiagnostics",
    "Level",
    "SpanCoverage",
    "SpanKernel",
    "chunk_qrels",
    "chunking_diagnostics",
    "evaluate_chunks",
    "span_metrics",
]

Level = Literal["document", "chunk", "span"]
_LEVELS = ("document", "chunk", "span")


def chunk_qrels(table: ChunkTable, labeled: LabeledSet, min_overlap: float = 0.0) -> Qrels:
    """Chunk-level qrels derived from span evidence.

    Chunk ``c`` is relevant to query ``q`` when an evidence span ``e`` of ``q`` in ``c``'s
    document overlaps it, ``|c ∩ e| > 0``, and ``|c ∩ e| / min(|c|, |e|) >= min_overlap``; its
    grade is the highest grade of such spans. ``min_overlap=0`` accepts any overlap; ``1``
    asks for the chunk inside the span or the span inside the chunk. Cached per (table, set,
    min_overlap) object identity.
    """
    if not 0.0 <= min_overlap <= 1.0:
        raise ConfigError(f"min_overlap must be within [0, 1], got {min_overlap}")
    if not labeled.has_spans:
        raise ConfigError(
            f"chunk-level labels need span evidence; labeled set {labeled.name!r} has none"
        )
    return _chunk_qrels(table, labeled, float(min_overlap))


@lru_cache(maxsize=8)
def _chunk_qrels(table: ChunkTable, labeled: LabeledSet, min_overlap: float) -> Qrels:
    qrels: Qrels = {}
    for qid, spans in labeled.evidence.items():
        judged: dict[str, int] = {}
        for e in spans:
            rows = table.doc_rows(e.doc_id)
            starts, ends = table.starts[rows], table.ends[rows]
            overlap = np.minimum(ends, e.end) - np.maximum(starts, e.start)
            shorter = np.minimum(ends - starts, e.length)
            hit = (overlap > 0) & (overlap >= min_overlap * shorter)
            for chunk_id in table.ids[rows[hit]]:
                judged[chunk_id] = max(judged.get(chunk_id, e.grade), e.grade)
        if judged:
            qrels[qid] = judged
    return qrels


# ---------------------------------------------------------------- span level: intervals


def _merge(intervals: np.ndarray) -> np.ndarray:
    """Union of ``[start, end)`` intervals as sorted, disjoint, non-empty intervals."""
    iv = intervals[intervals[:, 1] > intervals[:, 0]]
    if len(iv) == 0:
        return iv.reshape(0, 2)
    iv = iv[np.argsort(iv[:, 0], kind="stable")]
    reach = np.maximum.accumulate(iv[:, 1])
    new = np.concatenate([[True], iv[1:, 0] > reach[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(iv) - 1]])
    return np.stack([iv[new, 0], reach[last]], axis=1)


def _overlaps(disjoint: np.ndarray, intervals: np.ndarray) -> np.ndarray:
    """Per interval of ``intervals``, how many of its characters lie in ``disjoint``."""
    lo = np.maximum(intervals[:, None, 0], disjoint[None, :, 0])
    hi = np.minimum(intervals[:, None, 1], disjoint[None, :, 1])
    return np.clip(hi - lo, 0, None).sum(axis=1)


def _subtract(disjoint: np.ndarray, interval: np.ndarray) -> np.ndarray:
    """``disjoint`` minus one interval, still sorted and disjoint."""
    left = np.stack([disjoint[:, 0], np.minimum(disjoint[:, 1], interval[0])], axis=1)
    right = np.stack([np.maximum(disjoint[:, 0], interval[1]), disjoint[:, 1]], axis=1)
    pieces = np.concatenate([left, right])
    return _merge(pieces)


def _total(intervals: np.ndarray) -> int:
    return int((intervals[:, 1] - intervals[:, 0]).sum())


class _Spans(NamedTuple):
    """Chunks and evidence on one global character axis (each document its own stretch)."""

    chunks: np.ndarray  # (n_chunks, 2) global [start, end)
    evidence: dict[str, np.ndarray]  # query → raw evidence intervals (m, 2)


@lru_cache(maxsize=8)
def _spans(table: ChunkTable, labeled: LabeledSet) -> _Spans:
    """Document d starts at the sum over earlier documents of (furthest chunk or span end + 1).

    Cached per (table, set) object identity: treat both as immutable once evaluated.
    """
    names = table.doc_names.tolist()
    spans = [e for es in labeled.evidence.values() for e in es]
    docs = names + sorted({e.doc_id for e in spans} - set(names))
    code = {d: i for i, d in enumerate(docs)}
    extent = np.zeros(len(docs), dtype=np.int64)
    np.maximum.at(extent, table.doc_codes, table.ends)
    for e in spans:
        extent[code[e.doc_id]] = max(extent[code[e.doc_id]], e.end)
    base = np.concatenate([[0], np.cumsum(extent + 1)[:-1]]).astype(np.int64)
    chunks = base[table.doc_codes][:, None] + np.stack([table.starts, table.ends], axis=1)
    evidence = {}
    for q, es in labeled.evidence.items():
        raw = np.array([(code[e.doc_id], e.start, e.end) for e in es], dtype=np.int64)
        raw = raw.reshape(-1, 3)
        evidence[q] = base[raw[:, 0]][:, None] + raw[:, 1:]
    return _Spans(chunks.reshape(-1, 2), evidence)


# ---------------------------------------------------------------- span level: metrics


class SpanCoverage(NamedTuple):
    """What a span kernel sees: per query (int arrays aligned with ``query_ids``), the
    characters of the retrieved chunks against the query's evidence spans.

    ``covered``: evidence characters inside the retrieved chunks, each character once.
    ``retrieved``: Σ|retrieved chunk| (overlapping chunks and chunks of other documents all
    count). ``evidence``: Σ|evidence span|. ``evidence_union``: characters in some evidence span.
    """

    covered: np.ndarray
    retrieved: np.ndarray
    evidence: np.ndarray
    evidence_union: np.ndarray


SpanKernel = Callable[[SpanCoverage], np.ndarray]
"""``kernel(coverage)``: per-query values (float array) of a span metric."""


def _span_recall(c: SpanCoverage) -> np.ndarray:
    """Span recall = covered / Σ|evidence span| (0 without evidence)."""
    return _ratio(c.covered, c.evidence)


def _span_precision(c: SpanCoverage) -> np.ndarray:
    """Span precision = covered / Σ|retrieved chunk| (0 without retrieved characters)."""
    return _ratio(c.covered, c.retrieved)


def _span_iou(c: SpanCoverage) -> np.ndarray:
    """Span IoU = covered / (Σ|retrieved chunk| + evidence characters not covered)."""
    return _ratio(c.covered, c.retrieved + c.evidence_union - c.covered)


for _spec in (
    MetricSpec(
        "span_recall",
        _span_recall,
        "Share of the evidence covered by the top k chunks.",
        level="span",
    ),
    MetricSpec(
        "span_precision",
        _span_precision,
        "Share of the top k chunks' text that is evidence.",
        level="span",
    ),
    MetricSpec(
        "span_iou",
        _span_iou,
        "Intersection over union of the top k chunks and the evidence.",
        level="span",
    ),
    MetricSpec(
        "token_recall",
        _span_recall,
        "Span recall of the leading chunks that fit in N tokens.",
        cutoff="budget",
        level="span",
        written_as="recall",
    ),
):
    register_metric(_spec)


def _coverage(
    spans: _Spans, rows: np.ndarray, taken: np.ndarray, query_ids: Sequence[str]
) -> SpanCoverage:
    """The ``SpanCoverage`` of each ranking row's ``taken`` chunks."""
    counts = []
    for i, q in enumerate(query_ids):
        retrieved, evidence = spans.chunks[rows[i][taken[i]]], spans.evidence.get(q, _NO_SPANS)
        union = _merge(evidence)
        covered = int(_overlaps(_merge(retrieved), union).sum())
        counts.append((covered, _total(retrieved), _total(evidence), _total(union)))
    return SpanCoverage(*np.array(counts, dtype=np.int64).reshape(-1, 4).T)


class _TokenCounts:
    """Token counts of chunks by row, counted on first use."""

    def __init__(self, table: ChunkTable, counter: TokenCounter, text: Callable[[int], str]):
        self._counter, self._text = counter, text
        self._counts = np.full(len(table), -1, dtype=np.int64)

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        todo = np.unique(rows[self._counts[rows] < 0])
        self._counts[todo] = [self._counter.count(self._text(int(r))) for r in todo]
        return self._counts[rows]


def _budget_prefix(rows: np.ndarray, budget: int, tokens: _TokenCounts) -> np.ndarray:
    """Mask of each ranking row's leading chunks whose cumulative token count stays <= budget;
    a row stops at its first chunk that would exceed it. Walks columns, so only the chunks
    that are reached get counted."""
    take = np.zeros(rows.shape, dtype=bool)
    used = np.zeros(len(rows), dtype=np.int64)
    open_ = np.ones(len(rows), dtype=bool)
    for j in range(rows.shape[1]):
        active = np.flatnonzero(open_ & (rows[:, j] >= 0))
        if len(active) == 0:
            break
        counts = tokens(rows[active, j])
        fits = used[active] + counts <= budget
        take[active[fits], j] = True
        used[active[fits]] += counts[fits]
        open_[active[~fits]] = False
    return take


def span_metrics(
    ranking: Ranking,
    query_ids: Sequence[str],
    table: ChunkTable,
    labeled: LabeledSet,
    metrics: Sequence[str | Metric],
    counter: TokenCounter | None = None,
    chunk_text: Callable[[str], str] | None = None,
) -> dict[str, np.ndarray]:
    """Per-query values of span-level metrics (``span_recall@k``, ``span_precision@k``,
    ``span_iou@k``, ``recall@Ntok``, any registered with level ``span``) of a chunk ranking.

    The retrieved chunks are the ranking's first k distinct chunks (``@k``; all of them without
    a cutoff), or its leading chunks while their cumulative token count stays <= N (``@Ntok``;
    ``counter`` defaults to cl100k, texts come from the table or ``chunk_text(chunk_id)``); the
    metric's kernel turns their ``SpanCoverage`` into values. Queries without evidence score 0.
    """
    parsed = parse_metrics(metrics)
    for m in parsed:
        if m.level != "span":
            raise ConfigError(f"metric {m.name!r} is not a span metric")
    if parsed and not labeled.has_spans:
        raise ConfigError(
            f"metric {parsed[0].name!r} needs span evidence; labeled set {labeled.name!r} has none"
        )
    rows = _compact(first_rows(_ranking_rows(ranking, query_ids, table)))
    spans = _spans(table, labeled)
    tokens: _TokenCounts | None = None
    coverage: dict[tuple[int | None, int | None], SpanCoverage] = {}
    out: dict[str, np.ndarray] = {}
    for m in parsed:
        if (m.k, m.budget) not in coverage:
            if m.budget is not None:
                tokens = tokens or _TokenCounts(
                    table,
                    counter or token_counter("tokens", "cl100k"),
                    _text_source(table, chunk_text),
                )
                taken = _budget_prefix(rows, m.budget, tokens)
            else:
                cut = rows.shape[1] if m.k is None else m.k
                taken = (np.arange(rows.shape[1]) < cut) & (rows >= 0)
            coverage[m.k, m.budget] = _coverage(spans, rows, taken, query_ids)
        out[m.name] = m.spec.kernel(coverage[m.k, m.budget])
    return out


_NO_SPANS = np.empty((0, 2), dtype=np.int64)
_NO_ROWS = np.empty(0, dtype=np.int64)


def _ranking_rows(ranking: Ranking, query_ids: Sequence[str], table: ChunkTable) -> np.ndarray:
    ids = np.asarray(ranking.ids)
    if ids.ndim != 2 or ids.shape[0] != len(query_ids):
        raise ValueError(f"ranking ids {ids.shape} must be (len(query_ids)={len(query_ids)}, k)")
    return table.rows(ids)


def _compact(rows: np.ndarray) -> np.ndarray:
    """Shift each row's non-negative entries to the front, keeping their order."""
    keep = rows >= 0
    out = np.full(rows.shape, -1, dtype=np.int64)
    r, c = np.nonzero(keep)
    out[r, (np.cumsum(keep, axis=1) - 1)[r, c]] = rows[r, c]
    return out


def _text_source(
    table: ChunkTable, chunk_text: Callable[[str], str] | None
) -> Callable[[int], str]:
    if table.texts is not None:
        texts = table.texts
        return lambda row: texts[row]
    if chunk_text is None:
        raise ConfigError(
            "token-budget metrics need chunk texts: build the ChunkTable with texts "
            "(ChunkTable.from_chunks) or pass chunk_text"
        )
    ids = table.ids
    return lambda row: chunk_text(ids[row])


# ---------------------------------------------------------------- routing


def evaluate_chunks(
    ranking: Ranking,
    query_ids: Sequence[str],
    table: ChunkTable,
    labeled: LabeledSet,
    metrics: Sequence[str | Metric],
    level: Level = "document",
    relevance_level: int = 1,
    min_overlap: float = 0.0,
    counter: TokenCounter | None = None,
    chunk_text: Callable[[str], str] | None = None,
    depth: int | None = None,
) -> dict[str, np.ndarray]:
    """Per-query metrics of a chunk ranking (row ``i`` is ``query_ids[i]``), in metric order.

    Each metric goes where its level in the metric table says. Span-level metrics
    (``span_*@k``, ``recall@Ntok``) always use the span evidence (``span_metrics``). Rank-level
    metrics use the projection of ``level``: ``document`` (document qrels,
    ``document_ranking``) or ``chunk`` (``chunk_qrels`` with ``min_overlap``); evaluation level
    ``span`` takes span-level metrics only; answer metrics go to ``evaluate_answers``.
    ``depth`` cuts the projected ranking (documents or chunks) to that many results.
    """
    if level not in _LEVELS:
        raise ConfigError(f"unknown evaluation level {level!r}; allowed: {', '.join(_LEVELS)}")
    parsed = _ranking_metrics(metrics)
    ranked = [m for m in parsed if m.level == "rank"]
    if ranked and level == "span":
        raise ConfigError(
            f"metric {ranked[0].name!r} ranks documents or chunks: use level 'document' or "
            "'chunk' (span metrics are computed at every level)"
        )
    spanned = [m for m in parsed if m.level == "span"]
    out: dict[str, np.ndarray] = {}
    if spanned:
        out = span_metrics(ranking, query_ids, table, labeled, spanned, counter, chunk_text)
    if ranked and level == "document":
        docs = document_ranking(ranking, table)
        docs = docs.head(depth) if depth else docs
        out |= evaluate(labeled.qrels, docs, query_ids, ranked, relevance_level)
    elif ranked:
        qrels = chunk_qrels(table, labeled, min_overlap)
        chunks = ranking.head(depth) if depth else ranking
        out |= evaluate(qrels, chunks, query_ids, ranked, relevance_level)
    return {m.name: out[m.name] for m in parsed}


# ---------------------------------------------------------------- diagnostics


@dataclass(frozen=True, slots=True)
class ChunkingDiagnostics:
    """How well one chunking of a corpus keeps a labeled set's evidence spans together.

    ``spans``: non-empty evidence spans. ``split_spans``: spans not fully inside any single
    chunk (spans with lost characters included). ``lost_spans``: spans with at least one
    character in no chunk at all; ``lost_char_fraction``: lost evidence characters / all
    evidence characters.
    ``oracle_span_recall[k]``: mean over queries with evidence of the span recall@k reached by
    greedily picking the k chunks that add the most uncovered evidence — exactly the best any
    ranking can do when chunks don't overlap, and at least (1 - 1/e) of it when they do.
    """

    chunks: int
    mean_chunk_length: float
    spans: int
    split_spans: int
    lost_spans: int
    lost_char_fraction: float
    oracle_span_recall: dict[int, float]


def chunking_diagnostics(
    table: ChunkTable, labeled: LabeledSet, ks: Sequence[int] = (1, 3, 5, 10)
) -> ChunkingDiagnostics:
    """Split and lost evidence spans, and the oracle span recall@k, of one chunked corpus."""
    spans = _spans(table, labeled)
    evidence = np.concatenate([_NO_SPANS, *spans.evidence.values()])
    evidence = evidence[evidence[:, 1] > evidence[:, 0]]
    inside = _inside_some_chunk(spans.chunks, evidence)
    covered = _covered_lengths(_merge(spans.chunks), evidence)
    lost = (evidence[:, 1] - evidence[:, 0]) - covered
    total = _total(evidence)
    curves = []
    for q, es in labeled.evidence.items():
        rows = [_NO_ROWS, *(table.doc_rows(d) for d in {e.doc_id for e in es})]
        candidates = spans.chunks[np.concatenate(rows)]
        curves.append(_greedy_coverage(candidates, spans.evidence[q], max(ks, default=0)))
    curves = [c for c in curves if c[0] > 0]
    oracle = {
        k: float(np.mean([c[min(k, len(c) - 1)] / c[0] for c in curves])) if curves else 0.0
        for k in ks
    }
    return ChunkingDiagnostics(
        chunks=len(table),
        mean_chunk_length=float(table.lengths.mean()) if len(table) else 0.0,
        spans=len(evidence),
        split_spans=int((~inside).sum()),
        lost_spans=int((lost > 0).sum()),
        lost_char_fraction=float(lost.sum() / total) if total else 0.0,
        oracle_span_recall=oracle,
    )


def _inside_some_chunk(chunks: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Per span, whether one chunk contains it: among chunks starting at or before the span,
    the furthest end reaches the span's end."""
    if len(chunks) == 0:
        return np.zeros(len(spans), dtype=bool)
    order = np.argsort(chunks[:, 0], kind="stable")
    starts, reach = chunks[order, 0], np.maximum.accumulate(chunks[order, 1])
    last = np.searchsorted(starts, spans[:, 0], side="right") - 1
    return (last >= 0) & (reach[np.maximum(last, 0)] >= spans[:, 1])


def _covered_lengths(disjoint: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Per span, its characters inside the sorted disjoint intervals: F(end) - F(start) with
    F(x) = covered length below x (prefix sums over the intervals)."""
    if len(disjoint) == 0:
        return np.zeros(len(spans), dtype=np.int64)
    lengths = disjoint[:, 1] - disjoint[:, 0]
    before = np.concatenate([[0], np.cumsum(lengths)])

    def below(x: np.ndarray) -> np.ndarray:
        i = np.maximum(np.searchsorted(disjoint[:, 0], x, side="right") - 1, 0)
        return before[i] + np.clip(x - disjoint[i, 0], 0, lengths[i])

    return below(spans[:, 1]) - below(spans[:, 0])


def _greedy_coverage(candidates: np.ndarray, evidence: np.ndarray, k: int) -> np.ndarray:
    """[Σ|evidence span|, covered after 1 pick, …, after k picks] of greedy max coverage of the
    evidence by ``candidates`` (chunk intervals)."""
    remaining = _merge(evidence)
    curve, covered = [_total(evidence)], 0
    for _ in range(k):
        gains = _overlaps(remaining, candidates)
        if gains.size and gains.max() > 0:
            best = int(np.argmax(gains))
            covered += int(gains[best])
            remaining = _subtract(remaining, candidates[best])
        curve.append(covered)
    return np.array(curve, dtype=np.float64)
