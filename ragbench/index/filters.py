"""Metadata filters shared by every index: exact match (``==``) on each key of the filter, and
``MetadataTable``, the per-row metadata every store keeps, held as columns.

A million chunks carry a million metadata dicts (a document's path and line differ from the
next one's); as dicts they cost a few hundred bytes each, in every index. The table keeps, per
key, one int32 code a row (-1: the row has no such key) and each distinct value once, so a row
costs a few bytes a key, and a filter is a comparison of codes instead of a loop over dicts.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["MetadataTable", "matches"]


def matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """True when ``metadata`` has every key of ``filter`` with an equal value."""
    return all(key in metadata and metadata[key] == value for key, value in filter.items())


def _encode(codes: np.ndarray) -> str:
    return base64.b64encode(codes.astype("<i4").tobytes()).decode("ascii")


def _decode(codes: str | list[int]) -> np.ndarray:
    if isinstance(codes, list):
        return np.asarray(codes, dtype=np.int32)
    return np.frombuffer(base64.b64decode(codes), dtype="<i4").astype(np.int32)


def _unhashable_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


class _Column:
    """One key's values: a code per row (-1: absent) and each distinct value once, found by
    value (hashable values by type, so ``1``, ``1.0`` and ``True`` stay apart; others by JSON)."""

    def __init__(self) -> None:
        self.codes = np.full(0, -1, dtype=np.int32)
        self.values: list[Any] = []
        self._by_type: dict[type, dict[Any, int]] = {}

    def code(self, value: Any) -> int:
        """The code of ``value``, entered if new."""
        try:
            hash(value)
            table, key = self._by_type.setdefault(type(value), {}), value
        except TypeError:
            table, key = self._by_type.setdefault(type(value), {}), _unhashable_key(value)
        found = table.get(key)
        if found is None:
            found = table[key] = len(self.values)
            self.values.append(value)
        return found

    def equal(self, value: Any) -> list[int]:
        """Codes of the stored values ``== value``."""
        try:
            hash(value)
        except TypeError:  # a list or dict: equal only to lists or dicts
            return [c for c, v in enumerate(self.values) if type(v) is type(value) and v == value]
        found = []
        for table in self._by_type.values():
            try:
                code = table.get(value)
            except TypeError:
                continue
            if code is not None and self.values[code] == value:
                found.append(code)
        return found

    def grow(self, rows: int) -> None:
        if rows > len(self.codes):
            codes = np.full(max(rows, 2 * len(self.codes), 16), -1, dtype=np.int32)
            codes[: len(self.codes)] = self.codes
            self.codes = codes


class MetadataTable:
    """The metadata dict of each row of an index, as columns (see the module docstring).

    Rows are numbered from 0 by the index that owns the table; ``set`` writes rows (growing
    the table), ``clear`` empties them, ``keep`` drops rows and renumbers the rest, ``move``
    copies one row over another. ``rows(filter)`` is the mask of rows matching a filter."""

    def __init__(self) -> None:
        self._columns: dict[str, _Column] = {}
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def set(self, rows: Sequence[int] | np.ndarray, metadata: Sequence[Mapping[str, Any]]) -> None:
        """Give row ``rows[i]`` the dict ``metadata[i]`` (rows past the end are added)."""
        at = np.asarray(rows, dtype=np.int64)
        if not len(at):
            return
        self._rows = max(self._rows, int(at.max()) + 1)
        for column in self._columns.values():
            column.grow(self._rows)
            column.codes[at] = -1
        for row, meta in zip(at.tolist(), metadata, strict=True):
            for key, value in meta.items():
                if key not in self._columns:
                    self._columns[key] = _Column()
                column = self._columns[key]
                column.grow(self._rows)
                column.codes[row] = column.code(value)

    def get(self, row: int) -> dict[str, Any]:
        """The dict of ``row``."""
        return {
            key: column.values[code]
            for key, column in self._columns.items()
            if row < len(column.codes) and (code := int(column.codes[row])) >= 0
        }

    def clear(self, rows: Sequence[int]) -> None:
        """Empty ``rows`` (a freed slot)."""
        for column in self._columns.values():
            column.codes[np.asarray(rows, dtype=np.int64)] = -1
        self._tidy()

    def move(self, source: int, target: int) -> None:
        """Copy row ``source`` over row ``target``."""
        for column in self._columns.values():
            column.codes[target] = column.codes[source]

    def keep(self, kept: np.ndarray) -> None:
        """Keep the rows where the boolean mask ``kept`` (over all rows) is set, in order."""
        mask = np.asarray(kept, dtype=bool)
        for column in self._columns.values():
            column.codes = column.codes[: self._rows][mask]
        self._rows = int(mask.sum())
        self._tidy()

    def truncate(self, rows: int) -> None:
        """Drop the rows from ``rows`` on."""
        for column in self._columns.values():
            column.codes[rows : self._rows] = -1
        self._rows = rows

    def rows(self, filter: Mapping[str, Any]) -> np.ndarray:
        """Boolean mask over the rows: those whose dict has every key of ``filter`` with an
        equal value."""
        mask = np.ones(self._rows, dtype=bool)
        for key, value in filter.items():
            column = self._columns.get(key)
            if column is None:
                return np.zeros(self._rows, dtype=bool)
            codes = column.equal(value)
            mask &= np.isin(column.codes[: self._rows], np.asarray(codes, dtype=np.int32))
        return mask

    def _tidy(self) -> None:
        """Forget the values no row has any more, once they outnumber the rows."""
        for key, column in list(self._columns.items()):
            if len(column.values) <= 2 * self._rows + 64:
                continue
            codes = column.codes[: self._rows]
            used = np.unique(codes[codes >= 0])
            fresh = _Column()
            fresh.grow(len(column.codes))
            remap = np.full(len(column.values), -1, dtype=np.int32)
            remap[used] = [fresh.code(column.values[c]) for c in used.tolist()]
            fresh.codes[: self._rows] = np.where(codes >= 0, remap[codes], -1)
            if fresh.values:
                self._columns[key] = fresh
            else:
                del self._columns[key]

    def to_json(self) -> dict[str, Any]:
        """The table as JSON: per key its distinct values and each row's code (little-endian
        int32, base64: a few bytes a row, where a list of numbers would cost a Python object
        each while it is written)."""
        return {
            "rows": self._rows,
            "columns": {
                key: {"values": column.values, "codes": _encode(column.codes[: self._rows])}
                for key, column in self._columns.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MetadataTable:
        """The table ``to_json`` gave (``values`` decoded from JSON: tuples come back as
        lists)."""
        table = cls()
        table._rows = int(data["rows"])
        for key, saved in data["columns"].items():
            column = _Column()
            column.values = list(saved["values"])
            for code, value in enumerate(column.values):
                try:
                    hash(value)
                    column._by_type.setdefault(type(value), {}).setdefault(value, code)
                except TypeError:
                    key_ = _unhashable_key(value)
                    column._by_type.setdefault(type(value), {}).setdefault(key_, code)
            codes = _decode(saved["codes"])
            if len(codes) != table._rows or (len(codes) and codes.max() >= len(column.values)):
                raise ValueError(f"metadata column {key!r} does not match its rows")
            column.grow(table._rows)
            column.codes[: table._rows] = codes
            table._columns[key] = column
        return table

    @classmethod
    def of(cls, metadata: Sequence[Mapping[str, Any]]) -> MetadataTable:
        """The table whose row ``i`` is ``metadata[i]``."""
        table = cls()
        table.set(np.arange(len(metadata)), metadata)
        return table
