"""Reading a file as text: only regular files, UTF-8 (a BOM dropped), ``\\n`` newlines.

``\\r\\n`` / ``\\r`` become ``\\n`` before a ``Document`` exists, so every character offset
downstream points into the text as loaded. A file without an extension is text when its first
bytes are (``sniff_text``).
"""

from __future__ import annotations

import codecs
import os
import re
import stat
from pathlib import Path

from ragbench.text.loaders.report import Skip, StrPath

SNIFF_BYTES = 8192  # a NUL byte in this many leading bytes marks a file as binary
NOT_REGULAR = "not a regular file"
_SPECIAL_FILES = (
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)
_NEWLINES = re.compile(r"\r\n?")
_PRINTABLE_SHARE = 0.95  # of the sniffed characters, for a file without an extension to be text
_TEXT_NAMES = frozenset(
    """readme license licence copying copyright notice authors contributors contributing
    changelog changes history news install todo thanks""".split()
)  # README.Debian, LICENSE.APACHE: the suffix is no file type


def os_reason(error: OSError) -> str:
    """The human part of an OSError ("Permission denied"), without the repeated path."""
    return error.strerror or str(error)


def not_regular(path: StrPath) -> str | None:
    """Why ``path`` (links followed) must not be read — it is no regular file — or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # reading it reports the error
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _SPECIAL_FILES if test(mode)), "special file")
    return f"not a regular file ({kind}): not read"


def utf8(data: bytes, offset: int = 0) -> str:
    """Decode strict UTF-8; ``offset`` is where ``data`` starts in its file, for the message."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Skip(f"invalid UTF-8 at byte {offset + error.start}", "invalid UTF-8") from None


def normalize_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    return _NEWLINES.sub("\n", text) if "\r" in text else text


def read_text(path: Path) -> str:
    """A text file's content, decoded and normalised; raises ``Skip`` when it is unusable."""
    try:
        with open(path, "rb") as file:
            head = file.read(SNIFF_BYTES)
            if b"\0" in head:
                raise Skip("binary file", "binary")
            data = head + file.read()
    except OSError as error:
        raise Skip(os_reason(error)) from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    text = normalize_newlines(utf8(data[bom:], bom))
    if not text.strip():
        raise Skip("empty")
    return text


def extensionless(name: str) -> bool:
    """Whether a file named ``name`` has no extension that says its type: none at all, or a
    conventional plain-text name with a suffix (``README.Debian``, ``LICENSE.APACHE``)."""
    return Path(name).suffix == "" or name.split(".")[0].lower() in _TEXT_NAMES


def sniff_text(path: StrPath) -> None:
    """Raise ``Skip`` unless the first bytes of ``path`` are text: no NUL byte, valid UTF-8,
    and mostly printable characters. A file that cannot be opened passes (reading it reports
    the error)."""
    try:
        with open(path, "rb") as file:
            head = file.read(SNIFF_BYTES)
            whole = not file.read(1)
    except OSError:
        return
    if b"\0" in head:
        raise Skip("binary file", "binary")
    bom = len(codecs.BOM_UTF8) if head.startswith(codecs.BOM_UTF8) else 0
    try:  # final=False: a multi-byte character cut at the end of the head is no error
        text = codecs.getincrementaldecoder("utf-8")().decode(head[bom:], final=whole)
    except UnicodeDecodeError as error:
        raise Skip(f"invalid UTF-8 at byte {bom + error.start}", "invalid UTF-8") from None
    shown = sum(c.isprintable() or c.isspace() for c in text)
    if shown < _PRINTABLE_SHARE * len(text):
        raise Skip("binary file (mostly unprintable characters)", "binary")
