"""One web page as a document (fetching: ``ragbench.text.web``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ragbench.errors import DataError
from ragbench.text.loaders.base import BaseLoader
from ragbench.text.loaders.decode import normalize_newlines
from ragbench.text.loaders.files import markdown_title
from ragbench.text.loaders.htmltext import html_text
from ragbench.text.loaders.report import LoadReport, Pass
from ragbench.types import Document


class WebLoader(BaseLoader):
    """One web page, fetched when the loader is made (``ragbench.text.web.fetch``: robots.txt,
    ``max_bytes``, ``timeout``; any failure is a one-line ``DataError``). HTML becomes its
    visible text as ``HtmlLoader`` reads it, plain text and Markdown stay as served; the
    document's id is the URL asked for, ``metadata["url"]`` the one that served it, both
    without the credentials a URL may carry (``web.redact``).
    """

    format = "web"

    def __init__(
        self, url: str, *, max_bytes: int | None = None, timeout: float | None = None
    ) -> None:
        from ragbench.text import web

        self.report = LoadReport()
        page = web.fetch(
            url,
            max_bytes=web.DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
            timeout=web.DEFAULT_TIMEOUT if timeout is None else timeout,
        )
        self.url = url = web.redact(url)
        text, title, kind = normalize_newlines(page.text), "", "txt"
        if page.content_type in ("text/html", "application/xhtml+xml"):
            (text, title), kind = html_text(text), "html"
        elif page.content_type == "text/markdown":
            title, kind = markdown_title(text) or "", "md"
        elif page.content_type != "text/plain":
            raise DataError(f"{url}: unsupported content type {page.content_type or 'none'!r}")
        if not text.strip():
            raise DataError(f"{url}: no visible text")
        meta = {"url": page.url, "format": kind, **({"title": title} if title else {})}
        self._document = Document(id=url, text=text, metadata=meta, source=page.url)

    def _stream(self, run: Pass) -> Iterator[Document]:
        if run.admit(self._document, Path(self.url)):
            yield self._document

    def __repr__(self) -> str:
        return f"WebLoader({self.url!r})"
