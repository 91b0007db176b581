"""The ``none`` chunker: each document is a single chunk (its trimmed text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ragbench.registry import ComponentConfig, registry
from ragbench.text.chunkers.base import SpanChunker

__all__ = ["NoneConfig", "WholeDocumentChunker"]


class NoneConfig(ComponentConfig):
    """No chunking: whole documents are retrieved."""

    kind: Literal["none"] = "none"


@dataclass(frozen=True)
class WholeDocumentChunker(SpanChunker):
    """Returns the whole document as one chunk."""

    config: NoneConfig = field(default_factory=NoneConfig)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """One span over the whole text."""
        return [(0, len(text))]


@registry("chunker").register(NoneConfig)
def _build(config: NoneConfig) -> WholeDocumentChunker:
    return WholeDocumentChunker(config)
