"""How many judged queries make the agreement interval useful?

``ragbench datasets judge SET --run RUN --agreement`` compares a sweep's trials on a few dozen
queries judged by hand with the same trials on the generated labels: Kendall τ-b and its 95%
bootstrap interval. This measures how wide that interval is for ``k`` judged queries, and
whether it tells anything, by standing a random sample of ``k`` real queries in for the
judged ones: given a run on real labels and a run on generated labels of the same sweep (the
same trial ids), for each ``k`` and each of ``repetitions`` seeded samples of ``k`` real
queries (without replacement):

* τ-b between the trials' means on the sample and on all generated queries
  (``scipy.stats.kendalltau``, as ``agreement`` computes it);
* its 95% interval exactly as the command prints it (``agreement.tau_interval``, 1,000
  percentile-bootstrap resamples, *both* sides resampled: the sample's ``k`` queries and the
  generated set's queries, each on its own; every sample with the command's seed, so the
  intervals are computed at once, vectorised, in seconds);

and per ``k``: the median τ-b and its 5th–95th percentiles over the samples, the median
interval width, the share of intervals that contain τ-b against *all* real queries (what the
sample stands in for) and the share whose lower bound is above 0 (the generated set ranks
better than chance, as the sample sees it).

``python -m benchmarks.bench_judged [--real DIR] [--synthetic DIR] [--metric M]
[--ks 20 50 100] [--repetitions 200] [--seed 0]`` prints the figures as JSON (defaults: the
SciFact runs of the agreement benchmark, runs/bench/agreement-scifact: ``real`` and the
generated set ``seed-0``; ``python -m benchmarks --full --only agreement`` makes them).

``draw`` is its paragraph of RESULTS.md's agreement section.
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from benchmarks.render import Figures, Lines, num, table
from ragbench.errors import DataError
from ragbench.evaluate.significance import bootstrap_means
from ragbench.experiment.store import RunStore
from ragbench.report.agreement import _per_query, _tau_b, agreement

REPO = Path(__file__).resolve().parents[1]
AGREEMENT_RUNS = REPO / "runs" / "bench" / "agreement-scifact"
N_RESAMPLES = 1000  # bootstrap resamples per interval, as the command's default
INTERVAL = (
    "95% percentile bootstrap of tau-b, 1000 resamples, both sides resampled (the k judged "
    "queries and the synthetic set's queries, each on its own): agreement.tau_interval, as "
    "`ragbench datasets judge --agreement` prints it"
)


def _intervals(
    judged: np.ndarray, synthetic: np.ndarray, confidence: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ends of τ-b's interval for each judged sample (``judged``: samples × k queries ×
    trials) against ``synthetic`` (queries × trials), each equal to ``tau_interval(sample,
    synthetic, seed=seed)``: the same bootstrap draws (``bootstrap_means`` of the identity
    gives the weight of each of the k queries in each resample; the synthetic set's resamples
    are shared by the samples), vectorised over the samples."""
    samples, k, trials = judged.shape
    weights = bootstrap_means(np.eye(k), N_RESAMPLES, seed)  # resamples × k
    x = np.einsum("bk,skt->sbt", weights, judged).reshape(-1, trials)
    y = np.tile(bootstrap_means(synthetic, N_RESAMPLES, seed + 1), (samples, 1))
    taus = _tau_b(x, y).reshape(samples, N_RESAMPLES)
    tail = (1 - confidence) / 2
    with warnings.catch_warnings():  # a sample whose every resample ties: NaN, as tau_interval
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanquantile(taus, [tail, 1 - tail], axis=1, method="inverted_cdf")
    return low, high


def measure(
    real_run: Path,
    synthetic_run: Path,
    metric: str,
    ks: Sequence[int] = (20, 50, 100),
    repetitions: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """The figures of the module docstring for two run directories of one sweep, as plain
    values: per ``k`` of ``ks``, ``repetitions`` samples of ``k`` real queries (``seed``)."""
    found = agreement(real_run, synthetic_run, metric)
    trials = found.trials.index
    real = _per_query(RunStore(real_run), found.metric, trials).to_numpy()
    synthetic = _per_query(RunStore(synthetic_run), found.metric, trials).to_numpy()
    wrong = [k for k in ks if not 2 <= k <= len(real)]
    if wrong:
        raise DataError(f"{real_run}: {len(real)} real queries; k must lie in 2..{len(real)}")
    rng = np.random.default_rng(seed)
    by_k = []
    for k in ks:
        judged = np.stack(
            [real[rng.choice(len(real), size=k, replace=False)] for _ in range(repetitions)]
        )
        means = synthetic.mean(axis=0)
        tau = np.array(
            [stats.kendalltau(sample.mean(axis=0), means).statistic for sample in judged]
        )
        low, high = _intervals(judged, synthetic, 0.95, seed)
        by_k.append(
            {
                "k": k,
                "median_tau": float(np.nanmedian(tau)),
                "tau_p05_p95": [float(v) for v in np.nanquantile(tau, [0.05, 0.95])],
                "median_interval": [float(np.nanmedian(low)), float(np.nanmedian(high))],
                "median_width": float(np.nanmedian(high - low)),
                "covers_tau_all": float(np.mean((low <= found.tau) & (found.tau <= high))),
                "above_chance": float(np.mean(low > 0)),
            }
        )
    return {
        "metric": found.metric,
        "real_run": str(real_run),
        "synthetic_run": str(synthetic_run),
        "trials": len(trials),
        "queries": {"real": len(real), "synthetic": len(synthetic)},
        "tau_all": found.tau,
        "tau_all_interval": list(found.tau_ci) if found.tau_ci is not None else None,
        "interval": INTERVAL,
        "repetitions": repetitions,
        "seed": seed,
        "by_k": by_k,
    }


# ---------------------------------------------------------------- RESULTS.md

HEADERS = (
    "judged queries",
    "τ-b median (5th to 95th percentile)",
    "interval (median bounds)",
    "interval width (median)",
    "interval holds τ-b against all real queries",
    "lower bound above 0",
)


def draw(found: Figures | None) -> Lines:
    """The agreement section's paragraph on judged queries (nothing when not measured)."""
    if not found or "by_k" not in found:
        return []
    rows = [
        (
            num(k["k"], 0),
            f"{k['median_tau']:.3f} ({k['tau_p05_p95'][0]:.3f} to {k['tau_p05_p95'][1]:.3f})",
            f"{k['median_interval'][0]:.3f} to {k['median_interval'][1]:.3f}",
            f"{k['median_width']:.3f}",
            f"{k['covers_tau_all']:.0%}",
            f"{k['above_chance']:.0%}",
        )
        for k in found["by_k"]
    ]
    return [
        "**How many judged queries check the pick?** Standing a random sample of k real "
        "SciFact queries in for k queries judged by hand (`ragbench datasets judge`), "
        f"{found['repetitions']} samples per k: τ-b of the generated set (seed 0) against the "
        "sample, with its 95% bootstrap interval (both sides resampled, as the command prints "
        f"it; `python -m benchmarks.bench_judged`). Against all {found['queries']['real']} real "
        f"queries τ-b is {found['tau_all']:.3f}.",
        "",
        table(HEADERS, rows),
        "",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real", type=Path, default=AGREEMENT_RUNS / "real")
    parser.add_argument("--synthetic", type=Path, default=AGREEMENT_RUNS / "seed-0")
    parser.add_argument("--metric", default="ndcg@10")
    parser.add_argument("--ks", type=int, nargs="+", default=[20, 50, 100])
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    found = measure(
        args.real,
        args.synthetic,
        args.metric,
        args.ks,
        repetitions=args.repetitions,
        seed=args.seed,
    )
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
