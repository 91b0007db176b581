"""Tests of the document loaders: each format, directory walking, bad inputs, streaming."""

from __future__ import annotations

import builtins
import csv
import json
import os
from pathlib import Path
from typing import Any

import pypdf
import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError, DataError
from ragbench.pipeline import RAGPipeline
from ragbench.protocols import Loader
from ragbench.text.chunkers import build_chunker, chunk_documents
from ragbench.text.loaders import (
    DirectoryLoader,
    HtmlLoader,
    JsonlLoader,
    LoadProblem,
    LoadReport,
    MarkdownLoader,
    PdfLoader,
    TextLoader,
    decode,
    load,
    skipped_summary,
)
from ragbench.text.loaders import jsonl as jsonl_loader
from ragbench.types import Document

CHUNKING_EVALUATION = Path(__file__).resolve().parents[2] / "shared" / "datasets"
CHUNKING_EVALUATION = CHUNKING_EVALUATION / "chunking_evaluation"


def write(path: Path, content: str | bytes) -> Path:
    """Write ``content`` (bytes verbatim, str as UTF-8 without newline translation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def make_pdf(pages: list[list[str]]) -> bytes:
    """A minimal valid PDF: one page per item, each line a Helvetica ``Tj`` on its own line."""

    def escape(line: str) -> str:
        return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")

    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b""]
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for lines in pages:
        shown = " T* ".join(f"({escape(line)}) Tj" for line in lines)
        stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown} ET".encode() if lines else b""
        kids.append(len(objects) + 1)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (len(objects) + 2)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    refs = " ".join(f"{k} 0 R" for k in kids)
    objects[1] = f"<< /Type /Pages /Kids [{refs}] /Count {len(kids)} >>".encode()
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def jsonl(*records: Any) -> str:
    """JSON Lines text; str items are written verbatim (for malformed lines)."""
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)


def reasons(report: LoadReport) -> dict[str, str]:
    """Problems keyed by file name (or ``parent/name``) for compact assertions."""
    return {Path(p.path).name: p.reason for p in report.problems}


# --------------------------------------------------------------------------- single files


def test_markdown_loads_with_name_id_title_and_metadata(tmp_path: Path) -> None:
    text = "Intro line\n\n# Setup guide #\n\nBody.\n\n# Second\n"
    path = write(tmp_path / "setup.md", text)
    loader = MarkdownLoader(path)
    [doc] = list(loader)
    assert doc == Document(
        id="setup.md",
        text=text,
        metadata={"path": "setup.md", "format": "md", "title": "Setup guide"},
        source=str(path),
    )
    assert loader.report.loaded == 1
    assert loader.report.problems == []


def test_markdown_title_ignores_fenced_code_and_hashtags(tmp_path: Path) -> None:
    text = "#hashtag\n```bash\n# not a title\n```\n~~~\n# nor this\n~~~\n## Sub\n# Real\n"
    [doc] = load(write(tmp_path / "page.mdx", text))
    assert doc.metadata["title"] == "Real"
    assert doc.metadata["format"] == "md"
    [untitled] = load(write(tmp_path / "plain.md", "no heading here\n"))
    assert "title" not in untitled.metadata


@pytest.mark.parametrize("name", ["notes.txt", "index.rst", "README.TXT"])
def test_text_formats(tmp_path: Path, name: str) -> None:
    [doc] = load(write(tmp_path / name, "Plain  text\n  kept verbatim \n"))
    assert doc.id == name
    assert doc.text == "Plain  text\n  kept verbatim \n"
    assert doc.metadata == {"path": name, "format": "txt"}


def test_newlines_are_normalised_and_bom_stripped(tmp_path: Path) -> None:
    raw = b"\xef\xbb\xbf# Title\r\nline two\rline three\r\n\r\nend"
    [doc] = TextLoader(write(tmp_path / "crlf.txt", raw))
    assert doc.text == "# Title\nline two\nline three\n\nend"
    [md] = MarkdownLoader(write(tmp_path / "crlf.md", raw))
    assert md.text == doc.text
    assert md.metadata["title"] == "Title"


def test_html_visible_text_blocks_and_title(tmp_path: Path) -> None:
    page = """<!doctype html>
<html><head><title>  My
  Page </title><style>p { color: red }</style><script>var hidden = 1;</script>
<meta charset="utf-8"></head>
<body><h1>Head   line</h1><p>Some   <b>bold</b> text
across lines.</p><ul><li>one</li><li>two</li></ul>
<pre>code
  indented</pre><noscript>enable js</noscript><template><p>tpl</p></template>
<table><tr><td>a</td><td>b</td></tr></table>x<br>y &amp; z</body></html>"""
    [doc] = HtmlLoader(write(tmp_path / "page.html", page))
    assert doc.text == (
        "Head line\n\nSome bold text across lines.\n\none\ntwo\n\ncode\n  indented"
        "\n\na\nb\n\nx\ny & z"
    )
    assert doc.metadata == {"path": "page.html", "format": "html", "title": "My Page"}


def test_html_unclosed_head_ends_at_body(tmp_path: Path) -> None:
    [doc] = load(write(tmp_path / "p.htm", "<html><head><title>T</title><body><p>shown</p>"))
    assert doc.text == "shown"
    assert doc.metadata["title"] == "T"


def test_html_without_visible_text_is_reported(tmp_path: Path) -> None:
    loader = load(write(tmp_path / "blank.html", "<html><head><script>x()</script></head></html>"))
    assert list(loader) == []
    assert reasons(loader.report) == {"blank.html": "no visible text"}


def test_pdf_pages_and_offsets(tmp_path: Path) -> None:
    pages = [["Hello world", "second line"], [], ["Page (three)", "with \\ backslash"]]
    path = write(tmp_path / "report.pdf", make_pdf(pages))
    [doc] = PdfLoader(path)
    expected = [page.extract_text() for page in pypdf.PdfReader(path).pages]
    assert expected[0] == "Hello world\nsecond line"  # the helper really wrote text
    assert doc.id == "report.pdf"
    assert doc.metadata["format"] == "pdf"
    assert doc.text == "\n\n".join(expected)
    spans = doc.metadata["pages"]
    assert len(spans) == 3
    for (start, end), page_text in zip(spans, expected, strict=True):
        assert doc.text[start:end] == page_text
    assert spans[1][0] == spans[1][1]  # the blank page is an empty span
    assert "Page (three)" in doc.text[spans[2][0] : spans[2][1]]


def test_pdf_broken_and_textless_are_reported(tmp_path: Path) -> None:
    write(tmp_path / "broken.pdf", b"%PDF-1.4\nthis is not a pdf at all")
    write(tmp_path / "blank.pdf", make_pdf([[], []]))
    write(tmp_path / "good.pdf", make_pdf([["fine"]]))
    loader = DirectoryLoader(tmp_path)
    assert [d.id for d in loader] == ["good.pdf"]
    found = reasons(loader.report)
    assert found["broken.pdf"].startswith("unreadable PDF: ")
    assert found["blank.pdf"] == "no extractable text"


@pytest.mark.parametrize(
    "chunker",
    [
        {"kind": "fixed", "size": 24, "overlap": 0},
        {"kind": "recursive", "size": 40, "overlap": 10},
        {"kind": "sentence", "size": 30},
        {"kind": "none"},
    ],
)
def test_each_pdf_chunk_carries_its_own_pages(tmp_path: Path, chunker: dict[str, Any]) -> None:
    # page n is written in letter n only (page 3 is blank), so a chunk's letters are its pages
    letters = {1: "a", 2: "b", 3: "", 4: "d"}
    pages = [[f"{c * 4} {c * 5}." for _ in range(3)] if c else [] for c in letters.values()]
    [doc] = PdfLoader(write(tmp_path / "manual.pdf", make_pdf(pages)))
    chunks = chunk_documents(build_chunker(chunker), [doc])
    spanned = []
    for chunk in chunks:
        expected = [n for n, c in letters.items() if c and c in chunk.text]
        assert chunk.metadata["pages"] == expected, chunk.text
        assert chunk.metadata["page"] == expected[0]
        assert chunk.metadata["path"] == "manual.pdf"  # the rest of the metadata is kept
        spanned.append(expected)
    assert doc.metadata["pages"][0] == [0, len(doc.text.split("\n\n")[0])]  # offsets on the doc
    if chunker["kind"] == "none":
        assert spanned == [[1, 2, 4]]
    else:
        assert {n for found in spanned for n in found} == {1, 2, 4}
        if chunker["kind"] == "fixed":  # cuts through page breaks
            assert any(len(found) > 1 for found in spanned)


def test_pages_are_only_taken_from_pdfs() -> None:
    doc = Document("notes.jsonl", "one two three", {"format": "jsonl", "pages": 12})
    [chunk] = chunk_documents(build_chunker({"kind": "none"}), [doc])
    assert chunk.metadata == {"format": "jsonl", "pages": 12}


# --------------------------------------------------------------------------- JSONL


def test_jsonl_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path / "corpus.jsonl",
        jsonl(
            {"_id": "d1", "title": "T1", "text": "first", "metadata": {"year": 2020}},
            {"id": 7, "text": "second\r\nline", "title": ""},
        ),
    )
    loader = JsonlLoader(path)
    first, second = loader
    assert first == Document(
        id="d1",
        text="first",
        metadata={
            "year": 2020,
            "path": "corpus.jsonl",
            "format": "jsonl",
            "line": 1,
            "title": "T1",
        },
        source=f"{path}:1",
    )
    assert second.id == "7"
    assert second.text == "second\nline"
    assert "title" not in second.metadata
    assert second.source == f"{path}:2"
    assert loader.report.loaded == 2


def test_jsonl_field_options_and_title_in_text(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.jsonl",
        jsonl(
            {"docid": "a", "body": "text a", "heading": "Title A", "extra": {"k": "v"}},
            {"docid": "b", "body": "text b"},
            {"docid": "c", "body": "", "heading": "Only title"},
        ),
    )
    docs = list(
        load(
            path,
            id_field="docid",
            text_field="body",
            title_field="heading",
            metadata_field="extra",
            title_in_text=True,
        )
    )
    assert [(d.id, d.text) for d in docs] == [
        ("a", "Title A text a"),
        ("b", "text b"),
        ("c", "Only title"),
    ]
    assert docs[0].metadata["title"] == "Title A"
    assert docs[0].metadata["k"] == "v"
    plain = JsonlLoader(path, id_field="docid", text_field="body", title_field="heading")
    assert [(d.text, d.metadata.get("title")) for d in plain] == [
        ("text a", "Title A"),
        ("text b", None),
    ]
    assert [p.reason for p in plain.report.problems] == ["line 3: empty text"]


def test_jsonl_bad_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    path = write(
        tmp_path / "bad.jsonl",
        jsonl(
            {"_id": "ok1", "text": "fine"},
            "{not json",
            {"text": "no id"},
            {"_id": "ok1", "text": "again"},
            {"_id": "x"},
            [1, 2],
            "",
            {"_id": "m", "text": "t", "metadata": "nope"},
            {"_id": "n", "text": 5},
            {"_id": "e", "text": "   "},
            {"_id": ["l"], "text": "t"},
            {"_id": "ok2", "text": "also fine"},
        ),
    )
    loader = JsonlLoader(path)
    assert [d.id for d in loader] == ["ok1", "ok2"]
    got = [p.reason for p in loader.report.problems]
    assert all(p.path == str(path) for p in loader.report.problems)
    assert got[0].startswith("line 2: invalid JSON: ")
    assert got[1:] == [
        "line 3: missing id ('_id' or 'id')",
        f"line 4: duplicate id 'ok1' (first at {path}:1)",
        "line 5: missing 'text'",
        "line 6: expected a JSON object",
        "line 8: 'metadata' must be an object",
        "line 9: 'text' must be a string, got 5",
        "line 10: empty text",
        'line 11: id must be a string or an integer, got a list ["l"]',
    ]
    assert loader.report.loaded == 2
    assert loader.report.skipped == 9


def test_jsonl_encoding_problems(tmp_path: Path) -> None:
    good = b'{"_id": "a", "text": "caf\xc3\xa9"}\r\n'
    broken = b'{"_id": "b", "text": "\xff"}\n'
    path = write(tmp_path / "enc.jsonl", b"\xef\xbb\xbf" + good + broken + b"\n\n")
    loader = JsonlLoader(path)
    [doc] = loader
    assert doc.text == "café"
    offset = 3 + len(good) + broken.index(b"\xff")
    assert reasons(loader.report) == {"enc.jsonl": f"line 2: invalid UTF-8 at byte {offset}"}
    first = JsonlLoader(write(tmp_path / "first.jsonl", b"\xef\xbb\xbf" + broken))
    assert list(first) == []
    offset = 3 + broken.index(b"\xff")
    assert reasons(first.report) == {"first.jsonl": f"line 1: invalid UTF-8 at byte {offset}"}


def test_jsonl_empty_and_binary_files(tmp_path: Path) -> None:
    write(tmp_path / "empty.jsonl", "\n  \n")
    write(tmp_path / "binary.jsonl", b'{"_id": "a", "text": "x"}\n\x00\x01\x02')
    loader = DirectoryLoader(tmp_path)
    assert list(loader) == []
    assert reasons(loader.report) == {"empty.jsonl": "empty", "binary.jsonl": "binary file"}


def test_duplicate_ids_across_jsonl_files_in_a_directory(tmp_path: Path) -> None:
    write(tmp_path / "a.jsonl", jsonl({"_id": "same", "text": "one"}))
    second = write(tmp_path / "b.jsonl", jsonl({"_id": "same", "text": "two"}))
    loader = DirectoryLoader(tmp_path)
    assert [d.text for d in loader] == ["one"]
    assert loader.report.problems == [
        LoadProblem(str(second), f"line 1: duplicate id 'same' (first at {tmp_path / 'a.jsonl'}:1)")
    ]


def test_directory_passes_jsonl_options(tmp_path: Path) -> None:
    write(tmp_path / "c.jsonl", jsonl({"pid": "p1", "title": "T", "text": "body"}))
    [doc] = load(tmp_path, id_field="pid", title_in_text=True)
    assert (doc.id, doc.text) == ("p1", "T body")


# --------------------------------------------------------------------------- directories


def test_directory_dispatch_nested_ids_and_sorted_order(tmp_path: Path) -> None:
    write(tmp_path / "guides" / "setup.md", "# Setup\nsteps")
    write(tmp_path / "guides" / "deep" / "more.txt", "deeper")
    write(tmp_path / "a.md", "file a")
    write(tmp_path / "a" / "x.md", "file a/x")
    write(tmp_path / "page.html", "<p>html page</p>")
    write(tmp_path / "data.jsonl", jsonl({"_id": "j1", "text": "json doc"}))
    write(tmp_path / "paper.pdf", make_pdf([["pdf text"]]))
    write(tmp_path / "image.png", b"\x89PNG\r\n")
    write(tmp_path / "Makefile", "all:\n")
    write(tmp_path / ".hidden.md", "secret")
    write(tmp_path / ".git" / "notes.md", "internal")
    loader = load(tmp_path)
    assert isinstance(loader, DirectoryLoader)
    docs = list(loader)
    assert [d.id for d in docs] == [
        "Makefile",  # no extension, but text
        "a.md",
        "a/x.md",
        "j1",
        "guides/deep/more.txt",
        "guides/setup.md",
        "page.html",
        "paper.pdf",
    ]
    by_id = {d.id: d for d in docs}
    assert by_id["guides/setup.md"].metadata == {
        "path": "guides/setup.md",
        "format": "md",
        "title": "Setup",
    }
    assert by_id["guides/setup.md"].source == str(tmp_path / "guides" / "setup.md")
    assert by_id["j1"].metadata["path"] == "data.jsonl"
    assert [by_id[i].metadata["format"] for i in ("guides/deep/more.txt", "page.html")] == [
        "txt",
        "html",
    ]
    assert by_id["paper.pdf"].text == "pdf text"
    assert by_id["Makefile"].metadata == {"path": "Makefile", "format": "txt"}
    assert reasons(loader.report) == {"image.png": "unsupported extension"}
    assert loader.report.loaded == 8


def test_bad_files_are_reported_and_the_rest_loads(tmp_path: Path) -> None:
    write(tmp_path / "01.md", "first good")
    write(tmp_path / "02.md", b"valid start \xe2\x82 broken")
    write(tmp_path / "03.txt", b"text\x00with NUL")
    write(tmp_path / "04.md", "")
    write(tmp_path / "05.txt", " \n\t\r\n")
    write(tmp_path / "06.md", b"\xef\xbb\xbf")
    os.symlink(tmp_path / "missing.md", tmp_path / "07.md")
    write(tmp_path / "08.md", "last good")
    loader = DirectoryLoader(tmp_path)
    assert [d.id for d in loader] == ["01.md", "08.md"]
    assert reasons(loader.report) == {
        "02.md": "invalid UTF-8 at byte 12",
        "03.txt": "binary file",
        "04.md": "empty",
        "05.txt": "empty",
        "06.md": "empty",
        "07.md": "broken symlink",
    }
    assert {p.path for p in loader.report.problems} == {
        str(tmp_path / n) for n in ("02.md", "03.txt", "04.md", "05.txt", "06.md", "07.md")
    }


def test_invalid_utf8_offset_counts_the_bom(tmp_path: Path) -> None:
    loader = TextLoader(write(tmp_path / "bom.txt", b"\xef\xbb\xbfab\xffc"))
    assert list(loader) == []
    assert loader.report.problems == [
        LoadProblem(str(tmp_path / "bom.txt"), "invalid UTF-8 at byte 5")
    ]


def test_unreadable_file_reports_the_os_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "a.md", "readable")
    locked = write(tmp_path / "b.md", "locked")
    write(tmp_path / "c.jsonl", jsonl({"_id": "c", "text": "locked too"}))

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(file).name in {"b.md", "c.jsonl"}:
            raise PermissionError(13, "Permission denied", str(file))
        return builtins.open(file, *args, **kwargs)

    for module in (decode, jsonl_loader):  # where files are opened
        monkeypatch.setattr(module, "open", guarded_open, raising=False)
    loader = DirectoryLoader(tmp_path)
    assert [d.id for d in loader] == ["a.md"]
    assert reasons(loader.report) == {"b.md": "Permission denied", "c.jsonl": "Permission denied"}
    assert loader.report.problems[0].path == str(locked)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root POSIX user")
def test_unreadable_file_with_real_permissions(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "readable")
    locked = write(tmp_path / "b.md", "locked")
    locked.chmod(0)
    try:
        loader = DirectoryLoader(tmp_path)
        assert [d.id for d in loader] == ["a.md"]
        assert reasons(loader.report) == {"b.md": "Permission denied"}
    finally:
        locked.chmod(0o644)


def test_symlink_loops_terminate_and_are_reported(tmp_path: Path) -> None:
    write(tmp_path / "docs" / "a.md", "doc a")
    os.symlink(tmp_path, tmp_path / "docs" / "up")  # back to the root
    os.symlink(tmp_path / "docs", tmp_path / "docs" / "self")  # to itself
    loader = DirectoryLoader(tmp_path)
    assert [d.id for d in loader] == ["docs/a.md"]
    assert sorted(reasons(loader.report).items()) == [
        ("self", "symlink loop"),
        ("up", "symlink loop"),
    ]


def test_symlinked_files_load_and_aliased_directories_load_once(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside" / "shared.md", "shared text")
    root = tmp_path / "root"
    write(root / "real" / "r.md", "real")
    os.symlink(outside, root / "linked.md")
    os.symlink(root / "real", root / "zalias")
    loader = DirectoryLoader(root, follow_symlinks=True)  # linked.md leads out of root
    docs = list(loader)
    assert [(d.id, d.text) for d in docs] == [("linked.md", "shared text"), ("real/r.md", "real")]
    assert loader.report.problems == [LoadProblem(str(root / "zalias"), "already loaded as 'real'")]


def test_directory_loader_streams_lazily(tmp_path: Path) -> None:
    write(tmp_path / "1.md", "one")
    second = write(tmp_path / "2.md", "two")
    iterator = iter(DirectoryLoader(tmp_path))
    assert iter(iterator) is iterator  # a generator, not a list
    assert next(iterator).text == "one"
    second.write_text("changed after the first document")  # not read yet
    assert next(iterator).text == "changed after the first document"
    assert next(iterator, None) is None


def test_jsonl_loader_streams_lazily(tmp_path: Path) -> None:
    path = write(tmp_path / "c.jsonl", jsonl({"_id": "a", "text": "x"}, "{broken"))
    iterator = iter(JsonlLoader(path))
    assert next(iterator).id == "a"


def test_report_resets_per_pass_and_renders(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "ok")
    write(tmp_path / "<b>.bin", "x")
    loader = DirectoryLoader(tmp_path)
    list(loader)
    list(loader)
    assert loader.report.loaded == 1
    assert loader.report.skipped == 1
    assert str(loader.report) == (
        f"loaded 1 documents, skipped 1\n  {tmp_path / '<b>.bin'}: unsupported extension"
    )
    html = loader.report._repr_html_()
    assert "&lt;b&gt;.bin" in html
    assert "<b>" not in html


def test_loaders_satisfy_the_protocol(tmp_path: Path) -> None:
    write(tmp_path / "a.md", "x")
    assert isinstance(load(tmp_path), Loader)
    assert isinstance(load(tmp_path / "a.md"), Loader)


def test_missing_paths_and_wrong_kinds_raise(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "file.md"
    for make in (load, MarkdownLoader, DirectoryLoader, JsonlLoader, PdfLoader):
        with pytest.raises(DataError, match="nowhere"):
            make(missing)
    with pytest.raises(DataError, match=r"unsupported file type"):
        load(write(tmp_path / "x.docx", "x"))
    with pytest.raises(DataError, match="is a directory"):
        TextLoader(tmp_path)
    with pytest.raises(DataError, match="not a directory"):
        DirectoryLoader(tmp_path / "x.docx")


def test_load_picks_the_loader_by_extension(tmp_path: Path) -> None:
    cases = {
        "a.md": MarkdownLoader,
        "b.MDX": MarkdownLoader,
        "c.txt": TextLoader,
        "d.rst": TextLoader,
        "e.jsonl": JsonlLoader,
        "f.pdf": PdfLoader,
        "g.htm": HtmlLoader,
        "h.html": HtmlLoader,
    }
    for name, cls in cases.items():
        assert type(load(write(tmp_path / name, "x"))) is cls


# --------------------------------------------------------------------------- a real folder

ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4
HASHING = '{"embedder": {"kind": "hashing"}}'


def test_text_files_without_an_extension_load_as_text(tmp_path: Path) -> None:
    write(tmp_path / "README", "Project\n=======\n\nWhat it does.\r\n")
    write(tmp_path / "pkg" / "README.Debian", "Notes for Debian users.\n")
    cut = "x" * (decode.SNIFF_BYTES - 4) + "é and more"  # BOM + x: é straddles the head
    write(tmp_path / "LICENSE", "\ufeff" + cut)
    write(tmp_path / "tool", ELF)  # an executable: NUL bytes
    write(tmp_path / "latin1", "Gr\u00fc\u00dfe aus K\u00f6ln\n".encode("latin-1"))
    write(tmp_path / "noise", bytes(range(1, 32)) * 20)  # no NUL, valid UTF-8, unprintable
    write(tmp_path / "notes.xyz", "text, but the extension says nothing we read")
    loader = DirectoryLoader(tmp_path)
    docs = {d.id: d for d in loader}
    assert sorted(docs) == ["LICENSE", "README", "pkg/README.Debian"]
    assert docs["README"].text == "Project\n=======\n\nWhat it does.\n"
    assert docs["README"].metadata == {"path": "README", "format": "txt"}
    assert docs["LICENSE"].text == cut
    assert reasons(loader.report) == {
        "tool": "binary file",
        "latin1": "invalid UTF-8 at byte 2",
        "noise": "binary file (mostly unprintable characters)",
        "notes.xyz": "unsupported extension",
    }
    assert type(load(tmp_path / "README")) is TextLoader
    with pytest.raises(DataError, match=r"tool: no extension, and not text \(binary file\)"):
        load(tmp_path / "tool")


def test_label_files_at_the_top_are_no_documents(tmp_path: Path) -> None:
    write(tmp_path / "guide.md", "# Guide\nhow to")
    write(tmp_path / "queries.jsonl", jsonl({"query": "how?", "relevant": ["guide.md"]}))
    write(tmp_path / "cuts.jsonl", jsonl({"doc_id": "guide.md", "start": 0, "end": 3}))
    write(tmp_path / "data" / "queries.jsonl", jsonl({"_id": "d1", "text": "a record"}))
    loader = load(tmp_path)
    assert [d.id for d in loader] == ["d1", "guide.md"]  # below the top it is data
    label = "label file of a labeled set, not a document"
    assert reasons(loader.report) == {"queries.jsonl": label, "cuts.jsonl": label}
    assert [p.kind for p in loader.report.problems] == ["label file", "label file"]


def test_many_skipped_files_are_one_summary_line(tmp_path: Path) -> None:
    write(tmp_path / "doc.md", "the one document")
    for i in range(5):
        write(tmp_path / "img" / f"{i}.png", b"\x89PNG\r\n")
    for i in range(4):
        write(tmp_path / "lib" / f"{i}.so", ELF)
    for name in ("a", "b", "c"):
        write(tmp_path / "bin" / name, ELF)
    write(tmp_path / "queries.jsonl", jsonl({"query": "q", "relevant": ["doc.md"]}))
    loader = load(tmp_path)
    assert [d.id for d in loader] == ["doc.md"]
    assert len(loader.report.problems) == 13  # every file stays listed on the report
    assert loader.report.summary() == (
        "skipped 13 files: 9 unsupported extension (.png 5, .so 4), 3 binary, 1 label file; "
        f"the first: {tmp_path / 'bin' / 'a'}: binary file"
    )
    assert skipped_summary(loader.report.problems[:2]) == (
        f"skipped 2 files: {tmp_path / 'bin' / 'a'}: binary file; "
        f"{tmp_path / 'bin' / 'b'}: binary file"
    )
    assert skipped_summary([]) == ""


def test_commands_print_one_summary_line_not_one_per_file(tmp_path: Path, capsys) -> None:
    source = tmp_path / "docs"
    write(source / "guide.md", "# Guide\nInstall it, then run it.")
    write(source / "README", "A folder of notes about the project.")
    for i in range(6):
        write(source / "img" / f"{i}.png", b"\x89PNG\r\n")
    write(source / "queries.jsonl", jsonl({"query": "q", "relevant": ["guide.md"]}))
    db = ["--db", str(tmp_path / "db"), "--config", HASHING]
    assert main(["ingest", "--source", str(source), "--collection", "c", *db]) == 0
    out = capsys.readouterr().out.splitlines()
    skipped = [line for line in out if ".png" in line or "queries.jsonl" in line]
    assert skipped == [
        "skipped 7 files: 6 unsupported extension (.png 6), 1 label file; "
        f"the first: {source / 'img' / '0.png'}: unsupported extension"
    ]
    assert "documents loaded 2, indexed 2, unchanged 0" in out
    assert RAGPipeline.open(tmp_path / "db" / "c").document_ids == ["README", "guide.md"]
    assert main(["chunk", str(source), "--format", "summary"]) == 0
    assert capsys.readouterr().err.splitlines() == [skipped[0]]


def _globbed(root: Path, include: list[str], exclude: list[str]) -> list[str]:
    return [d.id for d in DirectoryLoader(root, include=include, exclude=exclude)]


def test_include_and_exclude_select_files_by_glob(tmp_path: Path) -> None:
    for rel in ("a.md", "notes/b.md", "notes/c.txt", "build/x.md", "src/build/y.md", "d.md"):
        write(tmp_path / rel, f"text of {rel}")
    write(tmp_path / "z.log", "not read: left out by include, so not reported")
    every = ["a.md", "build/x.md", "d.md", "notes/b.md", "notes/c.txt", "src/build/y.md"]
    assert _globbed(tmp_path, [], []) == every
    loader = DirectoryLoader(tmp_path, include=["**/*.md"])
    assert [d.id for d in loader] == [r for r in every if r.endswith(".md")]
    assert loader.report.problems == []
    assert _globbed(tmp_path, ["notes/"], []) == ["notes/b.md", "notes/c.txt"]
    assert _globbed(tmp_path, ["*.md"], ["build/**"]) == [
        "a.md",
        "d.md",
        "notes/b.md",
        "src/build/y.md",  # 'build/**' is relative to the folder
    ]
    assert _globbed(tmp_path, [], ["build", "*.txt", "/d.md"]) == ["a.md", "notes/b.md"]
    assert _globbed(tmp_path, ["[!a]*.md"], ["notes"]) == [  # no '/': at any depth
        "build/x.md",
        "d.md",
        "src/build/y.md",
    ]


def test_a_bad_glob_is_one_line_naming_the_flag(tmp_path: Path, capsys) -> None:
    write(tmp_path / "docs" / "a.md", "text")
    with pytest.raises(ConfigError) as error:
        DirectoryLoader(tmp_path, exclude=["ok/**", "build/["])
    assert str(error.value) == (
        "--exclude 'build/[': unclosed '[' (expected a glob relative to the folder, "
        "such as '**/*.md' or 'build/**')"
    )
    for bad in ("", "../up/*.md", "a//b"):
        with pytest.raises(ConfigError, match=r"^--include "):
            DirectoryLoader(tmp_path, include=[bad])
    with pytest.raises(ConfigError, match="is not a folder"):
        load(tmp_path / "docs" / "a.md", include=["*.md"])
    db = ["--db", str(tmp_path / "db"), "--config", HASHING]
    argv = ["ingest", "--source", str(tmp_path / "docs"), "--include", "[z-a].md", *db]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragbench ingest: --include '[z-a].md': invalid character class")
    assert err.count("\n") == 1
    assert not (tmp_path / "db").exists()


# --------------------------------------------------------------------------- real corpus


def test_chunking_evaluation_corpora_keep_reference_offsets() -> None:
    corpora = CHUNKING_EVALUATION / "corpora"
    if not corpora.is_dir():
        pytest.skip(f"{corpora} not available")
    loader = load(corpora)
    docs = {d.id: d for d in loader}
    assert loader.report.problems == []
    assert len(docs) == 5
    for name, doc in docs.items():
        with open(corpora / name, encoding="utf-8", newline="") as file:
            assert doc.text == file.read()
    checked = 0
    with open(CHUNKING_EVALUATION / "questions_df.csv", encoding="utf-8", newline="") as file:
        for row in csv.DictReader(file):
            text = docs[f"{row['corpus_id']}.md"].text
            for ref in json.loads(row["references"]):
                assert text[ref["start_index"] : ref["end_index"]] == ref["content"]
                checked += 1
    assert checked > 100
