"""How sure is the pick? The bootstrap probability that each trial is the best, and ties.

A sweep's best trial is the one with the best mean over the queries it ran on; other queries
would have given other means. ``pick_confidence`` resamples the queries with replacement —
one draw of query indices per resample, applied to every trial (paired), ``n_resamples``
times, seeded (``significance.bootstrap_means``) — and counts, per trial, the share of
resamples in which it is the best (by the metric's direction; trials tied for best in a
resample share it equally, so two trials with the same values get 0.5 each). The *leaders* are
the fewest trials, most probable first, that hold ``mass`` (95%) of that probability: one
leader is a pick the queries support; several cannot be told apart by these queries
(``PickConfidence.line``: ``hybrid: best in 97% of 1,000 bootstrap resamples of the 300
queries`` or ``cannot separate hybrid (52%) from dense (41%) ...``).

A tie on the deciding value is never a pick: ``tie_text`` says so (``tie: A and B at 0.7312``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from ragbench.evaluate.metrics import TIE_RTOL, parse_metric
from ragbench.evaluate.significance import bootstrap_means

__all__ = [
    "PickConfidence",
    "best_probabilities",
    "joined",
    "percent",
    "pick_confidence",
    "tie_text",
]


SHOWN = 3
"""Leaders a line names; the rest are counted."""


@dataclass(frozen=True)
class PickConfidence:
    """The bootstrap probability that each trial is the best on ``metric``.

    ``p_best``: per trial id, the share of resamples in which it is the best, most probable
    first (sums to 1); ``labels``: trial id → readable label."""

    metric: str
    p_best: pd.Series
    labels: Mapping[str, str]
    queries: int
    n_resamples: int
    mass: float = 0.95

    @property
    def leaders(self) -> list[str]:
        """The fewest leading trials holding at least ``mass`` of the best-probability."""
        held = self.p_best.cumsum().to_numpy()
        count = int(np.searchsorted(held, self.mass - 1e-12)) + 1
        return [str(t) for t in self.p_best.index[: min(count, len(held))]]

    @property
    def separated(self) -> bool:
        """Whether one trial holds the ``mass`` alone: a pick the queries support."""
        return len(self.leaders) == 1

    def line(self, name: Callable[[str], str] | None = None) -> str:
        """One readable line; ``name`` shows a trial id (default: its label)."""
        show = name or (lambda t: self.labels.get(t, t))
        sample = f"{self.n_resamples:,} bootstrap resamples of the {self.queries:,} queries"
        leaders = self.leaders
        if len(leaders) == 1:
            return f"{show(leaders[0])}: best in {percent(self.p_best[leaders[0]])} of {sample}"
        shown = [f"{show(t)} ({percent(self.p_best[t])})" for t in leaders[:SHOWN]]
        if len(leaders) > SHOWN:
            rest, more = float(self.p_best[leaders[SHOWN:]].sum()), len(leaders) - SHOWN
            shown.append(f"{more} other{'s' if more > 1 else ''} ({percent(rest)})")
        return f"cannot separate {shown[0]} from {joined(shown[1:])} in {sample}"


def percent(p: float) -> str:
    """A probability as a whole percentage that never rounds to a certainty it is not."""
    if 0 < p < 0.005:
        return "<1%"
    if 0.995 <= p < 1:
        return ">99%"
    return f"{p:.0%}"


def joined(items: Sequence[str]) -> str:
    """``A``, ``A and B``, ``A, B and C``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def tie_text(names: Sequence[str], value: float | None = None) -> str:
    """Trials tied on the deciding value: ``tie: A and B at 0.7312`` (``tie: A and B`` without
    a value)."""
    return f"tie: {joined(names)}" + (f" at {value:.4f}" if value is not None else "")


def best_probabilities(
    values: npt.ArrayLike, higher_is_better: bool, n_resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """Per column of ``values`` (queries × trials), the share of ``n_resamples`` paired
    bootstrap resamples of the queries in which its mean is the best (the highest, or the
    lowest); trials tied for best in a resample share it equally."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"values must be a non-empty queries × trials matrix, got {x.shape}")
    if np.isnan(x).any():
        raise ValueError("values contain NaN: leave out the queries some trial has no value for")
    means = bootstrap_means(x, n_resamples, seed)
    top = means.max(axis=1) if higher_is_better else means.min(axis=1)
    best = np.isclose(means, top[:, None], rtol=TIE_RTOL, atol=0.0)
    return (best / best.sum(axis=1, keepdims=True)).mean(axis=0)


def pick_confidence(
    values: pd.DataFrame,
    metric: str,
    labels: Mapping[str, str] | None = None,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    mass: float = 0.95,
) -> PickConfidence:
    """How sure the pick among the trials of ``values`` (queries × trial ids, the values of
    ``metric``) is: ``best_probabilities`` by the metric's direction, and the leaders holding
    ``mass`` of it. ``labels`` names the trials (default: their ids)."""
    if not 0 < mass <= 1:
        raise ValueError(f"mass must lie in (0, 1], got {mass}")
    higher = parse_metric(metric).higher_is_better
    p = best_probabilities(values.to_numpy(), higher, n_resamples, seed)
    ranked = pd.Series(p, index=[str(t) for t in values.columns], name="p_best")
    ranked = ranked.sort_values(ascending=False, kind="stable")
    names = {t: str((labels or {}).get(t, t)) for t in ranked.index}
    return PickConfidence(metric, ranked, names, len(values), n_resamples, mass)
