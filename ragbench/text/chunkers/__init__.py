"""Chunkers: one module per strategy, each registered under its ``kind`` with ``components``.

``build_chunker({"kind": "recursive", "size": 512, "overlap": 64})`` makes a chunker from a spec;
``chunk_documents`` chunks many documents (batched where the chunker supports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ragbench.protocols import Chunker
from ragbench.registry import ComponentConfig, components
from ragbench.text.chunkers.base import SizedConfig
from ragbench.text.chunkers.fixed import FixedChunker, FixedConfig
from ragbench.text.chunkers.none import NoneConfig, WholeDocumentChunker
from ragbench.text.chunkers.recursive import RecursiveChunker, RecursiveConfig
from ragbench.text.chunkers.semantic import SemanticChunker, SemanticConfig
from ragbench.text.chunkers.sentence import SentenceChunker, SentenceConfig
from ragbench.text.chunkers.sentence_window import SentenceWindowChunker, SentenceWindowConfig
from ragbench.types import Chunk, Document

__all__ = [
    "FixedChunker",
    "FixedConfig",
    "NoneConfig",
    "RecursiveChunker",
    "RecursiveConfig",
    "SemanticChunker",
    "SemanticConfig",
    "SentenceChunker",
    "SentenceConfig",
    "SentenceWindowChunker",
    "SentenceWindowConfig",
    "SizedConfig",
    "WholeDocumentChunker",
    "build_chunker",
    "chunk_documents",
]


def build_chunker(spec: Mapping[str, Any] | ComponentConfig | str) -> Chunker:
    """The chunker described by ``spec`` (a dict, a config object, or a bare kind name)."""
    return components("chunker").build(spec)


def chunk_documents(chunker: Chunker, docs: Iterable[Document]) -> list[Chunk]:
    """Chunks of all ``docs`` in order; uses ``chunker.chunk_many`` when it has one."""
    chunk_many = getattr(chunker, "chunk_many", None)
    if chunk_many is not None:
        return chunk_many(docs)
    return [chunk for doc in docs for chunk in chunker.chunk(doc)]
