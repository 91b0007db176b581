"""A labeled retrieval set: corpus, queries, graded document qrels, optional span evidence and
optional reference answers.

Labels live at the document level (``qrels``: query id → doc id → grade, as in BEIR / trec_eval)
and, where known, at the character-span level (``evidence``), so that evaluation can project any
chunker's rankings back onto them. ``answers`` (query id → reference answer) are what answer
metrics compare generated answers with. ``levels`` names the queries judged at some evaluation
levels only (a generated query whose document-level label would be degenerate is judged at the
chunk and span levels alone). ``fingerprint`` hashes the content and keys caches and runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from ragbench.types import Document, Query

__all__ = ["LEVELS", "Evidence", "LabeledSet", "Qrels", "corpus_fingerprint"]

LEVELS = ("document", "chunk", "span")
"""The evaluation levels, coarsest first (``evaluation.level``)."""

Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True, slots=True)
class Evidence:
    """A character span ``[start, end)`` of document ``doc_id`` that answers query ``query_id``."""

    query_id: str
    doc_id: str
    start: int
    end: int
    grade: int = 1

    @property
    def length(self) -> int:
        """Span length in characters."""
        return self.end - self.start


@dataclass(eq=False)
class LabeledSet:
    """Documents, queries of one split, their qrels and (optionally) span evidence, reference
    answers and the levels a query is judged at (query id → levels; a query not named is judged
    at every level)."""

    name: str
    documents: list[Document]
    queries: list[Query]
    qrels: Qrels
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)
    split: str = "test"
    answers: dict[str, str] = field(default_factory=dict)
    levels: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def generated_from(self) -> str | None:
        """The folder or file a generated set's documents were read from (its queries'
        ``generator.source``), which is what the user calls the dataset; None for other sets."""
        for query in self.queries:
            generator = query.metadata.get("generator")
            if isinstance(generator, dict) and isinstance(generator.get("source"), str):
                return str(generator["source"])
        return None

    @cached_property
    def doc_index(self) -> dict[str, Document]:
        """Documents by id."""
        return {d.id: d for d in self.documents}

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 over documents, queries, qrels, evidence, split, reference answers and
        judged levels (order-independent ids). Answers and levels enter only when there are
        any, so a set without them keeps the fingerprint it had before sets could carry them."""
        h = hashlib.sha256()

        def put(*parts: object) -> None:
            for part in parts:
                h.update(str(part).encode("utf-8", "surrogatepass"))
                h.update(b"\x1f")
            h.update(b"\x1e")

        put("split", self.split)
        for d in sorted(self.documents, key=lambda d: d.id):
            put("doc", d.id, d.text)
        for q in sorted(self.queries, key=lambda q: q.id):
            put("query", q.id, q.text)
        for qid in sorted(self.qrels):
            for did, grade in sorted(self.qrels[qid].items()):
                put("qrel", qid, did, grade)
        for qid in sorted(self.evidence):
            for e in sorted(self.evidence[qid], key=lambda e: (e.doc_id, e.start, e.end)):
                put("span", qid, e.doc_id, e.start, e.end, e.grade)
        for qid in sorted(self.answers):
            put("answer", qid, self.answers[qid])
        for qid in sorted(self.levels):
            put("levels", qid, *sorted(self.levels[qid]))
        return h.hexdigest()

    @cached_property
    def corpus_fingerprint(self) -> str:
        """SHA-256 over the documents alone: keys chunks and embeddings shared across splits."""
        return corpus_fingerprint(self.documents)

    @property
    def has_spans(self) -> bool:
        """Whether span-level evaluation is possible."""
        return bool(self.evidence)

    def judged_at(self, level: str) -> set[str]:
        """The ids of the queries judged at evaluation ``level``."""
        return {q.id for q in self.queries if level in self.levels.get(q.id, LEVELS)}

    @property
    def has_answers(self) -> bool:
        """Whether any query has a reference answer (answer metrics need them)."""
        return bool(self.answers)

    def subset(self, query_ids: Iterable[str]) -> LabeledSet:
        """The same corpus with only the given queries (in the given order)."""
        wanted = list(dict.fromkeys(query_ids))
        by_id = {q.id: q for q in self.queries}
        return LabeledSet(
            name=self.name,
            documents=self.documents,
            queries=[by_id[q] for q in wanted if q in by_id],
            qrels={q: self.qrels[q] for q in wanted if q in self.qrels},
            evidence={q: self.evidence[q] for q in wanted if q in self.evidence},
            split=self.split,
            answers={q: self.answers[q] for q in wanted if q in self.answers},
            levels={q: self.levels[q] for q in wanted if q in self.levels},
        )

    def _repr_html_(self) -> str:
        rows = {
            "split": self.split,
            "documents": len(self.documents),
            "queries": len(self.queries),
            "judgements": sum(map(len, self.qrels.values())),
            "evidence spans": sum(map(len, self.evidence.values())),
            "reference answers": len(self.answers),
            "fingerprint": self.fingerprint[:16],
        }
        cells = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows.items())
        return f"<b>LabeledSet {self.name!r}</b><table>{cells}</table>"

    def __repr__(self) -> str:
        return (
            f"LabeledSet({self.name!r}, split={self.split!r}, documents={len(self.documents)}, "
            f"queries={len(self.queries)}, judgements={sum(map(len, self.qrels.values()))}, "
            f"spans={sum(map(len, self.evidence.values()))}, answers={len(self.answers)})"
        )


def corpus_fingerprint(documents: Iterable[Document]) -> str:
    """SHA-256 over documents' ids and texts (order-independent): the ``corpus`` source key of
    a plan."""
    h = hashlib.sha256()
    for d in sorted(documents, key=lambda d: d.id):
        for part in (d.id, d.text):
            h.update(part.encode("utf-8", "surrogatepass"))
            h.update(b"\x1f")
    return h.hexdigest()
