"""``include`` / ``exclude`` globs of a folder, gitignore-like, matched in time bounded by the
glob's segments times the path's, whatever the glob.

A glob is a list of path segments: each a regular expression over one segment (a ``*`` run
matches the leftmost occurrence of what follows it, in an atomic group, as ``fnmatch`` does, so
``*a*a*a*b`` never backtracks), or ``**`` for any number of folders. Matching a path steps through
the glob's segments once, keeping the path positions reached (``Glob.matches``), so no glob can
take exponential time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ragbench.errors import ConfigError


@dataclass(frozen=True)
class Glob:
    """A gitignore-like pattern: the regular expression of each path segment (``None``: a
    ``**``), over relative POSIX paths; ``rest`` when it ends in ``/**`` (whatever lies
    below)."""

    segments: tuple[re.Pattern[str] | None, ...]
    rest: bool
    directories_only: bool

    def matches(self, rel: str, directory: bool) -> bool:
        """Whether the file or directory ``rel`` matches (a directory also as ``rel/``, so that
        ``build/**`` matches the folder ``build``)."""
        if directory:
            return self._matches(rel) or self._matches(rel + "/")
        return not self.directories_only and self._matches(rel)

    def _matches(self, rel: str) -> bool:
        parts = rel.split("/")
        reached = {0}  # the parts the segments so far can end before
        for segment in self.segments:
            if not reached:
                return False
            if segment is None:  # '**': any number of folders (never the last part)
                reached |= set(range(min(reached), len(parts)))
            else:
                reached = {p + 1 for p in reached if p < len(parts) and segment.fullmatch(parts[p])}
        if self.rest:  # '/**': something below
            return any(p < len(parts) for p in reached)
        return len(parts) in reached


def globs(patterns: Collection[str], flag: str) -> tuple[Glob, ...]:
    """The compiled ``patterns``; ``ConfigError`` naming ``flag`` and the pattern when one is
    no glob."""
    return tuple(_glob(pattern, flag) for pattern in patterns)


def _glob(pattern: str, flag: str) -> Glob:
    """``pattern`` as gitignore reads it: ``*`` and ``?`` within a path segment, ``[...]``
    classes, ``**`` for any folders; without a ``/`` (a trailing one aside) it matches at any
    depth, with one it is relative to the folder; a trailing ``/`` matches folders only."""

    def invalid(why: str) -> ConfigError:
        example = "'**/*.md' or 'build/**'"
        return ConfigError(
            f"{flag} {pattern!r}: {why} (expected a glob relative to the folder, such as {example})"
        )

    body = pattern.rstrip("/")
    anchored = body.startswith("/")
    body = body.lstrip("/")
    if not body.strip():
        raise invalid("empty pattern")
    segments = body.split("/")
    if "" in segments:
        raise invalid("empty path segment ('//')")
    if "." in segments or ".." in segments:
        raise invalid("a '.' or '..' segment")
    if not anchored and len(segments) == 1:
        segments.insert(0, "**")
    rest = segments[-1] == "**"
    if rest:
        segments.pop()
    compiled: list[re.Pattern[str] | None] = []
    for segment in segments:
        if segment != "**":
            try:
                compiled.append(re.compile(_segment_regex(segment, invalid), re.DOTALL))
            except re.error as error:
                raise invalid(f"invalid character class ({error.msg})") from None
        elif not compiled or compiled[-1] is not None:  # '**/**' is '**'
            compiled.append(None)
    return Glob(tuple(compiled), rest, pattern.endswith("/"))


def _segment_regex(segment: str, invalid: Callable[[str], ConfigError]) -> str:
    """The regular expression of one path segment of a glob (no ``/`` in it): a piece between
    two ``*`` runs is found at its leftmost place and kept (``(?>.*?piece)``), as every piece
    has a fixed length; the last ``*`` run takes what is left."""
    pieces: list[list[str]] = [[]]
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            pieces.append([])
        elif c == "?":
            pieces[-1].append(".")
        elif c == "\\":
            if i + 1 == len(segment):
                raise invalid("ends with an escape ('\\')")
            i += 1
            pieces[-1].append(re.escape(segment[i]))
        elif c == "[":
            start = i + 1
            negate = start < len(segment) and segment[start] in "!^"
            end = start + negate + 1  # a ']' right after '[' or '[!' is a member
            end = segment.find("]", end)
            if end < 0:
                raise invalid("unclosed '['")
            members = re.sub(r"([\\\[\]])", r"\\\1", segment[start + negate : end])
            pieces[-1].append(f"[^/{members}]" if negate else f"[{members}]")
            i = end
        else:
            pieces[-1].append(re.escape(c))
        i += 1
    first, *starred = ("".join(piece) for piece in pieces)
    if not starred:
        return first
    *middle, last = starred
    return first + "".join(f"(?>.*?{piece})" for piece in middle) + f".*{last}"
