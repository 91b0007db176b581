"""Exceptions that carry a message fit for users: what was wrong, and where (file, key, line);
``nearest_folder`` and ``writable_folder``, the checks that a folder a flag or variable gives is
one (or can be made) and can be written, before work starts."""

from __future__ import annotations

import tempfile
from pathlib import Path

__all__ = ["ConfigError", "DataError", "RagbenchError", "nearest_folder", "writable_folder"]


class RagbenchError(Exception):
    """Base class of every error ragbench raises on purpose."""


class ConfigError(RagbenchError, ValueError):
    """An invalid component spec or experiment config; the message names the key path."""


class DataError(RagbenchError, ValueError):
    """Invalid input data; the message names the file (and line) and what was expected."""


def nearest_folder(path: Path | str, name: str) -> Path:
    """The nearest existing part of ``path`` — itself, or the parent it would be made in — when
    it is a folder; else ``ConfigError`` naming ``name`` (the flag or variable that gave it) and
    the path. Creates nothing."""
    folder = Path(path)
    existing = folder
    while not existing.exists() and not existing.is_symlink() and existing.parent != existing:
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
        raise ConfigError(f"{name} {folder}: cannot write there ({exc.strerror or exc})") from None
    return folder
