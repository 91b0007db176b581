"""BM25 over chunk ids, with two backends: ``bm25s`` (fast, default) and ``rank_bm25`` (reference).

Texts become terms through ragbench's :class:`WordTokenizer`, so both backends see identical
terms. The index keeps the tokenized corpus as term ids over one :class:`Vocabulary` (bm25s
indexes those ids as they are); adds and deletes re-index lazily on the next search.

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
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import chain, pairwise
from pathlib import Path
from typing import Any, Literal, Protocol

import bm25s
import numpy as np
import rank_bm25
from pydantic import Field, model_validator

from ragbench.errors import DataError
from ragbench.index.filters import matches
from ragbench.registry import ComponentConfig, components
from ragbench.text.tokenize import TokenizerConfig, Vocabulary, WordTokenizer
from ragbench.types import Ranking

__all__ = ["BM25Config", "BM25Index"]

Variant = Literal["robertson", "lucene", "atire", "bm25l", "bm25+"]
Metadata = Sequence[Mapping[str, Any]] | None

_RANK_BM25_VARIANTS = ("robertson", "bm25l", "bm25+")
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


class _Bm25sEngine:
    """bm25s: precomputed term weights in a sparse matrix; batch retrieval."""

    def __init__(self, model: bm25s.BM25) -> None:
        self.model = model

    @classmethod
    def build(
        cls, config: BM25Config, vocab: dict[str, int], token_ids: list[list[int]]
    ) -> _Bm25sEngine:
        """Index a corpus given as term ids over ``vocab`` (term → id, every term in some
        text), bm25s' token-id input; bm25s keeps ``vocab`` itself, not a copy."""
        model = bm25s.BM25(k1=config.k1, b=config.b, delta=config.delta, method=config.variant)
        model.index((token_ids, vocab), create_empty_token=False, show_progress=False)
        if config.variant in ("robertson", "lucene"):
            model.scores["data"] *= np.float32(config.k1 + 1)
        return cls(model)

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
        """bm25s' own files: .npy arrays (memory-mappable) and JSON vocabulary / parameters."""
        self.model.save(directory, show_progress=False)

    @classmethod
    def load(cls, directory: Path, mmap: bool) -> _Bm25sEngine:
        """Read (or memory-map) an index written by :meth:`save`."""
        return cls(bm25s.BM25.load(directory, mmap=mmap, show_progress=False))


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
        self._meta: list[Mapping[str, Any]] = []
        self._vocab = Vocabulary()
        self._docs: list[list[int]] = []  # term ids of each text, over self._vocab
        self._saved: tuple[np.ndarray, np.ndarray] | None = None  # _docs as ``load`` read them
        self._position: dict[str, int] = {}
        self._engine: _Engine | None = None
        self._id_array = np.empty(0, dtype=object)
        self._stale = False
        self._dropped = False  # a text was deleted or replaced: some terms may be in no text

    def count(self) -> int:
        """Number of indexed texts."""
        return len(self._ids)

    def __len__(self) -> int:
        return self.count()

    def add(self, ids: Sequence[str], texts: Sequence[str], metadata: Metadata = None) -> None:
        """Index ``texts`` under ``ids``; an id already present is replaced."""
        if len(texts) != len(ids) or (metadata is not None and len(metadata) != len(ids)):
            raise DataError("ids, texts and metadata must have the same length")
        docs = self._corpus()
        new = self._tokenizer.tokenize_corpus(texts, self._vocab)
        no_metadata: Mapping[str, Any] = {}  # shared by the texts without any, never changed
        for i, id_ in enumerate(ids):
            meta = dict(metadata[i]) if metadata is not None else no_metadata
            pos = self._position.get(id_)
            if pos is None:
                self._position[id_] = len(self._ids)
                self._ids.append(id_)
                self._meta.append(meta)
                docs.append(new[i])
            else:
                self._meta[pos], docs[pos] = meta, new[i]
                self._dropped = True
        self._stale = True

    def delete(self, ids: Sequence[str]) -> None:
        """Remove ``ids`` (unknown ids are ignored)."""
        gone = {self._position[i] for i in ids if i in self._position}
        if not gone:
            return
        keep = [p for p in range(self.count()) if p not in gone]
        docs = self._corpus()
        self._ids = [self._ids[p] for p in keep]
        self._meta = [self._meta[p] for p in keep]
        self._docs = [docs[p] for p in keep]
        self._position = {id_: p for p, id_ in enumerate(self._ids)}
        self._stale = self._dropped = True

    def _corpus(self) -> list[list[int]]:
        """The term ids of every text (an index read by ``load`` splits its arrays now)."""
        if self._saved is not None:
            flat, offsets = self._saved
            self._saved = None
            shared = list(range(len(self._vocab)))  # one int object per id, as tokenizing gives
            pick = shared.__getitem__
            bounds = pairwise(offsets.tolist())
            self._docs = [list(map(pick, flat[a:b].tolist())) for a, b in bounds]
        return self._docs

    def _compact(self) -> list[list[int]]:
        """The corpus, after dropping the vocabulary's terms that no text has any more (bm25s
        must not see a term without documents: bm25+'s idf divides by its frequency)."""
        docs = self._corpus()
        if self._dropped:
            self._dropped = False
            used = set(chain.from_iterable(docs))
            if len(used) < len(self._vocab):
                new = self._vocab.keep(sorted(used))
                self._docs = docs = [[new[i] for i in doc] for doc in docs]
        return docs

    def _built(self) -> _Engine | None:
        """The backend index over the current corpus (None when no text has a term)."""
        if self._stale:
            self._stale = False
            self._id_array = np.array(self._ids, dtype=object)
            self._engine = None
            docs = self._compact()
            if any(docs):
                if self.config.backend == "bm25s":
                    self._engine = _Bm25sEngine.build(self.config, self._vocab.ids, docs)
                else:
                    terms = [self._vocab.decode(doc) for doc in docs]
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
        docs, at = self._corpus(), self._position
        return [self._vocab.decode(docs[at[i]]) if i in at else [] for i in ids]

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
        found = [matches(m, filter) for m in self._meta]
        return np.asarray(found, dtype=np.float32).reshape(-1)

    def save(self, path: Path | str) -> None:
        """Write ``index.json`` (config, ids, metadata), the tokenized corpus and bm25s' arrays.

        The corpus is stored as ``tokens.npy`` (term ids, flat), ``offsets.npy`` and
        ``vocab.json``; a rank-bm25 index is rebuilt from it on load.
        """
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        engine = self._built()
        flat, offsets = self._arrays()
        np.save(directory / "tokens.npy", flat, allow_pickle=False)
        np.save(directory / "offsets.npy", offsets, allow_pickle=False)
        _write_json(directory / "vocab.json", self._vocab.terms)
        state = {
            "config": self.config.model_dump(mode="json"),
            "ids": self._ids,
            "metadata": self._meta,
        }
        _write_json(directory / "index.json", state)
        if isinstance(engine, _Bm25sEngine):
            engine.save(directory / "bm25s")

    @classmethod
    def load(cls, path: Path | str, mmap: bool = False) -> BM25Index:
        """Read an index written by :meth:`save`.

        ``mmap=True`` memory-maps bm25s' arrays instead of reading them; do not save another
        index over a directory that is mapped.
        """
        directory = Path(path)
        state = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        index = cls(BM25Config.model_validate(state["config"]))
        terms = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
        index._vocab = Vocabulary(terms)
        flat = np.load(directory / "tokens.npy", allow_pickle=False)
        index._saved = flat, np.load(directory / "offsets.npy", allow_pickle=False)
        index._ids = state["ids"]
        index._meta = state["metadata"]
        index._position = {id_: p for p, id_ in enumerate(index._ids)}
        index._stale = True
        if (directory / "bm25s").is_dir():
            index._built_from(_Bm25sEngine.load(directory / "bm25s", mmap))
        return index

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The corpus as ``save`` writes it: every text's term ids in one array, and where
        each text starts in it (and the end)."""
        if self._saved is not None:
            return self._saved
        docs = self._docs
        offsets = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, docs), np.int64, len(docs)), out=offsets[1:])
        flat = np.fromiter(chain.from_iterable(docs), np.int32, int(offsets[-1]))
        return flat, offsets

    def _built_from(self, engine: _Engine) -> None:
        """Use a loaded backend index for the current corpus instead of re-indexing."""
        self._engine = engine
        self._id_array = np.array(self._ids, dtype=object)
        self._stale = False


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")


components("sparse").register(BM25Config)(BM25Index)
