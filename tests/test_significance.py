"""Paired significance tests, corrections, effect sizes and bootstrap intervals against scipy
and hand-computed values; ``compare`` on small long-format frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ragbench.evaluate.significance import (
    PairedTest,
    bootstrap_ci,
    compare,
    compare_all,
    correct,
    effect_size,
    paired_test,
    win_tie_loss,
)

SEEDS = [0, 1, 2, 3, 4]


def graded_pair(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-query values on a coarse grid (quarters): many ties and zero differences."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 5, n) / 4
    return a, a + rng.integers(-2, 3, n) / 4


def continuous_pair(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    return a, a + rng.normal(0.05, 0.2, n)


def exact_sign_flip_p(d: np.ndarray) -> float:
    """Exact two-sided p of the mean over all 2^n sign flips (identity included)."""
    n = len(d)
    signs = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2.0 - 1.0
    means = signs @ d / n
    return float(np.mean(np.abs(means) >= abs(d.mean()) - 1e-12))


# --- paired tests ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [5, 30, 300])
def test_t_matches_scipy_ttest_rel(seed: int, n: int) -> None:
    a, b = continuous_pair(seed, n)
    ours = paired_test(a, b, test="t")
    ref = stats.ttest_rel(b, a)
    assert ours == PairedTest(ours.statistic, ours.p_value, "t")
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [10, 25, 60, 300])
def test_wilcoxon_matches_scipy_with_ties_and_zeros(seed: int, n: int) -> None:
    a, b = graded_pair(seed, n)
    d = b - a
    assert (d == 0).any() and len(np.unique(np.abs(d[d != 0]))) < (d != 0).sum()  # ties, zeros
    ours = paired_test(a, b, test="wilcoxon")
    ref = stats.wilcoxon(b, a)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_wilcoxon_matches_scipy_exact_without_ties(seed: int) -> None:
    a, b = continuous_pair(seed, 15)
    ours, ref = paired_test(a, b, test="wilcoxon"), stats.wilcoxon(a, b)
    assert (ours.statistic, ours.p_value) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [6, 8, 10])
def test_permutation_matches_exact_enumeration(seed: int, n: int) -> None:
    a, b = continuous_pair(seed, n)
    d = b - a
    exact = exact_sign_flip_p(d)
    scipy_exact = stats.permutation_test(
        (b, a),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=10**6,  # more than 2^n: scipy enumerates every flip
    ).pvalue
    assert scipy_exact == pytest.approx(exact, abs=1e-12)
    resamples = 200_000
    ours = paired_test(a, b, test="permutation", n_resamples=resamples, seed=seed)
    standard_error = np.sqrt(max(exact * (1 - exact), 1 / resamples) / resamples)
    assert ours.statistic == pytest.approx(d.mean(), rel=1e-12)
    assert abs(ours.p_value - exact) < 5 * standard_error + 2 / resamples


@pytest.mark.parametrize("seed", SEEDS)
def test_permutation_agrees_with_scipy_monte_carlo(seed: int) -> None:
    a, b = continuous_pair(seed, 40)
    ref = stats.permutation_test(
        (b, a),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        alternative="two-sided",
        n_resamples=20_000,
        vectorized=True,
        rng=seed,
    ).pvalue
    ours = paired_test(a, b, n_resamples=20_000, seed=seed).p_value
    # both are Monte Carlo estimates with 20,000 draws: SE of the difference <= 0.005
    assert abs(ours - ref) < 0.02


def test_permutation_counts_exact_float_ties() -> None:
    # every |d_i| equal: half of all sign patterns reach |mean| = |observed| only up to rounding
    d = np.full(6, 0.1)
    exact = 2 / 2**6  # all plus or all minus
    p = paired_test(np.zeros(6), d, n_resamples=100_000, seed=0).p_value
    assert abs(p - exact) < 0.005
    assert exact_sign_flip_p(d) == exact


def test_permutation_is_reproducible_by_seed() -> None:
    a, b = continuous_pair(0, 50)
    first = paired_test(a, b, n_resamples=2_000, seed=7)
    assert paired_test(a, b, n_resamples=2_000, seed=7) == first
    assert paired_test(a, b, n_resamples=2_000, seed=8).p_value != first.p_value


def test_permutation_p_is_never_zero() -> None:
    a, b = np.zeros(200), np.full(200, 0.5) + np.linspace(0, 0.1, 200)
    assert paired_test(a, b, n_resamples=999).p_value == pytest.approx(1 / 1000)


@pytest.mark.parametrize("test", ["t", "wilcoxon", "permutation"])
def test_all_zero_differences_give_p_one(test: str) -> None:
    a = np.array([0.1, 0.5, 0.9, 0.3])
    assert paired_test(a, a.copy(), test=test) == PairedTest(0.0, 1.0, test)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ([0.5], [0.6], "at least 2"),
        ([0.1, 0.2, 0.3], [0.1, 0.2], "lengths 3 and 2"),
        ([0.1, np.nan, 0.3], [0.1, 0.2, 0.3], "NaN"),
        ([[0.1, 0.2]], [[0.1, 0.2]], "one-dimensional"),
    ],
)
def test_paired_test_rejects_bad_input(a: list, b: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_test(a, b)


def test_paired_test_rejects_unknown_options() -> None:
    with pytest.raises(ValueError, match="'t', 'wilcoxon', 'permutation'"):
        paired_test([0.1, 0.2], [0.2, 0.3], test="sign")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_resamples"):
        paired_test([0.1, 0.2], [0.2, 0.3], n_resamples=0)


# --- corrections ----------------------------------------------------------------------------

P = [0.01, 0.04, 0.03, 0.005]


def test_holm_by_hand() -> None:
    # sorted: 0.005, 0.01, 0.03, 0.04 times m - j + 1 = 4, 3, 2, 1 -> 0.02, 0.03, 0.06, 0.04;
    # running max -> 0.02, 0.03, 0.06, 0.06; back in input order:
    np.testing.assert_allclose(correct(P, "holm"), [0.03, 0.06, 0.06, 0.02])


def test_bh_by_hand() -> None:
    # sorted: 0.005, 0.01, 0.03, 0.04 times m / j = 4, 2, 4/3, 1 -> 0.02, 0.02, 0.04, 0.04;
    # running min from the largest (already monotone); back in input order:
    np.testing.assert_allclose(correct(P, "bh"), [0.02, 0.04, 0.04, 0.02])


def test_bonferroni_and_none_by_hand() -> None:
    # times m = 4
    np.testing.assert_allclose(correct(P, "bonferroni"), [0.04, 0.16, 0.12, 0.02])
    p = np.array(P)
    unchanged = correct(p, "none")
    np.testing.assert_array_equal(unchanged, p)
    unchanged[0] = 1.0
    assert p[0] == 0.01


def test_holm_enforces_monotonicity_and_caps_at_one() -> None:
    # 2 * 0.3 = 0.6 for the smaller, 1 * 0.35 = 0.35 for the larger -> running max 0.6
    np.testing.assert_allclose(correct([0.35, 0.3], "holm"), [0.6, 0.6])
    np.testing.assert_allclose(correct([0.5, 0.6], "holm"), [1.0, 1.0])


def test_bh_enforces_monotonicity() -> None:
    # m / j * p: 3 * 0.02 = 0.06, 1.5 * 0.03 = 0.045, 1 * 0.04 = 0.04 -> running min from the
    # top: 0.04, 0.04, 0.04
    np.testing.assert_allclose(correct([0.04, 0.02, 0.03], "bh"), [0.04, 0.04, 0.04])


@pytest.mark.parametrize("method", ["holm", "bonferroni", "bh"])
def test_corrections_keep_order_and_bounds(method: str) -> None:
    p = np.random.default_rng(0).random(40) ** 3
    adjusted = correct(p, method)
    order = np.argsort(p)
    assert np.all(np.diff(adjusted[order]) >= 0)
    assert np.all(adjusted >= p) and np.all(adjusted <= 1)


def test_corrections_ignore_nan() -> None:
    p = [0.01, np.nan, 0.04]
    # m = 2: Holm 2 * 0.01, max(0.02, 1 * 0.04); BH min(2 * 0.01, 0.04), 2 / 2 * 0.04
    np.testing.assert_allclose(correct(p, "holm"), [0.02, np.nan, 0.04])
    np.testing.assert_allclose(correct(p, "bh"), [0.02, np.nan, 0.04])
    np.testing.assert_allclose(correct(p, "bonferroni"), [0.02, np.nan, 0.08])
    assert correct([], "holm").shape == (0,)


def test_correct_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        correct([0.5, 1.5])
    with pytest.raises(ValueError, match="'holm', 'bonferroni', 'bh', 'none'"):
        correct([0.5], "fdr")  # type: ignore[arg-type]


# --- effect size, wins, bootstrap -----------------------------------------------------------


def test_effect_size_by_hand() -> None:
    # d = 1, 2, 3: mean 2, sample std 1
    assert effect_size([0, 0, 0], [1, 2, 3]) == 2.0
    assert effect_size([1, 2, 3], [0, 0, 0]) == -2.0
    assert effect_size([0.1, 0.7], [0.1, 0.7]) == 0.0
    assert effect_size([0, 0.25], [0.5, 0.75]) == np.inf
    assert effect_size([0.5, 0.75], [0, 0.25]) == -np.inf


def test_win_tie_loss_by_hand() -> None:
    a = [0.5, 0.5, 0.5, 0.5, 0.2]
    b = [0.6, 0.5, 0.4, 0.5 + 1e-12, 0.1]
    assert win_tie_loss(a, b) == (1, 2, 2)
    assert win_tie_loss(a, b, tolerance=0.2) == (0, 5, 0)


def test_bootstrap_contains_mean_and_shrinks_with_n() -> None:
    rng = np.random.default_rng(0)
    widths = []
    for n in (30, 300, 3000):
        x = rng.random(n)
        low, high = bootstrap_ci(x)
        assert low < x.mean() < high
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    # the interval of a mean shrinks like 1 / sqrt(n)
    assert widths[0] / widths[2] == pytest.approx(10, rel=0.2)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_bootstrap_matches_scipy_percentile(seed: int, confidence: float) -> None:
    x = np.random.default_rng(seed).beta(0.5, 2, 120)
    ref = stats.bootstrap(
        (x,), np.mean, confidence_level=confidence, method="percentile", rng=seed
    ).confidence_interval
    low, high = bootstrap_ci(x, confidence=confidence, seed=seed)
    width = ref.high - ref.low
    assert low == pytest.approx(ref.low, abs=0.05 * width)
    assert high == pytest.approx(ref.high, abs=0.05 * width)


def test_bootstrap_is_reproducible_by_seed() -> None:
    x = np.random.default_rng(0).random(50)
    assert bootstrap_ci(x, seed=3) == bootstrap_ci(x, seed=3)
    assert bootstrap_ci(x, seed=3) != bootstrap_ci(x, seed=4)


def test_bootstrap_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([0.1, 0.2], confidence=95)
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([0.1, np.nan])


# --- compare --------------------------------------------------------------------------------

QUERIES = [f"q{i:02d}" for i in range(12)]


def long_frame(seed: int = 0) -> pd.DataFrame:
    """Trials ``base``, ``better`` (base + 0.1 on every query), ``same``, ``noisy``, over two
    metrics, rows shuffled so that pairing must go by query id."""
    rng = np.random.default_rng(seed)
    base = rng.random(len(QUERIES)) * 0.8
    trials = {
        "base": base,
        "better": base + 0.1,
        "same": base.copy(),
        "noisy": np.clip(base + rng.normal(0, 0.1, len(QUERIES)), 0, 1),
    }
    frames = [
        pd.DataFrame({"trial_id": t, "query_id": QUERIES, "metric": m, "value": v * scale})
        for m, scale in (("ndcg@10", 1.0), ("recall@5", 0.5))
        for t, v in trials.items()
    ]
    frame = pd.concat(frames, ignore_index=True)
    return frame.sample(frac=1, random_state=seed).reset_index(drop=True)


def values(frame: pd.DataFrame, trial: str, metric: str = "ndcg@10") -> np.ndarray:
    rows = frame[(frame["trial_id"] == trial) & (frame["metric"] == metric)]
    return rows.sort_values("query_id")["value"].to_numpy()


def test_compare_pairs_by_query_id() -> None:
    frame = long_frame()
    table = compare(frame, "base", "ndcg@10", n_resamples=2_000)
    assert list(table.columns) == [
        "mean",
        "ci_low",
        "ci_high",
        "delta",
        "p_value",
        "p_adjusted",
        "significant",
        "effect_size",
        "wins",
        "ties",
        "losses",
        "queries",
    ]
    assert table.index.name == "trial_id"
    assert table.index[0] == "base" and set(table.index) == {"base", "better", "same", "noisy"}
    better = table.loc["better"]
    assert (better["wins"], better["ties"], better["losses"]) == (12, 0, 0)
    assert better["delta"] == pytest.approx(0.1)
    assert better["effect_size"] > 1e6  # constant difference (up to float rounding)
    assert better["p_value"] == pytest.approx(1 / 2_001)  # no sign flip reaches +0.1 again
    assert bool(better["significant"])
    same = table.loc["same"]
    assert (same["delta"], same["p_value"], same["ties"], same["effect_size"]) == (0, 1, 12, 0)
    assert not same["significant"]


def test_compare_rows_equal_the_pairwise_functions() -> None:
    frame = long_frame(3)
    table = compare(frame, "base", "ndcg@10", test="permutation", n_resamples=3_000, seed=5)
    a, b = values(frame, "base"), values(frame, "noisy")
    row = table.loc["noisy"]
    assert row["mean"] == pytest.approx(b.mean())
    assert row["p_value"] == paired_test(a, b, n_resamples=3_000, seed=5).p_value
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(
        bootstrap_ci(b, n_resamples=3_000, seed=5)
    )
    assert row["effect_size"] == pytest.approx(effect_size(a, b))
    assert (row["wins"], row["ties"], row["losses"]) == win_tie_loss(a, b)
    others = table.drop(index="base")
    np.testing.assert_allclose(others["p_adjusted"], correct(others["p_value"], "holm"))


@pytest.mark.parametrize("test", ["t", "wilcoxon"])
@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy, on trial 'better'
def test_compare_with_scipy_tests(test: str) -> None:
    frame = long_frame(1)
    table = compare(frame, "base", "recall@5", test=test, correction="bonferroni")
    a, b = values(frame, "base", "recall@5"), values(frame, "noisy", "recall@5")
    assert table.loc["noisy", "p_value"] == pytest.approx(paired_test(a, b, test=test).p_value)
    assert table.loc["same", "p_value"] == 1.0
    p = table.drop(index="base")["p_value"].to_numpy()
    np.testing.assert_allclose(table.drop(index="base")["p_adjusted"], np.minimum(1, 3 * p))


def test_compare_baseline_row() -> None:
    row = compare(long_frame(), "base", "ndcg@10", n_resamples=500).loc["base"]
    assert np.isnan(row["p_value"]) and np.isnan(row["p_adjusted"])
    assert not row["significant"]
    assert (row["delta"], row["wins"], row["ties"], row["losses"], row["queries"]) == (
        0,
        0,
        12,
        0,
        12,
    )
    assert row["ci_low"] < row["mean"] < row["ci_high"]


def test_compare_ignores_queries_the_baseline_lacks() -> None:
    frame = long_frame()
    extra = pd.DataFrame(
        {"trial_id": ["better"], "query_id": ["q99"], "metric": ["ndcg@10"], "value": [1.0]}
    )
    table = compare(pd.concat([frame, extra]), "base", "ndcg@10", n_resamples=500)
    assert table.loc["better", "queries"] == 12
    assert table.loc["better", "delta"] == pytest.approx(0.1)


def test_compare_names_trials_missing_queries() -> None:
    frame = long_frame()
    drop = (frame["trial_id"] == "noisy") & frame["query_id"].isin(["q01", "q05"])
    with pytest.raises(ValueError, match="'noisy' lacks 2"):
        compare(frame[~(drop & (frame["metric"] == "ndcg@10"))], "base", "ndcg@10")


def test_compare_rejects_unknown_names_and_bad_rows() -> None:
    frame = long_frame()
    with pytest.raises(ValueError, match=r"unknown baseline 'bm25'.*'better'"):
        compare(frame, "bm25", "ndcg@10")
    with pytest.raises(ValueError, match=r"unknown metric 'mrr@10'.*'recall@5'"):
        compare(frame, "base", "mrr@10")
    with pytest.raises(ValueError, match="lacks column"):
        compare(frame.drop(columns="metric"), "base", "ndcg@10")
    nan = frame.copy()
    nan.loc[(nan["trial_id"] == "same") & (nan["metric"] == "ndcg@10"), "value"] = np.nan
    with pytest.raises(ValueError, match=r"NaN values in trial\(s\) \['same'\]"):
        compare(nan, "base", "ndcg@10")
    with pytest.raises(ValueError, match="repeated"):
        compare(pd.concat([frame, frame.iloc[:1]]), "base", frame["metric"].iloc[0])
    with pytest.raises(ValueError, match="correction"):
        compare(frame, "base", "ndcg@10", correction="fdr")  # type: ignore[arg-type]


def test_compare_all_stacks_metrics() -> None:
    frame = long_frame()
    table = compare_all(frame, "base", ["ndcg@10", "recall@5"], n_resamples=500)
    assert table.index.names == ["metric", "trial_id"]
    assert list(table.index.get_level_values("metric").unique()) == ["ndcg@10", "recall@5"]
    pd.testing.assert_frame_equal(
        table.loc["recall@5"], compare(frame, "base", "recall@5", n_resamples=500)
    )
    with pytest.raises(ValueError, match="non-empty list"):
        compare_all(frame, "base", "ndcg@10")  # type: ignore[arg-type]
