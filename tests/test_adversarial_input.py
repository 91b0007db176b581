"""Config and CLI input is parsed strictly and checked before any work.

YAML aliases and merge keys are bounded while the file is parsed (an alias bomb fails at once);
``--set`` paths are parsed by a grammar that refuses what it does not understand; every path
argument is checked by the kind its ``Arg`` declares (an input exists and is a file or a folder,
an output folder is one or can be made, and is writable) before the command runs; a model named
by a flag resolves or is refused by name; commands ragbench prints to be pasted are quoted for
the shell; and a config is refused when a metric's cutoff exceeds the ranking depth or the sweep
would select and report on the same split — in the dry run as in the run. Each case runs the
real CLI through ``tests.adversarial.check``: exit 2, one line naming the file, key or flag.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
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
        f"{_PLAIN} (1-100 printable characters, no '/' or '\\', not starting with '.'), got "
        "'../evil x'",
        absent="o2",
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
        "same.yaml: evaluation.report_on: the sweep selects on split 'test' (dataset.split)",
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
    assert words[:2] == ["ragbench", "ingest"] and str(out) in words
    assert main(words[1:]) == 0, capsys.readouterr().err
    assert (tmp_path / "my db" / "team a's $HOME" / "pipeline.json").is_file()


def test_printed_label_commands_are_quoted(tmp_path: Path) -> None:
    from ragbench.data.folder import no_labels

    folder = tmp_path / "my docs"
    command = no_labels(folder).split("generate them: ", 1)[1]
    assert shlex.split(command)[:4] == ["ragbench", "datasets", "generate", f"{folder}/"]
