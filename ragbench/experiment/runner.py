"""The sweep runner: plans each trial's stages, runs them through the stage cache, evaluates,
and commits every finished trial to the run directory before the next one is recorded.

``run`` is the library entry point (``ragbench.run`` in notebooks, ``ragbench run`` on the
command line). Trials run through an executor (serial, a local process pool, or Dask); the
parent process alone writes the run directory, so an interrupted sweep loses no finished
trial and ``resume=True`` continues where it stopped.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import platform
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ragbench.data import load_dataset
from ragbench.data.labeled import LabeledSet
from ragbench.errors import ConfigError
from ragbench.evaluate.labels import ChunkTable, document_ranking, evaluate_chunks
from ragbench.evaluate.metrics import parse_metrics, relevant_query_ids
from ragbench.experiment.config import ExperimentConfig, Trial, expand, load_config
from ragbench.experiment.stages import StageCache, Timed, component_key, stage_key
from ragbench.experiment.store import RunStore, TrialResult
from ragbench.index.cache import CachedEmbedder, default_cache_root
from ragbench.protocols import Embedder, Reranker
from ragbench.registry import ComponentConfig, registry
from ragbench.retrieve import retriever as stage_fns
from ragbench.retrieve.rerank import DenseRerankConfig, DenseReranker
from ragbench.types import Ranking

__all__ = ["RunResult", "RunSpec", "dry_run", "plan", "run", "run_trial"]

log = logging.getLogger(__name__)

Executor = Literal["serial", "process", "dask"]
_TOP_CHUNKS = 5
_EXCERPT = 600


@dataclass(frozen=True)
class RunSpec:
    """What a worker needs to run trials of one experiment (picklable)."""

    config: ExperimentConfig
    limit_queries: int | None = None
    cache_root: str = ""
    split: str | None = None

    @property
    def digest(self) -> str:
        """Identity of the spec, for per-process contexts."""
        payload = self.config.model_dump_json() + f"|{self.limit_queries}|{self.cache_root}"
        payload += f"|{self.split}"
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


class Context:
    """What all trials of a run share within one process: data, queries, caches, models."""

    def __init__(self, spec: RunSpec) -> None:
        config = spec.config
        self.spec = spec
        self.labeled: LabeledSet = load_dataset(
            config.dataset_path(),
            format=config.dataset.format,
            split=spec.split or config.sweep_split,
        )
        ids = set(relevant_query_ids(self.labeled.qrels, config.evaluation.relevance_level))
        needs_spans = config.evaluation.level in {"chunk", "span"} or any(
            m.startswith("span_") or m.endswith("tok") for m in config.evaluation.metrics
        )
        if needs_spans:
            if not self.labeled.has_spans:
                raise ConfigError(
                    f"evaluation: level {config.evaluation.level!r} / span metrics need span "
                    f"evidence, and dataset {config.dataset.path!r} has none"
                )
            ids &= set(self.labeled.evidence)
        queries = [q for q in self.labeled.queries if q.id in ids][: spec.limit_queries]
        if not queries:
            raise ConfigError(f"dataset {config.dataset.path!r}: no judged query to evaluate")
        self.query_ids = [q.id for q in queries]
        self.query_texts = [q.text for q in queries]
        self.queries_key = stage_key("queries", *(f"{q.id}\x1f{q.text}" for q in queries))
        self.cache = StageCache(Path(spec.cache_root or default_cache_root()))
        self._embedders: dict[str, Embedder] = {}
        self._rerankers: dict[str, Reranker] = {}

    def embedder(self, config: ComponentConfig) -> Embedder:
        """One embedder per config per process (models are shared anyway)."""
        if config.key() not in self._embedders:
            self._embedders[config.key()] = registry("embedder").build(config)
        return self._embedders[config.key()]

    def reranker(self, config: ComponentConfig) -> Reranker:
        """One reranker per config; a dense reranker reads document vectors from the cache."""
        if config.key() not in self._rerankers:
            if isinstance(config, DenseRerankConfig):
                cached = CachedEmbedder(  # queries stay uncached: their latency is measured
                    self.embedder(config.embedder), self.cache.embeddings, roles=("document",)
                )
                self._rerankers[config.key()] = DenseReranker(config, cached)
            else:
                self._rerankers[config.key()] = registry("reranker").build(config)
        return self._rerankers[config.key()]


_CONTEXTS: dict[str, Context] = {}
_KEEP_CONTEXTS = 2  # a run's sweep split and its report split


def context(spec: RunSpec) -> Context:
    """The process-wide context of ``spec`` (built once per process, the last two kept)."""
    if spec.digest not in _CONTEXTS:
        while len(_CONTEXTS) >= _KEEP_CONTEXTS:
            _CONTEXTS.pop(next(iter(_CONTEXTS)))
        _CONTEXTS[spec.digest] = Context(spec)
    return _CONTEXTS[spec.digest]


# ---------------------------------------------------------------- planning


def _candidates(trial: Trial) -> int:
    return int(getattr(trial.reranker, "candidates", 0)) if trial.reranker.kind != "none" else 0


def chunk_depth(config: ExperimentConfig, trial: Trial) -> int:
    """How many chunks to retrieve per query (see ``EvaluationSpec``)."""
    evaluation = config.evaluation
    if evaluation.chunk_depth is not None:
        return evaluation.chunk_depth
    chunked = evaluation.level == "document" and trial.chunker.kind != "none"
    return evaluation.depth * (3 if chunked else 1)


def _artifact_stage(slot: str) -> str:
    """The cache stage a planned slot is stored under (BM25's own chunking is chunks too)."""
    return "chunks" if slot == "bm25_chunks" else slot


def plan(trial: Trial, config: ExperimentConfig, corpus_key: str, queries_key: str) -> dict:
    """The artifact key of every stage the trial uses, computed from configs alone."""
    depth = chunk_depth(config, trial)
    first = max(depth, _candidates(trial))
    retriever = trial.retriever
    keys = {"chunks": stage_key("chunks", corpus_key, component_key(trial.chunker))}
    if retriever.kind in {"dense", "hybrid"}:
        assert trial.embedder is not None  # expansion keeps the embedder for these kinds
        embedder = component_key(trial.embedder)
        keys["doc_vectors"] = stage_key("doc_vectors", keys["chunks"], embedder)
        store = component_key(retriever.store)  # type: ignore[attr-defined]
        keys["dense_index"] = stage_key("dense_index", keys["doc_vectors"], store)
        keys["query_vectors"] = stage_key("query_vectors", queries_key, embedder)
        k = max(retriever.depth, first) if retriever.kind == "hybrid" else first  # type: ignore[attr-defined]
        keys["dense"] = stage_key("dense", keys["dense_index"], keys["query_vectors"], k)
    if retriever.kind in {"bm25", "hybrid"}:
        bm25 = retriever if retriever.kind == "bm25" else retriever.bm25  # type: ignore[attr-defined]
        lexical = getattr(retriever, "bm25_chunker", None)
        if lexical is not None:
            keys["bm25_chunks"] = stage_key("chunks", corpus_key, component_key(lexical))
        source = keys.get("bm25_chunks", keys["chunks"])
        keys["bm25_index"] = stage_key("bm25_index", source, component_key(bm25))
        k = max(retriever.depth, first) if retriever.kind == "hybrid" else first  # type: ignore[attr-defined]
        keys["bm25"] = stage_key("bm25", keys["bm25_index"], queries_key, k)
    last = "bm25" if retriever.kind == "bm25" else "dense"
    if retriever.kind == "hybrid":
        fusion = component_key(retriever.fusion)  # type: ignore[attr-defined]
        # per-document fusion (bm25_chunker) takes ``depth`` documents from each list
        per_document = ["documents", retriever.depth] if "bm25_chunks" in keys else []  # type: ignore[attr-defined]
        keys["fusion"] = stage_key(
            "fusion", keys["dense"], keys["bm25"], fusion, first, *per_document
        )
        last = "fusion"
    if trial.reranker.kind != "none":
        reranker = component_key(trial.reranker)
        keys["rerank"] = stage_key("rerank", keys[last], reranker, keys["chunks"], depth)
    return keys


# ---------------------------------------------------------------- one trial


def run_trial(spec: RunSpec, trial: Trial) -> TrialResult:
    """Run one trial in this process (the function executors ship to workers)."""
    started = time.perf_counter()
    result = TrialResult(trial.id, trial.label, trial.params())
    try:
        ctx = context(spec)
        hits, misses = ctx.cache.hits, ctx.cache.misses
        _execute(ctx, trial, result)
        result.cache_hits = ctx.cache.hits - hits
        result.cache_misses = ctx.cache.misses - misses
    except Exception as exc:  # a failing trial is recorded, the sweep goes on
        log.error("trial %s failed:\n%s", trial.label, traceback.format_exc())
        result.status, result.error = "failed", f"{type(exc).__name__}: {exc}"
    result.peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result.seconds = time.perf_counter() - started
    return result


def _execute(ctx: Context, trial: Trial, result: TrialResult) -> None:
    config = ctx.spec.config
    cache = ctx.cache
    keys = plan(trial, config, ctx.labeled.corpus_fingerprint, ctx.queries_key)
    chunks, table = cache.chunks(keys["chunks"], ctx.labeled.documents, trial.chunker)
    texts = {c.id: c.text for c in chunks}
    depth = chunk_depth(config, trial)
    first = max(depth, _candidates(trial))
    retriever = trial.retriever
    latency: dict[str, np.ndarray] = {}
    lists: list[Timed] = []
    if "dense" in keys:
        embedder = ctx.embedder(trial.embedder)  # type: ignore[arg-type]

        def store() -> Any:
            vectors = cache.doc_vectors(keys["doc_vectors"], chunks, embedder)
            return cache.dense_index(keys["dense_index"], chunks, vectors, retriever.store)  # type: ignore[attr-defined]

        queries = cache.query_vectors(keys["query_vectors"], ctx.query_texts, embedder)
        k = _first_k(retriever, first)
        dense = cache.ranking(
            "dense", keys["dense"], lambda: stage_fns.dense_search(store(), queries.vectors, k)
        )
        latency |= {"embed_query": queries.seconds, "dense": dense.seconds}
        lists.append(dense)
    lexical_chunks, lexical_table = chunks, table
    if "bm25_chunks" in keys:
        lexical_chunks, lexical_table = cache.chunks(
            keys["bm25_chunks"],
            ctx.labeled.documents,
            retriever.bm25_chunker,  # type: ignore[attr-defined]
        )
    if "bm25" in keys:
        bm25_config = retriever if retriever.kind == "bm25" else retriever.bm25  # type: ignore[attr-defined]
        index = lambda: cache.bm25_index(keys["bm25_index"], lexical_chunks, bm25_config)  # noqa: E731
        k = _first_k(retriever, first)
        bm25 = cache.ranking(
            "bm25", keys["bm25"], lambda: stage_fns.sparse_search(index(), ctx.query_texts, k)
        )
        latency["bm25"] = bm25.seconds
        lists.append(bm25)
    final = lists[0]
    if "fusion" in keys:
        fusion = registry("fusion").build(retriever.fusion)  # type: ignore[attr-defined]
        if "bm25_chunks" in keys:
            dense_list, bm25_list = lists[0].ranking, lists[1].ranking
            fused = lambda: _fuse_documents(  # noqa: E731
                fusion,
                dense_list,
                table,
                bm25_list,
                lexical_table,
                retriever.depth,  # type: ignore[attr-defined]
                first,
            )
        else:
            fused = lambda: stage_fns.fuse(fusion, [t.ranking for t in lists], first)  # noqa: E731
        final = cache.ranking("fusion", keys["fusion"], fused)
        latency["fusion"] = final.seconds
    if "rerank" in keys:
        reranker = ctx.reranker(trial.reranker)
        head = final.ranking

        def reranked() -> tuple[Ranking, np.ndarray]:
            if isinstance(reranker, DenseReranker):  # document vectors exist before queries
                reranker.embedder.embed(list(texts.values()), "document")
            return stage_fns.rerank(reranker, ctx.query_texts, head, texts, depth)

        final = cache.ranking("rerank", keys["rerank"], reranked)
        latency["rerank"] = final.seconds
    ranking = final.ranking.head(depth)
    result.latency = latency
    result.index_build_s = sum(
        cache.recorded_seconds(_artifact_stage(stage), keys[stage])
        for stage in ("chunks", "bm25_chunks", "doc_vectors", "dense_index", "bm25_index")
        if stage in keys
    )
    _evaluate(ctx, ranking, table, result)


def _fuse_documents(
    fusion: Any,
    dense: Ranking,
    table: ChunkTable,
    bm25: Ranking,
    bm25_table: ChunkTable,
    depth: int,
    k: int,
) -> tuple[Ranking, np.ndarray]:
    """Fuse two chunkings per document — the top ``depth`` documents of each list, as the
    hybrid's ``depth`` promises — then show each document by its best dense chunk (or, when
    the dense list missed it, its first chunk)."""
    lists = [document_ranking(dense, table), document_ranking(bm25, bm25_table)]
    fused, seconds = stage_fns.fuse(fusion, [ranking.head(depth) for ranking in lists], k)
    doc_of = dict(zip(table.ids, table.doc_ids, strict=True))
    rows = []
    for i in range(len(fused.ids)):
        best: dict[str, str] = {}
        for chunk_id in dense.ids[i]:
            if chunk_id:
                best.setdefault(doc_of[chunk_id], chunk_id)
        row = []
        for doc, score in fused.row(i):
            chunk = best.get(doc) or next(iter(table.ids[table.doc_rows(doc)]), None)
            if chunk is not None:  # a document this chunking left without chunks drops out
                row.append((str(chunk), score))
        rows.append(row)
    return Ranking.from_rows(rows, k), seconds


def _first_k(retriever: ComponentConfig, first: int) -> int:
    return max(retriever.depth, first) if retriever.kind == "hybrid" else first  # type: ignore[attr-defined]


def _evaluate(ctx: Context, ranking: Ranking, table: ChunkTable, result: TrialResult) -> None:
    evaluation = ctx.spec.config.evaluation
    result.per_query = _score(ctx, ranking, table, evaluation.metrics)
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
    for metric in parse_metrics(evaluation.metrics):
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


def _top_chunks(ctx: Context, ranking: Ranking, table: ChunkTable) -> pd.DataFrame:
    """The first chunks of every query with text excerpts, for drill-downs in reports."""
    head = ranking.head(_TOP_CHUNKS)
    rows = []
    for qid, ids, scores in zip(ctx.query_ids, head.ids, head.scores, strict=True):
        found = [c for c in ids if c]
        positions = table.rows(np.asarray(found, dtype=object)) if found else []
        for rank, (cid, pos) in enumerate(zip(found, positions, strict=True), start=1):
            rows.append(
                {
                    "query_id": qid,
                    "rank": rank,
                    "chunk_id": cid,
                    "doc_id": table.doc_ids[pos],
                    "start": int(table.starts[pos]),
                    "end": int(table.ends[pos]),
                    "score": float(scores[rank - 1]),
                    "text": str(table.texts[pos])[:_EXCERPT] if table.texts is not None else "",
                }
            )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- the sweep


@dataclass
class RunResult:
    """A run directory as DataFrames, for notebooks (renders as an HTML table)."""

    path: Path

    @cached_property
    def manifest(self) -> dict[str, Any]:
        """``manifest.json``."""
        return RunStore(self.path).manifest()

    @property
    def trials(self) -> pd.DataFrame:
        """One row per trial."""
        return RunStore(self.path).trials()

    @property
    def per_query(self) -> pd.DataFrame:
        """Per-query metric values (long format)."""
        return RunStore(self.path).per_query()

    @property
    def curves(self) -> pd.DataFrame:
        """Mean metric@k for k = 1..depth per trial (long format)."""
        return RunStore(self.path).curves()

    @property
    def metrics(self) -> list[str]:
        """The evaluated metrics, in config order."""
        return list(self.manifest["config"]["evaluation"]["metrics"])

    def table(self) -> pd.DataFrame:
        """Trials sorted by the first metric, with metrics and latency columns."""
        trials = self.trials
        if trials.empty:
            return trials
        columns = ["label", *self.metrics, "latency.total.p50_ms", "latency.total.p95_ms"]
        columns += ["index_build_s", "status"]
        present = [c for c in columns if c in trials.columns]
        return trials.set_index("trial_id")[present].sort_values(self.metrics[0], ascending=False)

    def _repr_html_(self) -> str:
        title = (
            f"<b>{html.escape(self.manifest['config']['name'])}</b> — {html.escape(str(self.path))}"
        )
        return title + self.table().to_html(float_format=lambda v: f"{v:.4f}")

    def __repr__(self) -> str:
        return f"RunResult({str(self.path)!r}, trials={len(self.trials)})"


def _versions() -> dict[str, str]:
    names = ["ragbench", "numpy", "pandas", "sentence-transformers", "torch", "bm25s", "hnswlib"]
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _git_commit() -> str | None:
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None


def _queries_frame(ctx: Context) -> pd.DataFrame:
    labeled = ctx.labeled
    rows = []
    for qid, text in zip(ctx.query_ids, ctx.query_texts, strict=True):
        evidence = [
            {
                "doc_id": e.doc_id,
                "start": e.start,
                "end": e.end,
                "text": labeled.doc_index[e.doc_id].text[e.start : e.end][:_EXCERPT],
            }
            for e in labeled.evidence.get(qid, [])
            if e.doc_id in labeled.doc_index
        ]
        rows.append(
            {
                "query_id": qid,
                "text": text,
                "qrels": json.dumps(labeled.qrels.get(qid, {})),
                "evidence": json.dumps(evidence, ensure_ascii=False),
            }
        )
    return pd.DataFrame(rows)


def _compatible(old: Mapping[str, Any], new: Mapping[str, Any], path: Path) -> None:
    for key in ("dataset_fingerprint", "queries", "evaluation"):
        if old.get(key) != new.get(key):
            raise ConfigError(
                f"{path}: cannot resume, the {key.replace('_', ' ')} changed since the run "
                "started (use a new --out or --overwrite)"
            )


def run(
    config: str | Path | Mapping[str, Any] | ExperimentConfig,
    out: str | Path | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    executor: Executor = "serial",
    workers: int = 2,
    scheduler: str | None = None,
    limit_queries: int | None = None,
    cache_root: str | Path | None = None,
    progress: bool = True,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> RunResult:
    """Run a sweep into a run directory (default ``runs/<name>``) and return its result.

    An existing run directory needs ``resume`` (keep finished trials, run the rest) or
    ``overwrite`` (start again); the stage cache makes either cheap.
    """
    from ragbench.experiment.executors import execute

    cfg = config if isinstance(config, ExperimentConfig) else load_config(config)
    store = RunStore(Path(out) if out is not None else Path("runs") / cfg.name)
    spec = RunSpec(cfg, limit_queries, str(cache_root or default_cache_root()))
    ctx = context(spec)
    trials = expand(cfg)
    manifest = {
        "config": cfg.model_dump(mode="json", exclude={"base_dir"}),
        "dataset": {
            "path": cfg.dataset_path(),
            "name": ctx.labeled.name,
            "split": ctx.labeled.split,
            "documents": len(ctx.labeled.documents),
        },
        "dataset_fingerprint": ctx.labeled.fingerprint,
        "queries": {"count": len(ctx.query_ids), "limit": limit_queries, "key": ctx.queries_key},
        "evaluation": cfg.evaluation.model_dump(mode="json"),
        "trials": {t.id: t.label for t in trials},
        "cache_root": spec.cache_root,
        "versions": _versions(),
        "git_commit": _git_commit(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if store.exists() and not overwrite:
        if not resume:
            raise ConfigError(
                f"{store.path} already holds a run: pass --resume to continue it or "
                "--overwrite to start again"
            )
        _compatible(store.manifest(), manifest, store.path)
    elif store.exists():
        for name in ("trials.parquet", "per_query.parquet", "curves.parquet", "selection.json"):
            (store.path / name).unlink(missing_ok=True)
    store.write_manifest(manifest)
    store.write_queries(_queries_frame(ctx))
    done = store.finished_ids() if resume else set()
    if cfg.search.strategy == "tpe":
        from ragbench.experiment.tpe import tpe_trials

        total = min(cfg.search.n or len(trials), len(trials))
        results = tpe_trials(cfg, trials, store, lambda ts: execute(spec, ts, "serial"))
    else:
        total = len(trials)
        results = execute(
            spec, [t for t in trials if t.id not in done], executor, workers, scheduler
        )
    started = time.perf_counter()
    bar = tqdm(total=total, initial=len(done), desc="trials", unit="trial", disable=not progress)
    for result in results:
        store.commit(result, ctx.query_ids)
        bar.update(1)
        bar.set_postfix_str(result.label[:60])
        if on_trial is not None:
            on_trial(result)
    bar.close()
    if cfg.evaluation.selects:
        from ragbench.experiment.selection import select

        manifest["selection"] = select(spec, trials, store)
    manifest["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    manifest["seconds"] = time.perf_counter() - started
    store.write_manifest(manifest)
    return RunResult(store.path)


def dry_run(
    config: str | Path | Mapping[str, Any] | ExperimentConfig,
    limit_queries: int | None = None,
    cache_root: str | Path | None = None,
) -> pd.DataFrame:
    """The trials a config would run and, per stage, whether its artifact is already cached."""
    cfg = config if isinstance(config, ExperimentConfig) else load_config(config)
    ctx = context(RunSpec(cfg, limit_queries, str(cache_root or default_cache_root())))
    rows = []
    for trial in expand(cfg):
        keys = plan(trial, cfg, ctx.labeled.corpus_fingerprint, ctx.queries_key)
        cached = {stage: ctx.cache.has(_artifact_stage(stage), key) for stage, key in keys.items()}
        rows.append(
            {
                "trial_id": trial.id,
                "label": trial.label,
                "stages": len(keys),
                "cached": sum(cached.values()),
                "missing": ", ".join(s for s, hit in cached.items() if not hit) or "-",
            }
        )
    return pd.DataFrame(rows)
