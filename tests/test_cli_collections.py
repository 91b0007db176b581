"""`ragbench ingest` / `ragbench search` across processes on the real chunking corpora."""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.pipeline import RAGPipeline
from tests.paths import CHUNKING_EVAL, require

CORPORA = ("state_of_the_union.md", "chatlogs.md")


def _questions(root: Path, n: int) -> list[tuple[str, str, list[tuple[int, int]]]]:
    with (root / "questions_df.csv").open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if f"{r['corpus_id']}.md" in CORPORA]
    out = []
    for row in rows[:: max(1, len(rows) // n)][:n]:
        spans = [(r["start_index"], r["end_index"]) for r in json.loads(row["references"])]
        out.append((row["question"], f"{row['corpus_id']}.md", spans))
    return out


def test_ingest_then_search_finds_the_evidence(tmp_path: Path, capsys) -> None:
    root = require(CHUNKING_EVAL)
    source = tmp_path / "docs"
    source.mkdir()
    for name in CORPORA:
        shutil.copy(root / "corpora" / name, source / name)
    db = tmp_path / "db"
    ingest = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragbench.cli",
            "ingest",
            "--source",
            str(source),
            "--collection",
            "chroma",
            "--db",
            str(db),
            "--config",
            '{"chunker": {"kind": "recursive", "size": 800, "overlap": 100}}',
        ],
        capture_output=True,
        text=True,
    )
    assert ingest.returncode == 0, ingest.stderr
    assert "documents loaded 2, indexed 2" in ingest.stdout
    questions = _questions(root, 20)
    first = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragbench.cli",
            "search",
            questions[0][0],
            "--collection",
            "chroma",
            "--db",
            str(db),
            "-k",
            "5",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(json.loads(first.stdout)) == 5
    hits = 0
    for question, doc_id, spans in questions:
        assert (
            main(
                ["search", question, "--collection", "chroma", "--db", str(db), "--format", "json"]
            )
            == 0
        )
        rows = json.loads(capsys.readouterr().out)
        hits += any(
            r["doc_id"] == doc_id and r["start"] < end and start < r["end"]
            for r in rows
            for start, end in spans
        )
    chunks = len(RAGPipeline.open(db / "chroma").chunks)
    chance = 5 / chunks * 2  # generous: two evidence spans per question on average
    assert hits / len(questions) >= 0.6 > 3 * chance


def test_reingest_skips_unchanged_and_bad_names_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.md").write_text("Kestrel brokers replicate partitions.", encoding="utf-8")
    args = ["--collection", "c", "--db", str(tmp_path / "db")]
    config = '{"embedder": {"kind": "hashing"}}'
    assert main(["ingest", "--source", str(tmp_path / "a.md"), *args, "--config", config]) == 0
    capsys.readouterr()
    assert main(["ingest", "--source", str(tmp_path / "a.md"), *args]) == 0
    assert "unchanged 1" in capsys.readouterr().out
    assert main(["search", "replicate", *args]) == 0
    assert "a.md:chunk-0" in capsys.readouterr().out
    assert main(["search", "x", "--collection", "nope", "--db", str(tmp_path / "db")]) == 2
    bad = '{"chunker": {"kind": "recursive", "size": 10, "overlap": 20}}'
    code = main(
        [
            "ingest",
            "--source",
            str(tmp_path),
            "--collection",
            "d",
            "--db",
            str(tmp_path / "db"),
            "--config",
            bad,
        ]
    )
    assert code == 2
    assert "pipeline.chunker.overlap: must be < size (got 20 >= 10)" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../x", ".hidden", ""])
def test_collection_names_are_plain(name: str, tmp_path: Path) -> None:
    assert main(["search", "q", "--collection", name, "--db", str(tmp_path)]) == 2
