"""Quality runs through ragbench's own configs and runner: the SciFact reproduction and (when
present) the tuned SciFact sweep with honest selection, and what the other quality benchmarks
(``bench_chunking``, ``bench_prf``, ``bench_agreement``) share: running a config, tiny slices.

Every function runs an experiment file from ``experiments/`` with ``ragbench.run`` into a run
directory (``--runs``, default ``runs/bench``) and reads its figures back from that directory;
the stage cache makes reruns cheap. ``dry_run`` is taken first, so each result says which
stages were already cached and which this run rebuilt.

* ``scifact_reproduce(full=False)``: scifact-reproduce.yaml restricted to its BM25 trial (an
  override of ``sweep.retriever``); ``full=True`` runs the whole file (BM25, MiniLM exact,
  MiniLM hnsw): hnsw's nDCG@10 loss against exact and the dense search speed-up from
  ``latency.dense.p50_ms``.
* ``tuned()``: experiments/scifact-tuned.yaml if it exists, and its selection table.
* ``tiny_beir`` writes a small slice of a BEIR dataset for ``--tiny``.

``SCIFACT_PART``, ``MEMORY`` and ``TUNED_PART`` draw their RESULTS.md sections, against the
published SciFact references below. ``python -m benchmarks.bench_quality [--full] [--chunking]
[--tuned] [--prf] [--window]`` prints the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from benchmarks.render import Figures, Lines, num, part, provenance, ratio, relative, signed, table
from ragbench.evaluate.significance import paired_test, win_tie_loss
from ragbench.experiment import runner
from ragbench.experiment.config import ExperimentConfig, expand, load_config
from ragbench.experiment.trial import chunk_depth
from ragbench.index.cache import default_cache_root

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
SCIFACT = SHARED / "beir" / "scifact"
CHUNKING_EVAL = SHARED / "chunking_evaluation"
REPRODUCE = REPO / "experiments" / "scifact-reproduce.yaml"
TUNED = REPO / "experiments" / "scifact-tuned.yaml"
RUNS = REPO / "runs" / "bench"
HASHING = {"kind": "hashing"}

# Published SciFact test-split references (not measured here; from the shared datasets README).
ANSERINI_FLAT = {"ndcg@10": 0.6789, "recall@100": 0.9253, "recall@1000": 0.9767}
BEIR_BM25 = {"ndcg@10": 0.665}
BEIR_BM25_CE = 0.688
MTEB_MINILM = {"ndcg@10": 0.64508, "recall@100": 0.925}
MTEB_BGE_SMALL = {"ndcg@10": 0.71273, "recall@100": 0.945}
# The goal for a MiniLM-based configuration selected on train, scored on test.
TUNED_TARGET = {"ndcg@10": 0.74}
SOURCES = {
    "anserini": "Anserini BM25 flat regression (castorini/anserini, beir-v1.0.0-scifact.flat)",
    "beir": "BEIR paper, Table 2 (Thakur et al. 2021)",
    "mteb": "MTEB (embeddings-benchmark/mtebpaper, all-MiniLM-L6-v2/SciFact.json)",
    "mteb_bge": "MTEB results (embeddings-benchmark/results, BAAI__bge-small-en-v1.5/SciFact.json)",
}


# ---------------------------------------------------------------- running configs


def run_config(
    config: ExperimentConfig, out: Path, limit: int | None, cache_root: str
) -> dict[str, Any]:
    """Run ``config`` into ``out`` (overwriting); returns the result, the seconds it took and
    what the stage cache held before."""
    before = runner.dry_run(config, limit, cache_root)
    started = time.perf_counter()
    result = runner.run(
        config, out, overwrite=True, limit_queries=limit, cache_root=cache_root, progress=False
    )
    rebuilt = sorted({s for m in before["missing"] for s in m.split(", ") if s != "-"})
    return {
        "result": result,
        "seconds": time.perf_counter() - started,
        "stages": int(before["stages"].sum()),
        "cached": int(before["cached"].sum()),
        "rebuilt": rebuilt,
    }


def _provenance(done: dict[str, Any]) -> dict[str, Any]:
    """What a results section says about where its numbers come from."""
    return {
        "run": relative(done["result"].path),
        "seconds": done["seconds"],
        "stages": done["stages"],
        "cached": done["cached"],
        "rebuilt": done["rebuilt"],
        "queries": int(done["result"].manifest["queries"]["count"]),
    }


def _raw(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def tiny_overrides(path: Path, dataset: Path, one_chunker: bool = False) -> list[str]:
    """Overrides that point ``path``'s config at a tiny slice, swap every embedder (trial and
    dense reranker) for the hashing embedder and, with ``one_chunker``, keep only the first
    chunker choice."""
    sweep = _raw(path).get("sweep", {})
    out = [f"dataset.path={json.dumps(str(dataset))}"]
    if "embedder" in sweep:
        out.append(f"sweep.embedder={json.dumps([HASHING])}")
    for i, reranker in enumerate(sweep.get("reranker", [])):
        if isinstance(reranker, dict) and reranker.get("kind") == "dense":
            out.append(f"sweep.reranker[{i}].embedder={json.dumps(HASHING)}")
    if one_chunker and len(sweep.get("chunker", [])) > 1:
        out.append(f"sweep.chunker={json.dumps(sweep['chunker'][:1])}")
    return out


# ---------------------------------------------------------------- SciFact


def bm25_only(path: Path = REPRODUCE) -> str:
    """The override that keeps only the config's BM25 retriever(s)."""
    bm25 = [r for r in _raw(path)["sweep"]["retriever"] if r.get("kind") == "bm25"]
    return f"sweep.retriever={json.dumps(bm25)}"


def _system(row: pd.Series) -> str:
    kind = row.get("param.retriever.kind")
    if kind == "dense":
        return f"dense-{row.get('param.retriever.store.kind')}"
    return str(kind)


def scifact_reproduce(
    full: bool = False,
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """scifact-reproduce.yaml (BM25 only unless ``full``); per system its metrics and
    latency, hnsw's loss and speed-up against exact, and the sweep's peak RSS."""
    root = str(cache_root or default_cache_root())
    config = load_config(REPRODUCE, [*overrides, *([] if full else [bm25_only()])])
    done = run_config(config, runs / ("scifact-reproduce" if full else "scifact-bm25"), limit, root)
    trials = done["result"].trials
    metrics = [m.name for m in config.evaluation.metrics]
    systems: dict[str, dict[str, Any]] = {}
    for _, row in trials.iterrows():
        entry = {"label": row["label"], "status": row["status"]}
        entry |= {m: float(row[m]) for m in metrics if m in row and row["status"] == "ok"}
        for stage in ("bm25", "dense", "embed_query", "total"):
            if f"latency.{stage}.p50_ms" in row and pd.notna(row[f"latency.{stage}.p50_ms"]):
                entry[f"{stage}_p50_ms"] = float(row[f"latency.{stage}.p50_ms"])
        systems[_system(row)] = entry
    out = {
        **_provenance(done),
        "full": full,
        "config": relative(REPRODUCE),
        "metrics": metrics,
        "systems": systems,
        "peak_rss_mb": float(trials["peak_rss_mb"].max()),
        "depth": chunk_depth(config, expand(config)[0]),
        "embedder": _embedder(trials),
    }
    exact, hnsw = systems.get("dense-exact"), systems.get("dense-hnsw")
    if exact and hnsw and "ndcg@10" in exact and "ndcg@10" in hnsw:
        out["hnsw_ndcg_loss"] = exact["ndcg@10"] - hnsw["ndcg@10"]
        out["hnsw_speedup"] = exact["dense_p50_ms"] / hnsw["dense_p50_ms"]
    return out


def tiny_beir(src: Path, dst: Path, n_queries: int = 5, n_docs: int = 200) -> Path:
    """A BEIR slice: the first ``n_queries`` queries of every split, the documents they judge
    and the first ``n_docs`` documents of the corpus."""
    splits: dict[str, list[str]] = {}
    keep_queries: set[str] = set()
    judged: set[str] = set()
    (dst / "qrels").mkdir(parents=True, exist_ok=True)
    for qrels in sorted((src / "qrels").glob("*.tsv")):
        lines = qrels.read_text(encoding="utf-8").splitlines()
        wanted = list(dict.fromkeys(line.split("\t")[0] for line in lines[1:]))[:n_queries]
        rows = [line for line in lines[1:] if line.split("\t")[0] in wanted]
        splits[qrels.stem] = wanted
        keep_queries.update(wanted)
        judged.update(line.split("\t")[1] for line in rows)
        (dst / "qrels" / qrels.name).write_text("\n".join([lines[0], *rows]) + "\n", "utf-8")
    corpus = src / "corpus.jsonl.gz"
    opener = gzip.open if corpus.exists() else open
    with opener(corpus if corpus.exists() else src / "corpus.jsonl", "rt", encoding="utf-8") as f:
        docs = [line for n, line in enumerate(f) if n < n_docs or json.loads(line)["_id"] in judged]
    with gzip.open(dst / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(docs))
    with open(src / "queries.jsonl", encoding="utf-8") as f:
        queries = [line for line in f if json.loads(line)["_id"] in keep_queries]
    (dst / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
    return dst


def _embedder(trials: pd.DataFrame) -> str | None:
    """The model (or kind) of the run's embedder."""
    for column in ("param.embedder.model", "param.embedder.kind"):
        if column in trials and trials[column].notna().any():
            return str(trials[column].dropna().iloc[0])
    return None


# ---------------------------------------------------------------- tuned sweep


def tuned(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
    path: Path = TUNED,
) -> dict[str, Any] | None:
    """The tuned sweep and its selection table (None when the config does not exist)."""
    from ragbench.report.report import Report

    if not path.is_file():
        return None
    root = str(cache_root or default_cache_root())
    config = load_config(path, overrides)
    done = run_config(config, runs / "scifact-tuned", limit, root)
    report = Report.from_run(done["result"].path)
    table = report.selection_table()
    trials = done["result"].trials
    return {
        **_provenance(done),
        "config": relative(path),
        "trials": len(trials),
        "failed": int((trials["status"] != "ok").sum()),
        "baseline": report.label(report.baseline),
        "note": report.selection_note(),
        "selection": [] if table is None else table.to_dict(orient="records"),
        "columns": [] if table is None else list(table.columns),
    }


def _paired(base: pd.Series, other: pd.Series) -> dict[str, Any]:
    """Mean difference ``other - base`` over the same queries, its paired permutation p-value
    (10,000 sign flips, seed 0) and wins / ties / losses."""
    base, other = base.sort_index(), other.sort_index()
    if list(base.index) != list(other.index):
        raise ValueError("paired values must cover the same queries")
    wins, ties, losses = win_tie_loss(base.to_numpy(), other.to_numpy())
    return {
        "delta": float(other.mean() - base.mean()),
        "p": paired_test(base.to_numpy(), other.to_numpy(), "permutation").p_value,
        "wins": wins,
        "ties": ties,
        "losses": losses,
    }


# ---------------------------------------------------------------- RESULTS.md

SCIFACT_HEADERS = (
    "system",
    "metric",
    "ours",
    "published",
    "Δ (ours − published)",
    "published source",
)
BM25_LABEL = "BM25 lucene k1=0.9 b=0.4, stem+stop"
BM25_NOTE = (
    "Anserini's flat index and BEIR's paper used different BM25 setups (0.6789 vs 0.665); "
    "ours follows Anserini's settings (lucene BM25, k1=0.9, b=0.4, English stopwords and "
    "stemming, title + text in one field), so the Anserini row is the one to compare against."
)


def _against(label: str, metric: str, ours: float | None, source: str, published: float) -> tuple:
    """One of our figures beside a published one."""
    delta = None if ours is None else ours - published
    return (label, metric, num(ours), num(published), signed(delta), SOURCES[source])


def _hnsw_rows(section: Figures, label: str) -> list[tuple]:
    """hnsw's nDCG loss and dense search speed against exact search."""
    exact, hnsw = section["systems"]["dense-exact"], section["systems"]["dense-hnsw"]
    fresh = "dense" in section["rebuilt"]
    when = "this run" if fresh else "stage cache (measured when first built)"
    return [
        (
            f"{label}, hnsw (defaults)",
            "ndcg@10",
            num(hnsw.get("ndcg@10")),
            "–",
            f"{signed(-section.get('hnsw_ndcg_loss', float('nan')))} vs exact",
            "loss against the exact row above",
        ),
        (
            f"{label}, hnsw vs exact",
            f"dense search p50 ms/query at k={section.get('depth', '?')}",
            f"{num(hnsw.get('dense_p50_ms'), 3)} vs {num(exact.get('dense_p50_ms'), 3)}",
            "–",
            f"speed-up {ratio(section.get('hnsw_speedup'))} (exact ÷ hnsw)",
            f"`latency.dense.p50_ms`, {when}",
        ),
    ]


def draw_scifact(section: Figures) -> Lines:
    """scifact-reproduce.yaml beside Anserini, BEIR and MTEB."""
    systems = section["systems"]
    bm25 = systems.get("bm25", {})
    rows = [
        _against(BM25_LABEL, metric, bm25.get(metric), source, published[metric])
        for metric, published, source in [
            ("ndcg@10", ANSERINI_FLAT, "anserini"),
            ("ndcg@10", BEIR_BM25, "beir"),
            ("recall@100", ANSERINI_FLAT, "anserini"),
            ("recall@1000", ANSERINI_FLAT, "anserini"),
        ]
    ]
    exact, hnsw = systems.get("dense-exact"), systems.get("dense-hnsw")
    embedder = str(section.get("embedder"))
    label = "MiniLM" if "minilm" in embedder.lower() else f"{embedder} embedder"
    if exact:
        rows += [
            _against(f"{label}, exact cosine", m, exact.get(m), "mteb", MTEB_MINILM[m])
            for m in ("ndcg@10", "recall@100")
        ]
    if exact and hnsw:
        rows += _hnsw_rows(section, label)
    lines = [provenance(section), "", table(SCIFACT_HEADERS, rows)]
    if not section["full"]:
        lines += ["", "MiniLM exact and hnsw rows: _skipped (they run with `--full`)_."]
    return [*lines, "", BM25_NOTE]


def draw_memory(section: Figures) -> Lines:
    """The SciFact sweep's peak resident set."""
    rebuilt = set(section["rebuilt"])
    model = (
        "the embedding model was loaded (document or query vectors were rebuilt)"
        if rebuilt & {"doc_vectors", "query_vectors"}
        else "no embedding model was loaded: every vector came from the stage cache"
    )
    return [
        f"{section['peak_rss_mb']:.0f} MB: the largest `peak_rss_mb` in "
        f"`{section['run']}/trials.parquet` "
        "(the process's resident-set high-water mark, `ru_maxrss`, after each trial; this sweep "
        f"runs first in the benchmark process). In this run {model}."
    ]


TUNED_HEADERS = {
    "baseline": "baseline on the report split",
    "delta": "Δ vs baseline",
    "p": "p (paired permutation)",
}
INTERVALS = ("ci_low", "ci_high", "delta_ci_low", "delta_ci_high")


def _selection(section: Figures) -> str:
    """The selection table: per metric the chosen trial, its scores and intervals."""
    columns = [c for c in section["columns"] if c not in INTERVALS]
    headers = [TUNED_HEADERS.get(c, c) for c in columns]
    bounds = []  # the intervals shown, each as its two columns
    if "delta_ci_low" in section["columns"]:
        headers.append("95% CI of Δ (paired bootstrap)")
        bounds.append(("delta_ci_low", "delta_ci_high"))
    if "ci_low" in section["columns"]:
        headers.append("95% CI of the chosen trial's mean (report split)")
        bounds.append(("ci_low", "ci_high"))
    rows = [
        [
            *(
                num(r.get(c)) if isinstance(r.get(c), float) else str(r.get(c, "–"))
                for c in columns
            ),
            *(f"[{num(r.get(low))}, {num(r.get(high))}]" for low, high in bounds),
        ]
        for r in section["selection"]
    ]
    return table(headers, rows) if rows else "_No selection was recorded._"


def _tuned_vs_published(section: Figures) -> Lines:
    """The chosen trials' report-split scores beside the published SciFact references."""
    report_on = "on test"  # the published numbers are of the test split
    if report_on not in section["columns"]:
        return []
    references = [
        ("BM25 (BEIR paper)", BEIR_BM25, SOURCES["beir"]),
        ("BM25 (Anserini flat)", ANSERINI_FLAT, SOURCES["anserini"]),
        ("all-MiniLM-L6-v2 (MTEB)", MTEB_MINILM, SOURCES["mteb"]),
        ("bge-small-en-v1.5, a larger model (MTEB)", MTEB_BGE_SMALL, SOURCES["mteb_bge"]),
    ]
    rows = []
    for record in section["selection"]:
        metric, ours = record.get("metric"), record.get(report_on)
        if not isinstance(ours, float):
            continue
        for name, values, source in references:
            if metric in values:
                delta = ours - values[metric]
                rows.append([metric, name, num(values[metric]), num(ours), f"{delta:+.4f}", source])
        if metric in TUNED_TARGET:
            target = TUNED_TARGET[metric]
            verdict = f"{ours - target:+.4f} ({'met' if ours >= target else 'not met'})"
            goal = "goal: MiniLM-based, selected on train"
            rows.append([metric, goal, num(target), num(ours), verdict, "the issue"])
    if not rows:
        return []
    headers = ["metric", "reference", "published", f"ours ({report_on})", "Δ", "source"]
    return ["", "Against the published SciFact numbers (test split):", "", table(headers, rows)]


def draw_tuned(section: Figures) -> Lines:
    """The tuned sweep's selection and its choice beside the published references."""
    lines = [
        provenance(section),
        "",
        f"{section['trials']} trials ({section['failed']} failed); "
        f"baseline `{section['baseline']}`. {section['note']}",
        "",
        _selection(section),
        *_tuned_vs_published(section),
    ]
    same = [r["metric"] for r in section["selection"] if r.get("chosen") == section["baseline"]]
    if same:
        lines += [
            "",
            f"For {', '.join(same)} the selection chose the baseline itself, so there is no "
            "difference to test.",
        ]
    return lines


SCIFACT_PART = part("scifact", "SciFact (BEIR test split), document level", draw_scifact)
MEMORY = part("scifact", "Peak memory of the SciFact sweep", draw_memory)
TUNED_PART = part("tuned", "Tuned SciFact sweep, honest selection", draw_tuned)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="all of scifact-reproduce.yaml")
    parser.add_argument("--chunking", action="store_true", help="also run chunking.yaml")
    parser.add_argument("--tuned", action="store_true", help="also run scifact-tuned.yaml")
    parser.add_argument("--prf", action="store_true", help="also run scifact-prf.yaml")
    parser.add_argument("--window", action="store_true", help="also run chunking-window.yaml")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], help="KEY.PATH=VALUE override")
    args = parser.parse_args(argv)
    from benchmarks.bench_chunking import chunking, chunking_window  # they import this module
    from benchmarks.bench_prf import prf

    found = scifact_reproduce(args.full, args.runs, args.cache, args.set, args.limit_queries)
    print(json.dumps(found, indent=2, default=str))
    if args.chunking:
        print(json.dumps(chunking(args.runs, args.cache, [], args.limit_queries), indent=2))
    if args.tuned:
        found = tuned(args.runs, args.cache, [], args.limit_queries)
        print(json.dumps(found, indent=2, default=str) if found else f"{TUNED} does not exist")
    if args.prf:
        print(json.dumps(prf(args.runs, args.cache, [], args.limit_queries), indent=2, default=str))
    if args.window:
        found = chunking_window(args.runs, args.cache, [], args.limit_queries)
        print(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
