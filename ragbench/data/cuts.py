"""Text cut out of a labeled set's documents on load: a generated query's own sentence.

A generated set makes a query of a document's own words (a sentence, a heading). Searched in a
corpus that still holds them, the query finds its document by exact string match and every
lexical retriever looks perfect; so the generator writes, next to ``corpus/``, a ``cuts.jsonl``
naming each range to remove, one per line::

    {"doc_id": "a.md", "start": 120, "end": 188, "query": "q001"}

``start``/``end`` are character offsets (end-exclusive) into the document as ``corpus/`` loads
it; ``query`` names the query it was cut for (provenance only). The span-labeled reader applies
the cuts before anything else sees the documents, so chunkers, indexes, evidence offsets and
reports all work on the cut text: the files in ``corpus/`` stay as they were (Markdown, HTML,
PDF alike). A range runs over the blanks next to its text (``widen``), so a cut leaves no double
space behind.

``Cuts`` maps offsets of the uncut text onto the cut one (``position``), which the generator uses
to write evidence offsets against the text the set will load.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ragbench.data.problems import ProblemLog, jsonl_records
from ragbench.types import Document

__all__ = ["CUTS_FILE", "Cuts", "apply_cuts", "read_cuts", "widen", "write_cuts"]

CUTS_FILE = "cuts.jsonl"


def widen(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` extended over the spaces and tabs that follow it and, when that reaches
    the end of its line, over those before it too: the cut leaves neither a double space nor
    trailing blanks."""
    while end < len(text) and text[end] in " \t":
        end += 1
    if end == len(text) or text[end] in "\r\n":
        while start > 0 and text[start - 1] in " \t":
            start -= 1
    return start, end


@dataclass(frozen=True)
class Cuts:
    """The ranges cut out of one document: sorted, disjoint ``(start, end)`` pairs."""

    ranges: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, ranges: Iterable[tuple[int, int]]) -> Cuts:
        """The cuts of ``ranges`` in any order, overlapping or touching ranges merged (two
        neighbouring sentences cut for two queries share the blank between them)."""
        merged: list[tuple[int, int]] = []
        for start, end in sorted(ranges):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return cls(tuple(merged))

    def apply(self, text: str) -> str:
        """``text`` without the ranges."""
        kept, at = [], 0
        for start, end in self.ranges:
            kept.append(text[at:start])
            at = end
        kept.append(text[at:])
        return "".join(kept)

    def position(self, offset: int) -> int:
        """Where ``offset`` of the uncut text lands in the cut text (an offset inside a range
        lands where the range was)."""
        i = bisect.bisect_right([start for start, _ in self.ranges], offset)
        removed = sum(end - start for start, end in self.ranges[:i])
        if i and offset < self.ranges[i - 1][1]:  # inside the range before it
            removed -= self.ranges[i - 1][1] - offset
        return offset - removed

    def span(self, start: int, end: int) -> tuple[int, int]:
        """``[start, end)`` of the uncut text in the cut text (possibly empty)."""
        return self.position(start), self.position(end)


def apply_cuts(documents: Sequence[Document], cuts: Mapping[str, Cuts]) -> list[Document]:
    """``documents`` with their cuts applied; each cut document records ``metadata["cut"]``
    (how many characters were removed)."""
    out = []
    for doc in documents:
        found = cuts.get(doc.id)
        if found is None:
            out.append(doc)
            continue
        text = found.apply(doc.text)
        removed = len(doc.text) - len(text)
        out.append(replace(doc, text=text, metadata={**doc.metadata, "cut": removed}))
    return out


def read_cuts(path: Path, documents: Sequence[Document], log: ProblemLog) -> dict[str, Cuts]:
    """The cuts of ``path`` per document id (overlapping ranges merged); a line naming an
    unknown document or offsets outside it is an error naming the file and line."""
    texts = {doc.id: doc.text for doc in documents}
    found: dict[str, list[tuple[int, int]]] = {}
    for number, record in jsonl_records(path, log):
        item = _cut(record, texts)
        if isinstance(item, str):
            log.error(path, number, item)
            continue
        doc_id, start, end = item
        found.setdefault(doc_id, []).append((start, end))
    return {doc_id: Cuts.of(ranges) for doc_id, ranges in found.items()}


def _cut(record: dict[str, Any], texts: Mapping[str, str]) -> tuple[str, int, int] | str:
    """(doc id, start, end) of one line, or what is wrong with it."""
    unknown = sorted(set(record) - {"doc_id", "start", "end", "query"})
    if unknown:
        return f"unknown key(s) {', '.join(map(repr, unknown))} (expected doc_id, start, end)"
    doc_id, start, end = record.get("doc_id"), record.get("start"), record.get("end")
    if not isinstance(doc_id, str) or doc_id not in texts:
        return f"doc_id {doc_id!r}: not a document of corpus/"
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)):
        return f"{doc_id!r}: start and end must be integers, got {start!r} and {end!r}"
    assert isinstance(start, int) and isinstance(end, int)
    if not 0 <= start < end <= len(texts[doc_id]):
        return (
            f"{doc_id!r}: expected 0 <= start < end <= {len(texts[doc_id])} (the document's "
            f"length), got start {start} and end {end}"
        )
    return doc_id, start, end


def write_cuts(path: Path, cuts: Iterable[tuple[str, int, int, str]]) -> None:
    """Write ``(doc id, start, end, query id)`` cuts to ``path``, one JSON object a line."""
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for doc_id, start, end, query in cuts:
            line = {"doc_id": doc_id, "start": start, "end": end, "query": query}
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
