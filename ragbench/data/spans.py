"""Span-labeled sets, ragbench's own format (the bundled demo's): ``corpus/`` + ``queries.jsonl``.

``corpus/`` holds any files ``ragbench.text.loaders.DirectoryLoader`` reads; a document's id is
its path relative to ``corpus/`` (``operations/retention.md``). ``queries.jsonl`` holds one query
per line::

    {"id": "q1", "text": "...", "type": "lexical", "split": "test", "answer": "...",
     "evidence": [{"doc_id": "a.md", "text": "exact excerpt", "grade": 2},
                  {"doc_id": "b.md", "start": 10, "end": 42}],
     "qrels": {"c.md": 1}, "metadata": {...}}

``type``, ``split`` (default ``"test"``), ``answer``, ``qrels`` and ``metadata`` are optional.
Evidence is located by ``text``, which must occur exactly once in the document, or by character
offsets ``start`` < ``end`` (end-exclusive) into the document as loaded; when both are given they
must agree (and the offsets then settle which occurrence is meant). An evidence grade defaults
to 2 (the document answers directly; 1 answers partly). The document-level qrels of a query are
its evidence documents at their highest grade plus the explicit ``qrels``, which must not repeat
an evidence document. ``type`` goes to ``Query.metadata["type"]``; ``answer``, the query's
reference answer (a non-empty string), goes to ``LabeledSet.answers``.

Unreadable input (invalid JSON, an unknown key, an excerpt that is missing or ambiguous, bad
offsets, an empty answer) raises ``DataError`` naming file, line, query and document. Problems
the data survives are logged: a repeated query id keeps its first line, a query without
judgements is left out, an explicit judgement of a document missing from ``corpus/`` is kept,
files the directory loader skips are reported. ``check_spans`` lists them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbench.data.labeled import Evidence, LabeledSet
from ragbench.data.problems import Problem, ProblemLog, check_corpus, check_judged, jsonl_records
from ragbench.data.trec import unwritable
from ragbench.errors import DataError
from ragbench.text.loaders import DirectoryLoader
from ragbench.types import Document, Query

__all__ = ["DEFAULT_EVIDENCE_GRADE", "check_spans", "is_spans", "load_spans", "read_corpus"]

StrPath = str | os.PathLike[str]

DEFAULT_EVIDENCE_GRADE = 2
_QUERY_KEYS = ("id", "text", "type", "split", "answer", "evidence", "qrels", "metadata")
_EVIDENCE_KEYS = ("doc_id", "text", "start", "end", "grade")


def is_spans(path: Path) -> bool:
    """Whether ``path`` has the span-labeled layout (``corpus/`` and ``queries.jsonl``)."""
    return (path / "corpus").is_dir() and (path / "queries.jsonl").is_file()


def load_spans(path: StrPath, split: str = "test") -> LabeledSet:
    """The judged queries of ``split`` of the span-labeled set at ``path``; raises
    ``DataError`` naming file, line, query and document for unreadable input."""
    root = Path(path)
    log = ProblemLog(strict=True)
    documents, labeled = _read(root, log)
    chosen = [q for q in labeled if q.split == split]
    if not chosen:
        splits = ", ".join(sorted({q.split for q in labeled})) or "none"
        raise DataError(
            f"{root / 'queries.jsonl'}: no judged queries of split {split!r} "
            f"(splits found: {splits})"
        )
    qrels = {q.query.id: q.qrels for q in chosen}
    check_judged(log, root / "queries.jsonl", qrels, split)
    log.log_summary(root)
    return LabeledSet(
        name=root.resolve().name,
        documents=documents,
        queries=[q.query for q in chosen],
        qrels=qrels,
        evidence={q.query.id: q.evidence for q in chosen if q.evidence},
        split=split,
        answers={q.query.id: q.answer for q in chosen if q.answer is not None},
    )


def check_spans(path: StrPath) -> list[Problem]:
    """Every problem of the span-labeled set at ``path`` (all splits)."""
    log = ProblemLog(strict=False)
    _, labeled = _read(Path(path), log)
    for split in sorted({q.split for q in labeled}):
        qrels = {q.query.id: q.qrels for q in labeled if q.split == split}
        check_judged(log, Path(path) / "queries.jsonl", qrels, split)
    return log.problems


@dataclass
class _Labeled:
    """One judged query of ``queries.jsonl``."""

    query: Query
    split: str
    qrels: dict[str, int]
    evidence: list[Evidence]
    answer: str | None


def _read(root: Path, log: ProblemLog) -> tuple[list[Document], list[_Labeled]]:
    """The documents and the judged queries (every split) of ``root``."""
    corpus, queries_file = root / "corpus", root / "queries.jsonl"
    documents: list[Document] = []
    if corpus.is_dir():
        documents = read_corpus(corpus, log)
    else:
        log.error(corpus, None, "expected a directory of documents")
    if not queries_file.is_file():
        log.error(queries_file, None, "no such file")
        return documents, []
    docs = {d.id: d for d in documents}
    labeled: list[_Labeled] = []
    lines: dict[str, int] = {}
    for number, record in jsonl_records(queries_file, log):
        item = _query(record, _Where(queries_file, number, log), docs)
        if item is None:
            continue
        qid = item.query.id
        if qid in lines:
            log.warn(
                queries_file,
                number,
                f"duplicate query id {qid!r} (first on line {lines[qid]}; that one is kept)",
            )
            continue
        lines[qid] = number
        if not item.qrels:
            log.warn(queries_file, number, f"query {qid!r} has no evidence and no qrels (left out)")
            continue
        labeled.append(item)
    return documents, labeled


def read_corpus(corpus: Path, log: ProblemLog) -> list[Document]:
    """The documents under ``corpus`` as the span format reads them; files the directory loader
    skips are warnings, an empty corpus or an id no run file can hold an error."""
    loader = DirectoryLoader(corpus)
    documents = list(loader)
    for problem in loader.report.problems:
        log.warn(problem.path, None, f"not loaded: {problem.reason}")
    check_corpus(log, corpus, documents)
    return documents


@dataclass(frozen=True)
class _Where:
    """The line being read, to report problems against."""

    file: Path
    line: int
    log: ProblemLog

    def error(self, message: str) -> None:
        self.log.error(self.file, self.line, message)

    def warn(self, message: str) -> None:
        self.log.warn(self.file, self.line, message)


def _query(record: dict[str, Any], at: _Where, docs: dict[str, Document]) -> _Labeled | None:
    """A query line as a ``_Labeled``, or None after recording why it is unusable."""
    qid = record.get("id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    if not isinstance(qid, str) or not qid:
        at.error(f"expected a non-empty string 'id', found {qid!r}")
        return None
    why = unwritable(qid)
    if why is not None:
        at.error(f"id {qid!r}: {why}")
        return None
    fields = _checked(record, at, f"query {qid!r}", _QUERY_KEYS, _QUERY_TYPES)
    if fields is None:
        return None
    text, qtype, split, answer, items, explicit, metadata = fields
    if not text.strip():
        at.warn(f"query {qid!r} has no text")
    if answer is not None and not answer.strip():
        at.error(f"query {qid!r}: expected a non-empty string under 'answer', found {answer!r}")
        return None
    evidence = [
        e for i, item in enumerate(items) if (e := _evidence(item, i, qid, at, docs)) is not None
    ]
    if len(evidence) < len(items):
        return None
    qrels = _qrels(qid, evidence, explicit, at, docs)
    if qrels is None:
        return None
    meta = {**metadata, "type": qtype} if qtype is not None else metadata
    return _Labeled(Query(qid, text, meta), split, qrels, evidence, answer)


# key → (type, default; a default of ... means required)
_QUERY_TYPES: dict[str, tuple[type, Any]] = {
    "text": (str, ...),
    "type": (str, None),
    "split": (str, "test"),
    "answer": (str, None),
    "evidence": (list, ...),
    "qrels": (dict, {}),
    "metadata": (dict, {}),
}


def _checked(
    record: dict[str, Any],
    at: _Where,
    what: str,
    allowed: tuple[str, ...],
    types: dict[str, tuple[type, Any]],
) -> list[Any] | None:
    """The values of ``types``' keys in order (defaults filled in), or None after recording
    an unknown key, a missing required key or a value of the wrong type."""
    unknown = [k for k in record if k not in allowed]
    if unknown:
        at.error(
            f"{what}: unknown key(s) {', '.join(map(repr, unknown))} "
            f"(allowed: {', '.join(allowed)})"
        )
        return None
    values = []
    for key, (kind, default) in types.items():
        value = record.get(key)
        if value is None and default is not ...:
            value = default
        elif not isinstance(value, kind):
            names: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
            expected = names[kind]
            found = "nothing" if value is None else repr(value)
            at.error(f"{what}: expected {expected} under {key!r}, found {found}")
            return None
        values.append(value)
    return values


def _grade(value: object) -> int | None:
    """``value`` as a grade if it is a (non-boolean) integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _evidence(
    item: object, index: int, qid: str, at: _Where, docs: dict[str, Document]
) -> Evidence | None:
    """Evidence item ``index`` located in its document, or None after recording why not."""
    what = f"query {qid!r}, evidence {index + 1}"
    if not isinstance(item, dict):
        at.error(f"{what}: expected an object, found {item!r}")
        return None
    unknown = [k for k in item if k not in _EVIDENCE_KEYS]
    if unknown:
        at.error(
            f"{what}: unknown key(s) {', '.join(map(repr, unknown))} "
            f"(allowed: {', '.join(_EVIDENCE_KEYS)})"
        )
        return None
    doc_id, grade = item.get("doc_id"), _grade(item.get("grade", DEFAULT_EVIDENCE_GRADE))
    if not isinstance(doc_id, str) or doc_id not in docs:
        at.error(f"{what}: document {doc_id!r} is not in corpus/")
        return None
    doc = docs[doc_id]
    if grade is None or grade < 1:
        at.error(f"{what}: expected a positive integer 'grade', found {item.get('grade')!r}")
        return None
    span = _span(item, doc, f"{what} in {doc_id!r}", at)
    return None if span is None else Evidence(qid, doc_id, span[0], span[1], grade)


def _span(item: dict[str, Any], doc: Document, what: str, at: _Where) -> tuple[int, int] | None:
    """``[start, end)`` of the evidence in ``doc``: from its offsets or its unique excerpt."""
    text, start, end = item.get("text"), item.get("start"), item.get("end")
    if text is not None and (not isinstance(text, str) or not text):
        at.error(f"{what}: expected a non-empty string 'text', found {text!r}")
        return None
    # documents are loaded with \r\n and \r turned into \n; excerpts of them are too
    excerpt = text.replace("\r\n", "\n").replace("\r", "\n") if text is not None else None
    if start is None and end is None:
        if excerpt is None:
            at.error(f"{what}: give the excerpt 'text' or the offsets 'start' and 'end'")
            return None
        return _locate(excerpt, doc, what, at)
    size = len(doc.text)
    first, last = _grade(start), _grade(end)
    if first is None or last is None or not 0 <= first < last <= size:
        at.error(
            f"{what}: expected integer offsets with 0 <= start < end <= {size} "
            f"(the document's length), found start={start!r} end={end!r}"
        )
        return None
    if excerpt is not None and doc.text[first:last] != excerpt:
        at.error(
            f"{what}: 'text' differs from the document at [{first}, {last}), which holds "
            f"{_preview(doc.text[first:last])}"
        )
        return None
    return first, last


def _locate(excerpt: str, doc: Document, what: str, at: _Where) -> tuple[int, int] | None:
    """The only occurrence of ``excerpt`` in ``doc``; none or several is an error."""
    first = doc.text.find(excerpt)
    if first < 0:
        at.error(f"{what}: excerpt not found: {_preview(excerpt)}")
        return None
    second = doc.text.find(excerpt, first + 1)
    if second >= 0:
        at.error(
            f"{what}: excerpt occurs more than once (at {first} and {second}); "
            f"give 'start' and 'end' to pick one: {_preview(excerpt)}"
        )
        return None
    return first, first + len(excerpt)


def _preview(text: str, size: int = 60) -> str:
    return repr(text if len(text) <= size else text[:size] + "…")


def _qrels(
    qid: str,
    evidence: list[Evidence],
    explicit: dict[str, Any],
    at: _Where,
    docs: dict[str, Document],
) -> dict[str, int] | None:
    """Evidence documents at their highest grade plus the explicit judgements."""
    qrels: dict[str, int] = {}
    for e in evidence:
        qrels[e.doc_id] = max(e.grade, qrels.get(e.doc_id, e.grade))
    for doc_id, value in explicit.items():
        grade = _grade(value)
        if grade is None:
            at.error(
                f"query {qid!r}: qrels[{doc_id!r}]: expected an integer grade, found {value!r}"
            )
            return None
        if doc_id in qrels:
            at.error(
                f"query {qid!r}: qrels repeats evidence document {doc_id!r} "
                "(its grade comes from the evidence)"
            )
            return None
        if doc_id not in docs:
            at.warn(f"query {qid!r}: qrels judges document {doc_id!r}, which is not in corpus/")
        qrels[doc_id] = grade
    return qrels
