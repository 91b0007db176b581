"""DataFrames → LabeledSet: columns to metadata, evidence grades, errors naming frame and row."""

from __future__ import annotations

import pandas as pd
import pytest

from ragbench.data.frames import from_frames
from ragbench.errors import DataError


def frames() -> dict[str, pd.DataFrame]:
    return {
        "documents": pd.DataFrame(
            {"doc_id": ["d1", "d2"], "text": ["alpha beta", "gamma"], "year": [2020, None]}
        ),
        "queries": pd.DataFrame({"query_id": [1, 2], "text": ["a?", "g?"], "type": ["x", "y"]}),
        "qrels": pd.DataFrame(
            {"query_id": [1, 1, 2], "doc_id": ["d1", "d2", "d2"], "grade": [2, 0, 1]}
        ),
        "evidence": pd.DataFrame({"query_id": ["1"], "doc_id": ["d1"], "start": [0], "end": [5]}),
    }


def test_frames_become_a_labeled_set() -> None:
    data = from_frames(**frames(), name="mine", split="dev")
    assert (data.name, data.split) == ("mine", "dev")
    assert [q.id for q in data.queries] == ["1", "2"] and data.queries[0].metadata == {"type": "x"}
    assert data.doc_index["d1"].metadata == {"year": 2020.0}
    assert data.doc_index["d2"].metadata == {}
    assert data.qrels == {"1": {"d1": 2, "d2": 0}, "2": {"d2": 1}}
    [span] = data.evidence["1"]
    assert (span.doc_id, span.start, span.end, span.grade) == ("d1", 0, 5, 2)


def test_evidence_grade_column_and_no_evidence() -> None:
    parts = frames()
    parts["evidence"]["grade"] = [1]
    assert from_frames(**parts).evidence["1"][0].grade == 1
    parts.pop("evidence")
    assert not from_frames(**parts).has_spans


@pytest.mark.parametrize(
    ("frame", "change", "expected"),
    [
        (
            "documents",
            lambda f: f.drop(columns="text"),
            r"documents frame: missing column\(s\) 'text'; it has 'doc_id', 'year'",
        ),
        (
            "documents",
            lambda f: f.assign(text=["x", None]),
            r"documents frame: column 'text' must hold strings; the row with index 1",
        ),
        (
            "documents",
            lambda f: f.assign(doc_id=["d1", "d1"]),
            r"documents frame: doc_id 'd1' appears again in the row with index 1",
        ),
        (
            "queries",
            lambda f: f.assign(query_id=[1, None]),
            r"queries frame: column 'query_id' is empty in the row with index 1",
        ),
        (
            "qrels",
            lambda f: f.assign(doc_id=["d1", "d9", "d2"]),
            r"query '1' judges doc_id 'd9', which is not in the documents frame",
        ),
        (
            "qrels",
            lambda f: f.assign(query_id=[1, 1, 3]),
            r"qrels frame: query_id '3' is not in the queries frame",
        ),
        (
            "qrels",
            lambda f: f.assign(grade=[1.5, 1, 1]),
            r"column 'grade' must hold integer grades",
        ),
        (
            "evidence",
            lambda f: f.assign(end=[50]),
            r"evidence frame, row with index 0: expected 0 <= start < end <= 10",
        ),
        (
            "evidence",
            lambda f: f.assign(doc_id=["d9"]),
            r"\('1', 'd9'\) has no judgement in the qrels frame",
        ),
        (
            "evidence",
            lambda f: f.assign(start=[0.5]),
            r"evidence frame: column 'start' must hold integers",
        ),
    ],
)
def test_bad_frames(frame: str, change: object, expected: str) -> None:
    parts = frames()
    parts[frame] = change(parts[frame])  # type: ignore[operator]
    with pytest.raises(DataError, match=expected):
        from_frames(**parts)
