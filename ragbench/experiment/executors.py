"""Executors: where trials run — this process, a local process pool, or a Dask cluster.

Each yields ``TrialResult``s as trials finish; the caller (the parent process) commits them.
Trials arrive in prefix-sharing order (grouped by chunker and embedder), and the stage cache
is on disk with a lock per artifact, so whichever worker reaches a shared artifact first
builds it and the others reuse it. With Dask the cache root must be a path every worker sees:
before any trial runs, the parent writes a marker file into it and every connected worker must
read that marker where it will look for the cache, or the run stops with a ``ConfigError``.

Process-pool workers end with their parent: a killed sweep leaves no worker running.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ragbench.errors import ConfigError
from ragbench.experiment.config import Trial
from ragbench.experiment.store import TrialResult
from ragbench.experiment.trial import RunSpec, run_trial
from ragbench.index.cache import default_cache_root

__all__ = ["check_workers", "dask_client", "execute"]

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


_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PARENT_POLL_SECONDS = 1.0
_CONNECT_SECONDS = 5  # to a Dask scheduler


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: end this worker when ``parent`` (the sweep) dies.

    On Linux the kernel sends SIGTERM when the parent exits (``PR_SET_PDEATHSIG``); everywhere,
    a daemon thread also polls the parent's pid, for systems without it.
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        except (OSError, AttributeError) as exc:  # no prctl: the thread below still watches
            log.debug("prctl(PR_SET_PDEATHSIG) unavailable: %s", exc)
    if os.getppid() != parent:  # the parent died before the kernel was told
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="watch-parent", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(1)


def _process(spec: RunSpec, trials: Sequence[Trial], workers: int) -> Iterator[TrialResult]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = {pool.submit(run_trial, spec, t): t for t in trials}
        for future in as_completed(futures):
            try:
                yield future.result()
            except Exception as exc:  # a crashed worker fails its trial, not the sweep
                yield _failed(futures[future], exc)


def dask_client(workers: int, scheduler: str | None) -> tuple[Any, Any]:
    """A Dask client of the scheduler at ``scheduler``, or of a new local cluster of
    ``workers`` processes (returned too, for the caller to close; None otherwise); an
    unreachable scheduler or a missing package is a ``ConfigError``."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:
        raise ConfigError(
            "executor dask needs the 'dask' extra: pip install ragbench[dask]"
        ) from exc
    if scheduler is None:
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        return Client(cluster), cluster
    try:
        _knock(scheduler)
        return Client(scheduler, timeout=_CONNECT_SECONDS), None
    except (OSError, TimeoutError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
        raise ConfigError(
            f"--scheduler {scheduler}: cannot reach the Dask scheduler ({reason})"
        ) from None


def _dask(
    spec: RunSpec, trials: Sequence[Trial], workers: int, scheduler: str | None
) -> Iterator[TrialResult]:
    """Connect to the scheduler (or start a local cluster) now, so that an unreachable one is a
    ``ConfigError`` before anything runs; the trials run as the result is iterated."""
    client, cluster = dask_client(workers, scheduler)
    try:
        _check_shared_cache(client, spec.cache_root)
    except BaseException:
        client.close()
        if cluster is not None:
            cluster.close()
        raise
    return _dask_results(client, cluster, spec, trials)


def _cache_root(cache_root: str) -> Path:
    """The stage cache root a process uses for a spec's ``cache_root`` (as ``trial.Context``
    resolves it: the spec's path, else this process's ``RAGBENCH_CACHE`` or its default)."""
    return Path(cache_root or default_cache_root())


def _check_shared_cache(client: Any, cache_root: str) -> None:
    """Raise ``ConfigError`` naming ``RAGBENCH_CACHE`` unless every worker connected to
    ``client`` reads a marker this process writes into the cache root, where it will look."""
    root = _cache_root(cache_root)
    token = uuid.uuid4().hex
    marker = root / f".shared-check-{token}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        marker.write_text(token, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"RAGBENCH_CACHE: cannot write to the stage cache {root} ({exc})"
        ) from None
    try:
        seen: dict[str, tuple[str, bool]] = client.run(_sees_marker, cache_root, marker.name, token)
    finally:
        marker.unlink(missing_ok=True)
    if not seen:
        log.warning("no Dask worker is connected yet: nobody checked the stage cache %s", root)
    blind = sorted((address, where) for address, (where, ok) in seen.items() if not ok)
    if blind:
        address, where = blind[0]
        raise ConfigError(
            f"RAGBENCH_CACHE: {len(blind)} of {len(seen)} Dask workers do not see the stage "
            f"cache {os.path.abspath(root)} (worker {address} looks in {where}); put it on "
            "storage every worker mounts at the same path"
        )


def _sees_marker(cache_root: str, name: str, token: str) -> tuple[str, bool]:
    """On a worker: the cache root it would use, and whether it reads the marker there."""
    root = _cache_root(cache_root)
    try:
        found = (root / name).read_text(encoding="utf-8") == token
    except OSError:
        found = False
    return os.path.abspath(root), found


def _knock(address: str) -> None:
    """Raise ``OSError`` at once when nothing accepts a TCP connection at a tcp/tls scheduler
    address (Dask itself would retry until its timeout)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme in {"tcp", "tls"}:
        socket.create_connection(parse_host_port(location), _CONNECT_SECONDS).close()


def _dask_results(
    client: Any, cluster: Any, spec: RunSpec, trials: Sequence[Trial]
) -> Iterator[TrialResult]:
    from distributed import as_completed as dask_completed

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


def check_workers(workers: int) -> None:
    """``ConfigError`` naming ``--workers`` unless it is at least 1 (a pool or cluster of no
    worker would wait for ever)."""
    if workers < 1:
        raise ConfigError(f"--workers: expected at least 1, got {workers}")


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
    check_workers(workers)
    if executor == "process":
        return _process(spec, trials, workers)
    if executor == "dask":
        return _dask(spec, trials, workers, scheduler)
    raise ConfigError(f"--executor: unknown executor {executor!r}; allowed: serial, process, dask")
