"""Training pairs: (query, relevant passage) pairs a model is adapted to a corpus with.

Two sources, as a fine-tuning config's ``pairs`` names them:

* ``split_pairs`` — the judged queries of one split of a labeled set (the selection split of a
  sweep): one pair per relevant document, the tile holding its first evidence span (or the
  document's opening when it has none);
* ``generated_pairs`` — queries generated from the documents alone (the inverse cloze task of
  ``ragbench.data.generate``): each query's sentence is cut out of its document, and the
  passage is the tile of the cut document where it was, so the model learns to find a passage
  by what it says rather than by the words it shares with the query.

A document is cut into tiles: consecutive passages of at most ``width`` characters (about the
model's sequence length) ending at a space, the first being its opening. ``passages``, the
pool hard negatives are mined from, is cut the way the positives are: every tile of every
document, or only the openings when no positive lies past one (a split without evidence
spans). Were positives tiles from anywhere in a document and the negatives openings only,
where a passage starts (a title, the first lines) would tell them apart, and a model would
learn that instead of relevance. ``owners`` maps each pool passage to its document. ``key``
hashes all of it, so a model trained on the pairs is cached by their content.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragbench.data.cuts import Cuts
from ragbench.data.generate import IctMethod, held_out
from ragbench.data.labeled import LabeledSet
from ragbench.types import Document

__all__ = [
    "MIN_PAIRS",
    "TrainingPairs",
    "generated_pairs",
    "generated_source",
    "split_pairs",
    "tiles",
]

MIN_PAIRS = 2  # a batch needs two pairs: each one's positive is the other's negative


@dataclass(frozen=True)
class TrainingPairs:
    """Parallel rows of (query id, query text, positive document id, positive passage), the
    pool of passages hard negatives are drawn from (id → text) with the document of each
    (``owners``; a passage id is its document's id when absent), where the pairs came from
    (``source``: a split's name or the generator's settings; part of the cache key) and whether
    they were ``generated`` from the documents alone."""

    source: str
    query_ids: tuple[str, ...]
    queries: tuple[str, ...]
    positive_ids: tuple[str, ...]
    positives: tuple[str, ...]
    passages: Mapping[str, str] = field(repr=False)
    owners: Mapping[str, str] = field(default_factory=dict, repr=False)
    generated: bool = False

    def owner(self, passage_id: str) -> str:
        """The document the pool passage ``passage_id`` was cut from."""
        return self.owners.get(passage_id, passage_id)

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def origin(self) -> str:
        """Where the pairs came from, for a message: from how many documents, and which split
        (``source`` spells out the generator's settings, too much for a line)."""
        documents = len({self.owner(passage_id) for passage_id in self.passages})
        counted = f"{documents:,} document{'s' if documents != 1 else ''}"
        return f"generated from {counted}" if self.generated else f"from {self.source} ({counted})"

    def too_few(self, labeled: str) -> str | None:
        """Why these pairs cannot train a model (fewer than two leave a batch no negative), with
        what to do; ``labeled`` names the way to train on judged queries instead (a flag or a
        config key, as the caller spells it). None when there are enough."""
        if len(self) >= MIN_PAIRS:
            return None
        got = f"{len(self)} pair{'s' if len(self) != 1 else ''} {self.origin}"
        if self.generated:
            words = IctMethod().min_words
            fix = (
                f"give more documents, or documents with more prose (a pair is a sentence of "
                f"{words} or more words cut out of one), or train on judged queries ({labeled})"
            )
        else:
            fix = "judge more queries of the split, each with a relevant document in the set"
        return f"{got}; training needs {MIN_PAIRS} or more: {fix}"

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


def tiles(text: str, width: int) -> list[tuple[int, int]]:
    """``[start, end)`` of consecutive passages of at most ``width`` characters covering
    ``text``, each ending at a space where one is."""
    found: list[tuple[int, int]] = []
    start = 0
    while start < len(text):
        end = len(text)
        if end - start > width:
            space = text.rfind(" ", start, start + width)
            end = space if space > start else start + width
        found.append((start, end))
        start = end
        while start < len(text) and text[start].isspace():
            start += 1
    return found


def _tile_at(text: str, offset: int, width: int) -> str:
    """The tile of ``text`` holding character ``offset`` (the last one past the end)."""
    spans = tiles(text, width) or [(0, 0)]
    start, end = next(((s, e) for s, e in spans if offset < e), spans[-1])
    return text[start:end].strip()


def _pool(
    documents: Sequence[Document], width: int, every_tile: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """The pool passages (id → text) and their documents: each document's opening, or with
    ``every_tile`` each of its tiles (the first keeps the document's id, the ``k``-th is
    ``<id>#k``)."""
    passages: dict[str, str] = {}
    owners: dict[str, str] = {}
    for doc in documents:
        spans = tiles(doc.text, width)
        for k, (start, end) in enumerate(spans if every_tile else spans[:1]):
            text = doc.text[start:end].strip()
            if text:
                passage_id = doc.id if k == 0 else f"{doc.id}#{k}"
                passages[passage_id] = text
                owners[passage_id] = doc.id
    return passages, owners


def split_pairs(labeled: LabeledSet, width: int, relevance_level: int = 1) -> TrainingPairs:
    """One pair per (query, relevant document) of ``labeled``'s split (documents judged at
    least ``relevance_level``), in query order."""
    docs = labeled.doc_index
    rows: list[tuple[str, str, str, str]] = []
    spanned = False
    for query in labeled.queries:
        spans = {e.doc_id: e for e in labeled.evidence.get(query.id, [])}
        for doc_id, grade in labeled.qrels.get(query.id, {}).items():
            if grade < relevance_level or doc_id not in docs:
                continue
            span = spans.get(doc_id)
            spanned |= span is not None
            at = span.start if span is not None else 0
            rows.append((query.id, query.text, doc_id, _tile_at(docs[doc_id].text, at, width)))
    source = f"split {labeled.split!r} of {labeled.name}"
    return _pairs(source, rows, *_pool(labeled.documents, width, every_tile=spanned))


def generated_pairs(documents: Sequence[Document], n: int, seed: int, width: int) -> TrainingPairs:
    """Up to ``n`` pairs generated from ``documents`` by the inverse cloze task (seeded): the
    sentence is the query, the passage the tile of its document, cut without it, where it was."""
    drafts, cuts = held_out(documents, IctMethod(), n, seed)
    docs = {doc.id: doc for doc in documents}
    texts = {doc_id: cut.apply(docs[doc_id].text) for doc_id, cut in cuts.items()}
    rows = []
    for i, draft in enumerate(drafts):
        if draft.cut is None:
            continue
        doc_id, start, _ = draft.cut
        at = cuts.get(doc_id, Cuts(())).position(start)
        text = texts.get(doc_id, docs[doc_id].text)
        rows.append((f"g{i}", draft.text, doc_id, _tile_at(text, at, width)))
    cut_docs = [Document(d.id, texts.get(d.id, d.text)) for d in documents]
    pool = _pool(cut_docs, width, every_tile=True)
    return _pairs(generated_source(n, seed), rows, *pool, generated=True)


def generated_source(n: int, seed: int) -> str:
    """How ``generated_pairs`` makes ``n`` pairs with ``seed``: the generator, its settings and
    how passages are cut (part of a trained model's cache key)."""
    method = IctMethod()
    return f"generated ({method.name}, n={n}, seed={seed}, {method.settings()}, tiles)"


def _pairs(
    source: str,
    rows: Sequence[tuple[str, str, str, str]],
    pool: dict[str, str],
    owners: dict[str, str],
    generated: bool = False,
) -> TrainingPairs:
    columns = [tuple(column) for column in zip(*rows, strict=True)] if rows else [()] * 4
    ids, texts, doc_ids, positives = columns
    moved = {k: v for k, v in owners.items() if k != v}  # only tiles past the first
    return TrainingPairs(source, ids, texts, doc_ids, positives, pool, moved, generated)
