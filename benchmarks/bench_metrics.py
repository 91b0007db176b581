"""Time ragbench's trec_eval-exact metrics against pytrec_eval on one synthetic run.

``python -m benchmarks.bench_metrics [--queries N] [--depth K]`` prints a small table: seconds
per evaluation of ndcg@10, recall@100, map, mrr@10 and precision@10 (each side including its own
conversion of the dict-of-dict run), ragbench from ready arrays, the import + first-call time of
``ragbench.evaluate.metrics`` in a fresh interpreter, and the largest per-query difference.

``library_rows`` are the metrics' part of RESULTS.md's ``bench_retrieval.LIBRARIES``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.render import Figures, met, num, ratio
from benchmarks.timing import best_time

RAGBENCH_METRICS = ["ndcg@10", "recall@100", "map", "mrr@10", "precision@10"]
PYTREC_MEASURES = {"ndcg_cut.10", "recall.100", "map", "recip_rank", "P.10"}
SAME = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "map": "map", "precision@10": "P_10"}
COLD_START = """
import time
start = time.perf_counter()
from ragbench.evaluate.metrics import evaluate
from ragbench.types import Ranking
evaluate({"q": {"a": 1}}, Ranking.from_rows([[("a", 1.0), ("b", 0.5)]]), ["q"], ["ndcg@10"])
print(time.perf_counter() - start)
"""


def synthetic(
    n_queries: int, depth: int, seed: int
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """A run of float32-like scores over a 500k-document corpus and graded qrels with up to
    50 judgements per query, about half of them retrieved."""
    rng = np.random.default_rng(seed)
    corpus = max(500_000, 2 * depth)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(n_queries):
        docs = rng.choice(corpus, size=depth, replace=False)
        scores = rng.random(depth).astype(np.float32).astype(np.float64) * 30
        run[f"q{q}"] = {f"doc{d}": float(s) for d, s in zip(docs, scores, strict=True)}
        n_judged = int(rng.integers(1, 51))
        retrieved = rng.choice(docs, size=min(n_judged // 2, depth), replace=False)
        judged = np.concatenate([retrieved, rng.choice(corpus, size=n_judged - len(retrieved))])
        qrels[f"q{q}"] = {f"doc{d}": int(rng.integers(0, 4)) for d in judged}
    return qrels, run


def cold_start_seconds(repeat: int) -> float:
    """Import + first ``evaluate`` call of ragbench.evaluate.metrics in a fresh interpreter
    (fastest of ``repeat`` interpreters)."""
    times = []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", COLD_START], check=True, capture_output=True, text=True
        )
        times.append(float(out.stdout.strip()))
    return min(times)


def measure(
    queries: int = 1000, depth: int = 1000, repeat: int = 3, seed: int = 0
) -> dict[str, Any]:
    """Time pytrec_eval and ragbench on one synthetic run; returns the figures (seconds, speed
    ratios against pytrec_eval, the cold-start time and the largest per-query difference)."""
    import pytrec_eval

    from ragbench.evaluate.metrics import evaluate, evaluate_run
    from ragbench.types import Ranking

    qrels, run = synthetic(queries, depth, seed)
    query_ids = list(run)
    ranking = Ranking.from_rows([list(run[q].items()) for q in query_ids])

    def pytrec() -> dict:
        return pytrec_eval.RelevanceEvaluator(qrels, PYTREC_MEASURES).evaluate(run)

    t_pytrec, trec = best_time(pytrec, repeat)
    t_dict, frame = best_time(
        lambda: evaluate_run(qrels, run, RAGBENCH_METRICS, query_ids=query_ids), repeat
    )
    t_arrays, _ = best_time(lambda: evaluate(qrels, ranking, query_ids, RAGBENCH_METRICS), repeat)
    diff = max(
        abs(frame.loc[q, ours] - trec[q][theirs]) for q in trec for ours, theirs in SAME.items()
    )
    return {
        "metrics": list(RAGBENCH_METRICS),
        "queries": queries,
        "depth": depth,
        "judgements": sum(map(len, qrels.values())),
        "pytrec_eval_s": t_pytrec,
        "ragbench_dict_s": t_dict,
        "ragbench_arrays_s": t_arrays,
        "speed_dict": t_pytrec / t_dict,
        "speed_arrays": t_pytrec / t_arrays,
        "cold_start_s": cold_start_seconds(repeat),
        "max_abs_diff": float(diff),
    }


def library_rows(m: Figures) -> list[tuple[str, ...]]:
    """The rows ragbench's metrics add to RESULTS.md's comparison with the libraries it wraps
    (``bench_retrieval.LIBRARIES``)."""
    shape = f"{num(m['queries'])} queries × depth {num(m['depth'])}"
    reference = f"pytrec_eval {num(m['pytrec_eval_s'])}"
    timed = [
        (
            f"metrics, {how}, {shape} (s)",
            num(m[f"ragbench_{key}_s"]),
            reference,
            ratio(m[f"speed_{key}"]),
            "–",
            "–",
        )
        for how, key in [
            ("evaluate_run on a dict run", "dict"),
            ("evaluate on Ranking arrays", "arrays"),
        ]
    ]
    return [
        *timed,
        (
            "metrics, max per-query difference to pytrec_eval",
            f"{m['max_abs_diff']:.1e}",
            "–",
            "–",
            "≤ 1e-9",
            met(m["max_abs_diff"], 1e-9, lower_is_better=True),
        ),
        (
            "metrics, import + first call in a fresh process (s)",
            num(m["cold_start_s"], 3),
            *("–",) * 4,
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    m = measure(args.queries, args.depth, args.repeat, args.seed)
    print(f"metrics: {', '.join(m['metrics'])}")
    print(f"{m['queries']} queries x depth {m['depth']}, {m['judgements']} judgements")
    print(f"{'implementation':<36}{'seconds':>9}{'vs pytrec_eval':>16}")
    for label, seconds in [
        ("pytrec_eval (dict run)", m["pytrec_eval_s"]),
        ("ragbench evaluate_run (dict run)", m["ragbench_dict_s"]),
        ("ragbench evaluate (Ranking arrays)", m["ragbench_arrays_s"]),
    ]:
        print(f"{label:<36}{seconds:>9.3f}{m['pytrec_eval_s'] / seconds:>15.2f}x")
    print(f"{'import + first call, fresh process':<36}{m['cold_start_s']:>9.3f}")
    print(f"max per-query |ragbench - pytrec_eval|: {m['max_abs_diff']:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
