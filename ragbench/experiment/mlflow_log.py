"""A run directory logged to MLflow: one parent run per sweep, one nested child run per trial.

``log_run(run_dir, tracking_uri)`` reads what ``ragbench run`` wrote, so a run can be logged
while it grows, after the fact, or again after a resume (``ragbench run CONFIG --mlflow [URI]``
and ``ragbench report RUN --mlflow [URI]`` call it). The MLflow experiment is the config's
``name``. The parent run is found again by its run directory and the sweep's identity — the
dataset fingerprint, the queries and the evaluation, which a resume must keep — so a resumed
run adds its new trials under the same parent, and a run started again on other data gets a new
one. Children are tagged with their trial id: a trial already logged with the same status is
skipped, one whose status changed (it failed, and succeeded on resume) replaces its old child.

A child holds the trial's flattened config as params (``retriever.k1``, as ``param.*`` columns
of ``trials.parquet``), every number of its ``trials.parquet`` row as a metric (mean metrics,
latency p50/p95 per stage, tokens and cost, build time; ``@`` becomes ``_at_``: ``ndcg_at_10``)
and its id, label and status as tags. The parent holds the evaluation settings as params, the
trial counts and the best value of each metric as metrics, and ``manifest.json`` and the report
(``report.html``, ``report.md``, ``plots/``) as artifacts.

MLflow is an optional extra (``pip install ragbench[mlflow]``), imported on first use.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ragbench.errors import ConfigError, RagbenchError
from ragbench.evaluate.metrics import best_index
from ragbench.experiment.store import RunStore

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

__all__ = ["DEFAULT_URI", "MlflowRun", "log_run", "require_mlflow"]

DEFAULT_URI = "sqlite:///mlruns.db"
_INSTALL = "pip install ragbench[mlflow]"
_SWEEP = "ragbench.sweep"
_TRIAL = "ragbench.trial_id"
_STATUS = "ragbench.status"
_PARENT = "mlflow.parentRunId"
_BATCH = 100  # params and tags per log_batch call (MLflow's limit)
_VALUE_CHARS = 6000  # MLflow's longest param value
_NOT_IN_NAMES = re.compile(r"[^\w./\- :]")


@dataclass(frozen=True)
class MlflowRun:
    """What ``log_run`` did: the experiment and parent run it logged to, the trials it logged
    now and those whose child was already there."""

    tracking_uri: str
    experiment_id: str
    run_id: str
    logged: tuple[str, ...]
    skipped: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"run {self.run_id} in experiment {self.experiment_id} at {self.tracking_uri} "
            f"({len(self.logged)} trials logged, {len(self.skipped)} already there)"
        )


def require_mlflow(flag: str = "--mlflow") -> None:
    """``ConfigError`` naming ``flag`` unless mlflow can be imported (checked before a sweep
    starts, so a missing extra does not wait for the sweep to end)."""
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError(f"{flag}: needs the 'mlflow' extra: {_INSTALL}")


def log_run(
    run_dir: str | Path, tracking_uri: str = DEFAULT_URI, report_dir: str | Path | None = None
) -> MlflowRun:
    """Log the run directory ``run_dir`` to the MLflow tracking server or database at
    ``tracking_uri`` (see the module docstring); ``report_dir`` is where its report was
    written (default: the run directory). MLflow errors are one-line ``RagbenchError``s."""
    require_mlflow("mlflow")
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    store = RunStore(run_dir)
    manifest = store.manifest()
    trials = store.trials()
    try:
        client = MlflowClient(tracking_uri)
        experiment_id = _experiment(client, str(manifest["config"]["name"]))
        parent = _parent(client, experiment_id, store, manifest)
        present = _children(client, experiment_id, parent)
        logged, skipped = [], []
        for row in trials.to_dict("records"):
            trial_id, status = str(row["trial_id"]), str(row["status"])
            old = present.get(trial_id)
            if old is not None and old[1] == status:
                skipped.append(trial_id)
                continue
            if old is not None:
                client.delete_run(old[0])
            _log_trial(client, experiment_id, parent, row)
            logged.append(trial_id)
        _log_sweep(client, parent, store, trials, Path(report_dir or store.path))
    except MlflowException as exc:
        reason = " ".join(str(exc.message).split())
        raise RagbenchError(f"mlflow {tracking_uri}: {reason}") from None
    return MlflowRun(tracking_uri, experiment_id, parent, tuple(logged), tuple(skipped))


def _experiment(client: MlflowClient, name: str) -> str:
    """The id of the MLflow experiment ``name`` (created when missing)."""
    found = client.get_experiment_by_name(name)
    return found.experiment_id if found is not None else client.create_experiment(name)


def _identity(store: RunStore, manifest: Mapping[str, Any]) -> str:
    """The sweep's identity: its run directory and what a resume must keep."""
    kept = [manifest.get(k) for k in ("dataset_fingerprint", "queries", "evaluation")]
    payload = json.dumps([str(store.path.resolve()), *kept], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _parent(
    client: MlflowClient, experiment_id: str, store: RunStore, manifest: Mapping[str, Any]
) -> str:
    """The id of the sweep's parent run: found by its identity, or created with the sweep's
    params (only those the identity fixes, since a param cannot change once logged)."""
    identity = _identity(store, manifest)
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.`{_SWEEP}` = '{identity}'", max_results=1
    )
    if found:
        return str(found[0].info.run_id)
    dataset = manifest.get("dataset", {})
    tags = {
        _SWEEP: identity,
        "ragbench.run_dir": str(store.path.resolve()),
        "ragbench.dataset": str(dataset.get("path")),
        "ragbench.git_commit": str(manifest.get("git_commit")),
    }
    run = client.create_run(experiment_id, tags=tags, run_name=store.path.name)
    params = {
        "dataset.name": dataset.get("name"),
        "dataset.split": dataset.get("split"),
        "dataset.documents": dataset.get("documents"),
        "queries.count": manifest.get("queries", {}).get("count"),
        **_flat("evaluation", manifest.get("evaluation") or {}),
    }
    _log_batch(client, run.info.run_id, params=params)
    return str(run.info.run_id)


def _children(client: MlflowClient, experiment_id: str, parent: str) -> dict[str, tuple[str, str]]:
    """Trial id → (child run id, status) of the parent's children."""
    found: dict[str, tuple[str, str]] = {}
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=f"tags.`{_PARENT}` = '{parent}'", page_token=token
        )
        for run in page:
            tags = run.data.tags
            if _TRIAL in tags:
                found[tags[_TRIAL]] = (run.info.run_id, tags.get(_STATUS, ""))
        token = page.token
        if not token:
            return found


def _log_trial(
    client: MlflowClient, experiment_id: str, parent: str, row: Mapping[Any, Any]
) -> None:
    """One child run: the trial's config as params, its numbers as metrics, its tags."""
    tags = {
        _PARENT: parent,
        _TRIAL: row["trial_id"],
        _STATUS: row["status"],
        "ragbench.label": row["label"],
    }
    if row.get("error"):
        tags["ragbench.error"] = row["error"]
    run = client.create_run(experiment_id, tags=tags, run_name=str(row["label"]))
    params = _flat("", json.loads(row["config"])) if isinstance(row.get("config"), str) else {}
    metrics = {
        _metric_name(str(column)): number
        for column, value in row.items()
        if not str(column).startswith("param.") and (number := _number(value)) is not None
    }
    _log_batch(client, run.info.run_id, params=params, metrics=metrics)
    client.set_terminated(run.info.run_id, "FINISHED" if row["status"] == "ok" else "FAILED")


def _log_sweep(
    client: MlflowClient, parent: str, store: RunStore, trials: pd.DataFrame, report: Path
) -> None:
    """The parent's metrics (trial counts, best value per metric; step = trials finished) and
    artifacts (manifest, report)."""
    ok = trials[trials["status"] == "ok"] if not trials.empty else trials
    metrics: dict[str, float] = {
        "trials.ok": len(ok),
        "trials.failed": len(trials) - len(ok),
    }
    for metric in store.metrics():
        values = ok[metric].dropna() if metric in ok.columns else pd.Series(dtype=float)
        if not values.empty:
            metrics[f"best.{_metric_name(metric)}"] = float(values.loc[best_index(values, metric)])
    _log_batch(client, parent, metrics=metrics, step=len(trials))
    client.log_artifact(parent, str(store.manifest_path))
    for name in ("report.html", "report.md"):
        if (report / name).is_file():
            client.log_artifact(parent, str(report / name))
    if (report / "plots").is_dir():
        client.log_artifacts(parent, str(report / "plots"), "plots")
    client.set_terminated(parent, "FINISHED")


def _log_batch(
    client: MlflowClient,
    run_id: str,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    step: int = 0,
) -> None:
    """Params (as text, None left out) and metrics in batches within MLflow's limits."""
    from mlflow.entities import Metric, Param

    now = int(time.time() * 1000)
    as_params = [
        Param(name, str(value)[:_VALUE_CHARS])
        for name, value in (params or {}).items()
        if value is not None
    ]
    as_metrics = [Metric(name, value, now, step) for name, value in (metrics or {}).items()]
    for chunk in _chunks(as_params):
        client.log_batch(run_id, params=chunk)
    for metric_chunk in _chunks(as_metrics):
        client.log_batch(run_id, metrics=metric_chunk)


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


def _flat(prefix: str, value: Any) -> dict[str, Any]:
    """A config flattened as ``Trial.params`` flattens it (``retriever.k1``; lists as JSON)."""
    if isinstance(value, dict):
        found: dict[str, Any] = {}
        for key, inner in value.items():
            found |= _flat(f"{prefix}.{key}" if prefix else str(key), inner)
        return found
    return {prefix: json.dumps(value) if isinstance(value, list) else value}


def _number(value: Any) -> float | None:
    """``value`` as a finite float when it is a number (not a flag), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _metric_name(column: str) -> str:
    """A column name MLflow accepts as a metric name (``ndcg@10`` → ``ndcg_at_10``)."""
    return _NOT_IN_NAMES.sub("_", column.replace("@", "_at_"))
