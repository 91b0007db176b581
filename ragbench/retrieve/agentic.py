"""The agentic retriever — ``retriever: {kind: agentic, inner: ...}``: a loop around any other
retriever.

Per query: decompose it into sub-questions (an LLM, or the query itself offline) → retrieve
``candidates`` chunks for each with the ``inner`` retriever → grade every new candidate (an LLM
judge, or offline a dense cosine or cross-encoder score against ``threshold``) → while fewer
than ``min_relevant`` are relevant and rounds remain, reformulate each sub-question (an LLM
rewrite, or offline pseudo-relevance feedback: the most frequent new words of its best
candidates added to it) and retrieve again → rank every graded candidate: relevant ones first,
by grade, then the rest by grade.

The inner retriever is the trial's own plan for it: its indexes are the sweep's cached
artifacts (shared with trials that use that retriever directly), and each round runs its
query-time stages live on the round's texts. Per query the stage records rounds, LLM calls
(``counters``), tokens (``usage``) and a trace — which sub-question, in which round, found
which chunks and which were judged relevant.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ragbench.llm.client import LLMClient, LLMConfig
from ragbench.registry import ComponentConfig, component_field, components
from ragbench.retrieve.artifacts import RANKING, ChunkSet, QueryUsage, Timed
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import (
    Env,
    Plan,
    PlanBuilder,
    StepConfig,
    compile_plan,
    component_key,
)
from ragbench.retrieve.rerank import judge_messages, parse_score
from ragbench.types import Ranking

__all__ = ["AgenticRetrieverConfig"]

_WORD = re.compile(r"[^\W\d_]{3,}")
_STOP = frozenset(
    "about above after again all also and any are because been before being between both but "
    "can could did does doing down during each few for from further had has have having her "
    "here how into its just more most not now off once only other our out over own same she "
    "should some such than that the their them then there these they this those through too "
    "under until very was were what when where which while who whom why will with would you "
    "your".split()
)
_DECOMPOSE = (
    "Split the query into at most {n} simpler sub-questions that together answer it, one per "
    "line, without numbering. If it is already simple, repeat it.\n\nQuery: {query}\n"
    "Sub-questions:"
)
_REFORMULATE = (
    "A search for the query found too few relevant passages. Write one different search query "
    "that could find them. Reply with the query only.\n\nQuery: {query}\nRewritten query:"
)


class AgenticRetrieverConfig(StepConfig):
    """Decompose, retrieve with ``inner``, grade, reformulate and retry (see the module)."""

    kind: Literal["agentic"] = "agentic"
    uses: ClassVar[frozenset[str]] = frozenset({"embedder"})
    inner: component_field("retriever") = Field(  # type: ignore[valid-type]
        default_factory=lambda: components("retriever").parse({"kind": "bm25"})
    )
    llm: LLMConfig | None = None
    """The model that decomposes, judges (``grade: llm``) and reformulates; without one the
    loop runs offline: no decomposition, reformulation by pseudo-relevance feedback."""
    grade: Literal["dense", "cross_encoder", "llm"] = "dense"
    threshold: float = 0.5
    """Relevant when the grade reaches it: cosine (dense), the model's score (cross_encoder),
    or 0–10 (llm)."""
    cross_encoder: str | None = None
    decompose: int = Field(3, ge=1)
    """At most this many sub-questions (1: none)."""
    candidates: int = Field(10, gt=0)
    """Chunks the inner retriever finds per sub-question and round."""
    min_relevant: int = Field(3, gt=0)
    """Relevant chunks that end the loop before ``max_rounds``."""
    max_rounds: int = Field(3, gt=0)
    """At most this many rounds of retrieval (1: no reformulation)."""
    fb_docs: int = Field(3, gt=0)
    fb_terms: int = Field(5, gt=0)
    """Offline reformulation: the ``fb_terms`` most frequent new words of the ``fb_docs`` best
    candidates are added to the sub-question."""

    @model_validator(mode="after")
    def _judge_needs_llm(self) -> AgenticRetrieverConfig:
        if self.grade == "llm" and self.llm is None:
            raise ValueError("grade 'llm' needs llm (base_url, model, credential)")
        return self

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """One ``agentic`` stage over the inner retriever's indexes (shared, cached)."""
        configs: dict[str, ComponentConfig] = {
            a: g.configs[a] for a in ("chunker", "embedder", "query") if a in g.configs
        }
        inner = compile_plan({**configs, "retriever": self.inner}, self.candidates, g.sources)
        names = g.adopt(inner)
        resources = [s.name for s in inner.index_stages()]
        embedder = g.config("embedder") if self.grade == "dense" else None
        vectors = g.doc_vectors(embedder) if embedder is not None else None
        inputs = (
            g.chunks(),
            "queries",
            *([vectors] if vectors else []),
            *(names[r] for r in resources),
        )
        config = self

        def compute(env: Env, chunks: ChunkSet, queries: Sequence[str], *values: Any) -> Timed:
            found_vectors = values[0] if vectors else None
            provided = dict(zip(resources, values[1 if vectors else 0 :], strict=True))
            loop = _Loop(config, env, inner, provided, chunks, (embedder, found_vectors), k)
            return loop.run(queries)

        query = [component_key(configs["query"])] if "query" in configs else []
        parts: tuple[str | int, ...] = (component_key(self), k, *query)
        return g.add(
            "agentic", "agentic", inputs, parts, compute, RANKING, latency="agentic", config=self
        )


class _Loop:
    """One agentic stage run over a batch of queries."""

    def __init__(
        self,
        config: AgenticRetrieverConfig,
        env: Env,
        inner: Plan,
        provided: Mapping[str, Any],
        chunks: ChunkSet,
        dense: tuple[ComponentConfig | None, np.ndarray | None],
        k: int,
    ) -> None:
        self.config, self.env, self.inner, self.provided = config, env, inner, provided
        self.chunks, self.k = chunks, k
        self.llm: LLMClient | None = env.llm(config.llm, "retriever.llm") if config.llm else None
        self.embedder, self.vectors = dense
        self.rows = {c: i for i, c in enumerate(chunks.ids)} if self.vectors is not None else {}

    def run(self, queries: Sequence[str]) -> Timed:
        """Every query through the loop, timed; rounds, calls, tokens and traces recorded."""
        found, traces = [], []
        seconds = np.zeros(len(queries))
        rounds = np.zeros(len(queries), dtype=np.int64)
        calls = np.zeros(len(queries), dtype=np.int64)
        prompt = np.zeros(len(queries), dtype=np.int64)
        completion = np.zeros(len(queries), dtype=np.int64)
        for i, query in enumerate(queries):
            before = self._spent()
            started = time.perf_counter()
            ranked, trace = self._one(query)
            seconds[i] = time.perf_counter() - started
            after = self._spent()
            calls[i], prompt[i], completion[i] = (a - b for a, b in zip(after, before, strict=True))
            rounds[i] = max((step["round"] for step in trace), default=0)
            found.append(ranked)
            traces.append(trace)
        usage = None
        if self.llm is not None:
            usage = QueryUsage(self.llm.config.model, prompt, completion)
        counters = {"rounds": rounds, "llm_calls": calls}
        return Timed(Ranking.from_rows(found, self.k), seconds, usage, counters, traces)

    def _spent(self) -> tuple[int, int, int]:
        if self.llm is None:
            return 0, 0, 0
        usage = self.llm.usage
        return usage.requests + usage.cached, usage.prompt_tokens, usage.completion_tokens

    def _one(self, query: str) -> tuple[list[tuple[str, float]], list[dict[str, Any]]]:
        config = self.config
        questions = self._decompose(query)
        grades: dict[str, float] = {}
        trace: list[dict[str, Any]] = []
        for round_ in range(1, config.max_rounds + 1):
            retrieved = self._retrieve(questions)
            for question, ids in zip(questions, retrieved, strict=True):
                new = [c for c in ids if c not in grades]
                grades.update(zip(new, self._grade(query, new), strict=True))
                relevant = [c for c in ids if grades[c] >= config.threshold]
                trace.append(
                    {"round": round_, "question": question, "found": ids, "relevant": relevant}
                )
            if sum(g >= config.threshold for g in grades.values()) >= config.min_relevant:
                break
            if round_ < config.max_rounds:
                questions = [
                    self._reformulate(q, ids) for q, ids in zip(questions, retrieved, strict=True)
                ]
        order = sorted(grades, key=lambda c: (-(grades[c] >= config.threshold), -grades[c], c))
        return [(c, grades[c]) for c in order[: self.k]], trace

    def _decompose(self, query: str) -> list[str]:
        if self.llm is None or self.config.decompose == 1:
            return [query]
        prompt = _DECOMPOSE.format(n=self.config.decompose, query=" ".join(query.split()))
        reply = self.llm.chat([{"role": "user", "content": prompt}]).text
        lines = [line.strip(" -*•\t") for line in reply.splitlines()]
        found = list(dict.fromkeys(line for line in lines if line))[: self.config.decompose]
        return found or [query]

    def _retrieve(self, questions: Sequence[str]) -> list[list[str]]:
        env = dataclasses.replace(self.env, queries=list(questions), warm_up=False)
        ranking = Execution(self.inner, env, provided=self.provided).output
        return [[c for c, _ in ranking.row(i)] for i in range(len(questions))]

    def _grade(self, query: str, ids: Sequence[str]) -> list[float]:
        if not ids:
            return []
        texts = [self.chunks.texts[c] for c in ids]
        if self.config.grade == "llm":
            return self._judge(query, ids)
        if self.config.grade == "cross_encoder":
            spec = {"kind": "cross_encoder", "candidates": len(ids)}
            if self.config.cross_encoder:
                spec["model"] = self.config.cross_encoder
            reranker = self.env.component("reranker", components("reranker").parse(spec))
            return [float(s) for s in reranker.model.predict([(query, t) for t in texts])]
        assert self.embedder is not None  # planned with the trial's embedder for grade: dense
        embedder = self.env.embedder(self.embedder)
        q = embedder.embed([query], "query")[0].astype(np.float64)
        if self.vectors is not None and all(c in self.rows for c in ids):
            d = np.asarray(self.vectors[[self.rows[c] for c in ids]], dtype=np.float64)
        else:
            d = embedder.embed(texts, "document").astype(np.float64)
        norms = np.linalg.norm(d, axis=1) * (np.linalg.norm(q) or 1.0)
        return [float(v) for v in np.divide(d @ q, norms, out=np.zeros(len(ids)), where=norms > 0)]

    def _judge(self, query: str, ids: Sequence[str]) -> list[float]:
        assert self.llm is not None  # the config requires llm for grade: llm
        conversations = [judge_messages(query, self.chunks.texts[c]) for c in ids]
        replies = self.llm.chat_many(conversations, max_tokens=8)
        return [parse_score(r.text) or 0.0 for r in replies]

    def _reformulate(self, question: str, ids: Sequence[str]) -> str:
        if self.llm is not None:
            prompt = _REFORMULATE.format(query=" ".join(question.split()))
            reply = self.llm.chat([{"role": "user", "content": prompt}]).text.strip()
            return reply.splitlines()[0] if reply else question
        own = {w.lower() for w in _WORD.findall(question)}
        counts: Counter[str] = Counter()
        for cid in ids[: self.config.fb_docs]:
            counts.update(w.lower() for w in _WORD.findall(self.chunks.texts[cid]))
        extra = [w for w, _ in counts.most_common() if w not in own and w not in _STOP]
        return " ".join([question, *extra[: self.config.fb_terms]])


components("retriever").register_config(AgenticRetrieverConfig)
