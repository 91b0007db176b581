"""Loaders of files that are one document each: Markdown, plain text and PDF."""

from __future__ import annotations

import re

from ragbench.text.loaders.base import OneDocumentLoader
from ragbench.text.loaders.decode import normalize_newlines, os_reason, read_text
from ragbench.text.loaders.report import Skip
from ragbench.types import Document

_PAGE_SEPARATOR = "\n\n"


_FENCE = re.compile(r"^[ ]{0,3}(```|~~~)")
_ATX_TITLE = re.compile(r"^#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")


def markdown_title(text: str) -> str | None:
    """The text of the first level-1 ``# `` heading outside code fences, if any."""
    fence: str | None = None
    for line in text.split("\n"):
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else fence or marker.group(1)
        elif fence is None and (heading := _ATX_TITLE.match(line)):
            return heading.group(1)
    return None


class MarkdownLoader(OneDocumentLoader):
    """Markdown (raw source, not rendered); ``metadata["title"]`` is the first ``# `` heading."""

    format = "md"
    extensions = (".md", ".mdx", ".markdown")

    def _read(self, rel: str) -> Document:
        text = read_text(self.path)
        return self._document(rel, text, markdown_title(text))


class TextLoader(OneDocumentLoader):
    """Plain text files, taken verbatim (after decoding and newline normalisation)."""

    format = "txt"
    extensions = (".txt", ".text", ".rst")

    def _read(self, rel: str) -> Document:
        return self._document(rel, read_text(self.path), None)


class PdfLoader(OneDocumentLoader):
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
            raise Skip("no extractable text")
        offsets, start = [], 0
        for page in pages:
            offsets.append([start, start + len(page)])
            start += len(page) + len(_PAGE_SEPARATOR)
        return self._document(rel, text, title, pages=offsets)

    def _pages(self) -> tuple[list[str], str | None]:
        """Each page's extracted text (newlines normalised) and the document title, if any
        (pypdf is imported here: a sweep over no PDF never pays for it)."""
        from pypdf import PdfReader

        try:
            reader = PdfReader(self.path)
            if reader.is_encrypted:
                reader.decrypt("")
            pages = [normalize_newlines(page.extract_text()) for page in reader.pages]
            title = reader.metadata.title if reader.metadata else None
        except OSError as error:
            raise Skip(os_reason(error)) from None
        except Exception as error:  # pypdf raises many types on malformed input
            raise Skip(f"unreadable PDF: {error}", "unreadable PDF") from None
        return pages, str(title).strip() if title else None
