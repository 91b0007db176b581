"""The AutoRAG comparison's own parts, without AutoRAG: the inputs it is given, how its rankings
are read back and scored, the section's drawing, and that a tiny run skips it. Nothing here
creates or imports AutoRAG's environment."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.paths import REPO

DOCS = {
    "d1": "Aspirin lowers the risk of heart attack. " * 30,
    "d2": "Vitamin D deficiency is common in winter.",
    "d3": "Statins reduce cholesterol in most adults. " * 25,
}


def _beir(root: Path) -> Path:
    """A three-document BEIR set with two test queries."""
    (root / "qrels").mkdir(parents=True)
    with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        for doc_id, text in DOCS.items():
            f.write(json.dumps({"_id": doc_id, "title": "", "text": text}) + "\n")
    queries = [{"_id": "q1", "text": "aspirin heart"}, {"_id": "q2", "text": "cholesterol"}]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    return root


def test_inputs_are_autorags_formats_over_ragbench_chunks(tmp_path: Path) -> None:
    from benchmarks.peers.inputs import PASSAGES, write_inputs

    written = write_inputs(_beir(tmp_path / "set"), tmp_path / "in", PASSAGES, "/models/m", 30)
    corpus, qa = pd.read_parquet(written.corpus), pd.read_parquet(written.qa)
    assert list(corpus.columns) == ["doc_id", "contents", "metadata"]
    assert {"qid", "query", "retrieval_gt", "generation_gt"} <= set(qa.columns)
    assert len(corpus) == written.texts > len(DOCS)  # d1 and d3 are cut into passages
    assert all(m["last_modified_datetime"] is not None for m in corpus["metadata"])
    chunks = pd.read_parquet(written.chunks)
    by_chunk = dict(zip(chunks["chunk_id"], chunks["doc_id"], strict=True))
    assert set(by_chunk) == set(corpus["doc_id"])
    rows = zip(qa["qid"], qa["retrieval_gt"], strict=True)
    gt = {q: [list(group) for group in groups] for q, groups in rows}
    assert [{by_chunk[c] for c in group} for group in gt["q1"]] == [{"d1"}]
    assert len(gt["q1"][0]) > 1  # every passage of the relevant abstract counts
    config = yaml.safe_load(written.config.read_text())
    nodes = {n["node_type"]: n for n in config["node_lines"][0]["nodes"]}
    assert [n["top_k"] for n in nodes.values()] == [30, 30, 30]
    hybrid = {m["module_type"]: m for m in nodes["hybrid_retrieval"]["modules"]}
    assert hybrid["hybrid_rrf"]["weight_range"] == "(60, 60)"  # pinned: not tuned on test
    assert hybrid["hybrid_cc"]["weight_range"] == "(0.5, 0.5)"
    assert config["vectordb"][0]["embedding_model"] == [
        {"type": "huggingface", "model_name": "/models/m"}
    ]


def test_autorag_rankings_map_chunks_to_documents_and_score_like_ragbench(
    tmp_path: Path,
) -> None:
    from benchmarks import bench_peers

    pd.DataFrame({"chunk_id": ["a:0", "a:1", "b:0"], "doc_id": ["a", "a", "b"]}).to_parquet(
        tmp_path / "chunks.parquet"
    )
    data = tmp_path / "project" / "data"
    data.mkdir(parents=True)
    pd.DataFrame({"qid": ["q1", "q2"]}).to_parquet(data / "qa.parquet")
    line = tmp_path / "project" / "0" / "retrieve_node_line"
    for file in bench_peers.AUTORAG_FILES.values():
        (line / file).parent.mkdir(parents=True, exist_ok=True)
        ids = [["a:1", "a:0", "b:0"], ["b:0", "a:0"]]
        pd.DataFrame({"retrieved_ids": ids}).to_parquet(line / file)
    found = bench_peers.autorag_rankings(tmp_path)
    assert found["cc"] == {"q1": ["a", "b"], "q2": ["b", "a"]}
    scores = bench_peers.score({"q1": {"b": 1}, "q2": {"b": 1}}, bench_peers.ranked(found["bm25"]))
    assert scores["recall@100"] == 1.0
    assert scores["ndcg@10"] == pytest.approx((1 / 1.5849625007211563 + 1.0) / 2)


def _section() -> dict:
    run = {"wall_s": 100.0, "embed_s": 80.0, "embedded_texts": 5483, "peak_mb": 2000.0}
    scores = {"ndcg@10": 0.6, "recall@100": 0.9}
    return {
        "autorag_version": "0.3.27",
        "install_s": None,
        "corpora": ["abstracts"],
        "texts": {"abstracts": 5183},
        "queries": 300,
        "autorag": {"cold": run, "warm": {**run, "wall_s": 40.0, "embed_s": 5.0}},
        "ragbench": {"cold": {**run, "wall_s": 60.0}, "warm": {**run, "wall_s": 2.0}},
        "ratios": {"cold": 100 / 60, "outside": 0.5, "int8": None, "warm": 20.0},
        "quality": [
            {"corpus": "abstracts", "config": c, "autorag": scores, "ragbench": scores}
            for c in ("bm25", "dense", "rrf", "cc")
        ],
        "int8_delta": {},
        "config": "benchmarks/peers/ragbench.yaml",
    }


def test_the_section_draws_times_ratios_and_scores() -> None:
    from benchmarks import bench_peers

    text = "\n".join(bench_peers.draw(_section()))
    assert "| AutoRAG, cold | 100.0 | 80.0 | 20.0 | 5,483 | 2000 |" in text
    assert "| cold sweep, same torch embedder | 1.67x | ≥ 1.5x | yes |" in text
    assert "| warm rerun | 20.00x | ≥ 20x | yes |" in text
    assert "| cold sweep, ragbench on its ONNX int8 backend | – | ≥ 3x | – |" in text
    assert "| abstracts | hybrid RRF (k = 60) | 0.6000 | 0.6000 | +0.0000 |" in text


def test_a_tiny_benchmark_run_skips_peers_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--tiny", "--only", "peers", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    block = out.read_text(encoding="utf-8").split("### Side by side with AutoRAG")[1]
    assert "_Skipped: needs AutoRAG's own virtual environment" in block
    assert "ragbench-peers" not in proc.stderr  # no environment was created
