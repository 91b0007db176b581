"""The stage graph: one plan per trial for sweeps, dry runs and pipelines — sweep results as
before it, every trial deployable with identical rankings, new steps by one module."""

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pytest
from pydantic import Field

from ragbench.cli import main
from ragbench.data import load_dataset
from ragbench.data.trec import read_run
from ragbench.experiment.config import expand, load_config
from ragbench.experiment.runner import dry_run, run
from ragbench.experiment.trial import chunk_depth
from ragbench.index.sparse import BM25Config, BM25Index
from ragbench.pipeline import RAGPipeline
from ragbench.registry import components
from ragbench.retrieve.artifacts import RANKING, TEXTS, Timed
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, compile_plan, component_key
from ragbench.text.chunk_table import document_ranking
from ragbench.types import Ranking
from tests.paths import DEMO, REPO, require

HASHING = {"kind": "hashing", "dim": 256}
RETRIEVERS = [
    {"kind": "bm25"},
    {"kind": "dense", "store": {"kind": "exact"}},
    {"kind": "dense", "store": {"kind": "hnsw"}},
    {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 10}},
    {"kind": "hybrid", "bm25_chunker": {"kind": "none"}, "fusion": {"kind": "convex"}},
]
BEFORE = Path(__file__).parent / "data" / "quickstart_before_stage_graph.json"


def _trec_order(pairs: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """trec_eval's order: score descending, then document id descending."""
    by_id = sorted(pairs, key=lambda p: p[0], reverse=True)
    return sorted(by_id, key=lambda p: -p[1])


def test_quickstart_gives_the_trials_and_metrics_it_gave_before_the_stage_graph(
    tmp_path: Path,
) -> None:
    before = json.loads(BEFORE.read_text())["trials"]
    config = BEFORE.with_suffix(".yaml")  # the quickstart sweep of then, frozen
    trials = run(config, tmp_path / "run", progress=False).trials
    assert set(trials["status"]) == {"ok"}
    assert dict(zip(trials["trial_id"], trials["label"], strict=True)) == {
        tid: row["label"] for tid, row in before.items()
    }
    for row in trials.itertuples(index=False):
        expected = before[row.trial_id]
        for metric in ("ndcg@10", "recall@20", "mrr@10", "span_recall@5"):
            got = trials.loc[trials["trial_id"] == row.trial_id, metric].item()
            assert got == pytest.approx(expected[metric], abs=1e-9), (row.label, metric)


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory, tiny_cross_encoder: Path) -> Path:
    """A run with every retriever kind, with and without a dense and a cross-encoder rerank."""
    config = {
        "name": "kinds",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "sweep": {
            "chunker": [{"kind": "sentence", "size": 300, "overlap": 0}],
            "embedder": [HASHING],
            "retriever": RETRIEVERS,
            "reranker": [
                {"kind": "none"},
                {"kind": "dense", "candidates": 20, "embedder": HASHING},
                {"kind": "cross_encoder", "model": str(tiny_cross_encoder), "candidates": 5},
            ],
        },
    }
    root = tmp_path_factory.mktemp("kinds")
    run(config, root / "run", cache_root=root / "cache", limit_queries=12, progress=False)
    return root / "run"


def test_every_trial_deploys_and_returns_the_rankings_the_run_scored(every_kind: Path) -> None:
    trials = pd.read_parquet(every_kind / "trials.parquet")
    queries = pd.read_parquet(every_kind / "queries.parquet")
    assert len(trials) == len(RETRIEVERS) * 3 and set(trials["status"]) == {"ok"}
    config = load_config(
        json.loads((every_kind / "manifest.json").read_text())["config"]
        | {"dataset": {"path": str(DEMO)}}
    )
    depth = chunk_depth(config, expand(config)[0])
    for trial_id, label in zip(trials["trial_id"], trials["label"], strict=True):
        pipeline = RAGPipeline.from_trial(every_kind, trial_id)
        assert pipeline.trial.label == label
        ranking = pipeline.search(list(queries["text"]), depth).ranking
        table = pipeline._live[pipeline.plan(depth).chunks].table
        documents = document_ranking(ranking, table).head(10)
        scored = read_run(every_kind / "runs" / f"{trial_id}.trec")
        for row, query_id in enumerate(queries["query_id"]):
            mine = _trec_order(documents.row(row))
            theirs = _trec_order(list(scored.get(query_id, {}).items()))
            assert [d for d, _ in mine] == [d for d, _ in theirs], (label, query_id)
            np.testing.assert_allclose([s for _, s in mine], [s for _, s in theirs], atol=1e-6)


def test_ingest_from_run_deploys_a_trial_in_one_command(
    every_kind: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trials = pd.read_parquet(every_kind / "trials.parquet")
    wanted = trials[trials["label"].str.contains("bm25_chunker=none", regex=False)].iloc[0]
    db = ["--db", str(tmp_path / "db"), "--collection", "best"]
    assert main(["ingest", "--from-run", str(every_kind), "--trial", wanted.trial_id, *db]) == 0
    assert wanted.label in capsys.readouterr().out
    query = pd.read_parquet(every_kind / "queries.parquet")["text"].iloc[0]
    assert main(["search", query, *db, "--format", "json", "-k", "3"]) == 0
    served = [hit["chunk_id"] for hit in json.loads(capsys.readouterr().out)]
    direct = RAGPipeline.from_trial(every_kind, wanted.trial_id).retrieve(query, 3)
    assert served == [hit.chunk.id for hit in direct]
    assert main(["ingest", "--from-run", str(every_kind), *db]) == 2  # --trial missing
    assert "--from-run and --trial go together" in capsys.readouterr().err


def test_a_dense_rerank_with_the_retrievers_embedder_shares_its_document_vectors() -> None:
    configs = {
        "chunker": components("chunker").parse({"kind": "none"}),
        "embedder": components("embedder").parse(HASHING),
        "retriever": components("retriever").parse({"kind": "hybrid"}),
        "reranker": components("reranker").parse({"kind": "dense", "embedder": HASHING}),
    }
    plan = compile_plan(configs, 10, {"corpus": "c", "queries": "q"})
    areas = [stage.area for stage in plan.stages.values()]
    assert areas.count("doc_vectors") == 1 and areas.count("chunks") == 1
    assert plan.stages["dense"].inputs == ("dense_index", "query_vectors")
    assert plan.output == "rerank" and plan.axes == set(configs)
    first = plan.stages["fusion"].key
    other = compile_plan(configs, 10, {"corpus": "other corpus", "queries": "q"})
    assert other.stages["fusion"].key != first  # keys follow the data


class FirstWordsConfig(StepConfig):
    """A query stage for this test: search with the first ``words`` words of each query."""

    kind: Literal["first_words"] = "first_words"
    words: int = Field(2, gt=0)

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        words = self.words

        def compute(env: Env, queries: Sequence[str]) -> list[str]:
            return [" ".join(q.split()[:words]) for q in queries]

        parts = (component_key(self),)
        g.queries = g.add("first_words", "query", (g.queries,), parts, compute, TEXTS)


components("query").register_config(FirstWordsConfig)


def test_a_new_query_stage_is_one_class_and_a_registration(tmp_path: Path) -> None:
    config = {
        "name": "query",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "sweep": {
            "chunker": [{"kind": "none"}],
            "query": [{"kind": "none"}, {"kind": "first_words", "words": 2}],
            "retriever": [{"kind": "bm25"}],
        },
    }
    cache = tmp_path / "cache"
    planned = dry_run(config, limit_queries=10, cache_root=cache)
    assert list(planned["label"]) == ["bm25 | none", "bm25 | none | query:first_words"]
    assert "first_words" in planned["missing"].iloc[1]
    result = run(config, tmp_path / "run", cache_root=cache, limit_queries=10, progress=False)
    trials = result.trials.set_index("label")
    plain, short = trials.loc["bm25 | none"], trials.loc["bm25 | none | query:first_words"]
    assert json.loads(plain["config"]).keys() == {"chunker", "retriever", "reranker"}  # no query
    # the stage's queries reach BM25: the run equals BM25 searched by hand with them
    queries = pd.read_parquet(result.path / "queries.parquet")
    index = BM25Index(BM25Config())
    documents = load_dataset(str(DEMO)).documents
    index.add([d.id for d in documents], [d.text for d in documents])
    scored = read_run(result.path / "runs" / f"{short['trial_id']}.trec")
    for query_id, text in zip(queries["query_id"], queries["text"], strict=True):
        by_hand = index.search([" ".join(text.split()[:2])], 10).row(0)
        assert _trec_order(by_hand) == _trec_order(list(scored.get(query_id, {}).items()))
    assert plain["ndcg@10"] != short["ndcg@10"]


def test_an_installed_plugin_adds_a_retriever_a_reranker_and_an_axis(tmp_path: Path) -> None:
    site, package = tmp_path / "site", tmp_path / "ragbench_example"
    shutil.copytree(Path(__file__).parent / "plugins" / "ragbench_example", package)
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(package),
        ],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    config = tmp_path / "plugin.yaml"
    config.write_text(
        json.dumps(
            {
                "name": "plugin",
                "dataset": {"path": str(require(DEMO))},
                "evaluation": {"metrics": ["ndcg@10", "recall@10"], "depth": 10},
                "sweep": {
                    "chunker": [{"kind": "none"}],
                    "query": [{"kind": "none"}, {"kind": "truncate", "words": 2}],
                    "retriever": [{"kind": "overlap"}, {"kind": "bm25"}],
                    "reranker": [{"kind": "none"}, {"kind": "shortest", "candidates": 5}],
                    "cutoff": [{"kind": "none"}, {"kind": "top", "n": 1}],
                },
            }
        )
    )
    env = {
        "PYTHONPATH": f"{site}:{REPO}",
        "RAGBENCH_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragbench.cli",
            "run",
            str(config),
            "--out",
            str(tmp_path / "run"),
            "--limit-queries",
            "15",
            "--no-report",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    trials = pd.read_parquet(tmp_path / "run" / "trials.parquet").set_index("label")
    assert len(trials) == 16 and set(trials["status"]) == {"ok"}
    assert (
        "overlap | none | query:truncate(words=2) | rerank:shortest(candidates=5)" in trials.index
    )
    # the cutoff axis keeps one hit per query: recall@10 can only fall, never rise
    for label in [label for label in trials.index if "cutoff:" not in label]:
        cut = trials.loc[f"{label} | cutoff:top"]
        assert cut["recall@10"] <= trials.loc[label, "recall@10"]
    assert trials["recall@10"].max() > 0.3


def test_a_cached_ranking_reads_back_whole_in_either_layout(tmp_path: Path) -> None:
    """Rankings are cached with their ids coded; entries cached with whole ids still load."""
    ranking = Ranking.from_rows([[("d1#0", 2.0), ("d2#1", 1.5)], [("d2#1", 0.5)], []], k=3)
    timed = Timed(ranking, np.array([0.1, 0.2, 0.3]))
    RANKING.save(timed, tmp_path)
    back = RANKING.load(tmp_path)
    assert back.ranking.ids.dtype == object
    assert back.ranking.ids.tolist() == ranking.ids.tolist()
    assert back.ranking.scores.tolist() == ranking.scores.tolist()
    assert back.seconds.tolist() == [0.1, 0.2, 0.3]
    old = tmp_path / "old"
    old.mkdir()
    np.savez(
        old / "ranking.npz",
        ids=ranking.ids.astype(str),
        scores=ranking.scores,
        seconds=timed.seconds,
    )
    assert RANKING.load(old).ranking.ids.tolist() == ranking.ids.tolist()
