"""Post-retrieval steps — the ``postprocess`` axis: what happens to the final ranking before it
is returned. ``none`` returns it as it is."""

from __future__ import annotations

from typing import Literal

import numpy as np

from ragbench.registry import components
from ragbench.retrieve.graph import PlanBuilder, StepConfig
from ragbench.types import Ranking

__all__ = ["NoPostprocessConfig", "apply_threshold"]


class NoPostprocessConfig(StepConfig):
    """Return the ranking as it is."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage."""
        return None


def apply_threshold(ranking: Ranking, threshold: float | None) -> Ranking:
    """Pad away hits scoring below ``threshold`` (None keeps everything)."""
    if threshold is None:
        return ranking
    drop = ranking.scores < threshold
    return Ranking(np.where(drop, "", ranking.ids), np.where(drop, -np.inf, ranking.scores))


components("postprocess").register_config(NoPostprocessConfig)
