"""Executors: process-pool workers exit with their parent; an unreachable Dask scheduler is a
one-line error naming --scheduler, and so is a Dask worker that does not see the stage cache."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import yaml

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.experiment.config import Trial, expand, load_config
from ragbench.experiment.executors import execute
from ragbench.experiment.trial import RunSpec
from tests.paths import DEMO, require

PLUGIN = textwrap.dedent(
    """
    import os, time
    from typing import Literal
    from ragbench.index.embedders import HashingConfig, HashingEmbedder
    from ragbench.registry import components

    class SlowConfig(HashingConfig):
        kind: Literal["slow"] = "slow"

    class SlowEmbedder(HashingEmbedder):
        def embed(self, texts, role="document"):
            marker = os.path.join(os.environ["SLOW_MARKERS"], str(os.getpid()))
            open(marker, "w").close()
            time.sleep(300)

    components("embedder").register(SlowConfig)(SlowEmbedder)
    """
)

PARENT = textwrap.dedent(
    """
    import sys
    import slow_plugin  # registers the kind before the config is read
    from ragbench.experiment.runner import run

    run(sys.argv[1], sys.argv[2], executor="process", workers=2, progress=False)
    """
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_process_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    (tmp_path / "slow_plugin.py").write_text(PLUGIN, encoding="utf-8")
    markers = tmp_path / "markers"
    markers.mkdir()
    config = {
        "name": "slow",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "sweep": {
            "embedder": [{"kind": "slow", "dim": 8}, {"kind": "slow", "dim": 16}],
            "retriever": [{"kind": "dense"}],
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        "SLOW_MARKERS": str(markers),
        "RAGBENCH_CACHE": str(tmp_path / "cache"),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(path), str(tmp_path / "run")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    children: list[psutil.Process] = []
    try:
        deadline = time.time() + 120
        while len(list(markers.iterdir())) < 2 and time.time() < deadline:
            assert parent.poll() is None, "the sweep ended before its workers got busy"
            time.sleep(0.1)
        busy = {int(p.name) for p in markers.iterdir()}
        assert len(busy) == 2, "both workers must be inside a trial"
        children = psutil.Process(parent.pid).children(recursive=True)
        assert busy <= {c.pid for c in children}
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 5
        while not all(_gone(c.pid) for c in children) and time.time() < deadline:
            time.sleep(0.1)
        alive = [c.pid for c in children if not _gone(c.pid)]
        assert not alive, f"workers outlived their parent: {alive}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for child in children:
            if not _gone(child.pid):
                child.kill()


def test_an_unreachable_dask_scheduler_is_one_line_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "name": "dask",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "sweep": {"retriever": [{"kind": "bm25"}]},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    args = ["run", str(path), "--out", str(tmp_path / "run"), "--executor", "dask"]
    started = time.perf_counter()
    code = main([*args, "--scheduler", "tcp://127.0.0.1:9"])
    assert time.perf_counter() - started < 10
    assert code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "ragbench run: --scheduler tcp://127.0.0.1:9: cannot reach the Dask scheduler"
    )


ORPHAN = textwrap.dedent(
    """
    import os, subprocess, sys, time
    watched = '''
    import os, threading, time
    from ragbench.experiment.executors import _watch_parent
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    print("watching", flush=True)
    time.sleep(300)
    '''
    child = subprocess.Popen([sys.executable, "-c", watched], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "watching\\n"
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


def test_without_prctl_the_watchdog_ends_an_orphaned_worker() -> None:
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 5
        while not _gone(child) and time.time() < deadline:
            time.sleep(0.1)
        assert _gone(child), "the watchdog did not end the orphan"
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def _bm25_spec(tmp_path: Path) -> tuple[RunSpec, list[Trial]]:
    """A one-trial BM25 sweep on three demo queries whose cache root each process resolves
    from its own ``RAGBENCH_CACHE`` (an empty ``cache_root``)."""
    config = load_config(
        {
            "name": "shared-cache",
            "dataset": {"path": str(require(DEMO))},
            "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
            "sweep": {"retriever": [{"kind": "bm25"}]},
        }
    )
    return RunSpec(config, limit_queries=3, cache_root=""), expand(config)


def test_dask_workers_that_see_the_stage_cache_run_the_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    spec, trials = _bm25_spec(tmp_path)
    (result,) = execute(spec, trials, "dask", workers=1)
    assert result.status == "ok", result.error
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")] == []
    assert any((tmp_path / "cache").iterdir())  # the worker built its stages there


def test_a_dask_worker_with_another_stage_cache_stops_the_run_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed import Nanny, Scheduler, SpecCluster

    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    elsewhere = {"RAGBENCH_CACHE": str(tmp_path / "elsewhere")}
    workers = {
        "same": {"cls": Nanny, "options": {"nthreads": 1}},
        "other": {"cls": Nanny, "options": {"nthreads": 1, "env": elsewhere}},
    }
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": None}}
    spec, trials = _bm25_spec(tmp_path)
    with (
        SpecCluster(workers=workers, scheduler=scheduler) as cluster,
        pytest.raises(ConfigError) as raised,
    ):
        execute(spec, trials, "dask", scheduler=cluster.scheduler_address)
    message = str(raised.value)
    assert message.startswith("RAGBENCH_CACHE: 1 of 2 Dask workers do not see the stage cache")
    assert str(tmp_path / "elsewhere") in message and "\n" not in message
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == []  # no trial ran
