"""Document loaders: Markdown, plain text, JSONL, PDF, HTML files and whole directory trees.

Every loader is an iterable that yields ``Document`` objects lazily, one file (or JSONL line) at a
time, and fills its ``report`` while it goes: a bad file or line is recorded with its path and a
reason, then skipped, so one broken input never stops a corpus from loading and nothing is lost
without a trace. Texts are decoded as UTF-8 (a BOM is dropped) and ``\\r\\n`` / ``\\r`` become
``\\n`` before a ``Document`` exists, so every character offset downstream points into the text
as loaded. ``load(path)`` picks the loader for a file or a directory.

Only regular files are read: a FIFO, socket or device file is reported and skipped (reading a
FIFO would block forever). In a directory, a symbolic link whose target lies outside the
directory is reported and skipped unless ``follow_symlinks=True``. A file without an extension
(``README``, ``LICENSE``; also ``README.Debian`` and the like) is read as plain text when its
first bytes are text. ``LoadReport.summary()`` says in one line what a pass skipped.
"""

from __future__ import annotations

import codecs
import html
import json
import logging
import os
import re
import stat
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import IO, Any, ClassVar

from pypdf import PdfReader

from ragbench.errors import ConfigError, DataError
from ragbench.types import Document

__all__ = [
    "LABEL_FILES",
    "BaseLoader",
    "DirectoryLoader",
    "FileLoader",
    "HtmlLoader",
    "JsonlLoader",
    "LoadProblem",
    "LoadReport",
    "MarkdownLoader",
    "PdfLoader",
    "TextLoader",
    "WebLoader",
    "load",
    "skipped_summary",
]

logger = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]

_SNIFF_BYTES = 8192  # a NUL byte in this many leading bytes marks a file as binary
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)
_NEWLINES = re.compile(r"\r\n?")
_PAGE_SEPARATOR = "\n\n"
_PRINTABLE_SHARE = 0.95  # of the sniffed characters, for a file without an extension to be text
_TEXT_NAMES = frozenset(
    """readme license licence copying copyright notice authors contributors contributing
    changelog changes history news install todo thanks""".split()
)  # README.Debian, LICENSE.APACHE: the suffix is no file type
_UNSUPPORTED = "unsupported extension"
_NOT_REGULAR = "not a regular file"
_LISTED = 3  # a summary names up to this many skipped items one by one

LABEL_FILES = ("queries.jsonl", "cuts.jsonl")
"""What a labeled set keeps beside its documents (``ragbench.data.spans``, ``.folder``,
``.cuts``): at a folder's top these files are labels, never documents."""


# --------------------------------------------------------------------------- report


@dataclass(frozen=True, slots=True)
class LoadProblem:
    """A file, line or directory that was skipped, and why; ``kind`` groups reasons in a
    summary (``binary``, ``invalid UTF-8``; empty: the reason itself)."""

    path: str
    reason: str
    kind: str = field(default="", compare=False)


@dataclass
class LoadReport:
    """What one pass over a source produced: documents loaded and items skipped (with reasons).

    Every skipped item has exactly one problem, so ``skipped == len(problems)``. Hidden
    (dot-prefixed) files and directories and blank JSONL lines are not items and are not counted.
    """

    loaded: int = 0
    problems: list[LoadProblem] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        """Number of skipped files, lines and directories."""
        return len(self.problems)

    def add(self, path: StrPath, reason: str, kind: str = "") -> None:
        """Record that ``path`` was skipped for ``reason`` (of ``kind``, default the reason)."""
        self.problems.append(LoadProblem(str(path), reason, kind or reason))
        logger.debug("skipped %s: %s", path, reason)

    def summary(self) -> str:
        """One line on what was skipped ("" when nothing was): see ``skipped_summary``."""
        return skipped_summary(self.problems)

    def clear(self) -> None:
        """Reset to an empty report (each pass over a loader starts afresh)."""
        self.loaded = 0
        self.problems.clear()

    def __str__(self) -> str:
        head = f"loaded {self.loaded} documents, skipped {self.skipped}"
        return "\n  ".join([head, *(f"{p.path}: {p.reason}" for p in self.problems)])

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(p.path)}</td><td>{html.escape(p.reason)}</td></tr>"
            for p in self.problems
        )
        table = f"<table><tr><th>path</th><th>reason</th></tr>{rows}</table>" if rows else ""
        return f"<p>loaded {self.loaded} documents, skipped {self.skipped}</p>{table}"


def skipped_summary(problems: Sequence[LoadProblem]) -> str:
    """One line on what a load skipped, so that many skipped files are not as many lines: up
    to three items by path and reason, more as counts by kind (unsupported extensions by
    extension) and the first item; "" when nothing was skipped."""
    if not problems:
        return ""
    if len(problems) == 1:
        return f"skipped {problems[0].path}: {problems[0].reason}"
    lines = sum(p.reason.startswith("line ") for p in problems)
    counts = [(len(problems) - lines, "file"), (lines, "JSONL line")]
    head = "skipped " + " and ".join(f"{n} {what}{'s' * (n > 1)}" for n, what in counts if n)
    if len(problems) <= _LISTED:
        return f"{head}: " + "; ".join(f"{p.path}: {p.reason}" for p in problems)
    parts = []
    for kind, count in Counter(p.kind or p.reason for p in problems).most_common():
        if kind == _UNSUPPORTED:
            suffixes = Counter(Path(p.path).suffix.lower() for p in problems if p.kind == kind)
            shown = [f"{suffix} {n}" for suffix, n in suffixes.most_common(5)]
            kind += f" ({', '.join(shown)}{', ...' if len(suffixes) > 5 else ''})"
        parts.append(f"{count} {kind}")
    first = problems[0]
    return f"{head}: {', '.join(parts)}; the first: {first.path}: {first.reason}"


class _Skip(Exception):
    """Raised by readers for an unusable file or line; the loop records it and moves on."""

    def __init__(self, reason: str, kind: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclass
class _Pass:
    """State of one iteration over a loader: its report and the ids already yielded."""

    report: LoadReport
    seen: dict[str, str] = field(default_factory=dict)

    def admit(self, doc: Document, path: Path, where: str = "") -> bool:
        """Count ``doc`` as loaded unless its id was already yielded (then report it)."""
        first = self.seen.get(doc.id)
        if first is not None:
            self.report.add(
                path, f"{where}duplicate id {doc.id!r} (first at {first})", "duplicate id"
            )
            return False
        self.seen[doc.id] = doc.source
        self.report.loaded += 1
        return True


# --------------------------------------------------------------------------- decoding


def _os_reason(error: OSError) -> str:
    """The human part of an OSError ("Permission denied"), without the repeated path."""
    return error.strerror or str(error)


def _not_regular(path: StrPath) -> str | None:
    """Why ``path`` (links followed) must not be read — it is no regular file — or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # reading it reports the error
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _SPECIAL_FILES if test(mode)), "special file")
    return f"not a regular file ({kind}): not read"


def _utf8(data: bytes, offset: int = 0) -> str:
    """Decode strict UTF-8; ``offset`` is where ``data`` starts in its file, for the message."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Skip(f"invalid UTF-8 at byte {offset + error.start}", "invalid UTF-8") from None


def _normalize_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return _NEWLINES.sub("\n", text) if "\r" in text else text


def _read_text(path: Path) -> str:
    """A text file's content, decoded and normalised; raises ``_Skip`` when it is unusable."""
    try:
        with open(path, "rb") as file:
            head = file.read(_SNIFF_BYTES)
            if b"\0" in head:
                raise _Skip("binary file", "binary")
            data = head + file.read()
    except OSError as error:
        raise _Skip(_os_reason(error)) from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    text = _normalize_newlines(_utf8(data[bom:], bom))
    if not text.strip():
        raise _Skip("empty")
    return text


def _extensionless(name: str) -> bool:
    """Whether a file named ``name`` has no extension that says its type: none at all, or a
    conventional plain-text name with a suffix (``README.Debian``, ``LICENSE.APACHE``)."""
    return Path(name).suffix == "" or name.split(".")[0].lower() in _TEXT_NAMES


def _sniff_text(path: StrPath) -> None:
    """Raise ``_Skip`` unless the first bytes of ``path`` are text: no NUL byte, valid UTF-8,
    and mostly printable characters. A file that cannot be opened passes (reading it reports
    the error)."""
    try:
        with open(path, "rb") as file:
            head = file.read(_SNIFF_BYTES)
            whole = not file.read(1)
    except OSError:
        return
    if b"\0" in head:
        raise _Skip("binary file", "binary")
    bom = len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0
    try:  # final=False: a multi-byte character cut at the end of the head is no error
        text = codecs.getincrementaldecoder("utf-8")().decode(head[bom:], final=whole)
    except UnicodeDecodeError as error:
        raise _Skip(f"invalid UTF-8 at byte {bom + error.start}", "invalid UTF-8") from None
    shown = sum(c.isprintable() or c.isspace() for c in text)
    if shown < _PRINTABLE_SHARE * len(text):
        raise _Skip("binary file (mostly unprintable characters)", "binary")


# --------------------------------------------------------------------------- globs


@dataclass(frozen=True)
class _Glob:
    """A gitignore-like pattern compiled to a regular expression over relative POSIX paths."""

    regex: re.Pattern[str]
    directories_only: bool

    def matches(self, rel: str, directory: bool) -> bool:
        """Whether the file or directory ``rel`` matches (a directory also as ``rel/``, so that
        ``build/**`` matches the folder ``build``)."""
        if directory:
            return bool(self.regex.fullmatch(rel) or self.regex.fullmatch(rel + "/"))
        return not self.directories_only and self.regex.fullmatch(rel) is not None


def _globs(patterns: Collection[str], flag: str) -> tuple[_Glob, ...]:
    """The compiled ``patterns``; ``ConfigError`` naming ``flag`` and the pattern when one is
    no glob."""
    return tuple(_glob(pattern, flag) for pattern in patterns)


def _glob(pattern: str, flag: str) -> _Glob:
    """``pattern`` as gitignore reads it: ``*`` and ``?`` within a path segment, ``[...]``
    classes, ``**`` for any folders; without a ``/`` (a trailing one aside) it matches at any
    depth, with one it is relative to the folder; a trailing ``/`` matches folders only."""

    def invalid(why: str) -> ConfigError:
        example = "'**/*.md' or 'build/**'"
        return ConfigError(
            f"{flag} {pattern!r}: {why} (expected a glob relative to the folder, such as {example})"
        )

    body = pattern.rstrip("/")
    anchored = body.startswith("/")
    body = body.lstrip("/")
    if not body.strip():
        raise invalid("empty pattern")
    segments = body.split("/")
    if "" in segments:
        raise invalid("empty path segment ('//')")
    if "." in segments or ".." in segments:
        raise invalid("a '.' or '..' segment")
    regex = "" if anchored or len(segments) > 1 else "(?:.*/)?"
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            regex += ".*" if last else "(?:.*/)?"
        else:
            regex += _segment_regex(segment, invalid) + ("" if last else "/")
    try:
        return _Glob(re.compile(regex), pattern.endswith("/"))
    except re.error as error:
        raise invalid(f"invalid character class ({error.msg})") from None


def _segment_regex(segment: str, invalid: Callable[[str], ConfigError]) -> str:
    """The regular expression of one path segment of a glob (no ``/`` in it)."""
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 == len(segment):
                raise invalid("ends with an escape ('\\')")
            i += 1
            out.append(re.escape(segment[i]))
        elif c == "[":
            start = i + 1
            negate = start < len(segment) and segment[start] in "!^"
            end = start + negate + 1  # a ']' right after '[' or '[!' is a member
            end = segment.find("]", end)
            if end < 0:
                raise invalid("unclosed '['")
            members = re.sub(r"([\\\[\]])", r"\\\1", segment[start + negate : end])
            out.append(f"[^/{members}]" if negate else f"[{members}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------- loaders


class BaseLoader(ABC):
    """A path-backed source of documents with a ``report`` filled while iterating."""

    def __init__(self, path: StrPath) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise DataError(f"{self.path}: no such file or directory")
        self.report = LoadReport()

    def __iter__(self) -> Iterator[Document]:
        self.report.clear()
        yield from self._stream(_Pass(self.report))

    @abstractmethod
    def _stream(self, run: _Pass) -> Iterator[Document]:
        """Yield the documents of this source, recording problems in ``run.report``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r})"


class FileLoader(BaseLoader):
    """Loads one file; subclasses name their ``format`` and ``extensions``.

    Loaded on its own, a file's id and ``metadata["path"]`` are its name; under a
    ``DirectoryLoader`` they are its path relative to the root.
    """

    format: ClassVar[str]
    extensions: ClassVar[tuple[str, ...]]

    def __init__(self, path: StrPath) -> None:
        super().__init__(path)
        if self.path.is_dir():
            raise DataError(f"{self.path}: is a directory (use DirectoryLoader or load())")

    def _stream(self, run: _Pass) -> Iterator[Document]:
        reason = _not_regular(self.path)
        if reason is not None:
            run.report.add(self.path, reason, _NOT_REGULAR)
            return iter(())
        return self._file(self.path.name, run)

    @abstractmethod
    def _file(self, rel: str, run: _Pass) -> Iterator[Document]:
        """Documents of this file, which has the relative path ``rel``."""


class _OneDocumentLoader(FileLoader):
    """A file that is a single document."""

    def _file(self, rel: str, run: _Pass) -> Iterator[Document]:
        try:
            doc = self._read(rel)
        except _Skip as skip:
            run.report.add(self.path, skip.reason, skip.kind)
            return
        if run.admit(doc, self.path):
            yield doc

    @abstractmethod
    def _read(self, rel: str) -> Document:
        """The file as one document; raises ``_Skip`` when it cannot be used."""

    def _document(self, rel: str, text: str, title: str | None, **metadata: Any) -> Document:
        """A document with the common metadata (``path``, ``format``, a non-empty ``title``)."""
        meta = {"path": rel, "format": self.format, **metadata}
        if title:
            meta["title"] = title
        return Document(id=rel, text=text, metadata=meta, source=str(self.path))


_FENCE = re.compile(r"^[ ]{0,3}(```|~~~)")
_ATX_TITLE = re.compile(r"^#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def _markdown_title(text: str) -> str | None:
    """The text of the first level-1 ``# `` heading outside code fences, if any."""
    fence: str | None = None
    for line in text.split("\n"):
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else fence or marker.group(1)
        elif fence is None and (heading := _ATX_TITLE.match(line)):
            return heading.group(1)
    return None


class MarkdownLoader(_OneDocumentLoader):
    """Markdown (raw source, not rendered); ``metadata["title"]`` is the first ``# `` heading."""

    format = "md"
    extensions = (".md", ".mdx", ".markdown")

    def _read(self, rel: str) -> Document:
        text = _read_text(self.path)
        return self._document(rel, text, _markdown_title(text))


class TextLoader(_OneDocumentLoader):
    """Plain text files, taken verbatim (after decoding and newline normalisation)."""

    format = "txt"
    extensions = (".txt", ".text", ".rst")

    def _read(self, rel: str) -> Document:
        return self._document(rel, _read_text(self.path), None)


class PdfLoader(_OneDocumentLoader):
    """PDF via pypdf: one document per file, pages joined by a blank line.

    ``metadata["pages"]`` holds ``[start, end)`` character offsets of each page in the text;
    every chunk of the document carries its own pages instead (``make_chunks``: ``pages``, the
    1-based numbers of the pages it spans, and ``page``, the first).
    """

    format = "pdf"
    extensions = (".pdf",)

    def _read(self, rel: str) -> Document:
        pages, title = self._pages()
        text = _PAGE_SEPARATOR.join(pages)
        if not text.strip():
            raise _Skip("no extractable text")
        offsets, start = [], 0
        for page in pages:
            offsets.append([start, start + len(page)])
            start += len(page) + len(_PAGE_SEPARATOR)
        return self._document(rel, text, title, pages=offsets)

    def _pages(self) -> tuple[list[str], str | None]:
        """Each page's extracted text (newlines normalised) and the document title, if any."""
        try:
            reader = PdfReader(self.path)
            if reader.is_encrypted:
                reader.decrypt("")
            pages = [_normalize_newlines(page.extract_text()) for page in reader.pages]
            title = reader.metadata.title if reader.metadata else None
        except OSError as error:
            raise _Skip(_os_reason(error)) from None
        except Exception as error:  # pypdf raises many types on malformed input
            raise _Skip(f"unreadable PDF: {error}", "unreadable PDF") from None
        return pages, str(title).strip() if title else None


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


def _html_text(markup: str) -> tuple[str, str]:
    """The visible text of an HTML page and its <title> (whitespace collapsed)."""
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    return parser.text(), _WHITESPACE.sub(" ", "".join(parser.title)).strip()


class HtmlLoader(_OneDocumentLoader):
    """HTML: visible text only (no scripts, styles, head); ``metadata["title"]`` from <title>."""

    format = "html"
    extensions = (".html", ".htm")

    def _read(self, rel: str) -> Document:
        text, title = _html_text(_read_text(self.path))
        if not text.strip():
            raise _Skip("no visible text")
        return self._document(rel, text, title)


class WebLoader(BaseLoader):
    """One web page, fetched when the loader is made (``ragbench.text.web.fetch``: robots.txt,
    ``max_bytes``, ``timeout``; any failure is a one-line ``DataError``). HTML becomes its
    visible text as ``HtmlLoader`` reads it, plain text and Markdown stay as served; the
    document's id is the URL asked for, ``metadata["url"]`` the one that served it.
    """

    format = "web"

    def __init__(
        self, url: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> None:
        from ragbench.text import web

        self.url = url
        self.report = LoadReport()
        page = web.fetch(
            url,
            max_bytes=web.DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
            timeout=web.DEFAULT_TIMEOUT if timeout is None else timeout,
        )
        text, title, kind = _normalize_newlines(page.text), "", "txt"
        if page.content_type in ("text/html", "application/xhtml+xml"):
            (text, title), kind = _html_text(text), "html"
        elif page.content_type == "text/markdown":
            title, kind = _markdown_title(text) or "", "md"
        elif page.content_type != "text/plain":
            raise DataError(f"{url}: unsupported content type {page.content_type or 'none'!r}")
        if not text.strip():
            raise DataError(f"{url}: no visible text")
        meta = {"url": page.url, "format": kind, **({"title": title} if title else {})}
        self._document = Document(id=url, text=text, metadata=meta, source=page.url)

    def _stream(self, run: _Pass) -> Iterator[Document]:
        if run.admit(self._document, Path(self.url)):
            yield self._document

    def __repr__(self) -> str:
        return f"WebLoader({self.url!r})"


class JsonlLoader(FileLoader):
    """JSON Lines, one document per line (BEIR ``corpus.jsonl`` and the like).

    The id comes from ``id_field`` (default: ``_id``, else ``id``), the text from ``text_field``;
    a non-empty ``title_field`` goes to ``metadata["title"]`` and, with ``title_in_text``, is
    prepended to the text as ``title + " "`` (BEIR's convention). An object under
    ``metadata_field`` is merged into the metadata. Bad lines (invalid JSON, missing or
    duplicate id, missing text) are reported as ``line N: ...`` and skipped; blank lines are
    ignored.
    """

    format = "jsonl"
    extensions = (".jsonl",)

    def __init__(
        self,
        path: StrPath,
        *,
        id_field: str | None = None,
        text_field: str = "text",
        title_field: str | None = "title",
        metadata_field: str | None = "metadata",
        title_in_text: bool = False,
    ) -> None:
        super().__init__(path)
        self.id_fields = (id_field,) if id_field else ("_id", "id")
        self.text_field = text_field
        self.title_field = title_field
        self.metadata_field = metadata_field
        self.title_in_text = title_in_text

    def _file(self, rel: str, run: _Pass) -> Iterator[Document]:
        try:
            with open(self.path, "rb") as file:
                yield from self._lines(file, rel, run)
        except OSError as error:
            run.report.add(self.path, _os_reason(error))

    def _lines(self, file: IO[bytes], rel: str, run: _Pass) -> Iterator[Document]:
        """Documents of each non-blank line; problems are reported per line."""
        if b"\0" in file.read(_SNIFF_BYTES):
            run.report.add(self.path, "binary file", "binary")
            return
        file.seek(0)
        offset, blank = 0, True
        for number, raw in enumerate(file, 1):
            start, offset = offset, offset + len(raw)
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw, start = raw[len(codecs.BOM_UTF8) :], start + len(codecs.BOM_UTF8)
            if not raw.strip():
                continue
            blank = False
            try:
                doc = self._parse(raw, number, start, rel)
            except _Skip as skip:
                run.report.add(self.path, f"line {number}: {skip.reason}", "bad JSONL line")
                continue
            if run.admit(doc, self.path, f"line {number}: "):
                yield doc
        if blank:
            run.report.add(self.path, "empty")

    def _parse(self, raw: bytes, number: int, offset: int, rel: str) -> Document:
        """One line as a document; raises ``_Skip`` with the reason it cannot be one."""
        try:
            record = json.loads(_utf8(raw, offset))
        except json.JSONDecodeError as error:
            raise _Skip(f"invalid JSON: {error.msg} at column {error.colno}") from None
        if not isinstance(record, dict):
            raise _Skip("expected a JSON object")
        body = self._string(record, self.text_field, required=True)
        title = self._string(record, self.title_field, required=False)
        text = " ".join(part for part in (title, body) if part) if self.title_in_text else body
        if not text.strip():
            raise _Skip("empty text")
        meta = {**self._metadata(record), "path": rel, "format": self.format, "line": number}
        if title:
            meta["title"] = title
        return Document(self._id(record), text, meta, f"{self.path}:{number}")

    def _id(self, record: dict[str, Any]) -> str:
        """The record's id as a string (integers are accepted and converted)."""
        value = next((record[f] for f in self.id_fields if record.get(f) is not None), None)
        if value is None or value == "":
            raise _Skip(f"missing id ({' or '.join(map(repr, self.id_fields))})")
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise _Skip(f"id must be a string or an integer, got {type(value).__name__}")
        return str(value)

    @staticmethod
    def _string(record: dict[str, Any], name: str | None, *, required: bool) -> str:
        """Field ``name`` as normalised text; "" when optional and absent."""
        value = record.get(name) if name else None
        if value is None:
            if required:
                raise _Skip(f"missing {name!r}")
            return ""
        if not isinstance(value, str):
            raise _Skip(f"{name!r} must be a string, got {type(value).__name__}")
        return _normalize_newlines(value)

    def _metadata(self, record: dict[str, Any]) -> dict[str, Any]:
        """The object under ``metadata_field`` (empty when absent)."""
        value = record.get(self.metadata_field) if self.metadata_field else None
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Skip(f"{self.metadata_field!r} must be an object")
        return value


_FILE_LOADERS: tuple[type[FileLoader], ...] = (
    MarkdownLoader,
    TextLoader,
    JsonlLoader,
    PdfLoader,
    HtmlLoader,
)
_BY_EXTENSION: dict[str, type[FileLoader]] = {
    ext: cls for cls in _FILE_LOADERS for ext in cls.extensions
}


class DirectoryLoader(BaseLoader):
    """Every supported file under a directory, recursively, in sorted relative-path order.

    Document ids are POSIX paths relative to the root (``guides/setup.md``; JSONL files
    contribute their records' ids). Files are dispatched by extension (keyword options go to
    ``JsonlLoader``); a file without an extension (``README``, ``LICENSE``, ``README.Debian``)
    is read as plain text when its first bytes are text, else reported as ``binary file``;
    other extensions are reported as ``unsupported extension``, and entries that are no regular
    file (FIFOs, sockets, devices) as ``not a regular file (...)``. The label files of a labeled
    set at the top (``LABEL_FILES``: ``queries.jsonl``, ``cuts.jsonl``) are reported as ``label
    file`` and never read as documents. Hidden (dot-prefixed) files and directories are skipped
    silently, and so is what ``include`` / ``exclude`` leave out: gitignore-like globs relative
    to the root (``**/*.md``, ``build/**``, ``*.log``; one without a ``/`` matches at any depth,
    a folder that matches takes its contents with it); with ``include`` only matching files are
    read. A symbolic link to somewhere outside the directory is reported and skipped unless
    ``follow_symlinks``; links are otherwise followed, but each real directory is walked once:
    a link back to an ancestor is reported as ``symlink loop``, a second link to a directory
    already walked as ``already loaded as ...``. Files in ``skip_files`` (paths, e.g. a labeled
    set's queries file given separately) are not read.
    """

    def __init__(
        self,
        path: StrPath,
        *,
        follow_symlinks: bool = False,
        include: Collection[str] = (),
        exclude: Collection[str] = (),
        id_field: str | None = None,
        text_field: str = "text",
        title_field: str | None = "title",
        metadata_field: str | None = "metadata",
        title_in_text: bool = False,
        skip_files: Collection[StrPath] = (),
    ) -> None:
        super().__init__(path)
        if not self.path.is_dir():
            raise DataError(f"{self.path}: not a directory")
        self.follow_symlinks = follow_symlinks
        self.include = _globs(include, "--include")
        self.exclude = _globs(exclude, "--exclude")
        self.skip_files = {os.path.realpath(p) for p in skip_files}
        self._jsonl_options: dict[str, Any] = {
            "id_field": id_field,
            "text_field": text_field,
            "title_field": title_field,
            "metadata_field": metadata_field,
            "title_in_text": title_in_text,
        }

    def _stream(self, run: _Pass) -> Iterator[Document]:
        return self._directory(self.path, "", run, {})

    def _wanted(self, rel: str, directory: bool) -> bool:
        """Whether ``include`` and ``exclude`` let the entry ``rel`` be read (a directory:
        walked; ``include`` is checked on the files in it)."""
        if any(glob.matches(rel, directory) for glob in self.exclude):
            return False
        if directory or not self.include:
            return True
        parts = rel.split("/")
        folders = ["/".join(parts[:i]) for i in range(1, len(parts))]
        return any(
            glob.matches(rel, False) or any(glob.matches(folder, True) for folder in folders)
            for glob in self.include
        )

    def _outside(self, entry: os.DirEntry[str]) -> str | None:
        """Why ``entry``, a link out of the directory, is not followed (None: follow it)."""
        if self.follow_symlinks or not entry.is_symlink():
            return None
        root = os.path.realpath(self.path)
        target = os.path.realpath(entry.path)
        if os.path.commonpath([root, target]) == root:
            return None
        return (
            f"symlink to {target} outside {self.path}: not followed "
            "(follow_symlinks=True / --follow-symlinks follows it)"
        )

    def _directory(
        self, path: Path, rel: str, run: _Pass, walked: dict[tuple[int, int], str]
    ) -> Iterator[Document]:
        """Walk ``path`` (id prefix ``rel``) unless its real directory was walked already."""
        try:
            stat = path.stat()
        except OSError as error:
            run.report.add(path, _os_reason(error))
            return
        key = (stat.st_dev, stat.st_ino)
        first = walked.get(key)
        if first is not None:
            if first == "" or rel.startswith(first + "/"):
                run.report.add(path, "symlink loop")
            else:
                run.report.add(path, f"already loaded as {first!r}", "already loaded")
            return
        walked[key] = rel
        try:
            entries = _visible_entries(path)
        except OSError as error:
            run.report.add(path, _os_reason(error))
            return
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            is_dir = entry.is_dir()
            if not self._wanted(child, is_dir):
                continue
            outside = self._outside(entry)
            if outside is not None:
                run.report.add(entry.path, outside, "symlink out of the folder")
            elif is_dir:
                yield from self._directory(Path(entry.path), child, run, walked)
            else:
                yield from self._entry_file(entry, child, run)

    def _entry_file(self, entry: os.DirEntry[str], rel: str, run: _Pass) -> Iterator[Document]:
        """Dispatch one directory entry to the loader for its extension (or, without one,
        to ``TextLoader`` when it is text)."""
        if self.skip_files and os.path.realpath(entry.path) in self.skip_files:
            return
        if rel in LABEL_FILES:
            run.report.add(entry.path, "label file of a labeled set, not a document", "label file")
            return
        if not entry.is_file():
            broken = entry.is_symlink() and not os.path.exists(entry.path)
            reason = "broken symlink" if broken else _not_regular(entry.path)
            run.report.add(entry.path, reason or "not a regular file", _NOT_REGULAR)
            return
        cls = _BY_EXTENSION.get(Path(entry.name).suffix.lower())
        if cls is None and _extensionless(entry.name):
            try:
                _sniff_text(entry.path)
            except _Skip as skip:
                run.report.add(entry.path, skip.reason, skip.kind)
                return
            cls = TextLoader
        if cls is None:
            run.report.add(entry.path, _UNSUPPORTED, _UNSUPPORTED)
            return
        options = self._jsonl_options if cls is JsonlLoader else {}
        yield from cls(entry.path, **options)._file(rel, run)


def _visible_entries(path: Path) -> list[os.DirEntry[str]]:
    """Non-hidden entries of ``path`` in the order that sorts their relative paths."""
    with os.scandir(path) as entries:
        visible = [entry for entry in entries if not entry.name.startswith(".")]
    # A directory's descendants ("a/x") sort as "a/" does, e.g. after the file "a.md".
    return sorted(visible, key=lambda e: e.name + "/" if e.is_dir() else e.name)


def load(
    path: StrPath,
    follow_symlinks: bool = False,
    *,
    include: Collection[str] = (),
    exclude: Collection[str] = (),
    **options: Any,
) -> BaseLoader:
    """The loader for ``path``: a ``DirectoryLoader``, the file loader for its extension (a
    file without one that is text: ``TextLoader``), or for an ``http(s)://`` URL a
    ``WebLoader`` (``options``: ``max_bytes``, ``timeout``).

    ``follow_symlinks`` lets a directory's links lead outside it, ``include`` / ``exclude``
    select its files by glob (``DirectoryLoader``); ``options`` go to the loader (JSONL
    fields). Raises ``DataError`` when the path does not exist or is no supported file type,
    ``ConfigError`` for an invalid glob or globs given for a file or URL.
    """
    target = Path(path)
    if (include or exclude) and not target.is_dir():
        raise ConfigError(f"--include/--exclude: {path} is not a folder (they select its files)")
    if isinstance(path, str) and path.lower().startswith(("http://", "https://")):
        return WebLoader(path, **options)
    if target.is_dir():
        return DirectoryLoader(
            target, follow_symlinks=follow_symlinks, include=include, exclude=exclude, **options
        )
    if not target.exists():
        raise DataError(f"{target}: no such file or directory")
    cls = _BY_EXTENSION.get(target.suffix.lower())
    if cls is None and _extensionless(target.name):
        try:
            _sniff_text(target)
        except _Skip as skip:
            raise DataError(f"{target}: no extension, and not text ({skip.reason})") from None
        cls = TextLoader
    if cls is None:
        supported = ", ".join(sorted(_BY_EXTENSION))
        raise DataError(
            f"{target}: unsupported file type (supported: {supported}, and text files without "
            "an extension)"
        )
    return cls(target, **options)
