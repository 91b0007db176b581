"""Parameter grids of a run: which config parameters a sweep varied, and which chunker kinds a
grid over chunker options is drawn for (each kind's options mean something else)."""

from __future__ import annotations

import pandas as pd

__all__ = ["CHUNKER", "chunker_kinds", "swept_parameters"]

CHUNKER = "param.chunker.kind"


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
