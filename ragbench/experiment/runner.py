"""The sweep driver: expands a config into trials, runs them through an executor, commits
every finished trial to the run directory before the next one is recorded, resumes, and ends
with the honest selection when the config asks for one.

``run`` is the library entry point (``ragbench.run`` in notebooks, ``ragbench run`` on the
command line); ``dry_run`` lists the trials and which of their stages are cached. Both make
the same checks first (``_check``), and the run records in its manifest what its report must
say of the evidence (trials planned, models trained on evaluated queries, shared queries).
Running one trial is ``ragbench.experiment.trial``'s job. Trials run through an executor
(serial, a local process pool, or Dask); the parent process alone writes the run directory, so
an interrupted sweep loses no finished trial and ``resume=True`` continues where it stopped.
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
from ragbench.evaluate.metrics import best_first
from ragbench.experiment.config import (
    ExperimentConfig,
    Trial,
    expand,
    load_config,
    trains_on_select,
    trial_of,
)
from ragbench.experiment.estimate import estimate
from ragbench.experiment.evaluation import EXCERPT
from ragbench.experiment.executors import execute
from ragbench.experiment.selection import select
from ragbench.experiment.store import RUN_TABLES, RunStore, TrialResult
from ragbench.experiment.tpe import tpe_trials
from ragbench.experiment.trial import Context, RunSpec, context, evaluable
from ragbench.index.cache import writable_cache_root
from ragbench.index.finetune import TrainedOn, query_digest, trained_on
from ragbench.models import check_models, model_fields
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
    """``ConfigError`` unless a resume continues the run of the manifest ``old``: the same
    dataset, queries and evaluation, and a sweep that keeps every trial the run planned (it
    may add some; trials another sweep planned would be reported beside the new ones as if one
    config had planned them all)."""
    changed = _sample_change(old, new)
    if changed and old.get("dataset_fingerprint") != new.get("dataset_fingerprint"):
        raise ConfigError(
            f"{path}: cannot resume, the sample changed since the run started ({changed}); "
            "use a new --out or --overwrite, or the run's sample"
        )
    for key in ("dataset_fingerprint", "queries", "evaluation"):
        before, now = old.get(key), new.get(key)
        if key == "queries" and isinstance(before, Mapping):  # what a run before `of` recorded
            now = {k: v for k, v in new[key].items() if k in before}
        if before != now:
            raise ConfigError(
                f"{path}: cannot resume, the {key.replace('_', ' ')} changed since the run "
                "started (use a new --out or --overwrite)"
            )
    gone = set(old.get("trials", ())) - set(new["trials"])
    if gone:
        added = set(new["trials"]) - set(old["trials"])
        raise ConfigError(
            f"{path}: cannot resume, the sweep changed since the run started ({len(gone)} of "
            f"its {len(old['trials'])} trials are not in this config's sweep, which adds "
            f"{len(added)}); use a new --out or --overwrite"
        )


def _sample_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """How the config's ``dataset.sample`` (or its seed) of the run ``old`` differs from the
    one of ``new`` (``10 documents then, 20 now``), or "" when they are the same."""

    def size(manifest: Mapping[str, Any]) -> str:
        value = manifest.get("config", {}).get("dataset", {}).get("sample")
        if value is None:
            return "every document"
        return f"{value} documents" if isinstance(value, int) else f"{value} of the documents"

    def seed(manifest: Mapping[str, Any]) -> object:
        return manifest.get("config", {}).get("dataset", {}).get("sample_seed", 0)

    if size(old) != size(new):
        return f"{size(old)} then, {size(new)} now"
    if seed(old) != seed(new) and size(new) != "every document":
        return f"seed {seed(old)} then, {seed(new)} now"
    return ""


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
    token = uuid.uuid4().hex if remeasure_latency else None
    checked = _check(cfg, limit_queries, cache_root, token)
    spec, ctx, trials = checked.spec, checked.ctx, checked.trials
    store = RunStore(Path(out) if out is not None else Path("runs") / cfg.name)
    with store.hold():
        manifest = _manifest(checked)
        _open_store(store, manifest, ctx, resume=resume, overwrite=overwrite)
        done = store.finished_ids() if resume else set()
        if cfg.search.strategy == "tpe":
            results = tpe_trials(cfg, trials, store, lambda ts: execute(spec, ts, "serial"))
        else:
            todo = [t for t in trials if t.id not in done]
            results = execute(spec, todo, executor, workers, scheduler)
        started = time.perf_counter()
        _commit(store, results, ctx.query_ids, checked.planned, len(done), progress, on_trial)
        if cfg.evaluation.selects:
            manifest["selection"] = select(spec, trials, store)
        manifest["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        manifest["seconds"] = time.perf_counter() - started
        store.write_manifest(manifest)
        return RunResult(store.path)


@dataclass(frozen=True)
class _Checked:
    """A config that passed every check a run makes before its first trial: its spec, the
    context of its sweep split, its trials (``planned`` of them run: TPE runs ``search.n``)
    and what its report must say of the evidence (``_evidence``)."""

    spec: RunSpec
    ctx: Context
    trials: list[Trial]
    planned: int
    evidence: dict[str, Any]


def _check(
    cfg: ExperimentConfig,
    limit_queries: int | None,
    cache_root: str | Path | None,
    remeasure: str | None = None,
) -> _Checked:
    """Every check a run makes before it starts a trial, in one place: ``run`` and
    ``dry_run`` both call it, so a dry run refuses whatever the run would refuse. The
    telemetry exporter's package, a writable cache root, the trials (the grid, the search,
    the baseline, answer metrics), every model they load, the labeled set and the queries
    evaluated on the sweep split and, with honest selection on two splits, on the report
    split; then the evidence (``_evidence``: no model trained on the queries reported on)."""
    telemetry.setup(cfg.telemetry)  # a missing exporter package fails before anything runs
    root = str(writable_cache_root(cache_root))
    spec = RunSpec(cfg, limit_queries, root, remeasure=remeasure)
    trials = expand(cfg)
    check_models((t.configs for t in trials), cfg.sweep)
    ctx = context(spec)
    reported = ctx
    if cfg.evaluation.report_on is not None:
        reported = context(RunSpec(cfg, limit_queries, root, cfg.evaluation.report_on))
    planned = len(trials)
    if cfg.search.strategy == "tpe":
        planned = min(cfg.search.n or len(trials), len(trials))
    return _Checked(spec, ctx, trials, planned, _evidence(cfg, trials, ctx, reported))


def _evidence(
    cfg: ExperimentConfig, trials: Sequence[Trial], swept: Context, reported: Context
) -> dict[str, Any]:
    """What the report must say of the evidence, found before the run (the manifest's
    ``evidence``): models that trained on queries the sweep selects on (``trained_on``: a
    local model whose ``training.json`` lists them, or a ``finetune`` on ``pairs: select``),
    and the queries the selection split and the report split share by id or text
    (``shared_queries``). A model trained on queries the run reports on is refused: a
    ``ConfigError`` naming it, the split and how many of its queries it trained on."""
    found: dict[str, Any] = {}
    trained = []
    for where, name, record in _trained_models(trials, cfg.sweep):
        for ctx in (reported, swept) if reported is not swept else (reported,):
            labeled = ctx.labeled
            source = f"split {labeled.split!r} of {labeled.name}"
            shared = record.shared(ctx.query_texts, source)
            if shared and ctx is reported:
                via = record.records(ctx.query_texts, source)
                raise ConfigError(
                    f"{where}: model {name!r} was fine-tuned on {shared} of the "
                    f"{len(ctx.query_ids)} queries this run reports on (split {labeled.split!r} "
                    f"of {labeled.name!r}; see {', '.join(map(str, via))}"
                    f"{_through(record, via)}); report on a split it did not train on "
                    "(dataset.split, or evaluation.select_on and report_on)"
                )
            if shared:
                log.warning(
                    "%s: model %r was fine-tuned on %d of the %d queries of split %r the sweep "
                    "selects on: the report will say so",
                    where,
                    name,
                    shared,
                    len(ctx.query_ids),
                    labeled.split,
                )
                trained.append(_trained(where, name, labeled.split, shared, len(ctx.query_ids)))
    if trains_on_select(cfg):  # by design: the report says the table scores training queries
        count = len(swept.query_ids)
        where = "finetune.pairs: select"
        trained.append(_trained(where, None, swept.labeled.split, count, count))
    if trained:
        found["trained_on"] = trained
    if reported is not swept:
        ids, texts = set(swept.query_ids), {query_digest(t) for t in swept.query_texts}
        shared = sum(
            q in ids or query_digest(t) in texts
            for q, t in zip(reported.query_ids, reported.query_texts, strict=True)
        )
        if shared:
            found["shared_queries"] = {
                "select_on": swept.labeled.split,
                "report_on": reported.labeled.split,
                "shared": shared,
                "of": len(reported.query_ids),
            }
            log.warning(
                "%d of the %d queries of split %r (reported on) are on split %r (selected on) "
                "too: the report will say so",
                shared,
                len(reported.query_ids),
                reported.labeled.split,
                swept.labeled.split,
            )
    return found


def _through(record: TrainedOn, via: Sequence[Path]) -> str:
    """``, through the model it was fine-tuned from`` when the queries a model trained on
    come from a model down its ``base`` chain."""
    return ", through the model it was fine-tuned from" if record.record not in via else ""


def _trained(where: str, model: str | None, split: str, shared: int, of: int) -> dict[str, Any]:
    """A ``trained_on`` entry of the evidence: where the model is named (or the ``finetune``
    that trains it), the model (None for one the sweep trains), the split and how many of its
    evaluated queries (``of``) the model trained on (``shared``)."""
    return {"where": where, "model": model, "split": split, "shared": shared, "of": of}


def _trained_models(
    trials: Sequence[Trial], sweep: Mapping[str, Any]
) -> list[tuple[str, str, TrainedOn]]:
    """The models the trials load that were trained by ragbench (a folder with a
    ``training.json``): the key path naming each (in ``sweep`` when it is named there), its
    name and what it trained on."""
    where: dict[str, str] = {}
    for path, name in model_fields(sweep, "sweep"):
        where.setdefault(name, path)
    found: dict[str, tuple[str, TrainedOn | None]] = {}
    for trial in trials:
        for axis, config in trial.configs.items():
            for path, name in model_fields(config.model_dump(mode="json"), axis):
                if name not in found:
                    found[name] = (where.get(name, path), trained_on(name))
    return [(path, name, record) for name, (path, record) in found.items() if record is not None]


def _manifest(checked: _Checked) -> dict[str, Any]:
    """The run's ``manifest.json`` as it starts: config, dataset (and the sample of it swept),
    queries, evaluation, the metrics evaluated (and skipped), trials (and how many of them the
    run plans), what the report must say of the evidence, versions."""
    spec, ctx, trials = checked.spec, checked.ctx, checked.trials
    cfg, labeled, evaluation = spec.config, ctx.labeled, ctx.evaluation
    scored = evaluable(labeled, cfg.evaluation, cfg.dataset.path)  # before --limit-queries
    dataset: dict[str, Any] = {
        "path": cfg.dataset_path(),
        "queries": cfg.queries_path(),
        "name": labeled.name,
        "split": labeled.split,
        "documents": len(labeled.documents),
    }
    if labeled.generated_from is not None:  # the user's folder, not the labels folder
        dataset["source"] = labeled.generated_from
    if ctx.sample is not None:  # the documents swept, of how many, and the seed
        dataset["sample"] = ctx.sample.as_dict()
    return {
        "config": cfg.model_dump(mode="json", exclude={"base_dir"}),
        "dataset": dataset,
        "dataset_fingerprint": labeled.fingerprint,
        "queries": {
            "count": len(ctx.query_ids),
            "of": len(scored.queries),
            "left_out": scored.left_out,
            "limit": spec.limit_queries,
            "key": ctx.queries_key,
        },
        "evaluation": cfg.evaluation.model_dump(mode="json"),
        "metrics": [m.name for m in evaluation.metrics],
        "skipped_metrics": evaluation.skipped,
        "trials": {t.id: t.label for t in trials},
        "planned": checked.planned,
        "evidence": checked.evidence,
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
    """A finished trial of a run directory, by id. (The trial a run recommends is its
    report's to say: ``ragbench.report.pick``.)"""
    store = run if isinstance(run, RunStore) else RunStore(run)
    trials = store.trials()
    ok = trials[trials["status"] == "ok"] if not trials.empty else trials
    if ok.empty:
        raise DataError(f"{store.path}: no finished trial")
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
    (``registry.redundancy``; "-" when it can). It first makes every check ``run`` makes
    (``_check``), so it refuses what the run would refuse."""
    _check_limit(limit_queries)
    cfg = config if isinstance(config, ExperimentConfig) else load_config(config)
    checked = _check(cfg, limit_queries, cache_root)
    ctx, trials = checked.ctx, checked.trials
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
