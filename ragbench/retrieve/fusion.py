"""Fusion: combine several rankings of the same queries into one, deduplicated by chunk id.

Kinds: ``rrf`` (reciprocal rank fusion, optionally weighted per list) and ``weighted`` /
``convex`` (normalise each list's scores per query, then a weighted sum). Ties in the fused
score are broken by the best rank the chunk reached in any input list, then by chunk id, so
results never depend on dict or input order beyond the lists themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from ragbench.registry import ComponentConfig, components
from ragbench.types import Ranking

__all__ = [
    "ConvexConfig",
    "Normalization",
    "RRFConfig",
    "RRFFusion",
    "WeightedConfig",
    "WeightedFusion",
    "normalize_scores",
]

Normalization = Literal["minmax", "zscore", "rank"]
Weight = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class RRFConfig(ComponentConfig):
    """Reciprocal rank fusion: score(d) = Σ_i w_i / (k + rank_i(d)), ranks 1-based."""

    kind: Literal["rrf"] = "rrf"
    k: float = Field(60.0, ge=0, allow_inf_nan=False)
    weights: tuple[Weight, ...] | None = Field(None, min_length=1)


class WeightedConfig(ComponentConfig):
    """Weighted sum of per-query normalised scores (weights default to 1 per list)."""

    kind: Literal["weighted"] = "weighted"
    normalization: Normalization = "minmax"
    weights: tuple[Weight, ...] | None = Field(None, min_length=1)


class ConvexConfig(WeightedConfig):
    """A convex combination: weights sum to 1 (default: equal weights 1/n)."""

    kind: Literal["convex"] = "convex"  # type: ignore[assignment]

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> ConvexConfig:
        if self.weights is not None and not math.isclose(sum(self.weights), 1.0, abs_tol=1e-6):
            raise ValueError(
                f"weights must sum to 1 for convex fusion (sum is {sum(self.weights)})"
            )
        return self


def _check(rankings: Sequence[Ranking], weights: tuple[float, ...] | None, k: int) -> None:
    if not rankings:
        raise ValueError("fusion needs at least one ranking")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    rows = {len(r.ids) for r in rankings}
    if len(rows) > 1:
        raise ValueError(f"rankings cover different numbers of queries: {sorted(rows)}")
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"got {len(weights)} fusion weights for {len(rankings)} rankings")


def _unique_row(ranking: Ranking, q: int) -> list[tuple[str, float]]:
    """Row ``q`` without padding, keeping only the first occurrence of each id."""
    seen: set[str] = set()
    out = []
    for cid, score in ranking.row(q):
        if cid not in seen:
            seen.add(cid)
            out.append((cid, score))
    return out


def _top(fused: dict[str, float], best: dict[str, int], k: int) -> list[tuple[str, float]]:
    """Top ``k`` by fused score desc, then best input rank asc, then id asc."""
    order = sorted(fused, key=lambda c: (-fused[c], best[c], c))[:k]
    return [(c, fused[c]) for c in order]


class RRFFusion:
    """Reciprocal rank fusion (Cormack et al., 2009); documents absent from a list add nothing."""

    def __init__(self, config: RRFConfig | None = None) -> None:
        self.config = config or RRFConfig()

    def fuse(self, rankings: Sequence[Ranking], k: int) -> Ranking:
        """Fused top-``k`` ranking of the queries that ``rankings`` share."""
        _check(rankings, self.config.weights, k)
        weights = self.config.weights or (1.0,) * len(rankings)
        rows = []
        for q in range(len(rankings[0].ids)):
            fused: dict[str, float] = {}
            best: dict[str, int] = {}
            for ranking, w in zip(rankings, weights, strict=True):
                for rank, (cid, _) in enumerate(_unique_row(ranking, q), start=1):
                    fused[cid] = fused.get(cid, 0.0) + w / (self.config.k + rank)
                    best[cid] = min(best.get(cid, rank), rank)
            rows.append(_top(fused, best, k))
        return Ranking.from_rows(rows, k=k)


def normalize_scores(scores: np.ndarray, method: Normalization) -> tuple[np.ndarray, float]:
    """Normalise one list's scores (in rank order); also return the value for absent documents.

    - ``minmax``: (s - min) / (max - min); all-equal scores map to 1; absent documents get 0.
    - ``zscore``: (s - mean) / std (population std); all-equal scores map to 0; absent documents
      get the list's minimum z-score.
    - ``rank``: 1 - (rank - 1) / n, so ranks 1..n map to 1..1/n regardless of the scores;
      absent documents get 1/n, the list's minimum.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if method == "rank":
        n = len(scores)
        return 1.0 - np.arange(n) / n, 1.0 / n
    if method == "minmax":
        lo, span = scores.min(), np.ptp(scores)
        normed = (scores - lo) / span if span > 0 else np.ones_like(scores)
        return normed, 0.0
    std = scores.std()
    normed = (scores - scores.mean()) / std if std > 0 else np.zeros_like(scores)
    return normed, float(normed.min())


class WeightedFusion:
    """Σ_i w_i · norm_i(d) over lists; a document absent from list i gets list i's floor value.

    The floor is what :func:`normalize_scores` returns for absent documents (0 for min-max,
    the lowest z-score, 1/n for rank): a list that did not return a document scores it no
    higher than its own last result. A list with no results for a query contributes nothing.
    """

    def __init__(self, config: WeightedConfig | None = None) -> None:
        self.config = config or WeightedConfig()

    def _weights(self, n: int) -> tuple[float, ...]:
        if self.config.weights is not None:
            return self.config.weights
        return (1.0 / n if isinstance(self.config, ConvexConfig) else 1.0,) * n

    def fuse(self, rankings: Sequence[Ranking], k: int) -> Ranking:
        """Fused top-``k`` ranking of the queries that ``rankings`` share."""
        _check(rankings, self.config.weights, k)
        weights = self._weights(len(rankings))
        rows = []
        for q in range(len(rankings[0].ids)):
            parts: list[tuple[dict[str, float], float, float]] = []  # scores, floor, weight
            best: dict[str, int] = {}
            for ranking, w in zip(rankings, weights, strict=True):
                row = _unique_row(ranking, q)
                if not row:
                    continue
                normed, floor = normalize_scores(
                    np.array([s for _, s in row]), self.config.normalization
                )
                parts.append(
                    (dict(zip((c for c, _ in row), normed.tolist(), strict=True)), floor, w)
                )
                for rank, (cid, _) in enumerate(row, start=1):
                    best[cid] = min(best.get(cid, rank), rank)
            fused = {c: sum(w * s.get(c, floor) for s, floor, w in parts) for c in best}
            rows.append(_top(fused, best, k))
        return Ranking.from_rows(rows, k=k)


_FUSIONS = components("fusion")
_FUSIONS.register(RRFConfig)(RRFFusion)
_FUSIONS.register(WeightedConfig)(WeightedFusion)
_FUSIONS.register(ConvexConfig)(WeightedFusion)
