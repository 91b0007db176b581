"""chunking_evaluation format: ids, exact offsets, errors naming the CSV row, the real set."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ragbench.data.chunking_eval import check_chunking_eval, load_chunking_eval
from ragbench.errors import DataError
from tests.paths import CHUNKING_EVAL, require

CORPORA = {"alpha": "Héllo wörld. Second sentence here.", "beta": "Beta text only."}


def make_chunking(
    root: Path,
    rows: list[list[object]],
    header: tuple[str, ...] = ("question", "references", "corpus_id"),
) -> Path:
    (root / "corpora").mkdir(parents=True)
    for stem, text in CORPORA.items():
        (root / "corpora" / f"{stem}.md").write_text(text, encoding="utf-8")
    with open(root / "questions_df.csv", "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in rows:
            writer.writerow([json.dumps(c) if isinstance(c, list) else c for c in row])
    return root


def ref(content: str, start: int, end: int) -> dict:
    return {"content": content, "start_index": start, "end_index": end}


def test_rows_become_queries_with_spans(tmp_path: Path) -> None:
    rows = [
        ["Where?\nreally", [ref("wörld", 6, 11), ref("Second", 13, 19)], "alpha"],
        ["What?", [ref("Beta", 0, 4)], "beta"],
    ]
    data = load_chunking_eval(make_chunking(tmp_path / "ce", rows))
    assert data.name == "ce" and [d.id for d in data.documents] == ["alpha.md", "beta.md"]
    assert [q.id for q in data.queries] == ["q0001", "q0002"]
    assert data.queries[0].text == "Where?\nreally" and data.queries[0].metadata == {
        "corpus_id": "alpha"
    }
    assert data.qrels == {"q0001": {"alpha.md": 1}, "q0002": {"beta.md": 1}}
    assert [(e.doc_id, e.start, e.end, e.grade) for e in data.evidence["q0001"]] == [
        ("alpha.md", 6, 11, 1),
        ("alpha.md", 13, 19, 1),
    ]
    with pytest.raises(DataError, match="only the split 'test'"):
        load_chunking_eval(tmp_path / "ce", split="train")


@pytest.mark.parametrize(
    ("references", "corpus", "expected"),
    [
        (
            [ref("world", 6, 11)],
            "alpha",
            r"row 2 \(q0002\): reference 1 in 'alpha.md': "
            r"the document at \[6, 11\) holds 'wörld', not 'world'",
        ),
        ([ref("x", 30, 99)], "alpha", r"row 2 \(q0002\): reference 1 .*0 <= start < end <= 34"),
        ([{"content": "x"}], "alpha", r"row 2 .*expected a string 'content' and integers"),
        ("not json", "alpha", r"row 2 \(q0002\): 'references' is not valid JSON"),
        (
            [ref("Beta", 0, 4)],
            "gamma",
            r"row 2 \(q0002\): unknown corpus_id 'gamma' \(corpora: alpha, beta\)",
        ),
    ],
)
def test_bad_rows_name_the_row_and_line(
    tmp_path: Path, references: object, corpus: str, expected: str
) -> None:
    rows = [["Fine?", [ref("Beta", 0, 4)], "beta"], ["Bad?", references, corpus]]
    root = make_chunking(tmp_path / "ce", rows)
    with pytest.raises(DataError, match=r"questions_df.csv:3: " + expected):
        load_chunking_eval(root)


def test_missing_column(tmp_path: Path) -> None:
    root = make_chunking(tmp_path / "ce", [["q?", "[]"]], header=("question", "references"))
    with pytest.raises(DataError, match=r"questions_df.csv:1: missing column\(s\) 'corpus_id'"):
        load_chunking_eval(root)


def test_real_set_offsets_are_exact() -> None:
    root = require(CHUNKING_EVAL)
    data = load_chunking_eval(root)
    assert len(data.documents) == 5 and len(data.queries) == 472
    assert sum(map(len, data.evidence.values())) == 790
    assert check_chunking_eval(root) == []
    with open(root / "questions_df.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    docs = data.doc_index
    for row, q in zip(rows, data.queries, strict=True):
        assert q.text == row["question"]
        contents = [r["content"] for r in json.loads(row["references"])]
        spans = data.evidence[q.id]
        assert [docs[e.doc_id].text[e.start : e.end] for e in spans] == contents
        assert data.qrels[q.id] == {f"{row['corpus_id']}.md": 1}
