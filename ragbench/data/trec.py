"""TREC qrels and run files (and BEIR's qrels TSV), plus DataFrame converters.

Qrels: ``qid iter docid grade`` per line, whitespace separated, ``#`` lines are comments (as in
trec_eval), or BEIR's ``query-id<TAB>corpus-id<TAB>score`` with that header line. Runs:
``qid Q0 docid rank score tag``. Readers check every line and raise ``DataError`` naming the
file, the line and what was expected; a (query, document) pair given twice is an error.
``write_run`` orders each query as trec_eval does (score descending, then document id
descending), numbers ranks from 1 and writes scores with ``repr`` so that reading the file back
gives the very same floats.

Ids may hold whitespace (loaders make ids of file paths such as ``ops/retention policy.md``):
writers percent-encode whitespace, ``%`` and ``#`` (a comment in qrels) in every field (``%20``,
``%25``, ``%23``, UTF-8 bytes for other whitespace) and readers decode exactly those escapes in
TREC qrels and runs alike (BEIR's TSV is read as it is), so ids round-trip and files from
elsewhere keep any other ``%``. Only an empty id or one that is not valid UTF-8 (``unwritable``)
cannot be written. A relevance grade is an integer from 0 up (``grade_problem``), in every
format that holds grades.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter, le
from typing import TypeVar

import pandas as pd

from ragbench.data.labeled import Qrels
from ragbench.errors import DataError
from ragbench.registry import MAX_INT
from ragbench.types import Ranking

__all__ = [
    "Run",
    "grade_problem",
    "qrels_from_frame",
    "qrels_to_frame",
    "ranking_to_run",
    "read_qrels",
    "read_run",
    "run_from_frame",
    "run_to_frame",
    "unwritable",
    "write_qrels",
    "write_ranking",
    "write_run",
]

Run = dict[str, dict[str, float]]
PathLike = str | os.PathLike[str]

_BEIR_HEADER = ["query-id", "corpus-id", "score"]
_TREC_QRELS = "4 whitespace-separated columns 'qid iter docid grade'"
_BEIR_QRELS = "3 tab-separated columns 'query-id corpus-id score'"
_TREC_RUN = "6 whitespace-separated columns 'qid Q0 docid rank score tag'"
_ESCAPED = re.compile(r"[\s%#]")
# one percent-encoded UTF-8 character: a lead byte and up to three continuation bytes
_ESCAPE = re.compile(r"%[0-9A-F]{2}(?:%[89AB][0-9A-F]){0,3}")
V = TypeVar("V")


def grade_problem(grade: int) -> str | None:
    """Why the integer ``grade`` is no relevance grade (one is 0 or more, within int64), or
    None when it is one."""
    if grade < 0:
        return (
            f"expected a relevance grade >= 0, found {grade} (marks such as TREC's -1 for "
            "unjudged and -2 for junk: make them 0 or leave them out)"
        )
    if grade > MAX_INT:
        return f"expected a relevance grade of at most {MAX_INT:,}, found {grade}"
    return None


def _lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline) of the non-blank lines."""
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _add(
    table: dict[str, dict[str, V]],
    seen: dict[tuple[str, str], int],
    key: tuple[str, str],
    value: V,
    where: str,
    number: int,
) -> None:
    if key in seen:
        raise DataError(
            f"{where}: query {key[0]!r} lists document {key[1]!r} again (first on line {seen[key]})"
        )
    seen[key] = number
    table.setdefault(key[0], {})[key[1]] = value


def read_qrels(path: PathLike) -> Qrels:
    """Qrels (query id → doc id → integer grade) from a TREC qrels file or a BEIR TSV."""
    qrels: Qrels = {}
    seen: dict[tuple[str, str], int] = {}
    beir: bool | None = None
    for number, line in _lines(path):
        if beir is None:
            beir = [f.strip().lower() for f in line.split("\t")] == _BEIR_HEADER
            if beir:
                continue
        if not beir and line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        qid, docid, grade = _qrels_fields(line, beir, where)
        try:
            value = int(grade)
        except ValueError:
            raise DataError(f"{where}: expected an integer grade, found {grade!r}") from None
        why = grade_problem(value)
        if why is not None:
            raise DataError(f"{where}: {why}")
        _add(qrels, seen, (qid, docid), value, where, number)
    return qrels


def _qrels_fields(line: str, beir: bool, where: str) -> tuple[str, str, str]:
    """(query id, doc id, grade text) of one qrels line."""
    fields = [f.strip() for f in line.split("\t")] if beir else line.split()
    if len(fields) != (3 if beir else 4):
        expected = _BEIR_QRELS if beir else _TREC_QRELS
        raise DataError(f"{where}: expected {expected}, found {len(fields)} columns")
    if beir:  # tab-separated: ids are written as they are
        return fields[0], fields[1], fields[2]
    return _decode(fields[0]), _decode(fields[2]), fields[3]


def write_qrels(path: PathLike, qrels: Qrels) -> None:
    """Write qrels in TREC format (``qid 0 docid grade``)."""
    with open(path, "w", encoding="utf-8") as handle:
        for qid, judged in qrels.items():
            for docid, grade in judged.items():
                handle.write(f"{_token(qid)} 0 {_token(docid)} {int(grade)}\n")


def read_run(path: PathLike) -> Run:
    """A TREC run file as query id → doc id → score (ranks are ignored, as in trec_eval)."""
    run: Run = {}
    seen: dict[tuple[str, str], int] = {}
    for number, line in _lines(path):
        where = f"{path}:{number}"
        fields = line.split()
        if len(fields) != 6:
            raise DataError(f"{where}: expected {_TREC_RUN}, found {len(fields)} columns")
        qid, _, docid, _, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if math.isnan(value):
            raise DataError(f"{where}: expected a numeric score, found {score!r}")
        _add(run, seen, (_decode(qid), _decode(docid)), value, where, number)
    return run


def write_run(
    path: PathLike, run: Mapping[str, Mapping[str, float]], tag: str = "ragbench"
) -> None:
    """Write a TREC run: per query, trec_eval's order (score desc, doc id desc), ranks 1..n,
    scores as ``repr`` of the float (exact round trip)."""
    ordered = (
        (qid, sorted(results.items(), key=itemgetter(1, 0), reverse=True))
        for qid, results in run.items()
    )
    _write_ordered(path, ordered, tag)


def _write_ordered(
    path: PathLike, rows: Iterable[tuple[str, Sequence[tuple[str, float]]]], tag: str
) -> None:
    """Write ``(query id, [(document id, score), ...])`` rows, each already in trec_eval's
    order; a document id recurring across queries is escaped once."""
    tag = _token(tag)
    tokens: dict[str, str] = {}
    with open(path, "w", encoding="utf-8") as handle:
        for qid, results in rows:
            query = _token(qid)
            lines = []
            for rank, (docid, score) in enumerate(results, start=1):
                doc = tokens.get(docid)
                if doc is None:
                    doc = tokens[docid] = _token(docid)
                lines.append(f"{query} Q0 {doc} {rank} {float(score)!r} {tag}\n")
            handle.write("".join(lines))


def ranking_to_run(ranking: Ranking, query_ids: Sequence[str]) -> Run:
    """Row ``i`` of ``ranking`` as the results of ``query_ids[i]``: padding skipped, a repeated
    id keeps its first occurrence (the trec_eval convention of ``ragbench.evaluate``)."""
    if len(ranking.ids) != len(query_ids):
        raise ValueError(f"ranking has {len(ranking.ids)} rows for {len(query_ids)} query ids")
    run: Run = {}
    for i, qid in enumerate(query_ids):
        results = run.setdefault(qid, {})
        for docid, score in ranking.row(i):
            results.setdefault(docid, score)
    return run


def write_ranking(
    path: PathLike, ranking: Ranking, query_ids: Sequence[str], tag: str = "ragbench"
) -> None:
    """Write a ``Ranking`` (row ``i`` = ``query_ids[i]``) as a TREC run; see ``write_run``.

    The file is that of ``write_run(path, ranking_to_run(ranking, query_ids), tag)``; a row
    whose scores strictly decrease, without padding or repeats inside (the usual row), is
    already in trec_eval's order and is written as it is, without a sort."""
    if len(set(query_ids)) != len(query_ids):  # rows of one query merge: the general path
        write_run(path, ranking_to_run(ranking, query_ids), tag)
        return
    if len(ranking.ids) != len(query_ids):
        raise ValueError(f"ranking has {len(ranking.ids)} rows for {len(query_ids)} query ids")

    def rows() -> Iterator[tuple[str, Sequence[tuple[str, float]]]]:
        for qid, ids, scores in zip(
            query_ids, ranking.ids.tolist(), ranking.scores.tolist(), strict=True
        ):
            if "" in ids or len(set(ids)) != len(ids) or any(map(le, scores, scores[1:])):
                results: dict[str, float] = {}
                for docid, score in zip(ids, scores, strict=True):
                    if docid:
                        results.setdefault(docid, score)
                yield qid, sorted(results.items(), key=itemgetter(1, 0), reverse=True)
            else:
                yield qid, list(zip(ids, scores, strict=True))

    _write_ordered(path, rows(), tag)


def unwritable(value: str) -> str | None:
    """Why ``value`` cannot be an id in a TREC file or a run table, or None when it can (any
    non-empty valid UTF-8 text can: see the module docstring)."""
    if not value:
        return "an empty id cannot be written to a TREC file"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8 (a file name in another encoding?), so no run file can hold it"
    return None


def _escape(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))


def _unescape(match: re.Match[str]) -> str:
    """The character an escape of ``_token`` stands for; any other ``%`` text unchanged."""
    text = match.group()
    try:
        char = bytes.fromhex(text.replace("%", "")).decode("utf-8")
    except UnicodeDecodeError:
        return text
    return char if _ESCAPED.sub(_escape, char) == text else text


def _token(value: str) -> str:
    """``value`` as one field of a whitespace-separated line (whitespace, ``%`` and ``#``
    percent-encoded); ``ValueError`` for what cannot be written (see ``unwritable``)."""
    text = str(value)
    why = unwritable(text)
    if why is not None:
        raise ValueError(f"{text!r}: {why}")
    return _ESCAPED.sub(_escape, text)


def _decode(field: str) -> str:
    """The id a field written by ``_token`` holds."""
    return _ESCAPE.sub(_unescape, field) if "%" in field else field


# ---------------------------------------------------------------- DataFrames


def qrels_from_frame(
    frame: pd.DataFrame, query: str = "query_id", doc: str = "doc_id", grade: str = "grade"
) -> Qrels:
    """Qrels from a DataFrame with query id, doc id and integer grade columns (ids become str;
    for BEIR's column names pass ``query="query-id", doc="corpus-id", grade="score"``)."""
    _check_columns(frame, "qrels", (query, doc, grade))
    values = frame[grade]
    if (
        not pd.api.types.is_numeric_dtype(values)
        or (values.isna() | (values % 1 != 0) | (values < 0)).any()
    ):
        raise DataError(f"qrels frame: column {grade!r} must hold integer grades >= 0")
    grades: list[int] = values.astype("int64").tolist()
    return _nested(frame, "qrels", query, doc, grades)


def run_from_frame(
    frame: pd.DataFrame, query: str = "query_id", doc: str = "doc_id", score: str = "score"
) -> Run:
    """A run (query id → doc id → score) from a DataFrame with those columns (ids become str)."""
    _check_columns(frame, "run", (query, doc, score))
    values = frame[score]
    if not pd.api.types.is_numeric_dtype(values) or values.isna().any():
        raise DataError(f"run frame: column {score!r} must hold numbers (no NaN)")
    scores: list[float] = values.astype("float64").tolist()
    return _nested(frame, "run", query, doc, scores)


def qrels_to_frame(qrels: Qrels) -> pd.DataFrame:
    """Columns ``query_id``, ``doc_id``, ``grade``, one row per judgement."""
    rows = [(q, d, g) for q, judged in qrels.items() for d, g in judged.items()]
    frame = pd.DataFrame(rows, columns=["query_id", "doc_id", "grade"])
    return frame.astype({"query_id": str, "doc_id": str, "grade": "int64"})


def run_to_frame(run: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """Columns ``query_id``, ``doc_id``, ``score``, one row per result, in the run's order."""
    rows = [(q, d, s) for q, results in run.items() for d, s in results.items()]
    frame = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"])
    return frame.astype({"query_id": str, "doc_id": str, "score": "float64"})


def _check_columns(frame: pd.DataFrame, what: str, names: Sequence[str]) -> None:
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise DataError(
            f"{what} frame: missing column(s) {', '.join(map(repr, missing))}; "
            f"it has {', '.join(map(repr, map(str, frame.columns)))}"
        )


def _nested(
    frame: pd.DataFrame, what: str, query: str, doc: str, values: list[V]
) -> dict[str, dict[str, V]]:
    queries, docs = frame[query].astype(str), frame[doc].astype(str)
    repeated = pd.DataFrame({"q": queries, "d": docs}).duplicated()
    if repeated.any():
        at = int(repeated.to_numpy().argmax())
        raise DataError(
            f"{what} frame: query {queries.iloc[at]!r} lists document {docs.iloc[at]!r} twice "
            f"(row with index {frame.index[at]!r})"
        )
    nested: dict[str, dict[str, V]] = {}
    for q, d, v in zip(queries.tolist(), docs.tolist(), values, strict=True):
        nested.setdefault(q, {})[d] = v
    return nested
