"""Which loader reads a file: by its extension, or as text when it has none and its head is text."""

from __future__ import annotations

import os
from pathlib import Path

from ragbench.text.loaders.base import FileLoader
from ragbench.text.loaders.decode import extensionless, sniff_text
from ragbench.text.loaders.files import MarkdownLoader, PdfLoader, TextLoader
from ragbench.text.loaders.htmltext import HtmlLoader
from ragbench.text.loaders.jsonl import JsonlLoader
from ragbench.text.loaders.report import StrPath

FILE_LOADERS: tuple[type[FileLoader], ...] = (
    MarkdownLoader,
    TextLoader,
    JsonlLoader,
    PdfLoader,
    HtmlLoader,
)
BY_EXTENSION: dict[str, type[FileLoader]] = {
    ext: cls for cls in FILE_LOADERS for ext in cls.extensions
}


def file_loader(path: StrPath) -> type[FileLoader] | None:
    """The loader class of the file ``path``: the one for its extension, ``TextLoader`` for a
    file without one whose first bytes are text (else ``Skip`` says why not), None for an
    extension no loader reads."""
    name = os.path.basename(path)
    cls = BY_EXTENSION.get(Path(name).suffix.lower())
    if cls is None and extensionless(name):
        sniff_text(path)
        cls = TextLoader
    return cls
