"""Bad input is one line naming the file, key or flag, and exit code 2 — never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.experiment.config import apply_override, load_config


def one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI; assert exit 2 and a single stderr line without a traceback; return it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_non_utf8_config_names_the_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\ndataset: {path: demo}\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: not UTF-8 text (invalid byte 0xe9 at offset 9)"
    assert str(path) in one_line_exit_2(["run", str(path), "--dry-run"], capsys)


def test_invalid_yaml_is_one_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ndataset: {path: demo\nsweep: {}\n", encoding="utf-8")
    err = one_line_exit_2(["run", str(path), "--dry-run"], capsys)
    assert err.startswith(f"ragbench run: {path}: line ") and "invalid YAML" in err


@pytest.mark.parametrize("assignment", ["a.b=[1,", "a.b={x: 1", "a.b=" + "[" * 5000])
def test_bad_yaml_in_set_names_the_assignment(assignment: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match=r"^--set 'a\.b=.*': invalid YAML value") as info:
        apply_override({}, assignment)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300
    path = tmp_path / "e.yaml"
    path.write_text("name: e\ndataset: {path: demo}\n", encoding="utf-8")
    err = one_line_exit_2(["run", str(path), "--dry-run", "--set", assignment], capsys)
    assert "--set 'a.b=" in err and "invalid YAML value" in err


def test_eval_rejects_directories_for_qrels_and_run(tmp_path: Path, capsys) -> None:
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1 0 d1 1\n")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    err = one_line_exit_2(["eval", "--qrels", str(folder), "--run", str(run)], capsys)
    assert f"--qrels {folder}: is a folder, expected a file" in err
    err = one_line_exit_2(["eval", "--qrels", str(qrels), "--run", str(folder)], capsys)
    assert f"--run {folder}: is a folder, expected a file" in err
    err = one_line_exit_2(["eval", "--qrels", str(tmp_path / "no"), "--run", str(run)], capsys)
    assert "--qrels" in err and "no such file" in err


@pytest.mark.parametrize("k", ["0", "-3"])
def test_search_k_must_be_positive(k: str, tmp_path: Path, capsys) -> None:
    err = one_line_exit_2(["search", "q", "-k", k, "--db", str(tmp_path)], capsys)
    assert f"-k: expected a number of results from 1 to 1000, got {k}" in err


@pytest.mark.parametrize(
    "name", ["x" * 101, "a\x00b", "new\nline", "tab\there", "bell\x07", "rtl\u202eevil", "a\x7f"]
)
def test_collection_names_are_short_and_printable(name: str, tmp_path: Path, capsys) -> None:
    err = one_line_exit_2(["search", "q", "--collection", name, "--db", str(tmp_path)], capsys)
    assert "--collection: expected a plain name" in err
    assert list(tmp_path.iterdir()) == []


def test_a_100_character_collection_name_is_fine(tmp_path: Path, capsys) -> None:
    err = one_line_exit_2(["search", "q", "--collection", "é" * 100, "--db", str(tmp_path)], capsys)
    assert "no collection" in err


def test_deeply_nested_json_flags_are_one_line(tmp_path: Path, capsys) -> None:
    err = one_line_exit_2(
        ["ingest", "--source", str(tmp_path), "--db", str(tmp_path), "--config", "[" * 100000],
        capsys,
    )
    assert "--config: invalid JSON (nested too deeply)" in err
