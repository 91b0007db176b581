"""JSON Lines files, one document per line; a bad line is reported as ``line N: ...``."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import IO, Any

from ragbench.registry import described
from ragbench.text.loaders.base import FileLoader
from ragbench.text.loaders.decode import SNIFF_BYTES, normalize_newlines, os_reason, utf8
from ragbench.text.loaders.report import Pass, Skip, StrPath
from ragbench.types import Document


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

    def _file(self, rel: str, run: Pass) -> Iterator[Document]:
        try:
            with open(self.path, "rb") as file:
                yield from self._lines(file, rel, run)
        except OSError as error:
            run.report.add(self.path, os_reason(error))

    def _lines(self, file: IO[bytes], rel: str, run: Pass) -> Iterator[Document]:
        """Documents of each non-blank line; problems are reported per line."""
        if b"\0" in file.read(SNIFF_BYTES):
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
            except Skip as skip:
                run.report.add(self.path, f"line {number}: {skip.reason}", "bad JSONL line")
                continue
            if run.admit(doc, self.path, f"line {number}: "):
                yield doc
        if blank:
            run.report.add(self.path, "empty")

    def _parse(self, raw: bytes, number: int, offset: int, rel: str) -> Document:
        """One line as a document; raises ``Skip`` with the reason it cannot be one."""
        try:
            record = json.loads(utf8(raw, offset))
        except json.JSONDecodeError as error:
            raise Skip(f"invalid JSON: {error.msg} at column {error.colno}") from None
        if not isinstance(record, dict):
            raise Skip("expected a JSON object")
        body = self._string(record, self.text_field, required=True)
        title = self._string(record, self.title_field, required=False)
        text = " ".join(part for part in (title, body) if part) if self.title_in_text else body
        if not text.strip():
            raise Skip("empty text")
        meta = {**self._metadata(record), "path": rel, "format": self.format, "line": number}
        if title:
            meta["title"] = title
        return Document(self._id(record), text, meta, f"{self.path}:{number}")

    def _id(self, record: dict[str, Any]) -> str:
        """The record's id as a string (integers are accepted and converted)."""
        value = next((record[f] for f in self.id_fields if record.get(f) is not None), None)
        if value is None or value == "":
            raise Skip(f"missing id ({' or '.join(map(repr, self.id_fields))})")
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise Skip(f"id must be a string or an integer, got {described(value)}")
        return str(value)

    @staticmethod
    def _string(record: dict[str, Any], name: str | None, *, required: bool) -> str:
        """Field ``name`` as normalised text; "" when optional and absent."""
        value = record.get(name) if name else None
        if value is None:
            if required:
                raise Skip(f"missing {name!r}")
            return ""
        if not isinstance(value, str):
            raise Skip(f"{name!r} must be a string, got {described(value)}")
        return normalize_newlines(value)

    def _metadata(self, record: dict[str, Any]) -> dict[str, Any]:
        """The object under ``metadata_field`` (empty when absent)."""
        value = record.get(self.metadata_field) if self.metadata_field else None
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise Skip(f"{self.metadata_field!r} must be an object")
        return value
