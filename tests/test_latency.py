"""The latency pass: a fixed sample of queries timed alone after the quality pass, the fastest
repeat per query and stage less its wait for a CPU, CPU time, contention, cached per machine
and measured again on request."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pytest
from pydantic import Field

from ragbench.data import load_dataset
from ragbench.experiment.latency import measure
from ragbench.experiment.runner import run
from ragbench.registry import components
from ragbench.retrieve.artifacts import QUERIES, Queries
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import (
    Env,
    PlanBuilder,
    StepConfig,
    compile_plan,
    component_key,
)
from ragbench.retrieve.timed import cpu_wait
from tests.paths import DEMO, require

SLOW = 0.02


class SlowFirstConfig(StepConfig):
    """A query step for this test: every other time it sees a query it sleeps 5x longer."""

    kind: Literal["slow_first"] = "slow_first"
    seen: int = Field(0, ge=0)

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        calls: dict[str, int] = {}

        def compute(env: Env, queries: Sequence[str]) -> Queries:
            texts = list(queries)
            seconds = []
            for text in texts:
                calls[text] = calls.get(text, 0) + 1
                started = time.perf_counter()
                time.sleep(SLOW * (5 if calls[text] % 2 else 1))
                seconds.append(time.perf_counter() - started)
            return Queries(texts, np.arange(len(texts)), np.array(seconds))

        g.queries = g.add(
            "slow", "query", (g.queries,), (component_key(self),), compute, QUERIES, latency="query"
        )


components("query").register_config(SlowFirstConfig)

SPIN = 0.03


class SpinConfig(StepConfig):
    """A query step for this test: SPIN seconds of this thread's CPU per query."""

    kind: Literal["spin"] = "spin"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        def compute(env: Env, queries: Sequence[str]) -> Queries:
            texts = list(queries)
            seconds = []
            for _ in texts:
                started, cpu = time.perf_counter(), time.thread_time()
                while time.thread_time() - cpu < SPIN:
                    pass
                seconds.append(time.perf_counter() - started)
            return Queries(texts, np.arange(len(texts)), np.array(seconds))

        g.queries = g.add(
            "spin", "query", (g.queries,), (component_key(self),), compute, QUERIES, latency="query"
        )


components("query").register_config(SpinConfig)


def _config(**latency: object) -> dict:
    return {
        "name": "latency",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": 6, "repeats": 2, **latency},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 500}],
            "embedder": [{"kind": "hashing", "dim": 128}],
            "retriever": [{"kind": "bm25"}, {"kind": "hybrid"}],
        },
    }


def test_each_trial_gets_a_sampled_latency_pass_cached_until_asked_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run(_config(), tmp_path / "a", cache_root=cache, progress=False).trials
    assert (first["latency.queries"] == 6).all() and (first["latency.repeats"] == 2).all()
    hybrid = first[first["label"].str.startswith("hybrid")].iloc[0]
    stages = ["embed_query", "dense", "bm25", "fusion"]
    assert all(hybrid[f"latency.{s}.p50_ms"] > 0 for s in stages)
    assert hybrid["latency.total.p50_ms"] >= max(hybrid[f"latency.{s}.p50_ms"] for s in stages)
    assert hybrid["latency.cpu.p50_ms"] > 0 and hybrid["latency.machine"]
    again = run(_config(), tmp_path / "b", cache_root=cache, progress=False).trials
    assert list(again["latency.measured_at"]) == list(first["latency.measured_at"])  # cached
    time.sleep(1.1)
    fresh = run(
        _config(), tmp_path / "c", cache_root=cache, progress=False, remeasure_latency=True
    ).trials
    assert (fresh["latency.measured_at"] > first["latency.measured_at"]).all()
    assert list(fresh["ndcg@10"]) == list(first["ndcg@10"])  # nothing else recomputed
    other = run(_config(queries=3), tmp_path / "d", cache_root=cache, progress=False).trials
    assert (other["latency.queries"] == 3).all()  # another sample is another measurement


def test_the_fastest_repeat_counts(tmp_path: Path) -> None:
    config = _config(repeats=3)
    config["sweep"]["query"] = [{"kind": "slow_first"}]
    config["sweep"]["retriever"] = [{"kind": "bm25"}]
    trials = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False).trials
    # repeats alternate between 5 x SLOW and SLOW: the fastest one counts (a mean would be 3x)
    assert SLOW * 1000 <= trials["latency.query.p50_ms"].iloc[0] < 2 * SLOW * 1000


COUNTED: dict[str, int] = {}


class CountedConfig(StepConfig):
    """A query step for this test: counts the queries it transforms."""

    kind: Literal["counted"] = "counted"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        def compute(env: Env, queries: Sequence[str]) -> Queries:
            texts = list(queries)
            COUNTED["queries"] = COUNTED.get("queries", 0) + len(texts)
            return Queries(texts, np.arange(len(texts)), np.full(len(texts), 1e-3))

        g.queries = g.add(
            "counted",
            "query",
            (g.queries,),
            (component_key(self),),
            compute,
            QUERIES,
            latency="query",
        )


components("query").register_config(CountedConfig)


def test_a_stage_two_trials_share_is_measured_once_per_query() -> None:
    labeled = load_dataset(str(require(DEMO)))
    env = Env(corpus=labeled.documents)
    texts = [q.text for q in labeled.queries[:4]]
    ids = [q.id for q in labeled.queries[:4]]
    shared: dict = {}
    reports = []
    for k1 in (0.9, 1.5):  # the same query stage, two BM25 searches
        configs = {
            "chunker": components("chunker").parse({"kind": "none"}),
            "query": components("query").parse({"kind": "counted"}),
            "retriever": components("retriever").parse({"kind": "bm25", "k1": k1}),
        }
        plan = compile_plan(configs, 5)
        built = Execution(plan, env)
        index = {s.name: built[s.name] for s in plan.index_stages()}
        before = COUNTED.get("queries", 0)
        # no retries: a repeat the scheduler interrupts would run the query again
        reports.append(measure(plan, env, index, ids, texts, repeats=2, retries=0, shared=shared))
        COUNTED[f"ran {k1}"] = COUNTED.get("queries", 0) - before
    assert COUNTED["ran 0.9"] == 1 + 2 * len(texts)  # warm-up, then every repeat
    assert COUNTED["ran 1.5"] == 0  # measured for the first trial: reused
    first, second = reports
    assert second.stages["query"] == first.stages["query"]
    assert all(s > 0 for s in second.stages["bm25"])  # the second trial's own search ran
    assert second.stages["bm25"] != first.stages["bm25"]
    assert len({(key, qid) for key, qid in shared}) == 3 * len(texts)  # query + 2 searches


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_a_busy_machine_is_recorded_and_the_wait_for_a_cpu_taken_out() -> None:
    configs = {
        "chunker": components("chunker").parse({"kind": "none"}),
        "query": components("query").parse({"kind": "spin"}),
        "retriever": components("retriever").parse({"kind": "bm25"}),
    }
    plan = compile_plan(configs, 5)
    labeled = load_dataset(str(require(DEMO)))
    env = Env(corpus=labeled.documents)
    built = Execution(plan, env)
    index = {s.name: built[s.name] for s in plan.index_stages()}
    texts = [q.text for q in labeled.queries[:8]]
    ids = [q.id for q in labeled.queries[:8]]
    burners = [multiprocessing.Process(target=_burn, args=(30.0,)) for _ in range(3)]
    for p in burners:
        p.start()
    try:  # no retries: the repeats the burners interrupt are kept, and corrected
        report = measure(plan, env, index, ids, texts, repeats=2, retries=0)
    finally:
        for p in burners:
            p.terminate()
    assert report.contention is not None and report.contention > 0.3 and report.contended
    assert len(report.total) == 8 and all(t > 0 for t in report.total)
    # 3 burners on this machine's cores: 30 ms of CPU cannot run without being preempted
    assert report.interrupted > 0 and 0 < report.waited < 1
    # what is left is the work itself: the stage's own wait was taken out, and no more
    assert min(report.stages["query"]) >= 0.9 * SPIN


@pytest.mark.parametrize("bad", [{"queries": -1}, {"repeats": 0}, {"threads": 0}])
def test_latency_settings_are_checked(bad: dict, tmp_path: Path) -> None:
    from ragbench.errors import ConfigError
    from ragbench.experiment.config import load_config

    with pytest.raises(ConfigError, match=f"latency.{next(iter(bad))}"):
        load_config(_config(**bad))


@pytest.mark.skipif(
    not Path("/proc/thread-self/schedstat").exists(), reason="needs Linux schedstat"
)
def test_cpu_wait_counts_per_thread_and_closes_what_a_finished_thread_opened() -> None:
    cpu_wait()
    before = len(os.listdir("/proc/self/fd"))
    seen: list[tuple[float, float]] = []

    def work() -> None:
        first = cpu_wait()
        sum(range(200_000))
        seen.append((first, cpu_wait()))

    for _ in range(20):
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert len(seen) == 20
    assert all(0 <= first <= last for first, last in seen)
    assert len(os.listdir("/proc/self/fd")) == before


def _getting_started(root: Path) -> Path:
    """The demo set cut to its four getting-started documents and the queries they answer."""
    demo = require(DEMO)
    section = "getting-started"
    shutil.copytree(demo / "corpus" / section, root / "corpus" / section)
    kept = []
    for line in (demo / "queries.jsonl").read_text("utf-8").splitlines():
        query = json.loads(line)
        cited = [e["doc_id"] for e in query["evidence"]] + list(query.get("qrels", {}))
        if all(doc.startswith(f"{section}/") for doc in cited):
            kept.append(line)
    (root / "queries.jsonl").write_text("\n".join(kept) + "\n", "utf-8")
    return root


def _pools(threads: str) -> dict[str, str]:
    """``latency.threads`` (``torch=1, blas=1``) as a mapping."""
    return dict(pool.split("=", 1) for pool in threads.split(", "))


def test_every_trial_runs_pinned_even_when_its_pass_loads_the_model(tmp_path: Path) -> None:
    """The reported case: ``ragbench run --remeasure-latency`` in a fresh process over a warm
    stage cache, so the dense trial's latency pass is what loads torch and MiniLM."""
    config = {
        "name": "pinned",
        "dataset": {"path": str(_getting_started(tmp_path / "data"))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": 4, "repeats": 3, "threads": 1},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 1000, "overlap": 0}],
            "embedder": [{"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}],
            "retriever": [{"kind": "dense"}, {"kind": "bm25"}],
        },
    }
    cache = tmp_path / "cache"
    cold = {**config, "latency": {"queries": 0}}  # the quality pass fills the stage cache
    first = run(cold, tmp_path / "cold", cache_root=cache, progress=False).trials
    (tmp_path / "pinned.yaml").write_text(json.dumps(config), "utf-8")
    argv = ["run", str(tmp_path / "pinned.yaml"), "--out", str(tmp_path / "warm")]
    env = {**os.environ, "RAGBENCH_CACHE": str(cache), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", *argv, "--remeasure-latency", "--no-report"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    trials = pd.read_parquet(tmp_path / "warm" / "trials.parquet").set_index("label")
    assert list(trials.index.str.split("|").str[0]) == list(first["label"].str.split("|").str[0])
    assert (trials["ndcg@10"].to_numpy() == first["ndcg@10"].to_numpy()).all()
    dense, bm25 = trials.iloc[0], trials.iloc[1]
    assert str(dense.name).startswith("dense") and str(bm25.name).startswith("bm25")
    for trial in (dense, bm25):
        assert _pools(trial["latency.threads"])["blas"] == "1"
    assert _pools(dense["latency.threads"])["torch"] == "1"
    # one thread: CPU time per query is its wall time, not twice it (two torch threads)
    assert dense["latency.cpu.p50_ms"] <= 1.3 * dense["latency.total.p50_ms"]


def test_onnx_runs_a_session_of_the_pinned_threads_with_the_same_vectors(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnxruntime")
    from ragbench.index import onnx as onnx_backend

    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "onnx-cache"))
    configs = {
        "chunker": components("chunker").parse({"kind": "none"}),
        "embedder": components("embedder").parse(
            {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2", "backend": "onnx"}
        ),
        "retriever": components("retriever").parse({"kind": "dense"}),
    }
    plan = compile_plan(configs, 5)
    labeled = load_dataset(str(_getting_started(tmp_path)))
    env = Env(corpus=labeled.documents)
    built = Execution(plan, env)  # the quality pass: a session on every usable core
    index = {s.name: built[s.name] for s in plan.index_stages()}
    texts, ids = [q.text for q in labeled.queries], [q.id for q in labeled.queries]
    report = measure(plan, env, index, ids, texts, repeats=2, threads=1)
    assert _pools(report.threads)["onnxruntime"] == "1"
    # one thread: CPU time per query is its wall time (ONNX Runtime's pool would spin a second)
    assert np.median(np.divide(report.cpu, report.total)) <= 1.3
    encoder = onnx_backend.load_encoder("all-MiniLM-L6-v2", None, "none")
    default = onnx_backend.intra_op_threads()
    assert encoder.session.get_session_options().intra_op_num_threads == default
    with onnx_backend.pinned_threads(1):
        assert encoder.session.get_session_options().intra_op_num_threads == 1
        pinned = encoder.encode(texts)
    np.testing.assert_allclose(pinned, encoder.encode(texts), atol=1e-5)
