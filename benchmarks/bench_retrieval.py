"""Time ragbench's BM25 and dense first stages against the libraries they wrap, on SciFact.

``python -m benchmarks.bench_retrieval [--dataset DIR] [--docs N] [--queries N] [--vectors FILE]``
prints two tables. BM25 (k=100, documents are title + " " + text, queries from
qrels/test.tsv): ragbench's bm25s-backed index against bm25s called directly (bm25s.tokenize with a
PyStemmer stemmer + ``retrieve``) and rank-bm25's ``BM25Okapi``; only query-side work (tokenize +
retrieve) is timed, index builds are reported separately. Dense: the exact store against a bare
numpy matmul + argpartition on the same vectors, and hnsw search time and recall@10 against exact
search. Document vectors come from ``--vectors`` (an (n_docs, d) .npy, rows in corpus order),
else from the stage cache when a finished ``scifact-reproduce`` / ``scifact`` run embedded SciFact
with MiniLM (document and test-query vectors, found through the library's stage keys), else they
are random unit 384-d vectors; queries are ``--query-vectors``, the cached query vectors, or a
seeded sample of documents. ``measure()`` returns the figures as a dict; ``main()`` prints them.

``LIBRARIES`` draws RESULTS.md's comparison with the libraries ragbench wraps, with the
rows of ``bench_metrics`` and ``bench_embed``.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import bench_metrics
from benchmarks.render import Figures, Lines, Part, met, num, ratio, status, table
from benchmarks.timing import best_time

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = REPO.parent / "shared" / "datasets" / "beir" / "scifact"
VECTOR_CONFIGS = (
    REPO / "experiments" / "scifact-reproduce.yaml",
    REPO / "experiments" / "scifact.yaml",
)


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


def _unit(vectors: np.ndarray) -> np.ndarray:
    out = np.array(vectors, dtype=np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def dense_data(
    n_docs: int | None,
    vectors: np.ndarray | Path | None,
    query_vectors: np.ndarray | Path | None,
    n_queries: int,
    source: str | None = None,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Unit document and query vectors, and a note on where they came from.

    ``vectors`` / ``query_vectors`` are arrays or ``.npy`` paths (rows in corpus / query
    order); without document vectors, random unit 384-d vectors stand in; without query
    vectors, a seeded sample of the document vectors does. ``source`` names given arrays.
    """
    rng = np.random.default_rng(0)
    if vectors is not None:
        where = source or (str(vectors) if isinstance(vectors, Path) else "the given array")
        loaded = np.load(vectors) if isinstance(vectors, Path) else vectors
        docs = _unit(loaded[:n_docs])
        note = f"document vectors from {where}"
    else:
        docs = _unit(rng.normal(size=(n_docs or 1000, 384)))
        note = "random unit 384-d vectors (no real vectors given)"
    if query_vectors is not None:
        loaded = np.load(query_vectors) if isinstance(query_vectors, Path) else query_vectors
        queries = _unit(loaded[:n_queries])
        note += "; query vectors from " + (
            str(query_vectors) if isinstance(query_vectors, Path) else source or "the given array"
        )
    else:
        queries = docs[rng.choice(len(docs), size=min(n_queries, len(docs)), replace=False)]
        note += "; queries: a seeded sample of the document vectors"
    return docs, queries, note


def cached_minilm_vectors(
    configs: Sequence[Path] = VECTOR_CONFIGS, cache_root: Path | str | None = None
) -> tuple[np.ndarray, np.ndarray, str] | None:
    """SciFact's MiniLM document and test-query vectors from the stage cache, if present.

    The keys come from the library (the plan of the config's exact dense trial), so the
    vectors are the ones a finished ``scifact-reproduce`` / ``scifact`` run embedded; nothing is
    computed here. Returns (document vectors in corpus order, query vectors in qrels order,
    a note naming the config), or None when no config's vectors are cached.
    """
    from ragbench.experiment.config import expand, load_config
    from ragbench.experiment.trial import RunSpec, context
    from ragbench.index.cache import default_cache_root
    from ragbench.retrieve.execution import Execution

    root = str(cache_root or default_cache_root())
    for path in configs:
        if not path.is_file():
            continue
        config = load_config(path)
        if not Path(config.dataset_path()).exists():
            continue
        trials = [t for t in expand(config) if t["retriever"].kind == "dense"]
        if not trials:
            continue
        ctx = context(RunSpec(config, None, root))
        plan = ctx.plan(trials[0])
        wanted = [plan.stages[s] for s in ("chunks", "doc_vectors", "query_vectors")]
        if not all(ctx.cache.has(s.area, s.key) for s in wanted):
            continue
        cached = Execution(plan, ctx.env, ctx.cache)  # loads; nothing is embedded
        docs, queries = cached["doc_vectors"], cached["query_vectors"]
        note = f"the stage cache of {path.name} (MiniLM)"
        return np.asarray(docs, dtype=np.float32), queries.vectors, note
    return None


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


def print_table(title: str, rows: list[dict[str, Any]], reference: int) -> None:
    """Rows with their query-time speed relative to ``rows[reference]`` (>1: faster)."""
    ref = rows[reference]
    print(f"{title} (speed relative to {ref['label']})")
    print(f"{'implementation':<34}{'build s':>9}{'query s':>10}{'speed':>9}")
    for row in rows:
        speed = ref["query_s"] / row["query_s"]
        print(f"{row['label']:<34}{row['build_s']:>9.3f}{row['query_s']:>10.4f}{speed:>8.2f}x")


def _rows(rows: list[tuple[str, float, float]]) -> list[dict[str, Any]]:
    return [{"label": label, "build_s": b, "query_s": q} for label, b, q in rows]


def measure(
    dataset: Path = DEFAULT_DATASET,
    n_docs: int | None = None,
    n_queries: int | None = None,
    k: int = 100,
    repeat: int = 10,
    vectors: np.ndarray | Path | None = None,
    query_vectors: np.ndarray | Path | None = None,
    vector_source: str | None = None,
) -> dict[str, Any]:
    """BM25 and dense timings on ``dataset``; returns rows and the speed ratios.

    ``bm25`` rows are ragbench, bm25s direct, rank-bm25 (query s = tokenize + retrieve);
    ``dense`` rows are numpy, ragbench exact, ragbench hnsw. Ratios are query-time speed
    (>1: ragbench faster): ``bm25_vs_bm25s``, ``bm25_vs_rank_bm25``, ``exact_vs_numpy``,
    ``hnsw_vs_exact``; ``hnsw_recall_at_10`` is hnsw's recall@10 against exact search.
    """
    ids, texts, queries = load_scifact(dataset, n_docs, n_queries)
    bm25 = _rows(bench_bm25(ids, texts, queries, k, repeat))
    ours, direct, reference = (r["query_s"] for r in bm25)
    n_dense = n_docs if n_docs is not None or vectors is not None else len(ids)
    docs, query_vecs, note = dense_data(
        n_dense, vectors, query_vectors, len(queries), vector_source
    )
    rows, recall = bench_dense([f"d{i}" for i in range(len(docs))], docs, query_vecs, k, repeat)
    dense = _rows(rows)
    return {
        "dataset": dataset.name,
        "documents": len(ids),
        "queries": len(queries),
        "k": k,
        "bm25": bm25,
        "bm25_vs_bm25s": direct / ours,
        "bm25_vs_rank_bm25": reference / ours,
        "dense_documents": len(docs),
        "dense_queries": len(query_vecs),
        "dense_note": note,
        "real_vectors": vectors is not None,
        "dense": dense,
        "exact_vs_numpy": dense[0]["query_s"] / dense[1]["query_s"],
        "hnsw_vs_exact": dense[1]["query_s"] / dense[2]["query_s"],
        "hnsw_recall_at_10": float(recall),
    }


# ---------------------------------------------------------------- RESULTS.md

# Targets printed next to the figures (ratio: >1 means ragbench faster).
TARGETS = {"bm25_vs_bm25s": 0.9, "bm25_vs_rank_bm25": 50.0, "exact_vs_numpy": 0.8, "recall": 0.99}
LIBRARY_HEADERS = (
    "measurement",
    "ragbench",
    "reference",
    "ratio (>1: ragbench faster)",
    "target",
    "met",
)
TITLES = {  # the sections this part reads, as the overview names them
    "retrieval": "Retrieval vs bm25s / rank-bm25 / numpy",
    "metrics": "Metrics vs pytrec_eval",
    "embed": "Embedding throughput",
}


def _against(label: str, ours: str, reference: str, value: float, target: str, key: str) -> tuple:
    """A speed comparison with its target."""
    return (label, ours, reference, ratio(value), target, met(value, TARGETS[key]))


def library_rows(r: Figures) -> list[tuple[str, ...]]:
    """BM25 against bm25s and rank-bm25, exact against numpy, hnsw against exact."""
    ours, direct, okapi = (row["query_s"] for row in r["bm25"])
    numpy_s, exact_s, hnsw_s = (row["query_s"] for row in r["dense"])
    bm25, dense = f"BM25 search, {r['queries']} queries", f"{r['dense_queries']} queries"
    return [
        _against(
            f"{bm25} (tokenize + retrieve, s)",
            num(ours),
            f"bm25s {num(direct)}",
            r["bm25_vs_bm25s"],
            "≥ 0.9x",
            "bm25_vs_bm25s",
        ),
        _against(
            f"{bm25} (s)",
            num(ours),
            f"rank-bm25 {num(okapi)}",
            r["bm25_vs_rank_bm25"],
            "≥ 50x",
            "bm25_vs_rank_bm25",
        ),
        _against(
            f"exact dense search, {dense} (s)",
            num(exact_s),
            f"numpy {num(numpy_s)}",
            r["exact_vs_numpy"],
            "≥ 0.8x",
            "exact_vs_numpy",
        ),
        (
            f"hnsw search, {dense} (s)",
            num(hnsw_s),
            f"ragbench exact {num(exact_s)}",
            ratio(r["hnsw_vs_exact"]),
            "–",
            "–",
        ),
        (
            "hnsw recall@10 against exact",
            num(r["hnsw_recall_at_10"]),
            "–",
            "–",
            "≥ 0.99",
            met(r["hnsw_recall_at_10"], TARGETS["recall"]),
        ),
    ]


def library_note(r: Figures) -> str:
    """What the retrieval rows measured."""
    builds = ", ".join(f"{row['label']} {row['build_s']:.2f} s" for row in r["bm25"])
    random = (
        "" if r["real_vectors"] else " — **random vectors**: hnsw recall on real embeddings differs"
    )
    return (
        f"BM25 over {num(r['documents'])} {r['dataset']} documents, k={r['k']}; index builds (not "
        f"in the ratios): {builds}. Dense vectors: {r['dense_note']}{random}."
    )


def draw_libraries(sections: Mapping[str, Figures]) -> Lines:
    """ragbench's BM25, dense search, metrics and embedder against the libraries they wrap."""
    from benchmarks import bench_embed  # it imports this module

    measured = {k: s for k in TITLES if (s := sections.get(k)) and not status(s)}
    rows = [
        *(library_rows(measured["retrieval"]) if "retrieval" in measured else []),
        *(bench_metrics.library_rows(measured["metrics"]) if "metrics" in measured else []),
        *(bench_embed.library_rows(measured["embed"]) if "embed" in measured else []),
    ]
    notes = [
        f"{title}: {status(sections.get(k))}" for k, title in TITLES.items() if k not in measured
    ]
    if "retrieval" in measured:
        notes.append(library_note(measured["retrieval"]))
    if "embed" in measured:
        notes.append(bench_embed.library_note(measured["embed"]))
    lines = [table(LIBRARY_HEADERS, rows) if rows else "_No comparison was measured in this run._"]
    return [*lines, "", *(f"- {n}" for n in notes)] if notes else lines


LIBRARIES = Part("### Against the libraries ragbench wraps", tuple(TITLES), draw_libraries)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--docs", type=int, default=None, help="use the first N documents")
    parser.add_argument("--queries", type=int, default=None, help="use the first N test queries")
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--vectors", type=Path, default=None)
    parser.add_argument("--query-vectors", type=Path, default=None)
    parser.add_argument(
        "--random-vectors",
        action="store_true",
        help="do not look for cached SciFact MiniLM vectors (random vectors unless --vectors)",
    )
    args = parser.parse_args(argv)

    vectors, query_vectors, source = args.vectors, args.query_vectors, None
    if vectors is None and not args.random_vectors:
        found = cached_minilm_vectors()
        if found is not None:
            vectors, cached_queries, source = found
            query_vectors = query_vectors if query_vectors is not None else cached_queries
    m = measure(
        args.dataset, args.docs, args.queries, args.k, args.repeat, vectors, query_vectors, source
    )
    print(f"{m['dataset']}: {m['documents']} documents, {m['queries']} test queries, k={m['k']}")
    print_table("BM25 (lucene, k1=1.2, b=0.75); query s = tokenize + retrieve", m["bm25"], 1)
    print(f"ragbench vs bm25s: {m['bm25_vs_bm25s']:.2f}x (target >= 0.9x)")
    print(f"ragbench vs rank-bm25: {m['bm25_vs_rank_bm25']:.1f}x (target >= 50x)")
    print()
    print(f"dense: {m['dense_note']}")
    print_table(f"dense search, {m['dense_queries']} queries", m["dense"], 0)
    print(f"ragbench exact vs numpy: {m['exact_vs_numpy']:.2f}x (target >= 0.8x)")
    print(
        f"hnsw recall@10 vs exact: {m['hnsw_recall_at_10']:.4f} (target >= 0.99; on "
        f"{m['dense_note'].split(';')[0]})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
