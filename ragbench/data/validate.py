"""Check a labeled set on disk and report every problem, each with its file and line.

Problems are those of the format readers (``ragbench.data.problems``): errors stop the set from
loading (invalid JSON, non-integer grades, missing fields, bad offsets, excerpts that are
missing or ambiguous), warnings do not (judgements of documents missing from the corpus or of
unknown queries, queries without judgements, repeated ids, empty documents or queries).
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from pathlib import Path

from ragbench.data.catalog import FORMATS, Format, dataset_format, resolve_dataset
from ragbench.data.problems import Problem

__all__ = ["ValidationReport", "validate_dataset"]

StrPath = str | os.PathLike[str]


@dataclass(frozen=True)
class ValidationReport:
    """The problems found in the dataset at ``path`` (read as ``format``)."""

    path: Path
    format: Format
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    @property
    def errors(self) -> list[Problem]:
        """The problems that stop the set from loading."""
        return [p for p in self.problems if p.severity == "error"]

    def __str__(self) -> str:
        head = f"{self.path} ({self.format}): "
        if self.ok:
            return head + "no problems"
        lines = [f"{p.severity}: {p}" for p in self.problems]
        return "\n".join([head + f"{len(self.problems)} problem(s)", *lines])

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{p.severity}</td><td>{html.escape(p.where)}</td>"
            f"<td>{html.escape(p.message)}</td></tr>"
            for p in self.problems
        )
        table = f"<table><tr><th></th><th>where</th><th>problem</th></tr>{rows}</table>"
        summary = f"{len(self.problems)} problem(s)" if rows else "no problems"
        return f"<p>{html.escape(str(self.path))} ({self.format}): {summary}</p>" + (
            table if rows else ""
        )


def validate_dataset(
    path_or_name: StrPath, format: Format | None = None, queries: StrPath | None = None
) -> ValidationReport:
    """Every problem of the dataset at ``path_or_name`` (all splits), a plain folder of
    documents labeled by ``queries`` if given; ``DataError`` when it is not a dataset (or a
    folder without labels)."""
    path = resolve_dataset(path_or_name)
    fmt = dataset_format(path, format, queries)
    labels = {} if queries is None else {"queries": queries}
    return ValidationReport(path, fmt, FORMATS[fmt].check(path, **labels))
