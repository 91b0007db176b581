"""What every chunker shares: the sized-chunker config and turning character spans into chunks.

Chunkers decide *where* to cut (a list of ``(start, end)`` character spans); ``make_chunks`` does
the rest the same way for all of them: trims whitespace at both ends of each span, drops empty
spans, numbers the kept chunks and copies the document's metadata — but for a PDF's page
offsets (``metadata["pages"]``), which become the chunk's own pages: ``pages``, the 1-based
numbers of the pages whose text it holds, and ``page``, the first of them. Offsets therefore
always satisfy ``doc.text[chunk.start:chunk.end] == chunk.text``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from ragbench.protocols import TokenCounter
from ragbench.registry import ComponentConfig
from ragbench.text.tokenize import Unit, token_counter
from ragbench.types import Chunk, Document

__all__ = ["Measure", "SizedConfig", "SpanChunker", "make_chunks", "span_measure", "trim_span"]

Span = tuple[int, int]
Measure = Callable[[int, int], int]
"""Length of ``text[start:end]`` in the configured unit, given ``(start, end)``."""


class SizedConfig(ComponentConfig):
    """Options shared by chunkers that bound chunk size: ``fixed``, ``recursive``, ``sentence``."""

    size: int = Field(gt=0)
    overlap: int = Field(0, ge=0)
    unit: Unit = "chars"
    tokenizer: str | None = None

    @field_validator("overlap")
    @classmethod
    def _overlap_below_size(cls, value: int, info: ValidationInfo) -> int:
        size = info.data.get("size")
        if size is not None and value >= size:
            raise ValueError(f"must be < size (got {value} >= {size})")
        return value

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer_needs_tokens(cls, value: str | None, info: ValidationInfo) -> str | None:
        unit = info.data.get("unit")
        if value is not None and unit is not None and unit != "tokens":
            raise ValueError(f"only used with unit 'tokens' (got unit {unit!r})")
        return value

    def counter(self) -> TokenCounter:
        """The ``TokenCounter`` measuring this config's unit."""
        return token_counter(self.unit, self.tokenizer)


def span_measure(text: str, unit: Unit, counter: TokenCounter) -> Measure:
    """A ``Measure`` over ``text``: plain arithmetic for characters, the counter otherwise."""
    if unit == "chars":
        return lambda start, end: end - start
    return lambda start, end: counter.count(text[start:end])


def trim_span(text: str, start: int, end: int) -> Span:
    """``(start, end)`` narrowed past whitespace at both ends (``str.strip`` semantics)."""
    piece = text[start:end]
    rest = piece.lstrip()
    start += len(piece) - len(rest)
    return start, start + len(rest.rstrip())


def make_chunks(
    doc: Document,
    spans: Iterable[Span],
    extras: Sequence[Mapping[str, Any]] | None = None,
) -> list[Chunk]:
    """Chunks of ``doc`` for ``spans`` (trimmed, empty ones dropped), numbered from 0.

    ``extras[k]`` is merged over the document metadata of the chunk made from ``spans[k]``.
    """
    text = doc.text
    chunks: list[Chunk] = []
    pages = doc.metadata.get("pages") if doc.metadata.get("format") == "pdf" else None
    for k, (raw_start, raw_end) in enumerate(spans):
        start, end = trim_span(text, raw_start, raw_end)
        if start >= end:
            continue
        i = len(chunks)
        metadata = {**doc.metadata, **extras[k]} if extras is not None else dict(doc.metadata)
        if isinstance(pages, list):
            numbers = [n for n, (a, b) in enumerate(pages, 1) if a < b and a < end and b > start]
            metadata.update(pages=numbers, page=numbers[0] if numbers else None)
        chunks.append(
            Chunk(
                id=f"{doc.id}:chunk-{i}",
                doc_id=doc.id,
                index=i,
                start=start,
                end=end,
                text=text[start:end],
                metadata=metadata,
            )
        )
    return chunks


class SpanChunker(ABC):
    """A chunker defined by where it cuts a text; ``chunk`` builds the chunks from the spans."""

    @abstractmethod
    def spans(self, text: str) -> list[Span]:
        """Untrimmed ``(start, end)`` character spans of the chunks of ``text``, in order."""

    def chunk(self, doc: Document) -> list[Chunk]:
        """Chunks of one document."""
        return make_chunks(doc, self.spans(doc.text))
