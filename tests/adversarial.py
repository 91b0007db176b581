"""The machinery of the bad-input matrix (``tests/test_adversarial.py`` holds the cases): a
case, the configs, files and sets cases are built from, and ``check``, which every case passes.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragbench.cli import main
from tests.paths import DEMO

HASHING = {"kind": "hashing", "dim": 64}


def _config(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "bad",
        "dataset": {"path": str(DEMO)},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 400}],
            "embedder": [HASHING],
            "retriever": [{"kind": "bm25"}],
        },
    }
    for path, value in changes.items():
        node = config
        *parents, last = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        if value is _DROP:
            node.pop(last, None)
        else:
            node[last] = value
    return config


_DROP = object()


@dataclass(frozen=True)
class Case:
    """A command (built in the work folder), its exit code, and what stderr must name."""

    name: str
    argv: Callable[[Path], list[str]]
    code: int
    names: str
    one_line: bool = True
    absent: str | None = None  # what the refused command must not make, in the work folder
    env: Callable[[Path], dict[str, str]] | None = None


def _yaml(work: Path, name: str, config: dict[str, Any] | str) -> str:
    path = work / f"{name}.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config), "utf-8")
    return str(path)


def run(case: str, code: int, names: str, **changes: Any) -> Case:
    """A dry run of the base config with ``changes`` (``a__b`` is key ``b`` inside ``a``);
    stderr must name ``names``. ``BEIR`` stands for the work folder's tiny BEIR set."""
    file = case.replace(" ", "_")

    def argv(work: Path) -> list[str]:
        text = yaml.safe_dump(_config(**changes)).replace("BEIR", str(work / "beir"))
        return ["run", _yaml(work, file, text), "--dry-run"]

    return Case(case, argv, code, names)


def cli(
    name: str, argv: Callable[[Path], list[str]], names: str, code: int = 2, **more: Any
) -> Case:
    """Any command."""
    return Case(name, argv, code, names, **more)


def _dataset(work: Path, name: str, queries: list[dict[str, Any]], docs: dict[str, str]) -> str:
    root = work / name
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    for doc_id, text in docs.items():
        (root / "corpus" / doc_id).write_text(text, "utf-8")
    (root / "queries.jsonl").write_text(
        "".join(json.dumps(q) + "\n" for q in queries) if queries else "", "utf-8"
    )
    return str(root)


def _text(work: Path, name: str, text: str | bytes) -> str:
    path = work / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")
    return str(path)


def _bad_json_set(work: Path) -> str:
    root = _dataset(work, "badjson", [GOOD_Q], {"a.md": DOC})
    Path(root, "queries.jsonl").write_text("{not json\n", "utf-8")
    return root


def _finished_run(work: Path) -> str:
    out = work / "finished"
    if not (out / "trials.parquet").exists():
        config = _yaml(work, "finished", _config(name="finished"))
        assert main(["run", config, "--out", str(out), "--limit-queries", "5", "--no-report"]) == 0
    return str(out)


def _unwritable(work: Path) -> Path:
    """A folder this process cannot write into: a read-only one, or for root /sys/kernel."""
    if os.geteuid() != 0:
        folder = work / "readonly"
        folder.mkdir(exist_ok=True)
        folder.chmod(0o555)
        return folder
    kernel = Path("/sys/kernel")
    try:
        tempfile.TemporaryFile(dir=kernel).close()
    except OSError:
        if kernel.is_dir():
            return kernel
    pytest.skip("no folder that root cannot write into")


def _validate_and_run(name: str, queries: list[Any], fragment: str) -> list[Case]:
    """``datasets validate`` and ``run`` of a folder labeled by ``queries`` (JSON lines, or text
    lines as they are): both refuse it, saying ``fragment``."""

    def folder(work: Path) -> str:
        root = _dataset(work, name, [], {"a.md": DOC})
        lines = (q if isinstance(q, str) else json.dumps(q) for q in queries)
        Path(root, "queries.jsonl").write_text("".join(f"{line}\n" for line in lines), "utf-8")
        return root

    def config(work: Path) -> str:
        return _yaml(work, name, _config(dataset={"path": folder(work)}))

    return [
        cli(f"validate: {name}", lambda w: ["datasets", "validate", folder(w)], fragment, 1),
        cli(f"run: {name}", lambda w: ["run", config(w), "--dry-run"], fragment),
    ]


def _beir(work: Path, judgements: str) -> str:
    """A copy of the work folder's tiny BEIR set with these qrels lines."""
    root = work / "beir-graded"
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        (root / name).write_text((work / "beir" / name).read_text())
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + judgements)
    return str(root)


DOC = "Kestrel stores partitions as segment files. Retention deletes closed segments."
GOOD_Q = {
    "id": "q1",
    "text": "how are segments deleted",
    "evidence": [{"doc_id": "a.md", "text": "Retention deletes closed segments."}],
}


def check(
    case: Case, work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run ``case`` in ``work``: its exit code, one line on stderr naming what it must name, no
    traceback, and nothing made where it says so."""
    monkeypatch.setenv("RAGBENCH_CACHE", str(work / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for key, value in (case.env(work) if case.env else {}).items():
        monkeypatch.setenv(key, value)
    argv = case.argv(work)
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    printed = capsys.readouterr()
    err = printed.err.strip()
    if argv[:2] == ["datasets", "validate"]:  # validate's report is its output
        err = (printed.out + printed.err).strip()
    assert code == case.code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    if (
        case.code == 2
        and argv[0]
        in {"run", "eval", "chunk", "search", "ingest", "serve", "report", "compare", "cache"}
        | {"datasets"}
        and not err.startswith("usage")
    ):
        assert len(lines) == 1, err
    assert case.names in err, err
    assert case.absent is None or not (work / case.absent).exists(), case.absent
