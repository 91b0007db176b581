"""BEIR-format loading: title handling, split selection, errors naming file and line, SciFact."""

from __future__ import annotations

import gzip
import json
import logging
import time
from pathlib import Path

import pytest

from ragbench.data.beir import check_beir, load_beir
from ragbench.errors import ConfigError, DataError
from tests.paths import SCIFACT, require


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_beir(
    root: Path,
    corpus: str | None = None,
    queries: str | None = None,
    qrels: dict[str, str] | None = None,
    gz: bool = False,
) -> Path:
    """A small BEIR folder; each part can be replaced by raw text."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = corpus or jsonl(
        [
            {"_id": "d1", "title": "Alpha", "text": "first text", "metadata": {"year": 2020}},
            {"_id": "d2", "title": "", "text": "second text"},
            {"_id": 3, "title": None, "text": "third text", "metadata": None},
        ]
    )
    queries = queries or jsonl(
        [
            {"_id": "q1", "text": "one?", "metadata": {}},
            {"_id": "q2", "text": "two?"},
            {"_id": "q3", "text": "three?"},
        ]
    )
    qrels = qrels or {
        "test": "query-id\tcorpus-id\tscore\nq2\td2\t1\nq1\td1\t2\nq1\t3\t0\n",
        "train": "query-id\tcorpus-id\tscore\nq3\td1\t1\n",
    }
    if gz:
        (root / "corpus.jsonl.gz").write_bytes(gzip.compress(corpus.encode("utf-8")))
    else:
        (root / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    (root / "queries.jsonl").write_text(queries, encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    for split, text in qrels.items():
        (root / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize("gz", [False, True])
def test_split_queries_in_qrels_order_with_title_prepended(tmp_path: Path, gz: bool) -> None:
    data = load_beir(make_beir(tmp_path / "tiny", gz=gz))
    assert data.name == "tiny" and data.split == "test"
    assert [q.id for q in data.queries] == ["q2", "q1"]
    assert data.qrels == {"q2": {"d2": 1}, "q1": {"d1": 2, "3": 0}}
    docs = data.doc_index
    assert docs["d1"].text == "Alpha first text"
    assert docs["d1"].metadata == {"year": 2020, "title": "Alpha"}
    assert docs["d2"].text == "second text" and docs["3"].text == "third text"
    assert not data.has_spans


def test_title_in_metadata_only(tmp_path: Path) -> None:
    data = load_beir(make_beir(tmp_path / "tiny"), title="metadata")
    assert data.doc_index["d1"].text == "first text"
    assert data.doc_index["d1"].metadata["title"] == "Alpha"
    with pytest.raises(ConfigError, match="title: expected 'prepend' or 'metadata'"):
        load_beir(tmp_path / "tiny", title="both")  # type: ignore[arg-type]


def test_other_split_and_fingerprints(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny")
    train = load_beir(root, split="train")
    assert [q.id for q in train.queries] == ["q3"] and train.split == "train"
    assert train.fingerprint != load_beir(root).fingerprint
    assert load_beir(root).fingerprint == load_beir(root).fingerprint


def test_qrels_without_header_line(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny", qrels={"test": "q1\td1\t1\n"})
    assert load_beir(root).qrels == {"q1": {"d1": 1}}


def test_problems_the_data_survives_are_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    qrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tgone\t1\nq9\td1\t1\nq1\td1\t2\n"
    root = make_beir(tmp_path / "tiny", qrels={"test": qrels})
    with caplog.at_level(logging.WARNING, logger="ragbench.data"):
        data = load_beir(root)
    assert data.qrels == {"q1": {"d1": 1, "gone": 1}}  # dangling doc kept, unknown query dropped
    assert [q.id for q in data.queries] == ["q1"]
    assert "3 data problem(s)" in caplog.text and "datasets validate" in caplog.text


@pytest.mark.parametrize(
    ("part", "text", "expected"),
    [
        (
            "corpus",
            '{"_id": "d1", "text": "x"}\n{"_id": "d2", "text": \n',
            "corpus.jsonl:2: invalid JSON",
        ),
        (
            "corpus",
            '{"_id": "d1", "text": "x"}\n["d2"]\n',
            "corpus.jsonl:2: expected a JSON object",
        ),
        ("corpus", '{"text": "x"}\n', "corpus.jsonl:1: expected a non-empty string '_id'"),
        ("corpus", '{"_id": "d1", "text": 5}\n', "corpus.jsonl:1: 'd1': expected a string 'text'"),
        ("queries", '{"_id": "q1"}\n', "queries.jsonl:1: 'q1': expected a string 'text'"),
        ("qrels", "query-id\tcorpus-id\tscore\nq1 d1 1\n", "test.tsv:2: expected 3 tab-separated"),
        ("qrels", "query-id\tcorpus-id\tscore\nq1\td1\thigh\n", "test.tsv:2: expected an integer"),
    ],
)
def test_unreadable_input_names_file_and_line(
    tmp_path: Path, part: str, text: str, expected: str
) -> None:
    args = {"qrels": {"test": text}} if part == "qrels" else {part: text}
    root = make_beir(tmp_path / "bad", **args)
    with pytest.raises(DataError, match=expected):
        load_beir(root)


def test_missing_files(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny")
    with pytest.raises(
        DataError, match=r"qrels/dev.tsv: no such file \(splits in .*: test, train\)"
    ):
        load_beir(root, split="dev")
    (root / "queries.jsonl").unlink()
    with pytest.raises(DataError, match=r"queries.jsonl: no such file"):
        load_beir(root)


def test_scifact_counts_and_integrity() -> None:
    root = require(SCIFACT)
    started = time.perf_counter()
    test = load_beir(root)
    assert time.perf_counter() - started < 2.0
    train = load_beir(root, split="train")
    assert len(test.documents) == 5183
    assert (len(test.queries), sum(map(len, test.qrels.values()))) == (300, 339)
    assert (len(train.queries), sum(map(len, train.qrels.values()))) == (809, 919)
    for data in (test, train):
        assert all(d in data.doc_index for judged in data.qrels.values() for d in judged)
    first = test.documents[0]
    assert first.text.startswith(first.metadata["title"] + " ")
    assert test.fingerprint == load_beir(root).fingerprint
    assert test.fingerprint != train.fingerprint
    assert check_beir(root) == []
