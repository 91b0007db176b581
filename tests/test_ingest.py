"""Ingest at any size: batches committed as they are done, a kill -9 at any point resumed by the
same command with no finished batch redone, Dask workers building the same collection as a
serial ingest, and a folder ingested again mirrored (files gone from it leave the collection).
"""

from __future__ import annotations

import json
import os
import shutil
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


BM25_400 = {"chunker": {"kind": "recursive", "size": 400}, "retriever": {"kind": "bm25"}}
_DEMO = Path(__file__).resolve().parents[1] / "datasets" / "demo"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A bm25 run over a copy of the demo set: its folder, its trial id and its corpus."""
    import shutil

    import pandas as pd

    root = tmp_path_factory.mktemp("demo-run")
    shutil.copytree(_DEMO, root / "demo")
    config = root / "run.yaml"
    config.write_text(
        f"name: r\ndataset: {{path: {root / 'demo'}}}\n"
        "evaluation: {metrics: [ndcg@10], depth: 10}\nlatency: {queries: 0}\n"
        "sweep:\n  chunker: [{kind: recursive, size: 400}]\n  retriever: [{kind: bm25}]\n"
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("RAGBENCH_CACHE", str(root / "cache"))
    try:
        command = ["run", str(config), "--out", str(root / "run"), "--limit-queries", "10"]
        assert main([*command, "--no-report"]) == 0
    finally:
        mp.undo()
    trial = str(pd.read_parquet(root / "run" / "trials.parquet")["trial_id"].iloc[0])
    return root / "run", trial, root / "demo" / "corpus"


ORIGINS = "SELECT origin, COUNT(*) FROM documents GROUP BY origin"


def _deploying(
    tmp_path: Path, demo_run: tuple[Path, str, Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, Path, list[str], list[str]]:
    """The demo run and its corpus, a copy of the corpus whose
    ``concepts/compaction.md`` gained a line, the ``--db`` arguments and the deploy command
    of the trial (its collection name to append), with a cache of the test's own."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    run, trial, corpus = demo_run
    edited = tmp_path / "edited"
    shutil.copytree(corpus, edited)
    with (edited / "concepts" / "compaction.md").open("a") as fh:
        fh.write("\nAn edited line about quota throttles.\n")
    db = ["--db", str(tmp_path / "db")]
    deploy = ["ingest", "--from-run", str(run), "--trial", trial, *db, "--collection"]
    return run, corpus, edited, db, deploy


def test_a_run_corpus_and_a_folder_never_replace_each_other_unasked(
    tmp_path: Path,
    demo_run: tuple[Path, str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, corpus, edited, db, deploy = _deploying(tmp_path, demo_run, monkeypatch)
    # a folder's edited document is not replaced by the run's own version of it
    folder = ["ingest", "--source", str(edited), *db, "--collection", "c"]
    assert main([*folder, "--config", json.dumps(BM25_400)]) == 0
    capsys.readouterr()
    assert main([*deploy, "c"]) == 2
    err = capsys.readouterr().err
    assert "'concepts/compaction.md' is in the collection already" in err
    assert f"indexed from {os.path.realpath(edited)}" in err and len(err.splitlines()) == 1
    assert _store(tmp_path / "db", "c", ORIGINS) == [(os.path.realpath(edited), 58)]
    # nor does the folder take the run's documents over; its own are refused in one line
    assert main([*deploy, "d", "--source", str(edited)]) == 2
    err = capsys.readouterr().err
    assert f"indexed from run:{os.path.realpath(run)}" in err
    assert "--replace" in err and "common parent" not in err
    # the run's own corpus files, unchanged, go over to the folder (README: "adds more")
    assert main([*deploy, "e", "--source", str(corpus)]) == 0
    assert _store(tmp_path / "db", "e", ORIGINS) == [(os.path.realpath(corpus), 58)]
    assert main([*deploy, "e"]) == 0  # and the run again changes nothing
    assert "indexed 0, unchanged 58" in capsys.readouterr().out
    # --replace lets the run's version in
    assert main([*deploy, "c", "--replace"]) == 0
    assert "indexed 1, unchanged 57" in capsys.readouterr().out


def test_a_refused_ingest_leaves_the_collection_as_it_was(
    tmp_path: Path,
    demo_run: tuple[Path, str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run, _, edited, db, deploy = _deploying(tmp_path, demo_run, monkeypatch)
    assert main([*deploy, "r"]) == 0
    # the unchanged documents read before the clash (clients/*, ...) stay the run's
    folder = ["ingest", "--source", str(edited), *db, "--collection", "r"]
    assert main(folder) == 2
    assert "'concepts/compaction.md' is in the collection already" in capsys.readouterr().err
    assert _store(tmp_path / "db", "r", ORIGINS) == [(f"run:{os.path.realpath(run)}", 58)]
    # so a narrower ingest of the folder afterwards removes none of them
    assert main([*folder[:-2], "--include", "security/**", "--collection", "r"]) == 0
    assert "removed 0" in capsys.readouterr().out
    assert _store(tmp_path / "db", "r", "SELECT COUNT(*) FROM documents") == [(58,)]
    # a new collection the refused ingest made (the run went in, the folder was refused) goes
    assert main([*deploy, "n", "--source", str(edited)]) == 2
    assert not (tmp_path / "db" / "n").exists()


def test_a_run_trial_into_a_collection_of_another_configuration_names_both(
    tmp_path: Path,
    demo_run: tuple[Path, str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    run, trial, corpus = demo_run
    db = ["--db", str(tmp_path / "db")]
    hybrid = {**HASHING, "chunker": {"kind": "recursive", "size": 400}}
    assert (
        main(
            [
                "ingest",
                "--source",
                str(corpus),
                *db,
                "--collection",
                "h",
                "--config",
                json.dumps(hybrid),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["ingest", "--from-run", str(run), "--trial", trial, *db, "--collection", "h"]) == 2
    err = capsys.readouterr().err
    assert "a collection of another configuration (hybrid" in err
    assert f"than trial {trial} of {run} (bm25 | recursive(size=400))" in err
    assert "another --collection" in err
    assert _store(tmp_path / "db", "h", "SELECT COUNT(*) FROM documents") == [(58,)]


def test_a_file_and_then_its_folder_are_one_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    team = tmp_path / "teams" / "teamA"
    (team / "sub").mkdir(parents=True)
    (team / "README.md").write_text("# Team A\n\nleader replica offset.\n")
    (team / "a.md").write_text("# A\n\nretention compaction.\n")
    db = ["--db", str(tmp_path / "db")]
    first = ["ingest", "--source", str(team / "README.md"), *db, "--collection", "t"]
    assert main([*first, "--config", json.dumps(BM25_400)]) == 0
    capsys.readouterr()
    assert main(["ingest", "--source", f"{team}/./", *db, "--collection", "t"]) == 0
    assert "indexed 1, unchanged 1" in capsys.readouterr().out
    origins = "SELECT id, origin FROM documents ORDER BY id"
    assert _store(tmp_path / "db", "t", origins) == [("README.md", str(team)), ("a.md", str(team))]
    assert main(first) == 0  # the file again: still the folder's document
    assert _store(tmp_path / "db", "t", origins)[0] == ("README.md", str(team))
    # a folder inside the ingested one is refused: its files are in the collection already
    (team / "sub" / "a.md").write_text("# Sub A\n\nconsumer rebalance heartbeat.\n")
    assert main(["ingest", "--source", str(team / "sub"), *db, "--collection", "t"]) == 2
    err = capsys.readouterr().err
    assert f"{team / 'sub'}: lies inside {team}, whose documents are in the collection" in err
    assert "common parent" not in err
    other = tmp_path / "teams" / "teamB"
    other.mkdir()
    (other / "a.md").write_text("# B\n\nthroughput latency.\n")
    assert main(["ingest", "--source", str(other), *db, "--collection", "t"]) == 2
    err = capsys.readouterr().err
    assert f"common parent {tmp_path / 'teams'} into a new collection (ids" in err
    # the parent into the same collection would index team's documents twice: refused
    before = _store(tmp_path / "db", "t", origins)
    parent = ["ingest", "--source", str(tmp_path / "teams"), *db, "--collection"]
    assert main([*parent, "t"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'teams'}: holds {team}, whose documents" in err
    assert "into a new collection" in err and len(err.splitlines()) == 1
    assert _store(tmp_path / "db", "t", origins) == before
    assert main([*parent, "new"]) == 0  # as the advice says
    ids = [i for (i,) in _store(tmp_path / "db", "new", "SELECT id FROM documents ORDER BY id")]
    assert ids == ["teamA/README.md", "teamA/a.md", "teamA/sub/a.md", "teamB/a.md"]


def test_an_ingest_in_which_every_document_fails_is_no_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragbench.errors import DataError
    from ragbench.index.embedders import EmbeddingError, HashingEmbedder

    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    source = _corpus(tmp_path / "docs", 6)
    db = tmp_path / "db"
    # a folder that is no model is named before any document is read
    bad = {"embedder": {"kind": "sentence-transformers", "model": str(source)}}
    command = ["ingest", "--source", str(source), "--db", str(db), "--collection"]
    assert main([*command, "m", "--config", json.dumps(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragbench ingest: --config: embedder: cannot load sentence-transformers")
    assert len(err.splitlines()) == 1 and not (db / "m").exists()

    def fail(self: HashingEmbedder, texts: list[str], role: str) -> None:
        raise EmbeddingError("the provider is down")

    with monkeypatch.context() as broken:
        broken.setattr(HashingEmbedder, "embed", fail)
        with pytest.raises(
            DataError, match=r"every document to index failed \(6\), collection 'n' is not created"
        ):
            ingest(db / "n", IngestOptions(source=str(source), spec=HASHING))
        assert not (db / "n").exists()
    ingest(db / "n", IngestOptions(source=str(source), spec=HASHING))
    (source / "a" / "doc0001.md").write_text("# Doc 1\n\nrewritten.\n")
    with monkeypatch.context() as broken:
        broken.setattr(HashingEmbedder, "embed", fail)
        assert main([*command, "n"]) == 2
    err = capsys.readouterr().err
    assert "a/doc0001.md: embedding failed: the provider is down" in err
    assert "nothing was indexed into collection 'n'" in err
    assert len(RAGPipeline.open(db / "n").document_ids) == 6  # kept as it was


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_ingest_checks_workers_as_run_does(
    tmp_path: Path, workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _corpus(tmp_path / "docs", 2)
    command = ["ingest", "--source", str(source), "--db", str(tmp_path / "db"), "--collection"]
    options = ["--executor", "dask", f"--workers={workers}", "--config", json.dumps(HASHING)]
    assert main([*command, "w", *options]) == 2
    assert (
        capsys.readouterr().err
        == f"ragbench ingest: --workers: expected at least 1, got {workers}\n"
    )
    assert not (tmp_path / "db" / "w").exists()


def test_a_folder_inside_an_ingested_one_is_refused_and_a_source_gone_empty_removes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    parent = tmp_path / "par"
    for team, text in (("teamA", "leader replica offset"), ("teamB", "retention compaction")):
        (parent / team).mkdir(parents=True)
        (parent / team / "notes.md").write_text(f"# {team}\n\n{text} for {team}.\n")
        (parent / team / "more.md").write_text(f"# More\n\n{text} again, {team}.\n")
    db = ["--db", str(tmp_path / "db"), "--collection", "p"]
    assert main(["ingest", "--source", str(parent), *db, "--config", json.dumps(BM25_400)]) == 0
    capsys.readouterr()
    docs = "SELECT id FROM documents ORDER BY id"
    before = _store(tmp_path / "db", "p", docs)
    for inner in (parent / "teamA", parent / "teamB" / "notes.md"):
        assert main(["ingest", "--source", str(inner), *db]) == 2
        err = capsys.readouterr().err
        assert f"{inner}: lies inside {parent}, whose documents are in the collection" in err
        assert len(err.splitlines()) == 1 and _store(tmp_path / "db", "p", docs) == before
    # the folder comes back empty (an unmounted share): refused, nothing removed
    moved = tmp_path / "moved"
    parent.rename(moved)
    parent.mkdir()
    assert main(["ingest", "--source", str(parent), *db]) == 2
    err = capsys.readouterr().err
    assert f"{parent}: gave no document, and the collection holds 4 indexed from it" in err
    assert _store(tmp_path / "db", "p", docs) == before
    # a file still there that fails to load keeps its last indexed version; a deleted one goes
    parent.rmdir()
    moved.rename(parent)
    (parent / "teamA" / "notes.md").write_bytes(b"\0binary now")
    (parent / "teamB" / "more.md").unlink()
    assert main(["ingest", "--source", str(parent), *db]) == 0
    assert "removed 1" in capsys.readouterr().out
    assert _store(tmp_path / "db", "p", docs) == [
        ("teamA/more.md",),
        ("teamA/notes.md",),
        ("teamB/notes.md",),
    ]
