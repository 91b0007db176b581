"""BEIR-format labeled sets: ``corpus.jsonl[.gz]``, ``queries.jsonl`` and ``qrels/<split>.tsv``.

``corpus.jsonl`` holds ``{"_id", "title", "text", "metadata"}`` per line, ``queries.jsonl``
``{"_id", "text", "metadata"}`` for every split, and ``qrels/<split>.tsv`` the judgements
(header ``query-id<TAB>corpus-id<TAB>score``). A split's set holds the queries its qrels judge,
in qrels order. ``title="prepend"`` makes a document's text ``title + " " + text`` (as Anserini's
"flat" index and MTEB / sentence-transformers do); ``"metadata"`` keeps the text alone. The title
is in ``metadata["title"]`` either way.

Unreadable input (a missing file, invalid JSON, a missing field, a bad TSV line) raises
``DataError`` naming file and line (``MissingSplit`` for a split without a qrels file, listing
those there are). Problems the data survives are logged and kept out of the
way: a judgement of a document missing from the corpus is kept, one of an unknown query is
dropped, a repeated id or judgement keeps its first occurrence. ``check_beir`` lists them all.
"""

from __future__ import annotations

import os
from collections.abc import Container, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast, get_args

from ragbench.data.labeled import LabeledSet, Qrels
from ragbench.data.problems import (
    MissingSplit,
    Problem,
    ProblemLog,
    check_corpus,
    check_default_split,
    check_judged,
    jsonl_records,
    text_lines,
)
from ragbench.data.trec import grade_problem, unwritable
from ragbench.errors import ConfigError
from ragbench.types import Document, Query

__all__ = ["Title", "check_beir", "is_beir", "load_beir"]

Title = Literal["prepend", "metadata"]
StrPath = str | os.PathLike[str]

_HEADER = ["query-id", "corpus-id", "score"]


def is_beir(path: Path) -> bool:
    """Whether ``path`` has the BEIR layout (``qrels/`` and ``corpus.jsonl[.gz]``)."""
    return (path / "qrels").is_dir() and _corpus_file(path) is not None


def load_beir(path: StrPath, split: str = "test", title: Title = "prepend") -> LabeledSet:
    """The ``split`` of the BEIR dataset at ``path`` (its queries are those of
    ``qrels/<split>.tsv``); raises ``DataError`` naming file and line for unreadable input."""
    if title not in get_args(Title):
        raise ConfigError(f"title: expected 'prepend' or 'metadata', got {title!r}")
    root = Path(path)
    log = ProblemLog(strict=True)
    qrels_file = root / "qrels" / f"{split}.tsv"
    if not qrels_file.is_file():
        splits = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise MissingSplit(
            f"{qrels_file}: no such file (splits in {root / 'qrels'}: "
            f"{', '.join(splits) or 'none'})",
            splits,
        )
    data = _read(root, title, log)
    qrels = _judgements(_qrels_rows(qrels_file, log), qrels_file, data.queries, data.docs, log)
    check_judged(log, qrels_file, qrels, split)
    log.log_summary(root)
    return LabeledSet(
        name=root.resolve().name,
        documents=list(data.docs.values()),
        queries=[data.queries[q].query for q in qrels],
        qrels=qrels,
        split=split,
    )


def check_beir(path: StrPath) -> list[Problem]:
    """Every problem of the BEIR dataset at ``path``, all splits in ``qrels/`` included."""
    root = Path(path)
    log = ProblemLog(strict=False)
    data = _read(root, "metadata", log)
    split_files = sorted((root / "qrels").glob("*.tsv"))
    if not split_files:
        log.error(root / "qrels", None, "expected qrels files <split>.tsv, found none")
    check_default_split(log, root / "qrels", [file.stem for file in split_files])
    judged: set[str] = set()
    for file in split_files:
        qrels = _judgements(_qrels_rows(file, log), file, data.queries, data.docs, log)
        check_judged(log, file, qrels, file.stem)
        judged.update(qrels)
    if data.queries_file is not None:
        for qid, entry in data.queries.items():
            if qid not in judged:
                log.warn(data.queries_file, entry.line, f"query {qid!r} is judged in no qrels file")
    return log.problems


# ---------------------------------------------------------------- files


class _Entry(NamedTuple):
    query: Query
    line: int


@dataclass
class _Data:
    docs: dict[str, Document]
    queries: dict[str, _Entry]
    queries_file: Path | None


def _corpus_file(root: Path) -> Path | None:
    return _first_file(root, "corpus.jsonl")


def _first_file(root: Path, name: str) -> Path | None:
    """``root/name`` or, failing that, ``root/name.gz``."""
    return next((p for p in (root / name, root / f"{name}.gz") if p.is_file()), None)


def _read(root: Path, title: Title, log: ProblemLog) -> _Data:
    """Corpus and queries of ``root`` (a missing file is an error)."""
    corpus_file = _corpus_file(root)
    queries_file = _first_file(root, "queries.jsonl")
    for name, file in (("corpus.jsonl", corpus_file), ("queries.jsonl", queries_file)):
        if file is None:
            log.error(root / name, None, "no such file (nor a .gz of it)")
    docs = _read_corpus(corpus_file, title, log) if corpus_file else {}
    if corpus_file:
        check_corpus(log, corpus_file, docs.values())
    queries = _read_queries(queries_file, log) if queries_file else {}
    return _Data(docs, queries, queries_file)


def _read_corpus(file: Path, title_mode: Title, log: ProblemLog) -> dict[str, Document]:
    docs: dict[str, Document] = {}
    lines: dict[str, int] = {}
    for number, record in jsonl_records(file, log):
        fields = _fields(record, file, number, log, ("_id", "text", "title", "metadata"))
        if fields is None:
            continue
        doc_id, text, title, metadata = fields
        if doc_id in lines:
            log.warn(
                file, number, f"duplicate document id {doc_id!r} (first on line {lines[doc_id]})"
            )
            continue
        lines[doc_id] = number
        if title:
            metadata = {**metadata, "title": title}
            if title_mode == "prepend":
                text = f"{title} {text}" if text else title
        if not text.strip():
            log.warn(file, number, f"document {doc_id!r} has no text")
        docs[doc_id] = Document(doc_id, text, metadata, f"{file}:{number}")
    return docs


def _read_queries(file: Path, log: ProblemLog) -> dict[str, _Entry]:
    queries: dict[str, _Entry] = {}
    for number, record in jsonl_records(file, log):
        fields = _fields(record, file, number, log, ("_id", "text", None, "metadata"))
        if fields is None:
            continue
        qid, text, _, metadata = fields
        if qid in queries:
            first = queries[qid].line
            log.warn(file, number, f"duplicate query id {qid!r} (first on line {first})")
            continue
        if not text.strip():
            log.warn(file, number, f"query {qid!r} has no text")
        queries[qid] = _Entry(Query(qid, text, metadata), number)
    return queries


def _fields(
    record: dict[str, Any],
    file: Path,
    number: int,
    log: ProblemLog,
    keys: tuple[str, str, str | None, str],
) -> tuple[str, str, str, dict[str, Any]] | None:
    """(id, text, title, metadata) of a record, or None after recording why it is unusable.

    The id may be a string or an integer; title and metadata may be absent or null."""
    id_key, text_key, title_key, meta_key = keys
    value = record.get(id_key)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        log.error(file, number, f"expected a non-empty string {id_key!r}, found {value!r}")
        return None
    why = unwritable(value)
    if why is not None:
        log.error(file, number, f"{id_key} {value!r}: {why}")
        return None
    text = record.get(text_key)
    title = (record.get(title_key) if title_key else None) or ""
    metadata = record.get(meta_key) or {}
    for key, found in ((text_key, text), (title_key, title)):
        if not isinstance(found, str):
            log.error(file, number, f"{value!r}: expected a string {key!r}, found {found!r}")
            return None
    if not isinstance(metadata, dict):
        log.error(file, number, f"{value!r}: expected an object {meta_key!r}, found {metadata!r}")
        return None
    # the loop above returned unless both are strings
    return value, cast(str, text), cast(str, title), metadata


# ---------------------------------------------------------------- qrels


class _Row(NamedTuple):
    line: int
    query_id: str
    doc_id: str
    grade: int


def _qrels_rows(file: Path, log: ProblemLog) -> list[_Row]:
    """The judgements of a qrels TSV (the header line is optional)."""
    rows: list[_Row] = []
    for number, line in text_lines(file, log):
        fields = [f.strip() for f in line.split("\t")]
        if not rows and [f.lower() for f in fields] == _HEADER:
            continue
        if len(fields) != 3 or not all(fields[:2]):
            log.error(
                file,
                number,
                f"expected 3 tab-separated columns 'query-id corpus-id score', found {line!r}",
            )
            continue
        try:
            grade = int(fields[2])
        except ValueError:
            log.error(file, number, f"expected an integer score, found {fields[2]!r}")
            continue
        why = grade_problem(grade)
        if why is not None:
            log.error(file, number, why)
            continue
        rows.append(_Row(number, fields[0], fields[1], grade))
    return rows


def _judgements(
    rows: list[_Row],
    file: Path,
    queries: Mapping[str, object],
    doc_ids: Container[str],
    log: ProblemLog,
) -> Qrels:
    """Qrels of the known queries; warns of repeats, unknown queries and unknown documents."""
    qrels: Qrels = {}
    first: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row.query_id, row.doc_id)
        if key in first:
            log.warn(
                file,
                row.line,
                f"query {row.query_id!r} judges document {row.doc_id!r} again "
                f"(first on line {first[key]}; that one is kept)",
            )
            continue
        first[key] = row.line
        if row.query_id not in queries:
            log.warn(file, row.line, f"judgement of unknown query {row.query_id!r} (ignored)")
            continue
        if row.doc_id not in doc_ids:
            log.warn(
                file,
                row.line,
                f"query {row.query_id!r} judges document {row.doc_id!r}, "
                "which is not in the corpus",
            )
        qrels.setdefault(row.query_id, {})[row.doc_id] = row.grade
    return qrels
