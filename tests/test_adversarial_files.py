"""Every file ragbench reads is validated where it is read.

A run folder's files (manifest, trials, per-query values, curves, queries, top chunks, answers,
selection), a collection's files and label files that are damaged, truncated or written by
another tool — or that disagree with each other: values missing for a trial, a row twice — are
one line naming the file and what was expected, exit 2, never a traceback
(``tests.adversarial.check``); a reader of a run folder being written never sees half a file.
A set without the split ``run`` evaluates is said to be by ``datasets validate``, and described
by ``datasets info``; a cache root that does not exist is said not to. Caches are only caches:
the LLM calls, the stage cache's entries, locks and areas, the embedding cache and training
checkpoints detect damage, log it and are rebuilt, and a run never fails because of them. Label
text UTF-8 cannot encode (a lone surrogate, which a JSON escape can spell) is refused the same
way by ``datasets validate`` and ``run``, and the refused run leaves no run folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ragbench.cli import main
from ragbench.errors import DataError
from ragbench.experiment.store import RunStore, TrialResult
from ragbench.llm.cache import LLMCache
from ragbench.testing import scripted_llm_server
from tests.adversarial import (
    DOC,
    GOOD_Q,
    HASHING,
    Case,
    _config,
    _dataset,
    _validate_and_run,
    _yaml,
    check,
    cli,
)
from tests.paths import DEMO, require

_NOISE = bytes(range(256)) * 8  # no parser reads this as its format
_SURROGATE = "lone surrogate \\udc80"
_QUERIES = "queries.jsonl:1: "
_COLLECTION = {
    "retriever": {"kind": "hybrid"},
    "embedder": HASHING,
    "postprocess": {"kind": "window"},  # a collection then keeps its documents' texts
}


# ---------------------------------------------------------------- damage


def _noise(path: Path) -> None:
    path.write_bytes(_NOISE)


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_columns(path: Path) -> None:
    """A table another tool wrote under the same name."""
    pd.DataFrame({"id": ["a", "b"], "score": [1.0, 2.0]}).to_parquet(path)


def _text(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text, "utf-8")

    return write


def _edited(change: Callable[[dict], object]) -> Callable[[Path], None]:
    """The JSON file with ``change`` applied to its object."""

    def edit(path: Path) -> None:
        value = json.loads(path.read_text("utf-8"))
        change(value)
        path.write_text(json.dumps(value), "utf-8")

    return edit


def _column(name: str, value: str) -> Callable[[Path], None]:
    """The table with every value of column ``name`` set to ``value``."""

    def set_column(path: Path) -> None:
        frame = pd.read_parquet(path)
        frame[name] = value
        frame.to_parquet(path)

    return set_column


def _a_folder(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()


def _dropped(name: str) -> Callable[[Path], None]:
    return lambda path: pd.read_parquet(path).drop(columns=[name]).to_parquet(path)


def _one_trial_short(path: Path) -> None:
    """Every other per-query value of the last trial gone."""
    frame = pd.read_parquet(path)
    rows = frame.index[frame["trial_id"] == sorted(set(frame["trial_id"]))[-1]]
    frame.drop(rows[::2]).to_parquet(path)


def _a_row_twice(path: Path) -> None:
    frame = pd.read_parquet(path)
    pd.concat([frame, frame.iloc[[0]]]).to_parquet(path)


def _last_rows_gone(path: Path) -> None:
    pd.read_parquet(path).iloc[:-2].to_parquet(path)


def _an_unknown_query(path: Path) -> None:
    frame = pd.read_parquet(path)
    frame.loc[frame.index[0], "query_id"] = "q-nowhere"
    frame.to_parquet(path)


# ---------------------------------------------------------------- run folders


def _two_trials(work: Path) -> Path:
    """A finished run of two BM25 trials on five queries (so a report drills down)."""
    out = work / "two"
    if not (out / "trials.parquet").exists():
        sweep = [{"kind": "recursive", "size": [200, 400]}]
        config = _yaml(work, "two", _config(name="two", sweep__chunker=sweep))
        assert main(["run", config, "--out", str(out), "--limit-queries", "5", "--no-report"]) == 0
    return out


def _damaged(work: Path, name: str, file: str, damage: Callable[[Path], None]) -> str:
    """A copy of the two-trial run with ``file`` damaged (``{trial}``: each trial's)."""
    source = _two_trials(work)
    run = work / "damaged" / name
    if not run.exists():
        shutil.copytree(source, run)
        for trial in pd.read_parquet(source / "trials.parquet")["trial_id"]:
            damage(run / file.format(trial=trial))
            if "{trial}" not in file:
                break
    return str(run)


def _reading(
    command: str, file: str, damage: Callable[[Path], None], names: str, tag: str = ""
) -> Case:
    """``command`` (report, export, compare, ingest or resume) on a run whose ``file`` is
    damaged."""
    name = f"{command} {file} {tag or damage.__name__.strip('_')}".replace("/", " ")
    key = name.replace(" ", "-")

    def argv(work: Path) -> list[str]:
        run = _damaged(work, key, file, damage)
        return {
            "report": ["report", run, "--out", str(work / "reports" / key)],
            "export": ["export", "ragas", run, "--out", str(work / "exports" / f"{key}.jsonl")],
            "compare": ["compare", run, "--out", str(work / "compared" / key)],
            "ingest": ["ingest", "--from-run", run, "--trial", "best", "--db", str(work / "db")],
            "resume": ["run", str(work / "two.yaml"), "--out", run, "--resume", "--no-report"],
        }[command]

    return cli(name, argv, file.rsplit("/", 1)[-1].replace("{trial}", "") + names)


_UNREADABLE = ": not a readable parquet table"
_NO_TRIAL_ID = ": no column 'trial_id' (a ragbench trials table holds trial_id, label, status"
RUN_FOLDERS = [
    _reading("report", "queries.parquet", _noise, _UNREADABLE),
    _reading("report", "queries.parquet", _truncated, _UNREADABLE),
    _reading("export", "queries.parquet", _noise, _UNREADABLE),
    _reading("export", "queries.parquet", _other_columns, ": no column 'query_id'"),
    _reading(
        "export",
        "queries.parquet",
        _column("qrels", "{not json"),
        ": column 'qrels' row 1 holds '{not json', expected text holding a JSON object",
        "qrels",
    ),
    _reading("report", "trials.parquet", _other_columns, _NO_TRIAL_ID),
    _reading("export", "trials.parquet", _other_columns, _NO_TRIAL_ID),
    _reading("compare", "trials.parquet", _other_columns, _NO_TRIAL_ID),
    _reading("ingest", "trials.parquet", _other_columns, _NO_TRIAL_ID),
    _reading("report", "trials.parquet", _noise, _UNREADABLE),
    _reading(
        "ingest",
        "trials.parquet",
        _dropped("ndcg@10"),
        ": column 'ndcg@10' (an evaluated metric) is missing",
        "no metric",
    ),
    _reading(
        "export",
        "trials.parquet",
        _column("config", "[1, 2]"),
        ": column 'config' row 1 holds '[1, 2]', expected text holding a JSON object",
        "config",
    ),
    _reading(
        "report",
        "manifest.json",
        _edited(lambda m: m.pop("config")),
        ": no 'config' (expected a JSON object)",
        "no config",
    ),
    _reading(
        "export",
        "manifest.json",
        _edited(lambda m: m.pop("dataset")),
        ": no 'dataset' (expected a JSON object)",
        "no dataset",
    ),
    _reading("export", "manifest.json", _text("{not json"), ": not a readable manifest", "text"),
    _reading("compare", "manifest.json", _text("[1, 2]"), ": the file is a list, expected", "list"),
    _reading(
        "ingest",
        "manifest.json",
        _edited(lambda m: m.update(config=[])),
        ": 'config' is a list, expected a JSON object",
        "config list",
    ),
    _reading(
        "report",
        "manifest.json",
        _edited(lambda m: m["queries"].update(count="5")),
        ": 'queries.count' is a string, expected an integer",
        "count",
    ),
    _reading("report", "per_query.parquet", _noise, _UNREADABLE),
    _reading(
        "report",
        "per_query.parquet",
        _column("value", "high"),
        ": column 'value' holds str values, expected numbers",
        "value",
    ),
    _reading("report", "curves.parquet", _other_columns, ": no column 'trial_id'"),
    _reading("report", "runs/{trial}.top.parquet", _noise, _UNREADABLE),
    _reading("export", "runs/{trial}.top.parquet", _other_columns, ": no column 'query_id'"),
    _reading("report", "selection.json", _text("{"), ": not a readable selection", "text"),
    _reading("report", "selection.json", _text('{"mode": "best"}'), ": 'mode' is 'best'", "mode"),
    _reading("export", "answers.parquet", _noise, _UNREADABLE),
    _reading("resume", ".lock", _a_folder, ": cannot lock the run directory with it"),
    _reading("resume", "manifest.json", _edited(lambda m: m.pop("queries")), ": no 'queries'", "q"),
]
# files of a run that disagree with each other: values missing for a trial, a row twice
_SHORT = ": 3 of the 5 per-query values of trial"
_QUERIES_GONE = ": 3 queries, and the run evaluated 5 (its manifest.json): 2 missing"
RUN_FOLDERS += [
    *(_reading(c, "per_query.parquet", _one_trial_short, _SHORT) for c in ("report", "export")),
    _reading("ingest", "per_query.parquet", _one_trial_short, _SHORT),
    _reading("report", "per_query.parquet", _a_row_twice, ": a value listed twice (ndcg@10 of"),
    _reading(
        "report",
        "per_query.parquet",
        _an_unknown_query,
        ": a value of a query the run did not evaluate ('q-nowhere', which queries.parquet",
    ),
    *(
        _reading(c, "trials.parquet", _a_row_twice, ": a trial listed 2 times (")
        for c in ("report", "compare", "export", "ingest")
    ),
    *(_reading(c, "queries.parquet", _last_rows_gone, _QUERIES_GONE) for c in ("report", "export")),
    _reading("report", "queries.parquet", _a_row_twice, ": a query listed twice ("),
]


# ---------------------------------------------------------------- collections


def _collection(work: Path) -> Path:
    """A saved collection holding every kind of file (config, documents, corpus, indexes)."""
    db = work / "collections"
    if not (db / "c" / "pipeline.json").exists():
        argv = ["ingest", "--source", str(DEMO / "corpus" / "concepts"), "--db", str(db)]
        assert main([*argv, "--collection", "c", "--config", json.dumps(_COLLECTION)]) == 0
    return db / "c"


def _damaged_collection(work: Path, name: str, file: str, damage: Callable[[Path], None]) -> Path:
    """A copy of the collection (in its own ``--db``) with ``file`` damaged."""
    db = work / "damaged-db" / name.replace(" ", "-")
    if not db.exists():
        shutil.copytree(_collection(work), db / "c")
        damage(db / "c" / file)
    return db


def _searching(file: str, damage: Callable[[Path], None], names: str) -> Case:
    """``search`` of a collection whose ``file`` is damaged."""
    name = f"search {file} {damage.__name__.strip('_')}"

    def argv(work: Path) -> list[str]:
        db = _damaged_collection(work, name, file, damage)
        return ["search", "segments", "--db", str(db), "--collection", "c"]

    return cli(name.replace("/", " "), argv, names)


def _rows(sql: str, name: str) -> Callable[[Path], None]:
    """The store with ``sql`` run on it (an edit by hand, or another tool's)."""

    def edit(path: Path) -> None:
        with sqlite3.connect(path) as db:
            db.execute(sql)

    edit.__name__ = name
    return edit


def _named(name: str, damage: Callable[[Path], None]) -> Callable[[Path], None]:
    damage.__name__ = name
    return damage


def _removed(path: Path) -> None:
    shutil.rmtree(path)


def _dim_32(config: dict) -> None:
    config["trial"]["embedder"]["dim"] = 32


_POINTER_99 = "UPDATE meta SET value = '99' WHERE key = 'snapshot'"
_INDEX = "snapshots/0/dense_index/index/index.bin"
COLLECTIONS = [
    _searching("pipeline.json", _noise, "c/pipeline.json: not a readable"),
    _searching(
        "pipeline.json",
        _edited(lambda c: c.update(score_threshold="high")),
        "c/pipeline.json: 'score_threshold' is a string, expected a number or null",
    ),
    _searching("store.sqlite", _noise, "c/store.sqlite: not a readable collection store"),
    _searching("store.sqlite", _truncated, "c/store.sqlite: not a readable collection store"),
    _searching(_INDEX, _noise, "dense_index/index/index.bin: "),
    _searching("snapshots/0/bm25_index/meta.json", _truncated, "bm25_index/meta.json: "),
    _searching(
        "store.sqlite",
        _rows("UPDATE chunks SET metadata = 'not json'", "chunk metadata"),
        "c/store.sqlite: the metadata of",
    ),
    _searching(
        "store.sqlite",
        _rows("UPDATE documents SET metadata = '[1]'", "document metadata"),
        "c/store.sqlite: the metadata of",
    ),
]
# parts of a collection gone or out of step with each other: never searched as an empty one
_REBUILDS = "; ingesting its source again rebuilds them from store.sqlite"
_NOT_SAVED = ": missing: the collection's store says its indexes were saved there" + _REBUILDS
COLLECTIONS += [
    _searching("snapshots", _removed, "c/snapshots/0" + _NOT_SAVED),
    _searching(
        "snapshots/0/dense_index",
        _removed,
        "c/snapshots/0/dense_index: missing: the collection's index 'dense_index' was saved",
    ),
    _searching("store.sqlite", _rows(_POINTER_99, "pointer"), "c/snapshots/99" + _NOT_SAVED),
    _searching(
        "store.sqlite",
        _rows("DROP TABLE chunks", "no chunks table"),
        "c/store.sqlite: no table chunks (the collection's store was emptied or damaged); "
        "ingest its source into a new collection",
    ),
    _searching(
        "store.sqlite", _named("emptied", _text("")), "c/store.sqlite: no table documents, "
    ),
    _searching(
        "store.sqlite",
        _rows("DELETE FROM chunks WHERE rowid % 2 = 0", "rows deleted"),
        "chunks, and the collection's index 'dense_index' holds ",
    ),
    _searching(
        "pipeline.json",
        _named("dim", _edited(_dim_32)),
        "c/pipeline.json: the configuration no longer matches the collection's indexes (they "
        "were built with hybrid | recursive(size=800, overlap=100) | hashing(dim=64)",
    ),
]


# ---------------------------------------------------------------- label files

LABELS = [
    *_validate_and_run(
        "surrogate text",
        [{**GOOD_Q, "text": "how are \udc80 deleted"}],
        f"{_QUERIES}'text' holds a {_SURROGATE}",
    ),
    *_validate_and_run(
        "surrogate id", [{**GOOD_Q, "id": "q\udc80"}], f"{_QUERIES}'id' holds a {_SURROGATE}"
    ),
    *_validate_and_run(
        "surrogate evidence",
        [{**GOOD_Q, "evidence": [{"doc_id": "a.md", "text": "Retention \udc80"}]}],
        f"{_QUERIES}'evidence[0].text' holds a {_SURROGATE}",
    ),
    *_validate_and_run(
        "surrogate answer",
        [{**GOOD_Q, "answer": "closed \udfff segments"}],
        f"{_QUERIES}'answer' holds a lone surrogate \\udfff",
    ),
    *_validate_and_run(
        "surrogate metadata key",
        [{**GOOD_Q, "metadata": {"source\ud800": "x"}}],
        f"{_QUERIES}a key of 'metadata' holds a lone surrogate \\ud800",
    ),
    *_validate_and_run(
        "surrogate relevant",
        [{"query": "segments", "relevant": ["a.md\udc80"]}],
        f"{_QUERIES}'relevant[0]' holds a {_SURROGATE}",
    ),
]


def _surrogate_document(work: Path) -> str:
    """A set whose corpus holds a JSON Lines file with a document spelling a lone surrogate."""
    docs = {"a.md": DOC, "more.jsonl": '{"id": "b", "text": "Segments \\udc80 roll."}\n'}
    return _dataset(work, "surrogate-doc", [GOOD_Q], docs)


def _surrogate_beir(work: Path, file: str) -> str:
    """A BEIR set whose ``file`` (corpus or queries) spells a lone surrogate on line 2."""
    root = work / f"surrogate-beir-{file}"
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = [{"_id": "d1", "title": "", "text": DOC}, {"_id": "d2", "text": "Logs \udc80."}]
    queries = [{"_id": "q1", "text": "segments"}, {"_id": "q2", "text": "logs \udc80"}]
    for name, records in (("corpus", corpus), ("queries", queries)):
        kept = records if name == file else records[:1]  # json.dumps writes the escape
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept), "utf-8")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", "utf-8")
    return str(root)


def _run_on(work: Path, name: str, dataset: str, dry: bool = True) -> list[str]:
    config = _yaml(work, name, _config(name=name, dataset={"path": dataset}))
    return ["run", config, "--dry-run"] if dry else ["run", config, "--out", str(work / name)]


_IN_DOCUMENT = "more.jsonl:1: document 'b': 'text' holds a lone surrogate \\udc80"
LABELS += [
    cli(
        "validate: surrogate document",
        lambda w: ["datasets", "validate", _surrogate_document(w)],
        _IN_DOCUMENT,
        1,
    ),
    cli(
        "run: surrogate document", lambda w: _run_on(w, "sd", _surrogate_document(w)), _IN_DOCUMENT
    ),
    cli(
        "validate: surrogate BEIR corpus",
        lambda w: ["datasets", "validate", _surrogate_beir(w, "corpus")],
        f"corpus.jsonl:2: 'text' holds a {_SURROGATE}",
        1,
    ),
    cli(
        "run: surrogate BEIR corpus",
        lambda w: _run_on(w, "sbc", _surrogate_beir(w, "corpus")),
        f"corpus.jsonl:2: 'text' holds a {_SURROGATE}",
    ),
    cli(
        "validate: surrogate BEIR queries",
        lambda w: ["datasets", "validate", _surrogate_beir(w, "queries")],
        f"queries.jsonl:2: 'text' holds a {_SURROGATE}",
        1,
    ),
    cli(
        "run: surrogate BEIR queries",
        lambda w: _run_on(w, "sbq", _surrogate_beir(w, "queries")),
        f"queries.jsonl:2: 'text' holds a {_SURROGATE}",
    ),
    cli(
        "run --out: a refused set leaves no run folder",
        lambda w: _run_on(
            w,
            "refused",
            _dataset(w, "refused-set", [{**GOOD_Q, "text": "x \udc80"}], {"a.md": DOC}),
            dry=False,
        ),
        _SURROGATE,
        absent="refused",
    ),
]

CASES = [*RUN_FOLDERS, *COLLECTIONS, *LABELS]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every case writes into."""
    require(DEMO)
    return tmp_path_factory.mktemp("files")


def test_the_cases_are_distinct() -> None:
    assert len({case.name for case in CASES}) == len(CASES) >= 50


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_damaged_file_is_one_line_naming_it(
    case: Case, work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    check(case, work, capsys, monkeypatch)


# ---------------------------------------------------------------- the cache root


@pytest.mark.parametrize(
    ("argv", "under", "flag"),
    [
        (["cache", "info"], "", "RAGBENCH_CACHE"),
        (["cache", "clear"], "", "RAGBENCH_CACHE"),
        (["cache", "--root", "{file}", "info"], "", "--root"),
        (["run", "{config}", "--dry-run"], "/sub", "RAGBENCH_CACHE"),
        (["run", "{config}", "--out", "{out}"], "", "RAGBENCH_CACHE"),
    ],
)
def test_a_cache_root_that_is_a_file_is_one_line_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    under: str,
    flag: str,
) -> None:
    file = tmp_path / "cache-file"
    file.write_text("not a folder", "utf-8")
    monkeypatch.setenv("RAGBENCH_CACHE", f"{file}{under}")
    config, out = _yaml(tmp_path, "c", _config()), tmp_path / "out"
    given = [a.format(file=file, config=config, out=out) for a in argv]
    assert main(given) == 2
    what = f"{file} is a file" if under else "is a file"
    assert capsys.readouterr().err.splitlines() == [
        f"ragbench {' '.join(a for a in argv if a in ('cache', 'info', 'clear', 'run'))}: "
        f"{flag} {file}{under}: {what}, not a folder"
    ]
    assert not out.exists()


# ---------------------------------------------------------------- caches are only caches


def _sweep(
    work: Path, name: str, changes: dict[str, Any] | None = None, process: bool = False
) -> pd.DataFrame:
    """The trials of a five-query sweep of the base config with ``changes`` (exit 0), by
    label; run by ``main``, or with ``process`` in a process of its own (as a user runs it: no
    connection of this one open)."""
    config = _yaml(work, name, _config(name=name, **(changes or {})))
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    argv = ["run", config, "--out", str(out), "--limit-queries", "5", "--no-report"]
    if process:
        done = subprocess.run(
            [sys.executable, "-m", "ragbench.cli", *argv], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        print(done.stderr, file=sys.stderr)
    else:
        assert main(argv) == 0
    trials = pd.read_parquet(out / "trials.parquet")
    return trials.set_index("label")[["ndcg@10", "llm_requests"]].sort_index()


def _calls(cache: Path) -> Path:
    return cache / "llm" / "calls.sqlite"


def test_a_sweep_that_calls_no_model_never_opens_the_llm_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(DEMO)
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    _calls(tmp_path / "cache").parent.mkdir(parents=True)
    _noise(_calls(tmp_path / "cache"))
    _sweep(tmp_path, "bm25")
    assert _calls(tmp_path / "cache").read_bytes() == _NOISE  # untouched, and no failure


def _stages_gone(cache: Path) -> None:
    """Every stage artifact removed, the LLM calls kept: a sweep computes its stages again."""
    for area in cache.iterdir():
        if area.name != "llm":
            shutil.rmtree(area)


def test_a_damaged_llm_cache_is_replaced_and_cache_clear_clears_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require(DEMO)
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with scripted_llm_server() as server:
        rewrite = {"kind": "rewrite", "base_url": server.url, "model": "scripted"}

        def sweep() -> pd.DataFrame:
            return _sweep(tmp_path, "llm", {"sweep__query": [rewrite]}, process=True)

        first = sweep()
        made = server.total
        assert made == first["llm_requests"].sum() > 0
        _noise(_calls(cache))
        _stages_gone(cache)
        capsys.readouterr()
        assert sweep().equals(first)  # asked again, the same
        assert f"LLM cache {_calls(cache)} is damaged" in capsys.readouterr().err
        assert server.total == 2 * made
        _stages_gone(cache)
        assert sweep().equals(first.assign(llm_requests=0))
        assert server.total == 2 * made  # the new file answers
        assert main(["cache", "info"]) == 0
        (llm,) = [line for line in capsys.readouterr().out.splitlines() if line.split()[0] == "llm"]
        assert llm.split()[1] == str(made)
        assert main(["cache", "clear"]) == 0
        assert not _calls(cache).exists()
        assert sweep().equals(first)
        assert server.total == 3 * made


def _calls_past_the_header(path: Path) -> None:
    """Every page after SQLite's first (the header and the schema: it opens) is noise."""
    data = path.read_bytes()
    path.write_bytes(data[:4096] + (_NOISE * len(data))[: len(data) - 4096])


@pytest.mark.parametrize("damage", [_calls_past_the_header, _truncated, _noise])
def test_a_damaged_llm_cache_is_found_when_opened_or_queried_and_started_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Callable[[Path], None]
) -> None:
    path = _calls(tmp_path)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:  # a cache as an older version wrote it: no write times
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, reply TEXT)")
        rows = [(f"k{n}", json.dumps({"text": "x" * 400})) for n in range(300)]
        db.executemany("INSERT INTO calls VALUES (?, ?)", rows)
    db.close()
    damage(path)
    cache = LLMCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="ragbench.llm.cache"):
        assert [cache.get(f"k{n}") for n in (5, 150, 299)] == [None] * 3
    assert f"LLM cache {path} is damaged" in caplog.text
    cache.put("k5", {"text": "again"})
    assert cache.get("k5") == {"text": "again"} and len(cache) == 1


def test_an_older_llm_cache_is_read_and_clear_older_than_keeps_what_it_cannot_date(
    tmp_path: Path,
) -> None:
    path = _calls(tmp_path)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, reply TEXT)")
        db.execute("INSERT INTO calls VALUES ('old', ?)", (json.dumps({"text": "kept"}),))
    db.close()
    cache = LLMCache(tmp_path)
    assert cache.get("old") == {"text": "kept"}
    cache.put("new", {"text": "written now"})
    assert cache.clear(older_than_seconds=3600) == 0 and len(cache) == 2
    assert cache.clear(older_than_seconds=0) == 1 and cache.get("old") == {"text": "kept"}
    assert cache.clear() == 1 and not path.exists()


def test_a_locked_or_unusable_llm_cache_is_one_line_naming_it(tmp_path: Path) -> None:
    path = _calls(tmp_path)
    path.parent.mkdir(parents=True)
    holder = sqlite3.connect(path)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    with pytest.raises(DataError, match=f"^{path}: the LLM cache is locked by another"):
        LLMCache(tmp_path, timeout=0.1).get("k")
    holder.rollback()
    holder.close()
    assert LLMCache(tmp_path).get("k") is None  # free again
    path.unlink()
    path.mkdir()
    with pytest.raises(DataError, match=f"^{path}: cannot use the LLM cache"):
        LLMCache(tmp_path).put("k", {"text": "x"})
    assert path.is_dir()  # what is not a database file is never removed


def _first_entry(cache: Path, area: str) -> Path:
    return next(p for p in sorted((cache / area).glob("*/*")) if not p.name.endswith(".lock"))


def _stage_meta(cache: Path) -> None:
    _noise(_first_entry(cache, "chunks") / "meta.json")


def _lock_a_folder(cache: Path) -> None:
    entry = _first_entry(cache, "chunks")
    shutil.rmtree(entry)
    lock = entry.with_name(entry.name + ".lock")
    lock.unlink()
    lock.mkdir()


def _area_a_file(cache: Path) -> None:
    (cache / "bm25_index").write_text("x", "utf-8")


def _namespace_a_file(cache: Path) -> None:
    for namespace in (cache / "embeddings").glob("*/*"):
        shutil.rmtree(namespace)
        namespace.write_text("x", "utf-8")


def _shard(cache: Path) -> None:
    for vectors in (cache / "embeddings").glob("*/*/*.vecs.npy"):
        _noise(vectors)


@pytest.mark.parametrize(
    "damage", [_stage_meta, _lock_a_folder, _area_a_file, _namespace_a_file, _shard]
)
def test_stage_and_embedding_cache_damage_is_rebuilt_with_the_same_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path], None]
) -> None:
    require(DEMO)
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAGBENCH_CACHE", str(cache))
    sweep = {"sweep__retriever": [{"kind": "bm25"}, {"kind": "hybrid"}]}
    clean = _sweep(tmp_path, "clean", sweep)
    for area in cache.iterdir():  # what the damaged part is built from must be built again
        if area.name not in {"chunks", "embeddings"}:
            shutil.rmtree(area)
    damage(cache)
    assert _sweep(tmp_path, "again", sweep).equals(clean)


def test_a_damaged_plot_in_the_cache_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    require(DEMO)
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    run = str(_two_trials(tmp_path))
    assert main(["report", run, "--out", str(tmp_path / "first")]) == 0
    kept = sorted((tmp_path / "cache" / "plots").glob("*/*/*.png"))
    assert kept
    for png in kept:
        _noise(png)
    with caplog.at_level(logging.WARNING, logger="ragbench.index.cache"):
        assert main(["report", run, "--out", str(tmp_path / "again")]) == 0
    assert caplog.text.count("stage cache: plots ") == len(kept)
    drawn = sorted((tmp_path / "first" / "plots").glob("*.png"))
    assert [p.read_bytes() for p in drawn] == [
        (tmp_path / "again" / "plots" / p.name).read_bytes() for p in drawn
    ]


def test_a_damaged_training_checkpoint_is_dropped_and_training_starts_again(
    tiny_cross_encoder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ragbench.data import load_dataset
    from ragbench.data.pairs import generated_pairs
    from ragbench.index.finetune import FinetuneConfig, train

    pairs = generated_pairs(load_dataset(str(require(DEMO))).documents, 16, 0, 600)
    config = FinetuneConfig(
        pairs="generated", queries=16, epochs=1, batch_size=4, max_seq_length=32
    )
    clean = train("cross-encoder", str(tiny_cross_encoder), pairs, config, tmp_path / "clean")
    (tmp_path / "damaged").mkdir()
    _noise(tmp_path / "damaged" / "checkpoint.pt")
    with caplog.at_level(logging.WARNING, logger="ragbench.index.finetune"):
        again = train("cross-encoder", str(tiny_cross_encoder), pairs, config, tmp_path / "damaged")
    assert again.record()["losses"] == clean.record()["losses"]
    assert f"training checkpoint {tmp_path / 'damaged' / 'checkpoint.pt'} is unreadable" in (
        caplog.text
    )


def test_serve_on_a_damaged_collection_is_one_line_naming_the_file(work: Path) -> None:
    db = _damaged_collection(work, "serve store", "store.sqlite", _noise)
    done = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", "serve", "--db", str(db), "--collection", "c"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAGBENCH_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"ragbench serve: {db / 'c' / 'store.sqlite'}: ")


def _top(db: Path) -> list[list[str]]:
    """The top 10 chunk ids of a few queries in the collection ``c`` of ``db``."""
    from ragbench.pipeline import RAGPipeline

    queries = ["segments", "compaction of the log", "retention policy"]
    return RAGPipeline.open(db / "c").search(queries, 10).ranking.ids.tolist()


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        ("snapshots", _removed),
        ("snapshots/0/bm25_index", _removed),
        ("store.sqlite", _rows(_POINTER_99, "pointer")),
    ],
)
def test_an_ingest_rebuilds_indexes_gone_from_a_whole_store(
    work: Path,
    file: str,
    damage: Callable[[Path], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same source ingested again into a collection whose saved indexes are gone (the
    store whole) rebuilds them from the store: the searches the undamaged collection gives."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    db = _damaged_collection(work, f"rebuilt {file} {damage.__name__}", file, damage)
    source = str(DEMO / "corpus" / "concepts")
    argv = ["ingest", "--source", source, "--db", str(db), "--collection", "c"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "indexed 0, unchanged" in out and " 0 chunks" not in out, out
    assert _top(db) == _top(_collection(work).parent)
    assert sorted(p.name for p in (db / "c" / "snapshots").iterdir()) == ["0"]


def test_an_ingest_refuses_a_store_that_lost_rows(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows("DELETE FROM chunks WHERE rowid % 2 = 0", "rows")
    db = _damaged_collection(work, "ingest rows deleted", "store.sqlite", rows)
    source = str(DEMO / "corpus" / "concepts")
    case = cli(
        "ingest rows deleted",
        lambda w: ["ingest", "--source", source, "--db", str(db), "--collection", "c"],
        "ingest its source into a new collection",
    )
    check(case, work, capsys, monkeypatch)


def test_a_snapshot_prunes_what_a_killed_ingest_left(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards a snapshot includes, temporary folders and a snapshot never recorded (a kill
    during the snapshot step) go with the next ingest, even one that indexes nothing."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    db = _damaged_collection(work, "killed", "batches", lambda path: None)
    left = ["batches/0/doc_vectors", "batches/.tmp-1-99", "snapshots/.tmp-0-99", "snapshots/7"]
    for folder in left:
        (db / "c" / folder).mkdir(parents=True)
    source = str(DEMO / "corpus" / "concepts")
    assert main(["ingest", "--source", source, "--db", str(db), "--collection", "c"]) == 0
    assert [f for f in left if (db / "c" / f).exists()] == []
    assert sorted(p.name for p in (db / "c" / "snapshots").iterdir()) == ["0"]
    assert _top(db) == _top(_collection(work).parent)


def test_a_reader_replays_a_batch_whose_chunks_a_later_batch_replaced(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's shard holds the vectors of every chunk it added; when a later batch replaced
    some of them, opening computes that batch's vectors again instead of misaligning them."""
    from ragbench import pipeline as module
    from ragbench.pipeline import RAGPipeline, pipeline_trial
    from ragbench.types import Document

    monkeypatch.setattr(module, "prune", lambda root, snapshot: None)  # the shards stay
    root = work / "replay" / "c"
    made = RAGPipeline.create(pipeline_trial(_COLLECTION), root)
    docs = [Document(f"d{i}.md", f"Segments roll over {i}. " * 60) for i in range(3)]
    made.index(docs)
    made.index([Document("d0.md", "Compaction keeps the last value of each key. " * 40)])
    with sqlite3.connect(root / "store.sqlite") as db:  # as if killed before any snapshot
        db.execute("DELETE FROM meta")
    shutil.rmtree(root / "snapshots")
    opened = RAGPipeline.open(root).search(["compaction", "segments"], 5).ranking.ids
    assert opened.tolist() == made.search(["compaction", "segments"], 5).ranking.ids.tolist()


def test_serve_says_a_collection_whose_indexes_went_is_stale(work: Path) -> None:
    import httpx

    from ragbench.api import SearchServer
    from ragbench.pipeline import RAGPipeline

    db = _damaged_collection(work, "serve snapshots", "batches", lambda path: None)
    server = SearchServer(RAGPipeline.open(db / "c"), "c", "127.0.0.1", 0, path=db / "c")
    with server.background():
        shutil.rmtree(db / "c" / "snapshots")
        found = httpx.get(f"{server.url}/health", timeout=10, trust_env=False).json()
    assert found["status"] == "stale" and found["chunks"] > 0, found
    assert f"{db / 'c' / 'snapshots' / '0'}: missing: " in found["stale"]


# ---------------------------------------------------------------- a run folder being written


def test_a_reader_of_a_run_being_written_never_sees_half_a_file(work: Path) -> None:
    """One thread commits trials the way a sweep does (atomic replacements of the tables)
    while another reads them: every read is whole, and its trials have all their values."""
    folder = Path(_damaged(work, "live", "manifest.json", lambda path: None))  # a fresh copy
    store = RunStore(folder)
    finished = store.trials()
    queries = list(store.queries()["query_id"])
    results = [
        TrialResult(
            str(row.trial_id),
            str(row.label),
            {},
            per_query={"ndcg@10": np.linspace(0.0, 1.0, len(queries))},
            curves={"ndcg": np.linspace(0.0, 1.0, 10)},
        )
        for row in finished.itertuples()
    ]
    stop = threading.Event()

    def commit() -> None:
        written = 0
        while not stop.is_set():
            store.commit(results[written % len(results)], queries)
            written += 1

    writer = threading.Thread(target=commit)
    writer.start()
    reads = 0
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            reader = RunStore(folder)
            assert len(reader.trials()) == len(finished)
            assert len(reader.per_query()) == len(finished) * len(queries)
            reads += 1
    finally:
        stop.set()
        writer.join()
    assert reads >= 20


# ---------------------------------------------------------------- the split a run evaluates


def _train_only_spans(work: Path) -> str:
    return _dataset(work, "train-only", [{**GOOD_Q, "split": "train"}], {"a.md": DOC})


def _train_only_beir(work: Path) -> str:
    root = work / "train-only-beir"
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "text": DOC}) + "\n", "utf-8")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "segments"}) + "\n")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n", "utf-8")
    return str(root)


@pytest.mark.parametrize(
    ("dataset", "where"),
    [(_train_only_spans, "queries.jsonl"), (_train_only_beir, "qrels")],
    ids=["spans", "beir"],
)
def test_a_set_without_the_split_run_evaluates_is_said_to_be(
    dataset: Callable[[Path], str],
    where: str,
    work: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    root = dataset(work)
    capsys.readouterr()
    assert main(["datasets", "validate", root]) == 1  # as `run` refuses it, so does validate
    said = f"warning: {Path(root) / where}: no split 'test', which `ragbench run` evaluates"
    assert said in capsys.readouterr().out
    config = _yaml(work, Path(root).name, _config(dataset={"path": root}))
    assert main(["run", config, "--dry-run"]) == 2
    refused = capsys.readouterr().err
    assert "test" in refused and "train)" in refused  # names the splits there are
    assert main(["datasets", "info", root]) == 0  # describes the split it has, and says so
    out = capsys.readouterr().out
    assert "split        train (no split 'test', the default; splits: train; --split" in out
    assert main(["datasets", "info", root, "--split", "dev"]) == 2
    assert "train)" in capsys.readouterr().err


# ---------------------------------------------------------------- a cache root that is not there


def test_a_cache_root_that_does_not_exist_is_said_not_to(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no" / "such"
    for command in ("info", "clear"):
        assert main(["cache", "--root", str(missing), command]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.endswith(f": --root {missing}: no such folder, so no cache there")
    monkeypatch.setenv("RAGBENCH_CACHE", str(missing))  # the default root, not made yet
    assert main(["cache", "info"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"cache root: {missing}: no cache there yet (the folder does not exist)"
    )
    assert not missing.exists()
