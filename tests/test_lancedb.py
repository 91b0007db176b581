"""The ``lancedb`` dense store against the real lancedb package: exact recall on the demo set,
filters, deletes, save/load, the stage cache, persistent collections, the missing-package error."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragbench.cli import main
from ragbench.data import load_dataset
from ragbench.errors import DataError
from ragbench.experiment.runner import run
from ragbench.index.dense import ExactConfig, ExactStore
from ragbench.index.lancedb_store import LanceDBConfig, LanceDBStore
from ragbench.pipeline import RAGPipeline
from ragbench.registry import components
from ragbench.text.chunkers import chunk_documents
from ragbench.text.loaders import load
from ragbench.types import Document, Ranking
from tests.paths import DEMO, REPO, require

pytest.importorskip("lancedb")

HASHING = {"kind": "hashing", "dim": 256}
TIE = 1e-6  # scores closer than this are ties whose order float32 rounding may decide


def random_vectors(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def ids_for(n: int) -> list[str]:
    return [f"doc-{i:05d}" for i in range(n)]


def file_sums(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def assert_same_up_to_ties(mine: Ranking, exact: Ranking, full: Ranking) -> None:
    """Equal scores per rank (1e-5), and equal ids per rank but for the order of scores tied
    within ``TIE``: each run of tied ranks holds the same ids, and the run cut by k holds ids
    tied with it (``full`` is the exact ranking of every item)."""
    np.testing.assert_allclose(mine.scores, exact.scores, atol=1e-5)
    k = exact.ids.shape[1]
    for row in range(len(exact.ids)):
        scores, start = exact.scores[row], 0
        for end in range(1, k + 1):
            if end < k and scores[start] - scores[end] <= TIE:
                continue
            got = set(mine.ids[row, start:end])
            if end < k:
                assert got == set(exact.ids[row, start:end]), (row, start, end)
            else:
                pool = set(full.ids[row][full.scores[row] >= scores[start] - TIE])
                assert got <= pool, (row, start, end)
            start = end


@pytest.fixture(scope="module")
def demo() -> tuple[list[str], np.ndarray, np.ndarray]:
    """Chunk ids and vectors of the demo set (recursive 200-char chunks), and query vectors."""
    labeled = load_dataset(require(DEMO))
    chunker = components("chunker").build({"kind": "recursive", "size": 200, "overlap": 0})
    chunks = chunk_documents(chunker, labeled.documents)
    embedder = components("embedder").build(HASHING)
    docs = embedder.embed([c.text for c in chunks], "document")
    queries = embedder.embed([q.text for q in labeled.queries], "query")
    return [c.id for c in chunks], docs, queries


@pytest.mark.parametrize(("exact_metric", "metric"), [("cosine", "cosine"), ("ip", "dot")])
@pytest.mark.parametrize("k", [1, 10, 100])
def test_flat_search_has_the_recall_of_exact_search_on_the_demo_set(
    demo: tuple[list[str], np.ndarray, np.ndarray], exact_metric: str, metric: str, k: int
) -> None:
    ids, docs, queries = demo
    exact = ExactStore(ExactConfig(metric=exact_metric))
    lance = LanceDBStore(LanceDBConfig(metric=metric))
    exact.add(ids, docs)
    lance.add(ids, docs)
    assert len(ids) > 1000 and len(queries) > 100
    mine, theirs = lance.search(queries, k), exact.search(queries, k)
    assert_same_up_to_ties(mine, theirs, exact.search(queries, len(ids)))
    recall = [len(set(a) & set(b)) / k for a, b in zip(mine.ids, theirs.ids, strict=True)]
    tied_at_cut = np.abs(theirs.scores[:, -1:] - theirs.scores).min(axis=1) <= TIE
    assert np.mean(recall) > 0.99 and all(np.array(recall)[~tied_at_cut] == 1.0)


def test_l2_scores_are_negative_squared_distances() -> None:
    vectors, queries = random_vectors(500, 16), random_vectors(20, 16, seed=1)
    store = LanceDBStore(LanceDBConfig(metric="l2"))
    store.add(ids_for(500), vectors)
    ranking = store.search(queries, 8)
    squared = ((queries[:, None, :].astype(np.float64) - vectors[None]) ** 2).sum(axis=2)
    top = np.argsort(squared, axis=1, kind="stable")[:, :8]
    assert (ranking.ids == np.array(ids_for(500), dtype=object)[top]).all()
    np.testing.assert_allclose(ranking.scores, -np.take_along_axis(squared, top, 1), rtol=1e-5)


def test_cosine_normalises_but_dot_keeps_norms() -> None:
    vectors = np.array([[1, 0], [10, 10]], dtype=np.float32)
    cosine, dot = LanceDBStore(), LanceDBStore(LanceDBConfig(metric="dot"))
    for store in (cosine, dot):
        store.add(["x", "long"], vectors)
    query = np.array([1, 0.1], dtype=np.float32)
    assert cosine.search(query, 1).ids[0, 0] == "x"
    assert dot.search(query, 2).ids[0].tolist() == ["long", "x"]
    assert dot.search(query, 2).scores[0].tolist() == pytest.approx([11.0, 1.0], abs=1e-5)


def test_ties_are_broken_by_id_also_at_the_cut_off() -> None:
    store = LanceDBStore()
    ids = [f"d{i:02d}" for i in range(40, 0, -1)]
    store.add(ids, np.ones((40, 4), dtype=np.float32))
    store.add(["far"], np.array([[1, -1, 0, 0]], dtype=np.float32))
    assert store.search(np.ones(4), 3).ids[0].tolist() == ["d01", "d02", "d03"]
    assert store.search(np.ones(4), 41).ids[0, -1] == "far"


def test_filters_match_every_key_exactly() -> None:
    n = 300
    vectors = random_vectors(n, 16)
    meta = [
        {"lang": ["en", "de"][i % 2], "section": ["ops", "dev", "api"][i % 3]} for i in range(n)
    ]
    meta[4]["tenant"] = "o'brien"  # a quote in an id or value must not break the query
    store, exact = LanceDBStore(), ExactStore()
    names = [*ids_for(n - 1), "it's"]
    for s in (store, exact):
        s.add(names, vectors, meta)
    for wanted in ({"lang": "en", "section": "ops"}, {"section": "api"}, {"tenant": "o'brien"}):
        got, expected = store.search(vectors[:5], 10, wanted), exact.search(vectors[:5], 10, wanted)
        assert (got.ids == expected.ids).all(), wanted
        np.testing.assert_allclose(got.scores, expected.scores, atol=1e-5)
    assert store.search(vectors[:1], 10, filter={"lang": "fr"}).ids[0].tolist() == [""] * 10
    assert (store.search(vectors[:1], 10, filter={"missing": 1}).ids == "").all()
    assert store.search(vectors[:1], 10, filter={"section": "ops"}).ids[0, 0] == "doc-00000"


def test_delete_and_replace() -> None:
    vectors = random_vectors(50, 8)
    store = LanceDBStore()
    store.add(ids_for(50), vectors)
    store.delete(["doc-00003", "doc-00010", "not-there", "doc-00003"])
    assert store.count() == len(store) == 48
    ranking = store.search(vectors, 48)
    assert not {"doc-00003", "doc-00010"} & set(ranking.ids.ravel())
    assert ranking.ids[0, 0] == "doc-00000" and (ranking.ids != "").all()

    store.add(["doc-00000"], vectors[7:8], [{"v": 2}])  # replace: now a copy of doc-00007
    assert store.count() == 48
    top = store.search(vectors[7], 2, filter={"v": 2})
    assert top.ids[0].tolist() == ["doc-00000", ""]
    assert top.scores[0, 0] == pytest.approx(1.0, abs=1e-5)

    store.add(["doc-00003"], vectors[3:4])  # re-adding a deleted id
    assert store.count() == 49
    assert store.search(vectors[3], 1).ids[0, 0] == "doc-00003"


def test_repeated_id_in_one_batch_keeps_the_last_and_dimensions_are_checked() -> None:
    vectors = random_vectors(3, 8)
    store = LanceDBStore()
    assert store.dimension is None
    assert (store.search(random_vectors(2, 8), 3).ids == "").all()
    store.add(["x", "y", "x"], vectors, [{"n": 0}, {"n": 1}, {"n": 2}])
    assert store.count() == 2 and store.dimension == 8
    assert store.search(vectors[2], 1, filter={"n": 2}).ids[0, 0] == "x"
    with pytest.raises(DataError, match="vector dimension 4 does not match the store's 8"):
        store.add(["z"], random_vectors(1, 4))
    with pytest.raises(DataError, match="2 ids but 1 vectors"):
        store.add(["a", "b"], random_vectors(1, 8))


@pytest.mark.parametrize("metric", ["cosine", "dot", "l2"])
def test_save_load_round_trip_never_changes_the_saved_folder(metric: str, tmp_path: Path) -> None:
    config = LanceDBConfig(metric=metric)
    store = components("dense").build(config)
    assert isinstance(store, LanceDBStore)
    vectors = random_vectors(200, 12)
    store.add(ids_for(200), vectors, [{"i": i, "even": i % 2 == 0} for i in range(200)])
    store.delete(["doc-00001"])
    store.add(["doc-00002"], vectors[5:6], [{"i": 2, "even": False}])
    before = store.search(vectors[:10], 7, filter={"even": False})
    store.save(tmp_path / "store")
    assert (tmp_path / "store" / "chunks.lance").is_dir()
    sums = file_sums(tmp_path / "store")

    loaded = LanceDBStore.load(tmp_path / "store")
    assert loaded.config == config
    assert loaded.count() == 199 and loaded.dimension == 12
    after = loaded.search(vectors[:10], 7, filter={"even": False})
    assert (before.ids == after.ids).all()
    np.testing.assert_allclose(before.scores, after.scores)
    loaded.add(["new"], 100 * vectors[:1])  # usable after loading, on a copy of its own
    loaded.delete(["doc-00000"])
    assert loaded.count() == 199
    assert loaded.search(100 * vectors[0], 1).ids[0, 0] == "new"
    assert file_sums(tmp_path / "store") == sums
    again = LanceDBStore.load(tmp_path / "store")
    assert again.count() == 199 and "new" not in again.search(vectors[0], 199).ids


def test_path_holds_the_live_table_and_stays_out_of_keys_when_unset(tmp_path: Path) -> None:
    assert LanceDBConfig().model_dump() == {"kind": "lancedb", "metric": "cosine"}
    assert LanceDBConfig().key() != LanceDBConfig(metric="dot").key()
    config = LanceDBConfig(path=str(tmp_path / "live"))
    assert config.label() == "lancedb"
    store = LanceDBStore(config)
    store.add(["a"], random_vectors(1, 4))
    assert list((tmp_path / "live").glob("*/chunks.lance"))
    del store
    gc.collect()
    assert list((tmp_path / "live").iterdir()) == []


def test_a_sweep_caches_the_index_and_scores_as_exact_search(tmp_path: Path) -> None:
    def config(queries: int) -> dict[str, object]:
        return {
            "name": f"lance-{queries}",
            "dataset": {"path": str(require(DEMO))},
            "evaluation": {"metrics": ["ndcg@10", "recall@100"], "depth": 100},
            "latency": {"queries": 2, "repeats": 1},
            "sweep": {
                "chunker": [{"kind": "recursive", "size": 200, "overlap": 0}],
                "embedder": [HASHING],
                "retriever": [
                    {"kind": "dense", "store": {"kind": "exact"}},
                    {"kind": "dense", "store": {"kind": "lancedb"}},
                ],
            },
        }

    cache = tmp_path / "cache"
    first = run(config(40), tmp_path / "a", cache_root=cache, limit_queries=40, progress=False)
    trials = first.trials.set_index("label", drop=False)
    assert set(trials["status"]) == {"ok"} and len(trials) == 2
    lance = trials.loc[trials.index.str.contains("lancedb")].iloc[0]
    exact = trials.loc[~trials.index.str.contains("lancedb")].iloc[0]
    for metric in ("ndcg@10", "recall@100"):
        assert lance[metric] == pytest.approx(exact[metric], abs=1e-9)
    (artifact,) = [p.parent for p in (cache / "dense_index").rglob("chunks.lance")]
    sums = file_sums(artifact)

    # more queries: the search runs again, over the index loaded from the cache (a rebuild
    # would write table files of other names)
    second = run(config(60), tmp_path / "b", cache_root=cache, limit_queries=60, progress=False)
    assert set(second.trials["status"]) == {"ok"}
    assert [p.parent for p in (cache / "dense_index").rglob("chunks.lance")] == [artifact]
    assert file_sums(artifact) == sums
    per_query = pd.read_parquet(tmp_path / "b" / "per_query.parquet")
    assert per_query["query_id"].nunique() == 60

    # the deployed trial extends the cached index on a copy of its own
    pipeline = RAGPipeline.from_trial(tmp_path / "b", str(lance["trial_id"]))
    pipeline.index([Document("extra.md", "Zanzibar quokka telemetry rotates hourly.")])
    assert pipeline.retrieve("zanzibar quokka telemetry", 1)[0].chunk.doc_id == "extra.md"
    assert file_sums(artifact) == sums


def test_ingest_and_search_a_persistent_collection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = {"embedder": HASHING, "retriever": {"kind": "dense", "store": {"kind": "lancedb"}}}
    db = ["--db", str(tmp_path / "db"), "--collection", "kestrel"]
    first, second = sorted(p for p in (require(DEMO) / "corpus").iterdir() if p.is_dir())[:2]
    assert main(["ingest", "--source", str(first), "--config", json.dumps(spec), *db]) == 0
    assert main(["ingest", "--source", str(second), *db]) == 0  # reopened, extended, saved
    capsys.readouterr()
    snapshots = tmp_path / "db" / "kestrel" / "snapshots"
    latest = max((p for p in snapshots.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    (stored,) = latest.rglob("chunks.lance")  # the store lives on disk, in the last snapshot
    assert stored.is_dir()
    query = "how do I rotate the signing keys"
    assert main(["search", query, *db, "--format", "json", "-k", "5"]) == 0
    hits = json.loads(capsys.readouterr().out)

    exact = {**spec, "retriever": {"kind": "dense", "store": {"kind": "exact"}}}
    reference = RAGPipeline.from_config(exact)
    for folder in (first, second):
        reference.index(load(folder))
    expected = reference.retrieve(query, 5)
    assert [h["chunk_id"] for h in hits] == [h.chunk.id for h in expected]
    np.testing.assert_allclose([h["score"] for h in hits], [h.score for h in expected], atol=1e-5)
    reopened = RAGPipeline.open(tmp_path / "db" / "kestrel")
    assert sorted(reopened.document_ids) == sorted(reference.document_ids)


def test_a_missing_lancedb_package_is_one_line(tmp_path: Path) -> None:
    spec = json.dumps(
        {"embedder": HASHING, "retriever": {"kind": "dense", "store": {"kind": "lancedb"}}}
    )
    script = (
        "import sys; sys.modules['lancedb'] = None\n"  # what Python does for an absent package
        "from ragbench.cli import main\n"
        f"sys.exit(main(['ingest', '--source', {str(DEMO / 'corpus')!r}, '--config', {spec!r},"
        f" '--db', {str(tmp_path)!r}]))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].endswith(
        "store.kind: lancedb needs the lancedb package: pip install 'ragbench[lancedb]'"
    )
    assert "Traceback" not in done.stderr
