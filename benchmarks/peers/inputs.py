"""AutoRAG's inputs from a BEIR set: its corpus and QA parquets and its config YAML.

Both tools index the same texts: the corpus AutoRAG gets is ragbench's chunking of the
documents (``none``: whole abstracts, one chunk each; or a passage chunking), each chunk a
corpus row under its ragbench chunk id, so a ranking of chunks maps back to documents the same
way for both. The QA set holds the split's queries; a query's ``retrieval_gt`` lists, per
relevant document, the ids of its chunks (AutoRAG reads inner lists as "any of"). AutoRAG's own
metrics are not used (they have no cutoff): its rankings are read back from its result parquets
and scored by ragbench's metric code (``benchmarks.bench_peers``).

The YAML is the nearest equivalent of ``ragbench.yaml``: one node line of a lexical retrieval
(``bm25``, ``porter_stemmer`` tokenizer, the one that needs no download), a semantic retrieval
(Chroma with the local MiniLM files through llama-index's HuggingFace embedding) and a hybrid
retrieval with RRF (k = 60) and convex combination (min-max, weight 0.5), each weight pinned to
one value: by default AutoRAG tunes the fusion weight on the evaluated queries themselves.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ragbench.data import load_dataset
from ragbench.text.chunkers import build_chunker, chunk_documents

WHOLE: dict[str, Any] = {"kind": "none"}
PASSAGES: dict[str, Any] = {"kind": "recursive", "size": 600, "overlap": 0}
CORPORA: dict[str, dict[str, Any]] = {"abstracts": WHOLE, "passages": PASSAGES}
METRICS = ["retrieval_recall", "retrieval_ndcg"]  # AutoRAG needs some to pick a module by
STAMP = dt.datetime(2024, 1, 1)  # AutoRAG wants a modification time per corpus row


@dataclass(frozen=True)
class PeerInputs:
    """The files one AutoRAG evaluation reads."""

    corpus: Path
    qa: Path
    config: Path
    chunks: Path  # chunk id → document id, for mapping rankings back to documents
    texts: int  # corpus rows (chunks)
    queries: int


def _corpus(chunks: Sequence[Any]) -> pd.DataFrame:
    """AutoRAG's corpus rows: one per chunk."""
    meta = {"last_modified_datetime": STAMP, "prev_id": None, "next_id": None}
    return pd.DataFrame(
        {
            "doc_id": [c.id for c in chunks],
            "contents": [c.text for c in chunks],
            "metadata": [dict(meta) for _ in chunks],
        }
    )


def _qa(labeled: Any, by_doc: Mapping[str, list[str]]) -> pd.DataFrame:
    """AutoRAG's QA rows: a query's ground truth is, per relevant document, its chunk ids."""
    rows = []
    for query in labeled.queries:
        relevant = [d for d, grade in labeled.qrels[query.id].items() if grade > 0]
        gt = [by_doc[d] for d in relevant if by_doc.get(d)]
        rows.append(
            {"qid": query.id, "query": query.text, "retrieval_gt": gt, "generation_gt": [""]}
        )
    return pd.DataFrame(rows)


def _node(node_type: str, top_k: int, modules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node_type": node_type,
        "strategy": {"metrics": METRICS},
        "top_k": top_k,
        "modules": modules,
    }


def autorag_config(model_path: str, chroma: Path, top_k: int, batch: int = 100) -> dict[str, Any]:
    """The YAML (as a dict) of BM25, dense MiniLM, hybrid RRF and hybrid CC."""
    vectordb = {
        "name": "minilm",
        "db_type": "chroma",
        "client_type": "persistent",
        "collection_name": "minilm",
        "path": str(chroma),
        "embedding_model": [{"type": "huggingface", "model_name": model_path}],
        "embedding_batch": batch,
        "similarity_metric": "cosine",
    }
    nodes = [
        _node(
            "lexical_retrieval",
            top_k,
            [{"module_type": "bm25", "bm25_tokenizer": "porter_stemmer"}],
        ),
        _node("semantic_retrieval", top_k, [{"module_type": "vectordb", "vectordb": "minilm"}]),
        _node(
            "hybrid_retrieval",
            top_k,
            [
                {"module_type": "hybrid_rrf", "weight_range": "(60, 60)"},
                {
                    "module_type": "hybrid_cc",
                    "normalize_method": "mm",
                    "weight_range": "(0.5, 0.5)",
                    "test_weight_size": 1,
                },
            ],
        ),
    ]
    return {
        "vectordb": [vectordb],
        "node_lines": [{"node_line_name": "retrieve_node_line", "nodes": nodes}],
    }


def write_inputs(
    dataset: Path,
    out: Path,
    chunker: Mapping[str, Any],
    model_path: str,
    top_k: int,
    split: str = "test",
    limit: int | None = None,
) -> PeerInputs:
    """Write the corpus, QA set, YAML and chunk map of one AutoRAG evaluation into ``out``."""
    labeled = load_dataset(dataset, split=split)
    if limit is not None:
        labeled.queries = labeled.queries[:limit]
    chunks = chunk_documents(build_chunker(dict(chunker)), labeled.documents)
    by_doc: dict[str, list[str]] = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c.id)
    out.mkdir(parents=True, exist_ok=True)
    paths = PeerInputs(
        out / "corpus.parquet",
        out / "qa.parquet",
        out / "config.yaml",
        out / "chunks.parquet",
        len(chunks),
        len(labeled.queries),
    )
    _corpus(chunks).to_parquet(paths.corpus, index=False)
    _qa(labeled, by_doc).to_parquet(paths.qa, index=False)
    pd.DataFrame(
        {"chunk_id": [c.id for c in chunks], "doc_id": [c.doc_id for c in chunks]}
    ).to_parquet(paths.chunks, index=False)
    config = autorag_config(model_path, out / "project" / "resources" / "chroma", top_k)
    paths.config.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return paths
