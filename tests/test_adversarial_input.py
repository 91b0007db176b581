"""Config and CLI input is parsed strictly and checked before any work.

YAML aliases and merge keys are bounded while the file is parsed (an alias bomb fails at once);
``--set`` paths are parsed by a grammar that refuses what it does not understand; every path
argument is checked by the kind its ``Arg`` declares (an input exists and is a file or a folder,
an output folder is one or can be made, and is writable) before the command runs; a model named
by a flag resolves or is refused by name; commands ragbench prints to be pasted are quoted for
the shell; and a config is refused when a metric's cutoff exceeds the ranking depth or the sweep
would select and report on the same split — in the dry run as in the run; a regular
expression a config gives is refused when matching could take exponential time, and a glob
never can; a malformed URL is one line that never shows the credentials in it; messages speak
of YAML's and JSON's values (null, a date, a mapping), name the subcommand, the flag at fault
and what the globs left out, and a file ``chunk`` skips is said. Each case runs the real CLI
through ``tests.adversarial.check``: exit 2, one line naming the file, key or flag.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import random
import re
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError, DataError, command_line
from ragbench.experiment.config import expand, load_config
from tests.adversarial import (
    Case,
    _config,
    _text,
    _unwritable,
    _yaml,
    check,
    cli,
    run,
)
from tests.paths import DEMO, require
from tests.test_web_loader import PAGE, Route, _Handler, _Site


def _laughs(levels: int = 9, width: int = 9) -> list[str]:
    """The "billion laughs": each level a list of ``width`` aliases of the level below,
    ``width ** levels`` strings once expanded."""
    rows = [f"&l0 [{', '.join(['x'] * width)}]"]
    return rows + [f"&l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]


def _bomb() -> str:
    """The laughs in ``sweep.chunker[0].separators``: about 1.3 KB."""
    separators = "".join(f"        - {row}\n" for row in _laughs())
    return (
        f"name: bomb\ndataset: {{path: {DEMO}}}\nevaluation: {{metrics: [ndcg@10], depth: 10}}\n"
        "sweep:\n  retriever: [{kind: bm25}]\n  chunker:\n    - kind: recursive\n"
        f"      size: 400\n      separators:\n{separators}"
    )


def _merge_bomb(levels: int = 12) -> str:
    """Merge keys that multiply: each mapping merges the one below and holds it twice more."""
    rows = ["m0: &m0 {a: 1, b: 2}"]
    rows += [
        f"m{i}: &m{i} {{<<: *m{i - 1}, a{i}: *m{i - 1}, b{i}: *m{i - 1}}}" for i in range(1, levels)
    ]
    mappings = "".join(f"        {row}\n" for row in rows)
    return (
        f"name: merge\ndataset: {{path: {DEMO}}}\nevaluation: {{metrics: [ndcg@10], depth: 10}}\n"
        f"sweep:\n  retriever:\n    - kind: bm25\n      extra:\n{mappings}"
    )


_RECURSIVE = f"""name: loop
dataset: {{path: {DEMO}}}
sweep:
  retriever: [{{kind: bm25}}]
  chunker: [{{kind: recursive, size: 400, separators: &s [" ", *s]}}]
"""

_ALIASES = f"""name: aliases
dataset: {{path: {DEMO}}}
evaluation: {{metrics: [ndcg@10], depth: 10}}
sweep:
  retriever: [{{kind: bm25}}]
  chunker:
    - &base {{kind: recursive, size: 400, separators: &seps ["\\n\\n", "\\n", " ", ""]}}
    - <<: *base
      size: 800
    - {{kind: recursive, size: 1200, separators: *seps}}
"""

_EXPANDS = "invalid YAML (its aliases expand this value to more than 100,000 values"
_KEY = "expected a key (a letter or _, then letters, digits, _ or -)"
_PLAIN = "--collection: expected a plain name"
_FILE = "is a file, not a folder"


def _set(name: str, assignment: str, names: str) -> Case:
    """A dry run of the base config with one ``--set``."""
    return cli(
        f"--set {name}",
        lambda w: ["run", _yaml(w, "set", _config()), "--dry-run", "--set", assignment],
        f"--set {assignment!r}: {names}",
    )


def _file(work: Path) -> str:
    """A file where a folder is expected."""
    return _text(work, "a-file", "not a folder\n")


CONCEPTS = DEMO / "corpus" / "concepts"  # eight Markdown files
BM25 = json.dumps({"retriever": {"kind": "bm25"}})
_BACKTRACKS = "regular expression '(a+)+c' repeats a part whose end can also begin its next"


def _slow(work: Path) -> str:
    """A folder labeled by one query whose one document makes ``(a+)+c`` backtrack."""
    root = work / "slow"
    root.mkdir(exist_ok=True)
    (root / "a.md").write_text("a" * 40 + "b\n", "utf-8")
    (root / "queries.jsonl").write_text('{"id": "q", "text": "aaaa", "qrels": {"a.md": 1}}\n')
    return str(root)


def _redos(work: Path, where: str) -> str:
    """A config over ``_slow`` whose tokenizer pattern or regex separators backtrack."""
    bm25: dict[str, Any] = {"kind": "bm25"}
    chunker: dict[str, Any] = {"kind": "recursive", "size": 400}
    if where == "tokenizer":
        bm25["tokenizer"] = {"pattern": "(a+)+c"}
    else:
        chunker.update(is_separator_regex=True, separators=["(a+)+c"])
    config = _config(
        name=f"redos-{where}",
        dataset={"path": _slow(work)},
        sweep__chunker=[chunker],
        sweep__retriever=[bm25],
    )
    return _yaml(work, f"redos-{where}", config)


def _fifo(work: Path) -> str:
    path = work / "fifo.txt"
    if not path.exists():
        os.mkfifo(path)
    return str(path)


def _terse(work: Path) -> str:
    """A folder of two documents with no sentence long enough to be a generated query."""
    root = work / "terse"
    root.mkdir(exist_ok=True)
    (root / "README.md").write_text("# Team A\n", "utf-8")
    (root / "a.md").write_text("Notes.\n", "utf-8")
    return str(root)


def _generated_finetune(out: Path, *extra: str, source: Path = CONCEPTS) -> list[str]:
    """``finetune SOURCE --pairs generated --out OUT`` and ``extra`` arguments."""
    return ["finetune", str(source), "--pairs", "generated", "--out", str(out), *extra]


def _collection(work: Path, db: str = "db") -> str:
    """A BM25 collection of the concept pages in ``work/db``, made once; its name."""
    if not (work / db / "c").is_dir():
        argv = ["ingest", "--source", str(CONCEPTS), "--db", str(work / db), "--collection", "c"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main([*argv, "--config", BM25]) == 0  # said apart from the case's own lines
    return "c"


CASES = [
    # ---------------------------------------------------------------- YAML aliases
    Case(
        "alias bomb",
        lambda w: ["run", _yaml(w, "bomb", _bomb()), "--dry-run"],
        2,
        f"bomb.yaml: line 15 {_EXPANDS}",
    ),
    Case(
        "merge-key bomb",
        lambda w: ["run", _yaml(w, "merges", _merge_bomb()), "--dry-run"],
        2,
        f"merges.yaml: line 17 {_EXPANDS}",
    ),
    Case(
        "alias inside itself",
        lambda w: ["run", _yaml(w, "loop", _RECURSIVE), "--dry-run"],
        2,
        "loop.yaml: line 5 invalid YAML (alias *s repeats a value that holds it)",
    ),
    cli(
        "alias bomb in --set",
        lambda w: [
            "run",
            _yaml(w, "setbomb", _config()),
            "--dry-run",
            "--set",
            f"sweep.chunker[0].separators=[{', '.join(_laughs())}]",
        ],
        "invalid YAML value (its aliases expand this value to more than 100,000 values",
    ),
    # ---------------------------------------------------------------- --set paths
    _set("two dots", "evaluation..depth=5", f"{_KEY} at character 12 of the path, found '.'"),
    _set("stray ]", "evaluation.depth]]=7", "expected '.' or '[' at character 17 of the path"),
    _set(
        "no dot after ]",
        "sweep.chunker[0]size=[100,200]",
        "expected '.' or '[' at character 17 of the path, found 's'",
    ),
    _set("index not a number", "sweep.chunker[x].size=3", "expected an index (digits) at"),
    _set("index not closed", "sweep.chunker[0.size=3", "expected ']' at character 16"),
    _set("no key", "=5", f"{_KEY} at character 1 of the path, found the end"),
    _set("trailing dot", "evaluation.=5", f"{_KEY} at character 12 of the path, found the end"),
    _set("empty value", "evaluation.depth=", "expected a value after '='"),
    _set("blank value", "evaluation.depth=  ", "expected a value after '='"),
    # ---------------------------------------------------------------- path arguments
    cli(
        "optimize --out a file",
        lambda w: ["optimize", str(DEMO), "--out", _file(w)],
        f"a-file: {_FILE}",
    ),
    cli(
        "optimize --out under a file",
        lambda w: ["optimize", str(DEMO), "--out", str(Path(_file(w)) / "sub")],
        f"a-file {_FILE}",
    ),
    cli(
        "optimize --out unwritable",
        lambda w: ["optimize", str(DEMO), "--out", str(_unwritable(w) / "o")],
        "/o: cannot write there",
    ),
    cli(
        "optimize DOCS missing",
        lambda w: ["optimize", str(w / "no-docs"), "--out", str(w / "opt")],
        "no-docs: no such file or folder",
        absent="opt",
    ),
    cli(
        "finetune --out a file",
        lambda w: ["finetune", str(DEMO), "--pairs", "generated", "--out", _file(w)],
        f"a-file: {_FILE}",
    ),
    cli(
        "finetune --model a missing path",
        lambda w: ["finetune", str(DEMO), "--out", str(w / "m1"), "--model", str(w / "no-model")],
        "no-model: no such model (not a local path",
        absent="m1",
    ),
    cli(
        "finetune --model an unknown hub id offline",
        lambda w: [
            "finetune",
            str(DEMO),
            "--out",
            str(w / "m2"),
            "--model",
            "nobody-here/no-such-model",
        ],
        "--model nobody-here/no-such-model: no such model (not a local path, not cached, and "
        "the hub is not reachable offline)",
        absent="m2",
    ),
    cli(
        "finetune --model a collection folder",
        lambda w: _generated_finetune(w / "m4", "--model", str(w / "fdb" / _collection(w, "fdb"))),
        "fdb/c: not a sentence-transformers model folder (no config.json with a model_type)",
        absent="m4",
    ),
    cli(
        "finetune --model a folder whose config.json names no model_type",
        lambda w: _generated_finetune(
            w / "m5", "--model", str(Path(_text(w, "config.json", '{"name": "a run"}')).parent)
        ),
        ": not a sentence-transformers model folder (no config.json with a model_type)",
        absent="m5",
    ),
    cli(
        "finetune --model an empty string",
        lambda w: _generated_finetune(w / "m6", "--model", ""),
        "ragbench finetune: --model: expected a model name or path, got an empty string",
        absent="m6",
    ),
    cli(
        "finetune --pairs generated from too little prose",
        lambda w: _generated_finetune(w / "m7", source=Path(_terse(w))),
        "terse: 0 pairs generated from 2 documents; training needs 2 or more: give more "
        "documents, or documents with more prose (a pair is a sentence of 8 or more words cut "
        "out of one), or train on judged queries (--pairs select, with a labeled set)",
        absent="m7",
    ),
    cli(
        "run --out a file",
        lambda w: ["run", _yaml(w, "ro", _config()), "--out", _file(w)],
        f"a-file: {_FILE}",
    ),
    cli(
        "run --queries a folder",
        lambda w: ["run", _yaml(w, "rq", _config()), "--dry-run", "--queries", str(w)],
        "--queries ",
    ),
    cli(
        "run --dataset a file",
        lambda w: ["run", _yaml(w, "rd", _config()), "--dry-run", "--dataset", _file(w)],
        "a-file: is a file, expected a folder",
    ),
    cli(
        "report --out under a file",
        lambda w: ["report", str(w), "--out", str(Path(_file(w)) / "r")],
        f"a-file {_FILE}",
    ),
    cli(
        "compare a missing run",
        lambda w: ["compare", str(w), str(w / "no-run")],
        "no-run: no such folder",
    ),
    cli(
        "export --out a folder",
        lambda w: ["export", "ragas", str(w), "--out", str(w)],
        "is a folder, expected a file to write",
    ),
    cli(
        "ingest --source missing",
        lambda w: ["ingest", "--source", str(w / "no-source"), "--db", str(w / "db")],
        "--source ",
        absent="db",
    ),
    cli(
        "ingest --db a file",
        lambda w: ["ingest", "--source", str(DEMO), "--db", _file(w)],
        f"a-file: {_FILE}",
    ),
    cli(
        "ingest --config a missing model",
        lambda w: [
            "ingest",
            "--source",
            str(DEMO),
            "--db",
            str(w / "db"),
            "--config",
            json.dumps({"embedder": {"kind": "sentence-transformers", "model": str(w / "nm")}}),
        ],
        "--config: pipeline.embedder.model: no such model",
        absent="db",
    ),
    cli(
        "ingest --from-run a file",
        lambda w: ["ingest", "--from-run", _file(w), "--trial", "best", "--db", str(w / "db")],
        "--from-run ",
        absent="db",
    ),
    cli(
        "generate --out a file",
        lambda w: ["datasets", "generate", str(DEMO), "--out", _file(w)],
        f"a-file: {_FILE}",
    ),
    cli(
        "import-ragas missing file",
        lambda w: ["datasets", "import-ragas", str(w / "t.jsonl"), "--out", str(w / "imp")],
        "t.jsonl: no such file",
        absent="imp",
    ),
    cli(
        "judge a file as the set",
        lambda w: ["datasets", "judge", _file(w), "--run", str(w)],
        "a-file: is a file, expected a folder",
    ),
    cli(
        "download --dir a file",
        lambda w: ["datasets", "download", "scifact", "--dir", _file(w)],
        f"a-file: {_FILE}",
    ),
    cli(
        "agreement --config missing",
        lambda w: [
            "datasets",
            "agreement",
            str(DEMO),
            str(DEMO),
            "--config",
            str(w / "no.yaml"),
        ],
        "--config ",
    ),
    # ---------------------------------------------------------------- collection names
    cli(
        "optimize --collection a path",
        lambda w: ["optimize", str(DEMO), "--out", str(w / "o2"), "--collection", "../evil x"],
        f"{_PLAIN} (1-100 printable characters, no '/' or '\\', not starting with '.' or '-'), "
        "got "
        "'../evil x'",
        absent="o2",
    ),
    cli(
        "optimize --collection a dash",
        lambda w: ["optimize", str(DEMO), "--out", str(w / "o3"), "--collection=-x"],
        f"{_PLAIN} (1-100 printable characters, no '/' or '\\', not starting with '.' or '-'), "
        "got '-x'",
        absent="o3",
    ),
    cli(
        "ingest --collection a dot",
        lambda w: ["ingest", "--source", str(DEMO), "--db", str(w / "db"), "--collection", ".x"],
        _PLAIN,
        absent="db",
    ),
    # ---------------------------------------------------------------- config checks
    run(
        "cutoff past the depth",
        2,
        "evaluation.metrics: recall@50 reads the top 50 results, but evaluation.depth keeps 5 "
        "(it would score recall@5 under its name); raise evaluation.depth to 50 or cut recall "
        "at 5 at most",
        evaluation={"metrics": ["recall@50", "recall@5"], "depth": 5},
    ),
    run(
        "span cutoff past the depth",
        2,
        "evaluation.metrics: span_recall@20 reads the top 20",
        evaluation={"metrics": ["span_recall@20"], "depth": 10},
    ),
    run(
        "report on the sweep's split",
        2,
        "evaluation.report_on: the sweep selects on split 'test' (dataset.split) and would report "
        "on split 'test' too",
        evaluation={"metrics": ["ndcg@10"], "depth": 10, "report_on": "test"},
    ),
    run(
        "fine-tuned on the reported split",
        2,
        "evaluation.report_on: the sweep selects on split 'test' (dataset.split)",
        evaluation={"metrics": ["ndcg@10"], "depth": 10, "report_on": "test"},
        sweep__embedder=[{"kind": "sentence-transformers", "finetune": {"pairs": "select"}}],
        sweep__retriever=[{"kind": "dense"}],
    ),
    cli(
        "--set report_on the sweep's split",
        lambda w: [
            "run",
            _yaml(w, "same", _config()),
            "--dry-run",
            "--set",
            "evaluation.report_on=test",
        ],
        "--set evaluation.report_on=test: the sweep selects on split 'test' (dataset.split)",
    ),
    cli(
        "dry run --select unknown",
        lambda w: ["run", _yaml(w, "sel", _config()), "--dry-run", "--select", "foo@5"],
        "--select: unknown metric 'foo@5'",
    ),
    cli(
        "dry run --select not a later metric",
        lambda w: ["run", _yaml(w, "sel2", _config()), "--dry-run", "--select", "recall@5"],
        "--select 'recall@5': expected a metric of the config's evaluation.metrics",
    ),
    # ---------------------------------------------------------------- regular expressions
    cli(
        "tokenizer pattern that backtracks, dry run",
        lambda w: ["run", _redos(w, "tokenizer"), "--dry-run"],
        f"sweep.retriever[0].tokenizer.pattern: {_BACKTRACKS}",
    ),
    cli(
        "tokenizer pattern that backtracks, run",
        lambda w: ["run", _redos(w, "tokenizer"), "--out", str(w / "redos1")],
        f"sweep.retriever[0].tokenizer.pattern: {_BACKTRACKS}",
        absent="redos1",
    ),
    cli(
        "separator regex that backtracks, run",
        lambda w: ["run", _redos(w, "separators"), "--out", str(w / "redos2")],
        f"sweep.chunker[0].separators: {_BACKTRACKS}",
        absent="redos2",
    ),
    cli(
        "chunk --chunker separator regex that backtracks",
        lambda w: [
            "chunk",
            str(CONCEPTS),
            "--chunker",
            json.dumps(
                {"kind": "recursive", "size": 400, "is_separator_regex": True}
                | {"separators": ["(a|a)*x"]}
            ),
        ],
        "chunker.separators: regular expression '(a|a)*x' repeats",
    ),
    # ---------------------------------------------------------------- URLs
    cli(
        "ingest --source an unclosed IPv6 URL",
        lambda w: ["ingest", "--source", "http://[::1", "--db", str(w / "db"), "--config", BM25],
        "ragbench ingest: http://[::1: not a valid URL (Invalid IPv6 URL)",
    ),
    cli(
        "download --url an unclosed IPv6 URL",
        lambda w: [
            "datasets",
            "download",
            "scifact",
            "--dir",
            str(w / "dl1"),
            "--url",
            "http://[::1",
        ],
        "ragbench datasets download: --url http://[::1: not a valid URL (Invalid IPv6 URL)",
        absent="dl1",
    ),
    cli(
        "download with RAGBENCH_BEIR_URL no http URL",
        lambda w: ["datasets", "download", "scifact", "--dir", str(w / "dl2")],
        "RAGBENCH_BEIR_URL ftp://mirror.example/beir: not an http(s) URL",
        absent="dl2",
        env=lambda w: {"RAGBENCH_BEIR_URL": "ftp://mirror.example/beir"},
    ),
    cli(
        "ingest --source a URL whose port is no number",
        lambda w: [
            "ingest",
            "--source",
            "http://127.0.0.1:notaport/",
            "--db",
            str(w / "db"),
            "--config",
            BM25,
        ],
        "http://127.0.0.1:notaport/: not a valid URL (Port could not be cast to integer",
    ),
    cli(
        "ingest --source a URL with credentials and a bad port",
        lambda w: [
            "ingest",
            "--source",
            "http://ann:s3cret@127.0.0.1:99999/",
            "--db",
            str(w / "db"),
            "--config",
            BM25,
        ],
        "http://***@127.0.0.1:99999/: not a valid URL (Port out of range 0-65535)",
    ),
    # ---------------------------------------------------------------- values as YAML has them
    cli(
        "a date where text is expected",
        lambda w: ["run", _yaml(w, "date", _config(name=datetime.date(2024, 1, 1))), "--dry-run"],
        "date.yaml: name: Input should be a valid string (got the date 2024-01-01; quote it to "
        "make it text)",
    ),
    cli(
        "null where a number is expected",
        lambda w: [
            "run",
            _yaml(w, "null", _config(evaluation={"metrics": ["ndcg@10"], "depth": None})),
            "--dry-run",
        ],
        "null.yaml: evaluation.depth: Input should be a valid integer (got null)",
    ),
    cli(
        "a list where a mapping is expected",
        lambda w: ["run", _yaml(w, "list", _config(evaluation=[1])), "--dry-run"],
        "list.yaml: evaluation: Input should be a mapping of keys to values (got a list [1])",
    ),
    cli(
        "--filter null",
        lambda w: ["search", "keys", "--collection", "c", "--filter", "null"],
        """--filter: expected a JSON object like '{"tenant": "a"}', got null""",
    ),
    cli(
        "--settings a list",
        lambda w: _generated_finetune(w / "ftl", "--settings", "[1]"),
        """--settings: expected a JSON object like '{"epochs": 2}', got a list [1]""",
        absent="ftl",
    ),
    # ---------------------------------------------------------------- a default chosen for you
    cli(
        "finetune: no negatives for the default loss",
        lambda w: _generated_finetune(
            w / "ft6", "--settings", '{"queries": 8, "negatives": "none"}'
        ),
        "--settings: finetune.negatives: none leaves no hard negatives, which margin_mse needs "
        "(the loss chosen by default for generated pairs, as loss is not set); set loss: mnrl",
        absent="ft6",
    ),
    # ---------------------------------------------------------------- nothing loaded, and why
    cli(
        "chunk a FIFO",
        lambda w: ["chunk", _fifo(w)],
        "fifo.txt: no documents loaded: not a regular file (FIFO)",
    ),
    cli(
        "chunk a latin-1 file",
        lambda w: ["chunk", _text(w, "latin.txt", b"caf\xe9\n")],
        "latin.txt: no documents loaded: invalid UTF-8 at byte 3",
    ),
    cli(
        "chunk an empty file",
        lambda w: ["chunk", _text(w, "empty.md", "")],
        "empty.md: no documents loaded: empty",
    ),
    cli(
        "optimize --include that matches nothing",
        lambda w: ["optimize", str(CONCEPTS), "--include", "*.txt", "--out", str(w / "op3")],
        f"{CONCEPTS}: no documents loaded: --include '*.txt' left out all 8 files",
    ),
    cli(
        "ingest --exclude that leaves nothing",
        lambda w: [
            "ingest",
            "--source",
            str(CONCEPTS),
            "--exclude",
            "*.md",
            "--db",
            str(w / "db3"),
            "--config",
            BM25,
        ],
        f"{CONCEPTS}: no documents loaded: --exclude '*.md' left out all 8 files",
    ),
    cli(
        "datasets generate --include that matches nothing, the subcommand named",
        lambda w: [
            "datasets",
            "generate",
            str(CONCEPTS),
            "--include",
            "**/*.txt",
            "--out",
            str(w / "gen3"),
        ],
        f"ragbench datasets generate: {CONCEPTS}: no documents loaded: --include '**/*.txt' "
        "left out all 8 files",
        absent="gen3",
    ),
    cli(
        "an include glob that would backtrack",
        lambda w: [
            "optimize",
            str(CONCEPTS),
            "--include",
            "**/" * 12 + "*a*a*a*a*a*a*a*a*a*a*a*a*b.txt",
            "--out",
            str(w / "op4"),
        ],
        "no documents loaded: --include ",
    ),
    # ---------------------------------------------------------------- the flag at fault
    cli(
        "serve --host that names no host",
        lambda w: [
            "serve",
            "--collection",
            _collection(w),
            "--db",
            str(w / "db"),
            "--host",
            "no such host",
            "--allow-remote",
        ],
        "ragbench serve: --host no such host: cannot listen on no such host:",
    ),
    cli(
        "datasets validate names its subcommand",
        lambda w: ["datasets", "validate", str(w / "no-set")],
        "ragbench datasets validate: ",
    ),
]


class _Seen:
    """``capsys`` as ``check`` reads it, keeping what it read so a test can look again."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self.err = ""

    def readouterr(self) -> Any:  # pytest.CaptureResult, not exported by every pytest
        found = self._capsys.readouterr()
        self.err += found.err
        return found


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder each case writes its files into."""
    require(DEMO)
    return tmp_path_factory.mktemp("adversarial-input")


def test_the_cases_are_distinct() -> None:
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_before_any_work_in_one_line(
    case: Case, work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _Seen(capsys)
    check(case, work, seen, monkeypatch)  # type: ignore[arg-type]
    lines = [line for line in seen.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ragbench "), seen.err


def test_an_alias_bomb_fails_at_once_and_ordinary_aliases_and_merge_keys_work(
    tmp_path: Path,
) -> None:
    bomb = _yaml(tmp_path, "bomb", _bomb())
    assert len(Path(bomb).read_bytes()) < 1500
    started = time.perf_counter()
    with pytest.raises(ConfigError, match="line 15 invalid YAML"):
        load_config(bomb)
    assert time.perf_counter() - started < 0.5
    config = load_config(_yaml(tmp_path, "aliases", _ALIASES))
    chunkers = [trial["chunker"] for trial in expand(config)]
    assert [c.size for c in chunkers] == [400, 800, 1200]  # type: ignore[attr-defined]
    assert {tuple(c.separators) for c in chunkers} == {("\n\n", "\n", " ", "")}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("assignment", "path", "value"),
    [
        ("evaluation.depth=50", ("evaluation", "depth"), 50),
        ("sweep.retriever[0].k1=[0.5, 0.9]", ("sweep", "retriever", 0, "k1"), [0.5, 0.9]),
        ("prices.gpt-4o_mini.input=0.15", ("prices", "gpt-4o_mini", "input"), 0.15),
        (" search.seed = 3", ("search", "seed"), 3),
        ("name=a=b", ("name",), "a=b"),
    ],
)
def test_set_paths_the_grammar_reads(
    assignment: str, path: tuple[str | int, ...], value: object
) -> None:
    from ragbench.experiment.config import apply_override

    data: dict = {"sweep": {"retriever": [{"kind": "bm25"}]}}
    apply_override(data, assignment)
    node: object = data
    for step in path:
        node = node[step]  # type: ignore[index]
    assert node == value


def test_a_pasted_deploy_command_runs_whatever_the_paths_and_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAGBENCH_DB", str(tmp_path / "my db"))
    config = _yaml(tmp_path, "deploy", _config(name="deploy"))
    out = tmp_path / "out" / "my run"
    argv = ["run", config, "--out", str(out), "--limit-queries", "5", "--no-report"]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    from ragbench.report.markdown import answer_lines
    from ragbench.report.report import Report

    printed = answer_lines(Report.from_run(out), "team a's $HOME")[-1]
    words = shlex.split(printed.removeprefix("deploy:"))
    assert words[:2] == ["ragbench", "ingest"] and f"--from-run={out}" in words
    assert main(words[1:]) == 0, capsys.readouterr().err
    assert (tmp_path / "my db" / "team a's $HOME" / "pipeline.json").is_file()


def test_a_pasted_deploy_command_runs_when_a_path_starts_with_a_dash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --out=-dashrun``: the printed command gives the path as ``--from-run=-dashrun``,
    which argparse cannot take for an option of its own."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAGBENCH_DB", str(tmp_path / "db"))
    monkeypatch.chdir(tmp_path)
    config = _yaml(tmp_path, "dash", _config(name="dash"))
    assert main(["run", config, "--out=-dashrun", "--limit-queries", "5"]) == 0
    out = capsys.readouterr().out
    (printed,) = [line for line in out.splitlines() if line.startswith("deploy:")]
    words = shlex.split(printed.removeprefix("deploy:"))
    assert "--from-run=-dashrun" in words
    assert main(words[1:]) == 0, capsys.readouterr().err
    assert (tmp_path / "db" / "default").is_dir()


def test_printed_commands_parse_as_they_were_meant_whatever_the_values() -> None:
    """Every value of a printed command, a path or option value starting with ``-`` or
    holding spaces and quotes, reaches the flag or argument it was printed for."""
    from ragbench.cli import parser

    odd = ["-x", "--out", "my run's $HOME", "-", "a b"]
    for value in odd:
        line = command_line("ragbench datasets judge", value, run=[value, "r2"], agreement=True)
        args = parser().parse_args(shlex.split(line)[1:])
        path = f"./{value}" if value.startswith("-") else value  # a relative path, the same
        assert (args.set, args.run, args.agreement) == (path, [value, "r2"], True)
        line = command_line("ragbench ingest", from_run=value, trial=value, collection="c")
        args = parser().parse_args(shlex.split(line)[1:])
        assert (args.from_run, args.trial, args.collection) == (value, value, "c")


def test_printed_label_commands_are_quoted(tmp_path: Path) -> None:
    from ragbench.data.folder import no_labels

    folder = tmp_path / "my docs"
    command = no_labels(folder).split("generate them: ", 1)[1]
    assert shlex.split(command)[:4] == ["ragbench", "datasets", "generate", f"{folder}/"]


# ---------------------------------------------------------------- regular expressions

_NESTED = [
    "(a+)+c",
    "(a*)*",
    "(a|a)*",
    "(a|aa)*b",
    r"(\w+\s*)+$",
    r"(\n\n|\n)+x",
    "(a*a*b)+",
    r"(?:\d+\.?\d*)+x",
    "(?=(a+)+c)",
    "(a+){5}c",
    "(?i:(A+)+)c",
    "(.*a){12}",
]
_ORDINARY = [
    r"\w+",
    r"[A-Za-z0-9]+",
    r"\n\n",
    r"(?<=[.!?])\s+",
    r"\b\w\w+\b",
    r"[^\W\d_]+",
    r"\w+(?:'\w+)?",
    r"(?:\w+[-'])*\w+",
    r"\d+(?:\.\d+)*",
    r"\n{2,}",
    r"(?:\r?\n){2,}",
    r"(?m)^#{1,6} ",
    "(a+)++c",
    r"(\w)\1+",
]


@pytest.mark.parametrize("where", ["tokenizer", "separators"])
def test_a_backtracking_pattern_fails_at_once_in_the_dry_run_and_the_run(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _redos(tmp_path, where)
    for argv in (["run", config, "--dry-run"], ["run", config, "--out", str(tmp_path / "out")]):
        started = time.perf_counter()
        assert main(argv) == 2
        assert time.perf_counter() - started < 1.0
        assert _BACKTRACKS in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_nested_repeats_are_refused_and_ordinary_patterns_pass() -> None:
    from ragbench.text.chunkers.recursive import RecursiveConfig
    from ragbench.text.patterns import safe_pattern
    from ragbench.text.tokenize import TokenizerConfig

    for pattern in _NESTED:
        with pytest.raises(ValueError, match=re.escape(f"{pattern!r} repeats ")):
            safe_pattern(pattern)
    for pattern in _ORDINARY:
        assert safe_pattern(pattern).pattern == pattern
    assert TokenizerConfig().pattern == r"\w+"
    defaults = RecursiveConfig(size=400).separators
    RecursiveConfig(size=400, is_separator_regex=True, separators=(*defaults, *_ORDINARY))
    literal = RecursiveConfig(size=400, separators=("(a+)+c",))  # not a regex: taken as text
    assert literal.separators == ("(a+)+c",)
    with pytest.raises(ValueError, match="not a valid regular expression '\\(a'"):
        safe_pattern("(a")


def test_a_pattern_that_passes_matches_any_text_quickly() -> None:
    """Random patterns over a few characters: each one ``safe_pattern`` lets through matches
    texts built to make backtracking patterns blow up in a fraction of a second."""
    from ragbench.text.patterns import safe_pattern

    atoms = ["a", "b", "[ab]", r"\w", r"\s", " ", ".", r"\d"]
    quantifiers = ["*", "+", "?", "{2,}", "{0,3}", "*?"]
    rng = random.Random(7)

    def pattern(depth: int = 0) -> str:
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            return rng.choice(atoms)
        if roll < 0.55:
            return pattern(depth + 1) + pattern(depth + 1)
        if roll < 0.7:
            return f"(?:{pattern(depth + 1)}|{pattern(depth + 1)})"
        return f"(?:{pattern(depth + 1)}){rng.choice(quantifiers)}"

    texts = ["a" * 30 + "!", "ab" * 15 + "!", " a" * 15 + "!", "1" * 30 + "!", " " * 30 + "!"]

    def late(*_: object) -> None:
        raise TimeoutError

    previous = signal.signal(signal.SIGALRM, late)
    passed = refused = 0
    try:
        for _ in range(600):
            text = pattern() + rng.choice(["", "$", "c"])
            try:
                compiled = safe_pattern(text)
            except ValueError:
                refused += 1
                continue
            passed += 1
            for sample in texts:
                signal.setitimer(signal.ITIMER_REAL, 0.5)
                try:
                    compiled.findall(sample)
                except TimeoutError:
                    pytest.fail(f"{text!r} passed but takes over 0.5 s on {sample!r}")
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert passed > 300 and refused > 50  # the sample holds both kinds


def test_a_glob_matches_in_bounded_time_and_as_before() -> None:
    from ragbench.text.loaders.globs import globs

    deep = globs(["**/" * 30 + "x.md"], "--include")[0]
    stars = globs(["*a*a*a*a*a*a*a*a*a*a*a*a*b"], "--include")[0]
    started = time.perf_counter()
    assert not deep.matches("a/" * 2000 + "y.md", False)
    assert deep.matches("a/" * 2000 + "x.md", False)
    assert not stars.matches("a" * 250, False)
    assert stars.matches("a" * 250 + "b", False)
    assert time.perf_counter() - started < 0.5
    cases = {
        "*.md": (["a.md", "x/y/a.md"], ["a.txt", "a.md/x"]),
        "build/**": (["build/x", "build/x/y"], ["build", "src/build/x"]),
        "a/**/b": (["a/b", "a/x/y/b"], ["b", "a/b/c"]),
        "[!a]*.md": (["b.md", "x/c.md"], ["a.md"]),
        "*a*b": (["ab", "xaYb", "aab"], ["ba", "a/b"]),
    }
    for glob, (matching, other) in cases.items():
        [compiled] = globs([glob], "--include")
        assert all(compiled.matches(path, False) for path in matching), glob
        assert not any(compiled.matches(path, False) for path in other), glob
    assert globs(["build/**"], "--exclude")[0].matches("build", True)


# ---------------------------------------------------------------- URLs


def test_credentials_in_a_url_are_used_but_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragbench.text.loaders import load

    site = _Site(("127.0.0.1", 0), _Handler)  # a loopback web site
    site.requests = []
    site.routes = {
        "/robots.txt": Route(body=b"User-agent: *\n"),
        "/page.html": Route(body=PAGE.encode(), headers={"Content-Type": "text/html"}),
    }
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        where = f"127.0.0.1:{site.server_address[1]}"
        [doc] = list(loader := load(f"http://ann:s3cret@{where}/page.html"))
        shown = f"http://***@{where}/page.html"
        assert doc.id == shown and doc.metadata["url"] == shown and "s3cret" not in repr(loader)
        with pytest.raises(DataError) as failed:
            load(f"http://ann:s3cret@{where}/gone.html")
        assert str(failed.value) == f"http://***@{where}/gone.html: HTTP 404 Not Found"
    finally:
        site.shutdown()
        site.server_close()
    db = ["--db", str(tmp_path / "db"), "--config", BM25]
    for source in ("http://ann:s3cret@127.0.0.1:9/", "http://ann:s3cret@[::1/"):
        assert main(["ingest", "--source", source, *db]) == 2
        err = capsys.readouterr().err
        assert "s3cret" not in err and "http://***@" in err and err.count("\n") == 1


# ---------------------------------------------------------------- values as YAML has them


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("pattern", None, "a valid string (got null)"),
        ("pattern", datetime.date(2024, 1, 1), "(got the date 2024-01-01; quote it to make it"),
        ("pattern", datetime.datetime(2024, 1, 1, 10), "(got the date and time 2024-01-01 10:"),
        ("pattern", [1, "x"], 'a valid string (got a list [1, "x"])'),
        ("pattern", {"a": None}, 'a valid string (got a mapping {"a": null})'),
        ("pattern", True, "a valid string (got true; quote it to make it text)"),
        ("pattern", 5, "a valid string (got 5; quote it to make it text)"),
        ("lowercase", b"hello", "a valid boolean, unable to interpret input (got binary data"),
        ("min_length", None, "a valid integer (got null)"),
    ],
)
def test_messages_name_the_values_yaml_and_json_have_not_pythons(
    key: str, value: Any, said: str
) -> None:
    from pydantic import ValidationError

    from ragbench.registry import format_validation_error
    from ragbench.text.tokenize import TokenizerConfig

    with pytest.raises(ValidationError) as failed:
        TokenizerConfig.model_validate({key: value})
    message = format_validation_error("tokenizer", failed.value)
    assert message.startswith(f"tokenizer.{key}: Input should be ") and said in message
    for python in ("None", "datetime", "dict", "tuple", "b'", "instance of", "NoneType"):
        assert python not in message
    with pytest.raises(ValidationError) as failed:
        TokenizerConfig.model_validate({"stopwords": 5})
    assert format_validation_error("t", failed.value) == (
        "t.stopwords: Input should be 'english' or 'none' or a list (got 5)"
    )


# ---------------------------------------------------------------- search --interactive


def test_a_bad_line_of_an_interactive_search_is_said_and_the_next_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    name = _collection(tmp_path)
    lines = [b"replication", b"\xff\xfe bad bytes", b"x" * 10_001, b"y" * 100_000, b"compaction"]
    stdin = io.TextIOWrapper(io.BytesIO(b"\n".join(lines) + b"\n:q\nsegments\n"))
    monkeypatch.setattr(sys, "stdin", stdin)
    argv = ["search", "--interactive", "--collection", name, "--db", str(tmp_path / "db")]
    assert main([*argv, "-k", "1", "--format", "json"]) == 2  # some lines were refused
    captured = capsys.readouterr()
    answered = [json.loads(rows) for rows in re.findall(r"^\[.*?^\]$", captured.out, re.S | re.M)]
    assert [rows[0]["doc_id"] for rows in answered] == ["replication.md", "compaction.md"]
    said = captured.err.replace("query> ", "").splitlines()
    assert [line for line in said if line.startswith("ragbench")] == [
        "ragbench search: line 2: query: not UTF-8: byte 0xff at offset 0",
        "ragbench search: line 3: query: longer than 10,000 characters",
        "ragbench search: line 4: query: longer than 10,000 characters",
    ]


# ---------------------------------------------------------------- paths that cannot be looked at

_LONG = "x" * 300  # a name over the 255 bytes a file system allows for one part of a path


def _unreachable(work: Path, kind: str) -> tuple[Path, str]:
    """A path that cannot be looked at, and what the one-line error says about it: a part
    of it too long (under a folder that does not exist either), a symbolic link to itself, a
    dangling symbolic link."""
    if kind == "long":
        return work / "absent" / _LONG, "name too long: a part of it is over 255 bytes"
    link = work / f"{kind}-link"
    target = link if kind == "loop" else work / "nowhere"
    if not link.is_symlink():
        link.symlink_to(target)
    said = "a symbolic link loop" if kind == "loop" else f"a dangling symbolic link to {target}"
    return link, said


# (command, its argv with the bad path ``p`` in the work folder ``w``, the flag that gave it)
_PATHS: list[tuple[str, Any, str]] = [
    ("run --out", lambda w, p: ["run", _yaml(w, "pr", _config()), "--out", p], "--out"),
    ("run CONFIG", lambda w, p: ["run", p], ""),
    ("run --dataset", lambda w, p: ["run", _yaml(w, "pd", _config()), "--dataset", p], "--dataset"),
    ("report RUN", lambda w, p: ["report", p], ""),
    ("report --out", lambda w, p: ["report", str(w), "--out", p], "--out"),
    ("compare --out", lambda w, p: ["compare", str(w), "--out", p], "--out"),
    ("export --out", lambda w, p: ["export", "ragas", str(w), "--out", p], "--out"),
    ("datasets validate", lambda w, p: ["datasets", "validate", p], ""),
    ("datasets info", lambda w, p: ["datasets", "info", p], ""),
    ("chunk", lambda w, p: ["chunk", p], ""),
    ("optimize DOCS", lambda w, p: ["optimize", p], ""),
    ("optimize --out", lambda w, p: ["optimize", str(DEMO), "--out", p], "--out"),
    (
        "datasets generate --out",
        lambda w, p: ["datasets", "generate", str(DEMO), "--out", p],
        "--out",
    ),
    (
        "finetune --out",
        lambda w, p: ["finetune", str(DEMO), "--pairs", "generated", "--out", p],
        "--out",
    ),
    ("ingest --source", lambda w, p: ["ingest", "--source", p, "--db", str(w / "db")], "--source"),
    ("ingest --db", lambda w, p: ["ingest", "--source", str(DEMO), "--db", p], "--db"),
    ("search --db", lambda w, p: ["search", "q", "--db", p], "--db"),
    ("cache --root", lambda w, p: ["cache", "--root", p, "info"], "--root"),
    ("download --dir", lambda w, p: ["datasets", "download", "scifact", "--dir", p], "--dir"),
    ("eval --qrels", lambda w, p: ["eval", "--qrels", p, "--run", str(w)], "--qrels"),
]


@pytest.mark.parametrize("kind", ["long", "loop", "dangling"])
@pytest.mark.parametrize(("name", "argv", "flag"), _PATHS, ids=[p[0] for p in _PATHS])
def test_a_path_that_cannot_be_looked_at_is_one_line_naming_its_flag(
    kind: str,
    name: str,
    argv: Any,
    flag: str,
    work: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name longer than a file system allows, a symbolic link loop or a dangling link, as
    any path argument: exit 2 and one line naming the flag, the path and what is wrong;
    nothing is made."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    path, said = _unreachable(work, kind)
    args = argv(work, str(path))
    before = sorted(p.name for p in work.iterdir())
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ragbench ") and len(err.splitlines()) == 1, err
    assert f": {flag} {path}: {said}" in err if flag else f": {path}: {said}" in err, err
    assert sorted(p.name for p in work.iterdir()) == before


@pytest.mark.parametrize("variable", ["RAGBENCH_CACHE", "RAGBENCH_DATA", "RAGBENCH_DB"])
def test_a_path_variable_that_cannot_be_looked_at_is_one_line(
    variable: str, work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    path, said = _unreachable(work, "long")
    monkeypatch.setenv(variable, str(path))
    argv = {
        "RAGBENCH_CACHE": ["cache", "info"],
        "RAGBENCH_DATA": ["datasets", "info", "scifact"],
        "RAGBENCH_DB": ["search", "q"],
    }[variable]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}: {said}" in err, err


def test_a_dataset_path_in_a_config_that_cannot_be_looked_at_is_one_line(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    for kind in ("long", "loop"):
        path, said = _unreachable(work, kind)
        config = _yaml(work, f"ds-{kind}", _config(dataset={"path": str(path)}))
        capsys.readouterr()
        assert main(["run", config, "--dry-run"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{path}: {said}" in err, err


@pytest.mark.parametrize("kind", ["long", "loop"])
def test_a_model_path_that_cannot_be_looked_at_is_no_model(
    kind: str, work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    path, said = _unreachable(work, kind)
    argv = ["finetune", str(DEMO), "--out", str(work / "m3"), "--model", str(path)]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--model {path}: no such model ({said})" in err, err
    assert not (work / "m3").exists()
