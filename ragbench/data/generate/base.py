"""What every generation method shares: a document's sections and sentences, stratified
sampling over documents and sections, and the generated query (a ``Draft``) before it is
written.

Sections: Markdown documents split at ATX headings (``#`` … ``######``, outside code fences),
HTML documents at ``<h1>``–``<h6>`` (read from the source file, then found in the loaded text);
any other document is one section. A document whose text opens with its title
(``metadata["title"]``, as a BEIR document's ``title + " " + text``) has the title as its first
heading, so no sentence joins the title to the text. A section's body runs from the end of its
heading line to the next heading of any level. Sentences come from ``split_sentences``; each
is ``prose``, ``code`` (inside a fenced block or an HTML comment) or ``table`` (a Markdown table
row). Heading lines belong to no body.
"""

from __future__ import annotations

import random
import re
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from ragbench.errors import ConfigError
from ragbench.text.sentences import split_sentences
from ragbench.types import Document

__all__ = [
    "COPY_WORDS",
    "CheckedOptions",
    "Draft",
    "Generation",
    "Method",
    "Section",
    "Sentence",
    "Span",
    "check_option",
    "copies",
    "document_sections",
    "folded",
    "plain",
    "stratified",
    "unjudged",
    "word_count",
]

T = TypeVar("T")
Span = tuple[str, int, int]
"""(doc id, start, end): a character range of a document, end-exclusive."""

_ATX = re.compile(r"^[ ]{0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^[ ]{0,3}(```|~~~)")
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_WORD = re.compile(r"\w*[^\W\d_]\w*")
_LIST_MARKER = re.compile(r"^(?:>\s*)*(?:[-*+•]|\d{1,9}[.)])\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"\*\*|__|`")


@dataclass(frozen=True, slots=True)
class Sentence:
    """A sentence ``[start, end)`` of its document and what it is."""

    start: int
    end: int
    kind: Literal["prose", "code", "table"]


@dataclass(frozen=True)
class Section:
    """A heading (``title``, None before the first heading or without headings) and its body
    ``[start, end)`` with the body's sentences."""

    doc: Document
    title: str | None
    level: int
    heading: tuple[int, int] | None
    start: int
    end: int
    sentences: tuple[Sentence, ...]

    @property
    def body(self) -> tuple[int, int]:
        """The body's span without its leading and trailing whitespace."""
        text = self.doc.text[self.start : self.end]
        lead = len(text) - len(text.lstrip())
        return self.start + lead, self.start + len(text.rstrip())


def check_option(flag: str, value: float, low: float, high: float | None = None) -> None:
    """Raise ``ConfigError`` naming ``flag`` unless ``low <= value <= high`` (an integer when
    ``low`` is one)."""
    integer = isinstance(low, int)
    kind = "an integer" if integer else "a number"
    fits = (isinstance(value, int) and not isinstance(value, bool)) or (
        not integer and isinstance(value, float)
    )
    if not fits or not (low <= value and (high is None or value <= high)):
        bounds = f">= {low}" if high is None else f"from {low} to {high}"
        raise ConfigError(f"{flag}: expected {kind} {bounds}, got {value!r}")


@dataclass(frozen=True)
class CheckedOptions:
    """A method's options, checked when it is made: ``bounds`` gives an option's ``low`` and
    ``high`` (``check_option``; its flag is ``--`` and its name with dashes), and an option that
    is off by default (None) is not checked while it is off."""

    bounds: ClassVar[Mapping[str, tuple[float, float | None]]] = {}

    def __post_init__(self) -> None:
        defaults = {f.name: f.default for f in fields(self)}
        for name, (low, high) in self.bounds.items():
            value = getattr(self, name)
            if value is not None or defaults[name] is not None:
                check_option("--" + name.replace("_", "-"), value, low, high)

    def settings(self) -> dict[str, Any]:
        """The options recorded in each query's metadata: all of them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


COPY_WORDS = 5
"""A query of at least this many words must not occur verbatim in the corpus once its own text
is cut out (a repeated sentence, boilerplate shared by documents): exact match would find it.
Shorter queries (a heading's topic words) are what relevant documents are expected to say."""


def folded(text: str) -> str:
    """``text`` casefolded, each run of whitespace one space: how verbatim copies are found."""
    return " ".join(text.casefold().split())


def copies(draft: Draft, texts: Mapping[str, str]) -> set[str]:
    """What exact match would find ``draft`` by, folded: its query and the text it was cut
    from (markup the query drops may differ between the two), those of ``COPY_WORDS`` words or
    more; nothing for a draft that was cut from no document."""
    if draft.cut is None:
        return set()
    doc_id, start, end = draft.cut
    found = {folded(draft.text), folded(texts[doc_id][start:end])}
    return {text for text in found if word_count(text) >= COPY_WORDS}


def word_count(text: str) -> int:
    """Words of ``text`` that contain a letter (numbers and punctuation do not count)."""
    return len(_WORD.findall(text))


def plain(text: str) -> str:
    """``text`` as a query: one line, without list markers, link targets, bold or backticks."""
    line = " ".join(text.split())
    line = _LIST_MARKER.sub("", line)
    line = _LINK.sub(r"\1", line)
    return " ".join(_MARKUP.sub("", line).split())


def _lines(text: str) -> Iterator[tuple[int, int, str]]:
    """Each line of ``text`` as (start, end, line), without its newline."""
    start = 0
    for line in text.split("\n"):
        yield start, start + len(line), line
        start += len(line) + 1


def _markdown(text: str) -> tuple[list[tuple[int, int, int, str]], list[tuple[int, int]]]:
    """The ATX headings (start, end, level, title) and the fenced code blocks and HTML
    comments (start, end)."""
    headings: list[tuple[int, int, int, str]] = []
    fences: list[tuple[int, int]] = []
    fence: str | None = None
    opened = 0
    for start, end, line in _lines(text):
        marker = _FENCE.match(line)
        if marker:
            if fence is None:
                fence, opened = marker.group(1), start
            elif fence == marker.group(1):
                fence = None
                fences.append((opened, end))
        elif fence is None and (heading := _ATX.match(line)):
            headings.append((start, end, len(heading.group(1)), heading.group(2) or ""))
    if fence is not None:
        fences.append((opened, len(text)))
    fences += [m.span() for m in _COMMENT.finditer(text)]  # HTML comments: no prose either
    return headings, fences


class _HtmlHeadings(HTMLParser):
    """Collects the text of each ``<h1>``–``<h6>`` of a page, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[int, str]] = []
        self._level = 0
        self._parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if re.fullmatch(r"h[1-6]", tag):
            self._level, self._parts = int(tag[1]), []

    def handle_endtag(self, tag: str) -> None:
        if self._level and tag == f"h{self._level}":
            self.found.append((self._level, " ".join("".join(self._parts).split())))
            self._level = 0

    def handle_data(self, data: str) -> None:
        if self._level:
            self._parts.append(data)


def _html(doc: Document) -> list[tuple[int, int, int, str]]:
    """The headings of an HTML document, found in order in its loaded text, each on a line of
    its own (as the HTML loader writes them); none when the source cannot be read."""
    try:
        source = Path(doc.source).read_text(encoding="utf-8-sig", errors="replace")
    except OSError:
        return []
    parser = _HtmlHeadings()
    parser.feed(source)
    parser.close()
    text, position, headings = doc.text, 0, []
    for level, title in parser.found:
        at = text.find(title, position) if title else -1
        while at >= 0 and not (
            (at == 0 or text[at - 1] == "\n")
            and (at + len(title) == len(text) or text[at + len(title)] == "\n")
        ):
            at = text.find(title, at + 1)
        if at >= 0:
            headings.append((at, at + len(title), level, title))
            position = at + len(title)
    return headings


def _title(doc: Document) -> list[tuple[int, int, int, str]]:
    """The document's title as a heading (level 1) when its text opens with it, as a BEIR
    document's ``title + " " + text`` does."""
    title = doc.metadata.get("title")
    if not isinstance(title, str) or not title.strip() or not doc.text.startswith(title):
        return []
    rest = doc.text[len(title) : len(title) + 1]
    return [(0, len(title), 1, title)] if rest in ("", " ", "\n", "\t") else []


def document_sections(doc: Document) -> list[Section]:
    """The sections of ``doc`` in order (see the module docstring); blank text before the
    first heading is no section. Sentences are split within each body, so none spans a
    heading or a title."""
    fmt = doc.metadata.get("format")
    headings, fences = _markdown(doc.text) if fmt == "md" else ([], [])
    if fmt == "html":
        headings = _html(doc)
    titled = _title(doc)
    headings = [*titled, *(h for h in headings if not titled or h[0] >= titled[0][1])]
    starts = [0, *(h[1] for h in headings)]
    ends = [*(h[0] for h in headings), len(doc.text)]
    titles: list[tuple[int, int, int, str] | None] = [None, *headings]
    sections = []
    for start, end, heading in zip(starts, ends, titles, strict=True):
        if heading is None and not doc.text[start:end].strip():
            continue
        inside = tuple(
            Sentence(start + s, start + e, _kind(doc.text, start + s, start + e, fences))
            for s, e in split_sentences(doc.text[start:end])
        )
        sections.append(
            Section(
                doc,
                plain(heading[3]) if heading else None,
                heading[2] if heading else 0,
                heading[:2] if heading else None,
                start,
                end,
                inside,
            )
        )
    return sections


def _kind(
    text: str, start: int, end: int, fences: list[tuple[int, int]]
) -> Literal["prose", "code", "table"]:
    if any(a < end and start < b for a, b in fences):
        return "code"
    return "table" if text[start] == "|" else "prose"


def stratified(strata: Sequence[Sequence[Sequence[T]]], seed: int | str) -> Iterator[T]:
    """The items of ``strata[document][section]`` in a seeded, stratified order: round-robin
    over the documents (in shuffled order), each turn taking from the document's next section
    (round-robin over its sections, shuffled), each section's items shuffled."""
    rng = random.Random(seed)
    queues: list[deque[deque[T]]] = []
    for sections in strata:
        shuffled = [list(items) for items in sections if items]
        rng.shuffle(shuffled)
        for items in shuffled:
            rng.shuffle(items)
        queues.append(deque(deque(items) for items in shuffled))
    order = [q for q in queues if q]
    rng.shuffle(order)
    while order:
        for turns in order:
            section = turns.popleft()
            yield section.popleft()
            if section:
                turns.append(section)
        order = [q for q in order if q]


@dataclass(frozen=True)
class Draft:
    """A generated query: its text and type, evidence spans, the passage(s) it was made from,
    a reference answer (LLM only), method-specific details for its metadata, the text the
    query was taken from (``cut``: a sentence, a heading), which the written set cuts out of
    its document so that the query cannot find it by exact match, documents ``judged``
    relevant as a whole where no span of them is evidence (document-level labels only), and
    the evaluation ``levels`` it is judged at when not all (``LabeledSet.levels``)."""

    text: str
    type: str
    evidence: tuple[Span, ...]
    sources: tuple[Span, ...]
    answer: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    cut: Span | None = None
    judged: tuple[str, ...] = ()
    levels: tuple[str, ...] = ()

    def judged_at(self, level: str) -> bool:
        """Whether a set that holds the draft judges it at evaluation ``level``, as
        ``LabeledSet.judged_at`` and a run's evaluable queries will: at a level it names (every
        level when it names none), with span evidence at the chunk and span levels, or a
        document judged (by evidence or as a whole) at the document level."""
        if self.levels and level not in self.levels:
            return False
        return bool(self.evidence or (level == "document" and self.judged))


def unjudged(level: str) -> str:
    """The reason a draft that is not judged at evaluation ``level`` is dropped for."""
    return f"not judged at the {level} level"


@dataclass
class Generation:
    """What a method produced: the drafts, how many candidates the corpus offered, the
    candidates skipped (by reason), the sampled ones dropped (by reason), LLM requests, and
    whether every candidate was drawn (``exhausted``: asking for more gives no more)."""

    drafts: list[Draft]
    candidates: int
    skipped: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    requests: int = 0
    cached: int = 0
    exhausted: bool = False


class Method(Protocol):
    """A way to generate queries from documents."""

    @property
    def name(self) -> str:
        """The method's name (``--method``)."""
        ...

    @property
    def candidate(self) -> str:
        """What a candidate is, for the error when a corpus has none."""
        ...

    def settings(self) -> dict[str, Any]:
        """The options recorded in each generated query's metadata."""
        ...

    def run(
        self, documents: Sequence[Document], n: int, seed: int, level: str | None = None
    ) -> Generation:
        """At most ``n`` drafts from ``documents``, sampled with ``seed``, each judged at
        evaluation ``level`` when given (the others passed over, counted in ``dropped``); a
        larger ``n`` draws the candidates a smaller one draws, and more (``generate`` asks for
        more until ``n`` are kept)."""
        ...
