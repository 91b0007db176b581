"""`ragbench chunk`: formats, exit codes and exact offsets on the real chunking corpora."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench.cli import main
from tests.paths import CHUNKING_EVAL, DEMO, require

KINDS = [
    {"kind": "none"},
    {"kind": "fixed", "size": 300, "overlap": 50},
    {"kind": "fixed", "size": 120, "overlap": 20, "unit": "tokens", "tokenizer": "cl100k"},
    {"kind": "recursive", "size": 400, "overlap": 200},
    {"kind": "sentence", "size": 500, "overlap": 100},
    {"kind": "sentence_window", "window": 2},
    {"kind": "semantic", "embedder": {"kind": "hashing", "dim": 128}},
]


def _jsonl(capsys: pytest.CaptureFixture[str], path: Path, spec: dict) -> list[dict]:
    code = main(["chunk", str(path), "--chunker", json.dumps(spec), "--format", "jsonl"])
    assert code == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: s["kind"])
def test_chunk_offsets_reproduce_the_corpora(spec: dict, capsys: pytest.CaptureFixture) -> None:
    corpora = require(CHUNKING_EVAL / "corpora")
    texts = {p.name: p.read_text(encoding="utf-8") for p in corpora.glob("*.md")}
    rows = _jsonl(capsys, corpora, spec)
    assert {r["doc_id"] for r in rows} == set(texts)
    for row in rows:
        assert texts[row["doc_id"]][row["start"] : row["end"]] == row["text"]
        assert row["id"] == f"{row['doc_id']}:chunk-{row['index']}"


def test_table_and_summary_formats(capsys: pytest.CaptureFixture[str]) -> None:
    corpus = require(DEMO / "corpus")
    assert main(["chunk", str(corpus), "--format", "summary"]) == 0
    out = capsys.readouterr().out
    assert "documents" in out and "chunks" in out and "recursive(size=512, overlap=64)" in out
    assert main(["chunk", str(corpus), "--format", "table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["id", "start", "end", "chars"]
    assert len(lines) > 50


def test_bad_chunker_spec_exits_2_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\nSome text here.", encoding="utf-8")
    cases = [
        ('{"kind":"recursive","size":512,"overlap":600}', "chunker.overlap: must be < size"),
        ('{"kind":"fixed","size":10,"unit":"bytes"}', "'chars', 'tokens' or 'words'"),
        ('{"kind":"blob"}', "allowed: fixed, none, recursive"),
        ("{not json", "--chunker: invalid JSON"),
    ]
    for spec, expected in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "ragbench.cli", "chunk", str(tmp_path), "--chunker", spec],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc.stderr
        assert expected in proc.stderr
        assert "Traceback" not in proc.stderr


def test_missing_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chunk", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err
