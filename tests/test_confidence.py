"""The confidence on the pick: P(best) over paired bootstrap resamples of the queries, checked
on per-query tables whose answer is known by hand, and the verdict's smallest leading set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ragbench.evaluate.metrics import MetricSpec, register_metric, unregister_metric
from ragbench.evaluate.significance import bootstrap_ci, bootstrap_means
from ragbench.report.confidence import (
    PickConfidence,
    best_probabilities,
    percent,
    pick_confidence,
    tie_text,
)


def _noise(queries: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(queries)


def test_a_trial_that_wins_every_query_is_best_in_every_resample() -> None:
    base = _noise(30)
    values = pd.DataFrame({"a": base, "b": base + 0.1, "c": base - 0.2})
    found = pick_confidence(values, "ndcg@10", {"b": "hybrid convex"})
    assert found.p_best.to_dict() == {"b": 1.0, "a": 0.0, "c": 0.0}
    assert found.leaders == ["b"] and found.separated
    assert (
        found.line() == "hybrid convex: best in 100% of 1,000 bootstrap resamples of the 30 queries"
    )


def test_two_identical_trials_share_every_resample() -> None:
    base = _noise(25)
    values = pd.DataFrame({"a": base, "b": base.copy(), "c": base - 0.01})
    found = pick_confidence(values, "recall@20", n_resamples=500)
    assert found.p_best.to_dict() == {"a": 0.5, "b": 0.5, "c": 0.0}
    assert found.leaders == ["a", "b"] and not found.separated
    assert found.line() == (
        "cannot separate a (50%) from b (50%) in 500 bootstrap resamples of the 25 queries"
    )


def test_a_three_query_case_worked_out_by_hand() -> None:
    # a scores 1, 1, 0 and b 0, 0, 1: b has the higher mean when the third query is drawn two
    # or three times of three (6/27 + 1/27); the means never tie (c1 + c2 = c3 is impossible
    # with c1 + c2 + c3 = 3)
    values = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    p = best_probabilities(values, higher_is_better=True, n_resamples=200_000, seed=3)
    assert p.sum() == pytest.approx(1.0)
    assert p[1] == pytest.approx(7 / 27, abs=0.003)
    # lower is better: the same draws now make a the best
    lower = best_probabilities(values, higher_is_better=False, n_resamples=200_000, seed=3)
    assert lower[0] == pytest.approx(p[1], abs=1e-12)


def test_the_metric_direction_decides_which_trial_is_best() -> None:
    def zeros(hits: object, judged: object, k: int | None, n: int) -> np.ndarray:
        return np.zeros(n)

    base = _noise(20)
    values = pd.DataFrame({"slow": base + 2.0, "fast": base + 1.0})
    register_metric(MetricSpec("wait_rank", zeros, "A rank to wait for.", higher_is_better=False))
    try:
        found = pick_confidence(values, "wait_rank@5")
    finally:
        unregister_metric("wait_rank")
    assert found.leaders == ["fast"] and found.p_best["fast"] == 1.0


def test_the_resamples_are_seeded_and_paired() -> None:
    rng = np.random.default_rng(7)
    values = pd.DataFrame(rng.random((40, 4)), columns=list("abcd"))
    first = pick_confidence(values, "ndcg@10", seed=5)
    assert first.p_best.equals(pick_confidence(values, "ndcg@10", seed=5).p_best)
    assert first.p_best.sum() == pytest.approx(1.0)
    # the resampled means the probabilities count are those bootstrap_ci takes its interval of
    means = bootstrap_means(values.to_numpy(), 2000, seed=1)
    assert means.shape == (2000, 4)
    low, high = bootstrap_ci(values["c"].to_numpy(), n_resamples=2000, seed=1)
    assert (low, high) == pytest.approx(np.quantile(means[:, 2], [0.025, 0.975]), rel=1e-12)


def test_the_verdict_is_the_fewest_leaders_holding_95_percent() -> None:
    def verdict(*p: float) -> list[str]:
        shares = pd.Series(p, index=[f"t{i}" for i in range(len(p))])
        return PickConfidence("ndcg@10", shares, {}, 100, 1000).leaders

    assert verdict(0.96, 0.04) == ["t0"]
    assert verdict(0.95, 0.05) == ["t0"]  # exactly the mass is enough
    assert verdict(0.6, 0.3, 0.07, 0.03) == ["t0", "t1", "t2"]
    assert verdict(0.5, 0.5) == ["t0", "t1"]
    three = PickConfidence("ndcg@10", pd.Series({"x": 0.52, "y": 0.41, "z": 0.07}), {}, 9, 100)
    assert three.line(lambda t: t.upper()) == (
        "cannot separate X (52%) from Y (41%) and Z (7%) in 100 bootstrap resamples of the 9 "
        "queries"
    )


def test_renderings_never_round_to_a_certainty_or_a_silent_pick() -> None:
    assert (percent(0.996), percent(0.004), percent(1.0), percent(0.0)) == (
        ">99%",
        "<1%",
        "100%",
        "0%",
    )
    assert tie_text(["A", "B"], 0.73124) == "tie: A and B at 0.7312"
    assert tie_text(["A", "B", "C"]) == "tie: A, B and C"


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="NaN"):
        best_probabilities(np.array([[1.0, np.nan], [0.0, 1.0]]), True)
    with pytest.raises(ValueError, match="queries × trials"):
        best_probabilities(np.zeros((0, 2)), True)
    with pytest.raises(ValueError, match="mass"):
        pick_confidence(pd.DataFrame({"a": [1.0, 0.0]}), "ndcg@10", mass=0.0)


def test_a_line_names_three_leaders_and_counts_the_rest() -> None:
    values = pd.DataFrame(np.tile([0.5, 0.7, 0.9], (5, 1)).T, columns=list("abcde"))
    found = pick_confidence(values, "ndcg@10", n_resamples=100)
    assert len(found.leaders) == 5  # five identical trials: 20% each
    assert found.line().startswith(
        "cannot separate a (20%) from b (20%), c (20%) and 2 others (40%)"
    )
