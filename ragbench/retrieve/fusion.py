"""Fusion: combine several rankings of the same queries into one, deduplicated by chunk id.

Kinds: ``rrf`` (reciprocal rank fusion, optionally weighted per list) and ``weighted`` /
``convex`` (normalise each list's scores per query, then a weighted sum). Ties in the fused
score are broken by the best rank the chunk reached in any input list, then by chunk id, so
results never depend on dict or input order beyond the lists themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Literal, NamedTuple

import numpy as np
import pandas as pd
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

    def score_scale(self) -> str:
        """The formula of a fused score and its largest value (first in both lists)."""
        top = sum(self.weights or (1.0, 1.0)) / (self.k + 1)
        each = f"1/({self.k:g} + rank)"
        if self.weights is not None:
            each = f"w/({self.k:g} + rank), weights {self.weights}"
        return f"RRF: sum over the bm25 and dense lists of {each}, at most {top:.4f}"


class WeightedConfig(ComponentConfig):
    """Weighted sum of per-query normalised scores (weights default to 1 per list)."""

    kind: Literal["weighted"] = "weighted"
    normalization: Normalization = "minmax"
    weights: tuple[Weight, ...] | None = Field(None, min_length=1)

    def score_scale(self) -> str:
        """A weighted sum of the lists' normalised scores."""
        return (
            f"{self.kind} fusion: weighted sum of {self.normalization}-normalised bm25 and "
            "dense scores"
        )


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


class _Entries(NamedTuple):
    """Every list's first occurrence of each id per query, flattened in list then rank order."""

    query: np.ndarray  # row of the query
    code: np.ndarray  # index into ``names``
    rank: np.ndarray  # 1-based rank among the row's distinct ids
    score: np.ndarray
    part: np.ndarray  # which ranking
    names: np.ndarray  # distinct ids
    order: np.ndarray  # position of each name in sorted id order (the last tie-break)


def _entries(rankings: Sequence[Ranking]) -> _Entries:
    """The rankings' entries without padding and repeated ids (a repeat keeps its first rank),
    ids coded by one hash pass (``pandas.factorize``), not by a sort of the strings."""
    codes, names = pd.factorize(np.concatenate([r.ids.ravel() for r in rankings]), sort=False)
    names = np.asarray(names, dtype=object)
    parts, at = [], 0
    for i, r in enumerate(rankings):
        n, depth = r.ids.shape if r.ids.ndim == 2 else (len(r.ids), 0)
        code = codes[at : at + n * depth].reshape(n, depth)
        at += n * depth
        keep = r.ids != ""
        query = np.repeat(np.arange(n), depth).reshape(n, depth)
        pair = query * len(names) + code
        first = np.zeros(int(keep.sum()), dtype=bool)
        first[np.unique(pair[keep], return_index=True)[1]] = True
        kept = np.zeros_like(keep)
        kept[keep] = first
        rank = np.cumsum(kept, axis=1)
        score = r.scores[kept].astype(np.float64)
        parts.append((query[kept], code[kept], rank[kept], score, np.full(len(score), i)))
    order = np.empty(len(names), dtype=np.int64)
    order[np.argsort(names)] = np.arange(len(names))
    query, code, rank, score, part = (np.concatenate(c) for c in zip(*parts, strict=True))
    return _Entries(query, code, rank, score, part, names, order)


def _pairs(e: _Entries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each entry's (query, id) pair as an index into the distinct pairs, the pairs, and each
    pair's best rank in any list."""
    pairs, index = np.unique(e.query * len(e.names) + e.code, return_inverse=True)
    best = np.full(len(pairs), np.iinfo(np.int64).max)
    np.minimum.at(best, index, e.rank)
    return index, pairs, best


def _top(
    e: _Entries, pairs: np.ndarray, fused: np.ndarray, best: np.ndarray, n: int, k: int
) -> Ranking:
    """Per query the top ``k`` pairs by fused score desc, then best input rank asc, then id
    asc, as a ranking of ``n`` rows padded to ``k``."""
    query, code = pairs // max(1, len(e.names)), pairs % max(1, len(e.names))
    order = np.lexsort((e.order[code], best, -fused, query))
    query, code, fused = query[order], code[order], fused[order]
    start = np.searchsorted(query, query, side="left")
    column = np.arange(len(query)) - start
    shown = column < k
    ids = np.full((n, k), "", dtype=object)
    scores = np.full((n, k), -np.inf, dtype=np.float64)
    ids[query[shown], column[shown]] = e.names[code[shown]]
    scores[query[shown], column[shown]] = fused[shown]
    return Ranking(ids, scores)


class RRFFusion:
    """Reciprocal rank fusion (Cormack et al., 2009); documents absent from a list add nothing."""

    def __init__(self, config: RRFConfig | None = None) -> None:
        self.config = config or RRFConfig()

    def fuse(self, rankings: Sequence[Ranking], k: int) -> Ranking:
        """Fused top-``k`` ranking of the queries that ``rankings`` share."""
        _check(rankings, self.config.weights, k)
        weights = np.asarray(self.config.weights or (1.0,) * len(rankings), dtype=np.float64)
        e = _entries(rankings)
        index, pairs, best = _pairs(e)
        # bincount adds in entry order, i.e. list by list, as a running sum from 0.0 would
        fused = np.bincount(index, weights[e.part] / (self.config.k + e.rank), len(pairs))
        return _top(e, pairs, fused, best, len(rankings[0].ids), k)


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
        n = len(rankings[0].ids)
        e = _entries(rankings)
        index, pairs, best = _pairs(e)
        pair_query = pairs // max(1, len(e.names))
        normed = np.empty(len(e.score))
        floors = np.full((len(rankings), n), np.nan)  # nan: the list has no results there
        bounds = np.flatnonzero(np.diff(e.part * n + e.query)) + 1
        for at in np.split(np.arange(len(e.score)), bounds):
            if len(at):
                normed[at], floor = normalize_scores(e.score[at], self.config.normalization)
                floors[e.part[at[0]], e.query[at[0]]] = floor
        fused = np.zeros(len(pairs))
        for i, w in enumerate(weights):  # list by list, as the sum over lists runs
            mine = e.part == i
            value = floors[i, pair_query]
            value[index[mine]] = normed[mine]
            shown = ~np.isnan(value)
            fused[shown] = fused[shown] + w * value[shown]
        return _top(e, pairs, fused, best, n, k)


_FUSIONS = components("fusion")
_FUSIONS.register(RRFConfig)(RRFFusion)
_FUSIONS.register(WeightedConfig)(WeightedFusion)
_FUSIONS.register(ConvexConfig)(WeightedFusion)
