"""The ``semantic`` chunker: cut where neighbouring sentences' embeddings drift apart.

As LlamaIndex's ``SemanticSplitterNodeParser`` (after Kamradt): each sentence ``i`` is embedded
together with ``buffer`` sentences on each side (a slice of the document); a chunk ends after
sentence ``i`` when the cosine distance between groups ``i`` and ``i + 1`` exceeds the
``percentile``-th percentile of the document's distances. The embedder is any ``Embedder``;
``chunk_many`` embeds the groups of all documents in one batched call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal

import numpy as np
from pydantic import Field

from ragbench.protocols import Embedder
from ragbench.registry import ComponentConfig, component_field, components
from ragbench.text.chunkers.base import make_chunks
from ragbench.text.sentences import split_sentences
from ragbench.types import Chunk, Document

__all__ = ["SemanticChunker", "SemanticConfig"]

Span = tuple[int, int]
EmbedderSpec = component_field("embedder")
_DEFAULT_EMBEDDER = {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}


class SemanticConfig(ComponentConfig):
    """Embedding-dissimilarity breakpoints between sentence groups."""

    kind: Literal["semantic"] = "semantic"
    buffer: int = Field(1, ge=0)
    percentile: float = Field(95.0, ge=0, le=100)
    embedder: EmbedderSpec = Field(  # type: ignore[valid-type]
        default_factory=lambda: components("embedder").parse(_DEFAULT_EMBEDDER)
    )


def sentence_groups(text: str, sentences: list[Span], buffer: int) -> list[str]:
    """For each sentence, the document slice from ``buffer`` sentences before to after it."""
    last = len(sentences) - 1
    return [
        text[sentences[max(0, i - buffer)][0] : sentences[min(last, i + buffer)][1]]
        for i in range(len(sentences))
    ]


def breakpoints(vectors: np.ndarray, percentile: float) -> list[int]:
    """Indices ``i`` such that a chunk ends after sentence ``i``."""
    if len(vectors) < 3:
        return []
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    distances = 1.0 - np.einsum("ij,ij->i", unit[:-1], unit[1:])
    threshold = np.percentile(distances, percentile)
    return np.nonzero(distances > threshold)[0].tolist()


def _spans(sentences: list[Span], cuts: list[int]) -> list[Span]:
    bounds = [0, *(i + 1 for i in cuts), len(sentences)]
    return [(sentences[a][0], sentences[b - 1][1]) for a, b in pairwise(bounds)]


@dataclass(frozen=True)
class SemanticChunker:
    """Sentence runs split at embedding-dissimilarity breakpoints."""

    config: SemanticConfig
    embedder: Embedder

    def chunk(self, doc: Document) -> list[Chunk]:
        """Chunks of one document."""
        return self.chunk_many([doc])

    def chunk_many(self, docs: Iterable[Document]) -> list[Chunk]:
        """Chunks of many documents, embedding all their sentence groups in one call."""
        docs = list(docs)
        sentences = [split_sentences(doc.text) for doc in docs]
        # Fewer than three sentences cannot have a breakpoint: no need to embed them.
        groups = [
            sentence_groups(doc.text, sents, self.config.buffer) if len(sents) >= 3 else []
            for doc, sents in zip(docs, sentences, strict=True)
        ]
        flat = [g for doc_groups in groups for g in doc_groups]
        vectors = self.embedder.embed(flat, role="document") if flat else np.zeros((0, 1))
        chunks: list[Chunk] = []
        offset = 0
        for doc, sents, doc_groups in zip(docs, sentences, groups, strict=True):
            doc_vectors = vectors[offset : offset + len(doc_groups)]
            offset += len(doc_groups)
            if sents:
                cuts = breakpoints(doc_vectors, self.config.percentile)
                chunks.extend(make_chunks(doc, _spans(sents, cuts)))
        return chunks


@components("chunker").register(SemanticConfig)
def _build(config: SemanticConfig) -> SemanticChunker:
    return SemanticChunker(config, components("embedder").build(config.embedder))
