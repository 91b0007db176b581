"""Time ragbench's BM25 and dense first stages against the libraries they wrap, on SciFact.

``python -m benchmarks.bench_retrieval [--dataset DIR] [--docs N] [--queries N] [--vectors FILE]``
prints two tables. BM25 (k=100, documents are title + " " + text, queries from
qrels/test.tsv): ragbench's bm25s-backed index against bm25s called directly (bm25s.tokenize with a
PyStemmer stemmer + ``retrieve``) and rank-bm25's ``BM25Okapi``; only query-side work (tokenize +
retrieve) is timed, index builds are reported separately. Dense: the exact store against a bare
numpy matmul + argpartition on the same vectors, and hnsw search time and recall@10 against exact
search. Document vectors come from ``--vectors`` (an (n_docs, d) .npy, rows in corpus order) or
are random unit 384-d vectors; queries are ``--query-vectors`` or a seeded sample of documents.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "beir" / "scifact"


def load_scifact(
    root: Path, n_docs: int | None, n_queries: int | None
) -> tuple[list[str], list[str], list[str]]:
    """Document ids, document texts (title + " " + text) and test query texts."""
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:n_docs]
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        texts = {q["_id"]: q["text"] for q in map(json.loads, f)}
    lines = (root / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    test_ids = list(dict.fromkeys(line.split("\t")[0] for line in lines))[:n_queries]
    ids = [d["_id"] for d in docs]
    return ids, [f"{d['title']} {d['text']}" for d in docs], [texts[q] for q in test_ids]


def best_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Fastest of ``repeat`` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench_bm25(
    ids: list[str], texts: list[str], queries: list[str], k: int, repeat: int
) -> list[tuple[str, float, float]]:
    """(label, build seconds, query seconds) for ragbench, bm25s and rank-bm25."""
    import bm25s
    import rank_bm25
    import Stemmer

    from ragbench.index.sparse import BM25Config, BM25Index
    from ragbench.text.tokenize import WordTokenizer

    k = min(k, len(ids))
    config = BM25Config()

    def build_ragbench() -> BM25Index:
        index = BM25Index(config)
        index.add(ids, texts)
        index.search(queries[:1], 1)  # the index is built lazily on first search
        return index

    t_build, index = best_time(build_ragbench, 1)
    t_query, _ = best_time(lambda: index.search(queries, k), repeat)
    rows = [("ragbench bm25 (bm25s backend)", t_build, t_query)]

    stemmer = Stemmer.Stemmer("english")

    def build_bm25s() -> bm25s.BM25:
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        retriever = bm25s.BM25(k1=config.k1, b=config.b, method=config.variant)
        retriever.index(tokens, show_progress=False)
        return retriever

    def query_bm25s(retriever: bm25s.BM25) -> object:
        tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(tokens, k=k, show_progress=False)

    t_build, retriever = best_time(build_bm25s, 1)
    t_query, _ = best_time(lambda: query_bm25s(retriever), repeat)
    rows.append(("bm25s direct", t_build, t_query))

    tokenizer = WordTokenizer(config.tokenizer)
    t_build, okapi = best_time(
        lambda: rank_bm25.BM25Okapi(tokenizer.tokenize_many(texts), k1=config.k1, b=config.b), 1
    )

    def query_rank_bm25() -> list[np.ndarray]:
        out = []
        for terms in tokenizer.tokenize_many(queries):
            scores = okapi.get_scores(terms)
            top = np.argpartition(scores, len(scores) - k)[-k:]
            out.append(top[np.argsort(-scores[top])])
        return out

    t_query, _ = best_time(query_rank_bm25, 1)
    rows.append(("rank-bm25 BM25Okapi", t_build, t_query))
    return rows


def dense_data(
    n_docs: int, vectors: Path | None, query_vectors: Path | None, n_queries: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """Unit document and query vectors, and a note on where they came from."""
    rng = np.random.default_rng(0)
    if vectors is not None:
        docs = np.load(vectors).astype(np.float32)[:n_docs]
        note = f"document vectors from {vectors}"
    else:
        docs = rng.normal(size=(n_docs, 384)).astype(np.float32)
        note = "random unit 384-d vectors (no --vectors given)"
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    if query_vectors is not None:
        queries = np.load(query_vectors).astype(np.float32)[:n_queries]
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        note += f"; query vectors from {query_vectors}"
    else:
        queries = docs[rng.choice(len(docs), size=min(n_queries, len(docs)), replace=False)]
        note += "; queries: a seeded sample of the document vectors"
    return docs, queries, note


def bench_dense(
    ids: list[str], docs: np.ndarray, queries: np.ndarray, k: int, repeat: int
) -> tuple[list[tuple[str, float, float]], float]:
    """(label, build seconds, query seconds) for exact, numpy and hnsw; hnsw recall@10."""
    from ragbench.index.dense import ExactStore, HnswStore

    k = min(k, len(ids))

    def numpy_top_k() -> np.ndarray:
        scores = queries @ docs.T
        top = np.argpartition(scores, scores.shape[1] - k, axis=1)[:, -k:]
        order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    def build(store_cls: type) -> object:
        store = store_cls()
        store.add(ids, docs)
        return store

    t_numpy, _ = best_time(numpy_top_k, repeat)
    t_build, exact = best_time(lambda: build(ExactStore), 1)
    t_exact, _ = best_time(lambda: exact.search(queries, k), repeat)
    t_hbuild, hnsw = best_time(lambda: build(HnswStore), 1)
    t_hnsw, _ = best_time(lambda: hnsw.search(queries, k), repeat)
    rows = [
        ("numpy matmul + argpartition", 0.0, t_numpy),
        ("ragbench exact (cosine)", t_build, t_exact),
        ("ragbench hnsw (defaults)", t_hbuild, t_hnsw),
    ]
    return rows, hnsw.recall_against_exact(queries, 10)


def print_table(title: str, rows: list[tuple[str, float, float]], reference: int) -> None:
    """Rows with their query-time speed relative to ``rows[reference]`` (>1: faster)."""
    print(f"{title} (speed relative to {rows[reference][0]})")
    print(f"{'implementation':<34}{'build s':>9}{'query s':>10}{'speed':>9}")
    for label, build, query in rows:
        print(f"{label:<34}{build:>9.3f}{query:>10.4f}{rows[reference][2] / query:>8.2f}x")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--docs", type=int, default=None, help="use the first N documents")
    parser.add_argument("--queries", type=int, default=None, help="use the first N test queries")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--vectors", type=Path, default=None)
    parser.add_argument("--query-vectors", type=Path, default=None)
    args = parser.parse_args(argv)

    ids, texts, queries = load_scifact(args.dataset, args.docs, args.queries)
    print(f"{args.dataset.name}: {len(ids)} documents, {len(queries)} test queries, k={args.k}")
    rows = bench_bm25(ids, texts, queries, args.k, args.repeat)
    print_table("BM25 (lucene, k1=1.2, b=0.75); query s = tokenize + retrieve", rows, 1)
    ours, direct, reference = (r[2] for r in rows)
    print(f"ragbench vs bm25s: {direct / ours:.2f}x (target >= 0.9x)")
    print(f"ragbench vs rank-bm25: {reference / ours:.1f}x (target >= 50x)")
    print()

    docs, query_vectors, note = dense_data(len(ids), args.vectors, args.query_vectors, len(queries))
    rows, recall = bench_dense(ids, docs, query_vectors, args.k, args.repeat)
    print(f"dense: {note}")
    print_table(f"dense search, {len(query_vectors)} queries", rows, 0)
    print(f"ragbench exact vs numpy: {rows[0][2] / rows[1][2]:.2f}x (target >= 0.8x)")
    print(f"hnsw recall@10 vs exact: {recall:.4f} (target >= 0.99; on {note.split(';')[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
