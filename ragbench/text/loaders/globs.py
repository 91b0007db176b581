"""``include`` / ``exclude`` globs of a folder, gitignore-like, compiled to regular expressions."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

from ragbench.errors import ConfigError


@dataclass(frozen=True)
class Glob:
    """A gitignore-like pattern compiled to a regular expression over relative POSIX paths."""

    regex: re.Pattern[str]
    directories_only: bool

    def matches(self, rel: str, directory: bool) -> bool:
        """Whether the file or directory ``rel`` matches (a directory also as ``rel/``, so that
        ``build/**`` matches the folder ``build``)."""
        if directory:
            return bool(self.regex.fullmatch(rel) or self.regex.fullmatch(rel + "/"))
        return not self.directories_only and self.regex.fullmatch(rel) is not None


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
    regex = "" if anchored or len(segments) > 1 else "(?:.*/)?"
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            regex += ".*" if last else "(?:.*/)?"
        else:
            regex += _segment_regex(segment, invalid) + ("" if last else "/")
    try:
        return Glob(re.compile(regex), pattern.endswith("/"))
    except re.error as error:
        raise invalid(f"invalid character class ({error.msg})") from None


def _segment_regex(segment: str, invalid: Callable[[str], ConfigError]) -> str:
    """The regular expression of one path segment of a glob (no ``/`` in it)."""
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            if i + 1 == len(segment):
                raise invalid("ends with an escape ('\\')")
            i += 1
            out.append(re.escape(segment[i]))
        elif c == "[":
            start = i + 1
            negate = start < len(segment) and segment[start] in "!^"
            end = start + negate + 1  # a ']' right after '[' or '[!' is a member
            end = segment.find("]", end)
            if end < 0:
                raise invalid("unclosed '['")
            members = re.sub(r"([\\\[\]])", r"\\\1", segment[start + negate : end])
            out.append(f"[^/{members}]" if negate else f"[{members}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)
