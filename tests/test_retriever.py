"""Retrievers as planned stages over real indexes: bm25 / dense / hybrid (one or two chunkings),
rerank, threshold, filters, deletes and per-stage timings, run through ``RAGPipeline``."""

from pathlib import Path

import numpy as np
import pytest

from ragbench.errors import ConfigError
from ragbench.pipeline import RAGPipeline
from ragbench.registry import components
from ragbench.retrieve.postprocess import apply_threshold
from ragbench.retrieve.retriever import fuse_documents
from ragbench.text.chunk_table import ChunkTable
from ragbench.types import Document, Ranking

TEXTS = [
    "The broker stores partitions as append-only segment files on disk.",
    "Consumers commit offsets to a compacted internal topic.",
    "Error KST-4172 means the replica fell out of the in-sync set.",
    "Tiered storage moves closed segments to object storage such as S3.",
    "Producers batch records and compress them with zstd or lz4.",
    "Access control lists grant principals permission to read or write topics.",
]
DOCS = [Document(f"d{i}", t, {"section": "ops" if i % 2 else "dev"}) for i, t in enumerate(TEXTS)]
QUERIES = ["what does KST-4172 mean", "where are old segments moved to object storage"]
HASHING = {"kind": "hashing", "dim": 256}


def _pipeline(retriever: dict, **axes: dict) -> RAGPipeline:
    spec = {"chunker": {"kind": "none"}, "embedder": HASHING, "retriever": retriever, **axes}
    pipeline = RAGPipeline.from_config(spec)
    pipeline.index(DOCS)
    return pipeline


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
    result = _pipeline(spec).search(QUERIES, k=3)
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
    pipeline = _pipeline({"kind": "hybrid"})
    ranking = pipeline.search(QUERIES, k=5, filter={"section": "ops"}).ranking
    found = {c for row in ranking.ids for c in row if c}
    assert found and all(int(c[1]) % 2 == 1 for c in found)


def test_rerank_with_a_real_cross_encoder(tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    reranker = {"kind": "cross_encoder", "model": str(tiny_cross_encoder), "candidates": 4}
    pipeline = _pipeline({"kind": "bm25"}, reranker=reranker)
    candidates = _pipeline({"kind": "bm25"}).search(QUERIES[:1], k=4).ranking.row(0)
    result = pipeline.search(QUERIES[:1], k=2)
    assert set(result.timings) == {"bm25", "rerank"}
    scores = CrossEncoder(str(tiny_cross_encoder)).predict(
        [(QUERIES[0], pipeline.chunks[c].text) for c, _ in candidates]
    )
    best = [candidates[i][0] for i in np.argsort(-scores, kind="stable")[:2]]
    assert [c for c, _ in result.ranking.row(0)] == best


def test_threshold_pads_low_scores() -> None:
    ranking = Ranking.from_rows([[("a", 0.9), ("b", 0.2)]])
    assert apply_threshold(ranking, 0.5).row(0) == [("a", 0.9)]
    assert apply_threshold(ranking, None) is ranking
    spec = {"chunker": {"kind": "none"}, "retriever": {"kind": "bm25"}}
    strict = RAGPipeline.from_config(spec, score_threshold=1e9)
    strict.index(DOCS)
    assert strict.search(QUERIES, k=3).ranking.row(0) == []


def test_bad_specs_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"retriever\.fusion\.kind: unknown fusion kind"):
        components("retriever").parse({"kind": "hybrid", "fusion": {"kind": "magic"}})
    with pytest.raises(ConfigError, match=r"retriever\.b: "):
        components("retriever").parse({"kind": "bm25", "b": 2})
    with pytest.raises(ConfigError, match=r"pipeline\.store: unknown key; allowed: chunker"):
        RAGPipeline.from_config({"store": {"kind": "hnsw"}})


def test_delete_removes_from_every_index() -> None:
    pipeline = _pipeline({"kind": "hybrid"})
    assert pipeline.delete_document("d2") == 1
    ids = pipeline.search(QUERIES[:1], k=6).ranking.ids[0]
    assert "d2:chunk-0" not in ids and "d2:chunk-0" not in pipeline.chunks


def test_hybrid_over_two_chunkings_fuses_per_document() -> None:
    spec = {"kind": "hybrid", "bm25_chunker": {"kind": "none"}, "depth": 3}
    pipeline = _pipeline(spec, chunker={"kind": "sentence", "size": 40, "overlap": 0})
    assert len(pipeline.chunks) > len(DOCS)  # passages for the dense side
    ranking = pipeline.search(QUERIES, k=4).ranking
    for row in range(2):
        docs = [c.split(":")[0] for c in ranking.ids[row] if c]
        assert len(docs) == len(set(docs))  # one chunk per document
    assert ranking.ids[0, 0].startswith("d2:") and ranking.ids[1, 0].startswith("d3:")
    pipeline.delete_document("d2")
    assert not any(c.startswith("d2:") for c in pipeline.search(QUERIES, k=6).ranking.ids[0])


def test_documents_fused_across_chunkings_show_their_best_dense_chunk() -> None:
    def table(ids: list[str]) -> ChunkTable:
        n = len(ids)
        docs = [c.split(":")[0] for c in ids]
        return ChunkTable(np.array(ids, object), np.array(docs, object), np.zeros(n), np.ones(n))

    passages = table(["a:0", "a:1", "b:0", "b:1", "c:0"])  # d has no passage
    whole = table(["a", "b", "c", "d"])
    dense = Ranking(
        np.array([["a:1", "b:0", "a:0"], ["c:0", "", ""]], object),
        np.array([[0.9, 0.8, 0.7], [0.5, -np.inf, -np.inf]]),
    )
    bm25 = Ranking(
        np.array([["d", "b", "c"], ["b", "d", "a"]], object),
        np.array([[3.0, 2.0, 1.0], [4.0, 3.0, 2.0]]),
    )
    rrf = components("fusion").build({"kind": "rrf", "k": 60})
    fused, seconds = fuse_documents(rrf, dense, passages, bm25, whole, depth=3, k=4)
    assert seconds.shape == (2,)
    # query 0: b (both lists) > a (dense first) > d (no passage: dropped) ; c from BM25 only
    assert fused.ids[0].tolist() == ["b:0", "a:1", "c:0", ""]
    # query 1: b and a missed by the dense list show their first passage
    assert fused.ids[1].tolist() == ["b:0", "c:0", "a:0", ""]
    assert fused.scores[0, 0] > fused.scores[0, 1] > fused.scores[0, 2] > fused.scores[0, 3]
