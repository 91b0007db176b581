"""Import a ragas test set as a span-labeled set (``corpus/`` + ``queries.jsonl``).

ragas (0.4) saves an ``EvaluationDataset`` or a ``Testset`` with ``to_jsonl`` (one JSON object per
line) or ``to_csv`` (a header row; list cells written as Python literals, ``['first', 'second']``).
Each row is one sample: ``user_input`` (the question), ``reference_contexts`` (the passages that
answer it), and optionally ``reference`` (the reference answer), ``synthesizer_name`` (the
query's type here), ``persona_name``, ``query_style`` and ``query_length`` (kept as metadata).
What a RAG system fills in (``retrieved_contexts``, ``response``, ...) and the ``*_context_ids``
are not labels and are ignored; fields ragas does not know are reported once.

Each usable row becomes a query ``q001``, ``q002`` … (its row number) with its reference contexts
as evidence and ``reference`` as its answer. The ``<1-hop>`` markers ragas's multi-hop
synthesizers put before their contexts are dropped. Without a corpus, every distinct context is
one document of ``corpus/contexts.jsonl`` (ids ``c0001`` …) and its own whole-document span.
With a corpus folder, each context is located in its documents — verbatim, else with every run
of whitespace matching any run — and its first occurrence is the evidence; the files those
documents were loaded from are copied into ``corpus/``.

Problems are reported by row (``file:line: row N: ...``; a JSONL file's row is its line, a CSV
file's the N-th row after the header). A row is left out, with one error, when it has no
question (or is multi-turn), no reference context, or no context found in the corpus; a context
that is empty, not found, or found more than once is a warning. When no row is usable the import
raises ``DataError``. The set is written to a temporary folder and renamed into place, so a
failed import leaves nothing behind.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbench.data.problems import Problem, ProblemLog, csv_records, jsonl_records
from ragbench.data.spans import find_passage, read_corpus, write_spans
from ragbench.errors import DataError
from ragbench.types import Document

__all__ = ["RagasImport", "import_ragas"]

StrPath = str | os.PathLike[str]

# the fields of ragas's SingleTurnSample (0.4) and Testset rows
_RAGAS_FIELDS = frozenset(
    {
        "user_input",
        "retrieved_contexts",
        "reference_contexts",
        "retrieved_context_ids",
        "reference_context_ids",
        "response",
        "multi_responses",
        "reference",
        "rubrics",
        "persona_name",
        "query_style",
        "query_length",
        "synthesizer_name",
    }
)
_METADATA_FIELDS = ("persona_name", "query_style", "query_length")
_HOP_MARKER = re.compile(r"<\d+-hop>\s*")


@dataclass(frozen=True)
class RagasImport:
    """The set ``import_ragas`` wrote at ``path``, its counts, and the problems of the rows
    (one error per row left out; warnings for rows kept)."""

    path: Path
    queries: int
    documents: int
    answers: int
    problems: list[Problem]

    @property
    def left_out(self) -> int:
        """How many rows were left out."""
        return sum(p.severity == "error" for p in self.problems)


def import_ragas(source: StrPath, out: StrPath, corpus: StrPath | None = None) -> RagasImport:
    """Write the ragas test set ``source`` (``.jsonl`` or ``.csv``) as a span-labeled set in
    ``out`` (a new or empty folder); with ``corpus``, its reference contexts are located in the
    documents of that folder, which become the set's corpus (see the module docstring)."""
    path, target = Path(source), Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise DataError(f"{target}: already exists and is not an empty folder (choose a new one)")
    log = ProblemLog(strict=False)
    samples = _samples(path, log)
    if corpus is None:
        documents, queries = _own_documents(samples)
    else:
        documents, queries = _in_corpus(samples, Path(corpus), log)
    if not queries:
        first = f"; the first problem: {log.problems[0]}" if log.problems else ""
        raise DataError(f"{path}: no usable rows{first}")
    write_spans(target, documents, queries, corpus_given=corpus is not None)
    return RagasImport(
        path=target,
        queries=len(queries),
        documents=len(documents),
        answers=sum("answer" in q for q in queries),
        problems=log.problems,
    )


@dataclass(frozen=True)
class _Where:
    """The row being read, to report problems against."""

    file: Path
    row: int
    line: int
    log: ProblemLog

    def error(self, message: str) -> None:
        self.log.error(self.file, self.line, f"row {self.row}: {message}")

    def warn(self, message: str) -> None:
        self.log.warn(self.file, self.line, f"row {self.row}: {message}")


@dataclass
class _Sample:
    """A usable row: its question, its non-empty contexts (1-based index, text) and the rest."""

    at: _Where
    question: str
    contexts: list[tuple[int, str]]
    answer: str | None
    type: str | None
    metadata: dict[str, Any]


def _samples(path: Path, log: ProblemLog) -> list[_Sample]:
    """The usable rows of ``path``; every other row is recorded as an error."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    name = path.name.lower()
    if name.endswith(".csv"):
        rows = ((row, line, _csv_values(record)) for row, line, record in csv_records(path, log))
    elif name.endswith((".jsonl", ".jsonl.gz")):
        rows = ((line, line, record) for line, record in jsonl_records(path, log))
    else:
        raise DataError(
            f"{path}: expected a .jsonl or .csv file written by ragas "
            "(EvaluationDataset or Testset .to_jsonl / .to_csv)"
        )
    samples: list[_Sample] = []
    unknown: dict[str, int] = {}
    for row, line, record in rows:
        for key in record:
            if key not in _RAGAS_FIELDS:
                unknown.setdefault(key, line)
        sample = _sample(record, _Where(path, row, line, log))
        if sample is not None:
            samples.append(sample)
    if unknown:
        names = ", ".join(map(repr, unknown))
        log.warn(
            path, min(unknown.values()), f"ignored field(s) ragas samples do not have: {names}"
        )
    return samples


def _csv_values(record: dict[str, str]) -> dict[str, Any]:
    """A CSV row as ragas wrote it, with its list cells parsed and empty cells left out."""
    values: dict[str, Any] = {}
    for key, text in record.items():
        if not text:
            continue
        value: Any = text
        if key == "reference_contexts" or (key == "user_input" and text.startswith("[")):
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                parsed = None
            if isinstance(parsed, list):
                value = parsed
        values[key] = value
    return values


def _sample(record: dict[str, Any], at: _Where) -> _Sample | None:
    """One row as a ``_Sample``, or None after recording why it is left out."""
    question = record.get("user_input")
    if isinstance(question, list):
        at.error(
            "a multi-turn sample ('user_input' is a list of messages); only single-turn "
            "samples can be imported"
        )
        return None
    if not isinstance(question, str) or not question.strip():
        at.error(
            f"expected the question as a non-empty string 'user_input', found {_found(question)}"
        )
        return None
    raw = record.get("reference_contexts")
    if raw is None or raw == []:
        at.error("no reference contexts ('reference_contexts' is missing or empty)")
        return None
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        at.error(f"expected a list of strings under 'reference_contexts', found {_found(raw)}")
        return None
    answer = record.get("reference")
    if answer is not None and not isinstance(answer, str):
        at.error(f"expected the reference answer as a string 'reference', found {_found(answer)}")
        return None
    contexts = []
    for index, text in enumerate(raw, 1):
        marker = _HOP_MARKER.match(text)
        context = text[marker.end() :] if marker else text
        # newlines as the loaders normalise a document's, so offsets into the context hold
        context = context.replace("\r\n", "\n").replace("\r", "\n")
        if context.strip():
            contexts.append((index, context))
        else:
            at.warn(f"reference context {index} is empty (left out)")
    if not contexts:
        at.error("no reference contexts (all of them are empty)")
        return None
    kind = record.get("synthesizer_name")
    metadata = {k: record[k] for k in _METADATA_FIELDS if isinstance(record.get(k), str)}
    return _Sample(
        at,
        question,
        contexts,
        answer if answer and answer.strip() else None,
        kind if isinstance(kind, str) and kind else None,
        {**metadata, "ragas_row": at.row},
    )


def _found(value: object) -> str:
    if value is None:
        return "nothing"
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


Span = tuple[str, int, int]


def _own_documents(samples: list[_Sample]) -> tuple[list[Document], list[dict[str, Any]]]:
    """One document per distinct context, each context its whole document."""
    distinct = dict.fromkeys(text for s in samples for _, text in s.contexts)
    width = max(4, len(str(len(distinct))))
    ids = {text: f"c{i:0{width}d}" for i, text in enumerate(distinct, 1)}
    documents = [Document(doc_id, text) for text, doc_id in ids.items()]
    queries = [
        _query(s, samples, [(ids[text], 0, len(text)) for _, text in s.contexts]) for s in samples
    ]
    return documents, queries


def _in_corpus(
    samples: list[_Sample], corpus: Path, log: ProblemLog
) -> tuple[list[Document], list[dict[str, Any]]]:
    """The documents of ``corpus`` and the queries whose contexts were found in them."""
    loaded = ProblemLog(strict=True)  # no documents, or an id no run file can hold: stop
    documents = read_corpus(corpus, loaded)
    log.problems.extend(loaded.problems)
    finder = _Finder(documents)
    queries = []
    for s in samples:
        spans = []
        for index, text in s.contexts:
            found = finder.locate(text)
            if found is None:
                s.at.warn(f"reference context {index} is not in {corpus}: {_found(text)}")
                continue
            span, again = found
            if again:
                s.at.warn(
                    f"reference context {index} occurs more than once in {corpus}; the first "
                    f"occurrence ({span[0]!r} at {span[1]}) is its evidence"
                )
            spans.append(span)
        if spans:
            queries.append(_query(s, samples, spans))
        else:
            s.at.error(f"none of its reference contexts is in {corpus} (left out)")
    return documents, queries


class _Finder:
    """Locates passages in a list of documents (all of them searched at once)."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.starts: list[int] = []
        offset = 0
        for doc in documents:
            self.starts.append(offset)
            offset += len(doc.text) + 1
        # NUL separates documents: it is no whitespace, so no match runs across two of them
        self.text = "\0".join(doc.text for doc in documents)

    def locate(self, passage: str) -> tuple[Span, bool] | None:
        """The first occurrence of ``passage`` as (doc id, start, end), and whether there are
        more; verbatim, else with whitespace normalised."""
        found = None if "\0" in passage else find_passage(passage, self.text)
        if found is None:
            return None
        start, end, again = found
        return self._span(start, end), again is not None

    def _span(self, start: int, end: int) -> Span:
        i = bisect.bisect_right(self.starts, start) - 1
        return self.documents[i].id, start - self.starts[i], end - self.starts[i]


def _query(sample: _Sample, samples: list[_Sample], spans: list[Span]) -> dict[str, Any]:
    """The ``queries.jsonl`` record of ``sample`` (ids numbered by row, padded for the file)."""
    width = max(3, len(str(samples[-1].at.row)))
    record: dict[str, Any] = {"id": f"q{sample.at.row:0{width}d}", "text": sample.question}
    if sample.type is not None:
        record["type"] = sample.type
    if sample.answer is not None:
        record["answer"] = sample.answer
    record["evidence"] = [
        {"doc_id": doc_id, "start": start, "end": end}
        for doc_id, start, end in dict.fromkeys(spans)
    ]
    record["metadata"] = sample.metadata
    return record
