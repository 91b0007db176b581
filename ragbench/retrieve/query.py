"""Query transforms — the ``query`` axis: what the retrievers search with instead of the text
the user typed. ``none`` searches with the query as given.

A transform plans a stage whose value is the new query texts and points ``g.queries`` at it;
the retrievers planned after it search with those texts (see ARCHITECTURE.md, "Add a stage").
"""

from __future__ import annotations

from typing import Literal

from ragbench.registry import components
from ragbench.retrieve.graph import PlanBuilder, StepConfig

__all__ = ["NoQueryConfig"]


class NoQueryConfig(StepConfig):
    """Search with the query as given."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage."""
        return None


components("query").register_config(NoQueryConfig)
