"""An example ragbench plugin, one module: a query transform (``truncate``), a first-stage
retriever (``overlap``), a reranker (``shortest``) and a whole new axis (``cutoff``).

Importing it registers everything; installed as a package, the ``ragbench.components`` entry
point imports it (see ARCHITECTURE.md, "Add a component" and "Add a stage").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from ragbench.registry import Axis, components, register_axis
from ragbench.retrieve.artifacts import RANKING, TEXTS, ChunkSet, Timed
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, component_key
from ragbench.retrieve.rerank import RerankerConfig
from ragbench.retrieve.timed import per_query
from ragbench.types import Ranking


class TruncateQueryConfig(StepConfig):
    """Search with the first ``words`` words of each query."""

    kind: Literal["truncate"] = "truncate"
    words: int = Field(3, gt=0)

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """A stage of shorter query texts; the retrievers planned after it search with them."""
        words = self.words

        def compute(env: Env, queries: Sequence[str]) -> list[str]:
            return [" ".join(q.split()[:words]) for q in queries]

        parts = (component_key(self),)
        g.queries = g.add("truncate", "query", (g.queries,), parts, compute, TEXTS)


class OverlapRetrieverConfig(StepConfig):
    """Rank chunks by how many distinct lowercase words they share with the query."""

    kind: Literal["overlap"] = "overlap"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """One search over the trial's chunks."""

        def compute(env: Env, chunks: ChunkSet, queries: Sequence[str]) -> Timed:
            words = [set(c.text.lower().split()) for c in chunks.chunks]
            ids = chunks.ids

            def step(s: slice) -> Ranking:
                found = []
                for query in queries[s]:
                    wanted = set(query.lower().split())
                    scores = [len(wanted & w) for w in words]
                    top = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))[:k]
                    found.append([(ids[i], float(scores[i])) for i in top if scores[i] > 0])
                return Ranking.from_rows(found, k)

            return Timed(*per_query(step, len(queries), k, env.warm_up))

        inputs = (g.chunks(), g.queries)
        return g.add("overlap", "overlap", inputs, (k,), compute, RANKING, latency="overlap")


class ShortestConfig(RerankerConfig):
    """Rescore candidates by length: the shortest chunk first."""

    kind: Literal["shortest"] = "shortest"


class ShortestReranker:
    """The reranker component of ``shortest``."""

    def __init__(self, config: ShortestConfig) -> None:
        self.config = config

    @property
    def candidates(self) -> int:
        """First-stage hits rescored per query."""
        return self.config.candidates

    def rerank(
        self, queries: Sequence[str], ranking: Ranking, texts: Mapping[str, str], k: int
    ) -> Ranking:
        """The ``candidates`` first hits of each row, shortest text first."""
        found = []
        for i in range(len(queries)):
            head = [c for c, _ in ranking.row(i)[: self.candidates]]
            head.sort(key=lambda c: (len(texts[c]), c))
            found.append([(c, -float(len(texts[c]))) for c in head[:k]])
        return Ranking.from_rows(found, k)


class NoCutoffConfig(StepConfig):
    """Keep every hit."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage."""
        return None


class TopCutoffConfig(StepConfig):
    """Keep the first ``n`` hits of each query."""

    kind: Literal["top"] = "top"
    n: int = Field(1, gt=0)

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """One stage cutting the final ranking."""
        n = self.n

        def compute(env: Env, ranking: Timed) -> Timed:
            head = ranking.ranking.head(n)
            rows = [head.row(i) for i in range(len(head.ids))]
            return Timed(Ranking.from_rows(rows, k), ranking.seconds * 0)

        if upstream is None:
            raise ValueError("cutoff needs a ranking to cut")
        parts = (component_key(self), k)
        return g.add("cutoff", "cutoff", (upstream,), parts, compute, RANKING)


components("query").register_config(TruncateQueryConfig)
components("retriever").register_config(OverlapRetrieverConfig)
components("reranker").register(ShortestConfig)(ShortestReranker)
register_axis(Axis("cutoff", 6, {"kind": "none"}, optional=True, label=6, prefix="cutoff:"))
components("cutoff").register_config(NoCutoffConfig)
components("cutoff").register_config(TopCutoffConfig)
