"""The trial engine: compile one trial to its stage plan, run it through the stage cache, and
evaluate its ranking.

``run_trial`` is what executors ship to workers. Everything trials of one run share within a
process — the labeled set, the query texts, the stage cache, loaded models — lives in a
:class:`Context`, built once per process and keyed by the run spec *and* the data on disk, so a
changed corpus is never evaluated against a stale context.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ragbench import progress, telemetry
from ragbench.data import load_dataset
from ragbench.data.catalog import resolve_dataset
from ragbench.data.labeled import LabeledSet
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.answers import AnswerSample, evaluate_answers, needs
from ragbench.evaluate.labels import evaluate_chunks
from ragbench.evaluate.metrics import parse_metrics, relevant_query_ids
from ragbench.experiment.config import ExperimentConfig, Trial
from ragbench.experiment.latency import FORMAT, LatencyReport, Shared, machine, measure
from ragbench.experiment.store import TrialResult
from ragbench.index.cache import StageCache, default_cache_root
from ragbench.llm.cache import LLMCache
from ragbench.llm.client import LLMClient, Price
from ragbench.protocols import Embedder
from ragbench.registry import components
from ragbench.retrieve.artifacts import Answers, ChunkSet, QueryUsage
from ragbench.retrieve.graph import Env, Execution, Plan, compile_plan, stage_key
from ragbench.text.chunk_table import ChunkTable, document_ranking
from ragbench.types import Ranking

__all__ = ["Context", "RunSpec", "chunk_depth", "compile_trial", "context", "run_trial"]

log = logging.getLogger(__name__)

_TOP_CHUNKS = 5
EXCERPT = 600


@dataclass(frozen=True)
class RunSpec:
    """What a worker needs to run trials of one experiment (picklable)."""

    config: ExperimentConfig
    limit_queries: int | None = None
    cache_root: str = ""
    split: str | None = None
    remeasure: str | None = None
    """A token of the run that measures latency again instead of reading the cached
    measurements (each trial once per token)."""

    @property
    def digest(self) -> str:
        """Identity of the spec and of the dataset's files as they are now."""
        payload = self.config.model_dump_json() + f"|{self.limit_queries}|{self.cache_root}"
        payload += f"|{self.split}|{_files_signature(self.config.dataset_path())}"
        queries = self.config.queries_path()
        if queries is not None:
            payload += f"|{_files_signature(queries)}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _files_signature(path_or_name: str) -> str:
    """Paths, sizes and modification times of a dataset's files, or of one file (cheap; no
    content read)."""
    try:
        root = resolve_dataset(path_or_name)
    except DataError:
        return "missing"
    walked = os.walk(root) if root.is_dir() else [(str(root.parent), [], [root.name])]
    entries = []
    for folder, _, files in walked:
        for name in sorted(files):
            stat = os.stat(os.path.join(folder, name))
            entries.append(f"{folder}/{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(sorted(entries)).encode("utf-8", "surrogateescape")).hexdigest()


class Context:
    """What all trials of a run share within one process: data, queries, caches, models."""

    def __init__(self, spec: RunSpec) -> None:
        config = spec.config
        self.spec = spec
        self.labeled: LabeledSet = load_dataset(
            config.dataset_path(),
            format=config.dataset.format,
            split=spec.split or config.sweep_split,
            queries=config.queries_path(),
        )
        ids = set(relevant_query_ids(self.labeled.qrels, config.evaluation.relevance_level))
        needs_spans = config.evaluation.level in {"chunk", "span"} or any(
            m.is_span for m in parse_metrics(config.evaluation.metrics)
        )
        if needs_spans:
            if not self.labeled.has_spans:
                raise ConfigError(
                    f"evaluation: level {config.evaluation.level!r} / span metrics need span "
                    f"evidence, and dataset {config.dataset.path!r} has none"
                )
            spanless = ids - set(self.labeled.evidence)
            if spanless:
                log.warning(
                    "%d judged queries without span evidence are left out: level %r / span "
                    "metrics score only queries with evidence",
                    len(spanless),
                    config.evaluation.level,
                )
            ids -= spanless
        queries = [q for q in self.labeled.queries if q.id in ids][: spec.limit_queries]
        if not queries:
            raise ConfigError(f"dataset {config.dataset.path!r}: no judged query to evaluate")
        self.query_ids = [q.id for q in queries]
        self.query_texts = [q.text for q in queries]
        self.queries_key = stage_key("queries", *(f"{q.id}\x1f{q.text}" for q in queries))
        root = Path(spec.cache_root or default_cache_root())
        self.cache = StageCache(root)
        self.env = Env(
            corpus=self.labeled.documents,
            queries=self.query_texts,
            embeddings=self.cache.embeddings,
            llm_cache=LLMCache(root),
        )
        order = np.random.default_rng(config.latency.seed).permutation(len(queries))
        sample = sorted(order[: config.latency.queries])
        self.latency_sample = [(queries[i].id, queries[i].text) for i in sample]
        self.remeasured: set[tuple[str, str]] = set()
        self.latency_shared: dict[str | None, Shared] = {}
        """Stage measurements of the latency pass shared by trials, per remeasure token."""
        self.skipped = _skipped(config.evaluation.metrics, self.labeled)
        self.metrics = [m for m in config.evaluation.metrics if m not in self.skipped]
        answer = {m.name for m in parse_metrics(self.metrics) if m.level == "answer"}
        self.answer_metrics = [m for m in self.metrics if m in answer]
        self.ranking_metrics = [m for m in self.metrics if m not in answer]

    def judges(self) -> tuple[LLMClient | None, Embedder | None]:
        """The LLM and the embedder answer metrics call (None where the config has none and
        no metric needs one)."""
        evaluation = self.spec.config.evaluation
        llm = self.env.llm(evaluation.llm, "evaluation.llm") if evaluation.llm else None
        wanted = {n for m in parse_metrics(self.answer_metrics) for n in needs(m)}
        spec = evaluation.embedder
        if spec is None and "embeddings" in wanted:
            spec = components("embedder").parse({"kind": "sentence-transformers"})
        embedder = self.env.embedder(spec) if spec is not None else None
        return llm, embedder

    def plan(self, trial: Trial) -> Plan:
        """The trial's stage plan over this context's corpus and queries."""
        return compile_trial(
            trial, self.spec.config, self.labeled.corpus_fingerprint, self.queries_key
        )


_CONTEXTS: dict[str, Context] = {}
_KEEP_CONTEXTS = 2  # a run's sweep split and its report split


def context(spec: RunSpec) -> Context:
    """The process-wide context of ``spec`` (built once per process, the last two kept)."""
    digest = spec.digest
    if digest not in _CONTEXTS:
        while len(_CONTEXTS) >= _KEEP_CONTEXTS:
            _CONTEXTS.pop(next(iter(_CONTEXTS)))
        _CONTEXTS[digest] = Context(spec)
    return _CONTEXTS[digest]


def _skipped(metrics: Sequence[str], labeled: LabeledSet) -> dict[str, str]:
    """Answer metrics the set cannot score, with why (they are skipped with a note)."""
    found = {}
    for metric in parse_metrics(metrics):
        if metric.level == "answer" and "reference" in needs(metric) and not labeled.has_answers:
            found[metric.name] = f"dataset {labeled.name!r} has no reference answers"
    return found


def chunk_depth(config: ExperimentConfig, trial: Trial) -> int:
    """How many chunks to retrieve per query (see ``EvaluationSpec``)."""
    evaluation = config.evaluation
    if evaluation.chunk_depth is not None:
        return evaluation.chunk_depth
    whole = getattr(trial["chunker"], "whole_documents", False)
    chunked = evaluation.level == "document" and not whole
    return evaluation.depth * (3 if chunked else 1)


def compile_trial(
    trial: Trial, config: ExperimentConfig, corpus_key: str = "", queries_key: str = ""
) -> Plan:
    """The trial's plan, its final ranking ``chunk_depth`` hits deep."""
    sources = {"corpus": corpus_key, "queries": queries_key}
    return compile_plan(trial.configs, chunk_depth(config, trial), sources)


# ---------------------------------------------------------------- one trial


def run_trial(spec: RunSpec, trial: Trial) -> TrialResult:
    """Run one trial in this process (the function executors ship to workers), in a ``trial``
    telemetry span whose children are its stages (``ragbench.telemetry``)."""
    telemetry.setup(spec.config.telemetry)
    with (
        telemetry.span("trial", trial_id=trial.id, label=trial.label) as span,
        progress.doing(trial.label),
    ):
        result = _run_trial(spec, trial)
        span.set(
            status=result.status, cache_hits=result.cache_hits, cache_misses=result.cache_misses
        )
        if result.status != "ok":
            span.fail(result.error)
    telemetry.flush()
    return result


def _run_trial(spec: RunSpec, trial: Trial) -> TrialResult:
    started = time.perf_counter()
    result = TrialResult(trial.id, trial.label, trial.params(), trial.effective())
    try:
        ctx = context(spec)
        hits, misses = ctx.cache.hits, ctx.cache.misses
        requests = sum(c.usage.requests for c in ctx.env.clients())
        execution = Execution(ctx.plan(trial), ctx.env, ctx.cache)
        ranking = execution.output
        result.index_build_s = execution.build_seconds()
        chunks = execution[execution.plan.chunks]
        answers = execution[execution.plan.answers] if execution.plan.answers else None
        with telemetry.span("evaluate", metrics=len(ctx.metrics), queries=len(ctx.query_ids)):
            _evaluate(ctx, ranking, chunks.table, result)
            _evaluate_answers(ctx, ranking, chunks, answers, result)
        result.usage = _costs(execution.usage(), spec.config.prices)
        result.counters = execution.counters()
        result.traces = execution.traces()
        result.llm_requests = sum(c.usage.requests for c in ctx.env.clients()) - requests
        report = _latency(ctx, execution, spec.remeasure)
        if report is not None:
            result.latency = {s: np.asarray(v) for s, v in report.stages.items()}
            result.latency_info = {
                "cpu_ms": np.asarray(report.cpu) * 1000.0,
                "queries": len(report.query_ids),
                "repeats": report.repeats,
                "threads": report.threads,
                "contention": report.contention,
                "interrupted": report.interrupted,
                "waited": report.waited,
                "measured_at": report.measured_at,
                "machine": report.machine,
            }
        result.cache_hits = ctx.cache.hits - hits
        result.cache_misses = ctx.cache.misses - misses
    except Exception as exc:  # a failing trial is recorded, the sweep goes on
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
        log.error("trial %s failed: %s", trial.label, result.error)
        log.debug("trial %s failed:\n%s", trial.label, traceback.format_exc())
    result.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result.seconds = time.perf_counter() - started
    return result


def _latency(ctx: Context, execution: Execution, remeasure: str | None) -> LatencyReport | None:
    """The trial's latency pass (``ragbench.experiment.latency``), cached by the stages it
    times, the query sample, the settings and the machine; measured again when the run asks."""
    settings = ctx.spec.config.latency
    if settings.queries == 0 or not ctx.latency_sample:
        return None
    plan = execution.plan
    ids = [qid for qid, _ in ctx.latency_sample]
    outputs = [plan.stages[plan.output].key]
    if plan.answers is not None:
        outputs.append(plan.stages[plan.answers].key)
    settings_key = (FORMAT, settings.repeats, settings.threads or 0, machine())
    key = stage_key("latency", *outputs, *ids, *settings_key)
    if remeasure is not None and (remeasure, key) not in ctx.remeasured:
        ctx.cache.forget("latency", key)
        ctx.remeasured.add((remeasure, key))

    measured: list[bool] = []

    def compute() -> LatencyReport:
        measured.append(True)
        provided = {s.name: execution[s.name] for s in plan.index_stages()}
        texts = [text for _, text in ctx.latency_sample]
        with (
            telemetry.suppressed(),  # each query runs alone, repeatedly: no span per stage
            progress.doing(f"latency pass over {len(ids)} queries", whole=True),
        ):
            shared = ctx.latency_shared.setdefault(remeasure, {})
            return measure(
                plan,
                ctx.env,
                provided,
                ids,
                texts,
                settings.repeats,
                settings.threads,
                shared=shared,
            )

    with telemetry.span("latency", key=key, queries=len(ids)) as span:
        report = ctx.cache.get("latency", key, compute, _save_latency, _load_latency)
        span.set(cache_hit=not measured)
    return report


def _save_latency(report: LatencyReport, path: Path) -> None:
    (path / "latency.json").write_text(json.dumps(report.as_dict()), "utf-8")


def _load_latency(path: Path) -> LatencyReport:
    return LatencyReport.from_dict(json.loads((path / "latency.json").read_text("utf-8")))


def _evaluate(ctx: Context, ranking: Ranking, table: ChunkTable, result: TrialResult) -> None:
    evaluation = ctx.spec.config.evaluation
    result.per_query = _score(ctx, ranking, table, ctx.ranking_metrics)
    result.curves = _curves(ctx, ranking, table)
    if evaluation.level == "document":
        result.ranking = document_ranking(ranking, table).head(evaluation.depth)
    else:
        result.ranking = ranking.head(evaluation.depth)
    result.top = _top_chunks(ctx, ranking, table)


def _score(
    ctx: Context, ranking: Ranking, table: ChunkTable, metrics: Sequence[str]
) -> dict[str, np.ndarray]:
    """Per-query values of ``metrics`` with the run's evaluation settings."""
    evaluation = ctx.spec.config.evaluation
    return evaluate_chunks(
        ranking,
        ctx.query_ids,
        table,
        ctx.labeled,
        metrics,
        level=evaluation.level,
        relevance_level=evaluation.relevance_level,
        min_overlap=evaluation.min_overlap,
        depth=evaluation.depth,
    )


_SPAN_CURVE_DEPTH = 20  # span metrics walk intervals per query: their curves stop here


def _curves(ctx: Context, ranking: Ranking, table: ChunkTable) -> dict[str, np.ndarray]:
    """Mean of each evaluated metric family at every cutoff k = 1..depth (metric@k curves)."""
    evaluation = ctx.spec.config.evaluation
    families = {}
    for metric in parse_metrics(ctx.ranking_metrics):
        if metric.k is not None:
            depth = evaluation.depth if not metric.is_span else _SPAN_CURVE_DEPTH
            families[metric.family] = min(depth, evaluation.depth)
    if not families:
        return {}
    names = [f"{family}@{k}" for family, depth in families.items() for k in range(1, depth + 1)]
    values = _score(ctx, ranking, table, names)
    return {
        family: np.array([values[f"{family}@{k}"].mean() for k in range(1, depth + 1)])
        for family, depth in families.items()
    }


def _evaluate_answers(
    ctx: Context,
    ranking: Ranking,
    chunks: ChunkSet,
    answers: Answers | None,
    result: TrialResult,
) -> None:
    """The trial's answers (when it has a generator) and its answer-level metrics."""
    if answers is not None:
        result.answers = pd.DataFrame(
            {
                "query_id": ctx.query_ids,
                "answer": answers.texts,
                "chunk_ids": [json.dumps(ids) for ids in answers.used],
                "seconds": answers.seconds,
            }
        )
    if not ctx.answer_metrics:
        return
    k = ctx.spec.config.evaluation.context_k
    by_id = chunks.by_id
    samples = []
    for row, (qid, question) in enumerate(zip(ctx.query_ids, ctx.query_texts, strict=True)):
        if answers is not None:
            used = [by_id[c] for c in answers.used[row]]
        else:
            used = [by_id[c] for c, _ in ranking.row(row)[:k]]
        references, reference_ids = _references(ctx, qid)
        samples.append(
            AnswerSample(
                query_id=qid,
                question=question,
                answer=answers.texts[row] if answers is not None else None,
                contexts=[c.text for c in used],
                context_ids=[c.doc_id for c in used],
                reference=ctx.labeled.answers.get(qid),
                reference_contexts=references,
                reference_ids=reference_ids,
            )
        )
    llm, embedder = ctx.judges()
    result.per_query |= evaluate_answers(samples, ctx.answer_metrics, llm=llm, embeddings=embedder)


def _references(ctx: Context, query_id: str) -> tuple[list[str], list[str]]:
    """A query's evidence texts (span level, else its relevant documents' texts) and its
    relevant document ids."""
    labeled = ctx.labeled
    level = ctx.spec.config.evaluation.relevance_level
    relevant = [d for d, g in labeled.qrels.get(query_id, {}).items() if g >= level]
    spans = labeled.evidence.get(query_id, [])
    if spans:
        texts = [labeled.doc_index[e.doc_id].text[e.start : e.end] for e in spans]
    else:
        texts = [labeled.doc_index[d].text for d in relevant if d in labeled.doc_index]
    return texts, relevant


def _costs(
    usage: Mapping[str, QueryUsage], prices: Mapping[str, Price]
) -> dict[str, dict[str, np.ndarray]]:
    """Per stage: tokens per query and their cost in US dollars (NaN without a price)."""
    found = {}
    for stage, spent in usage.items():
        price = prices.get(spent.model)
        prompt = np.asarray(spent.prompt_tokens, dtype=np.float64)
        completion = np.asarray(spent.completion_tokens, dtype=np.float64)
        cost = (
            (prompt * price.input + completion * price.output) / 1e6
            if price is not None
            else np.full(len(prompt), np.nan)
        )
        found[stage] = {"prompt_tokens": prompt, "completion_tokens": completion, "cost": cost}
    return found


def _top_chunks(ctx: Context, ranking: Ranking, table: ChunkTable) -> pd.DataFrame:
    """The first chunks of every query with text excerpts, for drill-downs in reports."""
    head = ranking.head(_TOP_CHUNKS)
    ids = np.asarray(head.ids, dtype=object)
    rows = table.rows(ids)
    query, column = np.nonzero(rows >= 0)  # query by query, best first
    found = rows[query, column]
    texts = table.texts[found] if table.texts is not None else np.full(len(found), "")
    return pd.DataFrame(
        {
            "query_id": np.asarray(ctx.query_ids, dtype=object)[query],
            "rank": column + 1,
            "chunk_id": ids[query, column],
            "doc_id": table.doc_ids[found],
            "start": table.starts[found],
            "end": table.ends[found],
            "score": np.asarray(head.scores, dtype=np.float64)[query, column],
            "text": [str(t)[:EXCERPT] for t in texts],
        }
    )
