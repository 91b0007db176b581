"""The judging helper: pooled hits of several trials (union of top k, each document once, with
who found it at what rank), judgements merged into or appended to the labeled set's queries file
atomically and read back by its own reader, and the notebook widget driven by its buttons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ragbench.cli import main
from ragbench.data.catalog import load_dataset
from ragbench.data.validate import validate_dataset
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.runner import run
from ragbench.report.judging import Judge, JudgingWidget, QueriesFile, pool
from tests.paths import DEMO, SCIFACT, require

HASHING = {"kind": "hashing", "dim": 256}
LINES = [  # a hand-written list, evidence, the span format's spelling, an id by line number
    {
        "query": "how long are records kept before retention deletes them?",
        "relevant": ["operations/retention.md"],
    },
    {
        "id": "admin",
        "query": "which port serves the admin API?",
        "evidence": [
            {"doc": "reference/ports-and-protocols.md", "text": "7480 if the admin API is used"}
        ],
    },
    {
        "id": "restore",
        "text": "how do I restore a broker from a backup?",
        "qrels": {"operations/backup-and-restore.md": 2},
    },
]


def _config(root: Path, level: str = "document") -> dict:
    metrics = ["ndcg@10"] if level == "document" else ["span_recall@5"]
    return {
        "name": f"judging-{level}",
        "dataset": {"path": str(root)},
        "evaluation": {"level": level, "metrics": metrics, "depth": 10},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
            "embedder": [HASHING],
            "retriever": [
                {"kind": "bm25"},
                {"kind": "bm25", "k1": 0.5, "b": 0.2},
                {"kind": "dense"},
            ],
        },
    }


@pytest.fixture(scope="module")
def labeled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A plain folder (the demo corpus and three hand-written queries) and two runs of it:
    at the document level and at the span level. Returns (folder, document run, span run)."""
    base = tmp_path_factory.mktemp("judging")
    folder = base / "docs"
    shutil.copytree(DEMO / "corpus", folder)
    (folder / "queries.jsonl").write_text("".join(json.dumps(x) + "\n" for x in LINES), "utf-8")
    runs = []
    for level in ("document", "span"):
        config = _config(folder, level)
        if level == "span":  # span metrics score the query with evidence only
            config["dataset"]["path"] = str(DEMO)
        runs.append(run(config, base / level, cache_root=base / "cache", progress=False).path)
    return folder, runs[0], runs[1]


@pytest.fixture
def folder(labeled: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    """A fresh copy of the labeled folder, for tests that write to it."""
    return Path(shutil.copytree(labeled[0], tmp_path / "docs"))


def _trec(run_dir: Path, trial_id: str, query_id: str) -> list[str]:
    """A trial's documents for a query in the order of the ranks written in its .trec file."""
    lines = (run_dir / "runs" / f"{trial_id}.trec").read_text(encoding="utf-8").splitlines()
    rows = [line.split() for line in lines]
    return [r[2] for r in sorted((r for r in rows if r[0] == query_id), key=lambda r: int(r[3]))]


# ---------------------------------------------------------------- pooling


def test_the_pool_is_the_union_of_each_trials_top_k_with_who_found_what(
    labeled: tuple[Path, Path, Path],
) -> None:
    _, document_run, _ = labeled
    trials = pd.read_parquet(document_run / "trials.parquet")
    found = pool(document_run, "q1", k=3)
    assert found.text == LINES[0]["query"]
    expected: dict[str, dict[str, int]] = {}
    for trial_id in trials["trial_id"]:
        for rank, doc in enumerate(_trec(document_run, trial_id, "q1")[:3], start=1):
            expected.setdefault(doc, {})[trial_id] = rank
    assert {h.doc_id: {f.trial_id: f.rank for f in h.found} for h in found.hits} == expected
    assert len({h.doc_id for h in found.hits}) == len(found.hits)  # each document once
    ranks = [(h.best_rank, -len(h.found)) for h in found.hits]
    assert ranks == sorted(ranks)
    labels = dict(zip(trials["trial_id"], trials["label"], strict=True))
    for hit in found.hits:
        assert [f.rank for f in hit.found] == sorted(f.rank for f in hit.found)
        assert all(f.label == labels[f.trial_id] and f.run == "document" for f in hit.found)
    top = pd.concat(pd.read_parquet(p) for p in (document_run / "runs").glob("*.top.parquet"))
    top = top[top["query_id"] == "q1"].sort_values("rank")
    first = found.hits[0]
    assert first.excerpt == top[top["doc_id"] == first.doc_id]["text"].iloc[0]
    frame = found.frame()
    assert list(frame["doc_id"]) == [h.doc_id for h in found.hits]
    assert frame["found_by"].iloc[0].startswith(f"{first.found[0].label} @{first.best_rank}")
    one = pool(document_run, "q1", k=3, trials=[trials["trial_id"].iloc[0]])
    assert [h.doc_id for h in one.hits] == _trec(document_run, trials["trial_id"].iloc[0], "q1")[:3]


def test_span_level_runs_pool_the_documents_of_their_top_chunks(
    labeled: tuple[Path, Path, Path],
) -> None:
    _, document_run, span_run = labeled
    found = pool(span_run, "q002", k=2)
    for hit in found.hits:
        for finding in hit.found:
            top = pd.read_parquet(span_run / "runs" / f"{finding.trial_id}.top.parquet")
            chunks = top[top["query_id"] == "q002"].sort_values("rank")
            assert list(dict.fromkeys(chunks["doc_id"])).index(hit.doc_id) + 1 == finding.rank
    both = pool([document_run, span_run], "q002", k=2)  # q002 is in the span run only
    assert [h.doc_id for h in both.hits] == [h.doc_id for h in found.hits]
    assert "span: " in both.frame()["found_by"].iloc[0]
    with pytest.raises(DataError, match="no query 'nope' in the run"):
        pool(span_run, "nope")
    with pytest.raises(ConfigError, match="k: expected a positive number"):
        pool(span_run, "q002", k=0)


# ---------------------------------------------------------------- recording


def test_judgements_merge_append_and_read_back(folder: Path) -> None:
    file = QueriesFile(folder)
    before = (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    file.record("q1", "operations/monitoring.md", 0)  # a list becomes graded ids
    file.record("q1", "operations/retention.md", 2)  # and a grade changes
    file.record("restore", "operations/rolling-restart.md", 1)  # under qrels, its spelling
    file.record("admin", "reference/admin-http-api.md", 2)  # beside the evidence
    file.record("new", "operations/quotas.md", 2, text="how are client quotas enforced?")
    lines = [json.loads(x) for x in (folder / "queries.jsonl").read_text("utf-8").splitlines()]
    assert lines[0]["relevant"] == {"operations/retention.md": 2, "operations/monitoring.md": 0}
    assert lines[2]["qrels"] == {
        "operations/backup-and-restore.md": 2,
        "operations/rolling-restart.md": 1,
    }
    assert "relevant" not in lines[2] and lines[2]["text"] == LINES[2]["text"]
    assert lines[1]["relevant"] == {"reference/admin-http-api.md": 2}
    assert lines[1]["evidence"] == LINES[1]["evidence"]
    assert lines[3] == {
        "id": "new",
        "query": "how are client quotas enforced?",
        "relevant": {"operations/quotas.md": 2},
    }
    assert len(lines) == 4 and len(before) == 3
    assert validate_dataset(folder).ok
    assert main(["datasets", "validate", str(folder)]) == 0
    qrels = load_dataset(folder).qrels  # read back by the set's own reader
    assert qrels["q1"] == {"operations/retention.md": 2, "operations/monitoring.md": 0}
    assert qrels["admin"] == {
        "reference/ports-and-protocols.md": 2,
        "reference/admin-http-api.md": 2,
    }
    assert qrels["new"] == {"operations/quotas.md": 2}
    assert file.grades("restore") == qrels["restore"]
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no temporary left


def test_what_cannot_be_recorded_leaves_the_file_as_it_was(folder: Path) -> None:
    path = folder / "queries.jsonl"
    original = path.read_bytes()
    file = QueriesFile(folder)
    with pytest.raises(DataError, match="graded 2 by the query's evidence"):
        file.record("admin", "reference/ports-and-protocols.md", 0)
    with pytest.raises(DataError, match=r"'nowhere\.md' is not in the set's corpus"):
        file.record("q1", "nowhere.md", 1)
    with pytest.raises(ConfigError, match=r"grade 3: expected one of 0 \(not relevant\)"):
        file.record("q1", "operations/retention.md", 3)
    with pytest.raises(DataError, match=r"no query 'other' \(give its text to add it\)"):
        file.record("other", "operations/retention.md", 1)
    assert path.read_bytes() == original
    single = folder / "one.jsonl"  # a file whose only relevant judgement would become 0
    single.write_text(json.dumps(LINES[0]) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"one.jsonl: split 'test': no judgement has a grade >= 1"):
        QueriesFile(folder, queries=single).record("q1", "operations/retention.md", 0)
    assert json.loads(single.read_text("utf-8")) == LINES[0]
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".jsonl") == [
        "one.jsonl",
        "queries.jsonl",
    ]


def test_lines_keep_their_bytes_and_ids_count_lines(folder: Path) -> None:
    path = folder / "queries.jsonl"
    admin, q1 = json.dumps(LINES[1]), json.dumps(LINES[0])
    path.write_bytes(f"\ufeff{admin}\r\n\r\n{q1}\r\n".encode())  # BOM, CRLF, a blank line
    QueriesFile(folder).record("q3", "operations/quotas.md", 1)  # no id: q<line number>
    QueriesFile(folder).record("admin", "operations/quotas.md", 2)
    after = path.read_bytes().decode().split("\n")
    assert after[1] == "\r" and after[3] == ""  # the blank line and the end, untouched
    assert after[0].startswith("\ufeff{") and after[0].endswith("}\r")
    assert json.loads(after[0].strip("\ufeff\r"))["relevant"] == {"operations/quotas.md": 2}
    assert json.loads(after[2])["relevant"] == {
        "operations/retention.md": 1,
        "operations/quotas.md": 1,
    }
    assert load_dataset(folder).qrels["q3"] == {
        "operations/retention.md": 1,
        "operations/quotas.md": 1,
    }


def test_only_a_queries_jsonl_takes_judgements() -> None:
    with pytest.raises(
        ConfigError, match=r"judgements are recorded in a queries\.jsonl .* beir set"
    ):
        QueriesFile(require(SCIFACT))


# ---------------------------------------------------------------- the widget


def test_the_widget_records_what_its_buttons_say(
    labeled: tuple[Path, Path, Path], folder: Path
) -> None:
    _, document_run, _ = labeled
    judge = Judge(folder, [document_run], k=3)
    assert judge.query_ids == ["q1", "admin", "restore"]
    widget = JudgingWidget(judge)
    assert widget.query_id == "q1" and widget.previous.disabled
    assert "1 of 3: q1" in widget.heading.value
    table = judge.table("q1")
    assert list(widget.buttons) == list(table["doc_id"])  # q1 has no evidence
    doc = next(d for d in widget.buttons if d != "operations/retention.md")
    widget.buttons[doc][1].click()
    assert judge.file.grades("q1")[doc] == 1
    assert (
        widget.buttons[doc][1].button_style == "info" and widget.buttons[doc][0].button_style == ""
    )
    assert f"recorded q1: {doc} = 1 (partly)" in widget.status.value
    widget.buttons[doc][0].click()
    assert load_dataset(folder).qrels["q1"][doc] == 0
    widget.next.click()
    assert widget.query_id == "admin"
    pooled = [h.doc_id for h in judge.pool("admin").hits]
    evidence = "reference/ports-and-protocols.md"  # graded by its evidence: no buttons
    assert evidence in pooled and evidence not in widget.buttons
    note = widget.hits.children[pooled.index(evidence)].children[1].value
    assert note == "<i>graded 2 by the query's evidence</i>"
    widget.next.click()
    widget.next.click()
    assert widget.query_id == "restore" and widget.next.disabled
    widget.previous.click()
    assert widget.query_id == "admin"
    assert validate_dataset(folder).ok
    assert judge.table("q1").set_index("doc_id")["grade"][doc] == 0


def test_the_widget_says_why_a_judgement_was_not_recorded(
    labeled: tuple[Path, Path, Path], folder: Path
) -> None:
    _, document_run, _ = labeled
    single = folder / "one.jsonl"
    single.write_text(json.dumps(LINES[0]) + "\n", encoding="utf-8")
    widget = JudgingWidget(Judge(folder, document_run, queries=single, k=2), ["q1"])
    widget.buttons["operations/retention.md"][0].click()
    assert (
        "<b>not recorded</b>" in widget.status.value
        and "no judgement has a grade" in widget.status.value
    )
    assert json.loads(single.read_text("utf-8")) == LINES[0]
