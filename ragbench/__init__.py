"""ragbench: evaluate and tune RAG retrieval — chunkers, embedders, BM25, fusion, rerankers."""

from ragbench.errors import ConfigError, DataError, RagbenchError
from ragbench.registry import registry
from ragbench.text.chunkers import build_chunker, chunk_documents
from ragbench.text.loaders import load
from ragbench.types import Chunk, Document, Hit, Query, Ranking, content_hash

__all__ = [
    "Chunk",
    "ConfigError",
    "DataError",
    "Document",
    "Hit",
    "Query",
    "RagbenchError",
    "Ranking",
    "build_chunker",
    "chunk_documents",
    "content_hash",
    "load",
    "registry",
]

__version__ = "0.1.0"
