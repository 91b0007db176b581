"""Executors: where trials run — this process, a local process pool, or a Dask cluster.

Each yields ``TrialResult``s as trials finish; the caller (the parent process) commits them.
Trials arrive in prefix-sharing order (grouped by chunker and embedder), and the stage cache
is on disk with a lock per artifact, so whichever worker reaches a shared artifact first
builds it and the others reuse it. With Dask the cache root must be a path every worker sees.
"""

from __future__ import annotations

import logging
import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from ragbench.errors import ConfigError
from ragbench.experiment.config import Trial
from ragbench.experiment.store import TrialResult
from ragbench.experiment.trial import RunSpec, run_trial

__all__ = ["execute"]

log = logging.getLogger(__name__)


def _failed(trial: Trial, exc: BaseException) -> TrialResult:
    return TrialResult(
        trial.id,
        trial.label,
        trial.params(),
        trial.effective(),
        status="failed",
        error=f"worker failed: {type(exc).__name__}: {exc}",
    )


def _serial(spec: RunSpec, trials: Sequence[Trial]) -> Iterator[TrialResult]:
    for trial in trials:
        yield run_trial(spec, trial)


def _process(spec: RunSpec, trials: Sequence[Trial], workers: int) -> Iterator[TrialResult]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(run_trial, spec, t): t for t in trials}
        for future in as_completed(futures):
            try:
                yield future.result()
            except Exception as exc:  # a crashed worker fails its trial, not the sweep
                yield _failed(futures[future], exc)


def _dask(
    spec: RunSpec, trials: Sequence[Trial], workers: int, scheduler: str | None
) -> Iterator[TrialResult]:
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError as exc:
        raise ConfigError(
            "executor dask needs the 'dask' extra: pip install ragbench[dask]"
        ) from exc
    cluster = None
    if scheduler is None:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    client = Client(scheduler or cluster)
    try:
        futures = [client.submit(run_trial, spec, t, pure=False) for t in trials]
        trial_of = {f.key: t for f, t in zip(futures, trials, strict=True)}
        for future in dask_completed(futures):
            try:
                yield future.result()
            except Exception as exc:  # a lost worker fails its trial, not the sweep
                yield _failed(trial_of[future.key], exc)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def execute(
    spec: RunSpec,
    trials: Sequence[Trial],
    executor: str = "serial",
    workers: int = 2,
    scheduler: str | None = None,
) -> Iterator[TrialResult]:
    """Run ``trials`` on the chosen executor, yielding results as they finish."""
    if not trials:
        return iter(())
    if executor == "serial":
        return _serial(spec, trials)
    if workers < 1:
        raise ConfigError(f"--workers: expected at least 1, got {workers}")
    if executor == "process":
        return _process(spec, trials, workers)
    if executor == "dask":
        return _dask(spec, trials, workers, scheduler)
    raise ConfigError(f"--executor: unknown executor {executor!r}; allowed: serial, process, dask")
