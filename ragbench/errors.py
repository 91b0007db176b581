"""Exceptions that carry a message fit for users: what was wrong, and where (file, key, line)."""

from __future__ import annotations

__all__ = ["ConfigError", "DataError", "RagbenchError"]


class RagbenchError(Exception):
    """Base class of every error ragbench raises on purpose."""


class ConfigError(RagbenchError, ValueError):
    """An invalid component spec or experiment config; the message names the key path."""


class DataError(RagbenchError, ValueError):
    """Invalid input data; the message names the file (and line) and what was expected."""
