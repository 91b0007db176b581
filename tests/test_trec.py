"""TREC / BEIR qrels and run files: round trips, errors naming file and line, frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragbench.data.trec import (
    qrels_from_frame,
    qrels_to_frame,
    ranking_to_run,
    read_qrels,
    read_run,
    run_from_frame,
    run_to_frame,
    write_qrels,
    write_ranking,
    write_run,
)
from ragbench.errors import DataError
from ragbench.evaluate.metrics import evaluate, evaluate_run
from ragbench.types import Ranking


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_qrels_round_trip(tmp_path: Path) -> None:
    qrels = {"q1": {"d1": 2, "d2": 0}, "q2": {"é-3": 1}}
    write_qrels(tmp_path / "qrels.txt", qrels)
    assert read_qrels(tmp_path / "qrels.txt") == qrels


def test_trec_qrels_with_comments_blank_lines_and_any_whitespace(tmp_path: Path) -> None:
    path = write(tmp_path, "q.txt", "# judged by hand\nq1 0 d1 1\n\nq1\t0   d2  0\r\nq2 Q0 d1 3\n")
    assert read_qrels(path) == {"q1": {"d1": 1, "d2": 0}, "q2": {"d1": 3}}


def test_beir_tsv_qrels(tmp_path: Path) -> None:
    path = write(
        tmp_path, "test.tsv", "query-id\tcorpus-id\tscore\n1\tdoc 7\t1\n1\td8\t0\n2\td9\t2\n"
    )
    assert read_qrels(path) == {"1": {"doc 7": 1, "d8": 0}, "2": {"d9": 2}}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("q1 0 d1 1\nq1 0 d2\n", 2, "expected 4 whitespace-separated columns"),
        ("q1 0 d1 1\n\nq1 0 d2 high\n", 3, "expected an integer grade, found 'high'"),
        ("q1 0 d1 1\nq1 0 d1 2\n", 2, "lists document 'd1' again (first on line 1)"),
        ("query-id\tcorpus-id\tscore\nq1\td1\n", 2, "expected 3 tab-separated columns"),
        ("query-id\tcorpus-id\tscore\nq1\td1\t1.5\n", 2, "integer grade, found '1.5'"),
        ("q1 0 d1 1\nq1 0 d2 -2\n", 2, "expected a relevance grade >= 0, found -2"),
    ],
)
def test_qrels_errors_name_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = write(tmp_path, "bad.qrels", text)
    with pytest.raises(DataError) as info:
        read_qrels(path)
    assert f"{path}:{line}: " in str(info.value)
    assert message in str(info.value)


def test_run_round_trip_is_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    run = {
        f"q{q}": {f"d{d}": float(rng.normal() * 10.0 ** rng.integers(-8, 8)) for d in range(20)}
        for q in range(5)
    }
    run["q0"]["tie-a"] = run["q0"]["tie-b"] = 1 / 3
    run["q1"]["tiny"] = 5e-324
    write_run(tmp_path / "run.trec", run)
    back = read_run(tmp_path / "run.trec")
    assert back == run  # exact floats


def test_run_file_is_in_trec_eval_order_with_ranks_from_one(tmp_path: Path) -> None:
    write_run(tmp_path / "run.trec", {"q": {"a": 1.0, "c": 2.0, "b": 1.0}}, tag="bm25")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines == ["q Q0 c 1 2.0 bm25", "q Q0 b 2 1.0 bm25", "q Q0 a 3 1.0 bm25"]


def test_write_ranking_skips_padding_and_keeps_first_occurrences(tmp_path: Path) -> None:
    ranking = Ranking.from_rows([[("b", 0.5), ("a", 0.5), ("b", 9.0)], [("c", 1.0)]], k=4)
    assert ranking_to_run(ranking, ["q1", "q2"]) == {"q1": {"b": 0.5, "a": 0.5}, "q2": {"c": 1.0}}
    path = tmp_path / "run.trec"
    write_ranking(path, ranking, ["q1", "q2"])
    qrels = {"q1": {"a": 1}, "q2": {"c": 1}}
    from_file = evaluate_run(qrels, read_run(path), ["mrr", "ndcg@3"])
    direct = evaluate(qrels, ranking, ["q1", "q2"], ["mrr", "ndcg@3"])
    assert from_file["mrr"].tolist() == direct["mrr"].tolist() == [0.5, 1.0]


@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "c d", "%e", ""]), st.sampled_from([0.0, 0.5, 2.0])
            ),
            max_size=5,
        ),
        min_size=1,
        max_size=4,
    ),
    st.booleans(),
)
def test_write_ranking_is_write_run_of_its_run(
    tmp_path_factory: pytest.TempPathFactory, rows: list[list[tuple[str, float]]], repeat: bool
) -> None:
    """Rows already in order are written as they are, the others sorted: either way the file
    is that of the run the ranking stands for (padding, repeats, ties, one query twice)."""
    folder = tmp_path_factory.mktemp("runs")
    ranking = Ranking.from_rows([sorted(r, key=lambda e: -e[1]) for r in rows], k=5)
    qids = [f"q {i}" for i in range(len(rows))]
    if repeat:
        qids[-1] = qids[0]
    write_ranking(folder / "ranking.trec", ranking, qids, tag="t")
    write_run(folder / "run.trec", ranking_to_run(ranking, qids), tag="t")
    assert (folder / "ranking.trec").read_text() == (folder / "run.trec").read_text()


def test_writing_rejects_fields_that_would_not_read_back(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not valid UTF-8"):
        write_run(tmp_path / "r", {"q": {"caf\udce9": 1.0}})
    with pytest.raises(ValueError, match="''"):
        write_run(tmp_path / "r", {"q": {"d": 1.0}}, tag="")
    with pytest.raises(ValueError, match="rows for 3 query ids"):
        ranking_to_run(Ranking.from_rows([[("a", 1.0)]]), ["q1", "q2", "q3"])


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("q Q0 d 1 1.0 t\nq Q0 e 2 0.5\n", 2, "expected 6 whitespace-separated columns"),
        ("q Q0 d 1 high t\n", 1, "expected a numeric score, found 'high'"),
        ("q Q0 d 1 nan t\n", 1, "expected a numeric score, found 'nan'"),
        ("q Q0 d 1 1.0 t\n\nq Q0 d 2 0.5 t\n", 3, "lists document 'd' again (first on line 1)"),
    ],
)
def test_run_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, "bad.run", text)
    with pytest.raises(DataError) as info:
        read_run(path)
    assert f"{path}:{line}: " in str(info.value)
    assert message in str(info.value)


def test_non_utf8_file_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.run"
    path.write_bytes("q Q0 caf\xe9 1 1.0 t\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_run(path)


# ---------------------------------------------------------------- DataFrames


def test_frame_round_trips() -> None:
    qrels = {"q1": {"d1": 2, "d2": 0}, "q2": {"d1": 1}}
    run = {"q1": {"d1": 0.25, "d3": -1.5}}
    assert qrels_from_frame(qrels_to_frame(qrels)) == qrels
    assert run_from_frame(run_to_frame(run)) == run
    assert list(qrels_to_frame(qrels).columns) == ["query_id", "doc_id", "grade"]


def test_frames_with_other_column_names_and_int_ids() -> None:
    frame = pd.DataFrame({"query-id": [1, 1], "corpus-id": [7, 8], "score": [1.0, 0.0]})
    assert qrels_from_frame(frame, query="query-id", doc="corpus-id", grade="score") == {
        "1": {"7": 1, "8": 0}
    }


def test_frame_errors_name_the_columns() -> None:
    frame = pd.DataFrame({"qid": ["q"], "doc_id": ["d"], "grade": [1]})
    with pytest.raises(DataError, match="missing column\\(s\\) 'query_id'; it has 'qid'"):
        qrels_from_frame(frame)
    with pytest.raises(DataError, match="missing column\\(s\\) 'query_id', 'score'"):
        run_from_frame(frame)
    bad_grades = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "grade": [0.5]})
    with pytest.raises(DataError, match="column 'grade' must hold integer grades"):
        qrels_from_frame(bad_grades)
    bad_scores = pd.DataFrame({"query_id": ["q"], "doc_id": ["d"], "score": ["x"]})
    with pytest.raises(DataError, match="column 'score' must hold numbers"):
        run_from_frame(bad_scores)
    repeated = pd.DataFrame({"query_id": ["q", "q"], "doc_id": ["d", "d"], "score": [1, 2]})
    with pytest.raises(DataError, match="lists document 'd' twice \\(row with index 1\\)"):
        run_from_frame(repeated)
