"""Query transforms — the ``query`` axis: what the retrievers search with instead of the text
the user typed.

- ``none``: the query as given.
- ``prf``: pseudo-relevance feedback on BM25 (RM3): the top ``fb_docs`` texts of a first BM25
  search give a relevance model — each feedback text's term distribution weighted by its share
  of their BM25 scores — whose ``fb_terms`` heaviest terms are interpolated with the query's
  own terms (``original_weight`` for the query); the BM25 retriever then searches with those
  weighted terms. Needs no LLM.
- ``rewrite``: an LLM reformulates the query once.
- ``hyde``: an LLM writes a hypothetical passage that answers the query; it is searched with
  instead of the query (``mode: replace``) or after it (``append``).
- ``multi_query``: an LLM writes ``n`` paraphrases; each (and the query, with
  ``include_original``) is searched and the rankings are fused per query (RRF).
- ``decompose``: an LLM splits the query into at most ``n`` sub-questions, searched and fused
  the same way.

A transform plans one ``query`` stage whose value (``Queries``) holds the texts to search with,
the query each belongs to, weighted terms (prf), seconds and LLM tokens per query, and what the
transform wrote; it points ``g.queries`` at that stage (see ARCHITECTURE.md, "Add a stage").
LLM calls go through ``ragbench.llm``: cached by content, so a sweep pays each call once.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.llm.client import LLMOptions
from ragbench.registry import components
from ragbench.retrieve.artifacts import QUERIES, Queries, QueryUsage, query_texts
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, check_template, component_key

__all__ = [
    "DecomposeConfig",
    "HydeConfig",
    "MultiQueryConfig",
    "NoQueryConfig",
    "PRFConfig",
    "RewriteConfig",
    "expand_query",
]

_LIST_MARKER = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s*")


class NoQueryConfig(StepConfig):
    """Search with the query as given."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage."""
        return None


def expand_query(
    index: BM25Index, text: str, fb_docs: int, fb_terms: int, original_weight: float
) -> dict[str, float]:
    """The RM3 query of ``text``: term → weight (weights sum to 1).

    RM1 (Lavrenko and Croft): P(t|R) ∝ Σ_d P(t|d)·w_d over the top ``fb_docs`` texts of a BM25
    search, P(t|d) = tf(t, d) / |d|, w_d = the text's BM25 score / the sum of their scores; the
    ``fb_terms`` heaviest terms, renormalised, are mixed with the query's own term distribution:
    ``original_weight`` × P(t|q) + (1 − ``original_weight``) × P(t|R).
    """
    own = Counter(index.terms(text))
    total = sum(own.values())
    weights = {t: original_weight * c / total for t, c in own.items()} if total else {}
    found = index.search([text], fb_docs).row(0)
    mass = sum(score for _, score in found)
    if not found or mass <= 0:
        return {t: w / original_weight for t, w in weights.items()} if weights else {}
    relevance: dict[str, float] = {}
    for (_, score), terms in zip(found, index.document_terms([c for c, _ in found]), strict=True):
        for term, count in Counter(terms).items():
            share = (score / mass) * count / max(len(terms), 1)
            relevance[term] = relevance.get(term, 0.0) + share
    top = sorted(relevance.items(), key=lambda tw: (-tw[1], tw[0]))[:fb_terms]
    top_mass = sum(w for _, w in top)
    for term, weight in top:
        weights[term] = weights.get(term, 0.0) + (1 - original_weight) * weight / top_mass
    norm = sum(weights.values())
    return {t: w / norm for t, w in weights.items()}


class PRFConfig(StepConfig):
    """Pseudo-relevance feedback (RM3) on BM25; ``bm25`` is the index the feedback comes from
    (default: the trial's own BM25 options — its ``bm25`` retriever's, or its hybrid's — so the
    expansion terms are that index's terms)."""

    kind: Literal["prf"] = "prf"
    fb_docs: int = Field(10, gt=0)
    fb_terms: int = Field(10, gt=0)
    original_weight: float = Field(0.5, gt=0, le=1)
    bm25: BM25Config | None = None

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """A ``query`` stage of weighted terms; BM25 searches with them."""
        config = self
        retriever = g.configs.get("retriever")
        own = retriever if isinstance(retriever, BM25Config) else getattr(retriever, "bm25", None)
        bm25 = self.bm25 or (own if isinstance(own, BM25Config) else BM25Config())

        def compute(env: Env, index: BM25Index, queries: Sequence[str] | Queries) -> Queries:
            texts = query_texts(queries)
            seconds = np.zeros(len(texts))
            terms, notes = [], []
            for i, text in enumerate(texts):
                started = time.perf_counter()
                weighted = expand_query(
                    index, text, config.fb_docs, config.fb_terms, config.original_weight
                )
                seconds[i] = time.perf_counter() - started
                terms.append(weighted)
                own = set(index.terms(text))
                notes.append(
                    [t for t in sorted(weighted, key=lambda t: -weighted[t]) if t not in own]
                )
            return Queries(texts, np.arange(len(texts)), seconds, terms, None, notes)

        inputs = (g.bm25_index(bm25), g.queries)
        g.queries = g.add(
            "prf", "query", inputs, (component_key(self),), compute, QUERIES, latency="query"
        )


class _LLMQueryConfig(StepConfig, LLMOptions):
    """What the LLM transforms share: a prompt per query, the reply parsed into texts."""

    prompt: str = ""

    @field_validator("prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, {"query"}, {"n"})

    def texts(self, query: str, reply: str) -> list[str]:
        """The texts to search with for ``query``, from the model's ``reply``."""
        raise NotImplementedError

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """A ``query`` stage calling the model once per query."""
        config = self

        def compute(env: Env, queries: Sequence[str] | Queries) -> Queries:
            originals = query_texts(queries)
            client = env.llm(config, "query")
            prompts = [
                config.prompt.format(query=" ".join(q.split()), n=getattr(config, "n", 1))
                for q in originals
            ]
            replies = client.chat_many([[{"role": "user", "content": p}] for p in prompts])
            texts, owner, notes = [], [], []
            for i, (query, reply) in enumerate(zip(originals, replies, strict=True)):
                found = config.texts(query, reply.text) or [query]
                texts.extend(found)
                owner.extend([i] * len(found))
                notes.append([line for line in reply.text.splitlines() if line.strip()])
            usage = QueryUsage(
                config.model,
                np.array([r.prompt_tokens for r in replies], dtype=np.int64),
                np.array([r.completion_tokens for r in replies], dtype=np.int64),
            )
            seconds = np.array([r.seconds for r in replies])
            return Queries(texts, np.array(owner, dtype=np.int64), seconds, None, usage, notes)

        g.queries = g.add(
            "query",
            "query",
            (g.queries,),
            (component_key(self),),
            compute,
            QUERIES,
            latency="query",
            config=self,
        )
        g.varied = g.varied or self.varies

    @property
    def varies(self) -> bool:
        """Whether a query may get several texts (their rankings are then fused)."""
        return False


def _lines(reply: str, n: int) -> list[str]:
    """The reply's non-empty lines without list markers, distinct, at most ``n``."""
    found = [_LIST_MARKER.sub("", line).strip() for line in reply.splitlines()]
    return list(dict.fromkeys(line for line in found if line))[:n]


class RewriteConfig(_LLMQueryConfig):
    """One LLM reformulation of the query."""

    kind: Literal["rewrite"] = "rewrite"
    prompt: str = (
        "Rewrite the search query so that a search engine finds the documents that answer it. "
        "Reply with the rewritten query only.\n\nQuery: {query}\nRewritten query:"
    )

    def texts(self, query: str, reply: str) -> list[str]:
        """The first line of the reply."""
        return _lines(reply, 1)


class HydeConfig(_LLMQueryConfig):
    """Hypothetical document embeddings: an LLM-written answer passage is searched with."""

    kind: Literal["hyde"] = "hyde"
    mode: Literal["replace", "append"] = "replace"
    prompt: str = (
        "Write a short passage, as it could appear in the documentation, that answers the "
        "query. Reply with the passage only.\n\nQuery: {query}\nPassage:"
    )

    def texts(self, query: str, reply: str) -> list[str]:
        """The passage (after the query with ``append``)."""
        passage = " ".join(reply.split())
        if not passage:
            return [query]
        return [passage if self.mode == "replace" else f"{query}\n{passage}"]


class _SeveralTextsConfig(_LLMQueryConfig):
    """LLM transforms that make up to ``n`` texts of a query, searched separately and fused per
    query (RRF), the query itself first with ``include_original``."""

    n: int = Field(3, gt=0, le=20)
    include_original: bool = True

    @property
    def varies(self) -> bool:
        """Several texts per query."""
        return True

    def texts(self, query: str, reply: str) -> list[str]:
        """The reply's lines (after the query with ``include_original``)."""
        found = _lines(reply, self.n)
        return list(dict.fromkeys([query, *found] if self.include_original else found))


class MultiQueryConfig(_SeveralTextsConfig):
    """``n`` LLM paraphrases, searched separately and fused per query (RRF)."""

    kind: Literal["multi_query"] = "multi_query"
    prompt: str = (
        "Write {n} different rephrasings of the search query, one per line, without "
        "numbering.\n\nQuery: {query}\nParaphrases:"
    )


class DecomposeConfig(_SeveralTextsConfig):
    """An LLM splits the query into at most ``n`` sub-questions, searched and fused (RRF)."""

    kind: Literal["decompose"] = "decompose"
    include_original: bool = False
    prompt: str = (
        "Split the query into at most {n} simpler sub-questions that together answer it, one "
        "per line, without numbering. If it is already simple, repeat it.\n\n"
        "Query: {query}\nSub-questions:"
    )


for _config in (
    NoQueryConfig,
    PRFConfig,
    RewriteConfig,
    HydeConfig,
    MultiQueryConfig,
    DecomposeConfig,
):
    components("query").register_config(_config)
