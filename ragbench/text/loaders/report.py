"""What a pass over a source produced: documents loaded, items skipped and why, in one line.

A reader raises ``Skip`` for an unusable file or line; the loop records it on the pass's
``LoadReport`` and moves on, so one broken input never stops a corpus from loading and nothing is
lost without a trace.
"""

from __future__ import annotations

import html
import logging
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragbench.types import Document

logger = logging.getLogger(__name__)

StrPath = str | os.PathLike[str]

UNSUPPORTED = "unsupported extension"
_LISTED = 3  # a summary names up to this many skipped items one by one


@dataclass(frozen=True, slots=True)
class LoadProblem:
    """A file, line or directory that was skipped, and why; ``kind`` groups reasons in a
    summary (``binary``, ``invalid UTF-8``; empty: the reason itself)."""

    path: str
    reason: str
    kind: str = field(default="", compare=False)


@dataclass
class LoadReport:
    """What one pass over a source produced: documents loaded and items skipped (with reasons).

    Every skipped item has exactly one problem, so ``skipped == len(problems)``. Hidden
    (dot-prefixed) files and directories and blank JSONL lines are not items and are not counted.
    """

    loaded: int = 0
    problems: list[LoadProblem] = field(default_factory=list)
    left_out: int = 0
    """Files the ``include`` / ``exclude`` globs left out (chosen: not problems)."""
    left_out_folders: int = 0
    """Folders ``exclude`` left out, with what they hold."""
    selection: str = ""
    """Those globs as given (``--include '*.md'``), "" when there are none."""

    @property
    def skipped(self) -> int:
        """Number of skipped files, lines and directories."""
        return len(self.problems)

    @property
    def passed_over(self) -> int:
        """Items skipped, and files and folders the globs left out."""
        return self.skipped + self.left_out + self.left_out_folders

    def add(self, path: StrPath, reason: str, kind: str = "") -> None:
        """Record that ``path`` was skipped for ``reason`` (of ``kind``, default the reason)."""
        self.problems.append(LoadProblem(str(path), reason, kind or reason))
        logger.debug("skipped %s: %s", path, reason)

    def summary(self) -> str:
        """One line on what was skipped ("" when nothing was): see ``skipped_summary``."""
        return skipped_summary(self.problems)

    def clear(self) -> None:
        """Reset to an empty report (each pass over a loader starts afresh)."""
        self.loaded = self.left_out = self.left_out_folders = 0
        self.problems.clear()

    def nothing_loaded(self, source: StrPath) -> str:
        """One line on why the pass over ``source`` loaded no document ("" when it loaded
        some): the first item skipped, what the globs left out, or that there was nothing."""
        if self.loaded:
            return ""
        why = []
        if self.problems:
            first, more = self.problems[0], len(self.problems) - 1
            where = "" if first.path == str(source) else f"skipped {first.path}: "
            why.append(f"{where}{first.reason}" + (f" (and {more} more skipped)" if more else ""))
        counts = ((self.left_out, "file"), (self.left_out_folders, "folder"))
        things = " and ".join(f"{n} {what}{'s' * (n > 1)}" for n, what in counts if n)
        if things:
            why.append(f"{self.selection} left out {'' if self.problems else 'all '}{things}")
        return f"{source}: no documents loaded: {'; '.join(why) or 'it holds no file'}"

    def __str__(self) -> str:
        head = f"loaded {self.loaded} documents, skipped {self.skipped}"
        return "\n  ".join([head, *(f"{p.path}: {p.reason}" for p in self.problems)])

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(p.path)}</td><td>{html.escape(p.reason)}</td></tr>"
            for p in self.problems
        )
        table = f"<table><tr><th>path</th><th>reason</th></tr>{rows}</table>" if rows else ""
        return f"<p>loaded {self.loaded} documents, skipped {self.skipped}</p>{table}"


def skipped_summary(problems: Sequence[LoadProblem]) -> str:
    """One line on what a load skipped, so that many skipped files are not as many lines: up
    to three items by path and reason, more as counts by kind (unsupported extensions by
    extension) and the first item; "" when nothing was skipped."""
    if not problems:
        return ""
    if len(problems) == 1:
        return f"skipped {problems[0].path}: {problems[0].reason}"
    lines = sum(p.reason.startswith("line ") for p in problems)
    counts = [(len(problems) - lines, "file"), (lines, "JSONL line")]
    head = "skipped " + " and ".join(f"{n} {what}{'s' * (n > 1)}" for n, what in counts if n)
    if len(problems) <= _LISTED:
        return f"{head}: " + "; ".join(f"{p.path}: {p.reason}" for p in problems)
    parts = []
    for kind, count in Counter(p.kind or p.reason for p in problems).most_common():
        if kind == UNSUPPORTED:
            suffixes = Counter(Path(p.path).suffix.lower() for p in problems if p.kind == kind)
            shown = [f"{suffix} {n}" for suffix, n in suffixes.most_common(5)]
            kind += f" ({', '.join(shown)}{', ...' if len(suffixes) > 5 else ''})"
        parts.append(f"{count} {kind}")
    first = problems[0]
    return f"{head}: {', '.join(parts)}; the first: {first.path}: {first.reason}"


class Skip(Exception):
    """Raised by readers for an unusable file or line; the loop records it and moves on."""

    def __init__(self, reason: str, kind: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclass
class Pass:
    """State of one iteration over a loader: its report and the ids already yielded."""

    report: LoadReport
    seen: dict[str, str] = field(default_factory=dict)

    def admit(self, doc: Document, path: Path, where: str = "") -> bool:
        """Count ``doc`` as loaded unless its id was already yielded (then report it)."""
        first = self.seen.get(doc.id)
        if first is not None:
            self.report.add(
                path, f"{where}duplicate id {doc.id!r} (first at {first})", "duplicate id"
            )
            return False
        self.seen[doc.id] = doc.source
        self.report.loaded += 1
        return True
