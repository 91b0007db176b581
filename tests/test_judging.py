"""The judging helper: pooled hits of several trials (union of top k, each document once, with
who found it at what rank), judgements merged into or appended to the labeled set's queries file
atomically and read back by its own reader, and the notebook widget driven by its buttons.
`ragbench datasets judge` with piped answers: a generated set's sampled queries judged into its
own split 'judged' (valid, resumed, evaluated over the same cut corpus, compared with the
generated labels), and the benchmark of how many judged queries the interval needs."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from benchmarks.bench_judged import _intervals, measure
from ragbench.cli import main
from ragbench.data.catalog import load_dataset
from ragbench.data.generate import IctMethod, generate
from ragbench.data.problems import ProblemLog
from ragbench.data.spans import read_corpus
from ragbench.data.validate import validate_dataset
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.runner import run
from ragbench.experiment.store import RunStore
from ragbench.report.agreement import _per_query, agreement, tau_interval
from ragbench.report.judged import JUDGED_SPLIT, JudgingSession
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


# ---------------------------------------------------------------- judging a generated set


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """An ict set of the demo corpus and one sweep run on it and on the demo's real labels.
    Returns (set, synthetic run, real run, config file)."""
    base = tmp_path_factory.mktemp("judged")
    labels = base / "ict"
    generate(DEMO, labels, IctMethod(), n=12)
    config = {**_config(labels), "name": "judged"}
    (base / "sweep.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    synthetic = run(config, base / "synthetic", cache_root=base / "cache", progress=False)
    real_config = {**config, "dataset": {"path": str(DEMO)}}
    real = run(real_config, base / "real", cache_root=base / "cache", progress=False)
    return labels, synthetic.path, real.path, base / "sweep.yaml"


@pytest.fixture
def ict(generated: tuple[Path, Path, Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A fresh copy of the generated set and of its run, for tests that write to them."""
    labels = Path(shutil.copytree(generated[0], tmp_path / "ict"))
    return labels, Path(shutil.copytree(generated[1], tmp_path / "synthetic"))


def _judge(
    args: list[str],
    answers: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """``ragbench datasets judge ARGS`` with ``answers`` piped in, one a line; its output."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(a + "\n" for a in answers)))
    assert main(["datasets", "judge", *args]) == 0
    return str(capsys.readouterr().out)


def _judged_lines(labels: Path) -> list[dict[str, Any]]:
    lines = (labels / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == JUDGED_SPLIT]


def _texts(labels: Path) -> dict[str, str]:
    return {q.id: q.text for q in load_dataset(labels).queries}


def test_the_terminal_session_writes_a_judged_split_and_resumes(
    ict: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    labels, synthetic = ict
    before = (labels / "queries.jsonl").read_bytes()
    order = JudgingSession(labels, synthetic, n=3, k=2, seed=5).order
    evaluated = set(pd.read_parquet(synthetic / "queries.parquet")["query_id"])
    assert sorted(order) == sorted(evaluated) and len(order) == 12  # every query, shuffled
    assert order == JudgingSession(labels, synthetic, n=3, k=2, seed=5).order
    assert order != JudgingSession(labels, synthetic, n=3, k=2, seed=6).order
    pools = {q: pool(synthetic, q, k=2) for q in order[:4]}
    first = pools[order[0]].hits
    assert len(first) >= 2  # its grades 0, 1, ...: one relevant, so it is written at once
    grades = {q: [(i + j) % 3 for j in range(len(pools[q].hits))] for i, q in enumerate(order[:4])}
    answers = (
        ["2", "b", "x"]  # back to the first document (its grade changes), a wrong answer
        + [str(g) for g in grades[order[0]]]
        + ["s"]  # the second query is skipped: the next sampled one takes its place
        + [str(g) for g in grades[order[2]]]
        + [str(grades[order[3]][0]), "q"]  # quit halfway through the fourth
    )
    args = [str(labels), "--run", str(synthetic), "--queries", "3", "--depth", "2", "--seed", "5"]
    printed = _judge(args, answers, monkeypatch, capsys)
    assert "expected 0, 1, 2, s, b or q" in printed and f"skipped {order[1]}" in printed
    for q in (order[0], order[2]):
        assert f"saved {q}~judged" in printed and pools[q].text in printed
    for hit in first:
        assert f"{hit.doc_id}" in printed and pools[order[0]].found_by(hit) in printed
    assert f"{order[3]}: not all its documents graded, not written" in printed
    texts = _texts(labels)
    expected = {
        q: {
            "id": f"{q}~judged",
            "query": texts[q],
            "split": JUDGED_SPLIT,
            "relevant": {h.doc_id: g for h, g in zip(pools[q].hits, grades[q], strict=True)},
        }
        for q in order[:4]
    }
    assert _judged_lines(labels) == [expected[order[0]], expected[order[2]]]
    assert (labels / "queries.jsonl").read_bytes().startswith(before)  # the rest untouched
    assert main(["datasets", "validate", str(labels)]) == 0
    capsys.readouterr()
    # resumed: the judged queries are passed over, the skipped one comes back, and the session
    # ends with the third judged query: the answers after it are not read
    printed = _judge(args, [str(g) for g in grades[order[1]]] + ["2"] * 10, monkeypatch, capsys)
    assert "(2 judged before)" in printed and f"[2/3 judged] {order[1]}:" in printed
    assert "judged 3 of 3 queries (1 in this session)" in printed
    assert _judged_lines(labels) == [expected[q] for q in (order[0], order[2], order[1])]
    assert sys.stdin.read() == "2\n" * 10
    judged = load_dataset(labels, split=JUDGED_SPLIT)
    assert judged.qrels == {f"{q}~judged": expected[q]["relevant"] for q in order[:3]}
    manifest = json.loads((synthetic / "manifest.json").read_text(encoding="utf-8"))
    assert load_dataset(labels).fingerprint == manifest["dataset_fingerprint"]  # test: as it was


def test_queries_graded_all_0_wait_for_a_relevant_one(ict: tuple[Path, Path]) -> None:
    labels, synthetic = ict
    session = JudgingSession(labels, [synthetic], n=2, k=1, seed=1)
    first, second = session.order[:2]
    shown = session.start()
    assert f"[0/2 judged] {first}:" in shown
    sizes = [len(pool(synthetic, q, k=1).hits) for q in (first, second)]
    for _ in range(sizes[0]):
        said = session.answer("0")
    # split 'judged' would have no relevant grade: not valid yet, so nothing is written
    assert f"kept {first}" in said and _judged_lines(labels) == []
    said = session.answer("q")
    assert "1 query graded all 0 not written" in said and session.done
    assert _judged_lines(labels) == [] and session.answer("2") == ""
    session = JudgingSession(labels, [synthetic], n=2, k=1, seed=1)
    session.start()
    for grade in ["0"] * sizes[0] + ["2"] + ["0"] * (sizes[1] - 1):
        said = session.answer(grade)
    assert f"saved {second}~judged" in said and "and 1 query graded all 0 before" in said
    assert [r["id"] for r in _judged_lines(labels)] == [f"{second}~judged", f"{first}~judged"]
    assert set(_judged_lines(labels)[1]["relevant"].values()) == {0}
    assert session.done and validate_dataset(labels).ok


def test_back_goes_to_the_previous_query_and_grading_it_again_rewrites_it(
    ict: tuple[Path, Path],
) -> None:
    labels, synthetic = ict
    session = JudgingSession(labels, synthetic, n=2, k=1, seed=3)
    first, second = session.order[:2]
    sizes = [len(pool(synthetic, q, k=1).hits) for q in (first, second)]
    session.start()
    assert session.answer("b").startswith("nothing before this document")
    for _ in range(sizes[0]):
        said = session.answer("2")
    assert f"saved {first}~judged" in said and f"] {second}:" in said
    said = session.answer("b")  # from the second query's first document to the first's last
    assert f"] {first}:" in said and f"{sizes[0]}/{sizes[0]} " in said and "(given: 2)" in said
    said = session.answer("1")
    assert f"saved {first}~judged (0 not relevant, 1 partly, {sizes[0] - 1} relevant)" in said
    assert _judged_lines(labels)[0]["relevant"][pool(synthetic, first, k=1).hits[-1].doc_id] == 1
    assert len(_judged_lines(labels)) == 1 and f"] {second}:" in said  # on with the second


def test_the_judged_split_is_evaluated_over_the_same_cut_corpus(
    generated: tuple[Path, Path, Path, Path],
    ict: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    labels, synthetic = ict
    config = generated[3]
    session = JudgingSession(labels, synthetic, n=6, k=3, seed=2)
    session.start()
    for qid in session.order[:6]:  # the first document of each query relevant, the others not
        for position in range(len(pool(synthetic, qid, k=3).hits)):
            session.answer("2" if position == 0 else "0")
    assert session.done
    judged = {r["id"]: r for r in _judged_lines(labels)}
    assert len(judged) == 6
    assert main(["datasets", "validate", str(labels)]) == 0
    out = tmp_path / "judged-run"
    args = ["run", str(config), "--dataset", str(labels), "--set", "dataset.split=judged"]
    assert main([*args, "--out", str(out), "--no-report"]) == 0
    capsys.readouterr()
    assert set(pd.read_parquet(out / "queries.parquet")["query_id"]) == set(judged)
    # the same rankings as the generated labels' run: the same documents, cut alike
    for trec in (synthetic / "runs").glob("*.trec"):
        for qid in judged:
            source = qid.removesuffix("~judged")
            assert _scores(out / "runs" / trec.name, qid) == pytest.approx(
                _scores(trec, source), rel=1e-5
            )
    cut = load_dataset(labels, split=JUDGED_SPLIT).doc_index
    whole = {d.id: d.text for d in read_corpus(labels / "corpus", ProblemLog(strict=True))}
    lines = [json.loads(x) for x in (labels / "queries.jsonl").read_text("utf-8").splitlines()]
    sources = [line for line in lines if f"{line['id']}~judged" in judged]
    assert len(sources) == 6
    for line in sources:  # its sentence is cut out as on the test split
        place = line["metadata"]["cut"]
        sentence = whole[place["doc_id"]][place["start"] : place["end"]].strip()
        assert len(sentence.split()) >= 8 and sentence not in cut[place["doc_id"]].text
    # the agreement of the run with the judged queries: the same sweep, on split 'judged'
    printed = _judge(
        [str(labels), "--run", str(synthetic), "--queries", "6", "--agreement"],
        [],
        monkeypatch,
        capsys,
    )
    found = agreement(tmp_path / "synthetic-judged", synthetic)
    means = pd.read_parquet(out / "trials.parquet").set_index("trial_id")["ndcg@10"]
    pd.testing.assert_series_equal(
        found.trials["real"], means[found.trials.index], check_names=False
    )
    low, high = found.tau_ci or (np.nan, np.nan)
    assert found.queries == (6, 12) and high > low
    assert f"| Kendall τ-b | {found.tau:.3f} (95% CI {low:.3f} to {high:.3f}; p = " in printed
    assert f"Agreement of {synthetic} with the judged queries" in printed
    assert _one_line_exit_2(
        [str(labels), "--run", str(tmp_path / "synthetic-judged")], monkeypatch, capsys
    ).endswith(
        "a run of split 'judged', the judgements themselves; give runs of the generated split"
    )


def _scores(trec: Path, query_id: str) -> dict[str, float]:
    rows = [line.split() for line in trec.read_text(encoding="utf-8").splitlines()]
    return {r[2]: float(r[4]) for r in rows if r[0] == query_id}


def _one_line_exit_2(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["datasets", "judge", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_bad_input_is_one_line_with_exit_code_2(
    labeled: tuple[Path, Path, Path],
    ict: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    labels, synthetic = ict
    folder, document_run, _ = labeled
    given = [str(labels), "--run", str(synthetic)]
    err = _one_line_exit_2([*given, "--queries", "0"], monkeypatch, capsys)
    assert "--queries: expected a positive number of queries, got 0" in err
    err = _one_line_exit_2([*given, "--depth", "0"], monkeypatch, capsys)
    assert "--depth: expected a positive number of documents, got 0" in err
    err = _one_line_exit_2([str(labels), "--run", str(document_run)], monkeypatch, capsys)
    assert f"--run {document_run}: none of its 3 queries is a query of split 'test'" in err
    other = tmp_path / "other"  # the same corpus, other sentences under the same ids
    generate(DEMO, other, IctMethod(), n=12, seed=7)
    err = _one_line_exit_2([str(other), "--run", str(synthetic)], monkeypatch, capsys)
    assert f"--run {synthetic}: query 'q001' reads" in err and "a run of another dataset?" in err
    err = _one_line_exit_2([str(folder), "--run", str(synthetic)], monkeypatch, capsys)
    assert f"--run {synthetic}: none of its 12 queries is a query of split 'test'" in err
    err = _one_line_exit_2([str(labels), "--run", str(tmp_path / "none")], monkeypatch, capsys)
    assert f"--run {tmp_path / 'none'}: no such folder" in err
    err = _one_line_exit_2([*given, "--agreement"], monkeypatch, capsys)  # nothing judged
    assert "no judged queries yet (split 'judged')" in err
    with pytest.raises(SystemExit) as stop:
        main(["datasets", "judge", str(labels)])
    assert stop.value.code == 2 and "--run" in capsys.readouterr().err


# ---------------------------------------------------------------- how many to judge


def test_the_benchmark_stands_samples_of_real_queries_in_for_judged_ones(
    generated: tuple[Path, Path, Path, Path],
) -> None:
    _, synthetic, real, _ = generated
    found = agreement(real, synthetic, "ndcg@10")
    figures = measure(real, synthetic, "ndcg@10", ks=(10, 117), repetitions=30, seed=3)
    assert figures["tau_all"] == found.tau and figures["trials"] == 3
    assert figures["queries"] == {"real": 117, "synthetic": 12}
    few, every = figures["by_k"]
    assert (few["k"], every["k"]) == (10, 117)
    # a sample of all 117 queries is the whole set: its τ-b is the one against all of them
    assert every["median_tau"] == pytest.approx(found.tau)
    assert every["tau_p05_p95"] == pytest.approx([found.tau, found.tau])
    assert few["median_width"] >= every["median_width"] > 0
    for row in (few, every):
        low, high = row["median_interval"]
        assert -1 <= low <= high <= 1
        assert all(0 <= row[share] <= 1 for share in ("covers_tau_all", "above_chance"))
    # each sample's interval is the one the command prints: tau_interval of that sample
    values = [_per_query(RunStore(r), "ndcg@10", found.trials.index) for r in (real, synthetic)]
    rng = np.random.default_rng(0)
    samples = np.stack([values[0].to_numpy()[rng.choice(117, 20, replace=False)] for _ in "abc"])
    low, high = _intervals(samples, values[1].to_numpy(), 0.95, seed=4)
    for i, sample in enumerate(samples):
        expected = tau_interval(pd.DataFrame(sample), pd.DataFrame(values[1].to_numpy()), seed=4)
        assert (low[i], high[i]) == pytest.approx(expected)
    with pytest.raises(DataError, match=r"117 real queries; k must lie in 2\.\.117"):
        measure(real, synthetic, "ndcg@10", ks=(200,), repetitions=2)
