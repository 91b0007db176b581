"""Paired statistics of sweep trials against a baseline, over per-query metric values.

Every pairwise function takes the baseline ``a`` and the candidate ``b`` (values of the same
queries, in the same order) and works on the differences ``d = b - a``: a positive statistic,
delta or effect size means ``b`` scores higher. ``compare`` applies them to the long-format
``per_query.parquet`` of a run directory (columns ``trial_id, query_id, metric, value``).

Resampling (the permutation test and the bootstrap) is vectorised: random sign flips or
resampled indices are drawn in blocks of about a million entries, seeded with
``numpy.random.default_rng(seed)``, and applied to all trials at once by one matrix product.
So ``compare`` reuses one set of resamples for every trial, and each trial's result equals
what ``paired_test`` / ``bootstrap_ci`` give, with the same seed, for its values sorted by
query id.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack, get_args

import numpy as np
import numpy.typing as npt
import pandas as pd

from ragbench.evaluate.metric_table import Metric

__all__ = [
    "CompareOptions",
    "Correction",
    "PairedTest",
    "Test",
    "bootstrap_ci",
    "bootstrap_means",
    "compare",
    "compare_all",
    "correct",
    "effect_size",
    "paired_test",
    "win_tie_loss",
]

Test = Literal["t", "wilcoxon", "permutation"]
Correction = Literal["holm", "bonferroni", "bh", "none"]

_BLOCK_ENTRIES = 1 << 20  # entries of one block of signs or indices (8 MB as float64)
_TIE_TOLERANCE = 1e-9  # relative to sum|d|, the largest |sum| any sign flip can reach
_COLUMNS = ("trial_id", "query_id", "metric", "value")
_ROW_COLUMNS = [
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


@dataclass(frozen=True, slots=True)
class PairedTest:
    """Result of a two-sided paired test: ``statistic``, ``p_value`` and the ``test`` used."""

    statistic: float
    p_value: float
    test: Test


def paired_test(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    test: Test = "permutation",
    n_resamples: int = 10_000,
    seed: int = 0,
) -> PairedTest:
    """Two-sided paired test of ``b`` against ``a`` on the differences ``d = b - a``.

    - ``t``: paired t-test, ``t = mean(d) / (std(d, ddof=1) / sqrt(n))`` (``ttest_rel(b, a)``).
    - ``wilcoxon``: signed-rank test with scipy's defaults; the statistic is ``min(R+, R-)``
      over the non-zero ``d_i``; p is exact for n <= 50 without ties or zeros, exact by
      enumerating sign flips for n <= 13 with them, else from the normal approximation.
    - ``permutation``: randomisation test flipping the sign of each ``d_i`` at random
      ``n_resamples`` times; statistic ``mean(d)``; ``p = (#{|mean(s·d)| >= |mean(d)| - tol}
      + 1) / (n_resamples + 1)`` with ``tol = 1e-9 · mean|d|`` absorbing float ties.

    When every difference is zero the statistic is 0 and ``p = 1`` for every test.
    """
    _check_option(test, Test, "test")
    d = _differences(a, b)
    statistic, p_value = _test_columns(d[:, None], test, n_resamples, seed)
    return PairedTest(float(statistic[0]), float(p_value[0]), test)


def correct(p_values: npt.ArrayLike, method: Correction = "holm") -> np.ndarray:
    """Adjust p-values for multiple comparisons; NaNs stay NaN and are not counted in ``m``.

    With ``p_(1) <= … <= p_(m)`` sorted ascending:
    ``holm``: ``q_(i) = max_{j<=i} min(1, (m - j + 1) p_(j))``;
    ``bonferroni``: ``q = min(1, m p)``;
    ``bh`` (Benjamini–Hochberg): ``q_(i) = min_{j>=i} min(1, m p_(j) / j)``;
    ``none``: a copy.
    """
    _check_option(method, Correction, "method")
    p = np.array(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"p_values must be one-dimensional, got shape {p.shape}")
    valid = ~np.isnan(p)
    if np.any((p[valid] < 0) | (p[valid] > 1)):
        raise ValueError("p_values must lie in [0, 1] (or be NaN)")
    if method != "none":
        p[valid] = _adjust(p[valid], method)
    return p


def effect_size(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Paired Cohen's d_z = ``mean(d) / std(d, ddof=1)`` with ``d = b - a``.

    When ``std(d) == 0`` it is 0 if ``mean(d) == 0`` and ``±inf`` (the sign of the mean)
    otherwise.
    """
    return float(_effect_sizes(_differences(a, b)[:, None])[0])


def bootstrap_ci(
    values: npt.ArrayLike,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean.

    The means of ``n_resamples`` resamples (with replacement, same size) give the interval
    ``(quantile(α/2), quantile(1 - α/2))`` with ``α = 1 - confidence``.
    """
    x = _values(values, "values")
    low, high = _bootstrap_columns(x[:, None], confidence, n_resamples, seed)
    return float(low[0]), float(high[0])


def win_tie_loss(
    a: npt.ArrayLike, b: npt.ArrayLike, tolerance: float = 1e-9
) -> tuple[int, int, int]:
    """Counts of queries where ``b`` beats ``a`` (``d > tol``), ties (``|d| <= tol``), loses."""
    wins, ties, losses = _win_tie_loss(_differences(a, b)[:, None], tolerance)
    return int(wins[0]), int(ties[0]), int(losses[0])


def compare(
    per_query: pd.DataFrame,
    baseline: str,
    metric: str | Metric,
    test: Test = "permutation",
    correction: Correction = "holm",
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> pd.DataFrame:
    """Each trial of a sweep against ``baseline`` on one metric, one row per trial.

    Trials are paired with the baseline by ``query_id`` over the baseline's queries (a trial's
    extra queries are ignored; a trial lacking some is an error). Index ``trial_id`` (baseline
    first, then trials in order of appearance); columns ``mean, ci_low, ci_high`` (bootstrap
    interval of the trial's mean), ``delta`` (mean minus baseline mean), ``p_value``
    (``paired_test``), ``p_adjusted`` (``correct`` across the non-baseline trials),
    ``significant`` (``p_adjusted < alpha``), ``effect_size``, ``wins, ties, losses`` and
    ``queries``. The baseline's p-values are NaN and it is never significant.
    """
    _check_option(test, Test, "test")
    _check_option(correction, Correction, "correction")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    table = _paired_table(per_query, baseline, str(metric))
    values = table.to_numpy(dtype=np.float64)
    diffs = values[:, 1:] - values[:, :1]
    ci_low, ci_high = _bootstrap_columns(values, confidence, n_resamples, seed)
    _, p_value = _test_columns(diffs, test, n_resamples, seed)
    p_value = np.concatenate([[np.nan], p_value])
    p_adjusted = np.concatenate([[np.nan], correct(p_value[1:], correction)])
    wins, ties, losses = _win_tie_loss(values - values[:, :1], 1e-9)
    means = values.mean(axis=0)
    rows = {
        "mean": means,
        "ci_low": ci_low,
        "ci_high": ci_high,
        "delta": means - means[0],
        "p_value": p_value,
        "p_adjusted": p_adjusted,
        "significant": p_adjusted < alpha,
        "effect_size": _effect_sizes(values - values[:, :1]),
        "wins": wins,
        "ties": ties,
        "losses": losses,
        "queries": np.full(values.shape[1], len(values)),
    }
    return pd.DataFrame(rows, index=pd.Index(table.columns, name="trial_id"))[_ROW_COLUMNS]


class CompareOptions(TypedDict, total=False):
    """``compare``'s options after the metric, as ``compare_all`` passes them on."""

    test: Test
    correction: Correction
    alpha: float
    confidence: float
    n_resamples: int
    seed: int


def compare_all(
    per_query: pd.DataFrame,
    baseline: str,
    metrics: Sequence[str | Metric],
    **options: Unpack[CompareOptions],
) -> pd.DataFrame:
    """``compare`` (with ``options``) for each metric, stacked under a ``(metric, trial_id)``
    MultiIndex.

    The correction is applied within each metric, across its trials.
    """
    if isinstance(metrics, str) or not metrics:
        raise ValueError(f"metrics must be a non-empty list of metric names, got {metrics!r}")
    frames = [compare(per_query, baseline, m, **options) for m in metrics]
    return pd.concat(frames, keys=[str(m) for m in metrics], names=["metric", "trial_id"])


def _check_option(value: str, options: object, name: str) -> None:
    allowed = get_args(options)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def _values(values: npt.ArrayLike, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one value per query), got {x.shape}")
    if len(x) < 2:
        raise ValueError(f"{name} needs at least 2 queries, got {len(x)}")
    if np.isnan(x).any():
        raise ValueError(f"{name} contains {int(np.isnan(x).sum())} NaN value(s)")
    return x


def _differences(a: npt.ArrayLike, b: npt.ArrayLike) -> np.ndarray:
    x, y = _values(a, "a"), _values(b, "b")
    if len(x) != len(y):
        raise ValueError(f"a and b must pair the same queries, got lengths {len(x)} and {len(y)}")
    return y - x


def _check_resampling(n_resamples: int, confidence: float | None = None) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if confidence is not None and not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")


def _blocks(n_resamples: int, n: int) -> Iterator[int]:
    """Row counts of the blocks that split ``n_resamples`` resamples of ``n`` entries each."""
    rows = max(1, _BLOCK_ENTRIES // n)
    for start in range(0, n_resamples, rows):
        yield min(rows, n_resamples - start)


def _test_columns(
    diffs: np.ndarray, test: Test, n_resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Statistic and p-value of each column of differences (queries × trials)."""
    if test == "permutation":
        _check_resampling(n_resamples)
        statistic, p_value = diffs.mean(axis=0), _permutation_p(diffs, n_resamples, seed)
    elif test == "t":
        statistic, p_value = np.zeros(diffs.shape[1]), np.ones(diffs.shape[1])
        nonzero = diffs.any(axis=0)
        if nonzero.any():
            from scipy import stats  # here: importing scipy.stats costs seconds

            result = stats.ttest_1samp(diffs[:, nonzero], 0.0, axis=0)
            statistic[nonzero], p_value[nonzero] = result.statistic, result.pvalue
    else:
        pairs = [_wilcoxon(column) for column in diffs.T]
        statistic, p_value = np.array(pairs, dtype=np.float64).reshape(-1, 2).T
    return statistic, p_value


def _wilcoxon(d: np.ndarray) -> tuple[float, float]:
    if not d.any():
        return 0.0, 1.0
    from scipy import stats  # here: importing scipy.stats costs seconds

    result = stats.wilcoxon(d)
    return float(result.statistic), float(result.pvalue)


def _permutation_p(diffs: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """Two-sided sign-flip p-value of the mean of each column (see ``paired_test``)."""
    rng = np.random.default_rng(seed)
    n = diffs.shape[0]
    threshold = np.abs(diffs.sum(axis=0)) - _TIE_TOLERANCE * np.abs(diffs).sum(axis=0)
    extreme = np.zeros(diffs.shape[1], dtype=np.int64)
    for rows in _blocks(n_resamples, n):
        signs = rng.integers(0, 2, size=(rows, n), dtype=np.int8) * 2.0 - 1.0
        extreme += (np.abs(signs @ diffs) >= threshold).sum(axis=0)
    return (extreme + 1) / (n_resamples + 1)


def bootstrap_means(values: npt.ArrayLike, n_resamples: int = 10_000, seed: int = 0) -> np.ndarray:
    """The column means of ``n_resamples`` paired resamples of the rows of ``values`` (queries
    × trials): one draw of query indices, with replacement, per resample, applied to every
    column; shape ``(n_resamples, trials)``. ``bootstrap_ci`` and ``compare`` take their
    intervals from these means."""
    _check_resampling(n_resamples)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or len(x) < 1:
        raise ValueError(f"values must be a non-empty queries × trials matrix, got {x.shape}")
    rng = np.random.default_rng(seed)
    n = x.shape[0]
    means = []
    for rows in _blocks(n_resamples, n):
        picks = rng.integers(0, n, size=(rows, n)) + n * np.arange(rows)[:, None]
        counts = np.bincount(picks.ravel(), minlength=rows * n).reshape(rows, n)
        means.append(counts @ x / n)
    return np.concatenate(means)


def _bootstrap_columns(
    values: np.ndarray, confidence: float, n_resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of each column (queries × trials)."""
    _check_resampling(n_resamples, confidence)
    tail = (1 - confidence) / 2
    means = bootstrap_means(values, n_resamples, seed)
    low, high = np.quantile(means, [tail, 1 - tail], axis=0)
    return low, high


def _effect_sizes(diffs: np.ndarray) -> np.ndarray:
    mean, std = diffs.mean(axis=0), diffs.std(axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(std > 0, mean / std, np.where(mean == 0, 0.0, np.copysign(np.inf, mean)))


def _win_tie_loss(diffs: np.ndarray, tolerance: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    wins, losses = (diffs > tolerance).sum(axis=0), (diffs < -tolerance).sum(axis=0)
    return wins, len(diffs) - wins - losses, losses


def _adjust(p: np.ndarray, method: Correction) -> np.ndarray:
    """Adjusted p-values of NaN-free ``p`` (see ``correct``)."""
    m = len(p)
    if method == "bonferroni":
        return np.minimum(1.0, m * p)
    order = np.argsort(p, kind="stable")
    rank = np.arange(1, m + 1)
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (m - rank + 1) * p[order]))
    else:
        adjusted = np.minimum.accumulate(np.minimum(1.0, m * p[order] / rank)[::-1])[::-1]
    result = np.empty(m)
    result[order] = adjusted
    return result


def _paired_table(per_query: pd.DataFrame, baseline: str, metric: str) -> pd.DataFrame:
    """Queries × trials values of ``metric`` over the baseline's queries, baseline first."""
    missing = [c for c in _COLUMNS if c not in per_query.columns]
    if missing:
        raise ValueError(f"per_query lacks column(s) {missing}; expected columns {list(_COLUMNS)}")
    metrics = list(pd.unique(per_query["metric"]))
    if metric not in metrics:
        raise ValueError(f"unknown metric {metric!r}; per_query has metrics {metrics}")
    rows = per_query.loc[per_query["metric"] == metric, ["trial_id", "query_id", "value"]]
    trials = list(pd.unique(rows["trial_id"]))
    if baseline not in trials:
        raise ValueError(f"unknown baseline {baseline!r}; trials with {metric!r}: {trials}")
    _check_rows(rows, metric)
    table = rows.pivot(index="query_id", columns="trial_id", values="value")
    table = table.loc[table[baseline].notna(), [baseline, *(t for t in trials if t != baseline)]]
    if len(table) < 2:
        raise ValueError(f"baseline {baseline!r} has {len(table)} query for {metric!r}; need >= 2")
    lacking = table.isna().sum()
    lacking = lacking[lacking > 0]
    if len(lacking):
        detail = ", ".join(f"{t!r} lacks {n}" for t, n in lacking.items())
        raise ValueError(f"{metric!r}: trials miss queries the baseline has ({detail})")
    return table


def _check_rows(rows: pd.DataFrame, metric: str) -> None:
    nan = rows.loc[rows["value"].isna(), "trial_id"]
    if len(nan):
        raise ValueError(f"{metric!r} has NaN values in trial(s) {list(pd.unique(nan))}")
    repeated = rows.duplicated(["trial_id", "query_id"])
    if repeated.any():
        first = rows.loc[repeated].iloc[0]
        raise ValueError(
            f"{metric!r} has repeated (trial_id, query_id) rows, "
            f"e.g. ({first['trial_id']!r}, {first['query_id']!r})"
        )
