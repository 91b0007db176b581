"""Exceptions that carry a message fit for users: what was wrong, and where (file, key, line);
``path_problem``, what stops a path from being looked at, in words; ``nearest_folder`` and
``writable_folder``, the checks that a folder a flag or variable gives is one (or can be made) and
can be written, before work starts; ``command_line``, a command a message prints, that runs as
pasted."""

from __future__ import annotations

import errno
import os
import shlex
import tempfile
from pathlib import Path

__all__ = [
    "ConfigError",
    "DataError",
    "RagbenchError",
    "command_line",
    "describe",
    "nearest_folder",
    "path_problem",
    "writable_folder",
]

NAME_MAX = 255
"""The longest name of one file or folder, in bytes, that the usual file systems allow."""


class RagbenchError(Exception):
    """Base class of every error ragbench raises on purpose."""


class ConfigError(RagbenchError, ValueError):
    """An invalid component spec or experiment config; the message names the key path."""


class DataError(RagbenchError, ValueError):
    """Invalid input data; the message names the file (and line) and what was expected."""


def describe(exc: OSError, path: Path | str) -> str:
    """What an ``OSError`` met on ``path`` means, in words for a one-line message."""
    if exc.errno == errno.ENAMETOOLONG:
        if any(len(os.fsencode(part)) > NAME_MAX for part in Path(path).parts):
            return f"name too long: a part of it is over {NAME_MAX} bytes"
        return "name too long: the whole path is longer than the system allows"
    if exc.errno == errno.ELOOP:
        return "a symbolic link loop"
    return exc.strerror or str(exc)


def path_problem(path: Path | str) -> str | None:
    """Why ``path`` cannot be looked at — a name too long, a symbolic link loop, a dangling
    symbolic link, no permission — in words for a message; None when it can (it exists, or
    nothing is there, a file in the way included)."""
    if any(len(os.fsencode(part)) > NAME_MAX for part in Path(path).parts):
        return f"name too long: a part of it is over {NAME_MAX} bytes"
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if not os.path.islink(path):
            return None
        try:
            return f"a dangling symbolic link to {os.readlink(path)}"
        except OSError:
            return "a dangling symbolic link"
    except OSError as exc:
        return describe(exc, path)
    except ValueError:  # a NUL character, which no path can hold
        return "a path cannot hold a NUL character"
    return None


def nearest_folder(path: Path | str, name: str) -> Path:
    """The nearest existing part of ``path`` — itself, or the parent it would be made in — when
    it is a folder; else ``ConfigError`` naming ``name`` (the flag or variable that gave it),
    the path and what is wrong (``path_problem``: a loop, a dangling link, a name too long).
    Creates nothing."""
    folder = Path(path)
    existing = folder
    while True:
        problem = path_problem(existing)
        if problem is not None:
            part = "" if existing == folder else f"{existing}: "
            raise ConfigError(f"{name} {folder}: {part}{problem}")
        if os.path.lexists(existing) or existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        what = "" if existing == folder else f"{existing} "
        raise ConfigError(f"{name} {folder}: {what}is a file, not a folder")
    return existing


def writable_folder(path: Path | str, name: str) -> Path:
    """``path`` when it is a folder this process can write into, or one it can create (its
    nearest existing parent is such a folder); else ``ConfigError`` naming ``name`` (the flag
    or variable that gave it) and the path. Creates nothing."""
    folder = Path(path)
    existing = nearest_folder(folder, name)
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise ConfigError(
            f"{name} {folder}: cannot write there ({describe(exc, existing)})"
        ) from None
    return folder


def command_line(command: str, *paths: object, **options: object) -> str:
    """``command`` (its words, as they are: ``"ragbench ingest"``) with ``paths`` and
    ``options`` for a message to print, so that it runs as pasted into a POSIX shell whatever
    the values: each word quoted (``shlex.quote``), an option written ``--flag=value`` (a
    value that starts with ``-`` stays the flag's value; ``from_run`` is ``--from-run``, True
    a bare flag, a list the flag once per value) and a relative path that starts with ``-``
    written ``./-...`` (no option)."""
    words = [command]
    for path in map(str, paths):
        words.append(shlex.quote(f"./{path}" if path.startswith("-") else path))
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        for one in value if isinstance(value, list) else [value]:
            words.append(flag if one is True else shlex.quote(f"{flag}={one}"))
    return " ".join(words)
