"""Span-labeled format: locating excerpts and offsets, qrels from evidence, errors, the demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given as examples
from hypothesis import strategies as st

from ragbench.data.cuts import Cuts
from ragbench.data.spans import check_spans, load_spans
from ragbench.errors import DataError
from tests.paths import DEMO, require

DOCS = {
    "a.md": "# Alpha\n\nThe quick brown fox. The lazy dog.\n",
    "sub/b.txt": "Port 9743 serves the admin API. Port 9744 serves metrics.\n",
    "c.md": "# Gamma\n\nNothing to see here.\n",
}


def make_spans(root: Path, queries: list[dict | str], docs: dict[str, str] = DOCS) -> Path:
    """A span-labeled folder; a query given as a string is written as that raw line."""
    for name, text in docs.items():
        path = root / "corpus" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    lines = [q if isinstance(q, str) else json.dumps(q) for q in queries]
    (root / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def query(qid: str = "q1", **fields: object) -> dict:
    return {"id": qid, "text": f"question {qid}?", **fields}


def test_excerpts_and_offsets_become_spans_and_qrels(tmp_path: Path) -> None:
    root = make_spans(
        tmp_path / "mine",
        [
            query(
                "q1",
                type="lexical",
                evidence=[
                    {"doc_id": "a.md", "text": "The lazy dog."},
                    {"doc_id": "sub/b.txt", "start": 0, "end": 9, "grade": 1},
                ],
                qrels={"c.md": 1},
                metadata={"source": "hand"},
            ),
            query(
                "q2",
                evidence=[{"doc_id": "sub/b.txt", "text": "Port 9744", "start": 32, "end": 41}],
            ),
            query("q3", split="train", evidence=[{"doc_id": "a.md", "text": "quick brown fox"}]),
        ],
    )
    data = load_spans(root)
    assert data.name == "mine" and [q.id for q in data.queries] == ["q1", "q2"]
    assert data.queries[0].metadata == {"source": "hand", "type": "lexical"}
    assert data.qrels == {"q1": {"a.md": 2, "sub/b.txt": 1, "c.md": 1}, "q2": {"sub/b.txt": 2}}
    docs = data.doc_index
    for spans in data.evidence.values():
        for e in spans:
            assert 0 <= e.start < e.end <= len(docs[e.doc_id].text)
    first = data.evidence["q1"][0]
    assert docs["a.md"].text[first.start : first.end] == "The lazy dog." and first.grade == 2
    assert data.evidence["q2"][0].start == 32
    train = load_spans(root, split="train")
    assert [q.id for q in train.queries] == ["q3"] and train.split == "train"


def test_offsets_pick_one_of_several_occurrences(tmp_path: Path) -> None:
    docs = {"r.md": "ab ab ab"}
    root = make_spans(
        tmp_path / "s",
        [query(evidence=[{"doc_id": "r.md", "text": "ab", "start": 3, "end": 5}])],
        docs,
    )
    assert load_spans(root).evidence["q1"][0].start == 3


def test_a_query_judged_twice_in_one_document_keeps_the_highest_grade(tmp_path: Path) -> None:
    evidence = [
        {"doc_id": "a.md", "text": "The quick", "grade": 1},
        {"doc_id": "a.md", "text": "lazy dog", "grade": 2},
    ]
    data = load_spans(make_spans(tmp_path / "s", [query(evidence=evidence)]))
    assert data.qrels == {"q1": {"a.md": 2}} and len(data.evidence["q1"]) == 2


@pytest.mark.parametrize(
    ("evidence", "qrels", "expected"),
    [
        (
            {"doc_id": "a.md", "text": "The cat"},
            {},
            r"query 'q1', evidence 1 in 'a.md': excerpt not found",
        ),
        (
            {"doc_id": "a.md", "text": "The"},
            {},
            r"'a.md': excerpt occurs more than once \(at 9 and 30\)",
        ),
        ({"doc_id": "nope.md", "text": "x"}, {}, r"document 'nope.md' is not in corpus/"),
        ({"doc_id": "a.md", "start": 5, "end": 5}, {}, r"0 <= start < end <= 44"),
        ({"doc_id": "a.md", "start": 0, "end": 99}, {}, r"0 <= start < end <= 44"),
        ({"doc_id": "a.md", "start": 0}, {}, r"0 <= start < end"),
        (
            {"doc_id": "a.md", "text": "Alpha", "start": 0, "end": 7},
            {},
            r"'text' differs from the document at \[0, 7\), which holds '# Alpha'",
        ),
        ({"doc_id": "a.md"}, {}, r"give the excerpt 'text' or the offsets"),
        (
            {"doc_id": "a.md", "text": "lazy", "grade": "high"},
            {},
            r"expected a positive integer 'grade'",
        ),
        ({"doc_id": "a.md", "text": "lazy", "page": 2}, {}, r"unknown key\(s\) 'page'"),
        (
            {"doc_id": "a.md", "text": "lazy"},
            {"a.md": 1},
            r"qrels repeats evidence document 'a.md'",
        ),
        (
            {"doc_id": "a.md", "text": "lazy"},
            {"c.md": 1.5},
            r"qrels\['c.md'\]: expected an integer grade",
        ),
    ],
)
def test_bad_evidence_names_file_line_query_and_document(
    tmp_path: Path, evidence: dict, qrels: dict, expected: str
) -> None:
    queries = [
        query("q0", evidence=[{"doc_id": "c.md", "text": "Nothing"}]),
        query("q1", evidence=[evidence], qrels=qrels),
    ]
    root = make_spans(tmp_path / "s", queries)
    with pytest.raises(DataError, match=r"queries.jsonl:2: .*" + expected):
        load_spans(root)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"id": "q1", "text": "x", "evidence": []', r"queries.jsonl:1: invalid JSON"),
        (
            '{"id": "q1", "text": "x"}',
            r"no judged queries .* the first problem: .*queries.jsonl:1: query 'q1' has no "
            r"evidence and no qrels or relevant documents \(left out\)",
        ),
        (
            '{"id": "q1", "text": "x", "evidnce": []}',
            r"unknown key\(s\) 'evidnce' \(allowed: id, text",
        ),
        ('{"id": "", "text": "x", "evidence": []}', r"expected a non-empty string 'id'"),
        (
            '{"id": "q1", "text": "x", "evidence": [], "split": 1}',
            r"expected a string under 'split'",
        ),
        (
            '{"id": "q1", "text": "x", "qrels": {"a.md": 1}, "levels": ["passage"]}',
            r"query 'q1': expected under 'levels' a non-empty list of document, chunk, span, "
            r"found \['passage'\]",
        ),
        (
            '{"id": "q1", "text": "x", "qrels": {"a.md": 1}, "levels": ["span"]}',
            r"query 'q1': 'levels' names the chunk or span level, which needs evidence",
        ),
        (
            '{"id": "q1", "text": "x", "qrels": {"a.md": 1}, "levels": "span"}',
            r"expected a list under 'levels'",
        ),
    ],
)
def test_bad_query_lines(tmp_path: Path, line: str, expected: str) -> None:
    with pytest.raises(DataError, match=expected):
        load_spans(make_spans(tmp_path / "s", [line]))


def test_levels_restrict_a_query_and_enter_the_fingerprint(tmp_path: Path) -> None:
    lazy = {"doc_id": "a.md", "text": "lazy"}
    plain = load_spans(make_spans(tmp_path / "plain", [query(evidence=[lazy])]))
    levels = load_spans(
        make_spans(tmp_path / "levels", [query(evidence=[lazy], levels=["span", "chunk"])])
    )
    assert plain.levels == {} and plain.judged_at("document") == {"q1"}
    assert levels.levels == {"q1": frozenset({"chunk", "span"})}
    assert levels.judged_at("document") == set() and levels.judged_at("span") == {"q1"}
    assert levels.fingerprint != plain.fingerprint
    assert levels.subset(["q1"]).levels == levels.levels


def test_missing_split_names_the_splits_found(tmp_path: Path) -> None:
    root = make_spans(tmp_path / "s", [query(evidence=[{"doc_id": "a.md", "text": "lazy"}])])
    with pytest.raises(DataError, match=r"no judged queries of split 'dev' \(splits found: test\)"):
        load_spans(root, split="dev")


def test_demo_validates_and_every_evidence_is_located() -> None:
    root = require(DEMO)
    data = load_spans(root)
    assert data.name == "demo" and len(data.queries) == 117 and len(data.documents) == 58
    assert check_spans(root) == []
    records = [
        json.loads(line) for line in (root / "queries.jsonl").read_text("utf-8").splitlines()
    ]
    docs = data.doc_index
    for record in records:
        spans = data.evidence[record["id"]]
        assert len(spans) == len(record["evidence"])
        for given, span in zip(record["evidence"], spans, strict=True):
            assert docs[span.doc_id].text[span.start : span.end] == given["text"]
            assert (
                span.grade == given["grade"] and data.qrels[record["id"]][span.doc_id] == span.grade
            )
        for doc_id, grade in record.get("qrels", {}).items():
            assert data.qrels[record["id"]][doc_id] == grade
    types = {q.metadata["type"] for q in data.queries}
    assert types == {"paraphrase", "lexical", "multi_doc", "split", "general"}


# ---------------------------------------------------------------- cuts.jsonl


def _with_cuts(root: Path, lines: list[str], queries: list[dict | str] | None = None) -> Path:
    make_spans(root, queries or [query(relevant=["c.md"])])
    (root / "cuts.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root


def test_cuts_are_applied_on_load_and_evidence_refers_to_the_cut_text(tmp_path: Path) -> None:
    # "The quick brown fox. " (offsets 9-30) cut out of a.md; "The lazy dog." is then at 9
    cut = json.dumps({"doc_id": "a.md", "start": 9, "end": 30, "query": "q1"})
    evidence = {"doc_id": "a.md", "start": 9, "end": 22, "text": "The lazy dog."}
    root = _with_cuts(tmp_path, [cut], [query(evidence=[evidence])])
    data = load_spans(root)
    assert data.doc_index["a.md"].text == "# Alpha\n\nThe lazy dog.\n"
    assert data.doc_index["a.md"].metadata["cut"] == 21
    assert (root / "corpus" / "a.md").read_text() == DOCS["a.md"]  # the file stays as it was
    assert check_spans(root) == []


def test_overlapping_cuts_merge(tmp_path: Path) -> None:
    lines = [
        json.dumps({"doc_id": "a.md", "start": 9, "end": 25}),
        json.dumps({"doc_id": "a.md", "start": 20, "end": 30}),
    ]
    data = load_spans(_with_cuts(tmp_path, lines))
    assert data.doc_index["a.md"].text == "# Alpha\n\nThe lazy dog.\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"doc_id": "zz.md", "start": 0, "end": 3}', "doc_id 'zz.md': not a document of corpus/"),
        ('{"doc_id": "a.md", "start": 5, "end": 99}', "expected 0 <= start < end <= 44"),
        ('{"doc_id": "a.md", "start": "5", "end": 9}', "start and end must be integers"),
        ('{"doc_id": "a.md", "start": 0, "end": 3, "why": 1}', "unknown key(s) 'why'"),
    ],
)
def test_bad_cuts_name_the_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    root = _with_cuts(tmp_path, ['{"doc_id": "a.md", "start": 0, "end": 2}', line])
    with pytest.raises(DataError) as raised:
        load_spans(root)
    assert "cuts.jsonl:2: " in str(raised.value) and expected in str(raised.value)
    assert [p.line for p in check_spans(root)] == [2]


@examples(
    text=st.text(alphabet="ab \n", min_size=1, max_size=40),
    ranges=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 8)), max_size=5),
)
def test_a_position_outside_the_cuts_keeps_its_character(
    text: str, ranges: list[tuple[int, int]]
) -> None:
    cuts = Cuts.of((min(s, len(text)), min(s + n, len(text))) for s, n in ranges)
    cut = cuts.apply(text)
    removed = {i for start, end in cuts.ranges for i in range(start, end)}
    assert len(cut) == len(text) - len(removed)
    for i, char in enumerate(text):
        if i not in removed:
            assert cut[cuts.position(i)] == char
