"""A plain folder of documents with labels written by hand: the format, its problems (the same in
``datasets validate`` and ``run``), separate queries files, the no-labels error, and sweeps on it
whose metrics are checked by hand."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ragbench.cli import main
from ragbench.data.catalog import detect_format, load_dataset
from ragbench.data.validate import validate_dataset
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import run
from ragbench.experiment.trial import RunSpec
from ragbench.text.loaders import load

DOCS = {
    "guide/install.md": "# Install\n\nRun the installer. The installer needs python.\n",
    "guide/upgrade.md": "# Upgrade\n\nStop the broker before an upgrade.\n",
    "ops/retention.txt": "Retention deletes closed segments after seven days.\n",
    "ops/ports.txt": "Port 9743 serves the admin API. Port 9744 serves metrics.\n",
    "faq.md": "# FAQ\n\nSegments are files. Retention is configured per topic.\n",
    "security/keys.md": "# Keys\n\nRotate the signing keys every quarter.\n",
}

# Ten document-level labels. BM25 over whole documents ranks the one document sharing the
# query's words first for q1-q8; q9 and q10 are worked out by hand in the test below.
LABELS: list[dict] = [
    {"query": "installer python", "relevant": ["guide/install.md"]},
    {"query": "rotate signing keys", "relevant": ["security/keys.md"]},
    {"query": "admin API port", "relevant": {"ops/ports.txt": 2}},
    {"query": "stop broker upgrade", "relevant": ["guide/upgrade.md"]},
    {"query": "metrics port 9744", "relevant": ["ops/ports.txt"]},
    {"query": "quarter rotation", "relevant": ["security/keys.md"]},
    {"query": "configured per topic", "relevant": ["faq.md"]},
    {"query": "installer", "relevant": ["guide/install.md"]},
    # faq.md shares three words (segments, files, retention), retention.txt two: faq.md ranks
    # first, and it is the less relevant one
    {"query": "segments files retention", "relevant": {"ops/retention.txt": 2, "faq.md": 1}},
    # retention.txt shares three words, faq.md one (retention): the relevant one ranks second
    {"query": "seven days retention", "relevant": ["faq.md"]},
]

HASHING = {"kind": "hashing", "dim": 256}


def make_folder(root: Path, labels: list[dict | str] | None = None, docs: dict = DOCS) -> Path:
    """A folder of ``docs`` with ``labels`` as its ``queries.jsonl`` (none when None); a label
    given as a string is written as that raw line."""
    for name, text in docs.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if labels is not None:
        write_labels(root / "queries.jsonl", labels)
    return root


def write_labels(path: Path, labels: list[dict | str]) -> Path:
    lines = [label if isinstance(label, str) else json.dumps(label) for label in labels]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


def sweep_config(dataset: dict, **evaluation: object) -> dict:
    return {
        "name": "own",
        "dataset": dataset,
        "evaluation": {"metrics": ["ndcg@10", "recall@10", "mrr@10"], "depth": 10, **evaluation},
        "sweep": {
            "chunker": [{"kind": "none"}],
            "embedder": [HASHING],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}],
        },
    }


def values(
    per_query: pd.DataFrame, trials: pd.DataFrame, retriever: str = "bm25"
) -> dict[str, dict[str, float]]:
    """metric → query id → value of the trial of ``retriever``."""
    trial = trials.loc[trials["label"].str.startswith(retriever), "trial_id"].item()
    mine = per_query[per_query["trial_id"] == trial]
    return {
        metric: dict(zip(rows["query_id"], rows["value"], strict=True))
        for metric, rows in mine.groupby("metric")
    }


# by hand: q1-q8 rank their one relevant document first; q9 ranks faq.md (grade 1) above
# retention.txt (grade 2): DCG = 1/log2(2) + 2/log2(3), ideal 2/log2(2) + 1/log2(3); q10 ranks
# its one relevant document second: nDCG = 1/log2(3), MRR = 1/2
Q9_NDCG = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
EXPECTED = {
    "ndcg@10": {**{f"q{i}": 1.0 for i in range(1, 9)}, "q9": Q9_NDCG, "q10": 1 / math.log2(3)},
    "recall@10": {f"q{i}": 1.0 for i in range(1, 11)},
    "mrr@10": {**{f"q{i}": 1.0 for i in range(1, 10)}, "q10": 0.5},
}


def assert_by_hand(values: dict[str, dict[str, float]]) -> None:
    for metric, expected in EXPECTED.items():
        assert values[metric].keys() == expected.keys(), metric
        for qid, value in expected.items():
            assert values[metric][qid] == pytest.approx(value, abs=1e-9), (metric, qid)


# ---------------------------------------------------------------- the format


def test_document_level_labels_load_with_the_ids_ragbench_load_gives(tmp_path: Path) -> None:
    root = make_folder(tmp_path / "docs", LABELS)
    assert detect_format(root) == "folder"
    data = load_dataset(root)
    assert data.name == "docs" and not data.has_spans
    assert sorted(d.id for d in data.documents) == sorted(d.id for d in load(root)) == sorted(DOCS)
    assert [q.id for q in data.queries] == [f"q{i}" for i in range(1, 11)]
    assert data.queries[0].text == "installer python"
    assert data.qrels["q1"] == {"guide/install.md": 1}
    assert data.qrels["q3"] == {"ops/ports.txt": 2}
    assert data.qrels["q9"] == {"ops/retention.txt": 2, "faq.md": 1}
    assert validate_dataset(root).ok


def test_span_labels_get_their_offsets_exactly_or_with_whitespace_normalised(
    tmp_path: Path,
) -> None:
    docs = {"a.md": "# Alpha\n\nThe lazy   dog\nsleeps all day.\n", "b.txt": "Port 9743."}
    labels: list[dict | str] = [
        {"query": "exact", "evidence": [{"doc": "b.txt", "text": "Port 9743"}]},
        {
            "id": "loose",
            "query": "whitespace",
            "evidence": [{"doc": "a.md", "text": " The lazy dog sleeps\tall day. ", "grade": 1}],
            "answer": "all day",
        },
    ]
    data = load_dataset(make_folder(tmp_path / "docs", labels, docs))
    text = data.doc_index["a.md"].text
    exact, loose = data.evidence["q1"][0], data.evidence["loose"][0]
    assert (exact.doc_id, exact.start, exact.end, exact.grade) == ("b.txt", 0, 9, 2)
    assert text[loose.start : loose.end] == "The lazy   dog\nsleeps all day."
    assert loose.start == text.index("The lazy") and loose.grade == 1
    assert data.qrels == {"q1": {"b.txt": 2}, "loose": {"a.md": 1}}
    assert data.answers == {"loose": "all day"}


def test_both_kinds_and_the_span_formats_spelling_mix_in_one_file(tmp_path: Path) -> None:
    labels: list[dict | str] = [
        {"query": "installer python", "relevant": ["guide/install.md"]},
        {"query": "admin port", "evidence": [{"doc": "ops/ports.txt", "text": "Port 9743"}]},
        {  # a generated line in the span format's spelling
            "id": "gen-1",
            "text": "what deletes segments?",
            "type": "lexical",
            "evidence": [{"doc_id": "ops/retention.txt", "start": 0, "end": 9}],
            "qrels": {"faq.md": 1},
        },
        {  # evidence and a list of relevant ids that repeats its document
            "query": "keys",
            "relevant": ["security/keys.md", "faq.md"],
            "evidence": [{"doc": "security/keys.md", "text": "Rotate the signing keys"}],
        },
    ]
    data = load_dataset(make_folder(tmp_path / "docs", labels))
    assert [q.id for q in data.queries] == ["q1", "q2", "gen-1", "q4"]
    assert data.qrels == {
        "q1": {"guide/install.md": 1},
        "q2": {"ops/ports.txt": 2},
        "gen-1": {"ops/retention.txt": 2, "faq.md": 1},
        "q4": {"security/keys.md": 2, "faq.md": 1},
    }
    assert set(data.evidence) == {"q2", "gen-1", "q4"}
    assert data.queries[2].metadata == {"type": "lexical"}
    assert data.doc_index["ops/retention.txt"].text[0:9] == "Retention"


def test_the_queries_file_is_no_document_even_when_its_lines_look_like_one(
    tmp_path: Path,
) -> None:
    # a JSONL collection whose ids match the queries file's: neither file shadows the other
    docs = {**DOCS, "more.jsonl": json.dumps({"id": "q1", "text": "the first record"}) + "\n"}
    labels: list[dict | str] = [
        {
            "id": "q1",
            "text": "installer",
            "evidence": [{"doc_id": "guide/install.md", "text": "needs"}],
        }
    ]
    data = load_dataset(make_folder(tmp_path / "docs", labels, docs))
    assert sorted(d.id for d in data.documents) == sorted([*DOCS, "q1"])
    assert data.doc_index["q1"].text == "the first record"
    assert validate_dataset(tmp_path / "docs").ok


# ---------------------------------------------------------------- problems: validate == run


BAD_LINES = [
    (
        {"query": "x", "evidence": [{"doc": "faq.md", "text": "no such words"}]},
        "query 'q2', evidence 1 in 'faq.md': excerpt not found: 'no such words'",
    ),
    (
        {"query": "x", "evidence": [{"doc": "ops/ports.txt", "text": "Port 974"}]},
        "query 'q2', evidence 1 in 'ops/ports.txt': excerpt occurs more than once (at 0 and 32); "
        "give 'start' and 'end' to pick one: 'Port 974'",
    ),
    (
        {"query": "x", "relevant": ["install.md"]},
        "query 'q2': relevant document 'install.md' is not in docs/ "
        "(did you mean 'guide/install.md'?)",
    ),
    (
        {"query": "x", "relevant": {"guide/instal.md": 2}},
        "query 'q2': relevant document 'guide/instal.md' is not in docs/ "
        "(did you mean 'guide/install.md', 'guide/upgrade.md'?)",
    ),
    (
        {"query": "x", "evidence": [{"doc": "keys", "text": "Rotate"}]},
        "query 'q2', evidence 1: document 'keys' is not in docs/ "
        "(did you mean 'security/keys.md'?)",
    ),
    (
        {"query": "x", "relevant": ["zzz-nothing-like-it"]},
        "query 'q2': relevant document 'zzz-nothing-like-it' is not in docs/ (ids are paths "
        "relative to docs/, such as 'faq.md', 'guide/install.md', 'guide/upgrade.md')",
    ),
    (
        {"query": "x", "text": "y", "relevant": ["faq.md"]},
        "query 'q2': give 'query' or 'text', not both",
    ),
    (
        {"query": "x", "relevant": ["faq.md"], "qrels": {"faq.md": 1}},
        "query 'q2': give 'relevant' or 'qrels', not both",
    ),
    (
        {"relevant": ["faq.md"]},
        "query 'q2': expected the query as a string under 'query', found nothing",
    ),
    (
        {"query": "x", "relevant": "faq.md"},
        "query 'q2': expected a list of document ids or an object under 'relevant', found 'faq.md'",
    ),
    (
        {"query": "x", "relevant": [3]},
        "query 'q2': relevant[0]: expected a document id (a string), found 3",
    ),
    (
        {"query": "x", "relevant": {"faq.md": "yes"}},
        "query 'q2': relevant['faq.md']: expected an integer grade, found 'yes'",
    ),
    (
        {"query": "x", "relevant": ["faq.md"], "answer": " "},
        "query 'q2': expected a non-empty string under 'answer', found ' '",
    ),
    (
        {"query": "x", "relevnt": ["faq.md"]},
        "query 'q2': unknown key(s) 'relevnt' (allowed: id, text, query, type, split, answer, "
        "evidence, qrels, relevant, levels, metadata)",
    ),
    (
        {"query": "x", "evidence": [{"doc": "faq.md", "doc_id": "faq.md", "text": "FAQ"}]},
        "query 'q2', evidence 1: give 'doc' or 'doc_id', not both",
    ),
    (
        {
            "query": "x",
            "relevant": {"faq.md": 1},
            "evidence": [{"doc": "faq.md", "text": "Segments are files."}],
        },
        "query 'q2': relevant repeats evidence document 'faq.md' "
        "(its grade comes from the evidence)",
    ),
]


@pytest.mark.parametrize(("label", "message"), BAD_LINES, ids=[m[:40] for _, m in BAD_LINES])
def test_a_bad_line_fails_validate_and_run_with_the_same_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], label: dict, message: str
) -> None:
    good = {"query": "installer", "relevant": ["guide/install.md"]}
    root = make_folder(tmp_path / "docs", [good, label])
    where = f"{root / 'queries.jsonl'}:2: "
    report = validate_dataset(root)
    assert [str(p) for p in report.errors] == [where + message]
    with pytest.raises(DataError) as failed:
        run(
            sweep_config({"path": str(root)}), tmp_path / "run", cache_root=tmp_path, progress=False
        )
    assert str(failed.value) == where + message
    capsys.readouterr()
    assert main(["datasets", "validate", str(root)]) == 1
    assert f"error: {where}{message}" in capsys.readouterr().out.splitlines()
    config = write_config(tmp_path, sweep_config({"path": "docs"}))
    assert main(["run", str(config), "--out", str(tmp_path / "cli-run")]) == 2
    assert capsys.readouterr().err == f"ragbench run: {where}{message}\n"


def test_problems_the_data_survives_are_warnings(tmp_path: Path) -> None:
    labels: list[dict | str] = [
        {"query": "installer", "relevant": ["guide/install.md", "guide/install.md"]},
        {"query": "unjudged", "relevant": []},
        {"id": "q1", "query": "again", "relevant": ["faq.md"]},
        {"query": "a null is no value", "relevant": ["faq.md"], "qrels": None},
    ]
    root = make_folder(tmp_path / "docs", labels)
    (root / "notes.docx").write_bytes(b"PK\x03\x04")
    problems = {(p.severity, p.line, p.message) for p in validate_dataset(root).problems}
    assert problems == {
        ("warning", None, "not loaded: unsupported extension"),
        ("warning", 1, "query 'q1': relevant lists 'guide/install.md' more than once"),
        ("warning", 2, "query 'q2' has no evidence and no qrels or relevant documents (left out)"),
        ("warning", 3, "duplicate query id 'q1' (first on line 1; that one is kept)"),
    }
    assert [q.id for q in load_dataset(root).queries] == ["q1", "q4"]


def test_a_file_of_unjudged_lines_says_why_nothing_is_judged(tmp_path: Path) -> None:
    root = make_folder(tmp_path / "docs", [{"query": "a question without labels"}])
    with pytest.raises(
        DataError,
        match=r"no judged queries of split 'test' \(splits found: none; "
        r"the first problem: .*queries.jsonl:1: query 'q1' has no evidence",
    ):
        load_dataset(root)


# ---------------------------------------------------------------- no labels


def test_a_folder_without_labels_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_folder(tmp_path / "docs")
    message = (
        f"{root}/: no labeled queries — write {root}/queries.jsonl "
        '({"query": ..., "relevant": [doc ids]}, see README "Your own documents") '
        f"or generate them: ragbench datasets generate {root}/ --out=labels/"
    )
    with pytest.raises(DataError) as failed:
        load_dataset(root)
    assert str(failed.value) == message
    with pytest.raises(DataError, match="no labeled queries"):
        validate_dataset(root)
    with pytest.raises(DataError, match="no labeled queries"):
        load_dataset(root, format="folder")
    for argv in (
        ["datasets", "validate", str(root)],
        ["datasets", "info", str(root)],
        ["run", str(write_config(tmp_path, sweep_config({"path": "docs"})))],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        command = " ".join(argv[:2]) if argv[0] == "datasets" else argv[0]
        assert capsys.readouterr().err == f"ragbench {command}: {message}\n"


# ---------------------------------------------------------------- a separate queries file


def test_a_separate_queries_file_labels_the_folder(tmp_path: Path) -> None:
    root = make_folder(tmp_path / "docs")
    labels = write_labels(tmp_path / "labels" / "mine.jsonl", LABELS)
    data = load_dataset(root, queries=labels)
    assert len(data.queries) == 10 and sorted(d.id for d in data.documents) == sorted(DOCS)
    assert validate_dataset(root, queries=labels).ok
    # inside the folder it is no document either; a queries.jsonl beside it is not read
    inside = write_labels(root / "labels" / "mine.jsonl", LABELS[:2])
    write_labels(root / "queries.jsonl", LABELS)
    data = load_dataset(root, queries=inside)
    assert [q.text for q in data.queries] == ["installer python", "rotate signing keys"]
    assert sorted(d.id for d in data.documents) == sorted(DOCS)
    assert [
        (p.severity, p.file, p.message) for p in validate_dataset(root, queries=inside).problems
    ] == [("warning", str(root / "queries.jsonl"), f"not read: the queries come from {inside}")]


def test_a_separate_queries_file_goes_with_a_plain_folder_only(tmp_path: Path) -> None:
    labels = write_labels(tmp_path / "labels.jsonl", LABELS)
    spans = make_folder(tmp_path / "set", LABELS[:1], {"corpus/guide/install.md": "installer"})
    assert detect_format(spans) == "spans"
    with pytest.raises(ConfigError, match=r"only a plain folder of documents takes a separate"):
        load_dataset(spans, queries=labels)
    with pytest.raises(DataError, match=r"nope.jsonl: no such file \(the queries file for "):
        load_dataset(make_folder(tmp_path / "docs"), queries=tmp_path / "nope.jsonl")


def test_the_config_resolves_the_queries_file_against_its_folder(tmp_path: Path) -> None:
    make_folder(tmp_path / "docs")
    write_labels(tmp_path / "labels.jsonl", LABELS)
    path = write_config(
        tmp_path / "exp", sweep_config({"path": "../docs", "queries": "../labels.jsonl"})
    )
    config = load_config(path)
    assert config.queries_path() == str(tmp_path / "exp" / ".." / "labels.jsonl")
    assert load_config(sweep_config({"path": "demo"})).queries_path() is None


def test_editing_the_queries_file_changes_the_run_context(tmp_path: Path) -> None:
    make_folder(tmp_path / "docs")
    labels = write_labels(tmp_path / "labels.jsonl", LABELS)
    config = load_config(
        write_config(tmp_path, sweep_config({"path": "docs", "queries": "labels.jsonl"}))
    )
    before = RunSpec(config).digest
    write_labels(labels, LABELS[:3])
    assert RunSpec(config).digest != before


# ---------------------------------------------------------------- sweeps, metrics by hand


def test_a_sweep_on_a_labeled_folder_scores_what_a_hand_computation_says(
    tmp_path: Path,
) -> None:
    root = make_folder(tmp_path / "docs", LABELS)
    result = run(
        sweep_config({"path": str(root)}),
        tmp_path / "run",
        cache_root=tmp_path / "cache",
        progress=False,
    )
    trials = result.trials
    assert set(trials["status"]) == {"ok"} and len(trials) == 2
    assert_by_hand(values(result.per_query, trials))
    dense = values(result.per_query, trials, "dense")
    assert all(
        len(v) == 10 and 0 <= min(v.values()) <= max(v.values()) <= 1 for v in dense.values()
    )
    assert result.manifest["dataset"]["documents"] == 6
    assert result.manifest["queries"]["count"] == 10


def test_ragbench_run_on_a_folder_and_with_queries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path / "docs", LABELS)
    config = write_config(tmp_path / "exp", sweep_config({"path": "../docs"}))
    out = tmp_path / "runs" / "a"
    assert main(["run", str(config), "--out", str(out), "--no-report"]) == 0
    first = values(
        pd.read_parquet(out / "per_query.parquet"), pd.read_parquet(out / "trials.parquet")
    )
    assert_by_hand(first)
    # the labels elsewhere: --dataset and --queries, paths relative to the working directory
    labels = write_labels(tmp_path / "labels.jsonl", LABELS)
    (root / "queries.jsonl").unlink()
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "b"
    argv = ["run", str(config), "--dataset", "docs", "--queries", "labels.jsonl", "--out", str(out)]
    assert main([*argv, "--no-report"]) == 0
    second = values(
        pd.read_parquet(out / "per_query.parquet"), pd.read_parquet(out / "trials.parquet")
    )
    assert second == first
    # validate and info read the same labels; a config names them with dataset.queries
    capsys.readouterr()
    assert main(["datasets", "validate", "docs", "--queries", "labels.jsonl"]) == 0
    assert capsys.readouterr().out == "docs (folder): no problems\n"
    assert main(["datasets", "info", "docs", "--queries", str(labels)]) == 0
    info = capsys.readouterr().out
    assert "format       folder" in info and "queries      10" in info
    assert "judgements   11 (grade 1: 9, grade 2: 2)" in info
    with_queries = write_config(
        tmp_path / "exp2", sweep_config({"path": "../docs", "queries": "../labels.jsonl"})
    )
    assert main(["run", str(with_queries), "--out", str(tmp_path / "runs" / "c"), "--dry-run"]) == 0


def test_the_quickstart_sweep_on_a_folder_as_the_readme_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    root = make_folder(tmp_path / "docs", LABELS)
    argv = [
        "run",
        str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"),
        "--dataset",
        str(root),
        "--set",
        "evaluation.metrics=[ndcg@10, recall@20, mrr@10]",
        "--set",
        "sweep.embedder=[{kind: hashing, dim: 256}]",
        "--out",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    argv[argv.index("evaluation.metrics=[ndcg@10, recall@20, mrr@10]")] = "evaluation.depth=20"
    assert main(argv) == 2
    assert "span metrics need span evidence" in capsys.readouterr().err


def test_span_metrics_score_the_queries_with_evidence_and_say_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    labels: list[dict | str] = [
        *LABELS[:3],
        {
            "query": "admin API",
            "evidence": [{"doc": "ops/ports.txt", "text": "serves the admin API"}],
        },
    ]
    root = make_folder(tmp_path / "docs", labels)
    config = sweep_config({"path": str(root)}, metrics=["ndcg@10", "span_recall@5"])
    with caplog.at_level(logging.WARNING, "ragbench.experiment.trial"):
        result = run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    assert "3 judged queries without span evidence are left out" in caplog.text
    assert set(result.per_query["query_id"]) == {"q4"}
