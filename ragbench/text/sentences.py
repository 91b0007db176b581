"""Rule-based sentence splitting with exact character offsets (no models, no downloads).

A sentence ends after ``.``, ``!``, ``?`` or ``…`` (or a run such as ``?!`` or ``...``) and any
closing quotes or brackets, when whitespace follows and the next text starts like a sentence:
an uppercase or uncased letter, a digit, or an opening quote or bracket. Abbreviations (``Dr.``,
``e.g.``, ``U.S.``), initials (``J. Smith``) and numbered-list markers do not end sentences;
decimals, versions and URLs never do, since no whitespace follows their dots. CJK full stops end
a sentence without whitespace. Blank lines always break, and so do Markdown block starts: a line
beginning a heading, list item or table row (headings and table rows are whole sentences).
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import cast

__all__ = ["split_sentences"]

_PARAGRAPH = re.compile(r"\n[^\S\n]*\n|\u2029")
_BLOCK_START = re.compile(r"^[^\S\n]*(?:#{1,6}(?=\s|$)|[-*+•](?=\s)|\d{1,9}[.)](?=\s)|\|)", re.M)
_WHOLE_LINE = re.compile(r"^[^\S\n]*(?:#{1,6}(?:[^\S\n][^\n]*)?|\|[^\n]*)$", re.M)
_CLOSERS = "\"'”’»)]"
_OPENERS = "\"'“‘«([{¿¡"
_TERMINAL = re.compile(rf"[.!?…]+[{re.escape(_CLOSERS)}]*(?=\s)|[。！？]+[」』”’）]*")
_SPACE = re.compile(r"\s*")
_LAST_WORD = re.compile(r"\S+$")
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")  # e.g, i.e, U.S, U.S.A (final dot excluded)
_ABBREVIATIONS = frozenset(
    """mr mrs ms dr prof st vs etc inc ltd co corp jr sr fig figs eq eqs no nos vol pp approx
    dept est gen col lt sgt capt rev hon mt al cf viz ph.d jan feb mar apr jun jul aug sep sept
    oct nov dec""".split()
)


def _opens_sentence(c: str) -> bool:
    """Whether a sentence may start with character ``c``."""
    return c.isdigit() or c in _OPENERS or (c.isalpha() and not c.islower())


def _dot_is_not_a_stop(text: str, dot: int, following: str) -> bool:
    """Whether the period at ``dot`` closes an abbreviation, an initial or a list marker."""
    m = _LAST_WORD.search(text, max(0, dot - 64), dot)
    if m is None:
        return False
    word = m.group().lstrip(_OPENERS)
    lower = word.lower()
    if lower == "no":
        return following.isdigit()  # "No. 5", but "said no. Then"
    if lower in _ABBREVIATIONS or _DOTTED.fullmatch(word):
        return True
    if len(word) == 1 and word.isupper():
        return True  # an initial: "J. Smith"
    if word.isdigit():  # a numbered-list marker "1." opening its line
        line_start = text.rfind("\n", 0, m.start()) + 1
        return not text[line_start : m.start()].strip()
    return False


def _ends_sentence(text: str, start: int, end: int) -> bool:
    """Whether the terminal punctuation ``text[start:end]`` ends a sentence."""
    nxt = cast("re.Match[str]", _SPACE.match(text, end)).end()  # \s* matches anywhere
    if nxt == len(text) or not _opens_sentence(text[nxt]):
        return False  # the text ends here anyway, or continues the sentence
    if text[start:end].rstrip(_CLOSERS) != ".":
        return True
    return not _dot_is_not_a_stop(text, start, text[nxt])


def _breaks(text: str) -> set[int]:
    """Offsets where a new sentence may start (segments are trimmed afterwards)."""
    cuts = {m.start() for m in _PARAGRAPH.finditer(text)}
    cuts.update(m.start() for m in _BLOCK_START.finditer(text))
    for m in _WHOLE_LINE.finditer(text):
        cuts.update((m.start(), m.end()))
    cuts.update(m.end() for m in _TERMINAL.finditer(text) if _ends_sentence(text, *m.span()))
    return cuts


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Sentence spans of ``text``: ``(start, end)`` offsets, trimmed of whitespace, in order.

    Every non-whitespace character of ``text`` lies in exactly one span.
    """
    bounds = [0, *sorted(c for c in _breaks(text) if 0 < c < len(text)), len(text)]
    spans = []
    for a, b in pairwise(bounds):
        piece = text[a:b]
        rest = piece.lstrip()
        if rest:
            start = a + len(piece) - len(rest)
            spans.append((start, start + len(rest.rstrip())))
    return spans
