"""Folders ragbench writes are its own: it writes only into a folder it made (or an empty one it
then takes), never deletes what it did not make, and never reads its own outputs as input.

A folder ragbench makes — a run directory, a report folder, a generated labeled set, a trained
model, a collection — holds a marker file, ``MARKER``. ``claim`` takes a folder for writing: a new
or empty one is marked, a marked one is ours already, and any other is refused with one line
naming the flag that gave it. ``remove`` deletes a folder only when it carries the marker, and the
folder walk of the loaders skips marked folders (``owned``), so documents never include a report
or a labeled set ragbench wrote among them.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ragbench.errors import ConfigError

__all__ = ["MARKER", "claim", "mark", "owned", "remove", "writable_file"]

MARKER = ".ragbench"
"""The file that says ragbench made the folder it is in (JSON: what the folder is)."""

StrPath = str | os.PathLike[str]


def owned(folder: StrPath) -> bool:
    """Whether ragbench made ``folder`` (it holds the marker file)."""
    return (Path(folder) / MARKER).is_file()


def mark(folder: StrPath, what: str) -> None:
    """Mark ``folder`` (which exists) as made by ragbench; ``what`` says what it holds."""
    (Path(folder) / MARKER).write_text(json.dumps({"made_by": "ragbench", "what": what}), "utf-8")


def claim(
    folder: StrPath,
    flag: str,
    what: str,
    earlier: Callable[[Path], bool] | None = None,
) -> Path:
    """``folder``, made (with its parents) or taken for writing ``what``: a new or empty folder
    is marked, a marked one is ragbench's already, and one for which ``earlier`` says an older
    ragbench made it (a run directory by its manifest) is marked now. Any other folder holds the
    user's files: ``ConfigError`` naming ``flag``, and nothing is written."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path}: is a file, not a folder")
    if owned(path):
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        entries = sorted(entry.name for entry in path.iterdir())
        if entries and not (earlier is not None and earlier(path)):
            shown = ", ".join(entries[:3]) + (
                f" and {len(entries) - 3} more" if entries[3:] else ""
            )
            raise ConfigError(
                f"{flag} {path}: holds files ragbench did not write ({shown}); give a new or "
                f"empty folder for the {what}"
            )
        mark(path, what)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None
    return path


def remove(folder: StrPath) -> bool:
    """Delete ``folder`` when ragbench made it (it holds the marker); returns whether it did."""
    path = Path(folder)
    if not path.is_dir() or path.is_symlink() or not owned(path):
        return False
    shutil.rmtree(path)
    return True


def writable_file(path: StrPath, flag: str) -> Path:
    """``path`` for a file ragbench writes: a new file, or one inside a folder ragbench made
    (its own output, written again); an existing file elsewhere is the user's and
    ``ConfigError`` names ``flag``."""
    file = Path(path)
    if file.is_dir():
        raise ConfigError(f"{flag} {file}: is a folder, not a file")
    if file.exists() and not any(owned(folder) for folder in file.resolve().parents):
        raise ConfigError(
            f"{flag} {file}: exists, and ragbench did not write it; give a new file name"
        )
    return file
