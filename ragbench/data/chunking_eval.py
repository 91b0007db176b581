"""Chroma's chunking_evaluation sets: ``corpora/*.md`` + ``questions_df.csv``.

Each CSV row (columns ``question``, ``references``, ``corpus_id``) is a query; ``references`` is
a JSON list of ``{"content", "start_index", "end_index"}`` excerpts of the corpus file whose stem
is ``corpus_id``. Offsets are Python ``str`` (code point) offsets, end-exclusive, and
``doc[start:end] == content`` must hold for every one. Document ids are file *names*
(``state_of_the_union.md``), as ``ragbench chunk corpora/`` and the span format name them.
Query ids are ``q0001``, ``q0002`` … in CSV row order; ``metadata["corpus_id"]`` keeps the stem.
A query's qrels are its corpus document at grade 1, its evidence one span per reference.
There is one split, ``test``.

Unreadable input (a missing column, bad JSON, an unknown corpus, an excerpt that does not match
its offsets) raises ``DataError`` naming the CSV row and line. ``check_chunking_eval`` lists
every problem.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeGuard

from ragbench.data.labeled import Evidence, LabeledSet, Qrels
from ragbench.data.problems import Problem, ProblemLog, check_corpus, csv_records
from ragbench.errors import DataError
from ragbench.text.loaders import MarkdownLoader
from ragbench.types import Document, Query

__all__ = ["check_chunking_eval", "is_chunking_eval", "load_chunking_eval"]

StrPath = str | os.PathLike[str]

QUESTIONS = "questions_df.csv"
_COLUMNS = ("question", "references", "corpus_id")
_GRADE = 1


def is_chunking_eval(path: Path) -> bool:
    """Whether ``path`` has the chunking_evaluation layout (``corpora/``, ``questions_df.csv``)."""
    return (path / "corpora").is_dir() and (path / QUESTIONS).is_file()


def load_chunking_eval(path: StrPath, split: str = "test") -> LabeledSet:
    """The chunking_evaluation set at ``path``; raises ``DataError`` naming the CSV row (and
    line) for unreadable input."""
    root = Path(path)
    if split != "test":
        raise DataError(f"{root}: chunking_evaluation has only the split 'test', not {split!r}")
    log = ProblemLog(strict=True)
    labeled = _read(root, log)
    log.log_summary(root)
    return labeled


def check_chunking_eval(path: StrPath) -> list[Problem]:
    """Every problem of the chunking_evaluation set at ``path``."""
    log = ProblemLog(strict=False)
    _read(Path(path), log)
    return log.problems


def _read(root: Path, log: ProblemLog) -> LabeledSet:
    documents = _read_corpora(root / "corpora", log)
    docs = {d.id: d for d in documents}
    queries: list[Query] = []
    qrels: Qrels = {}
    evidence: dict[str, list[Evidence]] = {}
    questions = root / QUESTIONS
    for row, line, record in csv_records(questions, log, _COLUMNS):
        qid = f"q{row:04d}"
        at = f"row {row} ({qid})"
        doc = docs.get(f"{record['corpus_id']}.md")
        if doc is None:
            known = ", ".join(sorted(Path(d).stem for d in docs)) or "none"
            log.error(
                questions,
                line,
                f"{at}: unknown corpus_id {record['corpus_id']!r} (corpora: {known})",
            )
            continue
        spans = _references(record["references"], doc, qid, at, questions, line, log)
        if spans is None:
            continue
        if not record["question"].strip():
            log.warn(questions, line, f"{at}: empty question")
        if not spans:
            log.warn(questions, line, f"{at}: no references (no span evidence)")
        queries.append(Query(qid, record["question"], {"corpus_id": record["corpus_id"]}))
        qrels[qid] = {doc.id: _GRADE}
        if spans:
            evidence[qid] = spans
    return LabeledSet(root.resolve().name, documents, queries, qrels, evidence, split="test")


def _read_corpora(corpora: Path, log: ProblemLog) -> list[Document]:
    if not corpora.is_dir():
        log.error(corpora, None, "expected a directory of <corpus_id>.md files")
        return []
    documents: list[Document] = []
    for file in sorted(corpora.glob("*.md")):
        loader = MarkdownLoader(file)
        documents.extend(loader)
        for problem in loader.report.problems:
            log.warn(problem.path, None, f"not loaded: {problem.reason}")
    check_corpus(log, corpora, documents)
    return documents


def _references(
    text: str, doc: Document, qid: str, at: str, file: Path, line: int, log: ProblemLog
) -> list[Evidence] | None:
    """The references of one row as evidence in ``doc``, or None after recording a problem."""
    try:
        references = json.loads(text)
    except json.JSONDecodeError as exc:
        log.error(file, line, f"{at}: 'references' is not valid JSON ({exc.msg})")
        return None
    if not isinstance(references, list):
        log.error(file, line, f"{at}: 'references' must be a JSON list")
        return None
    spans = []
    for i, ref in enumerate(references, start=1):
        problem = _reference_problem(ref, doc)
        if problem:
            log.error(file, line, f"{at}: reference {i} in {doc.id!r}: {problem}")
            return None
        spans.append(Evidence(qid, doc.id, ref["start_index"], ref["end_index"], _GRADE))
    return spans


def _reference_problem(ref: Any, doc: Document) -> str | None:
    """Why ``ref`` is not an exact excerpt of ``doc`` (None when it is)."""
    if not isinstance(ref, dict):
        return f"expected an object, found {ref!r}"
    content, start, end = ref.get("content"), ref.get("start_index"), ref.get("end_index")
    if not isinstance(content, str) or not _is_int(start) or not _is_int(end):
        return "expected a string 'content' and integers 'start_index', 'end_index'"
    if not 0 <= start < end <= len(doc.text):
        return (
            f"offsets must satisfy 0 <= start < end <= {len(doc.text)} (the document's "
            f"length), found [{start}, {end})"
        )
    if doc.text[start:end] != content:
        found = doc.text[start:end]
        return f"the document at [{start}, {end}) holds {found[:60]!r}, not {content[:60]!r}"
    return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
