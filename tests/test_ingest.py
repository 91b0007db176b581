"""Ingest at any size: batches committed as they are done, a kill -9 at any point resumed by the
same command with no finished batch redone, Dask workers building the same collection as a
serial ingest, and a folder ingested again mirrored (files gone from it leave the collection).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.ingest import IngestOptions, ingest
from ragbench.pipeline import RAGPipeline

HASHING = {"embedder": {"kind": "hashing", "dim": 64}}
WORDS = (
    "segment partition replica leader follower offset consumer producer broker topic quota "
    "retention compaction snapshot checkpoint rebalance heartbeat throttle latency throughput"
).split()
QUERIES = ["leader replica offset", "retention compaction", "consumer rebalance heartbeat"]


def _corpus(root: Path, n: int) -> Path:
    """``n`` small documents in two subfolders, each a different mix of the words."""
    for i in range(n):
        folder = root / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(12 + i % 9)]
        (folder / f"doc{i:04d}.md").write_text(f"# Doc {i}\n\n" + " ".join(words) + ".\n")
    return root


def _rankings(db: Path, name: str) -> list[list[str]]:
    pipeline = RAGPipeline.open(db / name)
    return [list(pipeline.search([q], 10).ranking.ids[0]) for q in QUERIES]


def _store(db: Path, name: str, sql: str) -> list[tuple]:
    with sqlite3.connect(db / name / "store.sqlite") as con:
        return con.execute(sql).fetchall()


def _interrupted(source: Path, db: Path, after: int, env: dict[str, str]) -> None:
    """Start an ingest of ``source`` in a process that kills itself (SIGKILL) once ``after``
    documents were read."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from ragbench.pipeline import RAGPipeline, pipeline_trial
        from ragbench.text.loaders import load

        loader = load({str(source)!r})

        class Killing:
            path, report = loader.path, loader.report

            def __iter__(self):
                for n, doc in enumerate(loader):
                    if n == {after}:
                        os.kill(os.getpid(), signal.SIGKILL)
                    yield doc

        target = Path({str(db / "c")!r})
        RAGPipeline.create(pipeline_trial({HASHING!r}), target).index(Killing())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()


@pytest.mark.parametrize("after", [70, 333])
def test_a_killed_ingest_resumes_with_no_finished_batch_redone(
    tmp_path: Path, after: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    env = {**os.environ, "RAGBENCH_CACHE": str(tmp_path / "cache")}
    source = _corpus(tmp_path / "docs", 400)
    db = tmp_path / "db"
    _interrupted(source, db, after, env)
    committed = _store(db, "c", "SELECT COUNT(*) FROM documents")[0][0]
    assert 0 < committed <= after  # the batches finished before the kill are there
    assert committed % 64 == 0  # and no part of the one being read
    # a reader sees the committed batches (their indexes rebuilt from the shards)
    assert len(RAGPipeline.open(db / "c").document_ids) == committed
    command = ["ingest", "--source", str(source), "--db", str(db), "--collection"]
    capsys.readouterr()
    assert main([*command, "c"]) == 0
    out = capsys.readouterr().out
    assert f"indexed {400 - committed}, unchanged {committed}" in out
    assert main([*command, "whole", "--config", json.dumps(HASHING)]) == 0
    assert _rankings(db, "c") == _rankings(db, "whole")
    columns = "SELECT id, doc_id, start, stop FROM chunks ORDER BY stage, seq"
    assert _store(db, "c", columns) == _store(db, "whole", columns)


def test_a_dask_ingest_builds_the_collection_a_serial_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    source = _corpus(tmp_path / "docs", 300)
    db = tmp_path / "db"
    serial = IngestOptions(source=str(source), spec=HASHING)
    ingest(db / "serial", serial)
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "other-cache"))  # nothing cached
    ingest(db / "dask", IngestOptions(source=str(source), spec=HASHING, executor="dask"))
    assert _rankings(db, "dask") == _rankings(db, "serial")
    from ragbench.index.cache import EmbeddingCache

    assert any(EmbeddingCache(tmp_path / "other-cache").root.rglob("*.npy"))


def test_a_folder_ingested_again_is_mirrored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    source = _corpus(tmp_path / "docs", 20)
    db = tmp_path / "db"
    command = ["ingest", "--source", str(source), "--db", str(db), "--collection", "c"]
    assert main([*command, "--config", json.dumps(HASHING)]) == 0
    (source / "a" / "doc0001.md").unlink()
    (source / "b" / "doc0002.md").write_text("# Doc 2\n\nrewritten about quota throttle.\n")
    capsys.readouterr()
    assert main(command) == 0
    out = capsys.readouterr().out
    assert "indexed 1, unchanged 18, removed 1" in out
    ids = RAGPipeline.open(db / "c").document_ids
    assert "a/doc0001.md" not in ids and len(ids) == 19


def test_progress_says_rate_and_time_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    source = _corpus(tmp_path / "docs", 200)
    lines = []
    ingest(
        tmp_path / "db" / "c",
        IngestOptions(source=str(source), spec=HASHING),
        lambda progress: lines.append(progress.line()),
    )
    assert len(lines) == 4  # one per batch of 64
    assert lines[0].startswith(f"{source}: 64 of about 200 documents (64 indexed")
    assert "documents/s, about" in lines[0] and "left" in lines[0]
