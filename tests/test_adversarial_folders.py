"""Folders are the user's: a command writes only into a folder it made (or a new or empty one),
never deletes what it did not write, never reads its own outputs as documents, and uses the
labels a folder already holds.

Every command that writes a folder or file is pointed at a folder of the user's; it refuses in
one line naming its flag, and every file there stays byte-identical.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.owned import (
    MARKER,
    changed,
    claim,
    marker,
    owned,
    remove,
    seal,
    stream,
    writable_file,
)
from ragbench.pipeline import RAGPipeline
from tests.adversarial import DOC, GOOD_Q, Case, _config, _dataset, _finished_run, _yaml, check
from tests.paths import DEMO, require

# what a user's folder holds: names ragbench itself writes among them
_USERS = {
    "report.html": "<p>my report</p>",
    "report.md": "# mine",
    "manifest.json": '{"mine": true}',
    "trials.parquet": "not a table",
    "compare.md": "my comparison",
    "queries.jsonl": "my queries\n",
    "notes.txt": "my notes",
    "plots/a.png": "png bytes",
    "labels-handwritten/queries.jsonl": '{"query": "q", "relevant": ["a.md"]}\n',
    "run/manifest.json": "{}",
}


def _users(work: Path, name: str) -> Path:
    """A folder of the user's files (made once per name)."""
    root = work / name
    if not root.exists():
        for rel, text in _USERS.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, "utf-8")
    return root


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (its relative path) and the SHA-256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _said(err: str) -> str:
    """The message of a one-line error, after ``ragbench <command>: ``."""
    assert err.startswith("ragbench ") and len(err.splitlines()) == 1, err
    return err.partition(": ")[2]


def _ragas(work: Path) -> str:
    path = work / "testset.jsonl"
    row = {"user_input": "how are segments deleted", "reference_contexts": [DOC], "reference": "x"}
    path.write_text(json.dumps(row) + "\n", "utf-8")
    return str(path)


def _labeled(work: Path) -> str:
    return _dataset(work, "labeled", [GOOD_Q], {"a.md": DOC})


def _agreement(work: Path) -> list[str]:
    config = _yaml(work, "agree", _config(name="agree"))
    return ["datasets", "agreement", str(DEMO), str(DEMO), "--config", config]


# (command, the folder of the user's it is pointed at, what stderr names)
_POINTED = [
    ("run", lambda w, u: ["run", _yaml(w, "r", _config(name="r")), "--out", u], "--out"),
    (
        "run --overwrite",
        lambda w, u: ["run", _yaml(w, "r", _config(name="r")), "--out", u, "--overwrite"],
        "--out",
    ),
    ("report", lambda w, u: ["report", _finished_run(w), "--out", u], "--out"),
    ("compare", lambda w, u: ["compare", _finished_run(w), "--out", u], "--out"),
    (
        "export ragas",
        lambda w, u: ["export", "ragas", _finished_run(w), "--out", f"{u}/notes.txt"],
        "--out",
    ),
    ("optimize", lambda w, u: ["optimize", _labeled(w), "--out", u], "--out"),
    (
        "optimize into its documents",
        lambda w, u: ["optimize", u, "--out", u, "--generate"],
        "--out",
    ),
    (
        "optimize --generate",
        lambda w, u: ["optimize", str(DEMO / "corpus"), "--out", u, "--generate"],
        "--out",
    ),
    (
        "datasets generate",
        lambda w, u: ["datasets", "generate", _labeled(w), "--out", u],
        "already exists",
    ),
    (
        "datasets import-ragas",
        lambda w, u: ["datasets", "import-ragas", _ragas(w), "--out", u],
        "already exists",
    ),
    ("datasets agreement", lambda w, u: [*_agreement(w), "--out", u], "--out"),
    ("finetune", lambda w, u: ["finetune", _labeled(w), "--out", u, "--split", "test"], "--out"),
    (
        "ingest",
        lambda w, u: [
            *["ingest", "--source", _labeled(w), "--db", str(Path(u).parent)],
            *["--collection", Path(u).name, "--config", '{"retriever": {"kind": "bm25"}}'],
        ],
        "--collection",
    ),
]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(DEMO)
    return tmp_path_factory.mktemp("folders")


@pytest.mark.parametrize(("name", "argv", "names"), _POINTED, ids=[p[0] for p in _POINTED])
def test_a_command_pointed_at_a_users_folder_refuses_and_leaves_it_byte_identical(
    name: str,
    argv: object,
    names: str,
    work: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    users = _users(work, name.replace(" ", "_"))
    before = _snapshot(users)
    build = argv  # (work, user folder) -> argv

    def command(w: Path) -> list[str]:
        return build(w, str(users))  # type: ignore[operator]

    check(Case(name, command, 2, names), work, capsys, monkeypatch)
    assert _snapshot(users) == before
    assert not (users / MARKER).exists()


def test_claim_takes_new_empty_and_its_own_folders_only(tmp_path: Path) -> None:
    made = claim(tmp_path / "new" / "deep", "--out", "run directory")
    assert owned(made)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert owned(claim(empty, "--out", "report"))
    assert claim(made, "--out", "run directory") == made  # its own, again
    (made / "report.html").write_text("written by ragbench")
    assert claim(made, "--out", "run directory") == made
    users = tmp_path / "users"
    users.mkdir()
    (users / "a.md").write_text("mine")
    refused = r"--out .*users: holds files ragbench did not write \(a.md\)"
    with pytest.raises(ConfigError, match=refused):
        claim(users, "--out", "report")
    assert claim(users, "--out", "run", earlier=lambda folder: True) == users
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        claim(file, "--out", "report")


def test_remove_deletes_only_what_ragbench_made_and_left_as_it_wrote_it(tmp_path: Path) -> None:
    users = tmp_path / "labels-handwritten"
    users.mkdir()
    (users / "queries.jsonl").write_text("mine")
    assert remove(users) == "ragbench did not make it"
    assert (users / "queries.jsonl").read_text() == "mine"
    ours = claim(tmp_path / "labels-0123", "--out", "labeled set")
    assert remove(ours) == "ragbench keeps no record of the files it wrote there"  # not sealed
    (ours / "corpus").mkdir()
    (ours / "corpus" / "a.md").write_text(DOC)
    (ours / "queries.jsonl").write_text(json.dumps(GOOD_Q) + "\n")
    seal(ours, "labeled set")
    assert changed(ours) is None
    kept = {
        "edited": lambda folder: (folder / "queries.jsonl").write_text("{}\n"),
        "added": lambda folder: (folder / "notes.txt").write_text("my notes"),
        "deleted": lambda folder: (folder / "corpus" / "a.md").unlink(),
        "linked": lambda folder: (folder / "link").symlink_to(users),
    }
    why = {
        "edited": "queries.jsonl changed since ragbench wrote it",
        "added": "notes.txt was added since ragbench wrote it",
        "deleted": "corpus/a.md is missing since ragbench wrote it",
        "linked": "link was added since ragbench wrote it",
    }
    for name, change in kept.items():
        folder = Path(shutil.copytree(ours, tmp_path / f"labels-{name}"))
        change(folder)
        before = _snapshot(folder)
        assert remove(folder) == why[name]
        assert _snapshot(folder) == before and (folder / MARKER).is_file()
    assert remove(ours) is None
    assert not ours.exists()
    assert _snapshot(users) == {"queries.jsonl": hashlib.sha256(b"mine").hexdigest()}


def test_an_existing_file_is_replaced_only_when_it_is_the_commands_own_output(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text("mine")
    with pytest.raises(ConfigError, match=r"--out .*mine.jsonl: exists; give a new file name"):
        writable_file(mine, "--out")
    assert writable_file(tmp_path / "new.jsonl", "--out") == tmp_path / "new.jsonl"
    ours = claim(tmp_path / "run", "--out", "run directory")
    own = ours / "ragas" / "t.jsonl"
    own.parent.mkdir()
    own.write_text("written before")
    (ours / "manifest.json").write_text("{}")
    assert writable_file(own, "--out", own) == own
    # inside a folder ragbench made, another file is no output of this command
    for other in (ours / "manifest.json", ours / "ragas" / "u.jsonl"):
        other.write_text("kept")
        refused = rf"--out .*{other.name}: exists, and is not this command's own output"
        with pytest.raises(ConfigError, match=refused):
            writable_file(other, "--out", own)
        assert other.read_text() == "kept"
    # streams: a device, a pipe, this process's stdout
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for stream_path in (Path("/dev/null"), fifo, Path("/dev/stdout")):
        assert writable_file(stream_path, "--out", own) == stream_path
        assert stream(stream_path)
    assert not stream(own) and not stream(tmp_path / "new.jsonl")


def test_a_marker_is_ragbenchs_only_when_ragbench_wrote_it(tmp_path: Path) -> None:
    """A user's own ``.ragbench`` dotfile (or a JSON file of that name ragbench did not write)
    does not make the folder ragbench's: it is not taken, overwritten or skipped."""
    from ragbench.text.loaders import load

    contents = {
        "dotfile": "my dotfile\n",
        "other json": '{"made_by": "someone", "what": "report"}',
        "no what": '{"made_by": "ragbench"}',
        "not an object": '["made_by", "ragbench"]',
    }
    for name, text in contents.items():
        users = tmp_path / name.replace(" ", "-")
        users.mkdir()
        (users / MARKER).write_text(text)
        (users / "a.md").write_text(DOC)
        before = _snapshot(users)
        assert not owned(users) and marker(users) is None
        with pytest.raises(ConfigError, match=r"holds files ragbench did not write \(\.ragbench"):
            claim(users, "--out", "report")
        # a folder that looks like an older run's is marked now, but never over a user's file
        with pytest.raises(ConfigError, match="holds files ragbench did not write"):
            claim(users, "--out", "run directory", earlier=lambda folder: True)
        assert remove(users) == "ragbench did not make it"
        assert _snapshot(users) == before
        # its documents are read: the folder is no output of ragbench's
        assert [d.id for d in load(users)] == ["a.md"]


def test_a_folder_ragbench_made_for_one_use_is_refused_for_another(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collection is never taken as a run directory, report or optimize folder, nor a run
    directory as another run's report folder; a report may go into its own run directory,
    and a comparison by default beside the report in ``reports/<run-name>-2``."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(DOC)
    (docs / "b.md").write_text("Gamma rays and delta waves are logged by the observatory.")
    db = tmp_path / "db"
    bm25 = ["--config", '{"retriever": {"kind": "bm25"}}']
    assert main(["ingest", "--source", str(docs), "--db", str(db), "--collection", "c", *bm25]) == 0
    config = _yaml(tmp_path, "r", _config(name="r"))
    runs = [tmp_path / "runs" / name for name in ("a", "b")]
    for run_dir in runs:
        argv = ["run", config, "--out", str(run_dir), "--limit-queries", "3", "--no-report"]
        assert main(argv) == 0
    collection, other_run = db / "c", runs[1]
    before = {folder: _snapshot(folder) for folder in (collection, other_run)}
    refused = [
        (["run", config, "--out", str(collection)], collection, "collection", "run directory"),
        (["report", str(runs[0]), "--out", str(collection)], collection, "collection", "report"),
        (
            ["compare", str(runs[0]), "--out", str(collection)],
            collection,
            "collection",
            "comparison",
        ),
        (
            ["optimize", str(docs), "--out", str(collection), "--n", "4"],
            collection,
            "collection",
            "labels and run of optimize",
        ),
        (["report", str(runs[0]), "--out", str(other_run)], other_run, "run directory", "report"),
    ]
    for argv, folder, made_for, wanted in refused:
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"ragbench {argv[0]}") and _said(err) == (
            f"--out {folder}: a folder ragbench made for another use ({made_for}); give a new "
            f"or empty folder for the {wanted}"
        )
    assert {folder: _snapshot(folder) for folder in before} == before
    assert main(["search", "gamma", "--db", str(db), "--collection", "c"]) == 0
    assert "b.md" in capsys.readouterr().out
    # the run directory itself, named as --out, is where `run` writes its report anyway
    assert main(["report", str(runs[0]), "--out", str(runs[0]), "--format", "md"]) == 0
    assert (runs[0] / "report.md").is_file()
    assert main(["report", str(runs[0]), "--format", "md"]) == 0
    assert main(["compare", str(runs[0])]) == 0
    assert (tmp_path / "reports" / "a" / "report.md").is_file()
    assert (tmp_path / "reports" / "a-2" / "compare.md").is_file()


def test_export_replaces_no_file_but_its_own_output(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export ragas --out``: the labels of a set ragbench generated, the run's own manifest
    and a user's notes in a run folder stay byte-identical; the command's own default output
    is written again, and so is a stream (a pipe, ``/dev/null``, ``/dev/stdout``)."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    run_dir = Path(_finished_run(work))
    generated = work / "generated"
    if not generated.exists():
        assert main(["datasets", "generate", str(DEMO / "corpus"), "--out", str(generated)]) == 0
    notes = run_dir / "notes.txt"
    notes.write_text("my precious notes")
    export = ["export", "ragas", str(run_dir), "--trial", "best"]
    for target in (generated / "queries.jsonl", run_dir / "manifest.json", notes):
        before = target.read_bytes()
        capsys.readouterr()
        assert main([*export, "--out", str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert _said(err).startswith(f"--out {target}: exists, and is not this command's "), err
        assert len(err.splitlines()) == 1 and target.read_bytes() == before
    assert main(export) == 0
    own = Path(capsys.readouterr().out.split(":")[0])
    assert own.parent == run_dir / "ragas"
    assert main([*export, "--out", str(own)]) == 0
    rows = own.read_text().splitlines()
    assert len(rows) == 5 and all(json.loads(row)["user_input"] for row in rows)
    assert main([*export, "--out", "/dev/null"]) == 0
    fifo = work / "export-pipe"
    if not fifo.exists():
        os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    assert main([*export, "--out", str(fifo)]) == 0
    reader.join(timeout=60)
    assert read and read[0].decode().splitlines() == rows
    # piped: the samples are stdout, the summary goes to stderr
    piped = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", *export, "--out", "/dev/stdout"],
        env={**os.environ, "RAGBENCH_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.splitlines() == rows
    assert "/dev/stdout: 5 samples of trial" in piped.stderr


def test_a_folder_ragbench_wrote_is_no_document(tmp_path: Path) -> None:
    from ragbench.text.loaders import load

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(DOC)
    out = claim(docs / "out", "--out", "run directory")
    (out / "report.md").write_text("# a report ragbench wrote")
    loader = load(docs)
    assert [d.id for d in loader] == ["a.md"]
    assert [p.kind for p in loader.report.problems] == ["ragbench output"]


def test_a_collection_keeps_documents_of_another_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "db"
    for team, words in (("teamA", "apples and pears"), ("teamB", "bananas and kiwis")):
        (tmp_path / team).mkdir()
        (tmp_path / team / "README.md").write_text(f"The {team} readme is about {words}.")
        (tmp_path / team / f"{team}.txt").write_text(f"Only {team} has this file.")
    bm25 = ["--config", '{"retriever": {"kind": "bm25"}}']
    ingest = ["ingest", "--db", str(db), "--collection", "c"]
    assert main([*ingest, "--source", str(tmp_path / "teamA"), *bm25]) == 0
    before = _collection(db / "c")
    capsys.readouterr()
    assert main([*ingest, "--source", str(tmp_path / "teamB")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "README.md" in err and str((tmp_path / "teamA").resolve()) in err and "--replace" in err
    assert _collection(db / "c") == before  # nothing of teamB replaced teamA's README.md
    # the same folder again is an update, not a clash; --replace lets the other folder in
    assert main([*ingest, "--source", str(tmp_path / "teamA")]) == 0
    assert main([*ingest, "--source", str(tmp_path / "teamB"), "--replace"]) == 0
    capsys.readouterr()
    assert main(["search", "bananas", "--db", str(db), "--collection", "c"]) == 0
    assert "README.md" in capsys.readouterr().out


def _collection(folder: Path) -> list[tuple[str, ...]]:
    """What a collection holds: its documents (id, hash, origin) and chunks (id, text)."""
    pipeline = RAGPipeline.open(folder)
    chunks = pipeline.chunks
    return sorted(
        [(d, "document") for d in pipeline.document_ids] + [(c, chunks[c].text) for c in chunks]
    )


def test_concurrent_ingests_of_clashing_folders_lose_no_document(tmp_path: Path) -> None:
    """Four ingests of four folders with the same file names at once: one folder's documents
    are in the collection, the three others are refused (exit 2) and say why."""
    env = {"RAGBENCH_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    folders = []
    for n in range(4):
        folder = tmp_path / f"team{n}"
        folder.mkdir()
        (folder / "README.md").write_text(f"The readme of team {n}.")
        folders.append(folder)
    bm25 = '{"retriever": {"kind": "bm25"}}'
    ingest = ["ingest", "--db", str(tmp_path / "db"), "--collection", "c", "--config", bm25]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "ragbench.cli", *ingest, "--source", str(folder)],
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
            text=True,
        )
        for folder in folders
    ]
    results = [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]
    assert sorted(code for code, _ in results) == [0, 2, 2, 2], results
    for code, err in results:
        if code == 2:
            assert re.search(r"document id 'README.md' is in the collection already", err), err
    assert RAGPipeline.open(tmp_path / "db" / "c").document_ids == ["README.md"]


@pytest.mark.slow
def test_optimize_uses_the_folders_labels_and_never_reads_its_own_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Labels written by hand are used; an output folder inside the documents is skipped on
    the next call; a labels folder of the user's beside optimize's generated ones stays."""
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    topics = ("storage", "network", "security", "upgrades")
    for topic in topics:
        (docs / f"{topic}.md").write_text(
            f"# The {topic} guide\n\nThe {topic} guide explains {topic} settings. Operators "
            f"read the {topic} notes before a change. Every {topic} option has a cost.\n"
        )
    lines = [{"query": f"{t} settings and their cost", "relevant": [f"{t}.md"]} for t in topics]
    (docs / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in lines))
    out = docs / "out"
    assert main(["optimize", str(docs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"labels:        {docs} (yours: 4 queries" in printed
    manifest = json.loads((out / "run" / "manifest.json").read_text())
    assert manifest["dataset"]["documents"] == 4
    # generated labels into the same folder: its run and report are no documents
    generate = ["optimize", str(docs), "--out", str(out), "--generate"]
    assert main([*generate, "--n", "8"]) == 0
    assert "generated from 4 documents" in capsys.readouterr().out
    handwritten = out / "labels-handwritten"
    handwritten.mkdir()
    (handwritten / "queries.jsonl").write_text('{"query": "mine", "relevant": ["a.md"]}\n')
    before = _snapshot(handwritten)
    assert main([*generate, "--n", "6"]) == 0  # other labels: the older generated set goes
    assert "generated from 4 documents" in capsys.readouterr().out
    assert sorted(p.name for p in out.glob("labels-*"))[-1] == "labels-handwritten"
    assert len(list(out.glob("labels-*"))) == 2
    assert _snapshot(handwritten) == before


def test_cache_clear_deletes_cache_entries_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RAGBENCH_CACHE`` pointed at a folder of the user's: a sweep's artifacts are cleared,
    the user's folders three levels deep (where artifacts live) stay byte-identical."""
    users = _users(tmp_path, "users")
    (users / "photos" / "2026" / "june").mkdir(parents=True)
    (users / "photos" / "2026" / "june" / "a.jpg").write_bytes(b"\xff\xd8 a photo")
    before = _snapshot(users)
    monkeypatch.setenv("RAGBENCH_CACHE", str(users))
    config = _yaml(tmp_path, "c", _config(name="c"))
    assert main(["run", config, "--out", str(tmp_path / "run"), "--limit-queries", "3"]) == 0
    assert _snapshot(users) != before  # the sweep's artifacts are there
    capsys.readouterr()
    assert main(["cache", "clear"]) == 0
    assert re.search(r"removed [1-9]\d* entries", capsys.readouterr().out)
    left = {k: v for k, v in _snapshot(users).items() if k in before}
    assert left == before


def test_a_generated_set_judged_by_hand_is_never_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Optimize removes its older generated sets (``remove``), sealed when written: one that
    ``datasets judge`` wrote grades into is no longer as ragbench wrote it, and stays."""
    from ragbench.data.generate import IctMethod, generate

    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    labels = tmp_path / "out" / "labels-0123"
    generate(DEMO / "corpus" / "concepts", labels, IctMethod(), n=8)
    seal(labels, "labeled set")  # as optimize seals each set it generates
    unchanged = Path(shutil.copytree(labels, tmp_path / "out" / "labels-4567"))
    config = _yaml(tmp_path, "judged", _config(name="judged", dataset={"path": str(labels)}))
    run_dir = tmp_path / "run"
    assert main(["run", config, "--out", str(run_dir), "--no-report"]) == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("2\n" * 10))
    judge = ["datasets", "judge", str(labels), "--run", str(run_dir), "--queries", "1"]
    assert main([*judge, "--depth", "2"]) == 0
    assert "~judged" in (labels / "queries.jsonl").read_text()
    before = _snapshot(labels)
    assert remove(labels) == "queries.jsonl changed since ragbench wrote it"
    assert _snapshot(labels) == before
    assert remove(unchanged) is None and not unchanged.exists()


@pytest.mark.slow
def test_optimize_keeps_an_older_set_judged_by_hand_and_says_so(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``optimize``, ``datasets judge`` on its labels, a document edited, ``optimize`` again:
    the judged set stays byte-identical beside the new one, and one line says why."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    docs = Path(shutil.copytree(DEMO / "corpus" / "concepts", tmp_path / "docs"))
    out = tmp_path / "opt"
    assert main(["optimize", str(docs), "--out", str(out), "--n", "12"]) == 0
    (labels,) = out.glob("labels-*")
    monkeypatch.setattr(sys, "stdin", io.StringIO("2\n" * 20))
    judge = ["datasets", "judge", str(labels), "--run", str(out / "run"), "--queries", "2"]
    assert main([*judge, "--depth", "2"]) == 0
    before = _snapshot(labels)
    with (docs / "compaction.md").open("a") as edited:
        edited.write("\nAnother line about compaction.\n")
    capsys.readouterr()
    assert main(["optimize", str(docs), "--out", str(out), "--n", "12"]) == 0
    assert _snapshot(labels) == before
    assert len(list(out.glob("labels-*"))) == 2
    kept = [r.getMessage() for r in caplog.records if "kept" in r.getMessage()]
    assert kept == [
        f"{labels}: an older generated set, kept: queries.jsonl changed since ragbench wrote it; "
        "delete it yourself when you no longer need it"
    ]


def _beir_zip(folder: Path, name: str) -> str:
    """``folder/name.zip``, a tiny BEIR set under ``name/``; returns its sha256."""
    files = {
        "corpus.jsonl": '{"_id": "d1", "title": "", "text": "alpha beta"}\n',
        "queries.jsonl": '{"_id": "q1", "text": "alpha"}\n',
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
    }
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}.zip", "w") as zipped:
        for member, text in files.items():
            zipped.writestr(f"{name}/{member}", text)
    return hashlib.sha256((folder / f"{name}.zip").read_bytes()).hexdigest()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(base URL, sha256 of its scifact.zip) of a real HTTP server on 127.0.0.1."""
    folder = tmp_path / "www"
    digest = _beir_zip(folder, "scifact")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args, directory=str(folder))

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", digest
    server.shutdown()
    server.server_close()
    thread.join()


def test_download_replaces_only_a_download_and_keeps_what_was_added(
    tmp_path: Path, served: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder of the user's where the set would go is neither "already in" nor replaced by
    ``--force``; a download is marked, and ``--force`` keeps one a file was added to."""
    url, digest = served
    download = ["datasets", "download", "scifact", "--url", url, "--sha256", digest]
    dl = tmp_path / "dl"
    (dl / "scifact").mkdir(parents=True)
    (dl / "scifact" / "notes.txt").write_text("mine")
    for force in ([], ["--force"]):
        capsys.readouterr()
        assert main([*download, "--dir", str(dl), *force]) == 2
        printed = capsys.readouterr()
        assert "already in" not in printed.out
        assert _said(printed.err.strip()) == (
            f"{dl / 'scifact'}: holds files that are not a download of scifact; they stay "
            "(give another --dir, or move them)"
        )
        assert _snapshot(dl) == {"scifact/notes.txt": hashlib.sha256(b"mine").hexdigest()}
    fresh = tmp_path / "fresh"
    assert main([*download, "--dir", str(fresh)]) == 0
    assert owned(fresh / "scifact", "downloaded dataset")
    capsys.readouterr()
    assert main([*download, "--dir", str(fresh)]) == 0
    assert f"scifact: already in {fresh / 'scifact'}" in capsys.readouterr().out
    (fresh / "scifact" / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n")
    before = _snapshot(fresh)
    assert main([*download, "--dir", str(fresh), "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert _said(err).startswith(f"--force: {fresh / 'scifact'} holds files the download ")
    assert "(qrels/dev.tsv)" in err and _snapshot(fresh) == before
    (fresh / "scifact" / "qrels" / "dev.tsv").unlink()
    (fresh / "scifact" / "queries.jsonl").write_text("damaged")  # the download's own file
    assert main([*download, "--dir", str(fresh), "--force"]) == 0
    assert (fresh / "scifact" / "queries.jsonl").read_text() == '{"_id": "q1", "text": "alpha"}\n'


def test_a_report_folder_keeps_the_report_of_its_own_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report of a run whose folder has another run's name goes to ``reports/<name>-2``
    (said), not over the other's; ``--out`` naming another run's report folder is refused,
    and report and comparison folders are not taken for each other."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    config = _yaml(tmp_path, "r", _config(name="r"))
    runs = [tmp_path / "runs" / "a", tmp_path / "other" / "a"]
    for run_dir in runs:
        argv = ["run", config, "--out", str(run_dir), "--limit-queries", "3", "--no-report"]
        assert main(argv) == 0
    first, second = Path("reports/a"), Path("reports/a-2")
    assert main(["report", str(runs[0]), "--format", "md"]) == 0
    before = _snapshot(first)
    capsys.readouterr()
    assert main(["report", str(runs[1]), "--format", "md"]) == 0
    out, err = capsys.readouterr()
    assert f"note: {first} holds another run's output; this report goes to {second}" in err
    assert _snapshot(first) == before and f"md     {second / 'report.md'}" in out
    assert main(["report", str(runs[0]), "--format", "md"]) == 0  # its own folder again
    assert capsys.readouterr().out.strip().endswith(str(first / "report.md"))
    refused = [
        (
            ["report", str(runs[0]), "--out", str(second)],
            f"--out {second}: holds the report of {os.path.realpath(runs[1])}; give --out a "
            f"new or empty folder for the report of {os.path.realpath(runs[0])}",
        ),
        (
            ["compare", str(runs[0]), "--out", str(first)],
            f"--out {first}: a folder ragbench made for another use (report); give a new or "
            "empty folder for the comparison",
        ),
    ]
    assert main(["compare", str(runs[0]), "--out", "cmp"]) == 0
    refused.append(
        (
            ["report", str(runs[0]), "--out", "cmp"],
            "--out cmp: a folder ragbench made for another use (comparison); give a new or "
            "empty folder for the report",
        )
    )
    kept = {folder: _snapshot(Path(folder)) for folder in (first, second, "cmp")}
    for argv, message in refused:
        capsys.readouterr()
        assert main(argv) == 2, argv
        assert _said(capsys.readouterr().err.strip()) == message
    assert {folder: _snapshot(Path(folder)) for folder in kept} == kept
