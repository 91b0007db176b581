"""Honest selection: select on one split and report on another, or k-fold over one split."""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragbench.errors import ConfigError
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import run
from ragbench.experiment.selection import _fold_metric
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
    same = r"evaluation\.report_on: the sweep selects on split 'test' \({}\) and would report"
    with pytest.raises(ConfigError, match=same.format(r"evaluation\.select_on")):
        load_config({**base, "evaluation": {"select_on": "test", "report_on": "test"}})
    with pytest.raises(ConfigError, match=same.format(r"dataset\.split")):
        load_config({**base, "evaluation": {"report_on": "test"}})  # dataset.split: test
    with pytest.raises(ConfigError, match=r"evaluation\.folds"):
        load_config({**base, "evaluation": {"folds": 1}})


# ---------------------------------------------------------------- ties are not picks

HASHING = {"kind": "hashing", "dim": 256}
# dense retrieval with and without a dense rerank by its own embedder rank alike: a tie
TIED = {
    "chunker": [{"kind": "recursive", "size": [400, 1200], "overlap": 0}],
    "embedder": [HASHING],
    "retriever": [{"kind": "dense"}],
    "reranker": [{"kind": "none"}, {"kind": "dense", "candidates": 20, "embedder": HASHING}],
}


def _two_splits(folder: Path) -> Path:
    """The demo set with its first 40 queries in split ``train`` and the rest in ``test``."""
    shutil.copytree(require(DEMO) / "corpus", folder / "corpus")
    lines = (DEMO / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    records = [
        {**json.loads(x), "split": "train" if i < 40 else "test"} for i, x in enumerate(lines)
    ]
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    return folder


def _tied_best(trials: pd.DataFrame, metric: str) -> set[str]:
    values = trials.set_index("trial_id")[metric]
    return set(values.index[np.isclose(values, values.max(), rtol=1e-9, atol=0)])


def test_trials_tied_on_the_selection_split_are_a_tie(tmp_path: Path) -> None:
    config = {
        "name": "tie",
        "dataset": {"path": str(_two_splits(tmp_path / "set"))},
        "evaluation": {
            "metrics": ["ndcg@10"],
            "depth": 20,
            "select_on": "train",
            "report_on": "test",
        },
        "sweep": TIED,
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False)
    chosen = json.loads((result.path / "selection.json").read_text())["chosen"]["ndcg@10"]
    tied = _tied_best(result.trials, "ndcg@10")
    assert len(tied) == 2 and set(chosen["tied"]) == tied
    assert chosen["trial_id"] == chosen["tied"][0]  # the old keys still name one of them
    assert chosen["reported"] == chosen["tied_reported"][0]
    labels = dict(zip(result.trials["trial_id"], result.trials["label"], strict=True))
    assert chosen["tied_labels"] == [labels[t] for t in chosen["tied"]]
    reported = pd.read_parquet(result.path / "selection_per_query.parquet")
    means = reported.groupby("trial_id")["value"].mean()
    assert set(means.index) == tied  # every tied trial was evaluated on the report split
    assert chosen["tied_reported"] == pytest.approx([means[t] for t in chosen["tied"]])
    table = Report.from_run(result.path).selection_table()
    assert table is not None
    row = table.iloc[0]
    names = " and ".join(chosen["tied_labels"])
    assert row["chosen"] == f"tie: {names} at {chosen['selected']:.4f}"
    assert row["on test"] == pytest.approx(np.mean(chosen["tied_reported"]))


def test_k_fold_records_each_folds_tie_and_scores_it_by_the_tied_mean(tmp_path: Path) -> None:
    config = {
        "name": "cvtie",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 20, "folds": 3},
        "sweep": TIED,
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False)
    chosen = result.manifest["selection"]["chosen"]["ndcg@10"]
    tied = _tied_best(result.trials, "ndcg@10")
    assert [set(p) for p in chosen["per_fold_tied"]] == [tied] * 3
    assert chosen["per_fold"] == [p[0] for p in chosen["per_fold_tied"]]
    assert set(chosen["best_in_sample_tied"]) == tied
    table = Report.from_run(result.path).selection_table()
    assert table is not None and table.iloc[0]["chosen"].startswith("tie: ")
    # by hand: a fold whose selection ties scores its queries by the tied trials' mean
    values = pd.DataFrame(
        {"a": [1.0, 0.0, 0.5, 0.5], "b": [0.0, 1.0, 0.5, 0.5], "c": [0.2, 0.2, 0.9, 0.1]}
    )
    in_fold = np.array([1, 1, 0, 0])
    picks, held_out = _fold_metric(values, in_fold, 2, "ndcg@10")
    # fold 0 selects on queries 0-1 (a and b tie at 0.5, c 0.2), fold 1 on 2-3 (all tie at 0.5)
    assert picks == [["a", "b"], ["a", "b", "c"]]
    assert held_out.tolist() == pytest.approx([(1 + 0 + 0.2) / 3, (0 + 1 + 0.2) / 3, 0.5, 0.5])
