"""Honest selection: pick the best trial on one set of queries, report it on others.

Picking the best of a sweep on the queries it is reported on inflates the number. Two modes:

* ``select_on`` / ``report_on`` (two splits): the sweep ran on the selection split; the best
  trial per metric (and the baseline) is evaluated once on the report split.
* ``folds`` (k-fold over the sweep split): each query is scored by the trial that is best on
  the other folds; the mean of those held-out scores is the cross-validated estimate.

Both write ``selection.json`` (what was chosen, selected and reported values) and
``selection_per_query.parquet`` (trial_id, query_id, metric, value on the reported queries;
in k-fold mode the trial id ``cv`` holds the held-out scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ragbench.evaluate.metrics import best_index
from ragbench.experiment.config import Trial, find_baseline
from ragbench.experiment.store import RunStore
from ragbench.experiment.trial import RunSpec, context, run_trial

__all__ = ["select"]


def _best(trials: pd.DataFrame, metric: str) -> str:
    ok = trials[trials["status"] == "ok"]
    return str(best_index(ok.set_index("trial_id")[metric], metric))


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
    chosen = {m: _best(table, m) for m in context(spec).metrics}
    baseline = find_baseline(trials, config.baseline).id if config.baseline else None
    report_spec = RunSpec(config, spec.limit_queries, spec.cache_root, config.evaluation.report_on)
    query_ids = context(report_spec).query_ids
    frames, reported = [], {}
    for trial_id in dict.fromkeys([*(t for t in [baseline] if t), *chosen.values()]):
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
                "trial_id": t,
                "label": by_id[t].label,
                "selected": float(selected[m].loc[t]),
                "reported": reported[t][m],
                "baseline_reported": reported[baseline][m] if baseline else None,
            }
            for m, t in chosen.items()
        },
    }
    return summary, pd.concat(frames, ignore_index=True)


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
    for metric in context(spec).metrics:
        values = (
            per_query[per_query["metric"] == metric]
            .pivot(index="query_id", columns="trial_id", values="value")
            .loc[query_ids]
        )
        in_fold = np.array([fold_of[q] for q in values.index])
        held_out = np.zeros(len(values))
        picks = []
        for fold in range(k):
            best = best_index(values[in_fold != fold].mean(), metric)
            picks.append(str(best))
            held_out[in_fold == fold] = values.loc[in_fold == fold, best]
        summary["chosen"][metric] = {
            "per_fold": picks,
            "labels": [labels[p] for p in picks],
            "cross_validated": float(held_out.mean()),
            "best_in_sample": float(values.mean()[best_index(values.mean(), metric)]),
            "baseline": float(values[baseline].mean()) if baseline else None,
        }
        frames.append(_long("cv", list(values.index), {metric: held_out}))
    return summary, pd.concat(frames, ignore_index=True)


def select(spec: RunSpec, trials: Sequence[Trial], store: RunStore) -> dict[str, Any]:
    """Run the configured selection protocol and write its files; returns the summary."""
    if store.trials().empty or not (store.trials()["status"] == "ok").any():
        raise RuntimeError("no finished trial to select from")
    mode = _splits if spec.config.evaluation.report_on is not None else _folds
    summary, frame = mode(spec, trials, store)
    store.write_selection(summary, frame)
    return summary
