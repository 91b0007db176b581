"""`ragbench run --dry-run` estimates what a sweep will cost, and the run shows what it does: a
real cold run of MiniLM on the demo set, in a fresh process. How close the estimate comes to
the cold run's time is a benchmark (``benchmarks/bench_estimate.py``), not a timed test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ragbench.cli import main
from ragbench.experiment.runner import dry_run
from tests.paths import DEMO, require


def _config(tmp_path: Path) -> Path:
    config = {
        "name": "estimate",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": 5, "repeats": 2},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 3000, "overlap": 0}],
            "embedder": [{"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2"}],
            "retriever": [{"kind": "bm25"}, {"kind": "dense"}, {"kind": "hybrid"}],
        },
    }
    path = tmp_path / "estimate.yaml"
    path.write_text(yaml.safe_dump(config), "utf-8")
    return path


def test_the_dry_run_measures_a_sample_and_the_cold_run_leaves_nothing_to_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(tmp_path)
    planned = dry_run(config, cache_root=tmp_path / "planned").set_index("label")
    dense = planned.loc["dense | recursive(size=3000) | all-MiniLM-L6-v2"]
    embed = re.search(r"embed (\d+) of (\d+) chunks", dense["work"])
    assert embed is not None, dense["work"]
    chunks = int(embed[2])
    assert 0 < int(embed[1]) < chunks  # a sample was embedded to measure the model
    assert "build a BM25 index of" in planned.iloc[0]["work"]
    hybrid = planned.loc["hybrid | recursive(size=3000) | all-MiniLM-L6-v2"]
    assert hybrid["work"] == "-" and hybrid["estimated_s"] == 0  # its stages: counted once
    assert float(planned["estimated_s"].sum()) > 0  # against the cold run: bench_estimate

    env = {**os.environ, "RAGBENCH_CACHE": str(tmp_path / "cold")}
    command = [sys.executable, "-m", "ragbench.cli", "run", str(config), "--no-report"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # one display: it names the stage running and the texts embedded; no library bars
    shown = done.stderr.replace("\r", "\n")
    assert "doc_vectors · embedding with all-MiniLM-L6-v2" in shown
    assert f"/{chunks} texts" in shown
    assert "Batches" not in shown and "Loading weights" not in shown

    # once the run has filled its cache, nothing is left to do
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cold"))
    capsys.readouterr()
    assert main(["run", str(config), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "estimated: 0 s for 3 trial(s) on this machine" in printed
    assert "LLM calls" not in printed
