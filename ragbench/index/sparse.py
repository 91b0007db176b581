"""BM25 over chunk ids, with two backends: ``bm25s`` (fast, default) and ``rank_bm25`` (reference).

Texts become terms through ragbench's :class:`WordTokenizer`, so both backends see identical
terms. The index keeps the tokenized corpus as int32 term ids over one :class:`Vocabulary`
(``_Corpus``) and the metadata as columns (``MetadataTable``); adds and deletes re-index
lazily on the next search.

bm25s searches a score matrix built here (``_Matrix``), not by ``bm25s.BM25.index``, which
loops over the documents in Python and sorts every entry at once: texts are read a block at a
time, document frequencies counted in a first pass, and in a second each block's (term,
document) weights, computed by bm25s' own idf and term-frequency functions, are placed in the
CSC arrays by term (a counting sort). Every weight equals bm25s' own. A large corpus' term ids
and score matrix live in unnamed temporary files instead of memory (``_Spill``; the matrix is
then built a range of terms at a time and searched memory-mapped), so memory holds the ids,
the vocabulary, per-text offsets and one block's work.

Scoring conventions, shared by both backends so that their scores agree:

- Every variant's term weight carries the ``(k1 + 1)`` numerator (``idf · tf·(k1+1) /
  (tf + k1·(1 - b + b·dl/avgdl))`` for robertson / lucene). bm25s drops it for robertson and
  lucene; the index scales those scores by ``k1 + 1``, which leaves every ranking unchanged.
- robertson floors a negative idf (a term in more than half the documents) at 0, as bm25s
  does. rank-bm25's ``BM25Okapi`` floors it at ``epsilon · mean idf`` instead; it is built with
  ``epsilon=0`` so that both backends agree.
- rank-bm25 0.2.2's ``BM25L`` multiplies each term weight by tf a second time (fixed upstream in
  dorianbrown/rank_bm25#20, after the release); the published formula is used instead.
- A hit must score above a document that contains no query term: 0 for robertson, lucene and
  atire; for bm25l / bm25+ every term adds a weight even at tf = 0, so documents sharing no
  term with the query still score above 0 and are left out as well. Rows are padded instead.

Equal scores rank in indexing order, as in Lucene, with either backend (``_top_hits``):
deterministic at the cut-off too, and so are the ranks a fusion of BM25 lists reads.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, pairwise
from pathlib import Path
from typing import Any, Literal, Protocol

import bm25s
import numpy as np
import rank_bm25
from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer
from pydantic import Field, model_validator

from ragbench.errors import DataError, describe
from ragbench.index.filters import MetadataTable
from ragbench.registry import ComponentConfig, components
from ragbench.text.tokenize import TokenizerConfig, Vocabulary, WordTokenizer
from ragbench.types import Ranking

__all__ = ["BM25Config", "BM25Index"]

Variant = Literal["robertson", "lucene", "atire", "bm25l", "bm25+"]
Metadata = Sequence[Mapping[str, Any]] | None

_RANK_BM25_VARIANTS = ("robertson", "bm25l", "bm25+")
_NONOCCURRENCE = ("bm25l", "bm25+")  # variants whose terms weigh something at tf = 0
_BLOCK_TOKENS = 1 << 18  # term ids read at a time by the matrix build: bounds its working memory
# Term ids, or score-matrix entries, beyond which the corpus, or the matrix, is kept in unnamed
# temporary files (``_Spill``) instead of memory; the matrix is then built this many at a time.
_IN_MEMORY = 1 << 25
_PARTITION = 1 << 24
# What ``save`` writes into its folder (``bm25s``: bm25s' arrays, when it is the backend).
_SAVED = ("index.json", "vocab.json", "tokens.npy", "offsets.npy", "bm25s")
# Relative margin above the no-match score that a hit must clear (float rounding only).
_HIT_MARGIN = 1e-9


class BM25Config(ComponentConfig):
    """BM25 backend, variant, parameters and tokenizer; all sweepable."""

    kind: Literal["bm25"] = "bm25"
    backend: Literal["bm25s", "rank_bm25"] = "bm25s"
    variant: Variant = "lucene"
    k1: float = Field(1.2, ge=0)
    b: float = Field(0.75, ge=0, le=1)
    delta: float = Field(0.5, ge=0)
    tokenizer: TokenizerConfig = TokenizerConfig()

    @model_validator(mode="after")
    def _variant_available(self) -> BM25Config:
        if self.backend == "rank_bm25" and self.variant not in _RANK_BM25_VARIANTS:
            allowed = ", ".join(_RANK_BM25_VARIANTS)
            raise ValueError(
                f"variant {self.variant!r} is not available with backend 'rank_bm25'; "
                f"allowed: {allowed}"
            )
        return self

    def score_scale(self) -> str:
        """BM25 scores have no upper bound."""
        return "BM25 score (0 and up, unbounded: compare within one query)"


class _Engine(Protocol):
    """A built backend: top-k document positions, scores and hit flags for a query batch, and
    single terms' scores in every document."""

    def search(
        self, queries: list[list[str]], k: int, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...

    def term_scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]: ...


def _hits(scores: np.ndarray, no_match: np.ndarray) -> np.ndarray:
    """Which scores beat that of a document without any query term (``no_match`` per row)."""
    base = no_match[:, None]
    return scores > base + _HIT_MARGIN * np.abs(base)


def _top_hits(found: np.ndarray, base: float, k: int) -> np.ndarray:
    """Positions of the top ``k`` documents whose score in ``found`` beats ``base`` (that of no
    match): score descending, ties in indexing order, as Lucene breaks them.

    Only the matching documents are sorted. Selecting the largest ``k`` of the full array
    with numpy's ``argpartition`` (what bm25s and a plain top-k do) is ~25× slower on such
    arrays, where most documents share the score of no match."""
    top = np.flatnonzero(_hits(found[None, :], np.array([base], found.dtype))[0])
    if len(top) > k:  # keep every tie of the k-th score, then sort
        kth = np.partition(-found[top], k - 1)[k - 1]
        top = top[-found[top] <= kth]
    return top[np.argsort(-found[top], kind="stable")[:k]]


class _Spill:
    """A growing array of ``dtype`` values in an unnamed temporary file (in ``TMPDIR``; the
    system frees it with its last user, even a killed process): written by appending or in
    place, read a slice at a time or memory-mapped, never held in memory whole."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self.dtype = np.dtype(dtype)
        self.file = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the spill)
        self.count = 0

    def append(self, values: np.ndarray) -> int:
        """Write ``values`` at the end; where they start."""
        start = self.count
        self.write(start, values)
        return start

    def write(self, start: int, values: np.ndarray) -> None:
        """Write ``values`` from position ``start`` on."""
        view = np.ascontiguousarray(values, dtype=self.dtype).data.cast("B")
        at = start * self.dtype.itemsize
        while view:
            done = os.pwrite(self.file.fileno(), view, at)
            view, at = view[done:], at + done
        self.count = max(self.count, start + len(values))

    def read(self, start: int, stop: int) -> np.ndarray:
        """The values from ``start`` to ``stop``, read into memory."""
        size = self.dtype.itemsize
        out = np.empty(stop - start, dtype=self.dtype)
        view, at = out.data.cast("B"), start * size
        while view:
            done = os.preadv(self.file.fileno(), [view], at)
            if not done:
                raise EOFError(f"temporary file ends before value {at // size}")
            view, at = view[done:], at + done
        return out

    def chunks(self) -> Iterator[np.ndarray]:
        """Every value, ``_BLOCK_TOKENS`` at a time."""
        for start in range(0, self.count, _BLOCK_TOKENS):
            yield self.read(start, min(start + _BLOCK_TOKENS, self.count))


class _Span:
    """Values ``start`` to ``start + count`` of a ``_Spill``, sliced like an array: each slice
    is read from the file into memory of its own (unlike a memory map's pages, which would
    stay in the process once touched). bm25s' search only slices its ``data`` and
    ``indices``, a query term's column at a time, so a spilled matrix is searched this way."""

    def __init__(self, spill: _Spill, start: int, count: int) -> None:
        self.spill, self.start, self.count = spill, start, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, cut: slice) -> np.ndarray:
        a, b, _ = cut.indices(self.count)
        return self.spill.read(self.start + a, self.start + max(a, b))


class _Corpus:
    """The term ids of the indexed texts, in indexing order: the ids of each ``put`` as one
    flat int32 array (a segment), and per text its segment, its start there and its length.

    Once the segments hold more than ``_IN_MEMORY`` ids, they move to a ``_Spill`` and so do
    later ones. Replacing or deleting a text leaves its old ids in their segment until the
    segments hold more such ids than live ones; they are then rewritten as one segment."""

    def __init__(self) -> None:
        self._segments: list[np.ndarray | _Span] = []
        self._spill: _Spill | None = None
        self._segment = np.empty(0, dtype=np.int32)
        self._start = np.empty(0, dtype=np.int64)
        self.lengths = np.empty(0, dtype=np.int32)
        self._stored = 0  # ids held by the segments, live or not

    @classmethod
    def of(cls, flat: np.ndarray, offsets: np.ndarray) -> _Corpus:
        """The corpus whose text ``i`` is ``flat[offsets[i]:offsets[i + 1]]`` (``flat`` is
        kept as it is: a memory map stays one)."""
        corpus = cls()
        corpus._segments = [flat]
        corpus._segment = np.zeros(len(offsets) - 1, dtype=np.int32)
        corpus._start = np.asarray(offsets[:-1], dtype=np.int64)
        corpus.lengths = np.diff(offsets).astype(np.int32)
        corpus._stored = len(flat)
        return corpus

    def __len__(self) -> int:
        return len(self.lengths)

    def put(self, positions: np.ndarray, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Give the texts at ``positions`` (distinct; existing ones, or the next new ones) the
        ids of ``flat``, cut in order by ``lengths``."""
        grow = int(positions.max(initial=-1)) + 1 - len(self)
        if grow > 0:
            self._segment = np.concatenate([self._segment, np.zeros(grow, dtype=np.int32)])
            self._start = np.concatenate([self._start, np.zeros(grow, dtype=np.int64)])
            self.lengths = np.concatenate([self.lengths, np.zeros(grow, dtype=np.int32)])
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        segment = self._stored_as(flat)  # first: it may move the earlier segments
        self._segment[positions] = len(self._segments)
        self._start[positions] = starts
        self.lengths[positions] = lengths
        self._segments.append(segment)
        self._stored += len(flat)
        self._tidy()

    def _stored_as(self, flat: np.ndarray) -> np.ndarray | _Span:
        """``flat`` as a new segment: itself, or a span of the spill (which it starts once the
        corpus outgrows memory, taking every segment along)."""
        if self._spill is None and self._stored + len(flat) > _IN_MEMORY:
            self._spill = _Spill(np.int32)
            self._segments = [self._spilled(s) for s in self._segments]
        return flat if self._spill is None else self._spilled(flat)

    def _spilled(self, segment: np.ndarray | _Span) -> _Span:
        assert self._spill is not None
        if isinstance(segment, _Span) and segment.spill is self._spill:
            return segment
        start = self._spill.count
        for a in range(0, len(segment), _BLOCK_TOKENS):
            self._spill.append(segment[a : a + _BLOCK_TOKENS])
        return _Span(self._spill, start, len(segment))

    def keep(self, kept: np.ndarray) -> None:
        """Keep only the texts where the boolean array ``kept`` is True."""
        self._segment, self._start = self._segment[kept], self._start[kept]
        self.lengths = self.lengths[kept]
        self._tidy()

    def _tidy(self) -> None:
        """Rewrite the segments as one when most ids they hold belong to no text."""
        live = int(self.lengths.sum(dtype=np.int64))
        if self._stored <= 2 * live:
            return
        blocks = [flat for _, flat, _ in self.blocks()]
        if self._spill is None:
            self._segments = [np.concatenate([np.empty(0, dtype=np.int32), *blocks])]
        else:
            self._spill = _Spill(np.int32)
            for flat in blocks:
                self._spill.append(flat)
            self._segments = [_Span(self._spill, 0, live)]
        self._segment[:] = 0
        np.cumsum(self.lengths[:-1], out=self._start[1:])
        self._start[:1] = 0
        self._stored = live

    def renumber(self, new: np.ndarray) -> None:
        """Replace every term id ``t`` by ``new[t]``."""
        if self._spill is not None:
            for a in range(0, self._spill.count, _BLOCK_TOKENS):
                part = self._spill.read(a, min(a + _BLOCK_TOKENS, self._spill.count))
                self._spill.write(a, new[part])
            return
        for s, segment in enumerate(self._segments):
            assert isinstance(segment, np.ndarray)
            if not segment.flags.writeable:  # a memory map: read into memory now
                self._segments[s] = new[segment]
                continue
            for a in range(0, len(segment), _BLOCK_TOKENS):
                part = segment[a : a + _BLOCK_TOKENS]
                part[:] = new[part]

    def terms(self, position: int) -> np.ndarray:
        """The term ids of the text at ``position``."""
        start = int(self._start[position])
        return self._segments[self._segment[position]][start : start + self.lengths[position]]

    def blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Consecutive texts, about ``_BLOCK_TOKENS`` ids at a time: the position of the
        first, their ids end to end and their lengths."""
        ends = np.cumsum(self.lengths, dtype=np.int64)
        first = 0
        while first < len(self):
            base = int(ends[first - 1]) if first else 0
            stop = int(np.searchsorted(ends, base + _BLOCK_TOKENS, side="right"))
            stop = max(stop, first + 1)
            yield first, self._gather(first, stop), self.lengths[first:stop]
            first = stop

    def texts(self) -> Iterator[np.ndarray]:
        """The term ids of every text, in order."""
        for _, flat, lengths in self.blocks():
            yield from np.split(flat, np.cumsum(lengths[:-1]))

    def _gather(self, first: int, stop: int) -> np.ndarray:
        """The ids of the texts at positions ``first`` to ``stop``, end to end: one slice of a
        segment when they lie end to end in it, as texts added together do."""
        segment, start = self._segment[first:stop], self._start[first:stop]
        length = self.lengths[first:stop]
        apart = (segment[1:] != segment[:-1]) | (start[1:] != start[:-1] + length[:-1])
        bounds = [0, *(np.flatnonzero(apart) + 1).tolist(), stop - first]
        runs = [
            self._segments[segment[a]][start[a] : start[b - 1] + length[b - 1]]
            for a, b in pairwise(bounds)
        ]
        return runs[0] if len(runs) == 1 else np.concatenate(runs)


def _pairs(
    terms: np.ndarray, texts: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (term, text) pairs of the term occurrences ``terms`` in ``texts`` (of
    ``n`` texts numbered from 0), ordered by term then text, and how often each occurs."""
    key = terms.astype(np.int64) * n + texts
    key.sort()
    first = np.ones(len(key), dtype=bool)
    np.not_equal(key[1:], key[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    term, text = np.divmod(key[starts], n)
    return term, text, np.diff(starts, append=len(key))


def _term_weights(
    config: BM25Config, df: np.ndarray, n_docs: int, avgdl: np.floating
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each term's idf and, for bm25l / bm25+, its weight at tf = 0 (bm25s'
    ``nonoccurrence_array``), as bm25s computes them: its idf function on every distinct
    document frequency, its term-frequency function at tf = 0 and an average-length text."""
    frequencies, which = np.unique(df, return_inverse=True)
    idf_of = _select_idf_scorer(config.variant)
    idf = np.array([idf_of(f, N=n_docs) for f in frequencies.tolist()], dtype=np.float64)
    nonoccurrence = None
    if config.variant in _NONOCCURRENCE:
        tfc = _select_tfc_scorer(config.variant)
        at_zero = tfc(
            tf_array=0, l_d=avgdl, l_avg=avgdl, k1=config.k1, b=config.b, delta=config.delta
        )
        nonoccurrence = (idf * at_zero).astype(np.float32)[which]
    return idf.astype(np.float32)[which], nonoccurrence


class _Matrix:
    """bm25s' score matrix of a corpus (``scores``: CSC arrays of every text's term weights,
    texts as rows, and ``num_docs``) and its ``nonoccurrence_array``, equal to what
    ``bm25s.BM25.index`` builds, robertson's and lucene's weights scaled by ``k1 + 1`` (see
    the module docstring).

    A matrix of more than ``_IN_MEMORY`` entries is built ``_PARTITION`` entries (a range of
    terms) at a time into two ``_Spill`` files (``spills``), which search reads by ``_Span``."""

    def __init__(self, config: BM25Config, corpus: _Corpus, vocab: Vocabulary) -> None:
        """Terms no text has any more are first dropped from ``vocab`` and ``corpus``
        renumbered: bm25s must not see a term without documents (bm25+'s idf divides by
        its frequency)."""
        df = np.zeros(len(vocab), dtype=np.int64)
        for _, flat, lengths in corpus.blocks():
            texts = np.repeat(np.arange(len(lengths)), lengths)
            df += np.bincount(_pairs(flat, texts, len(lengths))[0], minlength=len(df))
        if not df.all():
            kept = np.flatnonzero(df)
            new = np.full(len(df), -1, dtype=np.int32)
            new[kept] = np.arange(len(kept), dtype=np.int32)
            corpus.renumber(new)
            vocab.keep(kept.tolist())
            df = df[kept]
        self.config, self.corpus = config, corpus
        self.avgdl = corpus.lengths.mean()
        self.idf, self.nonoccurrence = _term_weights(config, df, len(corpus), self.avgdl)
        self.indptr = np.zeros(len(df) + 1, dtype=np.int64)
        np.cumsum(df, out=self.indptr[1:])
        self.spills: dict[str, _Spill] = {}
        entries = int(self.indptr[-1])
        self.scores: dict[str, Any] = {"indptr": self.indptr, "num_docs": len(corpus)}
        if entries <= _IN_MEMORY:
            self.scores["data"], self.scores["indices"] = self._part(0, len(df))
            return
        self.spills = {"data": _Spill(np.float32), "indices": _Spill(np.int32)}
        for first, stop in pairwise(self._bounds()):
            parts = self._part(first, stop)
            for spill, part in zip(self.spills.values(), parts, strict=True):
                spill.append(part)
        for key, spill in self.spills.items():
            self.scores[key] = _Span(spill, 0, spill.count)

    def _bounds(self) -> list[int]:
        """Term ids cutting the terms into ranges of at most ``_PARTITION`` entries (or one
        term, when it alone has more)."""
        bounds = [0]
        while bounds[-1] < len(self.indptr) - 1:
            reach = self.indptr[bounds[-1]] + _PARTITION
            stop = int(np.searchsorted(self.indptr, reach, side="right")) - 1
            bounds.append(max(stop, bounds[-1] + 1))
        return bounds

    def _part(self, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The CSC ``data`` and ``indices`` of terms ``first`` to ``stop``: every block's
        (term, text) scores placed by term (a counting sort; texts ascend within a term)."""
        config, idf, nonoccurrence = self.config, self.idf, self.nonoccurrence
        tfc = _select_tfc_scorer(config.variant)
        scale = np.float32(config.k1 + 1) if config.variant in ("robertson", "lucene") else None
        base = self.indptr[first]
        data = np.empty(self.indptr[stop] - base, dtype=np.float32)
        indices = np.empty(len(data), dtype=np.int32)
        heads = self.indptr[first:stop] - base  # where each term's next entry goes
        whole = first == 0 and stop == len(idf)
        for start, flat, lengths in self.corpus.blocks():
            texts = np.repeat(np.arange(len(lengths)), lengths)
            if not whole:
                inside = (flat >= first) & (flat < stop)
                flat, texts = flat[inside], texts[inside]
            term, text, tf = _pairs(flat, texts, len(lengths))
            weight = idf[term] * tfc(
                tf_array=tf.astype(np.float32),
                l_d=lengths[text],
                l_avg=self.avgdl,
                k1=config.k1,
                b=config.b,
                delta=config.delta,
            )
            if nonoccurrence is not None:
                weight -= nonoccurrence[term]
            scores = weight.astype(np.float32)
            if scale is not None:
                scores *= scale
            group = np.flatnonzero(np.diff(term, prepend=-1))  # each term's first pair
            count = np.diff(group, append=len(term))
            at = heads[term - first] + np.arange(len(term)) - np.repeat(group, count)
            data[at] = scores
            indices[at] = text + start
            heads[term[group] - first] += count
        return data, indices


def _model(
    config: BM25Config,
    scores: dict[str, Any],
    vocab: dict[str, int],
    nonoccurrence: np.ndarray | None,
) -> bm25s.BM25:
    """A ``bm25s.BM25`` over a built score matrix, with every field its ``index`` sets."""
    model = bm25s.BM25(k1=config.k1, b=config.b, delta=config.delta, method=config.variant)
    model.scores = scores
    model.vocab_dict = vocab
    model.unique_token_ids_set = set(vocab.values())
    model.nonoccurrence_array = nonoccurrence
    return model


class _Bm25sEngine:
    """bm25s: precomputed term weights in a sparse matrix; batch retrieval."""

    def __init__(self, model: bm25s.BM25, spills: Mapping[str, _Spill] | None = None) -> None:
        self.model = model
        self.spills = spills or {}  # the files its spilled arrays are read from, by key

    @classmethod
    def build(cls, config: BM25Config, vocab: Vocabulary, corpus: _Corpus) -> _Bm25sEngine:
        """Index ``corpus``, term ids over ``vocab`` (see ``_Matrix``); bm25s keeps
        ``vocab.ids`` itself, not a copy."""
        matrix = _Matrix(config, corpus, vocab)
        model = _model(config, matrix.scores, vocab.ids, matrix.nonoccurrence)
        return cls(model, matrix.spills)

    def search(
        self, queries: list[list[str]], k: int, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """bm25s' scores of every document per query, then ``_top_hits`` (not bm25s' own
        top-k: see there); empty queries (no terms) are skipped."""
        n = len(queries)
        docs = np.zeros((n, k), dtype=np.int64)
        scores = np.zeros((n, k), dtype=np.float64)
        hits = np.zeros((n, k), dtype=bool)
        rows = [i for i, q in enumerate(queries) if q]
        no_match = self._no_match([queries[i] for i in rows])
        for row, base in zip(rows, no_match.tolist(), strict=True):
            found = self.model.get_scores(queries[row], weight_mask=mask)
            top = _top_hits(found, base, k)
            docs[row, : len(top)], scores[row, : len(top)] = top, found[top]
            hits[row, : len(top)] = True
        return docs, scores, hits

    def term_scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each term's score in every document, (terms, documents), and its score in a
        document without it; terms the index never saw score 0."""
        n = int(self.model.scores["num_docs"])
        found = np.zeros((len(terms), n), dtype=np.float64)
        vocab = self.model.vocab_dict
        for row, term in enumerate(terms):
            if term in vocab:
                found[row] = self.model.get_scores([term])
        nonoccurrence = self.model.nonoccurrence_array
        base = np.zeros(len(terms), dtype=np.float64)
        if nonoccurrence is not None:
            base = np.array([nonoccurrence[vocab[t]] if t in vocab else 0.0 for t in terms])
        return found, base

    def _no_match(self, queries: list[list[str]]) -> np.ndarray:
        """Score of a document without any query term: bm25s' non-occurrence sum, or 0."""
        nonoccurrence = self.model.nonoccurrence_array
        if nonoccurrence is None:
            return np.zeros(len(queries), dtype=np.float32)
        ids = [np.asarray(self.model.get_tokens_ids(q), dtype=np.int32) for q in queries]
        return np.array([nonoccurrence[i].sum() for i in ids], dtype=np.float32)

    def save(self, directory: Path) -> None:
        """bm25s' arrays, as ``.npy`` files under its names (a spilled one copied from its
        file a part at a time)."""
        directory.mkdir()
        arrays = {f"{key}.csc": self.model.scores[key] for key in ("data", "indices", "indptr")}
        if self.model.nonoccurrence_array is not None:
            arrays["nonoccurrence_array"] = self.model.nonoccurrence_array
        for name, array in arrays.items():
            spill = self.spills.get(name.removesuffix(".csc"))
            path = directory / f"{name}.index.npy"
            if spill is None:
                np.save(path, array, allow_pickle=False)
            else:
                _write_npy(path, spill.dtype, spill.count, spill.chunks())

    @classmethod
    def load(
        cls, directory: Path, config: BM25Config, vocab: dict[str, int], n_docs: int, mmap: bool
    ) -> _Bm25sEngine:
        """Read (or memory-map) the arrays :meth:`save` wrote, for ``n_docs`` texts over
        ``vocab`` (the index's own: the JSON files bm25s writes, which earlier saves hold
        too, are not read)."""
        mode: Literal["r"] | None = "r" if mmap else None

        def array(name: str) -> np.ndarray:
            return np.load(directory / f"{name}.index.npy", mmap_mode=mode, allow_pickle=False)

        scores: dict[str, Any] = {p: array(f"{p}.csc") for p in ("data", "indices", "indptr")}
        scores["num_docs"] = n_docs
        nonoccurrence = array("nonoccurrence_array") if config.variant in _NONOCCURRENCE else None
        return cls(_model(config, scores, vocab, nonoccurrence))


class _BM25L(rank_bm25.BM25L):
    """rank-bm25's BM25L with the published term weight (no extra tf factor)."""

    def get_scores(self, query: list[str]) -> np.ndarray:
        """Scores of every document for ``query``."""
        score = np.zeros(self.corpus_size)
        doc_len = np.array(self.doc_len)
        for q in query:
            q_freq = np.array([(doc.get(q) or 0) for doc in self.doc_freqs])
            ctd = q_freq / (1 - self.b + self.b * doc_len / self.avgdl)
            score += (
                (self.idf.get(q) or 0)
                * (self.k1 + 1)
                * (ctd + self.delta)
                / (self.k1 + ctd + self.delta)
            )
        return score


class _RankBm25Engine:
    """rank-bm25: scores every document per query in Python; the slow, plain reference."""

    def __init__(self, cfg: BM25Config, corpus: list[list[str]]) -> None:
        if cfg.variant == "robertson":
            self.model = rank_bm25.BM25Okapi(corpus, k1=cfg.k1, b=cfg.b, epsilon=0.0)
            self.zero_tf = 0.0
        elif cfg.variant == "bm25l":
            self.model = _BM25L(corpus, k1=cfg.k1, b=cfg.b, delta=cfg.delta)
            self.zero_tf = (cfg.k1 + 1) * cfg.delta / (cfg.k1 + cfg.delta)
        else:
            self.model = rank_bm25.BM25Plus(corpus, k1=cfg.k1, b=cfg.b, delta=cfg.delta)
            self.zero_tf = cfg.delta

    def search(
        self, queries: list[list[str]], k: int, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One full score vector per query, then ``_top_hits``."""
        n = len(queries)
        docs = np.zeros((n, k), dtype=np.int64)
        scores = np.zeros((n, k), dtype=np.float64)
        hits = np.zeros((n, k), dtype=bool)
        for i, query in enumerate(queries):
            found = np.asarray(self.model.get_scores(query), dtype=np.float64)
            if mask is not None:
                found[mask == 0] = -np.inf
            top = _top_hits(found, self._no_match(query), k)
            docs[i, : len(top)], scores[i, : len(top)] = top, found[top]
            hits[i, : len(top)] = True
        return docs, scores, hits

    def term_scores(self, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each term's score in every document, (terms, documents), and its score in a
        document without it."""
        found = (
            np.stack([self.model.get_scores([t]) for t in terms])
            if terms
            else np.zeros((0, self.model.corpus_size))
        )
        return found.astype(np.float64), np.array([self._no_match([t]) for t in terms])

    def _no_match(self, query: list[str]) -> float:
        """Score of a document without any query term: the tf = 0 weights of its terms."""
        return sum((self.model.idf.get(t) or 0) * self.zero_tf for t in query)


class BM25Index:
    """BM25 over chunk ids with incremental add / delete, metadata filters and batch search."""

    def __init__(self, config: BM25Config | None = None) -> None:
        self.config = config or BM25Config()
        self._tokenizer = WordTokenizer(self.config.tokenizer)
        self._ids: list[str] = []
        self._position: dict[str, int] = {}
        self._vocab = Vocabulary()
        self._corpus = _Corpus()
        self._meta = MetadataTable()  # row i: the metadata of text i
        self._engine: _Engine | None = None
        self._id_array = np.empty(0, dtype=object)
        self._stale = False

    def count(self) -> int:
        """Number of indexed texts."""
        return len(self._ids)

    def __len__(self) -> int:
        return self.count()

    def add(self, ids: Sequence[str], texts: Sequence[str], metadata: Metadata = None) -> None:
        """Index ``texts`` under ``ids``; an id already present is replaced (it keeps its
        place in indexing order)."""
        if len(texts) != len(ids) or (metadata is not None and len(metadata) != len(ids)):
            raise DataError("ids, texts and metadata must have the same length")
        new = self._tokenizer.tokenize_corpus(texts, self._vocab)
        at = np.empty(len(ids), dtype=np.int64)
        for i, id_ in enumerate(ids):
            pos = self._position.get(id_)
            if pos is None:
                pos = self._position[id_] = len(self._ids)
                self._ids.append(id_)
            at[i] = pos
        # the last text given for each position (an id may come twice)
        positions, last = np.unique(at[::-1], return_index=True)
        last = len(at) - 1 - last
        kept = [new[i] for i in last.tolist()]
        lengths = np.fromiter(map(len, kept), dtype=np.int32, count=len(kept))
        flat = np.fromiter(chain.from_iterable(kept), np.int32, int(lengths.sum(dtype=np.int64)))
        self._corpus.put(positions, flat, lengths)
        kept_meta = [{} if metadata is None else metadata[i] for i in last.tolist()]
        self._meta.set(positions, kept_meta)
        self._stale = True

    def delete(self, ids: Sequence[str]) -> None:
        """Remove ``ids`` (unknown ids are ignored)."""
        gone = [self._position[i] for i in ids if i in self._position]
        if not gone:
            return
        kept = np.ones(self.count(), dtype=bool)
        kept[gone] = False
        self._ids = [id_ for id_, keep in zip(self._ids, kept.tolist(), strict=True) if keep]
        self._position = {id_: p for p, id_ in enumerate(self._ids)}
        self._corpus.keep(kept)
        self._meta.keep(kept)
        self._stale = True

    def _built(self) -> _Engine | None:
        """The backend index over the current corpus (None when no text has a term)."""
        if self._stale:
            self._stale = False
            self._id_array = np.array(self._ids, dtype=object)
            self._engine = None
            if self._corpus.lengths.any():
                if self.config.backend == "bm25s":
                    self._engine = _Bm25sEngine.build(self.config, self._vocab, self._corpus)
                else:
                    terms = [self._vocab.decode(t.tolist()) for t in self._corpus.texts()]
                    self._engine = _RankBm25Engine(self.config, terms)
        return self._engine

    def search(
        self, texts: Sequence[str], k: int, filter: Mapping[str, Any] | None = None
    ) -> Ranking:
        """Top-``k`` ids and scores for every query text (a str is one query), as one batch."""
        if isinstance(texts, str):
            texts = [texts]
        ids, scores, engine, mask = self._start(len(texts), k, filter)
        if engine is None:
            return Ranking(ids, scores)
        kk = min(k, self.count())
        docs, found, hits = engine.search(self._tokenizer.tokenize_many(texts), kk, mask)
        ids[:, :kk] = np.where(hits, self._id_array[docs], "")
        scores[:, :kk] = np.where(hits, found, -np.inf)
        return Ranking(ids, scores)

    def _start(
        self, n: int, k: int, filter: Mapping[str, Any] | None
    ) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray | None]:
        """Empty results for ``n`` queries, the built engine and the filter's mask; the engine
        is None when nothing can match (empty index, or a filter that matches nothing)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        ids = np.full((n, k), "", dtype=object)
        scores = np.full((n, k), -np.inf, dtype=np.float64)
        engine = self._built()
        mask = self._mask(filter)
        if mask is not None and not mask.any():
            engine = None
        return ids, scores, engine, mask

    def terms(self, text: str) -> list[str]:
        """``text`` as this index's terms (its tokenizer: lowercasing, stopwords, stemming)."""
        return self._tokenizer.tokenize(text)

    def document_terms(self, ids: Sequence[str]) -> list[list[str]]:
        """The terms of the indexed texts ``ids`` (unknown ids: no terms)."""
        at, terms = self._position, self._corpus.terms
        return [self._vocab.decode(terms(at[i]).tolist()) if i in at else [] for i in ids]

    def score(self, text: str, ids: Sequence[str]) -> np.ndarray:
        """BM25 score of each indexed text of ``ids`` for the query ``text`` (its terms counted
        as :meth:`search` counts them): what a teacher compares two given passages by."""
        counts = Counter(self.terms(text))
        engine = self._built()
        rows = [self._position[i] for i in ids]
        if engine is None or not counts:
            return np.zeros(len(rows))
        per_term, _ = engine.term_scores(list(counts))
        weights = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        found: np.ndarray = weights @ per_term[:, rows]
        return found

    def search_weighted(
        self,
        queries: Sequence[Mapping[str, float]],
        k: int,
        filter: Mapping[str, Any] | None = None,
    ) -> Ranking:
        """Top-``k`` for weighted-term queries (term → weight, terms as :meth:`terms` gives
        them): a text scores the weighted sum of its terms' BM25 scores — how pseudo-relevance
        feedback searches with an expanded query."""
        ids, scores, engine, mask = self._start(len(queries), k, filter)
        if engine is None:
            return Ranking(ids, scores)
        kk = min(k, self.count())
        for row, query in enumerate(queries):
            terms = list(query)
            if not terms:
                continue
            weights = np.array([query[t] for t in terms], dtype=np.float64)
            per_term, absent = engine.term_scores(terms)
            total = weights @ per_term
            if mask is not None:
                total[mask == 0] = -np.inf
            top = _top_hits(total, float(weights @ absent), kk)
            ids[row, : len(top)] = self._id_array[top]
            scores[row, : len(top)] = total[top]
        return Ranking(ids, scores)

    def _mask(self, filter: Mapping[str, Any] | None) -> np.ndarray | None:
        """1.0 for documents matching every key of ``filter`` exactly, else 0.0."""
        if not filter:
            return None
        return self._meta.rows(filter).astype(np.float32)

    def save(self, path: Path | str) -> None:
        """Write the index into the folder ``path``: ``index.json`` (config, ids, the texts'
        metadata as columns), ``vocab.json``, the tokenized
        corpus (``tokens.npy``: term ids, flat; ``offsets.npy``: where each text starts, and
        the end) and, with bm25s, its arrays (``bm25s``); a rank-bm25 index is rebuilt from
        the corpus on load. Large arrays are written a part at a time.

        Each file is written aside and then moved in place, so an index loaded from ``path``
        with ``mmap=True`` may be saved back there.
        """
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        engine = self._built()
        corpus = self._corpus
        with tempfile.TemporaryDirectory(prefix=".saving-", dir=directory) as aside:
            work = Path(aside)
            tokens = (flat for _, flat, _ in corpus.blocks())
            count = int(corpus.lengths.sum(dtype=np.int64))
            _write_npy(work / "tokens.npy", np.dtype(np.int32), count, tokens)
            offsets = np.zeros(len(corpus) + 1, dtype=np.int64)
            np.cumsum(corpus.lengths, out=offsets[1:])
            np.save(work / "offsets.npy", offsets, allow_pickle=False)
            _write_json(work / "vocab.json", self._vocab.terms)
            state = {
                "config": self.config.model_dump(mode="json"),
                "ids": self._ids,
                "metadata_columns": self._meta.to_json(),
            }
            _write_json(work / "index.json", state)
            if isinstance(engine, _Bm25sEngine):
                engine.save(work / "bm25s")
            for name in _SAVED:  # what this save did not write goes too (a stale bm25s)
                new, old = work / name, directory / name
                if old.is_dir() or (old.exists() and not new.exists()):
                    old.rename(work / f"replaced-{name}")
                if new.exists():
                    new.replace(old)

    @classmethod
    def load(cls, path: Path | str, mmap: bool = False) -> BM25Index:
        """Read an index written by :meth:`save`; a folder that holds none is a
        ``DataError`` naming it.

        ``mmap=True`` memory-maps the tokenized corpus and bm25s' arrays instead of reading
        them.
        """
        directory = Path(path)
        try:
            return cls._read(directory, mmap)
        except FileNotFoundError as exc:
            reason = f"no {Path(exc.filename).name}" if exc.filename else describe(exc, path)
        except OSError as exc:
            reason = describe(exc, exc.filename or path)
        except (ValueError, KeyError, TypeError) as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{directory}: not a BM25 index saved by ragbench ({reason})")

    @classmethod
    def _read(cls, directory: Path, mmap: bool) -> BM25Index:
        """:meth:`load`, its errors unexplained. Older folders hold the metadata as each
        distinct dict once with a slot per text (``metadata.npy``), or as one dict per text."""
        state = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        index = cls(BM25Config.model_validate(state["config"]))
        index._vocab = Vocabulary(json.loads((directory / "vocab.json").read_text("utf-8")))
        mode: Literal["r"] | None = "r" if mmap else None
        flat = np.load(directory / "tokens.npy", mmap_mode=mode, allow_pickle=False)
        offsets = np.load(directory / "offsets.npy", allow_pickle=False)
        index._corpus = _Corpus.of(flat, offsets)
        index._ids = ids = list(state["ids"])
        if "metadata_columns" in state:
            index._meta = MetadataTable.from_json(state["metadata_columns"])
        elif "metadata_values" in state:  # each distinct dict once, a slot per text
            values = state["metadata_values"]
            at = np.load(directory / "metadata.npy", allow_pickle=False)
            index._meta = MetadataTable.of([values[i] for i in at.tolist()])
        else:
            index._meta = MetadataTable.of(state["metadata"])
        if not len(index._ids) == len(index._corpus) == len(index._meta):
            raise ValueError("ids, offsets.npy and metadata disagree on the number of texts")
        index._position = {id_: p for p, id_ in enumerate(index._ids)}
        index._stale = True
        if (directory / "bm25s").is_dir():
            vocab = index._vocab.ids
            index._engine = _Bm25sEngine.load(
                directory / "bm25s", index.config, vocab, len(ids), mmap
            )
            index._id_array = np.array(ids, dtype=object)
            index._stale = False
        return index


def _write_npy(path: Path, dtype: np.dtype, count: int, parts: Iterable[np.ndarray]) -> None:
    """Write the arrays ``parts`` (``count`` values of ``dtype`` in all) end to end as one
    ``.npy`` file, without joining them in memory."""
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False}
    with open(path, "wb") as out:
        np.lib.format.write_array_header_1_0(out, {**header, "shape": (count,)})
        for part in parts:
            out.write(np.ascontiguousarray(part, dtype=dtype).data)


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")


components("sparse").register(BM25Config)(BM25Index)
