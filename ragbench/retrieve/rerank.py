"""Rerankers: rescore the head of a first-stage ranking with a more expensive model.

Kinds: ``none`` (pass-through), ``cross_encoder`` (sentence-transformers ``CrossEncoder``),
``dense`` (cosine similarity of a bi-encoder) and ``llm`` (a 0–10 relevance judge behind an
OpenAI-compatible chat-completions endpoint). Each rescoring kind scores the first
``candidates`` hits of every row and returns the top ``k`` of those, sorted by the new score
(ties keep first-stage order); hits beyond ``candidates`` are dropped, so rows hold at most
``min(k, candidates)`` hits. Output rankings are always ``k`` columns wide.

As the ``reranker`` axis, a rescoring kind plans one ``rerank`` stage over the first stage's
ranking (it wants ``candidates`` hits from it); the ``dense`` kind also asks for the document
vectors of its own embedder, so a sweep embeds the corpus once for it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from ragbench import progress
from ragbench.errors import RagbenchError
from ragbench.index.batching import keep_freed_memory
from ragbench.index.finetune import Family, Tunable
from ragbench.llm.client import LLMClient, LLMError, LLMOptions
from ragbench.models import hub_offline, resolve_model
from ragbench.protocols import Embedder, Reranker
from ragbench.registry import ComponentConfig, component_field, components
from ragbench.retrieve.artifacts import RANKING, ChunkSet, QueryUsage, Timed
from ragbench.retrieve.assemble import quote_untrusted, system_notice
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, component_key
from ragbench.retrieve.timed import QUALITY_BATCH, per_query, rows
from ragbench.types import Ranking

__all__ = [
    "CrossEncoderConfig",
    "CrossEncoderReranker",
    "DenseRerankConfig",
    "DenseReranker",
    "LLMRerankConfig",
    "LLMReranker",
    "NoRerankConfig",
    "NoReranker",
    "RerankError",
    "RerankStats",
    "RerankerConfig",
    "judge_messages",
    "parse_score",
    "rerank",
]

log = logging.getLogger(__name__)

# Pairs of (query index, chunk id); a scorer returns one float per pair.
Pairs = list[tuple[int, str]]
Scorer = Callable[[Sequence[str], Pairs, Mapping[str, str]], np.ndarray]


class RerankError(RagbenchError):
    """A reranker could not score (model missing, judge unreachable or failing, text missing)."""


@dataclass
class RerankStats:
    """Counters a reranker keeps so callers can report cost."""

    pairs: int = 0
    seconds: float = 0.0


def _with_depth(ranking: Ranking, k: int) -> Ranking:
    """``ranking`` cut or padded to exactly ``k`` columns."""
    if ranking.depth >= k:
        return ranking.head(k)
    pad = k - ranking.depth
    n = len(ranking.ids)
    ids = np.concatenate([ranking.ids.reshape(n, -1), np.full((n, pad), "", dtype=object)], 1)
    scores = np.concatenate([ranking.scores.reshape(n, -1), np.full((n, pad), -np.inf)], 1)
    return Ranking(ids, scores)


def _rescore(
    queries: Sequence[str],
    ranking: Ranking,
    texts: Mapping[str, str],
    k: int,
    candidates: int,
    score: Scorer,
    stats: RerankStats,
) -> Ranking:
    """Score the first ``candidates`` of every row in one ``score`` call; keep the top ``k``."""
    if len(queries) != len(ranking.ids):
        raise ValueError(f"{len(queries)} queries for a ranking of {len(ranking.ids)} rows")
    heads = [[cid for cid in row if cid][:candidates] for row in ranking.ids.tolist()]
    missing = sorted({cid for head in heads for cid in head if cid not in texts})
    if missing:
        raise RerankError(f"no text for {len(missing)} candidate chunk ids, e.g. {missing[:3]}")
    pairs = [(i, cid) for i, head in enumerate(heads) for cid in head]
    started = time.perf_counter()
    scores = np.asarray(score(queries, pairs, texts), dtype=np.float64) if pairs else np.zeros(0)
    stats.pairs += len(pairs)
    stats.seconds += time.perf_counter() - started
    rows, offset = [], 0
    for head in heads:
        row_scores = scores[offset : offset + len(head)]
        offset += len(head)
        order = np.argsort(-row_scores, kind="stable")[:k]
        rows.append([(head[j], float(row_scores[j])) for j in order])
    return Ranking.from_rows(rows, k=k)


def rerank(
    reranker: Reranker,
    queries: Sequence[str],
    ranking: Ranking,
    texts: Mapping[str, str],
    k: int,
    warm_up: bool = True,
) -> Timed:
    """Reranked top-k per query, timed per query (with the tokens of a reranker that calls an
    LLM through a ``client``).

    A reranker rescores only its ``candidates``; when ``k`` is larger, the first-stage hits
    after them follow in their original order, scored below every reranked hit (so recall@k
    keeps the first stage's depth, as in BEIR's reranking setup).
    """
    client = getattr(reranker, "client", None)
    spent: list[tuple[int, int]] = []

    def step(s: slice) -> Ranking:
        head = rows(ranking, s)
        before = _tokens(client)
        found = _with_tail(reranker.rerank(queries[s], head, texts, k), head, k)
        after = _tokens(client)
        spent.append((after[0] - before[0], after[1] - before[1]))
        return found

    batch = getattr(reranker, "batch", 1)
    reranked, seconds = per_query(step, len(queries), k, warm_up, batch)
    if not isinstance(client, LLMClient):
        return Timed(reranked, seconds)
    counts = np.array(spent[len(spent) - len(queries) :], dtype=np.int64).reshape(-1, 2)
    return Timed(reranked, seconds, QueryUsage(client.config.model, counts[:, 0], counts[:, 1]))


def _tokens(client: object) -> tuple[int, int]:
    if not isinstance(client, LLMClient):
        return 0, 0
    return client.usage.prompt_tokens, client.usage.completion_tokens


def _with_tail(head: Ranking, first: Ranking, k: int) -> Ranking:
    """Each row of ``head`` followed by the rest of that row of ``first`` (up to ``k``),
    scored below it: the j-th of the tail (from 0) scores the row's lowest head score (0 when
    the head is empty) less 1 + j. Head rows are padded at their end, as ``from_rows`` makes
    them."""
    shown = head.ids != ""
    have = shown.sum(axis=1)
    listed = first.ids != ""
    if (have >= np.minimum(k, listed.sum(axis=1))).all():
        return head  # every row holds k hits, or all of its first-stage hits: no tail
    n = len(head.ids)
    codes, _ = pd.factorize(np.concatenate([head.ids.ravel(), first.ids.ravel()]), sort=False)
    width = int(codes.max()) + 1
    at_row = np.arange(n)[:, None] * width
    head_keys = (at_row + codes[: head.ids.size].reshape(head.ids.shape))[shown]
    first_keys = at_row + codes[head.ids.size :].reshape(first.ids.shape)
    tail = listed & ~np.isin(first_keys, head_keys)
    j = np.cumsum(tail, axis=1) - 1  # place in the row's tail
    tail &= j < (k - have)[:, None]
    floor = np.where(shown, head.scores, np.inf).min(axis=1, initial=np.inf)
    floor[~shown.any(axis=1)] = 0.0
    ids = np.full((n, k), "", dtype=object)
    scores = np.full((n, k), -np.inf, dtype=np.float64)
    width = min(k, head.depth)
    ids[:, :width], scores[:, :width] = head.ids[:, :width], head.scores[:, :width]
    row, column = np.nonzero(tail)
    ids[row, have[row] + j[row, column]] = first.ids[row, column]
    scores[row, have[row] + j[row, column]] = floor[row] - 1.0 - j[row, column]
    return Ranking(ids, scores)


class RerankerConfig(StepConfig):
    """Base of the rescoring kinds: one ``rerank`` stage over ``candidates`` first-stage hits."""

    candidates: int = Field(50, gt=0)

    def wants(self, k: int) -> int:
        """The first stage gives at least ``candidates`` hits."""
        return max(k, self.candidates)

    def score_scale(self) -> str:
        """What its scores mean (each kind says; a plugin's kind is named)."""
        return f"{self.kind} reranker score"

    def reranker(self, env: Env, chunks: ChunkSet, *resources: Any) -> Reranker:
        """The component that rescores (shared by every plan run with ``env``), given the
        values of the ``resources`` stages."""
        reranker: Reranker = env.component("reranker", self)
        return reranker

    def resources(self, g: PlanBuilder) -> list[str]:
        """The stages this kind reads besides the ranking, the chunks and the queries."""
        return []

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """Rescore ``upstream`` and keep ``k`` hits per query."""
        if upstream is None:
            raise ValueError(f"reranker {self.kind!r} needs a first-stage ranking")

        def compute(
            env: Env, first: Timed, chunks: ChunkSet, queries: Sequence[str], *values: Any
        ) -> Timed:
            reranker = self.reranker(env, chunks, *values)
            return rerank(reranker, queries, first.ranking, chunks.texts, k, env.warm_up)

        inputs = (upstream, g.chunks(), "queries", *self.resources(g))
        parts = (component_key(self), k)
        return g.add(
            "rerank", "rerank", inputs, parts, compute, RANKING, latency="rerank", config=self
        )


class NoRerankConfig(StepConfig):
    """Keep the first-stage order."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage: the first stage's ranking is final."""
        return None


class NoReranker:
    """Pass-through: the ranking cut (or padded) to ``k`` columns."""

    candidates = 0

    def __init__(self, config: NoRerankConfig | None = None) -> None:
        self.config = config or NoRerankConfig()
        self.stats = RerankStats()

    def rerank(
        self, queries: Sequence[str], ranking: Ranking, texts: Mapping[str, str], k: int
    ) -> Ranking:
        """The first ``k`` hits of each row, unchanged."""
        return _with_depth(ranking, k)


class CrossEncoderConfig(Tunable, RerankerConfig):
    """A sentence-transformers cross-encoder scoring (query, passage) pairs; with ``finetune``
    one trained on the corpus first, from ``model``'s weights (``ragbench.index.finetune``)."""

    kind: Literal["cross_encoder"] = "cross_encoder"
    model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    batch_size: int = Field(32, gt=0)
    max_length: int = Field(512, gt=0)
    device: str = "cpu"
    family: ClassVar[Family] = "cross-encoder"

    def score_scale(self) -> str:
        """The model's raw relevance score."""
        return "cross-encoder relevance score (the model's raw output)"

    def resources(self, g: PlanBuilder) -> list[str]:
        """The stage training its model, when it is fine-tuned."""
        return list(g.model(self))

    def reranker(self, env: Env, chunks: ChunkSet, *resources: Any) -> Reranker:
        """The cross-encoder of the trained model when fine-tuned (``FinetuneError`` when
        training left it at chance), else of ``model``."""
        if not resources:
            return super().reranker(env, chunks)
        reranker: Reranker = env.component("reranker", self.tuned(resources[0].usable()))
        return reranker


_CROSS_ENCODERS: dict[tuple[str, str], Any] = {}
_CROSS_ENCODERS_LOCK = threading.Lock()


def _load_cross_encoder(name: str, device: str) -> Any:
    """Load a cross-encoder once per process and share it between rerankers (offline when the
    hub is unreachable, so a missing model fails at once instead of retrying)."""
    key = (resolve_model(name), device)
    with _CROSS_ENCODERS_LOCK:
        if key not in _CROSS_ENCODERS:
            hub_offline()
            keep_freed_memory()
            from sentence_transformers import CrossEncoder

            try:
                _CROSS_ENCODERS[key] = CrossEncoder(key[0], device=device)
            except Exception as exc:
                raise RerankError(
                    f"cannot load cross-encoder {name!r} ({key[0]}): {exc}. No cross-encoder "
                    "is installed offline; pass a local model directory, or a hub id on a "
                    "machine with network access."
                ) from exc
        return _CROSS_ENCODERS[key]


class _Rescorer:
    """A reranker that scores the first ``candidates`` hits of each row with ``_score`` in one
    call and keeps the best ``k`` (``_rescore``); ``stats`` counts the pairs and seconds."""

    config: RerankerConfig
    stats: RerankStats

    @property
    def candidates(self) -> int:
        """First-stage hits rescored per query."""
        return self.config.candidates

    def rerank(
        self, queries: Sequence[str], ranking: Ranking, texts: Mapping[str, str], k: int
    ) -> Ranking:
        """Top ``k`` of each row's first ``candidates`` by ``_score``."""
        return _rescore(queries, ranking, texts, k, self.config.candidates, self._score, self.stats)

    def _score(self, queries: Sequence[str], pairs: Pairs, texts: Mapping[str, str]) -> np.ndarray:
        """One score per (query index, chunk id) pair."""
        raise NotImplementedError


class CrossEncoderReranker(_Rescorer):
    """Rescores candidates with a cross-encoder: all pairs of a batch in one ``predict`` call."""

    config: CrossEncoderConfig

    def __init__(self, config: CrossEncoderConfig | None = None) -> None:
        self.config = config or CrossEncoderConfig()
        self.stats = RerankStats()

    @property
    def model(self) -> Any:
        """The shared ``CrossEncoder`` instance (loaded on first use)."""
        return _load_cross_encoder(self.config.model, self.config.device)

    def _score(self, queries: Sequence[str], pairs: Pairs, texts: Mapping[str, str]) -> np.ndarray:
        model = self.model
        previous = model.max_seq_length
        model.max_seq_length = self.config.max_length
        step = self.config.batch_size * 16  # parts between which progress is counted
        scores = []
        try:
            what = f"scoring with {self.config.model}"
            with progress.counting(what, len(pairs), "pairs") as done:
                for start in range(0, len(pairs), step):
                    part = pairs[start : start + step]
                    scores.append(
                        model.predict(
                            [(queries[i], texts[cid]) for i, cid in part],
                            batch_size=self.config.batch_size,
                            show_progress_bar=False,
                            convert_to_numpy=True,
                        )
                    )
                    done(len(part))
        finally:
            model.max_seq_length = previous
        return np.concatenate(scores) if scores else np.zeros(0, dtype=np.float32)


class DenseRerankConfig(RerankerConfig):
    """Rescore candidates by bi-encoder cosine similarity."""

    kind: Literal["dense"] = "dense"
    embedder: component_field("embedder") = Field(  # type: ignore[valid-type]
        default_factory=lambda: components("embedder").parse(
            {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}
        )
    )

    def score_scale(self) -> str:
        """A cosine of its own embedder's vectors."""
        return "cosine similarity of the reranker's embeddings (-1 to 1)"

    def redundancy(self, trial: Mapping[str, ComponentConfig]) -> str | None:
        """Over a retriever that ranks by the same vectors alone (``ranks_by``), searching
        with the original queries, it rescores the candidates by the very cosine they were
        retrieved by: the trial ranks as the same retrieval without the reranker."""
        retriever, query = trial.get("retriever"), trial.get("query")
        if retriever is None or (query is not None and query.kind != "none"):
            return None  # with transformed queries the retriever searched other texts
        theirs = retriever.ranks_by(trial)
        if theirs is None or _vectors(theirs) != _vectors(self.embedder):
            return None
        return "dense rerank with the retriever's own embedder: ranks as the dense retrieval alone"

    def resources(self, g: PlanBuilder) -> list[str]:
        """The chunks' and the queries' vectors under this reranker's own embedder (shared
        with a dense retriever of the same model)."""
        vectors = [g.doc_vectors(self.embedder), g.query_vectors(self.embedder, "queries")]
        return vectors + list(g.model(self.embedder))

    def reranker(self, env: Env, chunks: ChunkSet, *resources: Any) -> Reranker:
        """A dense reranker reading document and query vectors from the planned stages (and
        the embedder's trained model, when it is fine-tuned)."""
        vectors, queries, *model = resources
        asked = dict(zip(env.queries, np.asarray(queries.vectors), strict=True))
        embedder = env.embedder(self.embedder, model=model[0] if model else None)
        return DenseReranker(self, embedder, (chunks.table.row_of, vectors), asked)


# Embedder options that do not change the vectors it computes.
_SAME_VECTORS = frozenset({"batch_size", "device"})


def _vectors(embedder: ComponentConfig) -> dict[str, Any]:
    """An embedder's config without the options that leave its vectors alone."""
    return {k: v for k, v in embedder.model_dump(mode="json").items() if k not in _SAME_VECTORS}


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


class DenseReranker(_Rescorer):
    """Cosine similarity of query ("query" role) and passage ("document" role) embeddings.

    ``documents`` — (chunk id → row, vectors) — and ``queries`` — (query text → vector) —
    supply vectors computed beforehand; texts missing there are embedded on the fly.
    """

    config: DenseRerankConfig
    batch = QUALITY_BATCH
    """Queries per call in a quality pass: scoring is one matrix product, whatever the batch."""

    def __init__(
        self,
        config: DenseRerankConfig | None = None,
        embedder: Embedder | None = None,
        documents: tuple[Mapping[str, int], np.ndarray | None] | None = None,
        queries: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.config = config or DenseRerankConfig()
        self.embedder: Embedder = embedder or components("embedder").build(self.config.embedder)
        self.documents = documents
        self.queries = queries or {}
        self.stats = RerankStats()

    def _passages(self, ids: list[str], texts: Mapping[str, str]) -> np.ndarray:
        known, vectors = self.documents or ({}, None)
        if vectors is not None and all(c in known for c in ids):
            return np.asarray(vectors[[known[c] for c in ids]])
        return self.embedder.embed([texts[c] for c in ids], role="document")

    def _score(self, queries: Sequence[str], pairs: Pairs, texts: Mapping[str, str]) -> np.ndarray:
        query_rows = {i: n for n, i in enumerate(dict.fromkeys(i for i, _ in pairs))}
        chunk_rows = {c: n for n, c in enumerate(dict.fromkeys(c for _, c in pairs))}
        asked = [queries[i] for i in query_rows]
        if all(text in self.queries for text in asked):
            q = _unit_rows(np.stack([self.queries[text] for text in asked]))
        else:
            q = _unit_rows(self.embedder.embed(asked, role="query"))
        d = _unit_rows(self._passages(list(chunk_rows), texts))
        qi = np.fromiter((query_rows[i] for i, _ in pairs), dtype=np.int64, count=len(pairs))
        ti = np.fromiter((chunk_rows[c] for _, c in pairs), dtype=np.int64, count=len(pairs))
        q = q.astype(np.float64)
        scores = np.empty(len(pairs), dtype=np.float64)
        order = np.argsort(qi, kind="stable")  # one matrix-vector product per query
        bounds = np.flatnonzero(np.diff(qi[order])) + 1
        for at in np.split(order, bounds):
            scores[at] = d[ti[at]].astype(np.float64) @ q[qi[at[0]]]
        return scores


class LLMRerankConfig(RerankerConfig, LLMOptions):
    """An LLM relevance judge at an OpenAI-compatible endpoint (``base_url`` with or without
    ``/v1``); the API key, if any, is that of ``credential`` (see ``ragbench.endpoints``)."""

    kind: Literal["llm"] = "llm"
    candidates: int = Field(20, gt=0)
    timeout: float = Field(30.0, gt=0)

    def score_scale(self) -> str:
        """The judge's 0 to 10 grade."""
        return "LLM relevance judgement (0 to 10)"

    def reranker(self, env: Env, chunks: ChunkSet, *resources: Any) -> Reranker:
        """A judge calling the model through the env's cached client."""
        return LLMReranker(self, env.llm(self, "reranker"))


_PASSAGE_TAG = "passage"
_JUDGE_SYSTEM = (
    "You rate how relevant a passage is to a search query. Reply with one number from 0 "
    "(irrelevant) to 10 (fully answers the query) and nothing else. " + system_notice(_PASSAGE_TAG)
)
_SCORE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*\.?\s*")


def parse_score(reply: str) -> float | None:
    """The 0–10 score of a reply that is just a number (``7``, ``7.5``, ``7/10``), else None."""
    match = _SCORE.fullmatch(reply)
    if match is None:
        return None
    value = float(match.group(1))
    return value if 0 <= value <= 10 else None


def judge_messages(query: str, passage: str) -> list[dict[str, str]]:
    """The chat messages asking for a 0–10 relevance score of ``passage`` for ``query`` (the
    passage framed as untrusted data)."""
    user = (
        f"Query: {' '.join(query.split())}\n\n"
        f"<{_PASSAGE_TAG}>\n{quote_untrusted(passage, _PASSAGE_TAG)}\n</{_PASSAGE_TAG}>"
        "\n\nScore (0-10):"
    )
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]


class LLMReranker(_Rescorer):
    """Asks a chat model for a 0–10 score per (query, passage) through an :class:`LLMClient`
    (cached by content, ``max_concurrency`` requests at a time, retried on 429/5xx).

    Unparsable replies score 0 (with a warning); a failing endpoint raises :class:`RerankError`
    naming it.
    """

    config: LLMRerankConfig

    def __init__(self, config: LLMRerankConfig, client: LLMClient | None = None) -> None:
        self.config = config
        self.client = client or LLMClient(config, where="reranker")
        self.stats = RerankStats()

    def _score(self, queries: Sequence[str], pairs: Pairs, texts: Mapping[str, str]) -> np.ndarray:
        conversations = [judge_messages(queries[i], texts[cid]) for i, cid in pairs]
        try:
            replies = self.client.chat_many(conversations, max_tokens=8)
        except LLMError as exc:
            raise RerankError(f"LLM judge: {exc}") from exc
        scores = []
        for reply in replies:
            score = parse_score(reply.text)
            if score is None:
                log.warning("unparsable LLM judge reply %r; scoring 0", reply.text[:80])
            scores.append(score or 0.0)
        return np.asarray(scores, dtype=np.float64)


_RERANKERS = components("reranker")
_RERANKERS.register(NoRerankConfig)(NoReranker)
_RERANKERS.register(CrossEncoderConfig)(CrossEncoderReranker)
_RERANKERS.register(DenseRerankConfig)(DenseReranker)
_RERANKERS.register(LLMRerankConfig)(LLMReranker)
