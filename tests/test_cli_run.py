"""`ragbench run` / `ragbench cache`: exit codes, dry run, final table, report.md."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ragbench.cli import main
from tests.paths import DEMO, require


def _write(tmp_path: Path, **overrides: object) -> Path:
    config = {
        "name": "cli",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 500}],
            "embedder": [{"kind": "hashing"}],
            "retriever": [{"kind": "bm25", "k1": [0.9, 1.2]}, {"kind": "hybrid"}],
        },
        **overrides,
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_run_prints_the_table_and_writes_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    path = _write(tmp_path)
    out = tmp_path / "run"
    assert main(["run", str(path), "--dry-run", "--limit-queries", "10"]) == 0
    dry = capsys.readouterr().out
    assert dry.count("bm25") >= 2 and "missing" in dry and "chunks" in dry
    assert main(["run", str(path), "--out", str(out), "--limit-queries", "10"]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert "ndcg@10" in lines[0] and "total p50 ms" in lines[0]
    assert f"run directory: {out}" in printed and "report.html" in printed
    # it ends with the answer: the pick, how sure it is, and the command that deploys it
    assert "Recommendation: best overall " in printed
    assert "Confidence in the pick (ndcg@10): " in printed and "resamples of the 10" in printed
    deploy = printed.rstrip().splitlines()[-1]
    assert deploy.startswith(f"deploy:        ragbench ingest --from-run={out} --trial=")
    report = (out / "report.md").read_text()
    assert "## Best trial per metric" in report and "## Config" in report
    values = [float(line.split()[-5]) for line in lines[2:5] if line.strip()]
    assert values == sorted(values, reverse=True)  # sorted by the first metric
    assert main(["run", str(path), "--out", str(out)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_bad_config_exits_2_without_traceback(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        sweep={
            "chunker": [{"kind": "recursive", "size": 512, "overlap": 600}],
            "retriever": [{"kind": "bm25"}],
        },
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", "run", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert f"{path}: sweep.chunker[0].overlap: must be < size (got 600 >= 512)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--executor", "ray"], "invalid choice"),
        (["--dataset", "/no/such/place"], "/no/such/place"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ragbench.cli", "run", str(_write(tmp_path)), *args],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_cache_info_and_clear(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path)
    cache = tmp_path / "cache"
    from ragbench.experiment.runner import run

    run(path, tmp_path / "r", cache_root=cache, limit_queries=5, progress=False)
    assert main(["cache", "--root", str(cache), "info"]) == 0
    info = capsys.readouterr().out
    assert "chunks" in info and "bm25" in info and "total" in info
    assert main(["cache", "--root", str(cache), "clear", "--older-than", "1d"]) == 0
    assert "removed 0 entries" in capsys.readouterr().out
    assert main(["cache", "--root", str(cache), "clear"]) == 0
    assert "removed 0 entries" not in capsys.readouterr().out
    assert main(["cache", "--root", str(cache), "clear", "--older-than", "soon"]) == 2
