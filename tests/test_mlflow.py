"""MLflow logging against a real sqlite tracking database: ``ragbench run --mlflow`` logs a
parent run with the report and one child per trial (params, metrics, tags), logging again or
after a resume adds no duplicate, and without mlflow the flag fails at once in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from mlflow.entities import Run, ViewType
from mlflow.tracking import MlflowClient

from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.experiment.config import expand, load_config
from ragbench.experiment.mlflow_log import log_run
from ragbench.experiment.runner import run
from ragbench.testing import scripted_llm_server
from tests.paths import DEMO, require

CHUNKER = {"kind": "recursive", "size": 600, "overlap": 0}
HASHING = {"kind": "hashing", "dim": 64}


def _config(name: str, **sweep: Any) -> dict[str, Any]:
    return {
        "name": name,
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
        "latency": {"queries": 2, "repeats": 1},
        "sweep": {"chunker": [CHUNKER], "embedder": [HASHING], **sweep},
    }


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding the tracking database (``mlruns.db``) and the artifacts."""
    return tmp_path_factory.mktemp("mlflow")


def _runs(client: MlflowClient, experiment: str, view: int = ViewType.ACTIVE_ONLY) -> list[Run]:
    found = client.get_experiment_by_name(experiment)
    assert found is not None, experiment
    return list(client.search_runs([found.experiment_id], run_view_type=view, max_results=1000))


def _family(runs: list[Run]) -> tuple[Run, dict[str, Run]]:
    """The one parent run and its children by trial id (checking there is one per trial)."""
    (parent,) = [r for r in runs if "ragbench.sweep" in r.data.tags]
    children = [r for r in runs if r is not parent]
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in children)
    by_trial = {r.data.tags["ragbench.trial_id"]: r for r in children}
    assert len(by_trial) == len(children)
    return parent, by_trial


def test_run_with_mlflow_logs_a_parent_with_the_report_and_a_child_per_trial(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workdir)  # the default URI is ./mlruns.db; artifacts go to ./mlruns
    monkeypatch.setenv("RAGBENCH_CACHE", str(workdir / "cache"))
    config = _config(
        "cli-sweep",
        retriever=[{"kind": "bm25"}, {"kind": "dense"}, {"kind": "hybrid"}],
    )
    path = workdir / "cli.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = workdir / "runs" / "cli"
    argv = ["run", str(path), "--out", str(out), "--limit-queries", "4", "--mlflow"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "(3 trials logged, 0 already there)" in printed
    (report_line,) = [line for line in printed.splitlines() if line.startswith("report:")]
    report = Path(report_line.split(maxsplit=1)[1])

    client = MlflowClient(f"sqlite:///{workdir / 'mlruns.db'}")
    parent, children = _family(_runs(client, "cli-sweep"))
    trials = pd.read_parquet(out / "trials.parquet").set_index("trial_id")
    assert set(children) == set(trials.index)
    expected = {t.id: t for t in expand(load_config(path))}
    for trial_id, child in children.items():
        row = trials.loc[trial_id]
        assert child.info.run_name == row["label"] == child.data.tags["ragbench.label"]
        assert child.data.tags["ragbench.status"] == "ok" and child.info.status == "FINISHED"
        params = {k: str(v) for k, v in expected[trial_id].params().items() if v is not None}
        assert child.data.params == params
        metrics = child.data.metrics
        assert metrics["ndcg_at_10"] == pytest.approx(row["ndcg@10"], abs=1e-12)
        assert metrics["recall_at_20"] == pytest.approx(row["recall@20"], abs=1e-12)
        for column in [c for c in trials.columns if c.startswith("latency.") and "_ms" in c]:
            if not math.isnan(row[column]):
                assert metrics[column] == pytest.approx(row[column]), column
            else:
                assert column not in metrics
        assert metrics["index_build_s"] == pytest.approx(row["index_build_s"])
        assert not any(name.startswith("param.") for name in metrics)

    assert parent.info.run_name == "cli" and parent.info.status == "FINISHED"
    assert parent.data.tags["ragbench.run_dir"] == str(out.resolve())
    assert parent.data.params["evaluation.depth"] == "20"
    assert json.loads(parent.data.params["evaluation.metrics"]) == ["ndcg@10", "recall@20"]
    assert parent.data.params["queries.count"] == "4"
    assert parent.data.metrics["trials.ok"] == 3
    assert parent.data.metrics["best.ndcg_at_10"] == pytest.approx(trials["ndcg@10"].max())
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.html", "report.md", "manifest.json"} <= artifacts
    logged = client.download_artifacts(parent.info.run_id, "report.html", str(workdir / "got"))
    assert Path(logged).read_bytes() == report.read_bytes()

    assert main(["report", str(out), "--out", str(workdir / "again"), "--mlflow"]) == 0
    assert "(0 trials logged, 3 already there)" in capsys.readouterr().out
    assert len(_runs(client, "cli-sweep")) == 4


def test_logging_again_and_after_a_resume_adds_only_new_and_changed_trials(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workdir)
    uri = f"sqlite:///{workdir / 'mlruns.db'}"
    client = MlflowClient(uri)
    out, cache = workdir / "runs" / "resumed", workdir / "cache"
    with scripted_llm_server() as server:
        rewrite = {"kind": "rewrite", "base_url": server.url, "model": "scripted", "max_retries": 0}
        query = [{"kind": "none"}, rewrite]
        server.fail_next(1, status=400)  # the rewrite trial's one request fails: so does it
        first = run(
            _config("resumed", query=query, retriever=[{"kind": "bm25"}]),
            out,
            cache_root=cache,
            limit_queries=1,
            progress=False,
        ).trials.set_index("trial_id")
        assert sorted(first["status"]) == ["failed", "ok"]
        failed = str(first.index[first["status"] == "failed"][0])

        logged = log_run(out, uri)
        assert sorted(logged.logged) == sorted(first.index) and logged.skipped == ()
        parent, children = _family(_runs(client, "resumed"))
        assert parent.info.run_id == logged.run_id
        assert children[failed].info.status == "FAILED"
        assert children[failed].data.tags["ragbench.error"] == first.loc[failed, "error"]
        assert "ndcg_at_10" not in children[failed].data.metrics

        again = log_run(out, uri)
        assert again.logged == () and sorted(again.skipped) == sorted(first.index)
        assert again.run_id == logged.run_id and len(_runs(client, "resumed")) == 3

        resumed = run(
            _config("resumed", query=query, retriever=[{"kind": "bm25"}, {"kind": "dense"}]),
            out,
            cache_root=cache,
            limit_queries=1,
            progress=False,
            resume=True,
        ).trials.set_index("trial_id")
    assert len(resumed) == 4 and set(resumed["status"]) == {"ok"}
    third = log_run(out, uri)
    assert third.run_id == logged.run_id
    ok_before = set(first.index) - {failed}
    assert set(third.skipped) == ok_before
    assert set(third.logged) == set(resumed.index) - ok_before  # the failed one and two new
    parent, children = _family(_runs(client, "resumed"))
    assert set(children) == set(resumed.index)
    assert {c.info.status for c in children.values()} == {"FINISHED"}
    assert children[failed].data.metrics["ndcg_at_10"] == pytest.approx(
        resumed.loc[failed, "ndcg@10"]
    )
    deleted = _runs(client, "resumed", ViewType.DELETED_ONLY)
    assert [r.data.tags["ragbench.trial_id"] for r in deleted] == [failed]
    assert parent.data.metrics["trials.ok"] == 4
    history = client.get_metric_history(parent.info.run_id, "trials.ok")  # step: trials
    assert {(m.step, m.value) for m in history} == {(2, 1), (4, 4)}


def test_without_mlflow_the_flag_fails_at_once_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_config("absent", retriever=[{"kind": "bm25"}])), "utf-8")
    monkeypatch.setitem(sys.modules, "mlflow", None)  # what an install without the extra sees
    argv = ["run", str(path), "--out", str(tmp_path / "run"), "--mlflow", "sqlite:///x.db"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "ragbench run: --mlflow: needs the 'mlflow' extra: pip install ragbench[mlflow]\n"
    )
    assert not (tmp_path / "run").exists()  # nothing ran
    with pytest.raises(ConfigError, match=r"pip install ragbench\[mlflow\]"):
        log_run(tmp_path / "run")


def test_importing_ragbench_does_not_import_mlflow() -> None:
    code = (
        "import sys\n"
        "import ragbench.cli, ragbench.experiment.mlflow_log, ragbench.experiment.runner\n"
        "print('mlflow' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
