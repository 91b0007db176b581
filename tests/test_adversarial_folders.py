"""Folders are the user's: a command writes only into a folder it made (or a new or empty one),
never deletes what it did not write, never reads its own outputs as documents, and uses the
labels a folder already holds.

Every command that writes a folder or file is pointed at a folder of the user's; it refuses in
one line naming its flag, and every file there stays byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.owned import MARKER, claim, owned, remove, writable_file
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


def test_remove_deletes_only_what_ragbench_made(tmp_path: Path) -> None:
    users = tmp_path / "labels-handwritten"
    users.mkdir()
    (users / "queries.jsonl").write_text("mine")
    assert not remove(users)
    assert (users / "queries.jsonl").read_text() == "mine"
    ours = claim(tmp_path / "labels-0123", "--out", "labeled set")
    assert remove(ours)
    assert not ours.exists()


def test_an_existing_file_of_the_users_is_never_overwritten(tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text("mine")
    with pytest.raises(ConfigError, match="exists, and ragbench did not write it"):
        writable_file(mine, "--out")
    assert writable_file(tmp_path / "new.jsonl", "--out") == tmp_path / "new.jsonl"
    ours = claim(tmp_path / "run", "--out", "run directory")
    (ours / "ragas").mkdir()
    (ours / "ragas" / "t.jsonl").write_text("written before")
    assert writable_file(ours / "ragas" / "t.jsonl", "--out") == ours / "ragas" / "t.jsonl"


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
    before = _snapshot(db / "c")
    capsys.readouterr()
    assert main([*ingest, "--source", str(tmp_path / "teamB")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "README.md" in err and str((tmp_path / "teamA").resolve()) in err and "--replace" in err
    assert _snapshot(db / "c") == before  # nothing of teamB replaced teamA's README.md
    # the same folder again is an update, not a clash; --replace lets the other folder in
    assert main([*ingest, "--source", str(tmp_path / "teamA")]) == 0
    assert main([*ingest, "--source", str(tmp_path / "teamB"), "--replace"]) == 0
    capsys.readouterr()
    assert main(["search", "bananas", "--db", str(db), "--collection", "c"]) == 0
    assert "README.md" in capsys.readouterr().out


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
    documents = json.loads((tmp_path / "db" / "c" / "documents.json").read_text())
    assert list(documents) == ["README.md"]


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
