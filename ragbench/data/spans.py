"""Span-labeled sets, ragbench's own format (the bundled demo's): ``corpus/`` + ``queries.jsonl``.

``corpus/`` holds any files ``ragbench.text.loaders.DirectoryLoader`` reads; a document's id is
its path relative to ``corpus/`` (``operations/retention.md``). A generated set also holds
``cuts.jsonl``, the text taken out of its documents on load (``ragbench.data.cuts``): evidence
offsets refer to the documents as cut. ``queries.jsonl`` holds one query
per line::

    {"id": "q1", "text": "...", "type": "lexical", "split": "test", "answer": "...",
     "evidence": [{"doc_id": "a.md", "text": "exact excerpt", "grade": 2},
                  {"doc_id": "b.md", "start": 10, "end": 42}],
     "qrels": {"c.md": 1}, "metadata": {...}}

Only the query is required. ``id`` defaults to ``q<line number>``; ``type``, ``split`` (default
``"test"``), ``answer``, ``evidence``, ``qrels``, ``levels`` and ``metadata`` are optional. The
shorter spellings of hand-written labels are accepted too (``ragbench.data.folder``): ``query``
for ``text``, ``relevant`` for ``qrels`` (an object of grades or a list of document ids, grade
1), ``doc`` for an evidence's ``doc_id``. ``levels`` (a list of ``document``, ``chunk``,
``span``; default all) names the evaluation levels a query is judged at; a run at another level
leaves it out (a generated query whose document-level label would be degenerate; the finer
levels need evidence). Evidence is located by ``text``, which must occur exactly
once in the document — verbatim, else with every run of whitespace matching any run — or by
character offsets ``start`` < ``end`` (end-exclusive) into the document as loaded; when both are
given they must agree (and the offsets then settle which occurrence is meant). An evidence grade
defaults to 2 (the document answers directly; 1 answers partly). The document-level qrels of a
query are its evidence documents at their highest grade plus the explicit ``qrels`` (or
``relevant``), whose grades must not repeat an evidence document's (a listed id may). ``type``
goes to ``Query.metadata["type"]``; ``answer``, the query's reference answer (a non-empty
string), goes to ``LabeledSet.answers``.

Unreadable input (invalid JSON, an unknown key, an excerpt that is missing or ambiguous, bad
offsets, an empty answer, a document under ``relevant`` that is not in the corpus) raises
``DataError`` naming file, line, query and document; an unknown document id comes with the
nearest ids. Problems the data survives are logged: a repeated query id keeps its first line, a
query without judgements is left out, an explicit ``qrels`` judgement of a document missing from
``corpus/`` is kept, files the directory loader skips are reported. ``check_spans`` lists them
all.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ragbench.data.cuts import CUTS_FILE, apply_cuts, read_cuts, write_cuts
from ragbench.data.labeled import LEVELS, Evidence, LabeledSet
from ragbench.data.problems import (
    MissingSplit,
    Problem,
    ProblemLog,
    check_corpus,
    check_default_split,
    check_judged,
    jsonl_records,
)
from ragbench.data.trec import grade_problem, unwritable
from ragbench.errors import RagbenchError
from ragbench.owned import mark
from ragbench.text.loaders import BaseLoader, DirectoryLoader
from ragbench.text.loaders.directory import OUTPUT
from ragbench.types import Document, Query

__all__ = [
    "DEFAULT_EVIDENCE_GRADE",
    "JudgedQuery",
    "check_spans",
    "check_splits",
    "find_passage",
    "is_spans",
    "labeled_set",
    "load_spans",
    "read_corpus",
    "read_queries",
    "whole_documents",
    "write_spans",
]

StrPath = str | os.PathLike[str]

DEFAULT_EVIDENCE_GRADE = 2
_QUERY_KEYS = (
    "id",
    "text",
    "query",
    "type",
    "split",
    "answer",
    "evidence",
    "qrels",
    "relevant",
    "levels",
    "metadata",
)
_EVIDENCE_KEYS = ("doc_id", "doc", "text", "start", "end", "grade")


def is_spans(path: Path) -> bool:
    """Whether ``path`` has the span-labeled layout (``corpus/`` and ``queries.jsonl``)."""
    return (path / "corpus").is_dir() and (path / "queries.jsonl").is_file()


def load_spans(path: StrPath, split: str = "test") -> LabeledSet:
    """The judged queries of ``split`` of the span-labeled set at ``path``; raises
    ``DataError`` naming file, line, query and document for unreadable input."""
    root = Path(path)
    log = ProblemLog(strict=True)
    documents, judged = _read(root, log)
    return labeled_set(root, documents, judged, root / "queries.jsonl", split, log)


def whole_documents(path: StrPath) -> list[Document] | None:
    """The documents of the span-labeled set at ``path`` without its cuts (as a deployed
    pipeline should index them), or None when the set cuts nothing."""
    root = Path(path)
    if not (root / CUTS_FILE).is_file():
        return None
    return read_corpus(root / "corpus", ProblemLog(strict=True))


def check_spans(path: StrPath) -> list[Problem]:
    """Every problem of the span-labeled set at ``path`` (all splits)."""
    log = ProblemLog(strict=False)
    _, judged = _read(Path(path), log)
    check_splits(judged, Path(path) / "queries.jsonl", log)
    return log.problems


@dataclass
class JudgedQuery:
    """One judged query of a queries file."""

    query: Query
    split: str
    qrels: dict[str, int]
    evidence: list[Evidence]
    answer: str | None
    levels: frozenset[str] | None = None


def labeled_set(
    root: Path,
    documents: list[Document],
    judged: list[JudgedQuery],
    queries_file: Path,
    split: str,
    log: ProblemLog,
) -> LabeledSet:
    """The set named after ``root`` of the judged queries of ``split``; ``DataError`` when
    there are none (with the first problem of the queries file when no split has any) or none
    of them has a relevant judgement."""
    chosen = [q for q in judged if q.split == split]
    if not chosen:
        splits = {q.split for q in judged}
        why = next((p for p in log.problems if p.file == str(queries_file)), None)
        first = f"; the first problem: {why}" if why is not None and not judged else ""
        raise MissingSplit(
            f"{queries_file}: no judged queries of split {split!r} (splits found: "
            f"{', '.join(sorted(splits)) or 'none'}{first})",
            splits,
        )
    qrels = {q.query.id: q.qrels for q in chosen}
    check_judged(log, queries_file, qrels, split)
    log.log_summary(root)
    return LabeledSet(
        name=root.resolve().name,
        documents=documents,
        queries=[q.query for q in chosen],
        qrels=qrels,
        evidence={q.query.id: q.evidence for q in chosen if q.evidence},
        split=split,
        answers={q.query.id: q.answer for q in chosen if q.answer is not None},
        levels={q.query.id: q.levels for q in chosen if q.levels is not None},
    )


def check_splits(judged: list[JudgedQuery], queries_file: Path, log: ProblemLog) -> None:
    """Record a queries file without a judged query, when no error of its lines says why (a
    run of any split would have none), and each split of ``judged`` without a relevant
    judgement (``check_judged``)."""
    said = any(p.file == str(queries_file) and p.severity == "error" for p in log.problems)
    if not judged and not said:
        log.error(
            queries_file,
            None,
            "no judged queries: no line holds a query with evidence, qrels or relevant documents",
        )
    for split in sorted({q.split for q in judged}):
        qrels = {q.query.id: q.qrels for q in judged if q.split == split}
        check_judged(log, queries_file, qrels, split)
    check_default_split(log, queries_file, {q.split for q in judged})


def _read(root: Path, log: ProblemLog) -> tuple[list[Document], list[JudgedQuery]]:
    """The documents and the judged queries (every split) of ``root``."""
    corpus, queries_file = root / "corpus", root / "queries.jsonl"
    documents: list[Document] = []
    if corpus.is_dir():
        documents = read_corpus(corpus, log)
        if (root / CUTS_FILE).is_file():
            documents = apply_cuts(documents, read_cuts(root / CUTS_FILE, documents, log))
    else:
        log.error(corpus, None, "expected a directory of documents")
    if not queries_file.is_file():
        log.error(queries_file, None, "no such file")
        return documents, []
    return documents, read_queries(queries_file, documents, "corpus/", log)


def read_queries(
    path: Path, documents: list[Document], folder: str, log: ProblemLog
) -> list[JudgedQuery]:
    """The judged queries (every split) of the queries file ``path``, their evidence located in
    ``documents``; ``folder`` names where the documents are in messages (``corpus/``)."""
    corpus = _Corpus({d.id: d for d in documents}, folder)
    judged: list[JudgedQuery] = []
    lines: dict[str, int] = {}
    for number, record in jsonl_records(path, log):
        item = _query(record, _Where(path, number, log), corpus)
        if item is None:
            continue
        qid = item.query.id
        if qid in lines:
            log.warn(
                path,
                number,
                f"duplicate query id {qid!r} (first on line {lines[qid]}; that one is kept)",
            )
            continue
        lines[qid] = number
        if not item.qrels:
            log.warn(
                path,
                number,
                f"query {qid!r} has no evidence and no qrels or relevant documents (left out)",
            )
            continue
        judged.append(item)
    return judged


def read_corpus(corpus: Path, log: ProblemLog, loader: BaseLoader | None = None) -> list[Document]:
    """The documents under ``corpus`` (as ``loader`` reads them, by default a
    ``DirectoryLoader``); files it skips are warnings (folders ragbench wrote are no data
    problem), an empty corpus or an id no run file can hold an error."""
    source = loader if loader is not None else DirectoryLoader(corpus)
    documents = list(source)
    for problem in source.report.problems:
        if problem.kind != OUTPUT:
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


@dataclass(frozen=True)
class _Corpus:
    """The documents labels may name, and the folder they are in (for messages)."""

    docs: dict[str, Document]
    folder: str

    def hint(self, doc_id: str) -> str:
        """`` (did you mean ...?)`` with the ids nearest to ``doc_id``, or some ids."""
        near = _near(doc_id, list(self.docs))
        if near:
            return f" (did you mean {', '.join(map(repr, near))}?)"
        some = ", ".join(map(repr, list(self.docs)[:3]))
        return f" (ids are paths relative to {self.folder}, such as {some})" if some else ""


def _near(doc_id: str, ids: list[str], n: int = 3) -> list[str]:
    """The ids most like ``doc_id``: the same file named without its folder, extensions or
    case (``ls`` or ``LS.1.md`` for ``man/ls.1.md``), or ``doc_id`` with a folder in front, then the
    most similar strings."""
    wanted = doc_id.lower()
    same = []
    for candidate in ids:
        path = PurePosixPath(candidate.lower())
        names = {
            str(path),
            path.name,
            path.stem,
            path.name.split(".")[0],
            str(path.with_suffix("")),
        }
        if wanted in names or wanted.endswith("/" + str(path)):
            same.append(candidate)
    similar = difflib.get_close_matches(doc_id, ids, n=n, cutoff=0.6)
    return list(dict.fromkeys(same + similar))[:n]


def _spelling(record: dict[str, Any], at: _Where, what: str, *keys: str) -> str | None:
    """Which of ``keys`` (spellings of one field) ``record`` uses, the first when none; None
    after recording that it uses several."""
    used = [key for key in keys if record.get(key) is not None]
    if len(used) > 1:
        at.error(f"{what}: give {' or '.join(map(repr, used))}, not both")
        return None
    return used[0] if used else keys[0]


def _query(record: dict[str, Any], at: _Where, corpus: _Corpus) -> JudgedQuery | None:
    """A query line as a ``JudgedQuery``, or None after recording why it is unusable."""
    qid = record.get("id", f"q{at.line}")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    if not isinstance(qid, str) or not qid:
        at.error(f"expected a non-empty string 'id', found {qid!r}")
        return None
    why = unwritable(qid)
    if why is not None:
        at.error(f"id {qid!r}: {why}")
        return None
    what = f"query {qid!r}"
    fields = _checked(record, at, what, _QUERY_KEYS, _QUERY_TYPES)
    if fields is None:
        return None
    qtype, split, answer, items, listed, metadata = fields
    if not split.strip():
        at.error(f"{what}: expected a split name under 'split' (default 'test'), found {split!r}")
        return None
    question = _spelling(record, at, what, "query", "text")
    judgements = _spelling(record, at, what, "relevant", "qrels")
    if question is None or judgements is None:
        return None
    text = record.get(question)
    if not isinstance(text, str):
        at.error(f"{what}: expected the query as a string under {question!r}, found {_found(text)}")
        return None
    if not text.strip():
        at.warn(f"query {qid!r} has no text")
    if answer is not None and not answer.strip():
        at.error(f"query {qid!r}: expected a non-empty string under 'answer', found {answer!r}")
        return None
    evidence = [
        e for i, item in enumerate(items) if (e := _evidence(item, i, qid, at, corpus)) is not None
    ]
    if len(evidence) < len(items):
        return None
    judged = record.get(judgements)
    qrels = _qrels(qid, evidence, judgements, {} if judged is None else judged, at, corpus)
    if qrels is None:
        return None
    levels = None if listed is None else _levels(listed, bool(evidence), at, what)
    if listed is not None and levels is None:
        return None
    meta = {**metadata, "type": qtype} if qtype is not None else metadata
    return JudgedQuery(Query(qid, text, meta), split, qrels, evidence, answer, levels)


def _levels(listed: list[Any], spans: bool, at: _Where, what: str) -> frozenset[str] | None:
    """The evaluation levels a query's ``levels`` names, or None after recording why they are
    unusable: unknown or no levels, or a finer level than ``document`` without evidence."""
    unknown = [level for level in listed if level not in LEVELS]
    if not listed or unknown:
        at.error(
            f"{what}: expected under 'levels' a non-empty list of {', '.join(LEVELS)}, "
            f"found {listed!r}"
        )
        return None
    if not spans and set(listed) - {"document"}:
        at.error(f"{what}: 'levels' names the chunk or span level, which needs evidence")
        return None
    return frozenset(listed)


# optional key → (type, default); the query and its judgements, which have two spellings each,
# are read on their own
_QUERY_TYPES: dict[str, tuple[type, Any]] = {
    "type": (str, None),
    "split": (str, "test"),
    "answer": (str, None),
    "evidence": (list, []),
    "levels": (list, None),
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
    an unknown key or a value of the wrong type."""
    if _has_unknown_keys(record, allowed, at, what):
        return None
    values = []
    for key, (kind, default) in types.items():
        value = record.get(key)
        if value is None:
            value = default
        elif not isinstance(value, kind):
            names: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
            at.error(f"{what}: expected {names[kind]} under {key!r}, found {_found(value)}")
            return None
        values.append(value)
    return values


def _has_unknown_keys(
    record: dict[str, Any], allowed: tuple[str, ...], at: _Where, what: str
) -> bool:
    """Whether ``record`` has keys that are not ``allowed`` (then recorded as an error)."""
    unknown = [k for k in record if k not in allowed]
    if unknown:
        at.error(
            f"{what}: unknown key(s) {', '.join(map(repr, unknown))} "
            f"(allowed: {', '.join(allowed)})"
        )
    return bool(unknown)


def _found(value: object) -> str:
    return "nothing" if value is None else repr(value)


def _grade(value: object) -> int | None:
    """``value`` as a grade if it is a (non-boolean) integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _evidence(item: object, index: int, qid: str, at: _Where, corpus: _Corpus) -> Evidence | None:
    """Evidence item ``index`` located in its document, or None after recording why not."""
    what = f"query {qid!r}, evidence {index + 1}"
    if not isinstance(item, dict):
        at.error(f"{what}: expected an object, found {item!r}")
        return None
    if _has_unknown_keys(item, _EVIDENCE_KEYS, at, what):
        return None
    key = _spelling(item, at, what, "doc", "doc_id")
    if key is None:
        return None
    doc_id, grade = item.get(key), _grade(item.get("grade", DEFAULT_EVIDENCE_GRADE))
    if not isinstance(doc_id, str):
        at.error(f"{what}: expected a document id under {key!r}, found {_found(doc_id)}")
        return None
    if doc_id not in corpus.docs:
        at.error(f"{what}: document {doc_id!r} is not in {corpus.folder}{corpus.hint(doc_id)}")
        return None
    doc = corpus.docs[doc_id]
    if grade is None or grade < 1 or grade_problem(grade) is not None:
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


def find_passage(passage: str, text: str) -> tuple[int, int, int | None] | None:
    """The first occurrence of ``passage`` in ``text`` as ``(start, end, where the next one
    starts or None)``: verbatim, else with every run of whitespace matching any run (then
    ``[start, end)`` spans its first to its last word); None when it does not occur."""
    first = text.find(passage)
    if first >= 0:
        again = text.find(passage, first + 1)
        return first, first + len(passage), again if again >= 0 else None
    words = passage.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(map(re.escape, words)))
    match = pattern.search(text)
    if match is None:
        return None
    later = pattern.search(text, match.start() + 1)
    return match.start(), match.end(), later.start() if later is not None else None


def _locate(excerpt: str, doc: Document, what: str, at: _Where) -> tuple[int, int] | None:
    """The only occurrence of ``excerpt`` in ``doc``; none or several is an error."""
    found = find_passage(excerpt, doc.text)
    if found is None:
        at.error(f"{what}: excerpt not found: {_preview(excerpt)}")
        return None
    start, end, again = found
    if again is not None:
        at.error(
            f"{what}: excerpt occurs more than once (at {start} and {again}); "
            f"give 'start' and 'end' to pick one: {_preview(excerpt)}"
        )
        return None
    return start, end


def _preview(text: str, size: int = 60) -> str:
    return repr(text if len(text) <= size else text[:size] + "…")


def _qrels(
    qid: str,
    evidence: list[Evidence],
    key: str,
    judged: object,
    at: _Where,
    corpus: _Corpus,
) -> dict[str, int] | None:
    """Evidence documents at their highest grade plus the judgements under ``key``: ``qrels``
    (an object of grades; a document missing from the corpus is a warning) or ``relevant``
    (such an object or a list of ids at grade 1; a document missing is an error)."""
    qrels: dict[str, int] = {}
    for e in evidence:
        qrels[e.doc_id] = max(e.grade, qrels.get(e.doc_id, e.grade))
    listed = isinstance(judged, list) and key == "relevant"
    grades = _listed(qid, judged, at) if listed else judged
    if grades is None:  # a bad id in the list, recorded
        return None
    if not isinstance(grades, dict):
        expected = "a list of document ids or an object" if key == "relevant" else "an object"
        at.error(f"query {qid!r}: expected {expected} under {key!r}, found {grades!r}")
        return None
    for doc_id, value in grades.items():
        grade = _grade(value)
        bad = f"expected an integer grade, found {value!r}"
        why = bad if grade is None else grade_problem(grade)
        if grade is None or why is not None:
            at.error(f"query {qid!r}: {key}[{doc_id!r}]: {why}")
            return None
        if doc_id in qrels:
            if listed:  # a listed id graded by its evidence
                continue
            at.error(
                f"query {qid!r}: {key} repeats evidence document {doc_id!r} "
                "(its grade comes from the evidence)"
            )
            return None
        if doc_id not in corpus.docs:
            where = f"{corpus.folder}{corpus.hint(doc_id)}"
            if key == "relevant":
                at.error(f"query {qid!r}: relevant document {doc_id!r} is not in {where}")
                return None
            at.warn(f"query {qid!r}: qrels judges document {doc_id!r}, which is not in {where}")
        qrels[doc_id] = grade
    return qrels


def _listed(qid: str, ids: Any, at: _Where) -> dict[str, int] | None:
    """A list of relevant document ids as grades (1 each); a repeated id is a warning."""
    grades: dict[str, int] = {}
    for index, doc_id in enumerate(ids):
        if not isinstance(doc_id, str) or not doc_id:
            at.error(
                f"query {qid!r}: relevant[{index}]: expected a document id (a string), "
                f"found {doc_id!r}"
            )
            return None
        if doc_id in grades:
            at.warn(f"query {qid!r}: relevant lists {doc_id!r} more than once")
        grades[doc_id] = 1
    return grades


CONTEXTS_FILE = "contexts.jsonl"


def write_spans(
    out: Path,
    documents: list[Document],
    queries: list[dict[str, Any]],
    corpus_given: bool,
    cuts: Sequence[tuple[str, int, int, str]] = (),
) -> None:
    """Write a span-labeled set — ``corpus/`` (copies of the documents' source files with
    ``corpus_given``, else one ``contexts.jsonl``), ``queries.jsonl`` (one record per query) and
    the ``cuts`` (doc id, start, end, query id) as ``cuts.jsonl`` — into a temporary folder next
    to ``out``, marked as ragbench's (``ragbench.owned``), then rename it to ``out``."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise RagbenchError(f"{out}: cannot write the labeled set ({exc})") from None
    try:
        mark(temporary, "labeled set")
        corpus = temporary / "corpus"
        corpus.mkdir()
        if corpus_given:
            _copy_sources(documents, corpus)
        else:
            _write_lines(corpus / CONTEXTS_FILE, map(_context, documents))
        _write_lines(temporary / "queries.jsonl", queries)
        if cuts:
            write_cuts(temporary / CUTS_FILE, cuts)
        if out.exists():
            out.rmdir()
        temporary.rename(out)
    except OSError as exc:
        shutil.rmtree(temporary, ignore_errors=True)
        raise RagbenchError(f"{out}: cannot write the labeled set ({exc})") from None
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _context(doc: Document) -> dict[str, str]:
    """A document's ``contexts.jsonl`` line; a title its text opens with is kept as ``title``
    (metadata on load), so a set made from a BEIR corpus still knows where its titles end."""
    title = doc.metadata.get("title")
    if isinstance(title, str) and title and doc.text.startswith(title):
        return {"id": doc.id, "title": title, "text": doc.text}
    return {"id": doc.id, "text": doc.text}


def _copy_sources(documents: list[Document], corpus: Path) -> None:
    """Copy the files the documents were loaded from, at the same relative paths (so the copy
    loads as the same documents)."""
    sources = {doc.source: doc.metadata["path"] for doc in documents}
    for source, rel in sources.items():
        target = corpus / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def _write_lines(path: Path, records: Iterable[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
