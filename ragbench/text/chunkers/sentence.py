"""The ``sentence`` chunker: packs whole sentences into chunks of at most ``size`` units.

A chunk's length is the sum of the lengths of its sentences and of the whitespace between them
(exact for characters and words). ``overlap`` carries the longest run of trailing sentences whose
length is at most ``overlap`` into the next chunk. A sentence longer than ``size`` becomes chunks
of its own, cut by the recursive algorithm with separators ``(" ", "")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from ragbench.registry import components
from ragbench.text.chunkers.base import Measure, SizedConfig, SpanChunker, span_measure
from ragbench.text.chunkers.recursive import recursive_spans
from ragbench.text.sentences import split_sentences

__all__ = ["SentenceChunker", "SentenceConfig"]

Span = tuple[int, int]


class SentenceConfig(SizedConfig):
    """Sentence packing up to ``size`` units, with ``overlap`` units of whole sentences carried."""

    kind: Literal["sentence"] = "sentence"


@dataclass(frozen=True)
class _Lengths:
    """Lengths of runs of consecutive sentences, from prefix sums."""

    prefix: list[int]  # prefix[k] = sum of (sentence m + gap after m) for m < k
    gaps: list[int]  # gaps[k] = length of the whitespace after sentence k

    @classmethod
    def of(cls, sentences: list[Span], measure: Measure) -> _Lengths:
        nexts = [start for start, _ in sentences[1:]] + [sentences[-1][1]]
        gaps = [measure(end, nxt) for (_, end), nxt in zip(sentences, nexts, strict=True)]
        units = [measure(a, b) + g for (a, b), g in zip(sentences, gaps, strict=True)]
        return cls([0, *accumulate(units)], gaps)

    def run(self, first: int, last: int) -> int:
        """Length of sentences ``first..last`` (inclusive) and the gaps between them."""
        return self.prefix[last + 1] - self.prefix[first] - self.gaps[last]


@dataclass(frozen=True)
class SentenceChunker(SpanChunker):
    """Greedy sentence packing with whole-sentence overlap."""

    config: SentenceConfig

    def spans(self, text: str) -> list[Span]:
        """Character spans of the chunks."""
        sentences = split_sentences(text)
        if not sentences:
            return []
        c = self.config
        measure = span_measure(text, c.unit, c.counter())
        lengths = _Lengths.of(sentences, measure)
        out: list[Span] = []
        first = 0  # first sentence of the open chunk; the chunk is first..k-1
        for k, (start, end) in enumerate(sentences):
            if lengths.run(k, k) > c.size:
                if first < k:
                    out.append((sentences[first][0], sentences[k - 1][1]))
                out.extend(self._cut(text, start, end, measure))
                first = k + 1
            elif first < k and lengths.run(first, k) > c.size:
                out.append((sentences[first][0], sentences[k - 1][1]))
                first = self._carry(lengths, first, k)
        if first < len(sentences):
            out.append((sentences[first][0], sentences[-1][1]))
        return out

    def _carry(self, lengths: _Lengths, first: int, k: int) -> int:
        """First sentence of the chunk after ``first..k-1`` closed: trailing sentences whose
        length fits ``overlap``, and that still leave room for sentence ``k``."""
        c = self.config
        new = k
        while c.overlap > 0 and new > first and lengths.run(new - 1, k - 1) <= c.overlap:
            new -= 1
        while new < k and lengths.run(new, k) > c.size:
            new += 1
        return new

    def _cut(self, text: str, start: int, end: int, measure: Measure) -> list[Span]:
        """Spans of one over-long sentence, cut at spaces, else characters."""
        c = self.config
        return recursive_spans(
            text, start, end, size=c.size, overlap=c.overlap, measure=measure, separators=(" ", "")
        )


@components("chunker").register(SentenceConfig)
def _build(config: SentenceConfig) -> SentenceChunker:
    return SentenceChunker(config)
