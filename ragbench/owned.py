"""Folders ragbench writes are its own: it writes only into a folder it made for the same use
(or an empty one it then takes), never deletes or replaces what it did not write, and never reads
its own outputs as input.

A folder ragbench makes — a run directory, a report folder, a generated labeled set, a
collection, a downloaded set — holds a marker file, ``MARKER``: a JSON object that says ragbench
made it and ``what`` it holds, and ``of`` what, when that matters (a report folder: the run it
reports); a file of that name with anything else in it is the user's. ``claim`` takes a folder
for writing: a new or empty one is marked, one marked for the same use (of the same thing) is
ours already, and any other is refused with one line naming the flag that gave it. ``seal``
records the size and SHA-256 of each file ragbench wrote into a folder; ``remove`` deletes a
folder only when it is ours and sealed and every file in it is as ragbench wrote it (a set
judged or edited by hand stays), and ``added`` names the files a person put into it.
``writable_file`` replaces no existing file but the command's own output, and the folder walk of
the loaders skips marked folders (``owned``), so documents never include a report or a labeled
set ragbench wrote among them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ragbench.errors import ConfigError, describe, path_problem

__all__ = [
    "MARKER",
    "added",
    "changed",
    "claim",
    "mark",
    "marker",
    "owned",
    "remove",
    "seal",
    "stream",
    "writable_file",
]

MARKER = ".ragbench"
"""The file that says ragbench made the folder it is in (JSON: what the folder holds, and once
sealed the size and SHA-256 of each file ragbench wrote)."""

StrPath = str | os.PathLike[str]

# the names of this process's own open streams: output the shell opened for the command
_STREAMS = re.compile(r"/dev/(stdout|stderr|fd/\d+)|/proc/self/fd/\d+")


def marker(folder: StrPath) -> dict[str, Any] | None:
    """What the marker in ``folder`` records (``what``, and ``files`` once sealed) when
    ragbench wrote it; None without one, or when a file of the user's has its name."""
    path = Path(folder) / MARKER
    try:
        if not path.is_file():
            return None
        record = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    ours = isinstance(record, dict) and record.get("made_by") == "ragbench"
    return record if ours and isinstance(record.get("what"), str) else None


def owned(folder: StrPath, what: str | None = None) -> bool:
    """Whether ragbench made ``folder`` (it holds ragbench's marker) — for ``what``, if given."""
    record = marker(folder)
    return record is not None and (what is None or record["what"] == what)


def _write(folder: Path, record: dict[str, Any]) -> None:
    (folder / MARKER).write_text(json.dumps({"made_by": "ragbench", **record}), "utf-8")


def mark(folder: StrPath, what: str, of: str | None = None) -> None:
    """Mark ``folder`` (which exists) as made by ragbench; ``what`` says what it holds, and
    ``of`` (when given) of what: the run a report folder reports."""
    _write(Path(folder), {"what": what} if of is None else {"what": what, "of": of})


def _entries(folder: Path) -> dict[str, Path]:
    """Every entry under ``folder`` that is not a folder (links not followed), by its path
    relative to it; the marker at its top is not one."""
    found = {}
    for top, folders, files in os.walk(folder):
        for name in files + [f for f in folders if os.path.islink(os.path.join(top, f))]:
            path = Path(top, name)
            found[path.relative_to(folder).as_posix()] = path
    found.pop(MARKER, None)
    return found


def _fingerprint(path: Path) -> list[Any] | None:
    """``[size, sha256]`` of a regular file; None for anything else (a link, a pipe)."""
    if not stat.S_ISREG(path.lstat().st_mode):
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(partial(handle.read, 1 << 20), b""):
            digest.update(block)
    return [path.lstat().st_size, digest.hexdigest()]


def seal(folder: StrPath, what: str) -> None:
    """Mark ``folder`` as ragbench's ``what`` and record the size and SHA-256 of every file in
    it, as ragbench wrote them, so that ``remove`` can tell whether a person changed any."""
    path = Path(folder)
    files = {name: _fingerprint(file) for name, file in sorted(_entries(path).items())}
    _write(path, {"what": what, "files": files})


def _how(sealed: Any, found: Path | None) -> str | None:
    """How a file differs from its seal (``sealed``, None for a file ragbench did not write),
    or None when it matches."""
    if sealed is None:
        return "was added"
    if found is None:
        return "is missing"
    return None if _fingerprint(found) == sealed else "changed"


def changed(folder: StrPath) -> str | None:
    """Why ``folder`` is not as ragbench wrote it — not ragbench's, never sealed, a file
    changed, added or missing since — in words; None when every file matches its seal."""
    path = Path(folder)
    record = marker(path)
    if record is None:
        return "ragbench did not make it"
    sealed = record.get("files")
    if not isinstance(sealed, dict):
        return "ragbench keeps no record of the files it wrote there"
    try:
        found = _entries(path)
        differ = [
            f"{name} {how}"
            for name in sorted(set(sealed) | set(found))
            if (how := _how(sealed.get(name), found.get(name))) is not None
        ]
    except OSError as exc:
        return f"it cannot be read ({describe(exc, path)})"
    if not differ:
        return None
    more = f" (and {len(differ) - 1} more)" if differ[1:] else ""
    return f"{differ[0]} since ragbench wrote it{more}"


def added(folder: StrPath) -> list[str]:
    """The files under ``folder`` (relative paths) that ragbench did not write there: those
    its seal does not record, or every file when it was never sealed."""
    record = marker(folder)
    sealed = record.get("files") if record is not None else None
    return [
        name
        for name in _entries(Path(folder))
        if not isinstance(sealed, dict) or name not in sealed
    ]


def remove(folder: StrPath) -> str | None:
    """Delete ``folder`` when ragbench made it and every file in it is as ragbench sealed it
    (``seal``): a set a person judged, edited or added to stays. Returns None when it deleted
    the folder, else why the folder stays (``changed``)."""
    path = Path(folder)
    if path.is_symlink() or not path.is_dir():
        return "not a folder"
    why = changed(path)
    if why is None:
        shutil.rmtree(path)
    return why


def claim(
    folder: StrPath,
    flag: str,
    what: str,
    earlier: Callable[[Path], bool] | None = None,
    of: str | None = None,
) -> Path:
    """``folder``, made (with its parents) or taken for writing ``what`` (of ``of``, when given:
    the run a report reports): a new or empty folder is marked, one ragbench marked for the
    same use is ours already (unless its marker names another ``of``), and one for
    which ``earlier`` says an older ragbench made it (a run directory by its manifest) is marked
    now. Any other folder — the user's, or one ragbench made for another use (a collection is no
    run directory, a comparison no report), or the ``what`` of another ``of`` — is refused:
    ``ConfigError`` naming ``flag``, and nothing is written."""
    path = Path(folder)
    problem = path_problem(path)
    if problem is not None:
        raise ConfigError(f"{flag} {path}: {problem}")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path}: is a file, not a folder")
    record = marker(path)
    if record is not None and record["what"] != what:
        raise ConfigError(
            f"{flag} {path}: a folder ragbench made for another use ({record['what']}); give a "
            f"new or empty folder for the {what}"
        )
    if record is not None and of is not None and record.get("of") not in (None, of):
        raise ConfigError(
            f"{flag} {path}: holds the {what} of {record['of']}; give {flag} a new or empty "
            f"folder for the {what} of {of}"
        )
    if record is not None and (of is None or record.get("of") == of):
        return path
    try:  # a new or empty folder, or ours from before its marker said what it holds of
        path.mkdir(parents=True, exist_ok=True)
        entries = sorted(entry.name for entry in path.iterdir())
        # a marker file in a folder without ours is the user's
        if record is None and entries and (MARKER in entries or not (earlier and earlier(path))):
            shown = ", ".join(entries[:3]) + (
                f" and {len(entries) - 3} more" if entries[3:] else ""
            )
            raise ConfigError(
                f"{flag} {path}: holds files ragbench did not write ({shown}); give a new or "
                f"empty folder for the {what}"
            )
        mark(path, what, of)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write there ({describe(exc, path)})") from None
    return path


def stream(path: StrPath) -> bool:
    """Whether ``path`` names a stream rather than a file kept on disk: a terminal or another
    character device, a pipe, a socket, or one of this process's open streams (``/dev/stdout``,
    ``/dev/fd/N``: output the shell opened for the command)."""
    if _STREAMS.fullmatch(os.path.abspath(path)):
        return True
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def writable_file(path: StrPath, flag: str, own: StrPath | None = None) -> Path:
    """``path`` for a file ragbench writes: a new file, a stream (``stream``: ``/dev/stdout``,
    a pipe), or ``own``, the command's own output written again. Any other existing file — the
    user's, an input, another output ragbench wrote — is kept: ``ConfigError`` naming
    ``flag``, as for a symbolic link loop or a dangling link."""
    file = Path(path)
    problem = path_problem(file)
    if problem is not None:
        raise ConfigError(f"{flag} {file}: {problem}")
    if not os.path.lexists(file) or stream(file):
        return file
    if file.is_dir():
        raise ConfigError(f"{flag} {file}: is a folder, not a file")
    if own is not None and os.path.lexists(own) and os.path.samefile(file, own):
        return file
    if not file.is_file():
        raise ConfigError(f"{flag} {file}: not a file ragbench can write (a device)")
    mine = f", and is not this command's own output ({own})" if own else ""
    raise ConfigError(f"{flag} {file}: exists{mine}; give a new file name")
