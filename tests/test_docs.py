"""The README and the documentation site: a short README whose links lead somewhere, whose
minimal sweep runs, and a site that builds with ``mkdocs build --strict`` and fails on a broken
anchor."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from ragbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(text: str) -> list[str]:
    """The link targets of ``text`` that are neither URLs nor anchors on the same page."""
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


def test_the_readme_is_short() -> None:
    assert len(README.read_text("utf-8").splitlines()) <= 150


def test_every_relative_link_in_the_readme_leads_to_a_file() -> None:
    links = _relative_links(README.read_text("utf-8"))
    assert "docs/installation.md" in links  # the docs pages are linked, so the check has work
    missing = [t for t in links if not (ROOT / t.split("#")[0]).exists()]
    assert missing == []


def test_the_readme_minimal_sweep_runs_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text("utf-8"), re.S)
    (sweep,) = [b for b in blocks if "name: mine" in b]
    assert yaml.safe_load(sweep)["dataset"] == {"path": "../docs"}
    config = tmp_path / "experiments" / "mine.yaml"
    config.parent.mkdir()
    config.write_text(sweep, "utf-8")
    argv = ["run", str(config), "--dataset", str(ROOT / "datasets" / "demo")]
    argv += ["--set", "sweep.embedder=[{kind: hashing, dim: 64}]"]
    assert main([*argv, "--out", str(tmp_path / "run"), "--dry-run"]) == 0, capsys.readouterr()
    assert "6 trial" in capsys.readouterr().out  # 2 chunkings x bm25 / dense / hybrid


def test_the_lean_install_holds_what_optimize_runs_by_default() -> None:
    """``pip install .`` alone gives ``optimize`` its int8 ONNX Runtime path, and nothing that
    only tests need (llama.cpp's server compiles from source)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    base = {re.split(r"[\[<>=!~ ]", d)[0].lower() for d in project["dependencies"]}
    assert {"onnxruntime", "onnx"} <= base
    # nothing the main job installs compiles: hnswlib (source only on PyPI) is an extra
    assert not base & {"llama-cpp-python", "pytest", "mypy", "ruff", "mkdocs", "hnswlib"}
    assert project["optional-dependencies"]["hnsw"] == ["hnswlib>=0.8"]
    assert "onnx" not in project["optional-dependencies"]  # no extra left to forget


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict"]  # --quiet hides warnings
    return subprocess.run(
        [*mkdocs, "-f", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=config.parent,
    )


@pytest.mark.slow
def test_the_site_builds_strictly_but_for_a_broken_anchor(tmp_path: Path) -> None:
    """One build of a copy of the site with one broken anchor added: the anchor alone fails it
    (``make test`` builds the site as it is; this proves ``--strict`` catches anchors)."""
    for module in ("mkdocs", "mkdocstrings", "mkdocs_jupyter"):
        pytest.importorskip(module, reason="the docs extra is not installed")
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")  # symlinked notebooks and pages as files
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text("utf-8") + "\n[gone](sweeps.md#no-such-section)\n", "utf-8")
    built = _build(copy / "mkdocs.yml", tmp_path / "site")
    warnings = [line for line in built.stderr.splitlines() if line.startswith("WARNING")]
    assert built.returncode != 0
    assert len(warnings) == 1 and "'#no-such-section'" in warnings[0], built.stderr
    assert "Aborted with 1 warnings in strict mode" in built.stdout
    assert (tmp_path / "site" / "api" / "index.html").read_text("utf-8").count("RAGPipeline") > 1
    assert (tmp_path / "site" / "notebooks" / "01_quickstart" / "index.html").exists()
