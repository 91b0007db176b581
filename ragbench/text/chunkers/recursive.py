"""The ``recursive`` chunker: LangChain's ``RecursiveCharacterTextSplitter``, on exact offsets.

Semantics (``strip_whitespace=True``, separators kept): split the text on the first separator
that occurs in it (``""`` means single characters), keeping each separator attached to the start
(or end) of a piece. Pieces shorter than ``size`` are merged greedily into chunks of at most
``size`` units, carrying up to ``overlap`` units of trailing pieces into the next chunk; a piece
of ``size`` units or more is split again with the remaining separators (or kept whole when none
remain). Chunk lengths are sums of the pieces' lengths, as in LangChain. Because separators are
kept, merged pieces are contiguous and each chunk is one span of the original text.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from ragbench.registry import components
from ragbench.text.chunkers.base import Measure, SizedConfig, SpanChunker, span_measure
from ragbench.text.patterns import safe_pattern

__all__ = ["RecursiveChunker", "RecursiveConfig", "recursive_spans"]

Span = tuple[int, int]
KeepSeparator = Literal["start", "end"]


class RecursiveConfig(SizedConfig):
    """Separator-hierarchy splitting with greedy merging, sized in ``unit``."""

    kind: Literal["recursive"] = "recursive"
    is_separator_regex: bool = False
    separators: tuple[str, ...] = Field(("\n\n", "\n", ". ", " ", ""), min_length=1)
    keep_separator: KeepSeparator = "start"

    @field_validator("separators")
    @classmethod
    def _valid_regexes(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if info.data.get("is_separator_regex"):
            for sep in value:
                safe_pattern(sep)
        return value


def _pieces(
    text: str, start: int, end: int, pattern: re.Pattern[str] | None, keep: KeepSeparator
) -> list[Span]:
    """``text[start:end]`` cut at each separator match, the separator kept on one side."""
    if pattern is None:
        return [(i, i + 1) for i in range(start, end)]
    matches = pattern.finditer(text[start:end])
    cuts = [start + (m.start() if keep == "start" else m.end()) for m in matches]
    bounds = [start, *cuts, end]
    return [(a, b) for a, b in pairwise(bounds) if b > a]


def _merge(pieces: list[tuple[int, int, int]], size: int, overlap: int) -> list[Span]:
    """LangChain's ``_merge_splits`` over contiguous ``(start, end, length)`` pieces."""
    out: list[Span] = []
    window: deque[tuple[int, int, int]] = deque()
    total = 0
    for piece in pieces:
        n = piece[2]
        if total + n > size and window:
            out.append((window[0][0], window[-1][1]))
            while total > overlap or (total + n > size and total > 0):
                total -= window.popleft()[2]
        window.append(piece)
        total += n
    if window:
        out.append((window[0][0], window[-1][1]))
    return out


@dataclass(frozen=True)
class _Splitter:
    """One run of the recursive algorithm over one text."""

    text: str
    size: int
    overlap: int
    measure: Measure
    patterns: tuple[re.Pattern[str] | None, ...]  # None stands for "" (characters)
    keep: KeepSeparator

    def split(self, start: int, end: int, level: int) -> list[Span]:
        patterns = self.patterns
        # As LangChain: the first separator that occurs; "" (characters) ends the hierarchy;
        # when none occurs, the last one is used (it yields a single piece).
        chosen, rest = len(patterns) - 1, len(patterns)
        for i in range(level, len(patterns)):
            pattern = patterns[i]
            if pattern is None:
                chosen = i
                break
            if pattern.search(self.text[start:end]) is not None:
                chosen, rest = i, i + 1
                break
        out: list[Span] = []
        good: list[tuple[int, int, int]] = []
        for a, b in _pieces(self.text, start, end, patterns[chosen], self.keep):
            n = self.measure(a, b)
            if n < self.size:
                good.append((a, b, n))
                continue
            if good:
                out.extend(_merge(good, self.size, self.overlap))
                good = []
            out.extend(self.split(a, b, rest) if rest < len(patterns) else [(a, b)])
        if good:
            out.extend(_merge(good, self.size, self.overlap))
        return out


def recursive_spans(
    text: str,
    start: int,
    end: int,
    *,
    size: int,
    overlap: int,
    measure: Measure,
    separators: tuple[str, ...],
    is_separator_regex: bool = False,
    keep_separator: KeepSeparator = "start",
) -> list[Span]:
    """Untrimmed chunk spans of ``text[start:end]`` by the recursive algorithm (see module doc)."""
    patterns = tuple(
        None if sep == "" else re.compile(sep if is_separator_regex else re.escape(sep))
        for sep in separators
    )
    splitter = _Splitter(text, size, overlap, measure, patterns, keep_separator)
    return splitter.split(start, end, 0)


@dataclass(frozen=True)
class RecursiveChunker(SpanChunker):
    """LangChain-compatible recursive splitting with exact character offsets."""

    config: RecursiveConfig

    def spans(self, text: str) -> list[Span]:
        """Character spans of the chunks."""
        c = self.config
        return recursive_spans(
            text,
            0,
            len(text),
            size=c.size,
            overlap=c.overlap,
            measure=span_measure(text, c.unit, c.counter()),
            separators=c.separators,
            is_separator_regex=c.is_separator_regex,
            keep_separator=c.keep_separator,
        )


@components("chunker").register(RecursiveConfig)
def _build(config: RecursiveConfig) -> RecursiveChunker:
    return RecursiveChunker(config)
