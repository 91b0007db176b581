"""The trial engine: compile one trial to its stage plan, run it through the stage cache, hand
its outputs to its evaluation, and time it.

``run_trial`` is what executors ship to workers. Everything trials of one run share within a
process — the labeled set, the query texts, the stage cache, loaded models, and the trials'
``Evaluation`` (``ragbench.experiment.evaluation``: settings, parsed metrics, queries) — lives
in a :class:`Context`, built once per process and keyed by the run spec *and* the data on disk,
so a changed corpus is never evaluated against a stale context.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import resource
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from ragbench import progress, telemetry
from ragbench.data import load_dataset
from ragbench.data.catalog import resolve_dataset
from ragbench.data.labeled import LabeledSet
from ragbench.data.pairs import split_pairs
from ragbench.data.sample import Sampled, recorded, sample_set
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.metrics import relevant_query_ids
from ragbench.experiment.config import (
    EvaluationSpec,
    ExperimentConfig,
    LatencySpec,
    Trial,
    trains_on_select,
)
from ragbench.experiment.evaluation import Evaluation
from ragbench.experiment.latency import FORMAT, LatencyReport, Shared, machine, measure
from ragbench.experiment.store import TrialResult
from ragbench.index.cache import StageCache, default_cache_root
from ragbench.llm.cache import LLMCache
from ragbench.llm.client import Price
from ragbench.retrieve.artifacts import QueryUsage
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import Env, Pairs, Plan, compile_plan, stage_key

__all__ = ["Context", "Evaluable", "RunSpec", "chunk_depth", "context", "evaluable", "run_trial"]

log = logging.getLogger(__name__)


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
    """What all trials of a run share within one process: the data (a sample of it when the
    config asks, ``ragbench.data.sample``) and its evaluated queries, the stage cache, the
    models (``env``), the latency sample and measurements, and the trials' ``evaluation``
    (what scoring a trial needs, handed whole to it)."""

    def __init__(self, spec: RunSpec) -> None:
        config = spec.config
        self.spec = spec
        labeled = load_dataset(
            config.dataset_path(),
            format=config.dataset.format,
            split=spec.split or config.sweep_split,
            queries=config.queries_path(),
        )
        self.sample: Sampled | None = recorded(labeled)
        """The sample of a corpus the sweep runs on: the config's ``dataset.sample``, or the
        one a generated set was made from; None for every document."""
        if config.dataset.sample is not None:
            labeled, applied = sample_set(
                labeled, config.dataset.sample, config.dataset.sample_seed
            )
            self.sample = applied or self.sample
            if applied is not None and applied.queries == 0:
                raise ConfigError(
                    f"dataset.sample: the sample of {applied.documents:,} document(s) keeps "
                    f"none of the {applied.queries_of:,} queries (each one's judged documents "
                    "would fill more than half of it); use a larger --sample (or --sample all)"
                )
            if applied is not None and applied.queries is not None:
                log.warning(
                    "dataset.sample: the documents the queries are judged on would fill more "
                    "than half of the %d sampled; %d of the %d queries are kept",
                    applied.documents,
                    applied.queries,
                    applied.queries_of,
                )
        self.labeled: LabeledSet = labeled
        queries = _evaluated_queries(self.labeled, config.evaluation, config.dataset.path)
        queries = queries[: spec.limit_queries]
        if not queries:
            raise ConfigError(f"dataset {config.dataset.path!r}: no judged query to evaluate")
        self.query_ids = [q for q, _ in queries]
        self.query_texts = [text for _, text in queries]
        self.queries_key = stage_key("queries", *(f"{q}\x1f{text}" for q, text in queries))
        root = Path(spec.cache_root or default_cache_root())
        self.cache = StageCache(root)
        train, self.train_key = self._training_split(spec)
        self.env = Env(
            corpus=self.labeled.documents,
            queries=self.query_texts,
            embeddings=self.cache.embeddings,
            llm_cache=LLMCache(root),
            train=train,
            work=root / "training",
        )
        order = np.random.default_rng(config.latency.seed).permutation(len(queries))
        self.latency_sample = [queries[i] for i in sorted(order[: config.latency.queries])]
        self.remeasured: set[tuple[str, str]] = set()
        self.latency_shared: dict[str | None, Shared] = {}
        """Stage measurements of the latency pass shared by trials, per remeasure token."""
        self.evaluation = Evaluation.of(config.evaluation, self.labeled, queries)

    def plan(self, trial: Trial) -> Plan:
        """The trial's stage plan over this context's corpus and queries."""
        sources = {
            "corpus": self.labeled.corpus_fingerprint,
            "queries": self.queries_key,
            "train": self.train_key,
        }
        return compile_plan(trial.configs, chunk_depth(self.spec.config, trial), sources)

    def _training_split(self, spec: RunSpec) -> tuple[Pairs | None, str]:
        """The pairs of the selection split that models fine-tuned on ``pairs: select`` train
        on, and their key; a ``DataError`` when one of its queries is evaluated here on
        another split (the same query in both)."""
        config = spec.config
        split = config.evaluation.select_on
        if split is None or not trains_on_select(config):
            return None, "train"
        labeled = self.labeled
        if labeled.split != split:
            labeled = load_dataset(
                config.dataset_path(),
                format=config.dataset.format,
                split=split,
                queries=config.queries_path(),
            )
            shared = {q.id for q in labeled.queries} & set(self.query_ids)
            if shared:
                raise DataError(
                    f"dataset {config.dataset.path!r}: {len(shared)} queries of split "
                    f"{labeled.split!r} (the fine-tuning pairs) are evaluated on split "
                    f"{self.labeled.split!r} too, e.g. {sorted(shared)[0]!r}"
                )
        level = config.evaluation.relevance_level
        key = stage_key("train", labeled.fingerprint, level)
        return partial(split_pairs, labeled, relevance_level=level), key


@dataclass(frozen=True)
class Evaluable:
    """The (id, text) of the queries an evaluation scores, and how many judged queries it
    leaves out, by why: ``other_levels`` (judged at other levels than the evaluated one
    only), ``missing_documents`` (every document judged relevant is absent from the corpus:
    no ranking can find one, so the query scores nothing in every trial and separates none),
    ``no_spans`` (no span evidence where the level or a metric needs spans)."""

    queries: list[tuple[str, str]]
    left_out: dict[str, int]


def evaluable(labeled: LabeledSet, evaluation: EvaluationSpec, dataset: str) -> Evaluable:
    """The queries ``evaluation`` scores: those judged at its level with a relevant
    judgement of a document the corpus holds, and with span evidence when its level or a
    metric needs spans; ``ConfigError`` when that leaves none, naming the dataset."""
    level = evaluation.relevance_level
    ids = set(relevant_query_ids(labeled.qrels, level))
    elsewhere = ids - labeled.judged_at(evaluation.level)
    if elsewhere and elsewhere == ids:
        raise ConfigError(
            f"evaluation.level: every judged query of dataset {dataset!r} is judged at other "
            f"levels than {evaluation.level!r} only (their 'levels' in queries.jsonl)"
        )
    ids -= elsewhere
    documents = labeled.doc_index
    missing = {
        q for q in ids if not any(d in documents for d, g in labeled.qrels[q].items() if g >= level)
    }
    if missing and missing == ids:
        first = min(missing)
        raise ConfigError(
            f"dataset {dataset!r}: every judged query judges only documents its corpus does not "
            f"hold (query {first!r} judges {', '.join(sorted(labeled.qrels[first]))}), so no "
            "ranking can find any; is the corpus the one the queries were judged on?"
        )
    ids -= missing
    spanless: set[str] = set()
    if evaluation.level in {"chunk", "span"} or any(m.is_span for m in evaluation.metrics):
        if not labeled.has_spans:
            raise ConfigError(
                f"evaluation: level {evaluation.level!r} / span metrics need span "
                f"evidence, and dataset {dataset!r} has none"
            )
        spanless = ids - set(labeled.evidence)
        ids -= spanless
    counts = {"other_levels": elsewhere, "missing_documents": missing, "no_spans": spanless}
    return Evaluable(
        [(q.id, q.text) for q in labeled.queries if q.id in ids],
        {why: len(left) for why, left in counts.items() if left},
    )


def _evaluated_queries(
    labeled: LabeledSet, evaluation: EvaluationSpec, dataset: str
) -> list[tuple[str, str]]:
    """The (id, text) of the queries ``evaluation`` scores (``evaluable``), logging those it
    leaves out and why."""
    found = evaluable(labeled, evaluation, dataset)
    left = found.left_out
    if "other_levels" in left:
        log.info(
            "%d queries judged at other levels only are left out at level %r",
            left["other_levels"],
            evaluation.level,
        )
    if "missing_documents" in left:
        log.warning(
            "%d judged queries judge only documents not in the corpus and are left out: no "
            "ranking can find them, so they would score nothing in every trial",
            left["missing_documents"],
        )
    if "no_spans" in left:
        log.warning(
            "%d judged queries without span evidence are left out: level %r / span "
            "metrics score only queries with evidence",
            left["no_spans"],
            evaluation.level,
        )
    return found.queries


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


def chunk_depth(config: ExperimentConfig, trial: Trial) -> int:
    """How many chunks to retrieve per query (see ``EvaluationSpec``)."""
    evaluation = config.evaluation
    if evaluation.chunk_depth is not None:
        return evaluation.chunk_depth
    whole = getattr(trial["chunker"], "whole_documents", False)
    chunked = evaluation.level == "document" and not whole
    return evaluation.depth * (3 if chunked else 1)


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
    """Compile, execute and evaluate one trial, then its costs and its latency pass; a failure
    is recorded on the result."""
    started = time.perf_counter()
    result = TrialResult(trial.id, trial.label, trial.params(), trial.effective())
    try:
        ctx = context(spec)
        hits, misses = ctx.cache.hits, ctx.cache.misses
        plan = ctx.plan(trial)
        requests = sum(c.usage.requests for c in ctx.env.clients())
        execution = Execution(plan, ctx.env, ctx.cache)
        ranking = execution.output
        result.index_build_s = execution.build_seconds()
        chunks = execution[plan.chunks]
        answers = execution[plan.answers] if plan.answers else None
        usage, result.counters, result.traces = (
            execution.usage(),
            execution.counters(),
            execution.traces(),
        )
        evaluation = ctx.evaluation
        llm, embedder = evaluation.judges
        judges = (
            ctx.env.llm(llm, "evaluation.llm") if llm else None,
            ctx.env.embedder(embedder) if embedder is not None else None,
        )
        queries = len(evaluation.query_ids)
        with telemetry.span("evaluate", metrics=len(evaluation.metrics), queries=queries):
            evaluation.evaluate(result, ranking, chunks, answers, judges)
        result.llm_requests = sum(c.usage.requests for c in ctx.env.clients()) - requests
        result.usage = _costs(usage, spec.config.prices)
        _record_latency(result, _latency(ctx, execution, spec.config.latency, spec.remeasure))
        result.cache_hits = ctx.cache.hits - hits
        result.cache_misses = ctx.cache.misses - misses
    except Exception as exc:  # a failing trial is recorded, the sweep goes on
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
        log.error("trial %s failed: %s", trial.label, result.error)
        log.debug("trial %s failed:\n%s", trial.label, traceback.format_exc())
    result.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result.seconds = time.perf_counter() - started
    return result


def _record_latency(result: TrialResult, report: LatencyReport | None) -> None:
    """The latency pass's seconds per stage and its circumstances on ``result``."""
    if report is None:
        return
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


def _latency(
    ctx: Context, execution: Execution, settings: LatencySpec, remeasure: str | None
) -> LatencyReport | None:
    """The trial's latency pass (``ragbench.experiment.latency``) over ``ctx``'s latency
    sample, cached by the stages it times, the sample, the settings and the machine; measured
    again when the run asks (``remeasure``)."""
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
