"""Retriever composition over real indexes: bm25 / dense / hybrid, rerank, threshold, timings."""

from pathlib import Path

import numpy as np
import pytest

from ragbench.errors import ConfigError
from ragbench.index.embedders import HashingConfig, HashingEmbedder
from ragbench.registry import registry
from ragbench.retrieve.retriever import Retriever, apply_threshold
from ragbench.types import Chunk, Ranking

TEXTS = [
    "The broker stores partitions as append-only segment files on disk.",
    "Consumers commit offsets to a compacted internal topic.",
    "Error KST-4172 means the replica fell out of the in-sync set.",
    "Tiered storage moves closed segments to object storage such as S3.",
    "Producers batch records and compress them with zstd or lz4.",
    "Access control lists grant principals permission to read or write topics.",
]
CHUNKS = [
    Chunk(f"d{i}:chunk-0", f"d{i}", 0, 0, len(t), t, {"section": "ops" if i % 2 else "dev"})
    for i, t in enumerate(TEXTS)
]
QUERIES = ["what does KST-4172 mean", "where are old segments moved to object storage"]


def _embedder() -> HashingEmbedder:
    return HashingEmbedder(HashingConfig(dim=256))


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "bm25"},
        {"kind": "dense", "store": {"kind": "exact"}},
        {"kind": "dense", "store": {"kind": "hnsw"}},
        {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 10}},
        {"kind": "hybrid", "fusion": {"kind": "convex", "weights": [0.3, 0.7]}, "depth": 4},
    ],
    ids=lambda s: s["kind"] + "-" + str(s.get("store", s.get("fusion", {})).get("kind", "")),
)
def test_each_retriever_finds_the_answers(spec: dict) -> None:
    retriever = Retriever.from_config(spec, embedder=_embedder())
    retriever.add(CHUNKS)
    result = retriever.search(QUERIES, k=3)
    assert result.ranking.ids.shape == (2, 3)
    assert result.ranking.ids[0, 0] == "d2:chunk-0"
    assert result.ranking.ids[1, 0] == "d3:chunk-0"
    stages = set(result.timings)
    expected = {"bm25": {"bm25"}, "dense": {"embed_query", "dense"}}.get(
        spec["kind"], {"embed_query", "dense", "bm25", "fusion"}
    )
    assert stages == expected
    assert all(len(t) == 2 and (t > 0).all() for t in result.timings.values())
    latency = result.latency_ms()
    assert latency["total"][0] >= max(v[0] for s, v in latency.items() if s != "total")


def test_filters_reach_every_index() -> None:
    retriever = Retriever.from_config({"kind": "hybrid"}, embedder=_embedder())
    retriever.add(CHUNKS)
    ranking = retriever.search(QUERIES, k=5, filter={"section": "ops"}).ranking
    found = {c for row in ranking.ids for c in row if c}
    assert found and all(int(c[1]) % 2 == 1 for c in found)


def test_rerank_with_a_real_cross_encoder(tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    reranker = registry("reranker").build(
        {"kind": "cross_encoder", "model": str(tiny_cross_encoder), "candidates": 4}
    )
    retriever = Retriever.from_config({"kind": "bm25"}, reranker=reranker)
    retriever.add(CHUNKS)
    first = Retriever.from_config({"kind": "bm25"})
    first.add(CHUNKS)
    candidates = first.search(QUERIES[:1], k=4).ranking.row(0)
    result = retriever.search(QUERIES[:1], k=2)
    assert set(result.timings) == {"bm25", "rerank"}
    scores = CrossEncoder(str(tiny_cross_encoder)).predict(
        [(QUERIES[0], retriever.texts[c]) for c, _ in candidates]
    )
    best = [candidates[i][0] for i in np.argsort(-scores, kind="stable")[:2]]
    assert [c for c, _ in result.ranking.row(0)] == best


def test_threshold_pads_low_scores() -> None:
    ranking = Ranking.from_rows([[("a", 0.9), ("b", 0.2)]])
    assert apply_threshold(ranking, 0.5).row(0) == [("a", 0.9)]
    assert apply_threshold(ranking, None) is ranking
    retriever = Retriever.from_config({"kind": "bm25"}, score_threshold=1e9)
    retriever.add(CHUNKS)
    assert retriever.search(QUERIES, k=3).ranking.row(0) == []


def test_bad_specs_and_missing_parts() -> None:
    with pytest.raises(ConfigError, match=r"retriever\.fusion\.kind: unknown fusion kind"):
        registry("retriever").parse({"kind": "hybrid", "fusion": {"kind": "magic"}})
    with pytest.raises(ConfigError, match=r"retriever\.b: "):
        registry("retriever").parse({"kind": "bm25", "b": 2})
    with pytest.raises(ValueError, match="needs an embedder"):
        Retriever.from_config({"kind": "dense"})
    with pytest.raises(ValueError, match="needs a dense store, a sparse index, or both"):
        Retriever()


def test_delete_removes_from_every_index() -> None:
    retriever = Retriever.from_config({"kind": "hybrid"}, embedder=_embedder())
    retriever.add(CHUNKS)
    retriever.delete(["d2:chunk-0"])
    ids = retriever.search(QUERIES[:1], k=6).ranking.ids[0]
    assert "d2:chunk-0" not in ids and "d2:chunk-0" not in retriever.texts


def test_two_chunkings_are_for_sweeps_only() -> None:
    spec = {"kind": "hybrid", "bm25_chunker": {"kind": "none"}}
    with pytest.raises(ConfigError, match="bm25_chunker: only sweeps fuse two chunkings"):
        Retriever.from_config(spec, embedder=_embedder())
