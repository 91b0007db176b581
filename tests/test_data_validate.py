"""`validate_dataset` / `ragbench datasets validate`: every problem, each with file and line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.data.validate import validate_dataset
from tests.paths import CHUNKING_EVAL, DEMO, REPO, SCIFACT, require
from tests.test_data_beir import jsonl, make_beir
from tests.test_data_chunking_eval import make_chunking, ref
from tests.test_data_spans import make_spans, query


def found(report: object) -> list[tuple[str, str, int | None, str]]:
    return [(p.severity, Path(p.file).name, p.line, p.message) for p in report.problems]  # type: ignore[attr-defined]


def has(
    problems: list[tuple[str, str, int | None, str]],
    severity: str,
    file: str,
    line: int | None,
    text: str,
) -> bool:
    return any(p[:3] == (severity, file, line) and text in p[3] for p in problems)


def test_beir_every_problem_is_reported(tmp_path: Path) -> None:
    corpus = (
        jsonl([{"_id": "d1", "title": "T", "text": "x"}])
        + '{"_id": "d2", "text": \n'
        + jsonl([{"_id": "d1", "text": "again"}, {"_id": "d4", "title": "", "text": " "}])
    )
    queries = jsonl(
        [
            {"_id": "q1", "text": "one"},
            {"_id": "q2", "text": "two"},
            {"_id": "q3", "text": ""},
            {"_id": "q1", "text": "dup"},
        ]
    )
    test = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tgone\t1\nq9\td1\t1\nq3\td1\tx\nq3\td4\t1\n"
    root = make_beir(tmp_path / "broken", corpus, queries, {"test": test, "train": "q1\td4\t0\n"})
    report = validate_dataset(root)
    assert report.format == "beir" and not report.ok
    problems = found(report)
    expected = [
        ("error", "corpus.jsonl", 2, "invalid JSON"),
        ("warning", "corpus.jsonl", 3, "duplicate document id 'd1' (first on line 1)"),
        ("warning", "corpus.jsonl", 4, "document 'd4' has no text"),
        ("warning", "queries.jsonl", 3, "query 'q3' has no text"),
        ("warning", "queries.jsonl", 4, "duplicate query id 'q1' (first on line 1)"),
        ("warning", "test.tsv", 3, "query 'q1' judges document 'gone', which is not in the corpus"),
        ("warning", "test.tsv", 4, "judgement of unknown query 'q9'"),
        ("error", "test.tsv", 5, "expected an integer score, found 'x'"),
        ("error", "train.tsv", None, "split 'train': no judgement has a grade >= 1"),
        ("warning", "queries.jsonl", 2, "query 'q2' is judged in no qrels file"),
    ]
    for problem in expected:
        assert has(problems, *problem), (problem, problems)
    assert len(problems) == len(expected)
    assert [p.line for p in report.errors] == [2, 5, None]


def test_spans_every_problem_is_reported(tmp_path: Path) -> None:
    docs = {"a.md": "one two one", "b.md": "bee", "empty.md": "  \n"}
    queries: list[dict | str] = [
        query("q1", evidence=[{"doc_id": "a.md", "text": "three"}]),
        query("q2", evidence=[{"doc_id": "a.md", "text": "one"}]),
        query("q3", evidence=[{"doc_id": "b.md", "start": 2, "end": 9}]),
        '{"id": "q4", ',
        query("q5", evidence=[{"doc_id": "b.md", "text": "bee", "grade": 2.5}]),
        query("q6", evidence=[{"doc_id": "b.md", "text": "bee"}], qrels={"gone.md": 1}),
        query("q6", evidence=[{"doc_id": "b.md", "text": "bee"}]),
        query("q7", evidence=[]),
        {"id": "q8", "text": " ", "evidence": [{"doc_id": "b.md", "text": "bee"}]},
        query("q9", evidence=[{"doc_id": "b.md", "text": "bee"}], qrels={"a.md": "yes"}),
    ]
    report = validate_dataset(make_spans(tmp_path / "broken", queries, docs))
    problems = found(report)
    expected = [
        ("warning", "empty.md", None, "not loaded: empty"),
        ("error", "queries.jsonl", 1, "query 'q1', evidence 1 in 'a.md': excerpt not found"),
        ("error", "queries.jsonl", 2, "excerpt occurs more than once (at 0 and 8)"),
        ("error", "queries.jsonl", 3, "0 <= start < end <= 3"),
        ("error", "queries.jsonl", 4, "invalid JSON"),
        ("error", "queries.jsonl", 5, "expected a positive integer 'grade', found 2.5"),
        ("warning", "queries.jsonl", 6, "qrels judges document 'gone.md', which is not in corpus/"),
        ("warning", "queries.jsonl", 7, "duplicate query id 'q6' (first on line 6"),
        ("warning", "queries.jsonl", 8, "query 'q7' has no evidence and no qrels"),
        ("warning", "queries.jsonl", 9, "query 'q8' has no text"),
        ("error", "queries.jsonl", 10, "qrels['a.md']: expected an integer grade, found 'yes'"),
    ]
    for problem in expected:
        assert has(problems, *problem), (problem, problems)
    assert len(problems) == len(expected)


def test_chunking_eval_every_problem_is_reported(tmp_path: Path) -> None:
    rows = [
        ["ok?", [ref("Beta", 0, 4)], "beta"],
        ["off?", [ref("Beta", 1, 5)], "beta"],
        ["", [ref("Beta", 0, 4)], "beta"],
        ["far?", [ref("Beta", 0, 4), ref("text", 5, 4)], "beta"],
    ]
    problems = found(validate_dataset(make_chunking(tmp_path / "broken", rows)))
    assert has(
        problems,
        "error",
        "questions_df.csv",
        3,
        "row 2 (q0002): reference 1 in 'beta.md': the document at [1, 5) holds 'eta '",
    )
    assert has(problems, "warning", "questions_df.csv", 4, "row 3 (q0003): empty question")
    assert has(problems, "error", "questions_df.csv", 5, "row 4 (q0004): reference 2")
    assert len(problems) == 3


def test_real_and_bundled_sets_are_clean() -> None:
    for root in (require(SCIFACT), require(CHUNKING_EVAL), require(DEMO)):
        report = validate_dataset(root)
        assert report.ok, str(report)
    assert validate_dataset("demo").path == DEMO.resolve()


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require(DEMO)
    done = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", "datasets", "validate", "datasets/demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no problems" in done.stdout
    root = make_spans(
        tmp_path / "broken", [query("q1", evidence=[{"doc_id": "a.md", "text": "cat"}]), "{"]
    )
    assert main(["datasets", "validate", str(root)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("(spans): 2 problem(s)")
    assert out[1].startswith("error: ") and "queries.jsonl:1: query 'q1'" in out[1]
    assert "queries.jsonl:2: invalid JSON" in out[2]
    assert main(["datasets", "validate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no labeled queries" in err and "ragbench datasets generate" in err
