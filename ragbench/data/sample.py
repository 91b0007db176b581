"""Samples of a corpus that keep its mix, for sweeps that need not read every document.

A sweep ranks configurations; a sample of a large corpus ranks them about as the whole corpus
does (``benchmarks/RESULTS.md``, "Sweeps on a sample") at a fraction of the cost, while the
deployed collection indexes every document.

- ``check_size`` reads a sample's size as a config or a flag gives it: a number of documents,
  a percentage (``"25%"``) or ``all``; ``documents_for`` turns it into a number of documents of
  a corpus.
- ``choose(documents, n, seed, keep)`` draws ``n`` documents: those in ``keep`` first, then
  seeds up to ``NEIGHBOUR_SHARE`` of ``n``, then the seeds' nearest neighbours. Every draw is
  stratified by top folder, file format and size quartile, the stratum furthest below its
  share of the corpus filled first. Seeds are taken within a stratum in the order of a seeded
  hash of their ids; neighbours by their best place in a seed's list of nearest documents
  (cosine of tf-idf over the leading text, sought among a stratified pool of ``POOL`` times the
  sample, so the cost does not grow with the corpus), then by that hash. A random sample
  thins every document's neighbourhood, which makes retrieval easier than on the whole corpus
  and blurs the differences between configurations; keeping the seeds' neighbours keeps the
  documents a query on a seed must be told apart from. A sample depends on the seed and the
  documents alone, never on the order they were read in.
- ``sample_set(labeled, size, seed)`` samples a labeled set: every document a kept query is
  judged on (its qrels and its evidence) stays. When those documents would fill more than half
  the sample, queries are sampled too (seeded), so that the sample keeps documents to rank the
  judged ones against, and the returned ``Sampled`` says how many were kept.
- ``Sampled`` is what a sample is (documents kept, of how many, the seed; the folder it was
  drawn from for generated labels) as a run's manifest records it; ``recorded(labeled)`` reads
  the one a generated set was made from (its generator's ``sample``).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import PurePosixPath
from typing import Any

import numpy as np
from scipy import sparse

from ragbench.data.labeled import LabeledSet
from ragbench.errors import DataError
from ragbench.text.tokenize import WordTokenizer
from ragbench.types import Document

__all__ = [
    "JUDGED_SHARE",
    "SampleSize",
    "Sampled",
    "check_size",
    "choose",
    "documents_for",
    "ranked_text",
    "recorded",
    "sample_set",
]

SampleSize = int | str | None
"""A sample's size: a number of documents, a percentage (``"25%"``), or None for every one."""

JUDGED_SHARE = 0.5
"""The most of a labeled set's sample its judged documents may fill; past it queries are
sampled, so that the sample keeps documents the judged ones are ranked against."""

NEIGHBOUR_SHARE = 0.5
"""The share of a sample drawn at random (stratified); the rest are those documents' nearest
neighbours, so that a sampled document keeps the documents that compete with it for a query."""
NEIGHBOURS = 20  # the places of a seed's list of neighbours the rest of a sample is filled from
NEIGHBOUR_CHARS = 2_000  # the leading text two documents are compared by
POOL = 10  # neighbours are sought among a stratified draw of this many times the sample
_NEAR_BLOCK = 256  # seeds compared with the pool at a time

_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")
EXPECTED = 'expected a number of documents (1 or more), a percentage ("25%") or "all"'


def check_size(value: Any) -> SampleSize:
    """``value`` as a sample's size (``"all"`` is None, ``"2000"`` 2000, ``"25%"`` as given);
    ``ValueError`` saying what is expected otherwise."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    number = int(value.strip()) if isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(number, int) and not isinstance(number, bool) and number >= 1:
        return number
    if isinstance(value, str):
        found = _PERCENT.fullmatch(value.strip())
        if found is not None and 0 < float(found[1]) <= 100:
            return f"{found[1]}%"
    raise ValueError(f"{EXPECTED}, got {value!r}")


def documents_for(size: SampleSize, total: int) -> int:
    """How many of ``total`` documents a sample of ``size`` (any form ``check_size`` reads)
    keeps; a percentage rounds up, so no sample is empty."""
    size = check_size(size)
    if size is None:
        return total
    if isinstance(size, int):
        return min(size, total)
    return min(total, max(1, math.ceil(float(size.rstrip("%")) * total / 100 - 1e-9)))


@dataclass(frozen=True)
class Sampled:
    """A sample: ``documents`` kept of ``of``, drawn with ``seed``; ``queries`` kept of
    ``queries_of`` when queries were sampled too; for generated labels the folder or file the
    documents were read from (``source``, with the globs that selected its files), which a
    deployment indexes whole."""

    documents: int
    of: int
    seed: int
    queries: int | None = None
    queries_of: int | None = None
    source: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The sample as JSON values (a manifest's ``dataset.sample``; None values left out)."""
        found: dict[str, Any] = {"documents": self.documents, "of": self.of, "seed": self.seed}
        for key in ("queries", "queries_of", "source"):
            if getattr(self, key) is not None:
                found[key] = getattr(self, key)
        for key in ("include", "exclude"):
            if getattr(self, key):
                found[key] = list(getattr(self, key))
        return found

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], where: str = "dataset.sample") -> Sampled:
        """The sample ``as_dict`` wrote, checked: ``DataError`` naming ``where`` (the file and
        key it was read from) and the field when a value has another type or is out of range
        (more documents or queries kept than there are)."""

        def wrong(key: str, value: Any, expected: str) -> DataError:
            return DataError(f"{where}.{key}: expected {expected}, got {value!r}")

        def count(key: str, low: int) -> int | None:
            value = values.get(key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < low
            ):
                raise wrong(key, value, f"an integer >= {low}")
            return value

        def needed(key: str, low: int) -> int:
            found = count(key, low)
            if found is None:
                raise wrong(key, found, f"an integer >= {low}")
            return found

        def texts(key: str) -> tuple[str, ...]:
            value = values.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise wrong(key, value, "a list of strings")
            return tuple(value)

        if not isinstance(values, Mapping):
            raise DataError(f"{where}: expected a JSON object, got {values!r}")
        documents, of = needed("documents", 1), needed("of", 1)
        queries, queries_of = count("queries", 0), count("queries_of", 0)
        if documents > of:
            raise wrong("documents", documents, f"at most the {of} documents of 'of'")
        if (queries is None) != (queries_of is None):
            raise DataError(f"{where}: 'queries' and 'queries_of' go together; one is missing")
        if queries is not None and queries_of is not None and queries > queries_of:
            raise wrong("queries", queries, f"at most the {queries_of} of 'queries_of'")
        source = values.get("source")
        if source is not None and not isinstance(source, str):
            raise wrong("source", source, "a string")
        return cls(
            documents=documents,
            of=of,
            seed=needed("seed", 0),
            queries=queries,
            queries_of=queries_of,
            source=source,
            include=texts("include"),
            exclude=texts("exclude"),
        )

    def text(self) -> str:
        """``2,000 of 104,512 documents (seed 0)``, and the queries kept when some were left
        out."""
        line = f"{self.documents:,} of {self.of:,} documents (seed {self.seed})"
        if self.queries is not None and self.queries_of is not None:
            line += f", {self.queries:,} of {self.queries_of:,} queries"
        return line


def ranked_text(dataset: Mapping[str, Any]) -> str:
    """The documents a run ranked, from its manifest's ``dataset``: ``a sample of 10 of 58
    documents (seed 0)``, or ``all 58 documents``."""
    found = dataset.get("sample")
    if found is None:
        return f"all {dataset['documents']:,} documents"
    return f"a sample of {Sampled.from_dict(found).text()}"


def _rank(seed: int, doc_id: str) -> bytes:
    """A document's place in the seeded order (a hash of the seed and its id)."""
    return hashlib.blake2b(f"{seed}\x1f{doc_id}".encode("utf-8", "surrogatepass")).digest()


def _strata(documents: Sequence[Document]) -> list[tuple[str, str, int]]:
    """Each document's stratum: its top folder (the first part of a path id, or ""), its
    format (the loader's, else its id's extension) and its size quartile in the corpus."""
    sizes = sorted(len(d.text) for d in documents)
    bounds = [sizes[len(sizes) * q // 4] for q in (1, 2, 3)]
    found = []
    for doc in documents:
        parts = doc.id.split("/")
        folder = parts[0] if len(parts) > 1 else ""
        fmt = str(doc.metadata.get("format") or PurePosixPath(parts[-1]).suffix.lower())
        found.append((folder, fmt, bisect.bisect_right(bounds, len(doc.text))))
    return found


def _fill(
    documents: Sequence[Document],
    strata: Sequence[tuple[str, str, int]],
    n: int,
    chosen: set[str],
    order: Callable[[Document], Any],
    seed: int,
) -> set[str]:
    """``chosen`` and more of ``documents`` up to ``n`` (see ``choose``): the stratum furthest
    below its share of the corpus filled first, each stratum's documents in ``order``."""
    groups: dict[tuple[str, str, int], list[Document]] = {}
    for doc, stratum in zip(documents, strata, strict=True):
        groups.setdefault(stratum, []).append(doc)
    chosen = set(chosen)
    share = n / len(documents)
    # (taken − its share of n, seeded tie-break, the stratum's documents left, last first)
    heap: list[tuple[float, bytes, list[Document]]] = []
    for stratum, members in groups.items():
        rest = sorted((d for d in members if d.id not in chosen), key=order, reverse=True)
        if rest:
            below = len(members) - len(rest) - share * len(members)
            heap.append((below, _rank(seed, repr(stratum)), rest))
    heapq.heapify(heap)
    for _ in range(max(0, n - len(chosen))):
        if not heap:
            break
        below, tie, rest = heapq.heappop(heap)
        chosen.add(rest.pop().id)
        if rest:
            heapq.heappush(heap, (below + 1, tie, rest))
    return chosen


def _vectors(texts: Sequence[str]) -> sparse.csr_matrix:
    """Unit-length tf-idf rows (log-scaled term frequencies, idf over ``texts``) of each text's
    first ``NEIGHBOUR_CHARS`` characters, in ragbench's default terms."""
    terms = WordTokenizer().tokenize_many(text[:NEIGHBOUR_CHARS] for text in texts)
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in found] for found in terms]
    rows = np.repeat(np.arange(len(ids)), [len(i) for i in ids])
    cols = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=len(rows))
    counts = sparse.csr_matrix(
        (np.ones(len(rows)), (rows, cols)), shape=(len(ids), max(len(vocab), 1))
    )
    counts.sum_duplicates()
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    counts.data = (1 + np.log(counts.data)) * np.log((1 + len(ids)) / (1 + df))[counts.indices]
    norms = np.sqrt(counts.multiply(counts).sum(axis=1)).A1
    return sparse.diags(1 / np.maximum(norms, 1e-12)) @ counts


def _nearness(seeds: Sequence[Document], pool: Sequence[Document]) -> dict[str, int]:
    """Per document of ``pool`` sharing a term with a seed, its best place in a seed's list of
    neighbours (1: some seed's nearest), by the cosine of their tf-idf vectors."""
    vectors = _vectors([d.text for d in pool])
    row = {d.id: i for i, d in enumerate(pool)}
    rows = np.array([row[d.id] for d in seeds])
    best = np.full(len(pool), np.iinfo(np.int64).max)
    for start in range(0, len(rows), _NEAR_BLOCK):
        part = rows[start : start + _NEAR_BLOCK]
        sims = (vectors[part] @ vectors.T).toarray()
        sims[np.arange(len(part)), part] = 0  # a seed is not its own neighbour
        depth = min(NEIGHBOURS, sims.shape[1])
        top = np.argpartition(-sims, depth - 1, axis=1)[:, :depth]
        order = np.argsort(-np.take_along_axis(sims, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        near = np.take_along_axis(sims, top, axis=1) > 0
        places = np.broadcast_to(np.arange(1, depth + 1), top.shape)
        np.minimum.at(best, top[near], places[near])
    return {d.id: int(b) for d, b in zip(pool, best, strict=True) if b < np.iinfo(np.int64).max}


def choose(
    documents: Sequence[Document], n: int, seed: int, keep: Collection[str] = ()
) -> list[Document]:
    """``n`` of ``documents`` (all when there are no more), in their order: every one whose id
    is in ``keep``, seeds drawn stratified up to ``NEIGHBOUR_SHARE`` of ``n``, then the seeds'
    nearest neighbours, still stratified (see the module docstring)."""
    if n >= len(documents):
        return list(documents)
    strata = _strata(documents)

    def hashed(doc: Document) -> bytes:
        return _rank(seed, doc.id)

    kept = {d.id for d in documents if d.id in set(keep)}
    seeds = _fill(
        documents, strata, max(len(kept), math.ceil(n * NEIGHBOUR_SHARE)), kept, hashed, seed
    )
    pool_ids = _fill(documents, strata, min(len(documents), POOL * n), seeds, hashed, seed)
    pool = [d for d in documents if d.id in pool_ids]
    near = _nearness([d for d in pool if d.id in seeds], pool)
    unplaced = NEIGHBOURS + 1

    def nearest(doc: Document) -> tuple[int, bytes]:
        return near.get(doc.id, unplaced), hashed(doc)

    chosen = _fill(documents, strata, n, seeds, nearest, seed)
    return [d for d in documents if d.id in chosen]


def _judged(labeled: LabeledSet, query_id: str) -> set[str]:
    """The documents query ``query_id`` is judged on: its qrels and its evidence."""
    found = set(labeled.qrels.get(query_id, {}))
    found.update(e.doc_id for e in labeled.evidence.get(query_id, []))
    return found


def sample_set(
    labeled: LabeledSet, size: SampleSize, seed: int
) -> tuple[LabeledSet, Sampled | None]:
    """``labeled`` on a sample of its documents of ``size`` (see the module docstring) and
    what was kept; the set itself and None when the sample would hold every document."""
    total = len(labeled.documents)
    n = documents_for(size, total)
    if n >= total:
        return labeled, None
    judged = {q.id: _judged(labeled, q.id) for q in labeled.queries}
    everything = set().union(*judged.values()) if judged else set()
    room = int(n * JUDGED_SHARE)
    kept = [q.id for q in labeled.queries]
    if len(everything) > room:
        everything, picked = set(), set()
        for qid in sorted(judged, key=lambda q: _rank(seed, q)):
            new = judged[qid] - everything
            if len(everything) + len(new) <= room:
                everything |= new
                picked.add(qid)
        kept = [qid for qid in kept if qid in picked]
    documents = choose(labeled.documents, n, seed, everything)
    sampled = Sampled(len(documents), total, seed)
    if len(kept) < len(labeled.queries):
        sampled = replace(sampled, queries=len(kept), queries_of=len(labeled.queries))
    return replace(labeled.subset(kept), documents=documents), sampled


def recorded(labeled: LabeledSet) -> Sampled | None:
    """The sample a generated set's documents are (its generator's ``sample``), or None."""
    for query in labeled.queries:
        generator = query.metadata.get("generator")
        if isinstance(generator, Mapping) and isinstance(generator.get("sample"), Mapping):
            where = f"{labeled.name}: query {query.id!r}: generator.sample"
            return Sampled.from_dict(generator["sample"], where)
    return None
