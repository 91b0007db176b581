"""A plain folder of documents labeled by hand (or by a generator): ``docs/`` and a queries file,
``docs/queries.jsonl`` or one given separately (``load_folder(path, queries=...)``).

Every file ``ragbench.load`` reads in the folder is a document, its id its path relative to the
folder (``guide/setup.md``, as ``ragbench.load("docs/")`` gives it); the queries file is not a
document, nor is ``queries.jsonl`` at the top of the folder when the queries come from another
file. The queries file holds one query per line, labeled at the document level or with excerpts::

    {"query": "how do I rotate keys?", "relevant": ["ops/keys.md", "faq.md"]}
    {"query": "...", "relevant": {"ops/keys.md": 2, "faq.md": 1}}
    {"query": "...", "evidence": [{"doc": "ops/keys.md", "text": "verbatim excerpt"}]}

with an optional ``id`` (default ``q<line number>``) and ``answer`` (the reference answer). An
excerpt is found in its document verbatim, else with whitespace normalised; one found nowhere or
more than once, an unknown document id (reported with the nearest ids) and a bad line are errors
naming the file and line. Lines may use the span format's spellings (``text``, ``doc_id``,
``qrels``, offsets, ``split``, ...; see ``ragbench.data.spans``, whose reader this is), so
hand-written and generated lines mix in one file. A folder with a ``corpus/`` subfolder and a
``queries.jsonl`` is the span format instead; a folder without labels is a ``DataError`` that
says how to get them.
"""

from __future__ import annotations

import os
from pathlib import Path

from ragbench.data.labeled import LabeledSet
from ragbench.data.problems import (
    DEFAULT_SPLIT,
    Problem,
    ProblemLog,
    check_split_case,
    jsonl_records,
)
from ragbench.data.spans import JudgedQuery, check_splits, labeled_set, read_corpus, read_queries
from ragbench.errors import DataError, command_line
from ragbench.text.loaders import DirectoryLoader
from ragbench.text.loaders.decode import not_regular
from ragbench.types import Document

__all__ = ["QUERIES", "check_folder", "is_folder", "load_folder", "no_labels", "query_splits"]

StrPath = str | os.PathLike[str]

QUERIES = "queries.jsonl"


def is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder with a ``queries.jsonl`` (one with a ``corpus/`` too is
    the span format: formats are detected in ``ragbench.data.catalog.FORMATS``' order); one
    that is no regular file (a FIFO) counts, so that reading it says what it is."""
    return path.is_dir() and os.path.lexists(path / QUERIES)


def load_folder(path: StrPath, split: str = "test", queries: StrPath | None = None) -> LabeledSet:
    """The documents of the folder ``path`` and the judged queries of ``split`` of its queries
    file (``queries``, else ``path/queries.jsonl``); ``DataError`` naming file and line for
    unreadable input, or saying how to label a folder that has no queries file."""
    root = Path(path)
    log = ProblemLog(strict=True)
    documents, judged, file = _read(root, queries, log)
    return labeled_set(root, documents, judged, file, split, log)


def check_folder(path: StrPath, queries: StrPath | None = None) -> list[Problem]:
    """Every problem of the folder ``path`` labeled by ``queries`` (else its
    ``queries.jsonl``), all splits; a folder without labels is a ``DataError``, as in
    ``load_folder``."""
    log = ProblemLog(strict=False)
    _, judged, file = _read(Path(path), queries, log)
    check_splits(judged, file, log)
    check_split_case(log, file, [q.split for q in judged])
    return log.problems


def query_splits(file: Path) -> list[str]:
    """The split of each query line of the queries file ``file`` (unreadable lines left out,
    as loading reports them), for ``datasets info`` to find splits named alike but for case."""
    log = ProblemLog(strict=False)
    return [str(record.get("split", DEFAULT_SPLIT)) for _, record in jsonl_records(file, log)]


def no_labels(root: Path) -> str:
    """What to do about a folder of documents without labeled queries."""
    folder = f"{root}{os.sep}"
    return (
        f"{folder}: no labeled queries — write {folder}{QUERIES} "
        '({"query": ..., "relevant": [doc ids]}, see README "Your own documents") '
        "or generate them: "
        f"{command_line('ragbench datasets generate', folder, out='labels/')}"
    )


def _read(
    root: Path, queries: StrPath | None, log: ProblemLog
) -> tuple[list[Document], list[JudgedQuery], Path]:
    """The documents, the judged queries (every split) and the queries file of ``root``."""
    top = root / QUERIES
    file = top if queries is None else Path(queries)
    if queries is None and not os.path.lexists(top):
        raise DataError(no_labels(root))
    if not file.is_file():
        raise DataError(f"{file}: {_not_file(file)} (the queries file for {root})")
    if top.is_file() and not _same(top, file):
        log.warn(top, None, f"not read: the queries come from {file}")
    documents = read_corpus(root, log, DirectoryLoader(root, skip_files=(top, file)))
    return documents, read_queries(file, documents, f"{root.resolve().name}/", log), file


def _not_file(path: Path) -> str:
    """Why ``path``, which is no regular file, cannot be the queries file."""
    if not path.exists():
        return "no such file"
    if path.is_dir():
        return "a folder, not a file"
    return (not_regular(path) or "not a file").removesuffix(": not read")


def _same(first: Path, second: Path) -> bool:
    return os.path.realpath(first) == os.path.realpath(second)
