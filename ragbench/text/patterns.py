"""Regular expressions a user gives in a config (a BM25 tokenizer's ``pattern``, a recursive
chunker's regex ``separators``), compiled and refused when matching could take exponential time.

Python's ``re`` backtracks: a repeated part that can match the same text in more than one way —
a quantifier inside a quantified group (``(a+)+``, ``(a*)*``, ``(\\w+\\s*)+``), alternatives
that overlap (``(a|a)*``, ``(\\n\\n|\\n)+``), two repeats of the same characters side by side
(``(a*a*b)+``) — is tried every way before a match fails, which on a few dozen characters takes
longer than any corpus is worth. ``safe_pattern`` walks the parsed pattern (``re._parser``, the
parser ``re.compile`` itself uses) and refuses a repeat, unbounded or of at least
``_MANY_TIMES``, whose body is ambiguous in one of those ways; sets of characters are compared on
a sample alphabet holding every character the pattern names and a few of each class (``\\w``,
``\\s``, ...), each set tested by the regex engine itself. It errs on the side of refusing:
a pattern it refuses can always be written so that each character is matched one way.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

__all__ = ["safe_pattern"]

# ``re``'s own parser and compiler: private modules with no stubs, and no public equivalent
_parser: Any = importlib.import_module("re._parser")
_compiler: Any = importlib.import_module("re._compiler")
_c: Any = importlib.import_module("re._constants")

_MANY_TIMES = 3  # a repeat allowed fewer times costs at most n**2 steps on n characters
_SAMPLE = " \t\n\r\x0b\x0c\x00\x85\xa0\u2028\u3000aAzZ09_.,;:!?-/\\'\"()[]{}<>#$%&*+=@^`|~éßΣ中"
Chars = frozenset[str]


def safe_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled; ``ValueError`` (a config validator's error) when it is no regular
    expression, or when a repeated part of it can match the same text in more than one way."""
    try:
        compiled = re.compile(pattern)
        parsed = _parser.parse(pattern)
        problem = _Walk(parsed).problem()
    except re.error as exc:
        raise ValueError(f"not a valid regular expression {pattern!r}: {exc}") from None
    except RecursionError:
        raise ValueError(f"regular expression {pattern!r}: groups nested too deeply") from None
    if problem is not None:
        raise ValueError(
            f"regular expression {pattern!r} repeats {problem}: matching can take exponential "
            "time; write it so that each character matches one way only (a+ rather than (a+)+)"
        )
    return compiled


@dataclass(frozen=True)
class _Node:
    """A parsed piece of a pattern, reduced to what ambiguity depends on: ``chars`` it can
    consume, those it can start and end with, ``head`` / ``tail`` the characters a part of
    varying length at its start / end can take (which a neighbour could take instead),
    whether it can match the empty string, and its parts (``kind``: char, seq, alt, rep,
    zero, fixed)."""

    kind: str
    parts: tuple[_Node, ...] = ()
    chars: Chars = frozenset()
    least: int = 1  # a repeat's bounds
    most: int = 1

    @cached_property
    def nullable(self) -> bool:
        if self.kind in ("char", "fixed"):
            return False
        if self.kind == "seq":
            return all(p.nullable for p in self.parts)
        if self.kind == "alt":
            return any(p.nullable for p in self.parts)
        if self.kind == "rep":
            return self.least == 0 or self.parts[0].nullable
        return True  # zero width

    @cached_property
    def all_chars(self) -> Chars:
        if self.kind in ("char", "fixed"):
            return self.chars
        if self.kind == "zero":  # a lookaround consumes nothing
            return frozenset()
        return frozenset().union(*(p.all_chars for p in self.parts))

    @cached_property
    def first(self) -> Chars:
        return self._end(self.parts, "first")

    @cached_property
    def last(self) -> Chars:
        return self._end(tuple(reversed(self.parts)), "last")

    def _end(self, parts: tuple[_Node, ...], side: str) -> Chars:
        if self.kind in ("char", "fixed"):
            return self.chars
        if self.kind in ("alt", "rep"):
            return frozenset().union(*(getattr(p, side) for p in parts))
        found: set[str] = set()
        for part in parts if self.kind == "seq" else ():
            found |= getattr(part, side)
            if not part.nullable:
                break
        return frozenset(found)

    @cached_property
    def tail(self) -> Chars:
        return self._loose(tuple(reversed(self.parts)), "tail")

    @cached_property
    def head(self) -> Chars:
        return self._loose(self.parts, "head")

    def _loose(self, parts: tuple[_Node, ...], side: str) -> Chars:
        if self.kind == "rep":
            return self.all_chars if self.least != self.most else getattr(parts[0], side)
        if self.kind == "alt":  # a branch that can match nothing leaves the others' to give
            found = frozenset().union(*(getattr(p, side) for p in parts))
            return self.all_chars if any(p.nullable for p in parts) else found
        out: set[str] = set()
        for part in parts if self.kind == "seq" else ():
            out |= getattr(part, side)
            if not part.nullable:
                break
        return frozenset(out)

    def ambiguous(self) -> str | None:
        """What lets this node match some text in more than one way (its alternatives, or
        neighbouring repeats), or None."""
        if self.kind == "alt":
            for i, one in enumerate(self.parts):
                for other in self.parts[i + 1 :]:
                    if (one.nullable and other.nullable) or one.first & other.first:
                        return "alternatives that can match the same text (as in (a|ab)*)"
        if self.kind == "seq":
            for i, part in enumerate(self.parts):
                for later in self.parts[i + 1 :] if part.tail else ():
                    if part.tail & later.head:
                        return "two quantifiers in a row over the same characters (as in (a*a*b)+)"
                    if not later.nullable:
                        break
        if self.kind == "fixed":  # an atomic group's or possessive repeat's: matched once
            return None
        return next((why for p in self.parts if (why := p.ambiguous()) is not None), None)


class _Walk:
    """A parsed pattern as ``_Node``\\ s, and the first repeat that can backtrack
    exponentially."""

    def __init__(self, parsed: Any) -> None:
        self.alphabet = _alphabet(parsed)
        self.repeats: list[_Node] = []
        self._sets: dict[tuple[str, int], Chars] = {}
        self._seq(parsed, parsed.state.flags)  # the walk records every repeat

    def problem(self) -> str | None:
        """What makes the first ambiguous repeat so, or None."""
        for rep in self.repeats:
            body = rep.parts[0]
            if body.tail & body.first or body.head & body.last:
                return (
                    "a part whose end can also begin its next repetition (as in (a+)+ or (a|aa)*)"
                )
            why = body.ambiguous()
            if why is not None:
                return why
        return None

    def _seq(self, items: Any, flags: int) -> _Node:
        return _Node("seq", tuple(self._node(op, av, flags) for op, av in items))

    def _node(self, op: Any, av: Any, flags: int) -> _Node:
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return _Node("char", chars=self._members(op, av, flags))
        if op is _c.SUBPATTERN:
            _group, add, remove, body = av
            return self._seq(body, (flags | add) & ~remove)
        if op is _c.BRANCH:
            return _Node("alt", tuple(self._seq(b, flags) for b in av[1]))
        if op is _c.GROUPREF_EXISTS:
            _group, yes, no = av
            return _Node("alt", (self._seq(yes, flags), self._seq(no or [], flags)))
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            least, most, body = av
            node = _Node("rep", (self._seq(body, flags),), least=least, most=most)
            if most >= _MANY_TIMES:
                self.repeats.append(node)
            return node
        if op in (_c.POSSESSIVE_REPEAT, _c.ATOMIC_GROUP):  # matched once, never given back
            body = self._seq(av[2] if op is _c.POSSESSIVE_REPEAT else av, flags)
            return _Node("fixed", (body,), chars=body.all_chars)
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            return _Node("zero", (self._seq(av[1], flags),))
        if op is _c.AT:
            return _Node("zero")
        return _Node("fixed", chars=frozenset(self.alphabet))  # a backreference: any text

    def _members(self, op: Any, av: Any, flags: int) -> Chars:
        """The characters of the sample alphabet the one-character item ``(op, av)`` matches,
        as the regex engine decides (flags, classes and negation included)."""
        key = (repr((op, av)), flags)
        if key not in self._sets:
            state = _parser.State()
            state.flags = flags
            one = _compiler.compile(_parser.SubPattern(state, [(op, av)]), flags)
            self._sets[key] = frozenset(c for c in self.alphabet if one.fullmatch(c))
        return self._sets[key]


def _alphabet(parsed: Any) -> tuple[str, ...]:
    """Every character ``parsed`` names (a literal, a range's ends, in both cases) and a
    sample of each class: where two sets of characters meet, they meet in one of these."""
    found = set(_SAMPLE)
    stack = [parsed]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple | list | _parser.SubPattern):
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool) and 0 <= item < 0x110000:
            found.add(chr(item))
    return tuple(sorted(found | {c.swapcase() for c in found if len(c.swapcase()) == 1}))
