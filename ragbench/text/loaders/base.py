"""The loader classes every source derives from: a path with a ``report``, a file, one document."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from ragbench.errors import DataError
from ragbench.text.loaders.decode import NOT_REGULAR, not_regular
from ragbench.text.loaders.report import LoadReport, Pass, Skip, StrPath
from ragbench.types import Document


class BaseLoader(ABC):
    """A path-backed source of documents with a ``report`` filled while iterating."""

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(f"{self.path}: no such file or directory")
        self.report = LoadReport()

    def __iter__(self) -> Iterator[Document]:
        self.report.clear()
        yield from self._stream(Pass(self.report))

    @abstractmethod
    def _stream(self, run: Pass) -> Iterator[Document]:
        """Yield the documents of this source, recording problems in ``run.report``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


class FileLoader(BaseLoader):
    """Loads one file; subclasses name their ``format`` and ``extensions``.

    Loaded on its own, a file's id and ``metadata["path"]`` are its name; under a
    ``DirectoryLoader`` they are its path relative to the root.
    """

    format: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]

    def __init__(self, path: StrPath) -> None:
        super().__init__(path)
        if self.path.is_dir():
            raise DataError(f"{self.path}: is a directory (use DirectoryLoader or load())")

    def _stream(self, run: Pass) -> Iterator[Document]:
        reason = not_regular(self.path)
        if reason is not None:
            run.report.add(self.path, reason, NOT_REGULAR)
            return iter(())
        return self._file(self.path.name, run)

    @abstractmethod
    def _file(self, rel: str, run: Pass) -> Iterator[Document]:
        """Documents of this file, which has the relative path ``rel``."""


class OneDocumentLoader(FileLoader):
    """A file that is a single document."""

    def _file(self, rel: str, run: Pass) -> Iterator[Document]:
        try:
            doc = self._read(rel)
        except Skip as skip:
            run.report.add(self.path, skip.reason, skip.kind)
            return
        if run.admit(doc, self.path):
            yield doc

    @abstractmethod
    def _read(self, rel: str) -> Document:
        """The file as one document; raises ``Skip`` when it cannot be used."""

    def _document(self, rel: str, text: str, title: str | None, **metadata: Any) -> Document:
        """A document with the common metadata (``path``, ``format``, a non-empty ``title``)."""
        meta = {"path": rel, "format": self.format, **metadata}
        if title:
            meta["title"] = title
        return Document(id=rel, text=text, metadata=meta, source=str(self.path))
