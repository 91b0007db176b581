"""A trial's evaluation in one place: what it needs (``Evaluation``: the settings, the parsed
metrics and the queries of one split) and the one call scoring a trial's outputs into its
``TrialResult``.

An ``Evaluation`` is built once per process and split (``trial.Context`` holds it next to the
data, models and cache it shares) and handed whole to ``evaluate``, so nothing here digs into a
config. Ranking and span metrics go to ``ragbench.evaluate.labels.evaluate_chunks`` in one call,
the metric@k curves included; answer metrics go to ``ragbench.evaluate.answers``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ragbench.data.labeled import LabeledSet
from ragbench.evaluate.answers import AnswerSample, evaluate_answers
from ragbench.evaluate.labels import evaluate_chunks
from ragbench.evaluate.metric_table import Metric
from ragbench.experiment.config import EvaluationSpec
from ragbench.experiment.store import TrialResult
from ragbench.llm.client import LLMClient, LLMConfig
from ragbench.protocols import Embedder
from ragbench.registry import ComponentConfig, components
from ragbench.retrieve.artifacts import Answers, ChunkSet
from ragbench.text.chunk_table import ChunkTable, document_ranking
from ragbench.types import Ranking

__all__ = ["EXCERPT", "Evaluation"]

_TOP_CHUNKS = 5
EXCERPT = 600
"""Characters of a chunk or evidence text kept in drill-down tables."""
_SPAN_CURVE_DEPTH = 20  # span metrics walk intervals per query: their curves stop here


@dataclass(frozen=True, eq=False)
class Evaluation:
    """What scoring a trial on one split needs: the evaluation ``settings``, the ``labeled``
    set and its evaluated queries (``query_ids``, ``query_texts``), the metrics it scores
    (config order, ``skipped`` ones — metric name → why — left out) split into ``ranking``
    (rank and span level) and ``answer`` metrics, and ``curves``: metric family → the depth
    of its metric@k curve."""

    settings: EvaluationSpec
    labeled: LabeledSet
    query_ids: Sequence[str]
    query_texts: Sequence[str]
    metrics: tuple[Metric, ...]
    skipped: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, settings: EvaluationSpec, labeled: LabeledSet, queries: Sequence[tuple[str, str]]
    ) -> Evaluation:
        """The evaluation of ``settings`` over ``queries`` (id, text) of ``labeled``; answer
        metrics the set cannot score are skipped with a note."""
        skipped = {}
        for metric in settings.metrics:
            if (
                metric.level == "answer"
                and "reference" in metric.spec.needs
                and not labeled.has_answers
            ):
                skipped[metric.name] = f"dataset {labeled.name!r} has no reference answers"
        kept = tuple(m for m in settings.metrics if m.name not in skipped)
        ids, texts = [q for q, _ in queries], [t for _, t in queries]
        return cls(settings, labeled, ids, texts, kept, skipped)

    @property
    def ranking(self) -> list[Metric]:
        """The metrics scoring the ranking (rank and span level)."""
        return [m for m in self.metrics if m.level != "answer"]

    @property
    def answer(self) -> list[Metric]:
        """The metrics scoring generated answers."""
        return [m for m in self.metrics if m.level == "answer"]

    @property
    def curves(self) -> dict[str, int]:
        """Metric family → the depth of its metric@k curve (the families with a cutoff)."""
        depth = self.settings.depth
        families = {}
        for metric in self.ranking:
            if metric.k is not None:
                families[metric.family] = min(_SPAN_CURVE_DEPTH if metric.is_span else depth, depth)
        return families

    @property
    def judges(self) -> tuple[LLMConfig | None, ComponentConfig | None]:
        """The LLM and the embedder the answer metrics call (None where they call none; the
        embedder defaults to the sentence-transformers default model)."""
        if not self.answer:
            return None, None
        wanted = {n for m in self.answer for n in m.spec.needs}
        spec = self.settings.embedder
        if spec is None and "embeddings" in wanted:
            spec = components("embedder").parse({"kind": "sentence-transformers"})
        return self.settings.llm, spec

    def evaluate(
        self,
        result: TrialResult,
        ranking: Ranking,
        chunks: ChunkSet,
        answers: Answers | None,
        judges: tuple[LLMClient | None, Embedder | None] = (None, None),
    ) -> None:
        """Score a trial's ``ranking`` (over ``chunks``) and ``answers`` into ``result``: its
        per-query values, metric@k curves, evaluated ranking, top chunks and answers table;
        ``judges`` are the LLM and the embedder of ``Evaluation.judges``, loaded."""
        samples = self._samples(ranking, chunks, answers) if self.answer else []
        self._rankings(result, ranking, chunks.table)
        if answers is not None:
            result.answers = pd.DataFrame(
                {
                    "query_id": list(self.query_ids),
                    "answer": answers.texts,
                    "chunk_ids": [json.dumps(ids) for ids in answers.used],
                    "seconds": answers.seconds,
                }
            )
        if self.answer:
            result.per_query |= evaluate_answers(samples, self.answer, *judges)

    def _rankings(self, result: TrialResult, ranking: Ranking, table: ChunkTable) -> None:
        """The ranking metrics and their curves in one ``evaluate_chunks`` call, the evaluated
        ranking and the top chunks."""
        settings, curves = self.settings, self.curves
        if settings.level == "document":
            result.ranking = document_ranking(ranking, table).head(settings.depth)
        else:
            result.ranking = ranking.head(settings.depth)
        result.top = _top_chunks(self.query_ids, ranking, table)
        points = [
            Metric(f"{f}@{k}", f, k=k) for f, depth in curves.items() for k in range(1, depth + 1)
        ]
        values = evaluate_chunks(
            ranking,
            self.query_ids,
            table,
            self.labeled,
            [*self.ranking, *points],
            level=settings.level,
            relevance_level=settings.relevance_level,
            min_overlap=settings.min_overlap,
            depth=settings.depth,
        )
        result.per_query = {m.name: values[m.name] for m in self.ranking}
        result.curves = {
            family: np.array([values[f"{family}@{k}"].mean() for k in range(1, depth + 1)])
            for family, depth in curves.items()
        }

    def _samples(
        self, ranking: Ranking, chunks: ChunkSet, answers: Answers | None
    ) -> list[AnswerSample]:
        """One ``AnswerSample`` per query: its answer and the chunks its generator used, or
        the top ``context_k`` chunks of a trial without a generator."""
        by_id, k, labeled = chunks.by_id, self.settings.context_k, self.labeled
        samples = []
        for row, (qid, question) in enumerate(zip(self.query_ids, self.query_texts, strict=True)):
            if answers is not None:
                used = [by_id[c] for c in answers.used[row]]
            else:
                used = [by_id[c] for c, _ in ranking.row(row)[:k]]
            references, reference_ids = _references(labeled, qid, self.settings.relevance_level)
            samples.append(
                AnswerSample(
                    query_id=qid,
                    question=question,
                    answer=answers.texts[row] if answers is not None else None,
                    contexts=[c.text for c in used],
                    context_ids=[c.doc_id for c in used],
                    reference=labeled.answers.get(qid),
                    reference_contexts=references,
                    reference_ids=reference_ids,
                )
            )
        return samples


def _references(
    labeled: LabeledSet, query_id: str, relevance_level: int
) -> tuple[list[str], list[str]]:
    """A query's evidence texts (span level, else its relevant documents' texts) and its
    relevant document ids."""
    relevant = [d for d, g in labeled.qrels.get(query_id, {}).items() if g >= relevance_level]
    spans = labeled.evidence.get(query_id, [])
    if spans:
        texts = [labeled.doc_index[e.doc_id].text[e.start : e.end] for e in spans]
    else:
        texts = [labeled.doc_index[d].text for d in relevant if d in labeled.doc_index]
    return texts, relevant


def _top_chunks(query_ids: Sequence[str], ranking: Ranking, table: ChunkTable) -> pd.DataFrame:
    """The first chunks of every query with text excerpts, for drill-downs in reports."""
    head = ranking.head(_TOP_CHUNKS)
    ids = np.asarray(head.ids, dtype=object)
    rows = table.rows(ids)
    query, column = np.nonzero(rows >= 0)  # query by query, best first
    found = rows[query, column]
    texts = table.texts[found] if table.texts is not None else np.full(len(found), "")
    return pd.DataFrame(
        {
            "query_id": np.asarray(query_ids, dtype=object)[query],
            "rank": column + 1,
            "chunk_id": ids[query, column],
            "doc_id": table.doc_ids[found],
            "start": table.starts[found],
            "end": table.ends[found],
            "score": np.asarray(head.scores, dtype=np.float64)[query, column],
            "text": [str(t)[:EXCERPT] for t in texts],
        }
    )
