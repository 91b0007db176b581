"""bm25s alone: the row ragbench's BM25 is measured against in the scale benchmark, and the
RESULTS.md part comparing the two.

``Bm25sAlone`` is what a user of bm25s writes without ragbench, on the same terms: bm25s' own
``Tokenizer`` set up as ragbench's default tokenizer (lowercase, ``\\w+``, Lucene's English stop
set, Snowball english stemming), texts tokenized batch by batch into its growing vocabulary, one
``BM25.index`` of the token ids with ragbench's default parameters (lucene, k1 1.2, b 0.75),
queries tokenized without growing the vocabulary and answered by ``BM25.retrieve``, and a list
of the texts' ids to name the documents found. Its scores lack the (k1 + 1) factor ragbench
applies (the order is the same), and it returns ties at the k-th score in any order (ragbench:
in indexing order), so the top-10 agreement is counted both plainly and ties aside.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from benchmarks.render import Figures, Lines, Part, met, num, ratio, status, table
from ragbench.types import Ranking

# ragbench's BM25 over bm25s alone: the most each ratio may be (issue 27).
TARGETS = {"build_s": 1.5, "peak_mb": 1.5, "p50_ms": 1.2}
_TIE = 1e-6  # relative margin under which two scores are a tie


def libraries() -> list[ModuleType]:
    """Import what ragbench's BM25 and bm25s alone both use (loaded before measuring either)."""
    return [importlib.import_module(m) for m in ("bm25s", "Stemmer", "ragbench.index.sparse")]


class Bm25sAlone:
    """bm25s used directly (see the module docstring); builds on the first search."""

    def __init__(self) -> None:
        import bm25s
        import Stemmer

        from ragbench.index.sparse import BM25Config
        from ragbench.text.tokenize import ENGLISH_STOPWORDS

        config = BM25Config()
        words = config.tokenizer
        assert words.stopwords == "english" and words.stemmer and words.min_length == 1
        self.tokenizer = bm25s.tokenization.Tokenizer(
            lower=words.lowercase,
            splitter=words.pattern,
            stopwords=sorted(ENGLISH_STOPWORDS),
            stemmer=Stemmer.Stemmer(words.stemmer),
        )
        self.model = bm25s.BM25(k1=config.k1, b=config.b, method=config.variant)
        self.ids: list[str] = []
        self.tokens: list[list[int]] = []
        self.names: np.ndarray | None = None  # the ids, once indexed

    def add(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Tokenize ``texts`` (named ``ids``) into the growing vocabulary."""
        self.ids += ids
        self.tokens += self.tokenizer.tokenize(
            list(texts), update_vocab=True, return_as="ids", show_progress=False
        )

    def search(self, texts: Sequence[str], k: int) -> Ranking:
        """Top-``k`` ids and scores of each query; documents scoring 0 (no query term) are
        left out, as ragbench leaves them out."""
        if self.names is None:
            self.model.index(self.tokenizer.to_tokenized_tuple(self.tokens), show_progress=False)
            self.tokens = []  # indexed: no longer needed
            self.names = np.array(self.ids, dtype=object)
        queries = self.tokenizer.tokenize(
            list(texts), update_vocab=False, return_as="ids", show_progress=False
        )
        docs, scores = self.model.retrieve(queries, k=k, show_progress=False)
        hits = scores > 0
        return Ranking(np.where(hits, self.names[docs], ""), np.where(hits, scores, -np.inf))

    def save(self, folder: Path) -> None:
        """bm25s' index and its tokenizer's vocabulary (queries need both)."""
        self.model.save(folder, show_progress=False)
        self.tokenizer.save_vocab(folder)


def agreement(found: list[list[str]], ids: list[list[str]], scores: list[list[float]]) -> Figures:
    """How bm25s alone's top-k (``found``) agrees with ragbench's (``ids``, ``scores``): the
    mean share of ragbench's hits it found too (``top``), and the share of queries where it
    found as many hits, among them all of ragbench's that score above the k-th (``ties_aside``:
    documents tied at the cut-off may differ)."""
    shares, same = [], []
    for got, want, score in zip(found, ids, scores, strict=True):
        mine = {i for i in got if i}
        hits = {i: s for i, s in zip(want, score, strict=True) if i}
        shares.append(len(mine & hits.keys()) / len(hits) if hits else float(not mine))
        cut = min(hits.values()) if len(hits) == len(want) else -np.inf
        above = {i for i, s in hits.items() if s > cut + _TIE * abs(cut)}
        same.append(len(mine) == len(hits) and above <= mine)
    return {"top": float(np.mean(shares)), "ties_aside": float(np.mean(same))}


def compare(rows: list[Figures]) -> list[Figures]:
    """At each size where both ran: ragbench's BM25 row and bm25s alone's, ragbench's over
    bm25s' for each column of ``TARGETS``, and their agreement."""
    by = {(r["store"], r["chunks"]): r for r in rows}
    out = []
    for n in sorted({r["chunks"] for r in rows}):
        ours, alone = by.get(("bm25", n)), by.get(("bm25s", n))
        if ours is None or alone is None:
            continue
        ratios = {c: ours[c] / alone[c] if alone[c] > 0 else None for c in TARGETS}
        out.append({"chunks": n, "bm25": ours, "bm25s": alone, "ratios": ratios})
    return out


def both(sections: Mapping[str, Figures]) -> bool:
    """Whether the scale section measured both ragbench's BM25 and bm25s alone (a failed or
    skipped one counts as measured: its block says so)."""
    section = sections.get("scale")
    if status(section) is not None:
        return True
    assert section is not None
    return {"bm25", "bm25s"} <= set(section["stores"])


def _row(pair: Figures) -> tuple[str, ...]:
    ours, alone, ratios = pair["bm25"], pair["bm25s"], pair["ratios"]
    cells = [num(pair["chunks"])]
    for column, digits in (("build_s", 1), ("peak_mb", 0), ("p50_ms", 3)):
        cells += [f"{num(ours[column], digits)} / {num(alone[column], digits)}"]
        cells += [f"{ratio(ratios[column])} ({met(ratios[column], TARGETS[column], True)})"]
    agree = alone.get("agreement") or {}
    return (*cells, f"{100 * agree['top']:.1f}%", f"{100 * agree['ties_aside']:.1f}%")


def draw(sections: Mapping[str, Figures]) -> Lines:
    """The ratio table, what bm25s alone is, and the targets."""
    from ragbench.index import sparse

    section = sections.get("scale")
    why = status(section)
    if why is not None:
        return [why]
    assert section is not None
    pairs = section.get("bm25s") or []
    if not pairs:
        return ["_Not measured: this run did not measure both `bm25` and `bm25s`._"]
    headers = (
        "chunks",
        "build (s): ragbench / bm25s",
        "ratio (≤ 1.5x)",
        "peak memory (MB)",
        "ratio (≤ 1.5x)",
        f"p50 query (ms, k={section['k']})",
        "ratio (≤ 1.2x)",
        "top-10 agreement",
        "same top-10, ties aside",
    )
    lines = [
        "ragbench's BM25 (`BM25Index`, defaults) against bm25s used alone on the same corpus, "
        "in the same fresh-process measurement as the scale curve: "
        + _ALONE.format(in_memory=num(sparse._IN_MEMORY), partition=num(sparse._PARTITION)),
        "",
        table(headers, [_row(p) for p in pairs]),
        "",
        "Ratios are ragbench's figure over bm25s alone's (targets in the headers, met or not "
        "in brackets). " + _AGREEMENT.format(queries=section["queries"]),
        "",
        "Peak memory of the build alone (before queries and `save`), ragbench / bm25s: "
        + ", ".join(
            f"{num(p['bm25']['build_peak_mb'], 0)} / {num(p['bm25s']['build_peak_mb'], 0)} MB "
            f"at {num(p['chunks'])}"
            for p in pairs
        )
        + ".",
    ]
    if section["restricted"]:
        lines += [
            "",
            f"Measured with `--stores {' '.join(section['stores'])}`: the scale curve above "
            "keeps the figures of the run that last measured every index.",
        ]
    return lines


_ALONE = (
    "bm25s' own `Tokenizer` set up to give ragbench's default terms (lowercase, `\\w+`, "
    "Lucene's English stop set, Snowball english stemming), the passages tokenized batch by "
    "batch into its growing vocabulary, one `BM25.index` of the token ids (lucene, k1 1.2, "
    "b 0.75), queries tokenized without growing the vocabulary and answered by "
    "`BM25.retrieve`, a list of the passages' ids naming what it finds. Build time counts "
    "tokenizing and indexing for both. ragbench keeps the passages' term ids as int32 arrays "
    "and builds bm25s' score matrix itself, a block of passages at a time (`_Matrix` in "
    "`ragbench/index/sparse.py`); past {in_memory} term ids, or matrix entries, it keeps "
    "them in temporary files, builds the matrix {partition} entries at a time and reads a "
    "query term's column from the file. Both score a query with bm25s' `get_scores`; to pick "
    "the top 10, bm25s runs numpy's `argpartition` over every document's score, ragbench "
    "sorts only the documents that match (`_top_hits`)."
)
_AGREEMENT = (
    "Top-10 agreement: the mean share, over the {queries} timed queries, of ragbench's top-10 "
    "hits that bm25s alone returns too; ties aside: the share of queries where bm25s returns "
    "as many hits, among them every one of ragbench's scoring above its 10th score (of "
    "documents tied at the 10th score, ragbench keeps the first indexed, bm25s any)."
)

BM25S = Part("### BM25 at scale against bm25s alone", ("scale",), draw, both)
