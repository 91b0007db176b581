"""The ``none`` chunker: each document is a single chunk (its trimmed text)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from ragbench.registry import ComponentConfig, components
from ragbench.text.chunkers.base import SpanChunker

__all__ = ["NoneConfig", "WholeDocumentChunker"]


class NoneConfig(ComponentConfig):
    """No chunking: whole documents are retrieved."""

    kind: Literal["none"] = "none"
    whole_documents: ClassVar[bool] = True
    """Declares one chunk per document (document-level runs then retrieve ``depth`` chunks)."""


@dataclass(frozen=True)
class WholeDocumentChunker(SpanChunker):
    """Returns the whole document as one chunk."""

    config: NoneConfig = field(default_factory=NoneConfig)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """One span over the whole text."""
        return [(0, len(text))]


@components("chunker").register(NoneConfig)
def _build(config: NoneConfig) -> WholeDocumentChunker:
    return WholeDocumentChunker(config)
