"""The dry run's estimate against the cold run it estimates, on SciFact.

``ragbench run --dry-run`` (``ragbench.experiment.runner.dry_run``) estimates each trial's cost
from the stage cache and throughput it measures on the spot. This benchmark estimates a sweep
(BM25, dense MiniLM int8 and their RRF hybrid on whole abstracts) over an empty cache, then
runs it cold in a fresh process over another empty cache, and reports both per trial and in
total: the estimate should be within 2× of the run.

``python -m benchmarks.bench_estimate [--queries N]``; ``measure()`` returns the figures.

``ESTIMATE`` draws its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import bench_quality
from benchmarks.render import Figures, Lines, num, part, table

INT8 = {
    "kind": "sentence-transformers",
    "model": "all-MiniLM-L6-v2",
    "backend": "onnx",
    "quantize": "int8",
}


def sweep_config(dataset: Path, embedder: dict[str, Any], queries: int | None) -> dict[str, Any]:
    """BM25, dense and hybrid RRF on whole documents."""
    return {
        "name": "estimate",
        "dataset": {"path": str(dataset)},
        "evaluation": {"metrics": ["ndcg@10", "recall@100"], "depth": 100},
        "sweep": {
            "chunker": [{"kind": "none"}],
            "embedder": [embedder],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}, {"kind": "hybrid"}],
        },
        **({"latency": {"queries": min(queries, 50)}} if queries else {}),
    }


def _cold(config: dict[str, Any], out: Path, cache: Path, limit: int | None) -> dict[str, Any]:
    """The sweep run cold in this process: its wall time and per-trial seconds."""
    from ragbench.experiment.runner import run

    started = time.perf_counter()
    done = run(config, out, cache_root=cache, progress=False, limit_queries=limit)
    wall = time.perf_counter() - started
    trials = done.trials.set_index("label")["seconds"].to_dict()
    return {"wall_s": wall, "manifest_s": float(done.manifest["seconds"]), "trials": trials}


def measure(
    dataset: Path = bench_quality.SCIFACT,
    embedder: dict[str, Any] = INT8,
    queries: int | None = None,
    work: Path | None = None,
) -> dict[str, Any]:
    """Estimated and measured seconds per trial and in total, each over an empty cache."""
    from ragbench.experiment.runner import dry_run

    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-bench-estimate-") as tmp:
            return measure(dataset, embedder, queries, Path(tmp))
    config = sweep_config(dataset, embedder, queries)
    started = time.perf_counter()
    planned = dry_run(config, queries, cache_root=work / "planned")
    dry_s = time.perf_counter() - started
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        cold = pool.submit(_cold, config, work / "run", work / "cold", queries).result()
    rows = [
        {
            "label": str(r["label"]),
            "work": str(r["work"]),
            "estimated_s": float(r["estimated_s"]),
            "measured_s": float(cold["trials"][r["label"]]),
        }
        for r in planned.to_dict("records")
    ]
    estimated = sum(r["estimated_s"] for r in rows)
    return {
        "dataset": dataset.name,
        "queries": queries,
        "dry_run_s": dry_s,
        "rows": rows,
        "estimated_s": estimated,
        "measured_s": cold["manifest_s"],
        "wall_s": cold["wall_s"],
        "ratio": estimated / cold["manifest_s"],
    }


# ---------------------------------------------------------------- RESULTS.md


def draw(section: Figures) -> Lines:
    """The dry run's estimate per trial against the cold run's time."""
    s = section
    rows = [
        (r["label"], r["work"], num(r["estimated_s"], 1), num(r["measured_s"], 1))
        for r in s["rows"]
    ]
    within = 0.5 <= s["ratio"] <= 2
    return [
        f"`ragbench run --dry-run` on a {s['dataset']} sweep (whole abstracts: BM25, dense "
        "MiniLM int8 and their RRF hybrid) over an empty stage cache, then the same sweep run "
        "cold in a fresh process over another empty cache. The dry run computes the chunkings, "
        "loads each model and times it on a sample of the texts it will embed; a stage trials "
        f"share is counted for the first. The dry run itself took {s['dry_run_s']:.0f} s.",
        "",
        table(["trial", "work the dry run found", "estimated (s)", "measured (s)"], rows),
        "",
        f"Total: estimated {s['estimated_s']:.0f} s, measured {s['measured_s']:.0f} s "
        f"(the trials; {s['wall_s']:.0f} s with loading the data): estimate / measured "
        f"{s['ratio']:.2f}, target within 2× {'✓' if within else '✗'}.",
    ]


ESTIMATE = part("estimate", "Dry-run estimate against the cold run", draw)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=None)
    args = parser.parse_args(argv)
    print(json.dumps(measure(queries=args.queries), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
