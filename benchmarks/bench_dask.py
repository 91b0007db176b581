"""Dask executor against serial: the same sweep, each from a cold stage cache.

``python -m benchmarks.bench_dask [--dataset DIR] [--limit-queries N] [--workers N]`` runs one
CPU-bound sweep (the demo set: 12 recursive chunkings × BM25, dense and hybrid retrievers over
the ``hashing`` embedder, so every trial chunks, embeds and indexes) three times, each into a
fresh stage cache: serially, on the process pool and on a Dask LocalCluster with ``--workers``
single-threaded worker processes. It prints the wall times (cluster start-up included), the
speed-ups over serial, and whether every executor produced the same trials with the same
metrics. ``measure()`` returns the figures as a dict.

``DASK`` draws its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.render import Figures, Lines, num, part, percent, ratio, table
from benchmarks.timing import best_time
from ragbench.experiment import runner
from ragbench.experiment.latency import cpu_times, other_cpu_share

EXECUTORS = ("serial", "process", "dask")
METRICS = ["ndcg@10", "recall@20"]


def sweep_config(dataset: str, sizes: Sequence[int] = (200, 300, 400, 500, 600, 800)) -> dict:
    """Recursive chunkings of ``sizes`` × overlap 0 / 50 characters; per chunking, BM25 with
    two k1, dense and hybrid (RRF) over the hashing embedder: independent, CPU-bound trials."""
    return {
        "name": "bench-dask",
        "dataset": {"path": dataset},
        "evaluation": {"metrics": METRICS, "depth": 20},
        "sweep": {
            "chunker": [
                {"kind": "recursive", "size": list(sizes), "overlap": [0, 50], "unit": "chars"}
            ],
            "embedder": [{"kind": "hashing", "dim": 384}],
            "retriever": [
                {"kind": "bm25", "k1": [0.9, 1.2]},
                {"kind": "dense"},
                {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 60}},
            ],
        },
    }


def measure(
    dataset: str = "demo",
    limit_queries: int | None = None,
    workers: int = 2,
    work: Path | None = None,
    sizes: Sequence[int] = (200, 300, 400, 500, 600, 800),
) -> dict[str, Any]:
    """Wall time of the sweep on each executor, each with a fresh stage cache; work files go to
    ``work`` (default: a temporary directory, removed afterwards)."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-dask-") as tmp:
            return measure(dataset, limit_queries, workers, Path(tmp), sizes)
    config = sweep_config(dataset, sizes)
    rows, frames = [], {}
    for executor in EXECUTORS:
        before = cpu_times()
        seconds, run = best_time(
            lambda executor=executor: runner.run(
                config,
                work / executor,
                cache_root=work / f"cache-{executor}",
                executor=executor,
                workers=workers,
                limit_queries=limit_queries,
                progress=False,
            ),
            1,
        )
        trials = run.trials.set_index("trial_id").sort_index()
        frames[executor] = trials
        queries = run.manifest["queries"]["count"]
        rows.append(
            {
                "executor": executor,
                "workers": 1 if executor == "serial" else workers,
                "seconds": seconds,
                "failed": int((trials["status"] != "ok").sum()),
                "other_cpu": other_cpu_share(before, cpu_times(), seconds),
            }
        )
    serial = rows[0]["seconds"]
    for row in rows:
        row["speedup"] = serial / row["seconds"]
    reference = frames["serial"][METRICS]
    same = all(
        list(f.index) == list(reference.index) and f[METRICS].equals(reference)
        for f in frames.values()
    )
    return {
        "dataset": dataset,
        "trials": len(reference),
        "queries": queries,
        "chunkings": 2 * len(sizes),
        "rows": rows,
        "same_results": same,
    }


# ---------------------------------------------------------------- RESULTS.md

NAMES = {"serial": "serial", "process": "process pool", "dask": "Dask LocalCluster"}
HEADERS = ("executor", "workers", "wall time (s)", "speed-up vs serial", "failed", "others' CPU")


def draw(section: Figures) -> Lines:
    """Wall time of the same sweep on each executor."""
    rows = [
        (
            NAMES[r["executor"]],
            num(r["workers"]),
            num(r["seconds"], 1),
            ratio(r["speedup"]),
            num(r["failed"]),
            percent(r["other_cpu"]),
        )
        for r in section["rows"]
    ]
    same = "yes" if section["same_results"] else "**no**"
    return [
        f"One sweep on `{section['dataset']}`: {section['trials']} trials ("
        f"{section['chunkings']} recursive chunkings × BM25 with two k1, dense and hybrid RRF "
        f"over the `hashing` embedder), {section['queries']} queries, run by "
        "`ragbench.experiment.runner.run` on each executor from a cold stage cache of its own "
        "(wall time, cluster start-up included; workers are single-threaded processes).",
        "",
        table(HEADERS, rows),
        "",
        f"Same trials and metrics on every executor: {same}. The machine has 2 cores, so 2 "
        "workers bound the speed-up at 2x; the parent process commits every trial itself.",
    ]


DASK = part("dask", "Executors: Dask LocalCluster against serial", draw)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--limit-queries", type=int)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    m = measure(args.dataset, args.limit_queries, args.workers)
    print(f"{m['trials']} trials, {m['queries']} queries, dataset {m['dataset']}")
    for r in m["rows"]:
        busy = "–" if r["other_cpu"] is None else f"{100 * r['other_cpu']:.0f}%"
        print(
            f"{r['executor']:8} workers {r['workers']}  {r['seconds']:8.2f} s  speed-up "
            f"{r['speedup']:.2f}x  failed {r['failed']}  other processes' CPU {busy}"
        )
    print(f"same trials and metrics on every executor: {'yes' if m['same_results'] else 'NO'}")
    return 0 if m["same_results"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
