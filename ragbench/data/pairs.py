"""Training pairs: (query, relevant passage) pairs a model is adapted to a corpus with.

Two sources, as a fine-tuning config's ``pairs`` names them:

* ``split_pairs`` — the judged queries of one split of a labeled set (the selection split of a
  sweep): one pair per relevant document, the passage around its first evidence span (or the
  document's opening when it has none);
* ``generated_pairs`` — queries generated from the documents alone (the inverse cloze task of
  ``ragbench.data.generate``): each query's sentence is cut out of its document, and the
  passage is the cut document around where it was, so the model learns to find a passage by
  what it says rather than by the words it shares with the query.

Passages are at most ``width`` characters (about the model's sequence length): a window
centred on the evidence, widened to whole words. Every document also gives its opening
passage to ``passages``, the pool hard negatives are mined from. ``key`` hashes all of it, so
a model trained on the pairs is cached by their content.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragbench.data.cuts import Cuts
from ragbench.data.generate import IctMethod, held_out
from ragbench.data.labeled import LabeledSet
from ragbench.types import Document

__all__ = ["TrainingPairs", "generated_pairs", "passage", "split_pairs"]


@dataclass(frozen=True)
class TrainingPairs:
    """Parallel rows of (query id, query text, positive document id, positive passage), the
    pool of passages per document hard negatives are drawn from, and where the pairs came
    from (``source``: a split's name or the generator's settings)."""

    source: str
    query_ids: tuple[str, ...]
    queries: tuple[str, ...]
    positive_ids: tuple[str, ...]
    positives: tuple[str, ...]
    passages: Mapping[str, str] = field(repr=False)

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def key(self) -> str:
        """Hash of the pairs and the passage pool (the cache identity of what trains a model)."""
        h = hashlib.sha256(self.source.encode())
        rows = zip(self.query_ids, self.queries, self.positive_ids, self.positives, strict=True)
        for row in rows:
            h.update("\x1f".join(row).encode("utf-8", "surrogatepass") + b"\x1e")
        for doc_id in sorted(self.passages):
            h.update(f"{doc_id}\x1f{self.passages[doc_id]}\x1e".encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:24]


def passage(text: str, start: int, end: int, width: int) -> str:
    """At most ``width`` characters of ``text`` around ``[start, end)``, cut at spaces."""
    if len(text) <= width:
        return text.strip()
    middle = (start + end) // 2
    left = max(0, min(middle - width // 2, len(text) - width))
    right = left + width
    if left > 0:
        space = text.find(" ", left, middle)
        left = space + 1 if space >= 0 else left
    if right < len(text):
        space = text.rfind(" ", middle, right)
        right = space if space >= 0 else right
    return text[left:right].strip()


def _pool(documents: Sequence[Document], width: int) -> dict[str, str]:
    return {doc.id: passage(doc.text, 0, 0, width) for doc in documents if doc.text.strip()}


def split_pairs(labeled: LabeledSet, width: int, relevance_level: int = 1) -> TrainingPairs:
    """One pair per (query, relevant document) of ``labeled``'s split (documents judged at
    least ``relevance_level``), in query order."""
    docs = labeled.doc_index
    rows: list[tuple[str, str, str, str]] = []
    for query in labeled.queries:
        spans = {e.doc_id: e for e in labeled.evidence.get(query.id, [])}
        for doc_id, grade in labeled.qrels.get(query.id, {}).items():
            if grade < relevance_level or doc_id not in docs:
                continue
            span = spans.get(doc_id)
            text = docs[doc_id].text
            where = (span.start, span.end) if span is not None else (0, 0)
            rows.append((query.id, query.text, doc_id, passage(text, *where, width)))
    source = f"split {labeled.split!r} of {labeled.name}"
    return _pairs(source, rows, _pool(labeled.documents, width))


def generated_pairs(documents: Sequence[Document], n: int, seed: int, width: int) -> TrainingPairs:
    """Up to ``n`` pairs generated from ``documents`` by the inverse cloze task (seeded): the
    sentence is the query, the passage around its place in its document, cut without it."""
    method = IctMethod()
    drafts, cuts = held_out(documents, method, n, seed)
    docs = {doc.id: doc for doc in documents}
    texts = {doc_id: cut.apply(docs[doc_id].text) for doc_id, cut in cuts.items()}
    rows = []
    for i, draft in enumerate(drafts):
        if draft.cut is None:
            continue
        doc_id, start, _ = draft.cut
        at = cuts.get(doc_id, Cuts(())).position(start)
        text = texts.get(doc_id, docs[doc_id].text)
        rows.append((f"g{i}", draft.text, doc_id, passage(text, at, at, width)))
    cut_docs = [Document(d.id, texts.get(d.id, d.text)) for d in documents]
    source = f"generated ({method.name}, n={n}, seed={seed}, {method.settings()})"
    return _pairs(source, rows, _pool(cut_docs, width))


def _pairs(
    source: str, rows: Sequence[tuple[str, str, str, str]], pool: dict[str, str]
) -> TrainingPairs:
    columns = [tuple(column) for column in zip(*rows, strict=True)] if rows else [()] * 4
    ids, texts, doc_ids, positives = columns
    return TrainingPairs(source, ids, texts, doc_ids, positives, pool)
