"""The sweep driver: expands a config into trials, runs them through an executor, commits
every finished trial to the run directory before the next one is recorded, resumes, and ends
with the honest selection when the config asks for one.

``run`` is the library entry point (``ragbench.run`` in notebooks, ``ragbench run`` on the
command line); ``dry_run`` lists the trials and which of their stages are cached. Running one
trial is ``ragbench.experiment.trial``'s job. Trials run through an executor (serial, a local
process pool, or Dask); the parent process alone writes the run directory, so an interrupted
sweep loses no finished trial and ``resume=True`` continues where it stopped.
"""

from __future__ import annotations

import html
import json
import logging
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from tqdm.auto import tqdm

from ragbench import progress as progress_display
from ragbench import telemetry
from ragbench.endpoints import describe_endpoints
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.metrics import best_first, best_index
from ragbench.experiment.config import ExperimentConfig, Trial, expand, load_config, trial_of
from ragbench.experiment.estimate import estimate
from ragbench.experiment.evaluation import EXCERPT
from ragbench.experiment.executors import execute
from ragbench.experiment.selection import select
from ragbench.experiment.store import RUN_TABLES, RunStore, TrialResult
from ragbench.experiment.tpe import tpe_trials
from ragbench.experiment.trial import Context, RunSpec, context
from ragbench.index.cache import writable_cache_root
from ragbench.models import check_models
from ragbench.registry import redundancy

__all__ = ["RunResult", "dry_run", "find_trial", "run"]

log = logging.getLogger(__name__)

Executor = Literal["serial", "process", "dask"]


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
        """The evaluated metrics, in config order (skipped ones left out)."""
        return RunStore(self.path).metrics()

    def table(self) -> pd.DataFrame:
        """Trials sorted by the first metric, with metrics and latency columns."""
        trials = self.trials
        if trials.empty:
            return trials
        columns = ["label", *self.metrics, "latency.total.p50_ms", "latency.total.p95_ms"]
        columns += ["index_build_s", "status"]
        present = [c for c in columns if c in trials.columns]
        table = trials.set_index("trial_id")[present]
        if self.metrics[0] not in table.columns:  # no trial finished
            return table
        return best_first(table, self.metrics[0])

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
    # how a generated label was made (``ict``, ``headings``, ``llm``): reports say so
    method = {q.id: q.metadata.get("method") for q in labeled.queries}
    rows = []
    for qid, text in zip(ctx.query_ids, ctx.query_texts, strict=True):
        evidence = [
            {
                "doc_id": e.doc_id,
                "start": e.start,
                "end": e.end,
                "text": labeled.doc_index[e.doc_id].text[e.start : e.end][:EXCERPT],
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
                "reference": labeled.answers.get(qid),
                "method": str(method[qid]) if method.get(qid) is not None else None,
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


def _check_limit(limit_queries: int | None) -> None:
    if limit_queries is not None and limit_queries < 1:
        raise ConfigError(
            f"--limit-queries: expected a positive number of queries, got {limit_queries}"
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
    remeasure_latency: bool = False,
) -> RunResult:
    """Run a sweep into a run directory (default ``runs/<name>``) and return its result.

    An existing run directory needs ``resume`` (keep finished trials, run the rest) or
    ``overwrite`` (start again); the stage cache makes either cheap. A resume first checks the
    finished trials against the run directory and runs again those that lost a file. One run
    at a time writes a run directory: another one fails at once. Latency is measured once per
    trial and machine and cached; ``remeasure_latency`` measures it again (nothing else is
    recomputed).
    """
    if resume and overwrite:
        raise ConfigError(
            "--resume and --overwrite exclude each other: --resume continues the run, "
            "--overwrite starts it again"
        )
    _check_limit(limit_queries)
    cfg = config if isinstance(config, ExperimentConfig) else load_config(config)
    telemetry.setup(cfg.telemetry)  # a missing exporter package fails before anything runs
    root = str(writable_cache_root(cache_root))
    store = RunStore(Path(out) if out is not None else Path("runs") / cfg.name)
    with store.hold():
        token = uuid.uuid4().hex if remeasure_latency else None
        spec = RunSpec(cfg, limit_queries, root, remeasure=token)
        ctx = context(spec)
        trials = expand(cfg)
        check_models((t.configs for t in trials), cfg.sweep)
        manifest = _manifest(spec, ctx, trials)
        _open_store(store, manifest, ctx, resume=resume, overwrite=overwrite)
        done = store.finished_ids() if resume else set()
        if cfg.search.strategy == "tpe":
            total = min(cfg.search.n or len(trials), len(trials))
            results = tpe_trials(cfg, trials, store, lambda ts: execute(spec, ts, "serial"))
        else:
            total = len(trials)
            todo = [t for t in trials if t.id not in done]
            results = execute(spec, todo, executor, workers, scheduler)
        started = time.perf_counter()
        _commit(store, results, ctx.query_ids, total, len(done), progress, on_trial)
        if cfg.evaluation.selects:
            manifest["selection"] = select(spec, trials, store)
        manifest["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        manifest["seconds"] = time.perf_counter() - started
        store.write_manifest(manifest)
        return RunResult(store.path)


def _manifest(spec: RunSpec, ctx: Context, trials: Sequence[Trial]) -> dict[str, Any]:
    """The run's ``manifest.json`` as it starts: config, dataset, queries, evaluation, the
    metrics evaluated (and skipped), trials, versions."""
    cfg, labeled, evaluation = spec.config, ctx.labeled, ctx.evaluation
    return {
        "config": cfg.model_dump(mode="json", exclude={"base_dir"}),
        "dataset": {
            "path": cfg.dataset_path(),
            "queries": cfg.queries_path(),
            "name": labeled.name,
            "split": labeled.split,
            "documents": len(labeled.documents),
        },
        "dataset_fingerprint": labeled.fingerprint,
        "queries": {
            "count": len(ctx.query_ids),
            "limit": spec.limit_queries,
            "key": ctx.queries_key,
        },
        "evaluation": cfg.evaluation.model_dump(mode="json"),
        "metrics": [m.name for m in evaluation.metrics],
        "skipped_metrics": evaluation.skipped,
        "trials": {t.id: t.label for t in trials},
        "cache_root": spec.cache_root,
        "versions": _versions(),
        "git_commit": _git_commit(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _open_store(
    store: RunStore, manifest: dict[str, Any], ctx: Context, *, resume: bool, overwrite: bool
) -> None:
    """Start the run directory afresh, or check that a resume continues the same run and drop
    the finished trials that lost a file; then write the manifest and the queries."""
    if store.exists() and not overwrite:
        if not resume:
            raise ConfigError(
                f"{store.path} already holds a run: pass --resume to continue it or "
                "--overwrite to start again"
            )
        _compatible(store.manifest(), manifest, store.path)
    elif store.exists():
        for name in (*RUN_TABLES, "selection.json"):
            (store.path / name).unlink(missing_ok=True)
    store.write_manifest(manifest)
    store.write_queries(_queries_frame(ctx))
    if resume:
        metrics = [m.name for m in ctx.evaluation.settings.metrics]  # skipped ones too
        for why in store.repair(ctx.query_ids, metrics, ctx.evaluation.curves):
            log.warning("resume: %s", why)


def _commit(
    store: RunStore,
    results: Iterable[TrialResult],
    query_ids: Sequence[str],
    total: int,
    done: int,
    progress: bool,
    on_trial: Callable[[TrialResult], None] | None,
) -> None:
    """Commit each trial's result to the run directory as it arrives, under the trial bar."""
    bar = tqdm(total=total, initial=done, desc="trials", unit="trial", disable=not progress)
    with progress_display.listen(_Postfix(bar)):
        for result in results:
            store.commit(result, query_ids)
            bar.update(1)
            if on_trial is not None:
                on_trial(result)
    bar.close()


class _Postfix:
    """Shows the activity as the trial bar's postfix — the running trial's label cut short,
    then what it does — new work at once, a moving count at most twice a second."""

    def __init__(self, bar: Any) -> None:
        self.bar, self.shown, self.what = bar, 0.0, [""]

    def __call__(self, now: progress_display.Activity) -> None:
        if now.what == self.what and time.monotonic() - self.shown < 0.5:
            return  # a count moved on: shown twice a second; new work is shown at once
        self.shown, self.what = time.monotonic(), list(now.what)
        if now.what and len(now.what[0]) > 48:
            now = replace(now, what=[now.what[0][:45] + "...", *now.what[1:]])
        self.bar.set_postfix_str(now.line())


def find_trial(run: str | Path | RunStore, wanted: str) -> Trial:
    """A finished trial of a run directory, by id or ``best`` (the best on the run's first
    metric)."""
    store = run if isinstance(run, RunStore) else RunStore(run)
    trials = store.trials()
    ok = trials[trials["status"] == "ok"] if not trials.empty else trials
    if ok.empty:
        raise DataError(f"{store.path}: no finished trial")
    if wanted == "best":
        metric = store.metrics()[0]
        wanted = str(best_index(ok.set_index("trial_id")[metric], metric))
    if wanted not in set(ok["trial_id"]):
        listed = ", ".join(
            f"{t} ({label})" for t, label in zip(ok["trial_id"], ok["label"], strict=True)
        )
        raise DataError(f"{store.path}: no finished trial {wanted!r}; finished: {listed}")
    row = ok[ok["trial_id"] == wanted].iloc[0]
    if "config" in ok.columns and isinstance(row["config"], str):
        return trial_of(json.loads(row["config"]))
    manifest = store.manifest()  # a run from before trials recorded their config
    dataset = {**manifest["config"]["dataset"], "path": manifest["dataset"]["path"]}
    for trial in expand(load_config({**manifest["config"], "dataset": dataset})):
        if trial.id == wanted:
            return trial
    raise DataError(f"{store.path}: trial {wanted!r} is not in the run's config any more")


def dry_run(
    config: str | Path | Mapping[str, Any] | ExperimentConfig,
    limit_queries: int | None = None,
    cache_root: str | Path | None = None,
) -> pd.DataFrame:
    """The trials a config would run, per stage whether its artifact is already cached, the
    work still to do and its estimated seconds and LLM calls on this machine
    (``ragbench.experiment.estimate``: it computes the cheap chunkings and measures each
    model on a sample, all kept in the cache), the endpoints (with the credential each is
    sent) the trial calls, and why a trial cannot rank differently from another one
    (``registry.redundancy``; "-" when it can)."""
    _check_limit(limit_queries)
    cfg = config if isinstance(config, ExperimentConfig) else load_config(config)
    trials = expand(cfg)
    check_models((t.configs for t in trials), cfg.sweep)
    ctx = context(RunSpec(cfg, limit_queries, str(writable_cache_root(cache_root))))
    cached = [
        {s.name: ctx.cache.has(s.area, s.key) for s in ctx.plan(t).stages.values()} for t in trials
    ]
    costs = estimate(ctx, trials)
    rows = []
    for trial, hits, cost in zip(trials, cached, costs, strict=True):
        rows.append(
            {
                "trial_id": trial.id,
                "label": trial.label,
                "stages": len(hits),
                "cached": sum(hits.values()),
                "missing": ", ".join(s for s, hit in hits.items() if not hit) or "-",
                "work": "; ".join(cost.work) or "-",
                "estimated_s": round(cost.seconds, 1),
                "llm_calls": cost.llm_calls,
                "llm_usd": cost.dollars,
                "endpoints": describe_endpoints(trial.configs),
                "redundant": redundancy(trial.configs) or "-",
            }
        )
    return pd.DataFrame(rows)
