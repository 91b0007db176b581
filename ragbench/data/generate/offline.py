"""The offline generation methods, no model needed: ``ict`` (inverse cloze task) and
``headings``. Both make queries out of the documents' own words, so they favour lexical
retrievers (BM25) over dense ones: use them for a first, cheap set, not to compare the two."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ragbench.data.generate.base import (
    Draft,
    Generation,
    Section,
    Sentence,
    check_option,
    document_sections,
    plain,
    stratified,
    word_count,
)
from ragbench.types import Document

__all__ = ["GENERIC_HEADINGS", "HeadingsMethod", "IctMethod"]

GENERIC_HEADINGS = frozenset(
    """overview introduction intro summary examples example usage notes note background
    conclusion faq contents appendix details description references related""".split()
) | {"see also", "next steps", "table of contents", "getting started", "further reading"}
"""Headings too generic to be a query (compared lowercased, without numbering and punctuation)."""


def _distinct(
    stream: Iterator[Any], n: int, make: Callable[[Any], Draft], dropped: Counter[str]
) -> list[Draft]:
    """The first ``n`` drafts of ``stream`` whose text was not taken already (case and
    spacing ignored); repeats are counted as dropped duplicates."""
    drafts: list[Draft] = []
    seen: set[str] = set()
    for item in stream:
        if len(drafts) == n:
            break
        draft = make(item)
        key = " ".join(draft.text.casefold().split())
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        drafts.append(draft)
    return drafts


@dataclass(frozen=True)
class IctMethod:
    """Inverse cloze task: a prose sentence of at least ``min_words`` words is the query; the
    ``window`` prose sentences before it and after it (same section) are its evidence, as two
    spans that leave the sentence itself out."""

    window: int = 2
    min_words: int = 8
    name: ClassVar[str] = "ict"

    def __post_init__(self) -> None:
        check_option("--window", self.window, 1)
        check_option("--min-words", self.min_words, 1)

    @property
    def candidate(self) -> str:
        """What a candidate is."""
        return f"prose sentences of at least {self.min_words} words next to another sentence"

    def settings(self) -> dict[str, Any]:
        """The options recorded in each query's metadata."""
        return {"window": self.window, "min_words": self.min_words}

    def run(self, documents: Sequence[Document], n: int, seed: int) -> Generation:
        """Up to ``n`` queries, one per sampled sentence (see the class docstring)."""
        skipped: Counter[str] = Counter()
        strata: list[list[list[tuple[Section, list[Sentence], int]]]] = []
        for doc in documents:
            sections: list[list[tuple[Section, list[Sentence], int]]] = []
            for section in document_sections(doc):
                prose = [s for s in section.sentences if s.kind == "prose"]
                skipped["code or table"] += len(section.sentences) - len(prose)
                items = []
                for i, sentence in enumerate(prose):
                    if word_count(plain(doc.text[sentence.start : sentence.end])) < self.min_words:
                        skipped["short sentence"] += 1
                    elif len(prose) == 1:
                        skipped["no neighbouring sentence"] += 1
                    else:
                        items.append((section, prose, i))
                sections.append(items)
            strata.append(sections)
        dropped: Counter[str] = Counter()
        drafts = _distinct(stratified(strata, seed), n, self._draft, dropped)
        candidates = sum(len(items) for sections in strata for items in sections)
        return Generation(drafts, candidates, +skipped, dropped)  # + drops zero counts

    def _draft(self, item: tuple[Section, list[Sentence], int]) -> Draft:
        section, prose, i = item
        doc, sentence = section.doc, prose[i]
        before, after = prose[max(0, i - self.window) : i], prose[i + 1 : i + 1 + self.window]
        evidence = tuple((doc.id, side[0].start, side[-1].end) for side in (before, after) if side)
        first, last = (before or [sentence])[0], (after or [sentence])[-1]
        return Draft(
            text=plain(doc.text[sentence.start : sentence.end]),
            type=self.name,
            evidence=evidence,
            sources=((doc.id, first.start, last.end),),
            details={"sentence": [sentence.start, sentence.end]},
        )


@dataclass(frozen=True)
class HeadingsMethod:
    """A heading's text is the query, its section's body (up to the next heading) the
    evidence; empty and generic headings (``GENERIC_HEADINGS``) and bodies of fewer than
    ``min_words`` words are skipped. Needs Markdown or HTML documents."""

    min_words: int = 20
    name: ClassVar[str] = "headings"

    def __post_init__(self) -> None:
        check_option("--min-words", self.min_words, 1)

    @property
    def candidate(self) -> str:
        """What a candidate is."""
        return (
            "headings (Markdown # or HTML <h1>-<h6>) over a section of at least "
            f"{self.min_words} words"
        )

    def settings(self) -> dict[str, Any]:
        """The options recorded in each query's metadata."""
        return {"min_words": self.min_words}

    def run(self, documents: Sequence[Document], n: int, seed: int) -> Generation:
        """Up to ``n`` queries, one per sampled heading (see the class docstring)."""
        skipped: Counter[str] = Counter()
        strata: list[list[list[tuple[Section, tuple[int, int], str]]]] = []
        for doc in documents:
            sections: list[list[tuple[Section, tuple[int, int], str]]] = []
            for section in document_sections(doc):
                if section.heading is None:
                    continue
                reason = self._unusable(section)
                if reason:
                    skipped[reason] += 1
                else:
                    sections.append([(section, section.heading, section.title or "")])
            strata.append(sections)
        dropped: Counter[str] = Counter()
        drafts = _distinct(stratified(strata, seed), n, self._draft, dropped)
        candidates = sum(len(sections) for sections in strata)
        return Generation(drafts, candidates, skipped, dropped)

    def _unusable(self, section: Section) -> str | None:
        """Why ``section``'s heading cannot be a query, if it cannot."""
        title = section.title or ""
        if not word_count(title):
            return "empty heading"
        bare = " ".join(title.lower().lstrip("0123456789. ").strip(" .:!?").split())
        if bare in GENERIC_HEADINGS:
            return "generic heading"
        start, end = section.body
        if word_count(section.doc.text[start:end]) < self.min_words:
            return "short section"
        return None

    def _draft(self, item: tuple[Section, tuple[int, int], str]) -> Draft:
        section, heading, title = item
        start, end = section.body
        return Draft(
            text=title,
            type=self.name,
            evidence=((section.doc.id, start, end),),
            sources=((section.doc.id, heading[0], end),),
            details={"level": section.level},
        )
