"""Honest selection: pick the best trial on one set of queries, report it on others.

Picking the best of a sweep on the queries it is reported on inflates the number. Two modes:

* ``select_on`` / ``report_on`` (two splits): the sweep ran on the selection split; the best
  trial per metric (and the baseline) is evaluated once on the report split.
* ``folds`` (k-fold over the sweep split): each query is scored by the trial that is best on
  the other folds; the mean of those held-out scores is the cross-validated estimate.

A tie is not a pick. Trials tied for best on the selection queries (``best_indices``) are all
recorded; with two splits each of them is evaluated on the report split, and in k-fold mode
a fold whose selection ties scores each of its queries by the mean of the tied trials' values
(what a pick at random among them gives on average).

Both write ``selection.json`` and ``selection_per_query.parquet`` (trial_id, query_id, metric,
value on the reported queries; in k-fold mode the trial id ``cv`` holds the held-out scores).
``selection.json`` per metric: with two splits ``trial_id``, ``label``, ``selected`` and
``reported`` (the first trial tied for best, in run order), ``tied`` and ``tied_labels`` (every
trial tied for best, that one first; one entry without a tie) and ``tied_reported`` (their
values on the report split); in k-fold mode ``per_fold`` and ``labels`` (each fold's first
trial tied for best), ``per_fold_tied`` (every trial tied per fold), ``cross_validated``,
``best_in_sample``, ``best_in_sample_tied`` and ``baseline``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ragbench.evaluate.metric_table import Metric, best_indices
from ragbench.experiment.config import Trial, find_baseline
from ragbench.experiment.store import RunStore
from ragbench.experiment.trial import RunSpec, context, run_trial

__all__ = ["select"]


def _best(trials: pd.DataFrame, metric: Metric) -> list[str]:
    """The finished trials tied for best on ``metric``, in run order."""
    ok = trials[trials["status"] == "ok"]
    return [str(t) for t in best_indices(ok.set_index("trial_id")[metric.name], metric)]


def _long(trial_id: str, query_ids: Sequence[str], values: dict[str, np.ndarray]) -> pd.DataFrame:
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "trial_id": trial_id,
                    "query_id": list(query_ids),
                    "metric": metric,
                    "value": np.asarray(v, dtype=np.float64),
                }
            )
            for metric, v in values.items()
        ],
        ignore_index=True,
    )


def _splits(spec: RunSpec, trials: Sequence[Trial], store: RunStore) -> tuple[dict, pd.DataFrame]:
    config = spec.config
    table = store.trials()
    by_id = {t.id: t for t in trials}
    tied = {m.name: _best(table, m) for m in context(spec).evaluation.metrics}
    baseline = find_baseline(trials, config.baseline).id if config.baseline else None
    report_spec = RunSpec(config, spec.limit_queries, spec.cache_root, config.evaluation.report_on)
    query_ids = context(report_spec).query_ids
    frames, reported = [], {}
    everyone = [*(t for t in [baseline] if t), *(t for ts in tied.values() for t in ts)]
    for trial_id in dict.fromkeys(everyone):
        result = run_trial(report_spec, by_id[trial_id])
        if result.status != "ok":
            raise RuntimeError(
                f"trial {result.label} failed on split "
                f"{config.evaluation.report_on!r}: {result.error}"
            )
        reported[trial_id] = {m: float(np.mean(v)) for m, v in result.per_query.items()}
        frames.append(_long(trial_id, query_ids, result.per_query))
    selected = table.set_index("trial_id")
    summary = {
        "mode": "splits",
        "select_on": config.sweep_split,
        "report_on": config.evaluation.report_on,
        "baseline": baseline,
        "report_queries": len(query_ids),
        "chosen": {
            m: {
                "trial_id": ts[0],
                "label": by_id[ts[0]].label,
                "selected": float(selected[m].loc[ts[0]]),
                "reported": reported[ts[0]][m],
                "baseline_reported": reported[baseline][m] if baseline else None,
                "tied": ts,
                "tied_labels": [by_id[t].label for t in ts],
                "tied_reported": [reported[t][m] for t in ts],
            }
            for m, ts in tied.items()
        },
    }
    return summary, pd.concat(frames, ignore_index=True)


def _fold_metric(
    values: pd.DataFrame, in_fold: np.ndarray, k: int, metric: Metric
) -> tuple[list[list[str]], np.ndarray]:
    """Per fold the trials tied for best on the other folds, and each query's held-out score:
    the value of its fold's pick, the mean over the tied trials when the pick ties."""
    held_out = np.zeros(len(values))
    picks = []
    for fold in range(k):
        best = [str(t) for t in best_indices(values[in_fold != fold].mean(), metric)]
        picks.append(best)
        held_out[in_fold == fold] = values.loc[in_fold == fold, best].mean(axis=1)
    return picks, held_out


def _folds(spec: RunSpec, trials: Sequence[Trial], store: RunStore) -> tuple[dict, pd.DataFrame]:
    config = spec.config
    evaluation = config.evaluation
    per_query = store.per_query()
    ok = store.trials()
    ok = ok[ok["status"] == "ok"]
    per_query = per_query[per_query["trial_id"].isin(ok["trial_id"])]
    query_ids = context(spec).query_ids
    k = evaluation.folds
    assert k is not None  # select() runs _folds only when the config asks for folds
    folds = np.random.default_rng(evaluation.fold_seed).permutation(len(query_ids))
    folds %= k
    fold_of = dict(zip(query_ids, folds, strict=True))
    baseline = find_baseline(trials, config.baseline).id if config.baseline else None
    labels = {t.id: t.label for t in trials}
    summary: dict[str, Any] = {
        "mode": "folds",
        "folds": evaluation.folds,
        "split": config.sweep_split,
        "baseline": baseline,
        "report_queries": len(query_ids),
        "chosen": {},
    }
    frames = []
    for metric in context(spec).evaluation.metrics:
        values = (
            per_query[per_query["metric"] == metric.name]
            .pivot(index="query_id", columns="trial_id", values="value")
            .loc[query_ids]
        )
        in_fold = np.array([fold_of[q] for q in values.index])
        picks, held_out = _fold_metric(values, in_fold, k, metric)
        in_sample = [str(t) for t in best_indices(values.mean(), metric)]
        summary["chosen"][metric.name] = {
            "per_fold": [p[0] for p in picks],
            "labels": [labels[p[0]] for p in picks],
            "per_fold_tied": picks,
            "cross_validated": float(held_out.mean()),
            "best_in_sample": float(values[in_sample[0]].mean()),
            "best_in_sample_tied": in_sample,
            "baseline": float(values[baseline].mean()) if baseline else None,
        }
        frames.append(_long("cv", list(values.index), {metric.name: held_out}))
    return summary, pd.concat(frames, ignore_index=True)


def select(spec: RunSpec, trials: Sequence[Trial], store: RunStore) -> dict[str, Any]:
    """Run the configured selection protocol and write its files; returns the summary."""
    if store.trials().empty or not (store.trials()["status"] == "ok").any():
        raise RuntimeError("no finished trial to select from")
    mode = _splits if spec.config.evaluation.report_on is not None else _folds
    summary, frame = mode(spec, trials, store)
    store.write_selection(summary, frame)
    return summary
