"""Parameter grids of a run: which config parameters a sweep varied, and which plots over them
can say something.

The rule a report draws by: a heatmap of two parameters needs the full grid of their values
among the trials that have both — each parameter two values or more, and every combination
swept (``grid_problem``); two parameters that change together (``together``: each value of one
goes with one value of the other, as two chunkings that set size and overlap at once) are one
axis of the sweep, not two, so only the first of them gets heatmaps. A line through fewer
than ``TREND`` distinct x values is a slope between two points, not a trend: it is drawn as
dots (``is_trend``). A grid over chunker options is drawn per chunker kind (each kind's options
mean something else).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

__all__ = [
    "CHUNKER",
    "TREND",
    "changing_together",
    "chunker_kinds",
    "grid_problem",
    "heatmap_pairs",
    "is_trend",
    "swept_parameters",
    "together",
]

CHUNKER = "param.chunker.kind"

TREND = 3
"""Distinct x values a line needs to show a trend; through two it is one slope."""


def swept_parameters(trials: pd.DataFrame) -> list[str]:
    """The ``param.*`` columns that take more than one value among finished trials."""
    ok = trials[trials["status"] == "ok"] if "status" in trials.columns else trials
    return [
        c for c in ok.columns if c.startswith("param.") and ok[c].dropna().astype(str).nunique() > 1
    ]


def chunker_kinds(trials: pd.DataFrame, x: str, y: str) -> list[str | None]:
    """The chunker kinds to draw ``heatmap(x, y)`` for, one plot each: a chunker option (size,
    overlap, ...) means something else under each kind, so their grids are not mixed. ``[None]``
    (one plot of all trials) when neither axis is a chunker option or one kind has values."""
    if CHUNKER not in trials.columns or not any(c.startswith("param.chunker.") for c in (x, y)):
        return [None]
    present = trials.dropna(subset=[c for c in (x, y) if c in trials.columns])
    kinds = sorted(present[CHUNKER].dropna().astype(str).unique())
    return list(kinds) if len(kinds) > 1 else [None]


def _pairs(trials: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """The (x, y) values, as text, of the trials that have both."""
    return trials[[x, y]].dropna().astype(str)


def together(trials: pd.DataFrame, x: str, y: str) -> bool:
    """Whether ``x`` and ``y`` change together among the trials that have both: each takes
    two values or more and each value of one goes with a single value of the other."""
    pairs = _pairs(trials, x, y)
    if pairs[x].nunique() < 2 or pairs[y].nunique() < 2:
        return False
    combos = len(pairs.drop_duplicates())
    return combos == pairs[x].nunique() == pairs[y].nunique()


def grid_problem(trials: pd.DataFrame, x: str, y: str) -> str | None:
    """Why a heatmap of ``x`` × ``y`` over ``trials`` would say nothing, or None when it can
    say something: a parameter with one value among the trials that have both, or fewer
    combinations than the full grid of their values (the sweep changed them together)."""
    pairs = _pairs(trials, x, y)
    names = {c: c.removeprefix("param.") for c in (x, y)}
    for column in (x, y):
        if pairs[column].nunique() < 2:
            return f"{names[column]} takes fewer than 2 values among the trials with both"
    grid = pairs[x].nunique() * pairs[y].nunique()
    combos = len(pairs.drop_duplicates())
    if combos < grid:
        return (
            f"{names[x]} and {names[y]} change together: {combos} of the {grid} combinations "
            "of their values were swept"
        )
    return None


def heatmap_pairs(
    trials: pd.DataFrame, parameters: Sequence[str]
) -> list[tuple[str, str, str | None]]:
    """The heatmaps worth drawing over ``parameters`` (swept, numeric): ``(x, y, chunker
    kind)`` for each pair whose trials cover the full grid (``grid_problem``), per chunker
    kind; a parameter that changes ``together`` with an earlier one is left out."""
    kept: list[str] = []
    for column in parameters:
        if not any(together(trials, first, column) for first in kept):
            kept.append(column)
    found = []
    for i, x in enumerate(kept):
        for y in kept[i + 1 :]:
            for kind in chunker_kinds(trials, x, y):
                subset = trials if kind is None else trials[trials[CHUNKER].astype(str) == kind]
                if grid_problem(subset, x, y) is None:
                    found.append((x, y, kind))
    return found


def changing_together(trials: pd.DataFrame, parameters: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs of ``parameters`` that change ``together`` (the report says why it draws no
    heatmap over them)."""
    return [
        (x, y)
        for i, x in enumerate(parameters)
        for y in parameters[i + 1 :]
        if together(trials, x, y)
    ]


def is_trend(values: pd.Series | Sequence[object]) -> bool:
    """Whether a line through ``values`` (its x values) shows a trend: ``TREND`` distinct
    values or more."""
    return pd.Series(values).dropna().nunique() >= TREND
