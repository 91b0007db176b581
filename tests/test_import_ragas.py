"""`ragbench datasets import-ragas`: test sets written by ragas itself (JSONL and CSV) become
span-labeled sets that validate, load with their answers, and run in a sweep."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.data.ragas_import import import_ragas
from ragbench.data.spans import load_spans
from ragbench.data.validate import validate_dataset
from ragbench.errors import DataError
from ragbench.experiment.runner import run

RETENTION = "Kestrel keeps records for seven days.\nAfter that, old segments are deleted."
COMPACTION = "A compacted topic keeps\nthe latest record for every key."
PORT = "Clients connect to brokers on port 7422."

SAMPLES: list[dict[str, Any]] = [
    {
        "user_input": "How long does Kestrel keep records?",
        "reference_contexts": [RETENTION, COMPACTION.replace("\n", "\r\n")],
        "reference_context_ids": ["n1", "n2"],
        "retrieved_contexts": ["something retrieved"],
        "response": "A week.",
        "reference": "Seven days; then old segments are deleted.",
        "persona_name": "operator",
        "query_style": "formal",
    },
    {
        "user_input": "Which port do clients use, and how long is data kept?",
        "reference_contexts": [f"<1-hop>\n\n{PORT}", f"<2-hop>\n\n{RETENTION}"],
    },
    {"reference_contexts": [PORT], "reference": "Port 7422."},
    {"user_input": "What is a tombstone?", "reference": "A delete marker."},
    {"user_input": "Where do clients connect?", "reference_contexts": ["  \n", PORT]},
]

Build = Callable[[list[dict[str, Any]]], Any]


@pytest.fixture
def ragas_dataset(monkeypatch: pytest.MonkeyPatch) -> Build:
    """Builds a ragas ``EvaluationDataset`` of ``SingleTurnSample``s (ragas does the writing)."""
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "true")
    ragas = pytest.importorskip("ragas")

    def build(samples: list[dict[str, Any]]) -> Any:
        return ragas.EvaluationDataset(samples=[ragas.SingleTurnSample(**s) for s in samples])

    return build


def _evidence_texts(root: Path) -> dict[str, list[str]]:
    data = load_spans(root)
    docs = data.doc_index
    return {
        qid: [docs[e.doc_id].text[e.start : e.end] for e in spans]
        for qid, spans in data.evidence.items()
    }


def test_a_ragas_jsonl_file_becomes_a_valid_span_set(tmp_path: Path, ragas_dataset: Build) -> None:
    source = tmp_path / "testset.jsonl"
    ragas_dataset(SAMPLES).to_jsonl(source)
    result = import_ragas(source, tmp_path / "set")
    assert (result.queries, result.documents, result.answers, result.left_out) == (3, 3, 1, 2)
    assert [(p.severity, str(p)) for p in result.problems] == [
        ("error", f"{source}:3: row 3: expected the question as a non-empty string "
                  "'user_input', found nothing"),
        ("error", f"{source}:4: row 4: no reference contexts ('reference_contexts' is missing "
                  "or empty)"),
        ("warning", f"{source}:5: row 5: reference context 1 is empty (left out)"),
    ]  # fmt: skip
    report = validate_dataset(result.path)
    assert report.ok, str(report)
    data = load_spans(result.path)
    assert [(q.id, q.text) for q in data.queries] == [
        ("q001", SAMPLES[0]["user_input"]),
        ("q002", SAMPLES[1]["user_input"]),
        ("q005", SAMPLES[4]["user_input"]),
    ]
    assert data.answers == {"q001": SAMPLES[0]["reference"]}
    assert data.queries[0].metadata == {
        "persona_name": "operator",
        "query_style": "formal",
        "ragas_row": 1,
    }
    # one document per distinct context, the multi-hop markers dropped
    assert [(d.id, d.text) for d in data.documents] == [
        ("c0001", RETENTION),
        ("c0002", COMPACTION),
        ("c0003", PORT),
    ]
    assert _evidence_texts(result.path) == {
        "q001": [RETENTION, COMPACTION],
        "q002": [PORT, RETENTION],
        "q005": [PORT],
    }
    assert data.qrels["q002"] == {"c0003": 2, "c0001": 2}


def test_csv_and_testset_files_import_like_jsonl(tmp_path: Path, ragas_dataset: Build) -> None:
    from ragas.testset.synthesizers.testset_schema import Testset, TestsetSample

    dataset = ragas_dataset(SAMPLES)
    dataset.to_jsonl(tmp_path / "t.jsonl")
    dataset.to_csv(tmp_path / "t.csv")
    from_jsonl = import_ragas(tmp_path / "t.jsonl", tmp_path / "a")
    from_csv = import_ragas(tmp_path / "t.csv", tmp_path / "b")
    assert from_csv.queries == 3 and from_csv.left_out == 2
    # CSV rows are numbered after the header: row 3 is on line 4
    assert str(from_csv.problems[0]).startswith(f"{tmp_path / 't.csv'}:4: row 3: ")
    a, b = load_spans(from_jsonl.path), load_spans(from_csv.path)
    assert a.fingerprint == b.fingerprint and a.answers == b.answers
    assert [q.metadata for q in a.queries] == [q.metadata for q in b.queries]

    testset = Testset(
        samples=[
            TestsetSample(eval_sample=sample, synthesizer_name=name)
            for sample, name in zip(
                dataset.samples[:2], ["single_hop_specific", "multi_hop_abstract"], strict=True
            )
        ]
    )
    testset.to_jsonl(tmp_path / "testset.jsonl")
    result = import_ragas(tmp_path / "testset.jsonl", tmp_path / "c")
    assert result.problems == [] and validate_dataset(result.path).ok
    types = [q.metadata["type"] for q in load_spans(result.path).queries]
    assert types == ["single_hop_specific", "multi_hop_abstract"]


CORPUS = {
    "guide/retention.md": "# Retention\n\nKestrel keeps records   for seven days.\r\n"
    "After that,\n  old segments are deleted.\n",
    "notes.md": f"# Notes\n\n{PORT}\n",
    "ports.txt": f"{PORT}\nAdmins use port 7480.\n",
    "image.bin": "not a document",
}


def test_contexts_are_located_in_a_corpus(tmp_path: Path, ragas_dataset: Build) -> None:
    corpus = tmp_path / "docs"
    for name, text in CORPUS.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_bytes(text.encode())
    source = tmp_path / "t.jsonl"
    ragas_dataset(
        [
            {"user_input": "retention?", "reference_contexts": [RETENTION, "Not in any file."]},
            {"user_input": "port?", "reference_contexts": [f"<1-hop>\n\n{PORT}"]},
            {"user_input": "lost?", "reference_contexts": ["Nowhere at all."]},
        ]
    ).to_jsonl(source)
    result = import_ragas(source, tmp_path / "set", corpus=corpus)
    assert (result.queries, result.documents, result.left_out) == (2, 3, 1)
    assert [(p.severity, str(p)) for p in result.problems] == [
        ("warning", f"{corpus / 'image.bin'}: not loaded: unsupported extension"),
        ("warning", f"{source}:1: row 1: reference context 2 is not in {corpus}: "
                    "'Not in any file.'"),
        ("warning", f"{source}:2: row 2: reference context 1 occurs more than once in "
                    f"{corpus}; the first occurrence ('notes.md' at 9) is its evidence"),
        ("warning", f"{source}:3: row 3: reference context 1 is not in {corpus}: "
                    "'Nowhere at all.'"),
        ("error", f"{source}:3: row 3: none of its reference contexts is in {corpus} "
                  "(left out)"),
    ]  # fmt: skip
    # the documents' files are copied as they are, the file the loader skipped is not
    written = result.path / "corpus"
    assert sorted(p.relative_to(written).as_posix() for p in written.rglob("*.*")) == [
        "guide/retention.md",
        "notes.md",
        "ports.txt",
    ]
    assert (written / "guide/retention.md").read_bytes() == CORPUS["guide/retention.md"].encode()
    assert validate_dataset(result.path).ok
    evidence = _evidence_texts(result.path)
    # found with whitespace normalised: the span is the document's own text
    assert evidence["q001"] == [
        "Kestrel keeps records   for seven days.\nAfter that,\n  old segments are deleted."
    ]
    assert evidence["q002"] == [PORT]
    assert load_spans(result.path).evidence["q002"][0].doc_id == "notes.md"


def test_the_command_reports_rows_and_refuses_unusable_input(
    tmp_path: Path, ragas_dataset: Build, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "t.jsonl"
    ragas_dataset(SAMPLES).to_jsonl(source)
    out = tmp_path / "set"
    assert main(["datasets", "import-ragas", str(source), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == (
        f"{out}: 3 queries (1 with a reference answer), 3 documents; 2 row(s) left out\n"
    )
    assert captured.err.splitlines()[1] == (
        f"error: {source}:4: row 4: no reference contexts ('reference_contexts' is missing or "
        "empty)"
    )
    assert main(["datasets", "validate", str(out)]) == 0
    capsys.readouterr()

    # a folder that is not empty is never overwritten
    assert main(["datasets", "import-ragas", str(source), "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"ragbench datasets import-ragas: {out}: already exists and is not an empty folder "
        "(choose a new one)\n"
    )
    bad = tmp_path / "bad.jsonl"
    ragas_dataset([SAMPLES[3], SAMPLES[3]]).to_jsonl(bad)
    assert main(["datasets", "import-ragas", str(bad), "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"ragbench datasets import-ragas: {bad}: no usable rows; the first problem: {bad}:1: "
        "row 1: no reference contexts"
    )
    assert not (tmp_path / "none").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left
    (tmp_path / "t.json").write_text(source.read_text())
    with pytest.raises(DataError, match=r"t\.json: expected a \.jsonl or \.csv file"):
        import_ragas(tmp_path / "t.json", tmp_path / "other")


def test_an_imported_set_runs_in_a_sweep(tmp_path: Path, ragas_dataset: Build) -> None:
    samples = [
        {
            "user_input": f"Which port does service {name} listen on?",
            "reference_contexts": [f"Service {name} listens on port {port} for clients."],
            "reference": f"Port {port}.",
        }
        for name, port in [("alpha", 7401), ("bravo", 7402), ("charlie", 7403), ("delta", 7404)]
    ]
    ragas_dataset(samples).to_jsonl(tmp_path / "t.jsonl")
    imported = import_ragas(tmp_path / "t.jsonl", tmp_path / "set")
    config = {
        "name": "ragas",
        "dataset": {"path": str(imported.path)},
        "evaluation": {"metrics": ["ndcg@4", "recall@2", "span_recall@2"], "depth": 4},
        "sweep": {
            "chunker": [{"kind": "none"}],
            "embedder": [{"kind": "hashing", "dim": 256}],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}],
        },
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    trials = result.trials
    assert len(trials) == 2 and set(trials["status"]) == {"ok"}
    assert set(result.per_query["query_id"]) == {"q001", "q002", "q003", "q004"}
    bm25 = trials[trials["label"].str.contains("bm25")].iloc[0]
    assert bm25["recall@2"] == 1.0 and bm25["span_recall@2"] == 1.0
