"""A folder's walk: every supported file under it, selected by globs, each real folder once."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from ragbench.errors import DataError
from ragbench.owned import owned
from ragbench.text.loaders.base import BaseLoader
from ragbench.text.loaders.decode import NOT_REGULAR, not_regular, os_reason
from ragbench.text.loaders.formats import file_loader
from ragbench.text.loaders.globs import globs
from ragbench.text.loaders.jsonl import JsonlLoader
from ragbench.text.loaders.report import UNSUPPORTED, Pass, Skip, StrPath
from ragbench.types import Document

OUTPUT = "ragbench output"
"""The kind of a skipped folder ragbench wrote (a run, a report, a labeled set it made)."""

LABEL_FILES = ("queries.jsonl", "cuts.jsonl")
"""What a labeled set keeps beside its documents (``ragbench.data.spans``, ``.folder``,
``.cuts``): at a folder's top these files are labels, never documents."""


class DirectoryLoader(BaseLoader):
    """Every supported file under a directory, recursively, in sorted relative-path order.

    Document ids are POSIX paths relative to the root (``guides/setup.md``; JSONL files
    contribute their records' ids). Files are dispatched by extension (keyword options go to
    ``JsonlLoader``); a file without an extension (``README``, ``LICENSE``, ``README.Debian``)
    is read as plain text when its first bytes are text, else reported as ``binary file``;
    other extensions are reported as ``unsupported extension``, and entries that are no regular
    file (FIFOs, sockets, devices) as ``not a regular file (...)``. The label files of a labeled
    set at the top (``LABEL_FILES``: ``queries.jsonl``, ``cuts.jsonl``) are reported as ``label
    file`` and never read as documents. Hidden (dot-prefixed) files and directories are skipped
    silently, and so is what ``include`` / ``exclude`` leave out: gitignore-like globs relative
    to the root (``**/*.md``, ``build/**``, ``*.log``; one without a ``/`` matches at any depth,
    a folder that matches takes its contents with it); with ``include`` only matching files are
    read. A symbolic link to somewhere outside the directory is reported and skipped unless
    ``follow_symlinks``; links are otherwise followed, but each real directory is walked once:
    a link back to an ancestor is reported as ``symlink loop``, a second link to a directory
    already walked as ``already loaded as ...``. Files in ``skip_files`` (paths, e.g. a labeled
    set's queries file given separately) are not read.
    """

    def __init__(
        self,
        path: StrPath,
        *,
        follow_symlinks: bool = False,
        include: Collection[str] = (),
        exclude: Collection[str] = (),
        id_field: str | None = None,
        text_field: str = "text",
        title_field: str | None = "title",
        metadata_field: str | None = "metadata",
        title_in_text: bool = False,
        skip_files: Collection[StrPath] = (),
    ) -> None:
        super().__init__(path)
        if not self.path.is_dir():
            raise DataError(f"{self.path}: not a directory")
        self.follow_symlinks = follow_symlinks
        self.include = globs(include, "--include")
        self.exclude = globs(exclude, "--exclude")
        self.report.selection = " and ".join(
            f"{flag} {' '.join(map(repr, patterns))}"
            for flag, patterns in (("--include", include), ("--exclude", exclude))
            if patterns
        )
        self.skip_files = {os.path.realpath(p) for p in skip_files}
        self._jsonl_options: dict[str, Any] = {
            "id_field": id_field,
            "text_field": text_field,
            "title_field": title_field,
            "metadata_field": metadata_field,
            "title_in_text": title_in_text,
        }

    def _stream(self, run: Pass) -> Iterator[Document]:
        return self._directory(self.path, "", run, {})

    def _wanted(self, rel: str, directory: bool) -> bool:
        """Whether ``include`` and ``exclude`` let the entry ``rel`` be read (a directory:
        walked; ``include`` is checked on the files in it)."""
        if any(glob.matches(rel, directory) for glob in self.exclude):
            return False
        if directory or not self.include:
            return True
        parts = rel.split("/")
        folders = ["/".join(parts[:i]) for i in range(1, len(parts))]
        return any(
            glob.matches(rel, False) or any(glob.matches(folder, True) for folder in folders)
            for glob in self.include
        )

    def _outside(self, entry: os.DirEntry[str]) -> str | None:
        """Why ``entry``, a link out of the directory, is not followed (None: follow it)."""
        if self.follow_symlinks or not entry.is_symlink():
            return None
        root = os.path.realpath(self.path)
        target = os.path.realpath(entry.path)
        if os.path.commonpath([root, target]) == root:
            return None
        return (
            f"symlink to {target} outside {self.path}: not followed "
            "(follow_symlinks=True / --follow-symlinks follows it)"
        )

    def _directory(
        self, path: Path, rel: str, run: Pass, walked: dict[tuple[int, int], str]
    ) -> Iterator[Document]:
        """Walk ``path`` (id prefix ``rel``) unless its real directory was walked already."""
        try:
            stat = path.stat()
        except OSError as error:
            run.report.add(path, os_reason(error))
            return
        key = (stat.st_dev, stat.st_ino)
        first = walked.get(key)
        if first is not None:
            if first == "" or rel.startswith(first + "/"):
                run.report.add(path, "symlink loop")
            else:
                run.report.add(path, f"already loaded as {first!r}", "already loaded")
            return
        walked[key] = rel
        try:
            entries = _visible_entries(path)
        except OSError as error:
            run.report.add(path, os_reason(error))
            return
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir()
            if not self._wanted(child, is_dir):
                if is_dir:
                    run.report.left_out_folders += 1
                else:
                    run.report.left_out += 1
                continue
            outside = self._outside(entry)
            if outside is not None:
                run.report.add(entry.path, outside, "symlink out of the folder")
            elif is_dir and owned(entry.path):
                run.report.add(entry.path, "written by ragbench, not a document", OUTPUT)
            elif is_dir:
                yield from self._directory(Path(entry.path), child, run, walked)
            else:
                yield from self._entry_file(entry, child, run)

    def _entry_file(self, entry: os.DirEntry[str], rel: str, run: Pass) -> Iterator[Document]:
        """Dispatch one directory entry to the loader for its extension (or, without one,
        to ``TextLoader`` when it is text)."""
        if self.skip_files and os.path.realpath(entry.path) in self.skip_files:
            return
        if rel in LABEL_FILES:
            run.report.add(entry.path, "label file of a labeled set, not a document", "label file")
            return
        if not entry.is_file():
            broken = entry.is_symlink() and not os.path.exists(entry.path)
            reason = "broken symlink" if broken else not_regular(entry.path)
            run.report.add(entry.path, reason or "not a regular file", NOT_REGULAR)
            return
        try:
            cls = file_loader(entry.path)
        except Skip as skip:
            run.report.add(entry.path, skip.reason, skip.kind)
            return
        if cls is None:
            run.report.add(entry.path, UNSUPPORTED, UNSUPPORTED)
            return
        options = self._jsonl_options if cls is JsonlLoader else {}
        yield from cls(entry.path, **options)._file(rel, run)


def _visible_entries(path: Path) -> list[os.DirEntry[str]]:
    """Non-hidden entries of ``path`` in the order that sorts their relative paths."""
    with os.scandir(path) as entries:
        visible = [entry for entry in entries if not entry.name.startswith(".")]
    # A directory's descendants ("a/x") sort as "a/" does, e.g. after the file "a.md".
    return sorted(visible, key=lambda e: e.name + "/" if e.is_dir() else e.name)
