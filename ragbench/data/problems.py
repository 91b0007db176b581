"""Problems found while reading a labeled set, each with its file, line and what was expected.

Format readers record every problem in a ``ProblemLog``. An *error* means the data cannot be
read as its format says (bad JSON, a missing field, an excerpt not in its document); a strict
log (the loaders') raises ``DataError`` at the first one. A *warning* is a problem the data
survives (a judged document missing from the corpus, a duplicate id): loaders keep going and
log one summary, ``ragbench.data.validate`` lists them all. ``text_lines`` and
``jsonl_records`` read line-based files, ``csv_records`` CSV files with a header, and record what
they cannot read (a JSON object naming a key twice included: ``loads_json``);
``check_corpus`` and ``check_judged`` record what stops any run of a whole set
(no documents, an id no run file can hold, a split without a relevant judgement), so that
validating a set and running it agree. Text no file of a run can hold — a lone surrogate, which a
JSON ``\\u`` escape can spell but UTF-8, Arrow and JSON output cannot encode — is an error
wherever it is read (``unencodable``): in any field of a JSON line, in a document's text.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragbench.data.trec import unwritable
from ragbench.errors import DataError, command_line
from ragbench.registry import described
from ragbench.types import Document

__all__ = [
    "DEFAULT_SPLIT",
    "DuplicateKey",
    "MissingSplit",
    "Problem",
    "ProblemLog",
    "Severity",
    "check_corpus",
    "check_default_split",
    "check_judged",
    "check_split_case",
    "csv_records",
    "jsonl_records",
    "loads_json",
    "split_case",
    "text_lines",
    "unencodable",
]

logger = logging.getLogger("ragbench.data")

Severity = Literal["error", "warning"]

DEFAULT_SPLIT = "test"
"""The split ``ragbench run`` (``dataset.split``) and ``datasets info`` read unless told
another."""


class MissingSplit(DataError):
    """A labeled set has no judged query of the split asked for; ``splits`` are the ones it
    has (sorted)."""

    def __init__(self, message: str, splits: Iterable[str]) -> None:
        super().__init__(message)
        self.splits = sorted(splits)


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem at ``file`` (and ``line``, 1-based, when it has one)."""

    file: str
    line: int | None
    message: str
    severity: Severity = "error"

    @property
    def where(self) -> str:
        """``file:line`` (or just the file)."""
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class ProblemLog:
    """Collects problems; when ``strict``, the first error raises ``DataError`` instead."""

    strict: bool
    problems: list[Problem] = field(default_factory=list)

    def error(self, file: object, line: int | None, message: str) -> None:
        """Record (or, when strict, raise) a problem that stops the data from being read."""
        problem = Problem(str(file), line, message, "error")
        if self.strict:
            raise DataError(str(problem))
        self.problems.append(problem)

    def warn(self, file: object, line: int | None, message: str) -> None:
        """Record a problem the data survives."""
        self.problems.append(Problem(str(file), line, message, "warning"))

    def log_summary(self, path: object) -> None:
        """Log one warning that counts the recorded problems and shows the first."""
        if self.problems:
            logger.warning(
                "%s: %d data problem(s), the first: %s (`%s` lists them all)",
                path,
                len(self.problems),
                self.problems[0],
                command_line("ragbench datasets validate", path),
            )


def text_lines(path: Path, log: ProblemLog) -> Iterator[tuple[int, str]]:
    """(1-based number, text) of each non-blank line of a UTF-8 file (``.gz`` is decompressed,
    a BOM dropped, line ends stripped); unreadable lines or files are recorded as errors."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                if number == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8) :]
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    log.error(path, number, f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                    continue
                if line.strip():
                    yield number, line
    except (OSError, EOFError) as exc:  # gzip raises BadGzipFile (an OSError) or EOFError
        log.error(path, None, f"cannot read the file: {exc}")


_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON decodes a valid pair to one character


def unencodable(value: Any, where: str = "") -> str | None:
    """Where ``value`` (text, or a decoded JSON value: every key and string in it) holds a lone
    surrogate, which no UTF-8 text can hold, said with the key path from ``where``; or None."""
    if isinstance(value, str):
        return _surrogate(value, f"{where!r} holds" if where else "holds")
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            in_key = _surrogate(str(key), f"a key of {where!r} holds" if where else "a key holds")
            found = in_key or unencodable(item, path)
            if found is not None:
                return found
    elif isinstance(value, list):
        for number, item in enumerate(value):
            found = unencodable(item, f"{where}[{number}]")
            if found is not None:
                return found
    return None


def _surrogate(text: str, held: str) -> str | None:
    """The problem of ``text`` when it holds a lone surrogate (``held`` says where), or None."""
    found = _SURROGATE.search(text)
    if found is None:
        return None
    return (
        f"{held} a lone surrogate {ascii(found.group())[1:-1]} (half a UTF-16 pair, which a "
        "JSON \\u escape can spell but UTF-8 cannot encode)"
    )


class DuplicateKey(ValueError):
    """A JSON object naming one key twice (``json`` would keep the last value silently)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``, or ``DuplicateKey`` naming a key it gives twice."""
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(
                    f"key {key!r} given twice in one object; JSON would keep only the last"
                )
            seen.add(key)
    return found


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)  # built once: as fast as json.loads


def loads_json(text: str) -> Any:
    """``json.loads`` without silent losses: ``DuplicateKey`` for an object naming a key twice
    (``json.JSONDecodeError`` for text that is no JSON)."""
    return _DECODER.decode(text)


def jsonl_records(path: Path, log: ProblemLog) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of a JSON Lines file; lines that are not
    a JSON object are recorded as errors and skipped."""
    for number, line in text_lines(path, log):
        try:
            record = loads_json(line)
        except json.JSONDecodeError as exc:
            log.error(path, number, f"invalid JSON: {exc.msg} at column {exc.colno}")
            continue
        except DuplicateKey as exc:
            log.error(path, number, str(exc))
            continue
        if not isinstance(record, dict):
            log.error(path, number, f"expected a JSON object, found {described(record)}")
            continue
        bad = unencodable(record) if "\\u" in line else None  # only an escape can spell one
        if bad is not None:
            log.error(path, number, bad)
            continue
        yield number, record


def csv_records(
    path: Path, log: ProblemLog, columns: tuple[str, ...] = ()
) -> Iterator[tuple[int, int, dict[str, str]]]:
    """(1-based data row, line where it starts, record) of each non-blank row of a UTF-8 CSV
    file with a header. A header without one of ``columns`` is recorded as an error (and nothing
    is read); a row with more or fewer cells than the header is recorded and skipped."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            missing = [c for c in columns if c not in header]
            if missing:
                log.error(
                    path,
                    1,
                    f"missing column(s) {', '.join(map(repr, missing))}; "
                    f"found {', '.join(map(repr, header))}",
                )
                return
            row, line = 0, reader.line_num + 1
            for cells in reader:
                if cells:
                    row += 1
                    if len(cells) == len(header):
                        yield row, line, dict(zip(header, cells, strict=True))
                    else:
                        log.error(
                            path,
                            line,
                            f"row {row}: expected {len(header)} fields, found {len(cells)}",
                        )
                line = reader.line_num + 1
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        log.error(path, None, f"cannot read the CSV: {exc}")


def check_corpus(log: ProblemLog, where: object, documents: Iterable[Document]) -> None:
    """Record an error for an empty corpus, for each document id no run file can hold
    (``ragbench.data.trec.unwritable``) and each document whose text or metadata UTF-8 cannot
    encode (``unencodable``): a run of the set would fail on any of them."""
    count = 0
    for doc in documents:
        count += 1
        why = unwritable(doc.id)
        if why is not None:
            log.error(where, None, f"document id {doc.id!r}: {why}")
            continue
        bad = unencodable(doc.text, "text") or unencodable(doc.metadata, "metadata")
        if bad is not None:
            log.error(doc.source or where, None, f"document {doc.id!r}: {bad}")
    if not count:
        log.error(where, None, "no documents: the corpus is empty")


def check_judged(
    log: ProblemLog, where: object, qrels: Mapping[str, Mapping[str, int]], split: str
) -> None:
    """Record an error when no judgement of ``split`` has a grade >= 1: no query of it could
    be evaluated."""
    if not any(grade >= 1 for judged in qrels.values() for grade in judged.values()):
        log.error(
            where,
            None,
            f"split {split!r}: no judgement has a grade >= 1 (all are 0), "
            "so no query can be evaluated",
        )


def check_default_split(log: ProblemLog, where: object, splits: Iterable[str]) -> None:
    """Record a warning when a set whose queries are judged on some split has none judged on
    ``DEFAULT_SPLIT``: ``ragbench run`` refuses it unless its config names another split."""
    found = sorted(set(splits))
    if found and DEFAULT_SPLIT not in found:
        log.warn(
            where,
            None,
            f"no split {DEFAULT_SPLIT!r}, which `ragbench run` evaluates unless the config's "
            f"dataset.split names another (splits found: {', '.join(found)})",
        )


def split_case(splits: Iterable[str]) -> list[str]:
    """One line for each split whose name differs from another's (or ``DEFAULT_SPLIT``'s) only
    by case, counting its queries (``splits`` holds each query's split): splits are
    case-sensitive, so a hand-typed ``TEST`` silently leaves its queries out of ``test``."""
    counts = Counter(splits)
    names = set(counts) | {DEFAULT_SPLIT}
    lines = []
    for name, count in sorted(counts.items()):
        rivals = [o for o in names if o != name and o.casefold() == name.casefold()]
        if name == DEFAULT_SPLIT or not rivals:
            continue
        other = DEFAULT_SPLIT if DEFAULT_SPLIT in rivals else max(rivals, key=counts.__getitem__)
        if other != DEFAULT_SPLIT and (counts[other], other) < (count, name):
            continue  # said of the other: the smaller split is the misspelt one
        queries = "1 query" if count == 1 else f"{count:,} queries"
        verb = "is" if count == 1 else "are"
        lines.append(
            f"{queries} of split {name!r} {verb} not in split {other!r} (splits are case-sensitive)"
        )
    return lines


def check_split_case(log: ProblemLog, where: object, splits: Iterable[str]) -> None:
    """Record a warning for each split named like another but for case (``split_case``)."""
    for line in split_case(splits):
        log.warn(where, None, line)
