"""The cross-encoder path: run experiments/scifact-rerank.yaml end to end with a local
cross-encoder, and measure rerank latency per query at 20, 50 and 100 candidates.

No trained cross-encoder installs offline, so both models are randomly initialised (see
``benchmarks.models``): their nDCG is meaningless, only the latency is real. BEIR's BM25+CE
(SciFact nDCG@10 0.688 with cross-encoder/ms-marco-MiniLM-L-6-v2) cannot be reproduced here;
with the model available the one command is ``ragbench run experiments/scifact-rerank.yaml``.

1. Proof of the path: scifact-rerank.yaml with ``sweep.reranker[1].model=<tiny BERT
   cross-encoder>`` on the first ``--proof-queries`` test queries.
2. Latency: the same config with a cross-encoder of ms-marco-MiniLM-L-6-v2's architecture and
   ``candidates: [20, 50, 100]`` (BM25 first stage) on the first ``--queries`` test queries;
   the figures are the run's ``latency.rerank.p50_ms`` / ``p95_ms`` columns (one query at a
   time, the model loaded by an untimed call first).

``python -m benchmarks.bench_rerank [--queries N] [--tiny] [--runs DIR] [--cache DIR]``;
``measure()`` returns the figures as a dict. Rerank stages are cached like every stage: a
rerun with the same model files reports the latency measured when the stage was first built
(``fresh`` says which).

``PROOF`` and ``LATENCY`` draw its two RESULTS.md sections.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.bench_quality import BEIR_BM25_CE
from benchmarks.models import local_model
from benchmarks.render import Figures, Lines, num, part, relative, table
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import dry_run, run
from ragbench.index.cache import default_cache_root

REPO = Path(__file__).resolve().parents[1]
RERANK_CONFIG = REPO / "experiments" / "scifact-rerank.yaml"
CANDIDATES = (20, 50, 100)


def _run(
    overrides: list[str], out: Path, queries: int, cache_root: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run scifact-rerank.yaml with ``overrides``; (trials table, dry run taken before)."""
    config = load_config(RERANK_CONFIG, overrides)
    before = dry_run(config, queries, cache_root)
    result = run(
        config, out, overwrite=True, limit_queries=queries, cache_root=cache_root, progress=False
    )
    return result.trials, before


def _fresh(before: pd.DataFrame, trial_id: str) -> bool:
    """Whether the trial's rerank stage was missing from the cache before the run."""
    row = before[before["trial_id"] == trial_id]
    return bool(len(row)) and "rerank" in str(row["missing"].iloc[0])


def measure(
    queries: int = 30,
    proof_queries: int = 50,
    candidates: Sequence[int] = CANDIDATES,
    tiny: bool = False,
    runs: Path = REPO / "runs" / "bench",
    cache_root: Path | str | None = None,
    dataset: str | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Both runs; ``tiny`` measures latency with the tiny model instead of the MiniLM-sized
    one. ``dataset`` replaces the config's dataset path (e.g. ``demo``); ``extra`` are more
    ``key.path=value`` overrides for both runs."""
    root = str(cache_root or default_cache_root())
    tiny_model = local_model("tiny-cross-encoder", root)
    name = "tiny-cross-encoder" if tiny else "random-ms-marco-MiniLM-L-6-v2"
    latency_model = local_model(name, root)
    base = [*([f"dataset.path={json.dumps(dataset)}"] if dataset else []), *extra]

    proof, _ = _run(
        [*base, f"sweep.reranker[1].model={json.dumps(str(tiny_model))}"],
        runs / "scifact-rerank-tiny",
        proof_queries,
        root,
    )
    proof_rows = [
        {
            "reranker": "tiny cross-encoder (random)"
            if row.get("param.reranker.kind") == "cross_encoder"
            else "none (BM25 only)",
            "status": row["status"],
            "ndcg@10": row.get("ndcg@10"),
            "recall@100": row.get("recall@100"),
            "rerank_p50_ms": row.get("latency.rerank.p50_ms"),
        }
        for _, row in proof.iterrows()
    ]

    latency, before = _run(
        [
            *base,
            "name=scifact-rerank-latency",
            f"sweep.reranker[1].model={json.dumps(str(latency_model))}",
            f"sweep.reranker[1].candidates={json.dumps(list(candidates))}",
        ],
        runs / "scifact-rerank-latency",
        queries,
        root,
    )
    reranked = latency[latency["param.reranker.kind"] == "cross_encoder"]
    rows = []
    for _, row in reranked.sort_values("param.reranker.candidates").iterrows():
        p50 = float(row.get("latency.rerank.p50_ms", float("nan")))
        rows.append(
            {
                "candidates": int(row["param.reranker.candidates"]),
                "status": row["status"],
                "p50_ms": p50,
                "p95_ms": float(row.get("latency.rerank.p95_ms", float("nan"))),
                "pairs_per_s": int(row["param.reranker.candidates"]) / (p50 / 1000.0),
                "bm25_p50_ms": float(row.get("latency.bm25.p50_ms", float("nan"))),
                "fresh": _fresh(before, row["trial_id"]),
            }
        )
    return {
        "config": str(RERANK_CONFIG.relative_to(REPO)),
        "proof_model": str(tiny_model),
        "proof_queries": int(proof["queries"].iloc[0]) if len(proof) else 0,
        "proof_run": relative(runs / "scifact-rerank-tiny"),
        "proof": proof_rows,
        "latency_model": name,
        "latency_queries": int(latency["queries"].iloc[0]) if len(latency) else 0,
        "latency_run": relative(runs / "scifact-rerank-latency"),
        "latency": rows,
        "dataset": dataset or "scifact (config)",
    }


# ---------------------------------------------------------------- RESULTS.md


def draw_proof(section: Figures) -> Lines:
    """scifact-rerank.yaml end to end with a tiny random cross-encoder."""
    rows = [
        (
            r["reranker"],
            r["status"],
            num(r["ndcg@10"]),
            num(r["recall@100"]),
            num(r["rerank_p50_ms"], 1),
        )
        for r in section["proof"]
    ]
    return [
        f"`{section['config']}` ran end to end with "
        f"`--set sweep.reranker[1].model=<tiny random BERT cross-encoder>` on the first "
        f"{section['proof_queries']} test queries (run directory `{section['proof_run']}`):",
        "",
        table(["reranker", "status", "nDCG@10", "recall@100", "rerank p50 ms"], rows),
        "",
        "**The reranked nDCG is meaningless**: no trained cross-encoder installs offline, so the "
        "models here have random weights; only their latency is real. BEIR's BM25+CE "
        f"(SciFact nDCG@10 {BEIR_BM25_CE}, cross-encoder/ms-marco-MiniLM-L-6-v2 over BM25 top 100) "
        "cannot be reproduced offline here. With the model available the one command is "
        "`ragbench run experiments/scifact-rerank.yaml`.",
    ]


LATENCY_HEADERS = (
    "candidates",
    "rerank p50 ms",
    "rerank p95 ms",
    "pairs/s at p50",
    "BM25 p50 ms",
    "status",
    "measured",
)
RANDOM_WEIGHTS = (
    "Random weights: the ranking quality of this model is meaningless; the latency is real "
    "(it depends on the architecture and input lengths, not on the weights). A rerank stage "
    'found in the stage cache ("measured: stage cache") reports the latency measured when '
    "it was first built, by this benchmark's code (`python -m benchmarks.bench_rerank` or an "
    "earlier `--full`); delete those artifacts or use a fresh `--cache` to measure again."
)


def draw_latency(section: Figures) -> Lines:
    """Rerank latency per query at each candidate count."""
    rows = [
        (
            num(r["candidates"]),
            num(r["p50_ms"], 1),
            num(r["p95_ms"], 1),
            num(r["pairs_per_s"], 0),
            num(r["bm25_p50_ms"], 2),
            r["status"],
            "this run" if r["fresh"] else "stage cache",
        )
        for r in section["latency"]
    ]
    if section["latency_model"] == "tiny-cross-encoder":
        model = "`tiny-cross-encoder` (randomly initialised BERT, hidden 32, 2 layers; tiny run)"
    else:
        model = (
            f"`{section['latency_model']}` (randomly initialised; the architecture of "
            "cross-encoder/ms-marco-MiniLM-L-6-v2: BERT, hidden 384, 6 layers, 12 heads, "
            "intermediate 1536, max length 512)"
        )
    return [
        f"{model}, reranking BM25's top candidates for the first "
        f"{section['latency_queries']} SciFact test queries, one query at a time "
        f"(run directory `{section['latency_run']}`, columns `latency.rerank.p50_ms` / `p95_ms`).",
        "",
        table(LATENCY_HEADERS, rows),
        "",
        RANDOM_WEIGHTS,
    ]


PROOF = part("rerank", "Cross-encoder reranking path (scifact-rerank.yaml)", draw_proof)
LATENCY = part("rerank", "Cross-encoder latency per query", draw_latency)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=30, help="queries for the latency run")
    parser.add_argument("--proof-queries", type=int, default=50)
    parser.add_argument("--candidates", type=int, nargs="+", default=list(CANDIDATES))
    parser.add_argument("--tiny", action="store_true", help="tiny model for the latency run too")
    parser.add_argument("--dataset", default=None, help="replace the config's dataset path")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "bench")
    parser.add_argument("--cache", type=Path, default=None, help="stage cache root")
    parser.add_argument("--set", action="append", default=[], help="KEY.PATH=VALUE override")
    args = parser.parse_args(argv)
    m = measure(
        args.queries,
        args.proof_queries,
        args.candidates,
        args.tiny,
        args.runs,
        args.cache,
        args.dataset,
        args.set,
    )
    print(f"{m['config']} with a tiny random cross-encoder, {m['proof_queries']} queries")
    print("(random weights: the nDCG says nothing about a trained reranker)")
    for row in m["proof"]:
        print(f"  {row['reranker']:<30} {row['status']:<7} nDCG@10 {row['ndcg@10']:.4f}")
    print(f"rerank latency, {m['latency_model']}, {m['latency_queries']} queries, BM25 first stage")
    print(f"{'candidates':>10}{'p50 ms':>10}{'p95 ms':>10}{'pairs/s':>10}  measured")
    for row in m["latency"]:
        when = "this run" if row["fresh"] else "stage cache"
        print(
            f"{row['candidates']:>10}{row['p50_ms']:>10.1f}{row['p95_ms']:>10.1f}"
            f"{row['pairs_per_s']:>10.0f}  {when}"
        )
    return 0 if all(r["status"] == "ok" for r in [*m["proof"], *m["latency"]]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
