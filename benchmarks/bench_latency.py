"""Latency you can trust: the same dense sweep measured on a quiet machine and under CPU burners.

The latency pass (``ragbench.experiment.latency``) times a sample of queries one at a time, takes
out of each repeat the time the thread waited for a CPU, keeps the fastest repeat per query and
stage, and records how busy the machine was. This
benchmark measures the same sweep twice in one run — once as the machine is, once with
``burners`` processes spinning on every core — and reports, per trial, the p50 total latency of
both and their difference (target: within 25%).

``python -m benchmarks.bench_latency [--burners N] [--queries N]``; ``measure()`` returns the
figures as a dict.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EMBEDDER = {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}


def sweep_config(dataset: str, embedder: dict[str, Any], queries: int) -> dict[str, Any]:
    """Dense and hybrid retrieval, with and without a dense rerank, on one chunking."""
    return {
        "name": "latency",
        "dataset": {"path": dataset},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": queries, "repeats": 5, "threads": 1},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 400, "overlap": 0}],
            "embedder": [embedder],
            "retriever": [{"kind": "dense"}, {"kind": "hybrid"}],
            "reranker": [
                {"kind": "none"},
                {"kind": "dense", "candidates": 30, "embedder": embedder},
            ],
        },
    }


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def measure(
    dataset: str = "demo",
    burners: int = 2,
    queries: int = 50,
    embedder: dict[str, Any] = EMBEDDER,
    work: Path | None = None,
) -> dict[str, Any]:
    """p50 total latency per trial, quiet and under ``burners`` spinning processes."""
    from ragbench.experiment.runner import run

    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-bench-latency-") as tmp:
            return measure(dataset, burners, queries, embedder, Path(tmp))
    config = sweep_config(dataset, embedder, queries)
    cache = work / "cache"
    quiet = run(config, work / "quiet", cache_root=cache, progress=False, remeasure_latency=True)
    spinning = [
        multiprocessing.get_context("spawn").Process(target=_spin, args=(3600.0,))
        for _ in range(burners)
    ]
    for process in spinning:
        process.start()
    try:
        busy = run(config, work / "busy", cache_root=cache, progress=False, remeasure_latency=True)
    finally:
        for process in spinning:
            process.terminate()
            process.join()
    a, b = quiet.trials.set_index("trial_id"), busy.trials.set_index("trial_id")
    rows = []
    for trial_id in a.index:
        q, s = (
            float(a.loc[trial_id, "latency.total.p50_ms"]),
            float(b.loc[trial_id, "latency.total.p50_ms"]),
        )
        rows.append(
            {
                "label": a.loc[trial_id, "label"],
                "quiet_p50_ms": q,
                "busy_p50_ms": s,
                "difference": s / q - 1,
                "quiet_contention": float(a.loc[trial_id, "latency.contention"]),
                "busy_contention": float(b.loc[trial_id, "latency.contention"]),
                "busy_interrupted": float(b.loc[trial_id, "latency.interrupted"]),
                "busy_waited": float(b.loc[trial_id, "latency.waited"]),
            }
        )
    return {
        "queries": queries,
        "repeats": 5,
        "burners": burners,
        "rows": rows,
        "worst": max(abs(r["difference"]) for r in rows),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_latency")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args(argv)
    found = measure(burners=args.burners, queries=args.queries)
    for row in found["rows"]:
        print(
            f"{row['label'][:70]:<70} quiet {row['quiet_p50_ms']:7.2f} ms  "
            f"busy {row['busy_p50_ms']:7.2f} ms  {row['difference']:+.1%}  "
            f"(contention {row['quiet_contention']:.0%} / {row['busy_contention']:.0%})"
        )
    print(f"worst difference {found['worst']:.1%} (target <= 25%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
