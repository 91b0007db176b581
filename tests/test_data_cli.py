"""`ragbench eval` against pytrec_eval, and `ragbench datasets list | info`."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import pytrec_eval

from ragbench.cli import main
from ragbench.data.trec import write_qrels, write_run
from tests.paths import DEMO, REPO, SCIFACT, require

PYTREC = {
    "ndcg@10": "ndcg_cut_10",
    "recall@100": "recall_100",
    "map": "map",
    "mrr": "recip_rank",
    "precision@10": "P_10",
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, dict, dict]:
    """Random graded qrels and a run with ties; q-missing is judged but not retrieved,
    q-extra retrieved but not judged, q-zero judged with grade 0 only."""
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(60)]
    qrels = {
        f"q{i}": {d: rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(docs, 8)} for i in range(25)
    }
    qrels["q-missing"] = {"d1": 1}
    qrels["q-zero"] = {"d2": 0}
    run = {q: {d: float(rng.randint(0, 9)) for d in rng.sample(docs, 40)} for q in qrels}
    del run["q-missing"]
    run["q-extra"] = {"d1": 1.0}
    write_qrels(tmp_path / "qrels.txt", qrels)
    write_run(tmp_path / "run.txt", run)
    return tmp_path / "qrels.txt", tmp_path / "run.txt", qrels, run


def _eval(capsys: pytest.CaptureFixture[str], qrels: Path, run: Path, *extra: str) -> str:
    code = main(["eval", "--qrels", str(qrels), "--run", str(run), *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_eval_matches_pytrec_eval(files: tuple, capsys: pytest.CaptureFixture[str]) -> None:
    qrels_file, run_file, qrels, run = files
    metrics = ",".join(PYTREC)
    out = _eval(
        capsys, qrels_file, run_file, "--metrics", metrics, "--per-query", "--format", "json"
    )
    result = json.loads(out)
    expected = pytrec_eval.RelevanceEvaluator(qrels, set(PYTREC.values())).evaluate(run)
    assert set(result["per_query"]) == set(expected) and result["queries"] == len(expected)
    for qid, values in expected.items():
        for ours, theirs in PYTREC.items():
            assert result["per_query"][qid][ours] == pytest.approx(values[theirs], abs=1e-12)
    for ours, theirs in PYTREC.items():
        mean = sum(v[theirs] for v in expected.values()) / len(expected)
        assert result["means"][ours] == pytest.approx(mean, abs=1e-12)


def test_eval_level_and_complete(files: tuple, capsys: pytest.CaptureFixture[str]) -> None:
    qrels_file, run_file, qrels, run = files
    out = _eval(
        capsys, qrels_file, run_file, "--metrics", "map,P@10", "-l", "2", "--format", "json"
    )
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"map", "P_10"}, relevance_level=2).evaluate(
        run
    )
    mean = sum(v["map"] for v in expected.values()) / len(expected)
    assert json.loads(out)["means"]["map"] == pytest.approx(mean, abs=1e-12)
    complete = json.loads(_eval(capsys, qrels_file, run_file, "-c", "--format", "json"))
    assert complete["queries"] == len(qrels)


def test_eval_table_mimics_trec_eval(files: tuple, capsys: pytest.CaptureFixture[str]) -> None:
    qrels_file, run_file, qrels, _ = files
    lines = _eval(capsys, qrels_file, run_file, "--per-query").splitlines()
    metrics = ["ndcg@10", "recall@100", "map", "mrr@10", "precision@10"]
    rows = [line.split("\t") for line in lines]
    assert all(len(r) == 3 and len(r[0]) == 22 for r in rows)
    assert [r[0].strip() for r in rows[-5:]] == metrics and {r[1] for r in rows[-5:]} == {"all"}
    assert rows[-6] == [f"{'num_q':<22}", "all", str(len(qrels) - 1)]  # the queries scored
    assert len(rows) == 5 * (len(qrels) - 1 + 1) + 1  # q-missing is not in the run
    assert all(r[2] == f"{float(r[2]):.4f}" for r in rows if r[0].strip() != "num_q")
    means = _eval(capsys, qrels_file, run_file).splitlines()
    assert means == lines[-6:]


def test_eval_csv(files: tuple, capsys: pytest.CaptureFixture[str]) -> None:
    qrels_file, run_file, _, _ = files
    out = _eval(capsys, qrels_file, run_file, "--format", "csv", "--metrics", "ndcg@10,map")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["query_id", "ndcg@10", "map"] and rows[1][0] == "all" and len(rows) == 2
    float(rows[1][1])


def test_eval_bad_input_exits_2(
    files: tuple, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels_file, run_file, _, _ = files
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 d1 1 high tag\n", encoding="utf-8")
    cases = [
        (["--run", str(bad)], "bad.run:1: expected a numeric score"),
        (["--run", str(run_file), "--metrics", "ndcg"], "'ndcg' needs a cutoff"),
        (["--run", str(run_file), "--metrics", "span_iou@5"], "needs chunk offsets"),
        (["--run", str(tmp_path / "none.run")], "none.run"),
    ]
    for args, expected in cases:
        assert main(["eval", "--qrels", str(qrels_file), *args]) == 2
        assert expected in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["eval", "--qrels", str(qrels_file), "--run", str(run_file), "-l", "0"])
    assert exit_info.value.code == 2


def test_datasets_info_and_list(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require(DEMO)
    assert main(["datasets", "info", "demo"]) == 0
    info = dict(
        line.split(maxsplit=1)
        for line in capsys.readouterr().out.replace("query types", "types").splitlines()
    )
    assert info["documents"].startswith("58 (") and info["queries"] == "117"
    assert info["judgements"] == "189 (grade 1: 55, grade 2: 134)"
    assert info["spans"].startswith("134 (mean") and info["types"].startswith("lexical 36")
    assert len(info["fingerprint"]) == 64
    monkeypatch.setenv("RAGBENCH_DATA", str(tmp_path))
    (tmp_path / "scifact").mkdir()
    assert main(["datasets", "list"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and str(DEMO.resolve()) in out
    assert any(line.split() == ["scifact", "downloaded"] for line in out.splitlines())
    assert any(line.split() == ["nfcorpus", "-"] for line in out.splitlines())


def test_datasets_info_scifact_as_a_subprocess() -> None:
    root = require(SCIFACT)
    done = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", "datasets", "info", str(root), "--split", "train"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "queries      809" in done.stdout and "919 (grade 1: 919)" in done.stdout


def _hand_labeled(folder: Path) -> Path:
    """``folder``: three demo documents and a hand-written queries file with a query judged
    only at grade 0 and one whose split is typed ``TEST``."""
    folder.mkdir()
    for name in ("compaction.md", "segments.md", "topics-and-partitions.md"):
        (folder / name).write_text((DEMO / "corpus" / "concepts" / name).read_text())
    lines = [
        {"query": "compaction latest value per key", "relevant": ["compaction.md"]},
        {"query": "segments rolling", "relevant": {"segments.md": 0}},
        {"query": "topics", "relevant": ["topics-and-partitions.md"], "split": "TEST"},
        {"query": "partitions", "relevant": ["topics-and-partitions.md"], "split": "TEST"},
    ]
    (folder / "queries.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return folder


def test_a_split_named_like_test_but_for_case_and_unscored_queries_are_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``validate`` and ``info`` name the queries of split 'TEST' that are not in 'test', and
    ``info`` says how many queries have no relevant document (a run does not score them)."""
    folder = _hand_labeled(tmp_path / "lab")
    said = f"{folder / 'queries.jsonl'}: 2 queries of split 'TEST' are not in split 'test' (splits"
    assert main(["datasets", "validate", str(folder)]) == 1
    assert f"warning: {said} are case-sensitive)" in capsys.readouterr().out.splitlines()
    assert main(["datasets", "info", str(folder)]) == 0
    out, err = capsys.readouterr()
    assert "queries      2 (1 has no relevant (grade > 0) document and will not be scored)" in out
    assert f"warning: {said} are case-sensitive)" in err.splitlines()
    assert main(["datasets", "info", str(DEMO)]) == 0
    out, err = capsys.readouterr()
    assert "queries      117\n" in out and "case-sensitive" not in err


def test_a_queries_file_that_is_a_fifo_is_said_to_be_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder's ``queries.jsonl`` that is a FIFO is named as one, not as missing (no hang)."""
    folder = tmp_path / "fifo"
    folder.mkdir()
    (folder / "a.md").write_text("Alpha particles and beta decay.")
    os.mkfifo(folder / "queries.jsonl")
    for command in ("validate", "info"):
        assert main(["datasets", command, str(folder)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"ragbench datasets {command}: {folder / 'queries.jsonl'}: not a regular file (FIFO) "
            f"(the queries file for {folder})"
        )
