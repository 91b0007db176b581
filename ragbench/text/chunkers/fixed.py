"""The ``fixed`` chunker: windows of ``size`` units that advance by ``size - overlap`` units.

Units are characters, whitespace words or model tokens. A window of units ``i..j`` covers the
characters from the start of unit ``i`` to the end of unit ``j`` (like LangChain's
``TokenTextSplitter``, but cut on the original text so offsets are exact).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from ragbench.registry import components
from ragbench.text.chunkers.base import SizedConfig, SpanChunker

__all__ = ["FixedChunker", "FixedConfig"]


class FixedConfig(SizedConfig):
    """Fixed-size windows of ``size`` units with ``overlap`` units shared by neighbours."""

    kind: Literal["fixed"] = "fixed"


def unit_windows(n: int, size: int, overlap: int) -> Iterator[tuple[int, int]]:
    """``[i, j)`` unit ranges of the windows over ``n`` units; the last one reaches unit ``n-1``."""
    step = size - overlap
    i = 0
    while i < n:
        j = min(i + size, n)
        yield i, j
        if j == n:
            return
        i += step


@dataclass(frozen=True)
class FixedChunker(SpanChunker):
    """Cuts fixed-size, optionally overlapping windows of characters, words or tokens."""

    config: FixedConfig

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the windows."""
        c = self.config
        if c.unit == "chars":
            return list(unit_windows(len(text), c.size, c.overlap))
        units = c.counter().spans(text)
        if len(units) == 0:
            return []
        starts = units[:, 0].tolist()
        ends = units[:, 1].tolist()
        # Characters before the first unit (whitespace, or text a tokenizer drops) go with the
        # first window, so every non-whitespace character lands in some chunk.
        starts[0] = 0
        return [(starts[i], ends[j - 1]) for i, j in unit_windows(len(starts), c.size, c.overlap)]


@components("chunker").register(FixedConfig)
def _build(config: FixedConfig) -> FixedChunker:
    return FixedChunker(config)
