"""Reference answers in labeled sets: the span format's ``answer``, ``LabeledSet.answers`` and the
fingerprint, and the demo's 117 answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.data.catalog import load_dataset
from ragbench.data.labeled import Evidence, LabeledSet
from ragbench.data.spans import check_spans, load_spans
from ragbench.data.summary import summarize
from ragbench.errors import DataError
from ragbench.types import Document, Query
from tests.paths import DEMO, require
from tests.test_data_spans import make_spans, query

EVIDENCE = [{"doc_id": "a.md", "text": "The lazy dog."}]


def test_span_answers_reach_the_labeled_set(tmp_path: Path) -> None:
    root = make_spans(
        tmp_path / "s",
        [
            query("q1", answer="A lazy dog.", evidence=EVIDENCE),
            query("q2", evidence=EVIDENCE),
            query("q3", answer=None, evidence=EVIDENCE),
            query("q4", split="train", answer="Trained.", evidence=EVIDENCE),
        ],
    )
    data = load_spans(root)
    assert data.answers == {"q1": "A lazy dog."} and data.has_answers
    assert load_spans(root, split="train").answers == {"q4": "Trained."}
    assert data.subset(["q2", "q1"]).answers == {"q1": "A lazy dog."}
    assert not data.subset(["q2", "q3"]).has_answers
    assert summarize(data).answers == 1 and "answers=1" in repr(data)
    assert check_spans(root) == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (3, "query 'q2': expected a string under 'answer', found 3"),
        (["A."], "query 'q2': expected a string under 'answer', found ['A.']"),
        ("", "query 'q2': expected a non-empty string under 'answer', found ''"),
        (" \n", "query 'q2': expected a non-empty string under 'answer', found ' \\n'"),
    ],
)
def test_a_bad_answer_names_file_and_line(tmp_path: Path, answer: object, expected: str) -> None:
    root = make_spans(
        tmp_path / "s",
        [query("q1", evidence=EVIDENCE), query("q2", answer=answer, evidence=EVIDENCE)],
    )
    where = f"{root / 'queries.jsonl'}:2: "
    with pytest.raises(DataError) as caught:
        load_spans(root)
    assert str(caught.value) == where + expected
    problems = check_spans(root)
    assert [(p.severity, str(p)) for p in problems] == [("error", where + expected)]
    assert main(["datasets", "validate", str(root)]) == 1


def _tiny(**answers: str) -> LabeledSet:
    return LabeledSet(
        "tiny",
        [Document("a.md", "The lazy dog."), Document("b.md", "Port 9743.")],
        [Query("q1", "dog?"), Query("q2", "port?")],
        {"q1": {"a.md": 2}, "q2": {"b.md": 1}},
        {"q1": [Evidence("q1", "a.md", 4, 8, 2)]},
        "test",
        answers=answers,
    )


def test_answers_enter_the_fingerprint_only_when_present() -> None:
    # the fingerprint this set had before labeled sets could carry answers
    before = "c8f03fcd33bca5e73b530127e03bb7dab07add6f0a4205414e53c5fba8d043ea"
    assert _tiny().fingerprint == before and not _tiny().has_answers
    one = _tiny(q1="A lazy one.")
    assert one.fingerprint not in {before, _tiny(q1="A quick one.").fingerprint}
    assert one.fingerprint != _tiny(q2="A lazy one.").fingerprint
    assert one.fingerprint == _tiny(q1="A lazy one.").fingerprint
    assert one.corpus_fingerprint == _tiny().corpus_fingerprint


def test_every_demo_query_has_its_own_reference_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    require(DEMO)
    data = load_dataset("demo")
    assert len(data.queries) == 117 and set(data.answers) == {q.id for q in data.queries}
    records = [json.loads(line) for line in (DEMO / "queries.jsonl").read_text().splitlines()]
    for record in records:
        answer = record["answer"]
        assert answer == answer.strip() and "\n" not in answer and "`" not in answer, record["id"]
        assert 40 <= len(answer) <= 500, record["id"]
        for item in record["evidence"]:
            assert answer not in item["text"], record["id"]  # written, not copied
    assert [list(r)[:4] for r in records] == [["id", "text", "type", "answer"]] * 117
    assert main(["datasets", "info", "demo"]) == 0
    assert "answers      117 of 117 queries" in capsys.readouterr().out
