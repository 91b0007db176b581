"""The ``sentence_window`` chunker: one chunk per sentence, carrying its neighbours as context.

The chunk text (what gets embedded) is a single sentence; ``metadata["window"]`` holds the
document slice from ``window`` sentences before to ``window`` sentences after it (what an LLM is
shown), with its offsets in ``metadata["window_start"]`` and ``metadata["window_end"]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from ragbench.registry import ComponentConfig, components
from ragbench.text.chunkers.base import make_chunks
from ragbench.text.sentences import split_sentences
from ragbench.types import Chunk, Document

__all__ = ["SentenceWindowChunker", "SentenceWindowConfig"]


class SentenceWindowConfig(ComponentConfig):
    """Single-sentence chunks with ``window`` sentences of context on each side."""

    kind: Literal["sentence_window"] = "sentence_window"
    window: int = Field(3, ge=0)


@dataclass(frozen=True)
class SentenceWindowChunker:
    """Embeds one sentence, carries a window of neighbours in the metadata."""

    config: SentenceWindowConfig = field(default_factory=SentenceWindowConfig)

    def chunk(self, doc: Document) -> list[Chunk]:
        """One chunk per sentence of ``doc``."""
        text = doc.text
        sentences = split_sentences(text)
        w, last = self.config.window, len(sentences) - 1
        extras: list[dict[str, Any]] = []
        for i in range(len(sentences)):
            start, end = sentences[max(0, i - w)][0], sentences[min(last, i + w)][1]
            extras.append({"window": text[start:end], "window_start": start, "window_end": end})
        return make_chunks(doc, sentences, extras)


@components("chunker").register(SentenceWindowConfig)
def _build(config: SentenceWindowConfig) -> SentenceWindowChunker:
    return SentenceWindowChunker(config)
