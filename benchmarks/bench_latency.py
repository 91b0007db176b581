"""Latency you can trust: the same sweep measured on a quiet machine and under CPU burners.

The latency pass (``ragbench.experiment.latency``) times a sample of queries one at a time, takes
out of each repeat the time the thread waited for a CPU, keeps the fastest repeat per query and
stage, and records how busy the machine was. This
benchmark measures the same sweep twice in one run — once as the machine is, once with
``burners`` processes spinning on every core — and reports, per trial, the p50 total latency of
both, their ratio (busy / quiet; target: within 25%) and the thread pools each pass ran with.

A first run fills the stage cache; the quiet and the busy runs are then each ``ragbench run
--remeasure-latency`` in fresh processes: their quality pass reads the cache, so the first
trial's latency pass is what loads the model — the case where its threads were once left
unpinned (torch on every core, twice the CPU time and 2.9× the latency under burners). Each
condition runs in ``processes`` fresh processes and keeps, per trial, the fastest: like the
fastest repeat within a process, the time when nothing else gets in the way.

``python -m benchmarks.bench_latency [--burners N] [--queries N]``; ``measure()`` returns the
figures as a dict.

``LATENCY`` draws its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.render import Figures, Lines, met, num, part, percent, table
from ragbench.experiment.latency import CONTENTION

EMBEDDER = {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}


def sweep_config(dataset: str, embedder: dict[str, Any], queries: int) -> dict[str, Any]:
    """Dense, hybrid and BM25 retrieval (dense first), with and without a dense rerank, on one
    chunking."""
    return {
        "name": "latency",
        "dataset": {"path": dataset},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": queries, "repeats": 5, "threads": 1},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 400, "overlap": 0}],
            "embedder": [embedder],
            "retriever": [{"kind": "dense"}, {"kind": "hybrid"}, {"kind": "bm25"}],
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


def _sweep(config: dict[str, Any], out: Path, cache: Path, remeasure: bool) -> list[dict[str, Any]]:
    """The sweep's trials.parquet rows, run in this process."""
    from ragbench.experiment.runner import run

    done = run(config, out, cache_root=cache, progress=False, remeasure_latency=remeasure)
    return list(done.trials.to_dict("records"))


def _fresh(
    config: dict[str, Any], out: Path, cache: Path, remeasure: bool = True
) -> list[dict[str, Any]]:
    """``_sweep`` in a fresh process (nothing imported, no model loaded)."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(_sweep, config, out, cache, remeasure).result()


def _fastest(
    config: dict[str, Any], out: Path, cache: Path, processes: int
) -> dict[str, dict[str, Any]]:
    """Per trial, the row of the fresh process with the lowest p50 total of ``processes``:
    a process's own memory layout moves a sub-millisecond p50 (BM25's 0.13 ms) by up to 2×
    between processes on a quiet machine, which the repeats within one process cannot see."""
    best: dict[str, dict[str, Any]] = {}
    for i in range(processes):
        for row in _fresh(config, out / str(i), cache):
            kept = best.get(row["trial_id"])
            if kept is None or row["latency.total.p50_ms"] < kept["latency.total.p50_ms"]:
                best[row["trial_id"]] = row
    return best


def measure(
    dataset: str = "demo",
    burners: int = 2,
    queries: int = 50,
    embedder: dict[str, Any] = EMBEDDER,
    work: Path | None = None,
    processes: int = 3,
) -> dict[str, Any]:
    """p50 total latency and thread pools per trial, quiet and under ``burners`` spinning
    processes, each the fastest of ``processes`` fresh processes over a warm stage cache."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-bench-latency-") as tmp:
            return measure(dataset, burners, queries, embedder, Path(tmp), processes)
    config, cache = sweep_config(dataset, embedder, queries), work / "cache"
    _fresh({**config, "latency": {"queries": 0}}, work / "cold", cache, remeasure=False)
    quiet = _fastest(config, work / "quiet", cache, processes)
    spinning = [
        multiprocessing.get_context("spawn").Process(target=_spin, args=(3600.0,))
        for _ in range(burners)
    ]
    for process in spinning:
        process.start()
    try:
        busy = _fastest(config, work / "busy", cache, processes)
    finally:
        for process in spinning:
            process.terminate()
            process.join()
    rows = [_row(a, busy[t]) for t, a in quiet.items()]
    return {
        "queries": queries,
        "repeats": 5,
        "burners": burners,
        "processes": processes,
        "rows": rows,
        "worst": max(abs(r["difference"]) for r in rows),
        "quiet_was_busy": max(r["quiet_contention"] for r in rows) > CONTENTION,
    }


def _row(quiet: dict[str, Any], busy: dict[str, Any]) -> dict[str, Any]:
    """One trial's figures: quiet and busy p50, their ratio, contention and thread pools."""
    q, s = float(quiet["latency.total.p50_ms"]), float(busy["latency.total.p50_ms"])
    return {
        "label": quiet["label"],
        "quiet_p50_ms": q,
        "busy_p50_ms": s,
        "ratio": s / q,
        "difference": s / q - 1,
        "quiet_cpu_p50_ms": float(quiet["latency.cpu.p50_ms"]),
        "quiet_contention": float(quiet["latency.contention"]),
        "busy_contention": float(busy["latency.contention"]),
        "busy_interrupted": float(busy["latency.interrupted"]),
        "busy_waited": float(busy["latency.waited"]),
        "quiet_threads": str(quiet["latency.threads"]),
        "busy_threads": str(busy["latency.threads"]),
    }


# ---------------------------------------------------------------- RESULTS.md

HEADERS = (
    "trial",
    "quiet p50 total (ms)",
    "quiet p50 CPU (ms)",
    "busy p50 total (ms)",
    "busy / quiet",
    "contention, quiet",
    "contention, busy",
    "repeats interrupted, busy",
    "thread pools (latency.threads)",
)


def _cells(r: Figures) -> tuple[str, ...]:
    """One trial quiet and busy."""
    return (
        r["label"],
        num(r["quiet_p50_ms"], 2),
        num(r["quiet_cpu_p50_ms"], 2) if "quiet_cpu_p50_ms" in r else "–",
        num(r["busy_p50_ms"], 2),
        f"{r['busy_p50_ms'] / r['quiet_p50_ms']:.2f}×",
        percent(r["quiet_contention"]),
        percent(r["busy_contention"]),
        percent(r["busy_interrupted"]),
        r.get("quiet_threads", "–"),
    )


def draw(section: Figures) -> Lines:
    """Each trial's latency quiet and under burners."""
    s = section
    return [
        "One sweep on the demo set (MiniLM, recursive 400: dense, hybrid and BM25, with and "
        "without a dense rerank), its latency pass run twice in one benchmark, each time by "
        "`ragbench run --remeasure-latency` in fresh processes over a warm stage cache (so the "
        "first trial's pass is what loads the model), the fastest of "
        f"{s.get('processes', 1)} processes per trial (a process's memory layout alone "
        "moves BM25's sub-millisecond p50 by up to 2× on a quiet machine): as the machine is, "
        f"then with {s['burners']} processes spinning on the CPU. Each pass: {s['queries']} "
        f"queries one at a time after a warm-up, {s['repeats']} repeats, each repeat's "
        "time less the time the measuring thread waited for a CPU (Linux schedstat), the "
        "fastest repeat per query and stage (a repeat the scheduler interrupted is first run "
        "again, up to 3 times), every thread pool fixed to one thread (`latency.threads`).",
        "",
        table(HEADERS, [_cells(r) for r in s["rows"]]),
        "",
        f"Worst difference {100 * s['worst']:.1f}%; target ≤ 25% "
        f"{met(s['worst'], 0.25, lower_is_better=True)}. Contention: the share of the "
        "machine's CPU time other processes used during the pass; the report flags trials "
        "measured above 20%.",
    ]


LATENCY = part("latency", "Latency pass: the same sweep quiet and under CPU burners", draw)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_latency")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args(argv)
    found = measure(burners=args.burners, queries=args.queries)
    for row in found["rows"]:
        threads = {row["quiet_threads"], row["busy_threads"]}
        print(
            f"{row['label'][:60]:<60} quiet {row['quiet_p50_ms']:7.2f} ms "
            f"(cpu {row['quiet_cpu_p50_ms']:7.2f})  busy {row['busy_p50_ms']:7.2f} ms  "
            f"{row['ratio']:.2f}x  (contention {row['quiet_contention']:.0%} / "
            f"{row['busy_contention']:.0%})  threads {' / '.join(sorted(threads))}"
        )
    print(f"worst difference {found['worst']:.1%} (target <= 25%)")
    if found["quiet_was_busy"]:
        print(f"the quiet run was not quiet: other processes used over {CONTENTION:.0%} of the CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
