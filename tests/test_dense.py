"""Dense stores: exact search against a numpy reference, hnsw recall, filters, updates, I/O."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ragbench.errors import DataError
from ragbench.index.dense import ExactConfig, ExactStore, HnswConfig, HnswStore
from ragbench.registry import components

STORES = [ExactStore, HnswStore]


def random_vectors(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)


def embedding_like(n: int, d: int, rank: int = 16, seed: int = 0) -> np.ndarray:
    """Points near a fixed random ``rank``-dimensional subspace: a low intrinsic dimension, like
    real text embeddings (isotropic noise in d dimensions is the worst case for hnsw)."""
    basis = np.random.default_rng(42).normal(size=(rank, d))
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, rank)) @ basis + 0.05 * rng.normal(size=(n, d))).astype(np.float32)


def ids_for(n: int) -> list[str]:
    return [f"doc-{i:05d}" for i in range(n)]


def numpy_top_k(queries: np.ndarray, vectors: np.ndarray, k: int, cosine: bool) -> np.ndarray:
    if cosine:
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = queries.astype(np.float64) @ vectors.T.astype(np.float64)
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("metric", ["cosine", "ip"])
def test_exact_top_k_matches_brute_force(metric: str) -> None:
    vectors, queries = random_vectors(2000, 32), random_vectors(40, 32, seed=1)
    store = ExactStore(ExactConfig(metric=metric))
    store.add(ids_for(2000), vectors)
    ranking = store.search(queries, 15)
    expected = np.array(ids_for(2000), dtype=object)[
        numpy_top_k(queries, vectors, 15, metric == "cosine")
    ]
    assert ranking.ids.shape == (40, 15)
    assert (ranking.ids == expected).all()
    assert (np.diff(ranking.scores, axis=1) <= 0).all()


def test_exact_chunks_large_query_batches() -> None:
    vectors, queries = random_vectors(3000, 8), random_vectors(2000, 8, seed=1)
    store = ExactStore()
    store.add(ids_for(3000), vectors)
    expected = numpy_top_k(queries, vectors, 3, cosine=True)
    ranking = store.search(queries, 3)  # 6M scores: more than one chunk
    assert (ranking.ids == np.array(ids_for(3000), dtype=object)[expected]).all()


def test_cosine_normalises_but_ip_keeps_norms() -> None:
    vectors = np.array([[1.0, 0.0], [10.0, 10.0]], dtype=np.float32)
    query = np.array([1.0, 0.1], dtype=np.float32)
    cosine, ip = ExactStore(ExactConfig(metric="cosine")), ExactStore(ExactConfig(metric="ip"))
    for store in (cosine, ip):
        store.add(["unit", "long"], vectors)
    assert cosine.search(query, 2).ids[0].tolist() == ["unit", "long"]
    assert cosine.search(query, 1).scores[0, 0] == pytest.approx(1 / np.hypot(1, 0.1))
    assert ip.search(query, 2).ids[0].tolist() == ["long", "unit"]
    assert ip.search(query, 1).scores[0, 0] == pytest.approx(11.0)


def test_exact_ties_are_broken_by_id_also_at_the_cut_off() -> None:
    store = ExactStore()
    ids = [f"d{i}" for i in (5, 3, 9, 1, 7, 2, 8)]
    store.add(ids, np.ones((7, 4), dtype=np.float32))
    assert store.search(np.ones(4), 3).ids[0].tolist() == ["d1", "d2", "d3"]


@pytest.mark.parametrize("store_cls", STORES)
def test_single_vector_query_and_padding(store_cls: type) -> None:
    store = store_cls()
    store.add(["a", "b"], random_vectors(2, 8))
    ranking = store.search(random_vectors(1, 8)[0], 5)
    assert ranking.ids.shape == (1, 5)
    assert sorted(ranking.ids[0, :2]) == ["a", "b"]
    assert ranking.ids[0, 2:].tolist() == ["", "", ""]
    assert np.isneginf(ranking.scores[0, 2:]).all()


@pytest.mark.parametrize("store_cls", STORES)
def test_filters_match_every_key_exactly(store_cls: type) -> None:
    n = 300
    vectors = random_vectors(n, 16)
    meta = [
        {"lang": ["en", "de"][i % 2], "section": ["ops", "dev", "api"][i % 3]} for i in range(n)
    ]
    store = store_cls()
    store.add(ids_for(n), vectors, meta)
    wanted = {"lang": "en", "section": "ops"}
    allowed = [i for i in range(n) if meta[i] == wanted]
    ranking = store.search(vectors[:5], 10, filter=wanted)
    expected = np.array(ids_for(n), dtype=object)[allowed][
        numpy_top_k(vectors[:5], vectors[allowed], 10, cosine=True)
    ]
    assert (ranking.ids == expected).all()
    assert store.search(vectors[:1], 10, filter={"lang": "fr"}).ids[0].tolist() == [""] * 10
    assert (store.search(vectors[:1], 10, filter={"missing": 1}).ids == "").all()


def test_hnsw_filter_returns_k_when_at_least_k_match() -> None:
    n = 6000  # more matches than the exact-search shortcut, in a small corner of the graph
    vectors = embedding_like(n, 16)
    meta = [{"group": "rare" if i % 500 == 0 else ("mid" if i % 2 else "common")} for i in range(n)]
    store = HnswStore(HnswConfig(ef_search=10))
    store.add(ids_for(n), vectors, meta)
    rare = store.search(vectors[:3], 12, filter={"group": "rare"})  # exactly 12 match
    assert (rare.ids != "").all()
    assert {i for row in rare.ids for i in row} == {f"doc-{i:05d}" for i in range(0, n, 500)}
    mid = store.search(vectors[:3], 50, filter={"group": "mid"})  # 3000 match: graph search
    assert (mid.ids != "").all()
    assert all(int(i[4:]) % 2 == 1 for row in mid.ids for i in row)


@pytest.mark.parametrize("store_cls", STORES)
def test_delete_and_replace(store_cls: type) -> None:
    vectors = random_vectors(50, 8)
    store = store_cls()
    store.add(ids_for(50), vectors)
    store.delete(["doc-00003", "doc-00010", "not-there"])
    assert store.count() == len(store) == 48
    ranking = store.search(vectors, 48)
    assert not {"doc-00003", "doc-00010"} & set(ranking.ids.ravel())
    assert ranking.ids[0, 0] == "doc-00000"

    store.add(["doc-00000"], vectors[7:8], [{"v": 2}])  # replace: now a copy of doc-00007
    assert store.count() == 48
    top = store.search(vectors[7], 2, filter={"v": 2})
    assert top.ids[0].tolist() == ["doc-00000", ""]
    assert top.scores[0, 0] == pytest.approx(1.0, abs=1e-5)

    store.add(["doc-00003"], vectors[3:4])  # re-adding a deleted id
    assert store.count() == 49
    assert store.search(vectors[3], 1).ids[0, 0] == "doc-00003"


@pytest.mark.parametrize("store_cls", STORES)
def test_repeated_id_in_one_batch_keeps_the_last(store_cls: type) -> None:
    vectors = random_vectors(3, 8)
    store = store_cls()
    store.add(["x", "y", "x"], vectors, [{"n": 0}, {"n": 1}, {"n": 2}])
    assert store.count() == 2
    assert store.search(vectors[2], 1, filter={"n": 2}).ids[0, 0] == "x"


@pytest.mark.parametrize("store_cls", STORES)
def test_dimension_checks(store_cls: type) -> None:
    store = store_cls()
    assert store.dimension is None
    store.add(["a"], random_vectors(1, 384))
    assert store.dimension == 384
    with pytest.raises(DataError, match="vector dimension 128 does not match the store's 384"):
        store.add(["b"], random_vectors(1, 128))
    with pytest.raises(ValueError, match="vector dimension 128 does not match the store's 384"):
        store.search(random_vectors(2, 128), 3)
    with pytest.raises(DataError, match="2 ids but 1 vectors"):
        store.add(["b", "c"], random_vectors(1, 384))


@pytest.mark.parametrize("store_cls", STORES)
def test_empty_store_returns_padding(store_cls: type) -> None:
    ranking = store_cls().search(random_vectors(2, 4), 3)
    assert ranking.ids.shape == (2, 3)
    assert (ranking.ids == "").all()


@pytest.mark.parametrize(
    "config", [ExactConfig(), ExactConfig(metric="ip"), HnswConfig(), HnswConfig(space="l2")]
)
def test_save_load_round_trip(config: ExactConfig | HnswConfig, tmp_path: Path) -> None:
    store = components("dense").build(config)
    vectors = random_vectors(200, 12)
    store.add(ids_for(200), vectors, [{"i": i, "even": i % 2 == 0} for i in range(200)])
    store.delete(["doc-00001"])
    before = store.search(vectors[:10], 7, filter={"even": False})
    store.save(tmp_path / "store")
    loaded = type(store).load(tmp_path / "store")
    assert loaded.config == config
    assert loaded.count() == 199 and loaded.dimension == 12
    after = loaded.search(vectors[:10], 7, filter={"even": False})
    assert (before.ids == after.ids).all()
    np.testing.assert_allclose(before.scores, after.scores)
    loaded.add(["new"], 100 * vectors[:1])  # still usable after loading
    assert loaded.count() == 200
    assert "new" in loaded.search(100 * vectors[0], 2).ids[0]


@pytest.mark.parametrize("config", [ExactConfig(), HnswConfig()])
def test_a_store_saved_with_one_metadata_dict_per_vector_still_loads(
    config: ExactConfig | HnswConfig, tmp_path: Path
) -> None:
    store = components("dense").build(config)
    vectors = random_vectors(50, 8)
    metadata = [{"i": i, "even": i % 2 == 0} for i in range(50)]
    store.add(ids_for(50), vectors, metadata)
    store.delete(["doc-00002"])
    store.save(tmp_path / "store")
    state = json.loads((tmp_path / "store" / "store.json").read_text("utf-8"))
    del state["metadata_columns"]  # the earlier layout: a list by row, or a dict by label
    kept = [m for m in metadata if m["i"] != 2]
    if isinstance(config, ExactConfig):
        state["metadata"] = [metadata[ids_for(50).index(id_)] for id_ in state["ids"]]
    else:
        state["metadata"] = {str(label): metadata[label] for label in range(50) if label != 2}
    (tmp_path / "store" / "store.json").write_text(json.dumps(state), "utf-8")
    loaded = type(store).load(tmp_path / "store")
    found = loaded.search(vectors[:5], 49, filter={"even": True}).ids
    assert sorted(set(found[0].tolist()) - {""}) == [ids_for(50)[m["i"]] for m in kept if m["even"]]


def test_hnsw_scores_are_higher_is_better() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    query = np.array([[1.0, 0.5]], dtype=np.float32)
    expect = {
        "cosine": [1 / np.hypot(1, 0.5), 0.5 / np.hypot(1, 0.5)],
        "ip": [1.0, 1.0],
        "l2": [-0.25, -3.25],
    }
    for space, scores in expect.items():
        store = HnswStore(HnswConfig(space=space))
        store.add(["x", "y"], vectors)
        np.testing.assert_allclose(
            np.sort(store.search(query, 2).scores[0])[::-1], scores, rtol=1e-5
        )


def test_hnsw_grows_capacity_over_many_adds() -> None:
    vectors = random_vectors(1000, 8)
    store = HnswStore()
    for start in range(0, 1000, 37):
        store.add(ids_for(1000)[start : start + 37], vectors[start : start + 37])
    assert store.count() == 1000
    assert store.recall_against_exact(vectors[:50], 10) >= 0.99


@pytest.mark.parametrize(
    ("data", "config"),
    [(embedding_like, HnswConfig()), (random_vectors, HnswConfig(ef_search=200))],
    ids=["embedding-like-defaults", "isotropic-ef200"],
)
def test_hnsw_recall_at_10_on_5k_by_64(data: Callable[..., np.ndarray], config: HnswConfig) -> None:
    # Isotropic 64-d noise reaches only ~0.965 with the default ef_search=100; 200 suffices.
    vectors, queries = data(5000, 64), data(200, 64, seed=1)
    store = HnswStore(config)
    store.add(ids_for(5000), vectors)
    recall = store.recall_against_exact(queries, 10)
    assert recall >= 0.99
    exact = ExactStore()
    exact.add(ids_for(5000), vectors)
    approx, truth = store.search(queries, 10).ids, exact.search(queries, 10).ids
    manual = np.mean([len(set(a) & set(t)) / 10 for a, t in zip(approx, truth, strict=True)])
    assert manual == pytest.approx(recall)


def test_recall_against_exact_drops_with_a_starved_graph() -> None:
    vectors = random_vectors(3000, 64)
    store = HnswStore(HnswConfig(M=2, ef_construction=4, ef_search=1))
    store.add(ids_for(3000), vectors)
    assert store.recall_against_exact(vectors[:100] + 0.5, 10) < 0.9


def test_registry_builds_both_kinds() -> None:
    assert {"exact", "hnsw"} <= set(components("dense").kinds())
    store = components("dense").build({"kind": "hnsw", "M": 8, "ef_search": 50})
    assert isinstance(store, HnswStore) and store.config.M == 8
    assert isinstance(components("dense").build("exact"), ExactStore)
    with pytest.raises(ValueError, match="metric"):
        components("dense").parse({"kind": "exact", "metric": "l2"})


def test_hnsw_builds_are_reproducible() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(2000, 32)).astype(np.float32)
    queries = rng.normal(size=(40, 32)).astype(np.float32)
    ids = [f"c{i}" for i in range(len(vectors))]
    found = set()
    for _ in range(4):
        store = HnswStore(HnswConfig(M=8, ef_construction=40, ef_search=20))
        store.add(ids, vectors)
        found.add(str(store.search(queries, 10).ids.tolist()))
    assert len(found) == 1


def test_hnsw_threads_leave_existing_keys_unchanged() -> None:
    assert HnswConfig().key() == "6d8fe53e950c63ec"  # the key from before the option existed
    assert HnswConfig(threads=1).model_dump() == HnswConfig().model_dump()
    assert "threads" not in HnswConfig().model_dump()
    two = HnswConfig(threads=2)
    assert two.key() != HnswConfig().key() and two.model_dump()["threads"] == 2
    assert two.label() == "hnsw(threads=2)"
    with pytest.raises(ValueError, match="threads"):
        HnswConfig(threads=0)


def test_hnsw_built_with_two_threads_finds_the_neighbours(tmp_path: Path) -> None:
    vectors, queries = embedding_like(3000, 32), embedding_like(100, 32, seed=1)
    store = HnswStore(HnswConfig(threads=2))
    store.add(ids_for(3000), vectors)
    assert store.recall_against_exact(queries, 10) >= 0.99
    store.save(tmp_path)
    loaded = HnswStore.load(tmp_path)
    assert loaded.config.threads == 2
    assert (loaded.search(queries, 10).ids == store.search(queries, 10).ids).all()


def test_without_hnswlib_an_hnsw_store_is_one_line_and_exact_still_works(tmp_path: Path) -> None:
    """The lean install leaves hnswlib out (it compiles from source): ragbench imports, the
    exact store ingests, and an hnsw store is one line saying how to install it."""
    import json
    import subprocess
    import sys

    from tests.paths import DEMO

    script = (
        "import sys; sys.modules['hnswlib'] = None\n"  # import hnswlib raises ImportError
        "from ragbench.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )

    def ingest(store: str) -> subprocess.CompletedProcess[str]:
        config = {
            "embedder": {"kind": "hashing", "dim": 32},
            "retriever": {"kind": "dense", "store": {"kind": store}},
        }
        argv = ["ingest", "--source", str(DEMO / "corpus"), "--db", str(tmp_path / store)]
        argv += ["--collection", "c", "--config", json.dumps(config)]
        return subprocess.run(
            [sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300
        )

    assert ingest("exact").returncode == 0
    failed = ingest("hnsw")
    assert failed.returncode == 2, failed.stderr[-2000:]
    assert (
        failed.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "store.kind: hnsw needs the hnswlib package, which compiles from source (about 30 s): "
            "pip install 'ragbench[hnsw]'; or use store: {kind: exact}"
        )
    )
    assert "Traceback" not in failed.stderr
