"""A large corpus of real text for the scale benchmarks, assembled from what this machine holds.

``python -m benchmarks.corpus --out DIR [--documents N|all] [--seed S]`` writes a folder of
plain-text, Markdown, reStructuredText, HTML and PDF files, as a user's documents folder holds
them, from:

* ``scifact/``: BEIR SciFact's abstracts, one ``<id>.txt`` each, its title on the first line;
* ``reports/<corpus>/``: the chunking evaluation's corpora, each cut at headings and paragraph
  breaks into documents of seeded log-normal sizes (``REPORT_SIZE``);
* ``python/<where>/``: the installed Python packages (this environment's, the system
  Pythons', the Google Cloud SDK's): their documentation files (READMEs, licenses, ``*.md``,
  ``*.rst``, ``*.txt``, HTML, PDF, the description in a distribution's ``METADATA``) at their
  installed paths, and API pages of their docstrings, read with ``ast`` (never imported): a
  page per module, per class and per function with a long docstring (``api_pages``);
* ``debian/<package>/``: ``/usr/share/doc`` (changelogs, copyright files, READMEs, manuals;
  gzip'd files decompressed);
* ``man/man<N>/``: the manual pages rendered as text by groff when it is installed, as
  ``man`` shows them without header and footer lines or the spaces that justify lines.

Only files the document loader reads are written, each with prose in it: at least
``MIN_CHARS`` characters, mostly letters, most lines a few words long (data files and word lists
are left out). A text longer than ``MAX_CHARS`` is cut into parts (``name.part-01.md``) at
headings and paragraph breaks. A text met again (the same license in many packages, a module
installed twice or vendored) is written once, the first in walk order; walks are sorted, so a
machine and a seed give the same folder. ``--documents N`` (default ``DOCUMENTS``) keeps a
seeded sample of N documents that keeps every source's share; ``all`` keeps every one.

The folder holds two hidden files, which the loader skips: ``.corpus-files`` (every file written,
kept up to date while writing) and ``.corpus.json``, the manifest (the seed, the sources, counts
per source and per extension, size percentiles), written last. They mark the folder as this
script's: a rerun deletes the files it lists and builds afresh; a folder that holds anything
else is refused. ``build()`` returns the manifest.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragbench.errors import ConfigError, DataError
from ragbench.text.loaders.decode import extensionless
from ragbench.text.loaders.formats import BY_EXTENSION
from ragbench.text.loaders.htmltext import html_text

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
DOCUMENTS = 100_000
MANIFEST = ".corpus.json"
FILES = ".corpus-files"
SOURCES = ("scifact", "reports", "python-api", "python-docs", "debian", "man")
MIN_CHARS = 200  # a document's text, stripped: shorter ones say too little to be retrieved
MAX_CHARS = 64_000  # a longer text is cut into parts of about PART_CHARS
PART_CHARS = 32_000
MAX_INPUT = 8_000_000  # bytes: a larger file is no document a user keeps
MAX_PDF = 2_000_000  # bytes: a PDF's text is read at build time to know it has some
FUNCTION_PAGE = 1_000  # characters of docstring that give a function a page of its own
REPORT_SIZE = (3_000, 0.9, 400, 30_000)  # the reports' sizes: median, log sigma, low, high
BATCH = 64  # files per task handed to a worker
MAN_BATCH = 200  # manual pages per groff call
LINE_LENGTH = "80n"  # of manual pages rendered as text
PLAIN_REQUESTS = frozenset(
    """TH SH SS PP P LP TP TQ IP HP RS RE B I BR BI IB RB RI IR SM SB UR UE MT ME SY YS OP EX EE
    PD DT br sp nf fi ne ti in ft""".split()
) | {""}  # man(7) macros, and requests whose effects the next page's macros undo
DOC_EXTENSIONS = (".md", ".markdown", ".rst", ".txt", ".html", ".htm", ".pdf")
DOC_NAMES = frozenset(
    """readme license licence copying copyright notice authors contributors contributing
    changelog changes history news install todo thanks""".split()
)  # files without a type suffix that are documentation (README.Debian, changelog.gz)
SKIP_DIRS = frozenset({"__pycache__", "test", "tests", "site-packages", "dist-packages"})
_PAGE = "@@corpus-page@@"  # the header line of every manual page in a batch groff renders
_WORD = re.compile(r"[^\W\d_]{2,}")
_HEADING = re.compile(r"^(?:#{1,2} \S|\s?= [^=\n].* =\s*$)", re.M)  # Markdown, wikitext
_BREAKS = [re.compile(p) for p in (r"\n[ \t]*\n\s*", r"\n", r"[.!?][\"')\]]?\s+", r"\s+")]
_BLANK_RUNS = re.compile(r"\n(?:[ \t]*\n){2,}")
_REQUEST = re.compile(r"^[.'][ \t]*([^\s\\]*)", re.M)  # a control line's request or macro
_JUSTIFIED = re.compile(r"(?<=\S)  +(?=\S)")


@dataclass(frozen=True)
class Doc:
    """One document: where it goes in the corpus, what the loader reads from it (``text``),
    and what is written when that differs (HTML markup, PDF bytes)."""

    path: str
    source: str
    text: str
    body: str | bytes | None = None

    def content(self) -> bytes:
        """What makes two documents the same: the text, stripped; for an API page, without
        its title line (a package vendored into another has its docstrings under another
        module name)."""
        text = self.text.split("\n", 1)[-1] if self.source == "python-api" else self.text
        return hashlib.sha1(text.strip().encode("utf-8")).digest()


@dataclass
class Found:
    """What one task produced: documents of one source, and what it left out by reason."""

    source: str
    docs: list[Doc] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)

    def add(self, path: str, text: str, body: str | bytes | None = None) -> None:
        """Add the document at ``path`` unless it is no usable one (counted by reason)."""
        names = path.split("/")
        reason = unusable(text)
        if reason is None and not loadable(names[-1]):
            reason = "not a type the loader reads"
        if reason is None and any(n.startswith(".") or len(n.encode()) > 200 for n in names):
            reason = "hidden or too long a name"
        if reason is not None:
            self.left_out[reason] += 1
        else:
            self.docs.append(Doc(path, self.source, text, body))


@dataclass(frozen=True)
class Sources:
    """Where each source is read from (None: not used). ``python`` pairs a folder name in the
    corpus with an installation folder (site-packages, or a standard library, whose own
    site-packages is another entry); ``man`` is a folder of ``man<N>`` sections."""

    scifact: Path | None = None
    chunking: Path | None = None
    python: tuple[tuple[str, Path], ...] = ()
    debian: Path | None = None
    man: Path | None = None

    @classmethod
    def machine(cls) -> Sources:
        """This machine's: the shared datasets beside the repository, the Python packages of
        this environment, of the system Pythons and of the Google Cloud SDK, /usr/share/doc and
        /usr/share/man (those that exist)."""
        import sysconfig

        base = Path(sysconfig.get_paths(vars={"base": sys.base_prefix})["stdlib"])
        python = [
            ("venv", Path(sysconfig.get_paths()["purelib"])),
            ("system", base),
            ("system-site-packages", base / "site-packages"),
            ("debian", Path("/usr/lib/python3/dist-packages")),
            ("debian-stdlib", Path(f"/usr/lib/python3.{sys.version_info.minor}")),
            ("google-cloud-sdk", Path("/usr/lib/google-cloud-sdk/lib")),
        ]
        seen: set[Path] = set()
        kept = []
        for name, path in python:
            if path.is_dir() and path.resolve() not in seen:
                seen.add(path.resolve())
                kept.append((name, path))
        scifact = SHARED / "beir" / "scifact"
        chunking = SHARED / "chunking_evaluation" / "corpora"
        doc, man = Path("/usr/share/doc"), Path("/usr/share/man")
        return cls(
            scifact=scifact if scifact.is_dir() else None,
            chunking=chunking if chunking.is_dir() else None,
            python=tuple(kept),
            debian=doc if doc.is_dir() else None,
            man=man if man.is_dir() and shutil.which("groff") else None,
        )

    def describe(self) -> dict[str, Any]:
        """The sources as JSON for the manifest."""
        return {
            "scifact": str(self.scifact) if self.scifact else None,
            "chunking": str(self.chunking) if self.chunking else None,
            "python": {name: str(path) for name, path in self.python},
            "debian": str(self.debian) if self.debian else None,
            "man": str(self.man) if self.man else None,
        }


# -- checks and cuts -----------------------------------------------------------------------------


def loadable(name: str) -> bool:
    """Whether the document loader reads a file named ``name`` (by extension, or as text)."""
    return Path(name).suffix.lower() in BY_EXTENSION or extensionless(name)


def doc_name(name: str) -> str | None:
    """The name a documentation file ``name`` is written under (``.gz`` dropped), or None when
    it is no documentation file."""
    if name.startswith("."):
        return None
    inner = name[:-3] if name.endswith(".gz") else name
    suffix = Path(inner).suffix.lower()
    if suffix in DOC_EXTENSIONS:
        return inner
    if (
        inner.split(".")[0].lower() in DOC_NAMES
        and suffix not in (".gz", ".pdf")
        and loadable(inner)
    ):
        return inner
    return None


def unusable(text: str) -> str | None:
    """Why ``text`` is no document (too short, not prose), or None when it is one."""
    stripped = text.strip()
    if len(stripped) < MIN_CHARS:
        return "too short"
    head = stripped[:8192]
    if "\0" in stripped:  # the loaders read a file holding a NUL byte as binary
        return "not prose"
    if sum(c.isprintable() or c.isspace() for c in head) < 0.95 * len(head):
        return "not prose"
    lines = [line for line in stripped.split("\n") if line.strip()]
    wordy = sum(len(_WORD.findall(line)) >= 3 for line in lines)
    letters = sum(map(str.isalpha, stripped))
    solid = len(stripped) - sum(map(str.isspace, stripped))
    if wordy < 0.3 * len(lines) or letters < 0.5 * solid:
        return "not prose"
    return None


def cut(text: str, targets: Iterator[int]) -> list[str]:
    """``text`` in consecutive parts, each about the next of ``targets`` long: cut at a
    top-level heading (Markdown ``#``, wikitext ``= Title =``) when one starts a new part,
    else at the paragraph break, line break, sentence end or space nearest the target."""
    parts, start = [], 0
    while start < len(text):
        target = next(targets)
        rest = len(text) - start
        end = len(text) if rest <= target * 3 // 2 else _cut_at(text, start, target)
        part = text[start:end].strip()
        if part:
            parts.append(part)
        start = end
    return parts


def _cut_at(text: str, start: int, target: int) -> int:
    """Where the part that begins at ``start`` ends, about ``target`` characters on."""
    low, high = start + target // 2, min(start + target * 3 // 2, start + MAX_CHARS)
    heading = _HEADING.search(text, start + MIN_CHARS, high)
    if heading is not None and heading.start() > start:
        return heading.start()
    aim = start + target
    for pattern in _BREAKS:
        ends = [m.end() for m in pattern.finditer(text, low, high)]
        if ends:
            return min(ends, key=lambda end: abs(end - aim))
    return aim


def parts(name: str, text: str) -> list[tuple[str, str]]:
    """``(name, text)``, or when the text is longer than ``MAX_CHARS`` its parts, named
    ``stem.part-01.ext`` (``copyright-part-01`` for a file without a type suffix)."""
    if len(text) <= MAX_CHARS:
        return [(name, text)]
    pieces = cut(text, _constant(PART_CHARS))
    suffix = Path(name).suffix
    if suffix.lower() in BY_EXTENSION:
        stem = name[: -len(suffix)]
        return [(f"{stem}.part-{i:02d}{suffix}", p) for i, p in enumerate(pieces, 1)]
    return [(f"{name}-part-{i:02d}", p) for i, p in enumerate(pieces, 1)]


def _constant(value: int) -> Iterator[int]:
    while True:
        yield value


def _sizes(rng: random.Random) -> Iterator[int]:
    """Seeded log-normal document sizes (``REPORT_SIZE``)."""
    median, sigma, low, high = REPORT_SIZE
    while True:
        yield int(min(high, max(low, rng.lognormvariate(math.log(median), sigma))))


def _decode(data: bytes) -> str | None:
    """UTF-8 text (a BOM dropped, ``\\n`` newlines), or None for binary or other encodings."""
    if b"\0" in data[:8192]:
        return None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read(path: Path) -> bytes | None:
    """A file's bytes (gzip'd ones decompressed), or None when it is too large to be a
    document or cannot be read."""
    try:
        if path.stat().st_size > MAX_INPUT:
            return None
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as file:
                data = file.read(MAX_INPUT + 1)
            return data if len(data) <= MAX_INPUT else None
        return path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


# -- sources --------------------------------------------------------------------------------------


def _scifact(folder: Path) -> Found:
    """SciFact's abstracts, one file each, the title on the first line."""
    found = Found("scifact")
    name = "corpus.jsonl.gz" if (folder / "corpus.jsonl.gz").is_file() else "corpus.jsonl"
    opener = gzip.open if name.endswith(".gz") else open
    with opener(folder / name, "rt", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            title, body = record.get("title", "").strip(), record.get("text", "").strip()
            text = f"{title}\n\n{body}\n" if title else f"{body}\n"
            found.add(f"scifact/{record['_id']}.txt", text)
    return found


def _reports(path: Path, seed: int) -> Found:
    """One chunking-evaluation corpus cut into documents of seeded sizes."""
    found = Found("reports")
    data = _read(path)
    text = _decode(data) if data is not None else None
    if text is None:
        found.left_out["unreadable"] += 1
        return found
    sizes = _sizes(random.Random(f"{seed}:{path.name}"))
    for i, piece in enumerate(cut(text, sizes), 1):
        found.add(f"reports/{path.stem}/{path.stem}-{i:04d}{path.suffix}", piece)
    return found


def _python_files(where: str, root: str, rels: Sequence[str]) -> Found:
    """API pages of the docstrings of Python modules ``rels`` under ``root``."""
    found = Found("python-api")
    for rel in rels:
        data = _read(Path(root, rel))
        source = _decode(data) if data is not None else None
        try:
            tree = ast.parse(source or "")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            found.left_out["not parsed"] += 1
            continue
        if source is None:
            found.left_out["unreadable"] += 1
            continue
        folder = os.path.dirname(rel)
        for name, page in api_pages(module_name(rel), tree):
            for part_name, part in parts(
                f"python/{where}/{folder}/{name}".replace("//", "/"), page
            ):
                found.add(part_name, part)
    return found


def module_name(rel: str) -> str:
    """The dotted name of the module at ``rel`` (``a/b/__init__.py``: ``a.b``)."""
    parts = rel[: -len(".py")].split("/")
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def api_pages(module: str, tree: ast.Module) -> list[tuple[str, str]]:
    """Markdown pages of a module's docstrings, laid out as API references are: a page for
    each public class with at least ``MIN_CHARS`` characters of docstrings (its own and its
    public methods'), for each public function with at least ``FUNCTION_PAGE``, and the
    module's page (its docstring, the smaller classes and functions as sections); a page with
    fewer than ``MIN_CHARS`` is left out. Named ``<module>.md``, ``<module>.<name>.md``."""
    module_page = [(f"# {module}", ast.get_docstring(tree) or "")]
    pages = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if not _public(node.name):
            continue
        if isinstance(node, ast.ClassDef):
            entries = _class_entries(node)
            own = sum(len(doc) for _, doc in entries) >= MIN_CHARS
        else:
            entries = [(f"{node.name}({_arguments(node)})", ast.get_docstring(node) or "")]
            own = len(entries[0][1]) >= FUNCTION_PAGE
        if own:
            page = [(f"# {module}.{entries[0][0] or node.name}", entries[0][1])]
            page += [(f"## {node.name}.{head}", doc) for head, doc in entries[1:]]
            pages.append((f"{module}.{node.name}.md", page))
        elif any(doc for _, doc in entries):
            module_page.append((f"## {entries[0][0] or node.name}", entries[0][1]))
            module_page += [(f"### {node.name}.{head}", doc) for head, doc in entries[1:]]
    pages.insert(0, (f"{module}.md", module_page))
    return [
        (name, "\n\n".join(f"{head}\n\n{doc}" if doc else head for head, doc in page) + "\n")
        for name, page in pages
        if sum(len(doc) for _, doc in page) >= MIN_CHARS
    ]


def _public(name: str) -> bool:
    return not name.startswith("_") or name in ("__init__", "__call__")


def _arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    try:
        return ast.unparse(node.args)
    except (ValueError, RecursionError):
        return "..."


def _class_entries(node: ast.ClassDef) -> list[tuple[str, str]]:
    """A class's docstring (heading "", maybe empty) and its public methods' that have one
    (heading ``name(args)``)."""
    entries = [("", ast.get_docstring(node) or "")]
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _public(item.name):
            doc = ast.get_docstring(item)
            if doc:
                entries.append((f"{item.name}({_arguments(item)})", doc))
    return entries


def _doc_files(prefix: str, source: str, root: str, rels: Sequence[str]) -> Found:
    """Documentation files ``rels`` under ``root``, written at ``prefix/<rel>`` (``.gz``
    dropped); a distribution's ``METADATA`` gives its description as ``METADATA.md`` (or
    ``.rst`` / ``.txt``, by its content type)."""
    found = Found(source)
    for rel in rels:
        path = Path(root, rel)
        if path.name == "METADATA":
            _metadata(found, f"{prefix}/{rel}", path)
            continue
        data = _read(path)
        name = doc_name(path.name)
        if data is None or name is None:
            found.left_out["unreadable"] += 1
            continue
        target = f"{prefix}/{os.path.dirname(rel)}/{name}".replace("//", "/")
        if name.lower().endswith(".pdf"):
            _pdf(found, target, data)
            continue
        text = _decode(data)
        if text is None:
            found.left_out["binary or not UTF-8"] += 1
        elif name.lower().endswith((".html", ".htm")):
            found.add(target, html_text(text)[0], body=text)
        else:
            for part_name, part in parts(target, text):
                found.add(part_name, part)
    return found


def _metadata(found: Found, target: str, path: Path) -> None:
    """A distribution's long description (the body of its ``METADATA``)."""
    from email.parser import BytesParser
    from email.policy import compat32

    data = _read(path)
    if data is None:
        found.left_out["unreadable"] += 1
        return
    message = BytesParser(policy=compat32).parsebytes(data)
    payload = message.get_payload(decode=True)
    text = _decode(payload) if isinstance(payload, bytes) else None
    if not text:
        text = message.get("Description") or ""
    kind = (message.get("Description-Content-Type") or "").lower()
    extension = ".md" if "markdown" in kind else ".rst" if "rst" in kind else ".txt"
    for part_name, part in parts(target + extension, text):
        found.add(part_name, part)


def _pdf(found: Found, target: str, data: bytes) -> None:
    """A PDF, when it is small enough to check and has text (written as it is, never cut)."""
    if len(data) > MAX_PDF:
        found.left_out["too large"] += 1
        return
    import io
    import logging

    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        text = "\n\n".join(page.extract_text() for page in PdfReader(io.BytesIO(data)).pages)
    except Exception:  # pypdf raises many types on malformed input
        found.left_out["unreadable PDF"] += 1
        return
    found.add(target, text, body=data)


def _man_pages(root: str, rels: Sequence[str]) -> Found:
    """Manual pages rendered as text by groff, without their header and footer lines: the
    plain ones (``plain``) in one call, the others one by one (mdoc(7) ones with them)."""
    found = Found("man")
    pages: list[tuple[str, str]] = []
    for rel in rels:
        data = _read(Path(root, rel))
        if data is None or b"\0" in data[:8192]:
            found.left_out["unreadable"] += 1
            continue
        try:
            source = data.decode("utf-8")
        except UnicodeDecodeError:
            source = data.decode("latin-1")
        if source.lstrip().startswith(".so "):
            found.left_out["alias"] += 1
            continue
        name = Path(rel).name.removesuffix(".gz")
        pages.append((f"man/{os.path.dirname(rel)}/{name}.txt", source))
    together = [(path, source) for path, source in pages if plain(source)]
    texts = dict(zip([p for p, _ in together], _groff_pages([s for _, s in together]), strict=True))
    for path, source in pages:
        if path in texts:
            text = texts[path]
        else:
            text = _groff(source) if _mdoc(source) else _groff_pages([source])[0]
        if text is None:
            found.left_out["not rendered"] += 1
        else:
            found.add(path, text)
    return found


def plain(source: str) -> bool:
    """Whether a manual page uses only man(7) macros and requests that change no state a
    later page would see (``PLAIN_REQUESTS``): such pages render in one groff run as each
    alone does."""
    return all(name in PLAIN_REQUESTS for name in _REQUEST.findall(source))


def _mdoc(source: str) -> bool:
    """Whether a manual page is written in mdoc(7) (``.Dd`` before any ``.TH``)."""
    for line in source.split("\n"):
        if line.startswith((".TH", "'TH")):
            return False
        if line.startswith(".Dd"):
            return True
    return False


def _groff_pages(sources: Sequence[str]) -> list[str | None]:
    """Plain manual pages as text in one groff call (a call per page costs ten times more
    than rendering it): the man macros are loaded first (``an-old``, which ``-man`` would load
    at the first page), each page's header line (macro ``PT``) is redefined to print
    ``_PAGE`` and the footer (``BT``) to print nothing, and the output is split at those
    lines; when the count is off, the pages are rendered one by one (a page that will not
    split, with its header and footer)."""
    if not sources:
        return []
    setup = f".mso an-old.tmac\n.de1 PT\n.tl '{_PAGE}'''\n..\n.de1 BT\n..\n"
    out = _groff(setup + "".join(s.rstrip("\n") + "\n" for s in sources), clean=False)
    pieces = out.split(_PAGE + "\n") if out is not None else []
    if len(pieces) == len(sources) + 1:
        return [_clean(piece) for piece in pieces[1:]]
    if len(sources) == 1:
        return [_groff(sources[0])]  # with its header and footer
    return [text for source in sources for text in _groff_pages([source])]


def _groff(source: str, clean: bool = True) -> str | None:
    """A manual page (man(7), or mdoc(7) when it starts with ``.Dd``) rendered by groff as
    plain UTF-8 text: no bold, underline or colour, no hyphenation, ``LINE_LENGTH`` wide."""
    macros = "-mdoc" if _mdoc(source) else "-man"
    command = ["groff", "-t", macros, "-Tutf8", "-P-cbou", "-Wall", "-Kutf-8"]
    command += [f"-rLL={LINE_LENGTH}", "-rHY=0"]
    try:
        done = subprocess.run(
            command,
            input=source.encode("utf-8"),
            capture_output=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    text = done.stdout.decode("utf-8", "replace")
    return _clean(text) if clean else text


def _clean(text: str) -> str:
    """Rendered text without the spaces that justify its lines, trailing spaces or runs of
    blank lines."""
    lines = "\n".join(_JUSTIFIED.sub(" ", line).rstrip() for line in text.split("\n"))
    return _BLANK_RUNS.sub("\n\n", lines).strip("\n") + "\n"


# -- walks and collection ------------------------------------------------------------------------

Task = tuple[Callable[..., Found], tuple[Any, ...]]
_MAN_PAGE = re.compile(r"man\d[^/]*/[^/]+\.\d\w*(?:\.gz)?")


def _walk(root: Path) -> Iterator[str]:
    """Relative POSIX paths of the regular files under ``root`` (no links, no hidden entries,
    no ``SKIP_DIRS``), in sorted order."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(folder, name)
            if not name.startswith(".") and not os.path.islink(path) and os.path.isfile(path):
                yield os.path.relpath(path, root).replace(os.sep, "/")


def _batches(
    function: Callable[..., Found], head: tuple[Any, ...], rels: list[str], size: int
) -> list[Task]:
    """Tasks of ``function(*head, batch)`` over ``rels`` in batches of ``size``."""
    return [(function, (*head, rels[i : i + size])) for i in range(0, len(rels), size)]


def tasks(sources: Sources, seed: int) -> list[Task]:
    """Every unit of work, in the order their documents come (sorted walks)."""
    work: list[Task] = []
    if sources.scifact is not None:
        work.append((_scifact, (sources.scifact,)))
    if sources.chunking is not None:
        for path in sorted(sources.chunking.iterdir()):
            if path.is_file() and path.suffix.lower() in (".md", ".txt"):
                work.append((_reports, (path, seed)))
    for where, root in sources.python:
        modules, docs = [], []
        for rel in _walk(root):
            name = rel.rsplit("/", 1)[-1]
            if name.endswith(".py"):
                modules.append(rel)
            elif doc_name(name) or (name == "METADATA" and ".dist-info/" in rel):
                docs.append(rel)
        head = (f"python/{where}", "python-docs", str(root))
        work += _batches(_doc_files, head, docs, BATCH)
        work += _batches(_python_files, (where, str(root)), modules, BATCH)
    if sources.debian is not None:
        docs = [rel for rel in _walk(sources.debian) if doc_name(rel.rsplit("/", 1)[-1])]
        work += _batches(_doc_files, ("debian", "debian", str(sources.debian)), docs, BATCH)
    if sources.man is not None:
        pages = [rel for rel in _walk(sources.man) if _MAN_PAGE.fullmatch(rel)]
        work += _batches(_man_pages, (str(sources.man),), pages, MAN_BATCH)
    return work


def _run(task: Task) -> Found:
    function, args = task
    return function(*args)


def collect(
    sources: Sources, seed: int, workers: int
) -> tuple[dict[str, list[Doc]], dict[str, Counter[str]]]:
    """Every document the sources give, by source, in walk order: a text met before (stripped)
    or a path taken before is left out. Also what was left out, by source and reason."""
    work = tasks(sources, seed)
    by_source: dict[str, list[Doc]] = {source: [] for source in SOURCES}
    left_out: dict[str, Counter[str]] = {source: Counter() for source in SOURCES}
    texts: set[bytes] = set()
    paths: set[str] = set()
    with ProcessPoolExecutor(max_workers=workers) if workers > 1 else _Serial() as pool:
        for found in pool.map(_run, work, chunksize=1):
            left_out[found.source].update(found.left_out)
            for doc in found.docs:
                key = doc.content()
                if key in texts:
                    left_out[doc.source]["duplicate text"] += 1
                elif doc.path in paths:
                    left_out[doc.source]["duplicate path"] += 1
                else:
                    texts.add(key)
                    paths.add(doc.path)
                    by_source[doc.source].append(doc)
    return by_source, left_out


class _Serial:
    """``map`` in this process, for one worker."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(
        self, function: Callable[[Task], Found], items: Iterable[Task], chunksize: int = 1
    ) -> Iterator[Found]:
        return map(function, items)


def sample(by_source: dict[str, list[Doc]], documents: int | None, seed: int) -> list[Doc]:
    """``documents`` of them (None: all), each source's share kept (largest remainders): a
    seeded sample within each source."""
    total = sum(len(docs) for docs in by_source.values())
    if documents is None or documents == total:
        return [doc for source in SOURCES for doc in by_source[source]]
    if documents > total:
        raise ConfigError(
            f"--documents {documents}: the sources on this machine give {total:,} documents; "
            "ask for at most that many, or all"
        )
    shares = {s: documents * len(docs) / total for s, docs in by_source.items()}
    quotas = {s: int(share) for s, share in shares.items()}
    by_remainder = sorted(SOURCES, key=lambda s: (quotas[s] - shares[s], SOURCES.index(s)))
    for source in by_remainder[: documents - sum(quotas.values())]:
        quotas[source] += 1
    rng = random.Random(seed)
    kept = []
    for source in SOURCES:
        docs = by_source[source]
        kept += [docs[i] for i in sorted(rng.sample(range(len(docs)), quotas[source]))]
    return kept


# -- the folder -----------------------------------------------------------------------------------


def prepare(out: Path) -> Path:
    """``out`` ready for a corpus: made when new, kept when empty, emptied of an earlier
    corpus this script wrote there (the files its list names, and the folders they leave
    empty); any other folder is refused (``ConfigError``), nothing in it touched."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        listed = out / FILES
        if listed.is_file():
            _remove_listed(out, listed.read_text("utf-8").splitlines())
            (out / MANIFEST).unlink(missing_ok=True)
            listed.unlink()
        entries = sorted(os.listdir(out))
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None
    if entries:
        shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if entries[3:] else "")
        raise ConfigError(
            f"--out {out}: holds files this script did not write ({shown}); give a new or "
            "empty folder for the corpus"
        )
    return out


def _remove_listed(out: Path, rels: Iterable[str]) -> None:
    """Delete the files ``rels`` (relative paths inside ``out``), then the folders of theirs
    that are left empty, deepest first."""
    folders: set[str] = set()
    for rel in rels:
        clean = os.path.normpath(rel)
        if not rel or os.path.isabs(clean) or clean.split(os.sep)[0] in ("..", "."):
            continue
        (out / clean).unlink(missing_ok=True)
        parent = os.path.dirname(clean)
        while parent and parent not in folders:
            folders.add(parent)
            parent = os.path.dirname(parent)
    for folder in sorted(folders, key=lambda f: f.count(os.sep), reverse=True):
        path = out / folder
        if path.is_dir() and not path.is_symlink() and not any(path.iterdir()):
            path.rmdir()


def write(out: Path, docs: Sequence[Doc]) -> list[int]:
    """Write ``docs`` under ``out`` (each listed in ``FILES`` before it is written); their
    sizes in bytes."""
    sizes = []
    made: set[str] = set()
    with open(out / FILES, "w", encoding="utf-8") as listing:
        for doc in sorted(docs, key=lambda d: d.path):
            listing.write(doc.path + "\n")
            listing.flush()
            folder = os.path.dirname(doc.path)
            if folder not in made:
                (out / folder).mkdir(parents=True, exist_ok=True)
                made.add(folder)
            body = doc.text if doc.body is None else doc.body
            data = body.encode("utf-8") if isinstance(body, str) else body
            (out / doc.path).write_bytes(data)
            sizes.append(len(data))
    return sizes


def extension(path: str) -> str:
    """A file's type as the loader sees it: its loader's suffix, or ``(none)``."""
    suffix = Path(path).suffix.lower()
    return suffix if suffix in BY_EXTENSION else "(none)"


def percentiles(values: Sequence[int]) -> dict[str, int]:
    """Nearest-rank percentiles (1, 10, 25, 50, 75, 90, 99), the mean and the largest."""
    ordered = sorted(values)
    if not ordered:
        return {}
    n = len(ordered)
    found = {
        f"p{q}": ordered[min(n - 1, math.ceil(q / 100 * n) - 1)]
        for q in (1, 10, 25, 50, 75, 90, 99)
    }
    return {**found, "mean": round(sum(ordered) / n), "max": ordered[-1], "total": sum(ordered)}


def build(
    out: Path,
    documents: int | None = DOCUMENTS,
    seed: int = 0,
    sources: Sources | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Build the corpus in ``out`` (new, empty, or an earlier corpus of this script's) from
    ``sources`` (default: this machine's); ``documents`` None keeps every document. Returns
    the manifest it writes."""
    sources = sources or Sources.machine()
    prepare(out)
    by_source, left_out = collect(sources, seed, workers or min(2, os.cpu_count() or 1))
    chosen = sample(by_source, documents, seed)
    sizes = write(out, chosen)
    size_of = dict(zip(sorted(d.path for d in chosen), sizes, strict=True))
    counts = Counter(doc.source for doc in chosen)
    manifest = {
        "made_by": "benchmarks.corpus",
        "seed": seed,
        "requested": documents if documents is not None else "all",
        "documents": len(chosen),
        "available": sum(len(docs) for docs in by_source.values()),
        "bytes": percentiles(sizes),
        "folders": len({os.path.dirname(doc.path) for doc in chosen}),
        "sources": {
            source: {
                "documents": counts[source],
                "available": len(by_source[source]),
                "bytes": sum(size_of[d.path] for d in chosen if d.source == source),
                "left_out": dict(sorted(left_out[source].items())),
            }
            for source in SOURCES
        },
        "extensions": dict(sorted(Counter(extension(doc.path) for doc in chosen).items())),
        "read_from": sources.describe(),
        "python": sys.version.split()[0],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    parser.add_argument(
        "--documents",
        default=str(DOCUMENTS),
        help=f"documents to keep, a seeded sample (default {DOCUMENTS}), or 'all'",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        documents = None if args.documents == "all" else int(args.documents)
        if documents is not None and documents < 1:
            raise ValueError
    except ValueError:
        print(f"--documents {args.documents}: expected a positive number or 'all'", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        manifest = build(args.out, documents, args.seed)
    except (ConfigError, DataError) as exc:
        print(exc, file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    size = manifest["bytes"]
    print(
        f"{manifest['documents']:,} documents of {manifest['available']:,} "
        f"({size.get('total', 0) / 1e6:,.1f} MB, median {size.get('p50', 0):,} bytes) "
        f"in {manifest['folders']:,} folders, written to {args.out} in {seconds:.0f} s"
    )
    for source, figures in manifest["sources"].items():
        print(f"  {source:12} {figures['documents']:>8,} of {figures['available']:>8,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
