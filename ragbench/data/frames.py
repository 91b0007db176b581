"""A labeled set from pandas DataFrames (documents, queries, qrels and optional span evidence).

Columns: documents ``doc_id``, ``text``; queries ``query_id``, ``text``; qrels ``query_id``,
``doc_id``, ``grade``; evidence ``query_id``, ``doc_id``, ``start``, ``end`` and optionally
``grade`` (default: the pair's qrels grade). Other document and query columns become metadata
(missing values left out). Ids become strings. Frames are checked strictly: a missing column,
a missing or non-string text, a repeated id, a judgement or evidence of an unknown query or
document, evidence of an unjudged pair and offsets outside the document raise ``DataError``
naming the frame, the column and the row's index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from ragbench.data.labeled import Evidence, LabeledSet, Qrels
from ragbench.data.trec import qrels_from_frame
from ragbench.errors import DataError
from ragbench.types import Document, Query

__all__ = ["from_frames"]


def from_frames(
    documents: pd.DataFrame,
    queries: pd.DataFrame,
    qrels: pd.DataFrame,
    evidence: pd.DataFrame | None = None,
    name: str = "frames",
    split: str = "test",
) -> LabeledSet:
    """A ``LabeledSet`` from DataFrames (see the module docstring for the columns)."""
    docs = [Document(i, t, m) for i, t, m in _records(documents, "documents", "doc_id")]
    query_list = [Query(i, t, m) for i, t, m in _records(queries, "queries", "query_id")]
    judged = qrels_from_frame(qrels)
    doc_index = {d.id: d for d in docs}
    _check_known(judged, {q.id for q in query_list}, doc_index)
    spans = _evidence(evidence, judged, doc_index) if evidence is not None else {}
    return LabeledSet(name, docs, query_list, judged, spans, split)


def _columns(frame: pd.DataFrame, what: str, names: Sequence[str]) -> None:
    missing = [n for n in names if n not in frame.columns]
    if missing:
        found = ", ".join(map(repr, map(str, frame.columns)))
        raise DataError(
            f"{what} frame: missing column(s) {', '.join(map(repr, missing))}; it has {found}"
        )


def _records(
    frame: pd.DataFrame, what: str, id_column: str
) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """(id, text, metadata) per row, after checking ids and texts."""
    _columns(frame, what, (id_column, "text"))
    ids = _ids(frame, what, id_column)
    texts = frame["text"]
    bad = ~texts.map(lambda t: isinstance(t, str))
    if bad.any():
        at = frame.index[int(bad.to_numpy().argmax())]
        raise DataError(
            f"{what} frame: column 'text' must hold strings; the row with index "
            f"{at!r} holds {texts.loc[at]!r}"
        )
    extra = [c for c in frame.columns if c not in (id_column, "text")]
    rows = frame[extra].to_dict("records") if extra else [{}] * len(frame)
    metadata = [{str(k): v for k, v in row.items() if not _missing(v)} for row in rows]
    return zip(ids, texts.tolist(), metadata, strict=True)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _ids(frame: pd.DataFrame, what: str, column: str) -> list[str]:
    values = frame[column]
    if values.isna().any():
        at = frame.index[int(values.isna().to_numpy().argmax())]
        raise DataError(f"{what} frame: column {column!r} is empty in the row with index {at!r}")
    ids = values.astype(str)
    repeated = ids.duplicated()
    if repeated.any():
        at = frame.index[int(repeated.to_numpy().argmax())]
        raise DataError(
            f"{what} frame: {column} {ids.loc[at]!r} appears again in the row with index {at!r}"
        )
    return ids.tolist()


def _check_known(qrels: Qrels, query_ids: set[str], docs: dict[str, Document]) -> None:
    for qid, judged in qrels.items():
        if qid not in query_ids:
            raise DataError(f"qrels frame: query_id {qid!r} is not in the queries frame")
        for doc_id in judged:
            if doc_id not in docs:
                raise DataError(
                    f"qrels frame: query {qid!r} judges doc_id {doc_id!r}, which "
                    "is not in the documents frame"
                )


def _evidence(
    frame: pd.DataFrame, qrels: Qrels, docs: dict[str, Document]
) -> dict[str, list[Evidence]]:
    _columns(frame, "evidence", ("query_id", "doc_id", "start", "end"))
    numbers = ["start", "end", *(["grade"] if "grade" in frame.columns else [])]
    for column in numbers:
        values = frame[column]
        if not pd.api.types.is_integer_dtype(values):
            raise DataError(
                f"evidence frame: column {column!r} must hold integers (found dtype {values.dtype})"
            )
    spans: dict[str, list[Evidence]] = {}
    for at, row in zip(frame.index, frame.to_dict("records"), strict=True):
        qid, doc_id = str(row["query_id"]), str(row["doc_id"])
        where = f"evidence frame, row with index {at!r}"
        grade = qrels.get(qid, {}).get(doc_id)
        if grade is None:
            raise DataError(f"{where}: ({qid!r}, {doc_id!r}) has no judgement in the qrels frame")
        start, end, size = int(row["start"]), int(row["end"]), len(docs[doc_id].text)
        if not 0 <= start < end <= size:
            raise DataError(
                f"{where}: expected 0 <= start < end <= {size} (the length of "
                f"{doc_id!r}), found start={start} end={end}"
            )
        grade = int(row.get("grade", grade))
        spans.setdefault(qid, []).append(Evidence(qid, doc_id, start, end, grade))
    return spans
