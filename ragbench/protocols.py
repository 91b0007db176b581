"""The Protocols of every component family; components depend on these, not on each other."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, runtime_checkable

import numpy as np

from ragbench.types import Chunk, Document, Ranking

if TYPE_CHECKING:
    from ragbench.registry import ComponentConfig

__all__ = [
    "Chunker",
    "DenseStore",
    "Embedder",
    "Fusion",
    "Loader",
    "Reranker",
    "Role",
    "SparseIndex",
    "TokenCounter",
]

Role = Literal["query", "document"]


@runtime_checkable
class Loader(Protocol):
    """Streams documents from a source; problems go to ``report`` instead of raising."""

    def __iter__(self) -> Iterator[Document]: ...


@runtime_checkable
class TokenCounter(Protocol):
    """Measures text for chunk sizes (characters, words, or model tokens)."""

    name: str

    def count(self, text: str) -> int:
        """Number of units in ``text``."""
        ...

    def spans(self, text: str) -> np.ndarray:
        """(n, 2) int array of [start, end) character offsets of each unit of ``text``."""
        ...


@runtime_checkable
class Chunker(Protocol):
    """Splits one document into chunks with exact character offsets."""

    @property
    def config(self) -> ComponentConfig:
        """The config the chunker was built from (its ``label()`` names it in reports)."""
        ...

    def chunk(self, doc: Document) -> list[Chunk]: ...


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to float32 vectors; ``identity`` keys caches (model, prompts, length)."""

    @property
    def dimension(self) -> int: ...

    @property
    def identity(self) -> str: ...

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray: ...


@runtime_checkable
class DenseStore(Protocol):
    """A vector index over chunk ids with exact-match metadata filters."""

    @property
    def dimension(self) -> int | None: ...

    def add(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[Mapping[str, Any]] | None = None,
    ) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def count(self) -> int: ...

    def search(
        self, vectors: np.ndarray, k: int, filter: Mapping[str, Any] | None = None
    ) -> Ranking: ...

    def save(self, path: Path) -> None: ...

    @classmethod
    def load(cls, path: Path) -> Self:
        """The store saved at ``path`` (the registered class is the factory; stage codecs
        load through it)."""
        ...


@runtime_checkable
class SparseIndex(Protocol):
    """A lexical index (BM25) over chunk ids."""

    def add(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        metadata: Sequence[Mapping[str, Any]] | None = None,
    ) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def count(self) -> int: ...

    def search(
        self, texts: Sequence[str], k: int, filter: Mapping[str, Any] | None = None
    ) -> Ranking: ...

    def save(self, path: Path) -> None: ...


@runtime_checkable
class Fusion(Protocol):
    """Combines several rankings of the same queries into one."""

    def fuse(self, rankings: Sequence[Ranking], k: int) -> Ranking: ...


@runtime_checkable
class Reranker(Protocol):
    """Rescores the head of a ranking with a more expensive model."""

    @property
    def candidates(self) -> int:
        """First-stage hits rescored per query (0: none, the ranking passes through)."""
        ...

    def rerank(
        self, queries: Sequence[str], ranking: Ranking, texts: Mapping[str, str], k: int
    ) -> Ranking: ...
