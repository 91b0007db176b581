"""Project chunk rankings onto labels that survive any chunker: documents, chunks, spans.

Rankings are always of chunks; a ``ChunkTable`` says which document and character range each
chunk covers. Three projections:

- ``document``: each document takes the position and score of its first chunk in the ranking,
  then the set's graded document qrels apply (``document_ranking``).
- ``chunk``: a chunk is relevant when it overlaps a span of evidence enough (``chunk_qrels``).
- ``span``: the evidence characters covered by the top-k chunks (Chroma's chunking-evaluation
  definitions): ``span_recall@k``, ``span_precision@k``, ``span_iou@k`` and ``recall@Ntok``.

``evaluate_chunks`` routes each metric; ``chunking_diagnostics`` says how well a chunking keeps
the evidence together. Span arithmetic works on intervals, never on sets of characters: every
document gets its own stretch of one global character axis, so a span is a single pair of ints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ragbench.data.labeled import LabeledSet, Qrels
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.metrics import Metric, evaluate, parse_metrics
from ragbench.protocols import TokenCounter
from ragbench.text.tokenize import token_counter
from ragbench.types import Chunk, Ranking

__all__ = [
    "ChunkTable",
    "ChunkingDiagnostics",
    "Level",
    "chunk_qrels",
    "chunking_diagnostics",
    "document_ranking",
    "evaluate_chunks",
    "span_metrics",
]

Level = Literal["document", "chunk", "span"]
_LEVELS = ("document", "chunk", "span")


@dataclass(frozen=True, eq=False)
class ChunkTable:
    """Per chunk: id, document id, ``[start, end)`` character range and (optionally) text.

    Parallel arrays; ids are unique. Build it once per chunked corpus (``from_chunks``) and reuse
    it: id lookups and document codes are cached on it; chunk qrels and span coordinates are
    cached per (table, labeled set) pair.
    """

    ids: np.ndarray
    doc_ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    texts: np.ndarray | None = None

    def __post_init__(self) -> None:
        columns = {
            "ids": np.asarray(self.ids, dtype=object),
            "doc_ids": np.asarray(self.doc_ids, dtype=object),
            "starts": np.asarray(self.starts, dtype=np.int64),
            "ends": np.asarray(self.ends, dtype=np.int64),
        }
        if self.texts is not None:
            columns["texts"] = np.asarray(self.texts, dtype=object)
        for name, column in columns.items():
            object.__setattr__(self, name, column)
        if len({len(c) for c in columns.values()}) > 1:
            sizes = ", ".join(f"{name}={len(c)}" for name, c in columns.items())
            raise DataError(f"chunk table columns differ in length: {sizes}")
        if len(set(self.ids)) != len(self.ids):
            raise DataError("chunk table: chunk ids are not unique")
        if (self.ends < self.starts).any():
            bad = self.ids[np.argmax(self.ends < self.starts)]
            raise DataError(f"chunk table: chunk {bad!r} ends before it starts")

    @classmethod
    def from_chunks(cls, chunks: Sequence[Chunk]) -> ChunkTable:
        """The table of ``chunks`` (with their texts)."""
        return cls(
            ids=np.array([c.id for c in chunks], dtype=object),
            doc_ids=np.array([c.doc_id for c in chunks], dtype=object),
            starts=np.array([c.start for c in chunks], dtype=np.int64),
            ends=np.array([c.end for c in chunks], dtype=np.int64),
            texts=np.array([c.text for c in chunks], dtype=object),
        )

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def lengths(self) -> np.ndarray:
        """Chunk lengths in characters."""
        return self.ends - self.starts

    @cached_property
    def _arrow_ids(self) -> pa.Array:
        return pa.array(self.ids, type=pa.string())

    @cached_property
    def _documents(self) -> tuple[np.ndarray, np.ndarray]:
        names, codes = np.unique(self.doc_ids, return_inverse=True)
        return names, codes.astype(np.int64)

    @property
    def doc_names(self) -> np.ndarray:
        """Distinct document ids, sorted."""
        return self._documents[0]

    @property
    def doc_codes(self) -> np.ndarray:
        """Per chunk, the index of its document in ``doc_names``."""
        return self._documents[1]

    @cached_property
    def _rows_by_doc(self) -> dict[str, np.ndarray]:
        order = np.argsort(self.doc_codes, kind="stable")
        bounds = np.searchsorted(self.doc_codes[order], np.arange(len(self.doc_names) + 1))
        return {
            str(name): order[bounds[i] : bounds[i + 1]] for i, name in enumerate(self.doc_names)
        }

    def doc_rows(self, doc_id: str) -> np.ndarray:
        """Rows of the chunks of ``doc_id`` (empty when it has none)."""
        return self._rows_by_doc.get(doc_id, np.empty(0, dtype=np.int64))

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Row of each chunk id (same shape), -1 for ``""`` padding; unknown ids raise."""
        ids = np.asarray(ids, dtype=object)
        flat = pa.array(ids.ravel(), type=pa.string())
        found = pc.index_in(flat, value_set=self._arrow_ids).fill_null(-1)
        rows = found.to_numpy(zero_copy_only=False).astype(np.int64)
        unknown = (rows < 0) & (ids.ravel() != "")
        if unknown.any():
            first = ids.ravel()[np.argmax(unknown)]
            raise DataError(
                f"ranking has {int(unknown.sum())} chunk ids missing from the chunk table, "
                f"e.g. {first!r}"
            )
        return rows.reshape(ids.shape)


# ---------------------------------------------------------------- document and chunk level


def document_ranking(ranking: Ranking, table: ChunkTable) -> Ranking:
    """Chunk ranking → document ranking: each document appears once, at the position of its
    first chunk in the ranking and with that chunk's score."""
    rows = _first_rows(table.rows(ranking.ids), key=table.doc_codes)
    keep = rows >= 0
    width = int(keep.sum(axis=1).max(initial=0))
    ids = np.full((len(rows), width), "", dtype=object)
    scores = np.full((len(rows), width), -np.inf)
    r, c = np.nonzero(keep)
    column = (np.cumsum(keep, axis=1) - 1)[r, c]
    ids[r, column] = table.doc_names[table.doc_codes[rows[r, c]]]
    scores[r, column] = np.asarray(ranking.scores)[r, c]
    return Ranking(ids, scores)


def _first_rows(rows: np.ndarray, key: np.ndarray | None = None) -> np.ndarray:
    """``rows`` with every entry after the first of its ``key`` (default: the row itself) in
    the same ranking row set to -1."""
    valid = rows >= 0
    keys = np.full(rows.shape, -1, dtype=np.int64)
    keys[valid] = key[rows[valid]] if key is not None else rows[valid]
    span = int(keys.max(initial=0)) + 2
    flat = (np.arange(len(rows))[:, None] * span + keys + 1).ravel()
    first = np.zeros(flat.size, dtype=bool)
    first[np.unique(flat, return_index=True)[1]] = True
    return np.where(first.reshape(rows.shape) & valid, rows, -1)


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


class _SpanScores(NamedTuple):
    recall: float
    precision: float
    iou: float


_SCORE_OF = {
    "span_recall": "recall",
    "token_recall": "recall",
    "span_precision": "precision",
    "span_iou": "iou",
}


def _span_scores(retrieved: np.ndarray, evidence: np.ndarray) -> _SpanScores:
    """(span recall, span precision, span IoU) of retrieved chunk intervals against evidence.

    With E the union of the evidence and C the union of the retrieved chunks, covered =
    |E ∩ C| (each character once): recall = covered / Σ|evidence span|, precision = covered /
    Σ|retrieved chunk| (a sum: overlapping chunks and chunks of other documents all count),
    IoU = covered / (Σ|retrieved chunk| + |E| - covered). An empty denominator gives 0.
    """
    union = _merge(evidence)
    covered = int(_overlaps(_merge(retrieved), union).sum())
    spent, wanted = _total(retrieved), _total(evidence)
    recall = covered / wanted if wanted else 0.0
    precision = covered / spent if spent else 0.0
    missed = _total(union) - covered
    iou = covered / (spent + missed) if spent + missed else 0.0
    return _SpanScores(recall, precision, iou)


# ---------------------------------------------------------------- span level: metrics


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
    """Per-query span metrics (``span_recall@k``, ``span_precision@k``, ``span_iou@k``,
    ``recall@Ntok``) of a chunk ranking; formulas in ``_span_scores``.

    The retrieved chunks are the ranking's first k distinct chunks (``@k``), or its leading
    chunks while their cumulative token count stays <= N (``@Ntok``; ``counter`` defaults to
    cl100k, texts come from the table or ``chunk_text(chunk_id)``) — span recall of those.
    Queries without evidence score 0.
    """
    parsed = parse_metrics(metrics)
    for m in parsed:
        if not m.is_span:
            raise ConfigError(f"metric {m.name!r} is not a span metric")
    if parsed and not labeled.has_spans:
        raise ConfigError(
            f"metric {parsed[0].name!r} needs span evidence; labeled set {labeled.name!r} has none"
        )
    rows = _compact(_first_rows(_ranking_rows(ranking, query_ids, table)))
    spans = _spans(table, labeled)
    tokens: _TokenCounts | None = None
    scored: dict[tuple[int | None, int | None], list[_SpanScores]] = {}
    out: dict[str, np.ndarray] = {}
    for m in parsed:
        if (m.k, m.budget) not in scored:
            if m.budget is not None:
                tokens = tokens or _TokenCounts(
                    table,
                    counter or token_counter("tokens", "cl100k"),
                    _text_source(table, chunk_text),
                )
                taken = _budget_prefix(rows, m.budget, tokens)
            else:
                taken = (np.arange(rows.shape[1]) < (m.k or 0)) & (rows >= 0)
            scored[m.k, m.budget] = [
                _span_scores(spans.chunks[rows[i][taken[i]]], spans.evidence.get(q, _NO_SPANS))
                for i, q in enumerate(query_ids)
            ]
        field = _SCORE_OF[m.family]
        out[m.name] = np.array([getattr(s, field) for s in scored[m.k, m.budget]], dtype=float)
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

    Span metrics (``span_*@k``, ``recall@Ntok``) always use the span evidence. Ranking metrics
    use the projection of ``level``: ``document`` (document qrels, ``document_ranking``) or
    ``chunk`` (``chunk_qrels`` with ``min_overlap``); level ``span`` takes span metrics only.
    ``depth`` cuts the projected ranking (documents or chunks) to that many results.
    """
    if level not in _LEVELS:
        raise ConfigError(f"unknown evaluation level {level!r}; allowed: {', '.join(_LEVELS)}")
    parsed = parse_metrics(metrics)
    ranked = [m for m in parsed if not m.is_span]
    if ranked and level == "span":
        raise ConfigError(
            f"metric {ranked[0].name!r} ranks documents or chunks: use level 'document' or "
            "'chunk' (span metrics are computed at every level)"
        )
    spanned = [m for m in parsed if m.is_span]
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
