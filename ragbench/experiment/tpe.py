"""TPE search (optuna) over the trials of a sweep's grid.

Each optuna trial picks, per axis, a component kind and then each option that varies among
the grid's components of that kind (an on-demand axis, such as the embedder, only when a grid
trial agreeing with the picks so far uses it); the grid trial matching the most picks runs
(exact matches first). A pick that lands on a trial already run — in this search or, on resume, in
the run directory — is answered from its recorded value, without running it again.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ragbench.experiment.config import ExperimentConfig, Trial
from ragbench.experiment.store import RunStore, TrialResult
from ragbench.registry import axes

__all__ = ["tpe_trials"]


def _order() -> list[str]:
    """Axes in the order TPE picks them: the order of the trial label (retriever first)."""
    return [a.name for a in sorted(axes(), key=lambda a: a.label)]


def _stage_params(trial: Trial, stage: str) -> dict[str, str]:
    prefix = f"{stage}."
    return {k: json.dumps(v) for k, v in trial.params().items() if k.startswith(prefix)}


def _space(candidates: Sequence[Trial]) -> dict[str, dict[str, dict[str, list[str]]]]:
    """stage → kind → varying option → its values (JSON strings, sorted)."""
    space: dict[str, dict[str, dict[str, set[str]]]] = {}
    for trial in candidates:
        for stage in _order():
            config = trial.get(stage)
            if config is None:
                continue
            options = space.setdefault(stage, {}).setdefault(config.kind, {})
            for key, value in _stage_params(trial, stage).items():
                options.setdefault(key, set()).add(value)
    return {
        stage: {
            kind: {k: sorted(v) for k, v in options.items() if len(v) > 1}
            for kind, options in kinds.items()
        }
        for stage, kinds in space.items()
    }


def _agree(trial: Trial, picks: dict[str, str]) -> bool:
    params = {k: json.dumps(v) for k, v in trial.params().items()}
    return all(params.get(k) == v for k, v in picks.items())


def _suggest(optuna_trial: Any, space: dict[str, Any], candidates: Sequence[Trial]) -> dict:
    picks: dict[str, str] = {}
    for stage in _order():
        if stage not in space:
            continue
        if not any(t.get(stage) is not None and _agree(t, picks) for t in candidates):
            continue  # no trial agreeing with the picks so far uses this axis
        kinds = sorted(space[stage])
        kind = optuna_trial.suggest_categorical(f"{stage}.kind", kinds)
        picks[f"{stage}.kind"] = json.dumps(kind)
        for option, values in space[stage][kind].items():
            picks[option] = optuna_trial.suggest_categorical(f"{stage}.{kind}:{option}", values)
    return picks


def _closest(candidates: Sequence[Trial], picks: dict[str, str]) -> Trial:
    def score(trial: Trial) -> int:
        params = {k: json.dumps(v) for k, v in trial.params().items()}
        return sum(params.get(k) == v for k, v in picks.items())

    return max(candidates, key=score)  # first of the best, so ties follow grid order


def tpe_trials(
    config: ExperimentConfig,
    grid: Sequence[Trial],
    store: RunStore,
    run: Callable[[Sequence[Trial]], Iterable[TrialResult]],
) -> Iterator[TrialResult]:
    """Yield the results of the trials TPE picks from ``grid``, ``search.n`` picks in all
    (picks answered by trials finished before a resume count too)."""
    import optuna

    logging.getLogger("optuna").setLevel(logging.WARNING)
    objective = config.objective()
    known: dict[str, float] = {}
    finished = store.trials()
    if not finished.empty and objective.name in finished.columns:
        ok = finished[finished["status"] == "ok"]
        known = dict(zip(ok["trial_id"], ok[objective.name].astype(float), strict=True))
    space = _space(grid)
    study = optuna.create_study(
        direction="maximize" if objective.higher_is_better else "minimize",
        sampler=optuna.samplers.TPESampler(seed=config.search.seed),
    )
    n = config.search.n or len(grid)
    for _ in range(n):
        if len({t.id for t in grid} - set(known)) == 0:
            break
        asked = study.ask()
        trial = _closest(grid, _suggest(asked, space, grid))
        if trial.id not in known:
            for result in run([trial]):
                yield result
                done = result.status == "ok"
                known[trial.id] = (
                    float(np.mean(result.per_query[objective.name])) if done else math.nan
                )
        value = known[trial.id]
        if not math.isnan(value):
            study.tell(asked, value)
        else:
            study.tell(asked, state=optuna.trial.TrialState.FAIL)
