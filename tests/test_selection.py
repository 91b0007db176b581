"""Honest selection: select on one split and report on another, or k-fold over one split."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragbench.errors import ConfigError
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import run
from ragbench.report.report import Report
from tests.paths import DEMO, SCIFACT, require

GRID = [{"kind": "bm25", "k1": [0.5, 1.2, 2.0], "b": [0.3, 0.9]}]


def test_select_on_train_report_on_test(tmp_path: Path) -> None:
    config = {
        "name": "sel",
        "dataset": {"path": str(require(SCIFACT))},
        "evaluation": {
            "metrics": ["ndcg@10", "recall@100"],
            "select_on": "train",
            "report_on": "test",
        },
        "baseline": "bm25(b=0.3)",
        "sweep": {"retriever": GRID},
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False)
    assert result.manifest["dataset"]["split"] == "train"
    assert result.manifest["queries"]["count"] == 809
    summary = result.manifest["selection"]
    trials = result.trials.set_index("trial_id")
    for metric, chosen in summary["chosen"].items():
        assert chosen["trial_id"] == trials[metric].idxmax()
        assert chosen["selected"] == pytest.approx(trials[metric].max())
    # the reported value is the chosen trial evaluated on the 300 test queries
    clean = run(
        {
            **config,
            "evaluation": {"metrics": ["ndcg@10", "recall@100"]},
            "dataset": {"path": str(SCIFACT), "split": "test"},
        },
        tmp_path / "test",
        cache_root=tmp_path / "c",
        progress=False,
    ).trials
    on_test = clean.set_index("trial_id")
    for metric, chosen in summary["chosen"].items():
        assert chosen["reported"] == pytest.approx(on_test.loc[chosen["trial_id"], metric])
        assert chosen["baseline_reported"] == pytest.approx(
            on_test.loc[summary["baseline"], metric]
        )
    table = Report.from_run(result.path).selection_table()
    assert list(table["metric"]) == ["ndcg@10", "recall@100"]
    assert {"on train", "on test", "baseline", "p", "ci_low", "ci_high"} <= set(table.columns)


def test_k_fold_selection_scores_each_query_with_a_trial_chosen_elsewhere(tmp_path: Path) -> None:
    config = {
        "name": "cv",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 20, "folds": 4, "fold_seed": 1},
        "baseline": "bm25(b=0.3)",
        "sweep": {"chunker": [{"kind": "recursive", "size": 500}], "retriever": GRID},
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False)
    chosen = result.manifest["selection"]["chosen"]["ndcg@10"]
    assert len(chosen["per_fold"]) == 4
    per_query = result.per_query
    values = per_query[per_query["metric"] == "ndcg@10"].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    assert chosen["best_in_sample"] == pytest.approx(values.mean().max())
    # recompute the held-out estimate from the per-query table and the fold picks
    held = pd.read_parquet(result.path / "selection_per_query.parquet").set_index("query_id")
    rng = np.random.default_rng(1).permutation(len(values)) % 4
    folds = dict(zip(held.index, rng, strict=True))
    for query, row in held.iterrows():
        pick = chosen["per_fold"][folds[query]]
        assert row["value"] == pytest.approx(values.loc[query, pick])
    assert chosen["cross_validated"] == pytest.approx(held["value"].mean())
    assert chosen["cross_validated"] <= chosen["best_in_sample"] + 1e-12


def test_selection_options_are_validated() -> None:
    base = {"name": "x", "dataset": {"path": "demo"}, "sweep": {"retriever": GRID}}
    with pytest.raises(ConfigError, match=r"either report_on .* or folds"):
        load_config({**base, "evaluation": {"select_on": "train", "report_on": "test", "folds": 3}})
    with pytest.raises(ConfigError, match="report_on must differ from select_on"):
        load_config({**base, "evaluation": {"select_on": "test", "report_on": "test"}})
    with pytest.raises(ConfigError, match=r"evaluation\.folds"):
        load_config({**base, "evaluation": {"folds": 1}})
