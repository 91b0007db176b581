"""The offline generation methods, no model needed: ``ict`` (inverse cloze task) and
``headings``. Both make queries out of the documents' own words; the written set cuts those
words out of the corpus it is evaluated on (``ragbench.data.cuts``), so a query finds its
document by its context rather than by exact match."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from ragbench.data.generate.base import (
    CheckedOptions,
    Draft,
    Generation,
    Section,
    Sentence,
    Span,
    copies,
    document_sections,
    folded,
    plain,
    stratified,
    unjudged,
    word_count,
)
from ragbench.text.tokenize import WordTokenizer
from ragbench.types import Document

__all__ = [
    "GENERIC_HEADINGS",
    "HeadingsMethod",
    "IctMethod",
    "code_like",
    "code_line",
    "refers_back",
]

GENERIC_HEADINGS = frozenset(
    """overview introduction intro summary examples example usage notes note background
    conclusion faq contents appendix details description references related""".split()
) | {"see also", "next steps", "table of contents", "getting started", "further reading"}
"""Headings too generic to be a query (compared lowercased, without numbering and punctuation)."""


def _overlaps(span: Span, spans: Sequence[Span]) -> bool:
    return any(span[0] == o[0] and span[1] < o[2] and o[1] < span[2] for o in spans)


def _select(
    stream: Iterator[Any],
    n: int,
    make: Callable[[Any], Draft],
    documents: Sequence[Document],
    dropped: Counter[str],
    level: str | None,
) -> list[Draft]:
    """The first ``n`` drafts of ``stream`` that can be held out of the corpus together (fewer when
    the stream runs out). A draft is dropped (and counted by reason) when it is not judged at
    evaluation ``level`` (when given: ``not judged at the <level> level``; so it constrains no
    other), when its text was taken already (case and spacing ignored: ``duplicate``), when it (or
    the text it was cut from) occurs more than once in the corpus, so that cutting it out would
    leave a copy (``repeated in the corpus``), or when its cut would take text out of an accepted
    draft's evidence, or an accepted draft's cut out of its own (``overlaps another query``)."""
    texts = {doc.id: doc.text for doc in documents}
    corpus = "\0".join(folded(text) for text in texts.values())
    drafts: list[Draft] = []
    seen: set[str] = set()
    for item in stream:
        if len(drafts) == n:
            break
        draft = make(item)
        if level is not None and not draft.judged_at(level):
            dropped[unjudged(level)] += 1
            continue
        key = folded(draft.text)
        if key in seen:
            dropped["duplicate"] += 1
            continue
        if any(corpus.count(copy) > 1 for copy in copies(draft, texts)):
            dropped["repeated in the corpus"] += 1
            continue
        if draft.cut is not None and any(
            _overlaps(draft.cut, other.evidence)
            or (other.cut is not None and _overlaps(other.cut, draft.evidence))
            for other in drafts
        ):
            dropped["overlaps another query"] += 1
            continue
        seen.add(key)
        drafts.append(draft)
    return drafts


_REFERS_BACK = re.compile(
    r"(?:this|these|those|it|its|they|their|them|he|she|his|her|such|here|however|thus|"
    r"therefore|hence|moreover|furthermore|additionally|also|finally|then|similarly|likewise|"
    r"consequently|nevertheless|nonetheless|instead|otherwise|meanwhile|accordingly|conversely|"
    r"in addition|in contrast|in turn|on the other hand|as a result|for example|for instance|"
    r"the latter|the former|both|we|our)\b",
    re.IGNORECASE,
)
_CODE_TOKEN = re.compile(r"[{}\[\]<>=;$|\\`]|\w\(|\w_\w|::|->")
_CODE_LINE = re.compile(
    r"""[^\S\n]*(?:
        (?:\$|>>>|In\ \[\d*\]:)(?:\s|$)                             # a prompt: shell, Python
      | import\ [\w.]+(?:\ as\ \w+)?(?:,\ ?[\w.]+(?:\ as\ \w+)?)*\s*$  # import os, sys
      | from\ [\w.]+\ import\ \w                                    # from pathlib import Path
      | (?:async\ )?def\ \w+\( | class\ \w+\s*[(:]                  # a definition
      | [A-Za-z_][\w.]*\s*=\s*\S                                    # an assignment
      | export\ [A-Za-z_]\w*=                                       # a shell variable
      | (?:sudo|pip3?\ install|python3?\ -m|python3?\ [\w/.-]+\.py  # a shell command
        |git\ (?:clone|checkout|pull|push|commit|add)|(?:npm|yarn|pnpm)\ (?:install|add|run)
        |(?:apt|apt-get|brew|conda|dnf|yum)\ install|docker\ (?:run|build|pull))\b
      | (?:curl|wget)\ (?:-|https?://)
    )""",
    re.VERBOSE,
)


def refers_back(sentence: str) -> bool:
    """Whether an English sentence opens with a word that points at what came before it (a
    pronoun, a demonstrative, a connective such as "However"), so it cannot stand alone as a
    query."""
    return _REFERS_BACK.match(sentence) is not None


def code_line(line: str) -> bool:
    """Whether a line of plain text is code rather than prose: a prompt (``$ ``, ``>>> ``,
    ``In [1]:``), a Python import, ``def`` or ``class`` line, an assignment or a common shell
    command (``pip install``, ``python -m``, ``git clone``, ...). Unfenced code in ``.txt`` and
    reStructuredText files reads as prose to the sentence splitter; this catches it."""
    return _CODE_LINE.match(line) is not None


def code_like(sentence: str) -> bool:
    """Whether a fifth or more of a sentence's words look like code or a shell transcript
    (brackets, operators, ``snake_case``, ``call(``, ``$``, ``>>>``)."""
    words = sentence.split()
    return bool(words) and sum(bool(_CODE_TOKEN.search(w)) for w in words) * 5 >= len(words)


@dataclass(frozen=True)
class IctMethod(CheckedOptions):
    """Inverse cloze task: a prose sentence of at least ``min_words`` words is the query, cut
    out of the corpus the set is evaluated on; its document is relevant. Its span evidence is
    the ``window`` prose sentences before and after it (same section) that share at least
    ``evidence_terms`` terms with it (BM25's terms: stemmed, stopwords left out): the context
    that speaks of what the sentence says. A sentence no neighbour shares that much with is
    judged at the document level only (span-level runs leave it out). A sentence with evidence
    whose neighbours (the window) repeat more than ``repeated_share`` of its terms is judged at
    the chunk and span levels only: there, finding the passage that repeats its words is the
    task; at the document level those words give its document away by exact match, much as the
    sentence left in would: judged there, such sentences ranked trials unlike real SciFact
    claims (README, "No labels at all: generate them"). Each query records the share its
    neighbours repeat (``repeated``).

    Skipped as queries: code-like sentences and those with a line of code (``code_line``:
    unfenced code in plain text reads as prose to the sentence splitter); sentences that open
    by referring back (``This``, ``However``, ``We``..., unless ``keep_references``) or end by
    pointing ahead (a colon before a list or code), which cannot stand alone; and
    sentences with digits (results, measurements, table text; unless ``keep_numbers``), which
    favour exact matching. Both filters raised agreement with real labels on SciFact and on the
    chunking evaluation (benchmarks/RESULTS.md)."""

    window: int = 2
    min_words: int = 8
    evidence_terms: int = 3
    repeated_share: float = 0.45
    keep_numbers: bool = False
    keep_references: bool = False
    name: ClassVar[str] = "ict"
    bounds: ClassVar = {
        "window": (1, None),
        "min_words": (1, None),
        "evidence_terms": (1, None),
        "repeated_share": (0.0, 1.0),
    }

    @property
    def candidate(self) -> str:
        """What a candidate is."""
        return f"prose sentences of at least {self.min_words} words next to another sentence"

    def _unusable(self, source: str) -> str | None:
        """Why the sentence ``source`` (as written in its document) is no candidate as a
        query, if it is not."""
        text = plain(source)
        if word_count(text) < self.min_words:
            return "short sentence"
        if code_like(text) or any(code_line(line) for line in source.split("\n")):
            return "code-like"
        if not self.keep_references and refers_back(text):
            return "refers back"
        if text.rstrip().endswith(":"):
            return "points ahead"  # it introduces a list or code that it is no query without
        if not self.keep_numbers and any(c.isdigit() for c in text):
            return "numbers"
        return None

    def run(
        self, documents: Sequence[Document], n: int, seed: int, level: str | None = None
    ) -> Generation:
        """Up to ``n`` queries judged at ``level`` (when given), one per sampled sentence (see
        the class docstring)."""
        skipped: Counter[str] = Counter()
        strata: list[list[list[tuple[Section, list[Sentence], int]]]] = []
        for doc in documents:
            sections: list[list[tuple[Section, list[Sentence], int]]] = []
            for section in document_sections(doc):
                prose = [s for s in section.sentences if s.kind == "prose"]
                skipped["code or table"] += len(section.sentences) - len(prose)
                items = []
                for i, sentence in enumerate(prose):
                    reason = self._unusable(doc.text[sentence.start : sentence.end])
                    if reason is None and len(prose) == 1:
                        reason = "no neighbouring sentence"
                    if reason is None:
                        items.append((section, prose, i))
                    else:
                        skipped[reason] += 1
                sections.append(items)
            strata.append(sections)
        dropped: Counter[str] = Counter()
        terms = WordTokenizer().tokenize
        make = partial(self._draft, terms)
        drafts = _select(stratified(strata, seed), n, make, documents, dropped, level)
        candidates = sum(len(items) for sections in strata for items in sections)
        # + drops zero counts; fewer drafts than n: the stream ran out
        return Generation(drafts, candidates, +skipped, dropped, exhausted=len(drafts) < n)

    def _draft(
        self, terms: Callable[[str], list[str]], item: tuple[Section, list[Sentence], int]
    ) -> Draft:
        section, prose, i = item
        doc, sentence = section.doc, prose[i]
        text = plain(doc.text[sentence.start : sentence.end])
        before, after = prose[max(0, i - self.window) : i], prose[i + 1 : i + 1 + self.window]
        own = set(terms(text))
        shared = [own.intersection(terms(doc.text[s.start : s.end])) for s in (*before, *after)]
        evidence = tuple(
            (doc.id, s.start, s.end)
            for s, common in zip((*before, *after), shared, strict=True)
            if len(common) >= self.evidence_terms
        )
        repeated = len(set[str]().union(*shared)) / len(own) if own else 0.0
        first, last = (before or [sentence])[0], (after or [sentence])[-1]
        return Draft(
            text=text,
            type=self.name,
            evidence=evidence,
            sources=((doc.id, first.start, last.end),),
            details={"repeated": round(repeated, 3)},
            cut=(doc.id, sentence.start, sentence.end),
            judged=() if evidence else (doc.id,),
            levels=("chunk", "span") if evidence and repeated > self.repeated_share else (),
        )


@dataclass(frozen=True)
class HeadingsMethod(CheckedOptions):
    """A heading's text is the query, its section's body (up to the next heading) the
    evidence; empty and generic headings (``GENERIC_HEADINGS``) and bodies of fewer than
    ``min_words`` words are skipped. Needs Markdown or HTML documents."""

    min_words: int = 20
    name: ClassVar[str] = "headings"
    bounds: ClassVar = {"min_words": (1, None)}

    @property
    def candidate(self) -> str:
        """What a candidate is."""
        return (
            "headings (Markdown # or HTML <h1>-<h6>) over a section of at least "
            f"{self.min_words} words"
        )

    def run(
        self, documents: Sequence[Document], n: int, seed: int, level: str | None = None
    ) -> Generation:
        """Up to ``n`` queries judged at ``level`` (when given), one per sampled heading (see
        the class docstring)."""
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
        drafts = _select(stratified(strata, seed), n, self._draft, documents, dropped, level)
        candidates = sum(len(sections) for sections in strata)
        return Generation(drafts, candidates, skipped, dropped, exhausted=len(drafts) < n)

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
            cut=(section.doc.id, *heading),
        )
