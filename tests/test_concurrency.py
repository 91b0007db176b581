"""Concurrent writers, as real processes: ingests into one collection wait for each other and
keep every document; a second run on a run directory another run holds fails at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import filelock
import pandas as pd
import pytest
import yaml

from ragbench.cli import main
from ragbench.pipeline import RAGPipeline
from tests.paths import DEMO, REPO, require

HASHING = {"kind": "hashing", "dim": 256}
PIPELINE = {
    "chunker": {"kind": "recursive", "size": 200, "overlap": 0},
    "embedder": HASHING,
    "retriever": {"kind": "hybrid", "store": {"kind": "exact"}},
}


def _cli(log: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """``ragbench *args`` in a new process, its output to ``log``.out and ``log``.err."""
    with log.with_suffix(".out").open("wb") as out, log.with_suffix(".err").open("wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "ragbench.cli", *args], cwd=REPO, env=env, stdout=out, stderr=err
        )


def _finish(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, str]:
    """Exit code and stderr of a process started by ``_cli``."""
    code = proc.wait(timeout=300)
    return code, log.with_suffix(".err").read_text(encoding="utf-8")


def test_concurrent_ingests_into_one_collection_keep_every_document(tmp_path: Path) -> None:
    expected = set()
    for i in range(4):
        for j in range(2):
            name = f"note-{i}-{j}.md"
            folder = tmp_path / f"source{i}"
            folder.mkdir(exist_ok=True)
            (folder / name).write_text(f"# Note {i}.{j}\n\nword{i}x{j} appears here.\n")
            expected.add(name)
    db = tmp_path / "db"
    config = json.dumps(PIPELINE)
    logs = [tmp_path / f"ingest{i}" for i in range(4)]
    procs = [
        _cli(
            log,
            "ingest",
            "--source",
            str(tmp_path / f"source{i}"),
            "--collection",
            "c",
            "--db",
            str(db),
            "--config",
            config,
        )
        for i, log in enumerate(logs)
    ]
    for proc, log in zip(procs, logs, strict=True):
        code, err = _finish(proc, log)
        assert code == 0, err
    pipeline = RAGPipeline.open(db / "c")
    assert sorted(pipeline.document_ids) == sorted(expected)
    texts = {chunk.text for chunk in pipeline.chunks.values()}
    for i in range(4):
        for j in range(2):
            assert any(f"word{i}x{j}" in text for text in texts), (i, j)
            hit = pipeline.retrieve(f"word{i}x{j}", k=1)[0]
            assert f"word{i}x{j}" in hit.chunk.text
    assert not list(db.glob(".tmp-*"))


def test_a_second_run_on_a_held_run_directory_fails_at_once(tmp_path: Path) -> None:
    config = {
        "name": "held",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
            "retriever": [{"kind": "bm25", "k1": [0.5, 0.9, 1.3, 1.7], "b": [0.2, 0.4, 0.6, 0.9]}],
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = tmp_path / "run"
    env = {**os.environ, "RAGBENCH_CACHE": str(tmp_path / "cache")}
    logs = [tmp_path / f"run{i}" for i in range(2)]
    procs = [_cli(log, "run", str(path), "--out", str(out), "--no-report", env=env) for log in logs]
    results = [_finish(proc, log) for proc, log in zip(procs, logs, strict=True)]
    assert sorted(code for code, _ in results) == [0, 2], results
    err = next(err for code, err in results if code == 2)
    assert err.strip() == (
        f"ragbench run: {out}: another ragbench run holds this run directory; "
        "wait for it to finish or pass another --out"
    )
    trials = pd.read_parquet(out / "trials.parquet")
    assert len(trials) == 16 and set(trials["status"]) == {"ok"}
    per_query = pd.read_parquet(out / "per_query.parquet")
    assert len(per_query) == 16 * 2 * 117
    assert len(list((out / "runs").glob("*.trec"))) == 16
    assert not list(out.rglob(".tmp-*"))


def test_a_collection_where_no_lock_can_be_made_opens_but_takes_no_ingest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = RAGPipeline.from_config(PIPELINE)
    pipeline.save(tmp_path / "c")

    def read_only(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(filelock.FileLock, "acquire", read_only)
    assert RAGPipeline.open(tmp_path / "c").trial.id == pipeline.trial.id
    (tmp_path / "a.md").write_text("# A\n\nA note.\n")
    ingest = ["ingest", "--source", str(tmp_path / "a.md"), "--db", str(tmp_path)]
    assert main([*ingest, "--collection", "c"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"ragbench ingest: {tmp_path}: cannot write (locking collection 'c'): Read-only file system"
    )
