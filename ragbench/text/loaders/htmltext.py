"""HTML as its visible text (no scripts, styles, head), for files and web pages alike."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from ragbench.text.loaders.base import OneDocumentLoader
from ragbench.text.loaders.decode import read_text
from ragbench.text.loaders.report import Skip
from ragbench.types import Document

_HTML_SKIP = frozenset({"script", "style", "noscript", "template", "head"})
_HTML_PARAGRAPH = frozenset(
    "address article aside blockquote dd div dl fieldset figcaption figure footer form "
    "h1 h2 h3 h4 h5 h6 header hr main nav ol p pre section table ul".split()
)
_HTML_LINE = frozenset("br dt li tr caption td th".split())
_WHITESPACE = re.compile(r"\s+")


class _HtmlText(HTMLParser):
    """Collects the visible text of an HTML page, with line breaks at block elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self._hidden: list[str] = []  # open elements whose content is not shown
        self._pre = 0
        self._in_title = False
        self._breaks = 0  # line breaks owed before the next text

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":  # an unclosed <head> ends where the body starts
            self._hidden = [t for t in self._hidden if t != "head"]
        if tag == "title":
            self._in_title = True
        elif tag in _HTML_SKIP:
            self._hidden.append(tag)
        elif tag == "pre":
            self._pre += 1
        self._break(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._hidden:
            while self._hidden.pop() != tag:  # also closes what was left open inside it
                pass
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        self._break(tag)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._hidden:
            self._text(data)

    def _break(self, tag: str) -> None:
        if tag in _HTML_PARAGRAPH:
            self._breaks = 2
        elif tag in _HTML_LINE:
            self._breaks = max(self._breaks, 1)

    def _text(self, data: str) -> None:
        if not self._pre:
            data = _WHITESPACE.sub(" ", data)
            if self._breaks or not self.parts or self.parts[-1].endswith((" ", "\n")):
                data = data.lstrip(" ")
        if not data:
            return
        if self._breaks and self.parts:
            self.parts[-1] = self.parts[-1].rstrip(" ")
            self.parts.append("\n" * self._breaks)
        self._breaks = 0
        self.parts.append(data)

    def text(self) -> str:
        """The visible text, trailing spaces removed."""
        return "".join(self.parts).rstrip()


def html_text(markup: str) -> tuple[str, str]:
    """The visible text of an HTML page and its <title> (whitespace collapsed)."""
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    return parser.text(), _WHITESPACE.sub(" ", "".join(parser.title)).strip()


class HtmlLoader(OneDocumentLoader):
    """HTML: visible text only (no scripts, styles, head); ``metadata["title"]`` from <title>."""

    format = "html"
    extensions = (".html", ".htm")

    def _read(self, rel: str) -> Document:
        text, title = html_text(read_text(self.path))
        if not text.strip():
            raise Skip("no visible text")
        return self._document(rel, text, title)
