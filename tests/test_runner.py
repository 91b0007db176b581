"""The sweep runner: run-directory contract, numbers equal trec_eval, cache reuse, resume after
SIGKILL, failed trials, executors, TPE."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
import yaml

from ragbench.data.trec import read_run
from ragbench.errors import ConfigError
from ragbench.experiment.runner import dry_run, run
from tests.paths import DEMO, require

HASHING = {"kind": "hashing", "dim": 256}


def _config(**sweep: object) -> dict:
    base = {
        "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
        "embedder": [HASHING],
        "retriever": [
            {"kind": "bm25"},
            {"kind": "dense"},
            {"kind": "hybrid", "fusion": {"kind": "rrf", "k": [10, 60]}},
        ],
    }
    return {
        "name": "t",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20", "map", "span_recall@5"], "depth": 20},
        "sweep": base | sweep,
    }


def test_run_directory_contract_and_trec_eval_agreement(tmp_path: Path) -> None:
    result = run(_config(), tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    root = result.path
    for name in ("manifest.json", "trials.parquet", "per_query.parquet", "queries.parquet"):
        assert (root / name).is_file()
    trials, per_query = result.trials, result.per_query
    assert len(trials) == 4 and set(trials["status"]) == {"ok"}
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["dataset_fingerprint"] and manifest["versions"]["numpy"]
    queries = pd.read_parquet(root / "queries.parquet")
    assert len(queries) == manifest["queries"]["count"] == 117
    qrels = {q: json.loads(r) for q, r in zip(queries["query_id"], queries["qrels"], strict=True)}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "map", "recall_20"})
    for trial in trials.itertuples():
        run_file = root / "runs" / f"{trial.trial_id}.trec"
        reference = evaluator.evaluate(read_run(run_file))
        mine = per_query[per_query["trial_id"] == trial.trial_id]
        for metric, name in (
            ("ndcg@10", "ndcg_cut_10"),
            ("map", "map"),
            ("recall@20", "recall_20"),
        ):
            values = mine[mine["metric"] == metric].set_index("query_id")["value"]
            expected = pd.Series({q: reference.get(q, {}).get(name, 0.0) for q in values.index})
            assert np.allclose(values.values, expected.values, atol=1e-9), (trial.label, metric)
            assert (
                abs(trials.loc[trials.trial_id == trial.trial_id, metric].item() - values.mean())
                < 1e-12
            )
        top = pd.read_parquet(root / "runs" / f"{trial.trial_id}.top.parquet")
        assert set(top["rank"]) == {1, 2, 3, 4, 5} and top["text"].str.len().gt(0).all()
    curves = result.curves
    assert set(curves["metric"]) == {"ndcg", "recall", "span_recall"}
    for trial_id, ndcg10 in zip(trials["trial_id"], trials["ndcg@10"], strict=True):
        mine = curves[(curves["trial_id"] == trial_id) & (curves["metric"] == "ndcg")]
        assert list(mine["k"]) == list(range(1, 21))
        assert abs(mine.set_index("k").loc[10, "value"] - ndcg10) < 1e-12
    latency = [c for c in trials.columns if c.startswith("latency.")]
    hybrid = trials[trials["label"].str.startswith("hybrid")].iloc[0]
    assert {"latency.embed_query.p50_ms", "latency.bm25.p95_ms", "latency.fusion.p50_ms"} <= set(
        latency
    )
    assert hybrid["latency.total.p50_ms"] > hybrid["latency.bm25.p50_ms"] > 0


def test_warm_rerun_reuses_every_artifact_and_embeds_the_corpus_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = run(_config(), tmp_path / "a", cache_root=cache, progress=False).trials
    assert (cache / "doc_vectors").is_dir()
    built = [p for p in (cache / "doc_vectors").glob("*/*") if p.is_dir()]
    assert len(built) == 1  # one chunker and one embedder: the corpus is embedded once
    warm = run(_config(), tmp_path / "b", cache_root=cache, progress=False).trials
    assert warm["cache_misses"].sum() == 0 and warm["cache_hits"].min() > 0
    metrics = ["ndcg@10", "recall@20", "map", "span_recall@5", "latency.total.p95_ms"]
    pd.testing.assert_frame_equal(
        cold.set_index("trial_id")[metrics], warm.set_index("trial_id")[metrics]
    )
    plan = dry_run(_config(), cache_root=cache)
    assert (plan["missing"] == "-").all() and (plan["cached"] == plan["stages"]).all()


def test_existing_run_needs_resume_or_overwrite(tmp_path: Path) -> None:
    cache, out = tmp_path / "cache", tmp_path / "run"
    run(_config(), out, cache_root=cache, progress=False)
    with pytest.raises(ConfigError, match="--resume to continue it or --overwrite"):
        run(_config(), out, cache_root=cache, progress=False)
    run(_config(), out, cache_root=cache, progress=False, resume=True)
    with pytest.raises(ConfigError, match="cannot resume, the queries changed"):
        run(_config(), out, cache_root=cache, progress=False, resume=True, limit_queries=5)
    again = run(_config(), out, cache_root=cache, progress=False, overwrite=True, limit_queries=5)
    assert again.manifest["queries"]["count"] == 5


def test_failed_trial_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()  # a folder without a model: it fails to load in its trial
    config = _config(
        retriever=[{"kind": "bm25"}],
        reranker=[{"kind": "none"}, {"kind": "cross_encoder", "model": str(tmp_path / "none")}],
    )
    trials = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False).trials
    assert sorted(trials["status"]) == ["failed", "ok"]
    failed = trials[trials["status"] == "failed"].iloc[0]
    assert "cross-encoder" in failed["error"].lower() or "none" in failed["error"]


def test_resume_after_sigkill_completes_with_identical_numbers(tmp_path: Path) -> None:
    k1 = [0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.7, 1.9]
    config = _config(retriever=[{"kind": "bm25", "k1": k1, "b": [0.2, 0.4, 0.6, 0.75, 0.9]}])
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "RAGBENCH_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "ragbench.cli", "run", str(path), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trials_file = out / "trials.parquet"
    deadline = time.time() + 120
    while time.time() < deadline:
        # one read of the bytes: pyarrow reading by path opens the file twice, and the runner's
        # atomic replace between the two gives it a size that is not the file's
        if trials_file.exists() and len(pd.read_parquet(io.BytesIO(trials_file.read_bytes()))) >= 2:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = pd.read_parquet(trials_file)
    assert 2 <= len(before) < 40, f"the kill must land mid-sweep ({len(before)} trials done)"
    resumed = subprocess.run([*cmd, "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    after = pd.read_parquet(trials_file).set_index("trial_id")
    assert len(after) == 40
    pd.testing.assert_frame_equal(after.loc[before["trial_id"]], before.set_index("trial_id"))
    clean = run(config, tmp_path / "clean", cache_root=tmp_path / "cache", progress=False)
    metrics = ["ndcg@10", "recall@20", "map", "span_recall@5"]
    pd.testing.assert_frame_equal(
        after[metrics].sort_index(), clean.trials.set_index("trial_id")[metrics].sort_index()
    )
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert len(per_query) == 40 * 4 * 117


@pytest.mark.parametrize("executor", ["process", "dask"])
def test_executors_give_the_same_results(tmp_path: Path, executor: str) -> None:
    cache = tmp_path / "cache"
    serial = run(_config(), tmp_path / "s", cache_root=cache, progress=False).trials
    other = run(
        _config(),
        tmp_path / executor,
        cache_root=tmp_path / f"cache-{executor}",
        executor=executor,
        workers=2,
        progress=False,
    ).trials
    metrics = ["ndcg@10", "recall@20", "map", "span_recall@5"]
    pd.testing.assert_frame_equal(
        serial.set_index("trial_id")[metrics].sort_index(),
        other.set_index("trial_id")[metrics].sort_index(),
    )


def test_tpe_runs_n_distinct_trials_from_the_grid(tmp_path: Path) -> None:
    config = _config(retriever=[{"kind": "bm25", "k1": [0.3, 0.9, 1.5, 2.1], "b": [0.2, 0.5, 0.8]}])
    config["search"] = {"strategy": "tpe", "n": 5, "seed": 3, "objective": "ndcg@10"}
    first = run(config, tmp_path / "a", cache_root=tmp_path / "c", progress=False).trials
    assert 1 <= len(first) <= 5 and first["trial_id"].is_unique
    again = run(config, tmp_path / "b", cache_root=tmp_path / "c", progress=False).trials
    assert list(again["trial_id"]) == list(first["trial_id"])  # seeded
    resumed = run(config, tmp_path / "a", cache_root=tmp_path / "c", progress=False, resume=True)
    assert len(resumed.trials) == len(first)


def test_hybrid_with_bm25_on_whole_documents_fuses_per_document(tmp_path: Path) -> None:
    from ragbench.data import load_dataset
    from ragbench.experiment.config import expand, load_config
    from ragbench.experiment.trial import RunSpec, context
    from ragbench.registry import components
    from ragbench.retrieve.retriever import fuse
    from ragbench.text.chunk_table import ChunkTable, document_ranking
    from ragbench.text.chunkers import build_chunker, chunk_documents

    fusion = {"kind": "convex", "weights": [0.5, 0.5]}
    hybrid = {"kind": "hybrid", "bm25_chunker": {"kind": "none"}, "fusion": fusion, "depth": 6}
    config = _config(retriever=[hybrid])
    result = run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    assert (result.trials["status"] == "ok").all()
    top = pd.read_parquet(next((result.path / "runs").glob("*.top.parquet")))
    assert not top.duplicated(["query_id", "doc_id"]).any()  # one chunk per document
    # the same fusion by hand: dense over passages and BM25 over documents, per document
    cfg = load_config(config)
    ctx = context(RunSpec(cfg, None, str(tmp_path / "cache")))
    stages = ctx.plan(expand(cfg)[0]).stages

    def cached(name: str) -> Any:
        stage = stages[name]
        assert ctx.cache.has(stage.area, stage.key), f"the run must have cached {name}"
        return ctx.cache.get(stage.area, stage.key, pytest.fail, stage.codec.save, stage.codec.load)

    dense = cached("dense")
    labeled = load_dataset(str(DEMO))
    passages = ChunkTable.from_chunks(
        chunk_documents(build_chunker({"kind": "recursive", "size": 600}), labeled.documents)
    )
    whole = ChunkTable.from_chunks(chunk_documents(build_chunker("none"), labeled.documents))
    bm25 = cached("bm25")
    expected, _ = fuse(
        components("fusion").build(fusion),
        [
            document_ranking(dense.ranking, passages).head(6),
            document_ranking(bm25.ranking, whole).head(6),
        ],
        20,
    )
    trec = read_run(next((result.path / "runs").glob("*.trec")))
    # depth 6: six documents from each list, so at most twelve fused (of 58 in the corpus)
    assert max(len(docs) for docs in trec.values()) <= 12
    for i, qid in enumerate(ctx.query_ids[:20]):
        expected_top = expected.row(i)[:5]  # ties may order differently: compare scores
        assert [trec[qid].get(d) for d, _ in expected_top] == pytest.approx(
            [score for _, score in expected_top]
        )
        assert sorted(trec[qid].values(), reverse=True)[:5] == pytest.approx(
            [score for _, score in expected_top]
        )
