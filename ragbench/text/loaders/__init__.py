"""Document loaders: Markdown, plain text, JSONL, PDF, HTML files and whole directory trees.

Every loader is an iterable that yields ``Document`` objects lazily, one file (or JSONL line) at a
time, and fills its ``report`` while it goes: a bad file or line is recorded with its path and a
reason, then skipped, so one broken input never stops a corpus from loading and nothing is lost
without a trace. Texts are decoded as UTF-8 (a BOM is dropped) and ``\\r\\n`` / ``\\r`` become
``\\n`` before a ``Document`` exists, so every character offset downstream points into the text
as loaded. ``load(path)`` picks the loader for a file or a directory.

Only regular files are read: a FIFO, socket or device file is reported and skipped (reading a
FIFO would block forever). In a directory, a symbolic link whose target lies outside the
directory is reported and skipped unless ``follow_symlinks=True``. A file without an extension
(``README``, ``LICENSE``; also ``README.Debian`` and the like) is read as plain text when its
first bytes are text. ``LoadReport.summary()`` says in one line what a pass skipped.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from ragbench.errors import ConfigError, DataError
from ragbench.text.loaders.base import BaseLoader, FileLoader
from ragbench.text.loaders.directory import LABEL_FILES, DirectoryLoader
from ragbench.text.loaders.files import MarkdownLoader, PdfLoader, TextLoader
from ragbench.text.loaders.formats import BY_EXTENSION, file_loader
from ragbench.text.loaders.htmltext import HtmlLoader
from ragbench.text.loaders.jsonl import JsonlLoader
from ragbench.text.loaders.report import LoadProblem, LoadReport, Skip, StrPath, skipped_summary
from ragbench.text.loaders.webpage import WebLoader

__all__ = [
    "LABEL_FILES",
    "BaseLoader",
    "DirectoryLoader",
    "FileLoader",
    "HtmlLoader",
    "JsonlLoader",
    "LoadProblem",
    "LoadReport",
    "MarkdownLoader",
    "PdfLoader",
    "TextLoader",
    "WebLoader",
    "load",
    "skipped_summary",
]


def load(
    path: StrPath,
    follow_symlinks: bool = False,
    *,
    include: Collection[str] = (),
    exclude: Collection[str] = (),
    **options: Any,
) -> BaseLoader:
    """The loader for ``path``: a ``DirectoryLoader``, the file loader for its extension (a
    file without one that is text: ``TextLoader``), or for an ``http(s)://`` URL a
    ``WebLoader`` (``options``: ``max_bytes``, ``timeout``).

    ``follow_symlinks`` lets a directory's links lead outside it, ``include`` / ``exclude``
    select its files by glob (``DirectoryLoader``); ``options`` go to the loader (JSONL
    fields). Raises ``DataError`` when the path does not exist or is no supported file type,
    ``ConfigError`` for an invalid glob or globs given for a file or URL.
    """
    target = Path(path)
    if (include or exclude) and not target.is_dir():
        raise ConfigError(f"--include/--exclude: {path} is not a folder (they select its files)")
    if isinstance(path, str) and path.lower().startswith(("http://", "https://")):
        return WebLoader(path, **options)
    if target.is_dir():
        return DirectoryLoader(
            target, follow_symlinks=follow_symlinks, include=include, exclude=exclude, **options
        )
    if not target.exists():
        raise DataError(f"{target}: no such file or directory")
    try:
        cls = file_loader(target)
    except Skip as skip:
        raise DataError(f"{target}: no extension, and not text ({skip.reason})") from None
    if cls is None:
        supported = ", ".join(sorted(BY_EXTENSION))
        raise DataError(
            f"{target}: unsupported file type (supported: {supported}, and text files without "
            "an extension)"
        )
    return cls(target, **options)
