"""Metadata filters shared by every index: exact match on each key of the filter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["matches"]


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """True when ``metadata`` has every key of ``filter`` with an equal value."""
    return all(key in metadata and metadata[key] == value for key, value in filter.items())
