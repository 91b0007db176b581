"""`ragbench datasets agreement`: one sweep on real and generated labels, and how alike they rank
its trials — τ-b and ρ equal scipy's, pairs, top-1 and top-3 counted by hand, swaps are exactly
the discordant pairs, runs resume, and bad input is one line with exit code 2."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from ragbench.cli import main
from ragbench.data.generate import IctMethod, generate
from ragbench.errors import DataError
from ragbench.evaluate.metrics import MetricSpec, register_metric, unregister_metric
from ragbench.experiment.store import RunStore
from ragbench.report.agreement import agreement, compare_rankings, run_agreement
from tests.paths import DEMO

HASHING = {"kind": "hashing", "dim": 256}
SWEEP = {
    "name": "agree",
    "dataset": {"path": str(DEMO)},
    "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
    "sweep": {
        "chunker": [{"kind": "recursive", "size": [400, 1200], "overlap": 0}],
        "embedder": [HASHING],
        "retriever": [
            {"kind": "bm25", "k1": [0.9, 1.5], "b": [0.4, 0.75]},
            {"kind": "dense"},
            {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 60}},
        ],
    },
}


# ---------------------------------------------------------------- the figures, by hand


def test_a_hand_checkable_pair_of_rankings() -> None:
    # real ranks a 1, b 2, c 2, d 4; synthetic b 1, a 2, c 3, d 3
    real = pd.Series({"a": 0.9, "b": 0.8, "c": 0.8, "d": 0.5})
    synthetic = pd.Series({"a": 0.7, "b": 0.9, "c": 0.6, "d": 0.6})
    found = compare_rankings(real, synthetic, "ndcg@10")
    assert found.trials["real_rank"].to_dict() == {"a": 1, "b": 2, "c": 2, "d": 4}
    assert found.trials["synthetic_rank"].to_dict() == {"a": 2, "b": 1, "c": 3, "d": 3}
    assert found.trials["change"].to_dict() == {"a": 1, "b": -1, "c": 1, "d": -1}
    # (a, b) swap; (a, c), (a, d), (b, d) agree; (b, c) tie on real, (c, d) on synthetic
    assert (found.concordant, found.discordant, found.tied) == (3, 1, 2)
    assert found.tau == pytest.approx(0.4)  # (3 - 1) / sqrt((6 - 1) * (6 - 1))
    assert found.tau == pytest.approx(stats.kendalltau(real, synthetic).statistic)
    assert found.rho == pytest.approx(stats.spearmanr(real, synthetic).statistic)
    assert (found.best("real"), found.best("synthetic"), found.same_best) == (["a"], ["b"], False)
    assert found.top_trials("synthetic") == ["b", "a", "c", "d"]  # c and d tie for third
    assert found.top_overlap == 3
    swap = found.swaps.iloc[0].to_dict()
    assert len(found.swaps) == 1
    assert (swap["ahead_on_real"], swap["ahead_on_synthetic"], swap["moved"]) == ("a", "b", 2)
    text = found.to_markdown()
    assert "| Kendall τ-b | 0.400 (p = " in text and "| top-3 overlap | 3 of 3 |" in text
    assert "| best on real | a (#2 on synthetic) |" in text


def test_lower_is_better_metrics_rank_the_lowest_first() -> None:
    def zeros(hits: object, judged: object, k: int | None, n: int) -> np.ndarray:
        return np.zeros(n)

    register_metric(MetricSpec("wait_rank", zeros, "A rank to wait for.", higher_is_better=False))
    try:
        found = compare_rankings(
            pd.Series({"a": 1.0, "b": 3.0}), pd.Series({"a": 2.0, "b": 1.0}), "wait_rank@5"
        )
    finally:
        unregister_metric("wait_rank")
    assert found.best("real") == ["a"] and found.best("synthetic") == ["b"]
    assert found.tau == pytest.approx(-1.0) and found.discordant == 1


def test_a_set_on_which_every_trial_ties_has_no_correlation() -> None:
    found = compare_rankings(
        pd.Series({"a": 1.0, "b": 0.5}), pd.Series({"a": 1.0, "b": 1.0}), "ndcg@10"
    )
    assert np.isnan(found.tau) and np.isnan(found.rho) and found.tied == 1
    assert "undefined: every trial ties on the synthetic set" in found.to_markdown()
    with pytest.raises(DataError, match="agreement needs two or more"):
        compare_rankings(pd.Series({"a": 1.0}), pd.Series({"a": 1.0}), "ndcg@10")


# ---------------------------------------------------------------- the demo set against ict


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The sweep on the demo set and on an ict set of its corpus, through the CLI with the
    default run directories; returns (working folder, config, what the CLI printed)."""
    root = tmp_path_factory.mktemp("agreement")
    generate(DEMO, root / "ict", IctMethod(), n=40)
    config = root / "sweep.yaml"
    config.write_text(yaml.safe_dump(SWEEP), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("RAGBENCH_CACHE", str(root / "cache"))
        printed = _cli(["demo", "ict", "--config", "sweep.yaml"])
    return root, config, printed


def _cli(args: list[str]) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["datasets", "agreement", *args]) == 0
    return out.getvalue()


def _means(run: Path, metric: str) -> pd.Series:
    trials = pd.read_parquet(run / "trials.parquet").set_index("trial_id")
    return trials.loc[trials["status"] == "ok", metric]


def test_the_figures_of_two_runs_equal_scipy_and_a_count_by_hand(
    demo_runs: tuple[Path, Path, str],
) -> None:
    root, _, printed = demo_runs
    real_dir, synthetic_dir = (
        root / "runs/agreement-agree/real",
        root / "runs/agreement-agree/synthetic",
    )
    for metric in ("ndcg@10", "recall@20"):
        real, synthetic = _means(real_dir, metric), _means(synthetic_dir, metric)
        synthetic = synthetic[real.index]
        assert len(real) == 12
        found = agreement(real_dir, synthetic_dir, metric)
        tau, rho = stats.kendalltau(real, synthetic), stats.spearmanr(real, synthetic)
        assert found.tau == pytest.approx(tau.statistic, abs=1e-12)
        assert found.tau_p == pytest.approx(tau.pvalue, abs=1e-12)
        assert found.rho == pytest.approx(rho.statistic, abs=1e-12)
        assert found.rho_p == pytest.approx(rho.pvalue, abs=1e-12)
        assert found.queries == (117, 40)
        signs = {
            (a, b): np.sign(real[a] - real[b]) * np.sign(synthetic[a] - synthetic[b])
            for a, b in itertools.combinations(real.index, 2)
        }
        assert found.concordant == sum(s > 0 for s in signs.values())
        assert found.tied == sum(s == 0 for s in signs.values())
        swapped = {frozenset(p) for p, s in signs.items() if s < 0}
        assert {
            frozenset(p)
            for p in zip(
                found.swaps["ahead_on_real"], found.swaps["ahead_on_synthetic"], strict=True
            )
        } == swapped
        for row in found.swaps.itertuples():
            assert real[row.ahead_on_real] > real[row.ahead_on_synthetic]
            assert synthetic[row.ahead_on_synthetic] > synthetic[row.ahead_on_real]
        assert list(found.swaps["moved"]) == sorted(found.swaps["moved"], reverse=True)
        assert set(found.best("real")) == set(real[real == real.max()].index)
        assert set(found.best("synthetic")) == set(synthetic[synthetic == synthetic.max()].index)
        top = {
            s: set(v[v.rank(method="min", ascending=False) <= 3].index)
            for s, v in (("real", real), ("synthetic", synthetic))
        }
        assert found.top_overlap == len(top["real"] & top["synthetic"])
    found = agreement(real_dir, synthetic_dir)  # the default: the first metric
    assert found.metric == "ndcg@10"
    where, _, figures = printed.partition("\n")
    runs = "runs/agreement-agree"
    assert where == f"Run directories: real {runs}/real, synthetic {runs}/synthetic."
    assert figures.strip() == found.to_markdown().partition("\n")[2].strip()
    assert f"| Kendall τ-b | {found.tau:.3f} (p = {found.tau_p:.2g}) |" in printed


def test_the_runs_resume_and_their_trials_are_not_run_again(
    demo_runs: tuple[Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, printed = demo_runs
    runs = root / "runs/agreement-agree"
    before = {s: pd.read_parquet(runs / s / "trials.parquet") for s in ("real", "synthetic")}
    monkeypatch.chdir(root)
    monkeypatch.setenv("RAGBENCH_CACHE", str(root / "cache"))
    again = _cli(["demo", "ict", "--config", "sweep.yaml", "--metric", "NDCG@10"])
    assert again == printed
    for name, trials in before.items():  # the same rows: the finished trials did not run again
        pd.testing.assert_frame_equal(pd.read_parquet(runs / name / "trials.parquet"), trials)


def test_a_trial_missing_from_one_run_is_left_out(
    demo_runs: tuple[Path, Path, str], tmp_path: Path
) -> None:
    root = demo_runs[0]
    runs = root / "runs/agreement-agree"
    shutil.copytree(runs / "synthetic", tmp_path / "synthetic")
    trials = pd.read_parquet(tmp_path / "synthetic/trials.parquet")
    dropped = trials.iloc[0]
    trials.iloc[1:].to_parquet(tmp_path / "synthetic/trials.parquet")
    found = agreement(runs / "real", tmp_path / "synthetic")
    assert len(found.trials) == 11 and found.left_out == (dropped["label"],)
    assert "left out, not finished on both sets" in found.to_markdown()


def test_library_runs_go_where_asked_and_overwrite(
    demo_runs: tuple[Path, Path, str], tmp_path: Path
) -> None:
    root, config, _ = demo_runs
    found = run_agreement(
        config,
        DEMO,
        root / "ict",
        out=tmp_path / "out",
        limit_queries=10,
        metric="recall@20",
        cache_root=root / "cache",
        progress=False,
    )
    assert found.runs == (tmp_path / "out/real", tmp_path / "out/synthetic")
    assert found.queries == (10, 10) and found.metric == "recall@20"
    assert RunStore(tmp_path / "out/real").manifest()["dataset"]["name"] == "demo"
    again = run_agreement(
        config,
        DEMO,
        root / "ict",
        out=tmp_path / "out",
        limit_queries=10,
        overwrite=True,
        cache_root=root / "cache",
        progress=False,
    )
    assert again.metric == "ndcg@10" and len(again.trials) == 12


# ---------------------------------------------------------------- bad input


def _one_line_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["datasets", "agreement", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_bad_input_is_one_line_with_exit_code_2(
    demo_runs: tuple[Path, Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, config, _ = demo_runs
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGBENCH_CACHE", str(root / "cache"))
    ict = str(root / "ict")
    err = _one_line_exit_2(["demo", ict, "--config", str(config), "--metric", "ndcg@x"], capsys)
    assert "--metric 'ndcg@x'" in err
    err = _one_line_exit_2(["demo", ict, "--config", str(config), "--metric", "map"], capsys)
    assert "--metric 'map': the config evaluates ndcg@10, recall@20" in err
    err = _one_line_exit_2(["demo", ict, "--config", str(tmp_path / "none.yaml")], capsys)
    assert "none.yaml" in err
    err = _one_line_exit_2(["demo", str(tmp_path / "missing"), "--config", str(config)], capsys)
    assert "missing: no such dataset path or name" in err
    assert not (tmp_path / "runs").exists()  # nothing ran before the second set was checked


def test_a_metric_a_set_cannot_score_is_named(
    demo_runs: tuple[Path, Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, _, _ = demo_runs
    folder = tmp_path / "docs"  # the demo corpus, labeled by hand at the document level
    shutil.copytree(DEMO / "corpus", folder)
    lines = [
        {"query": "how long are records kept?", "relevant": ["operations/retention.md"]},
        {"query": "which port serves clients?", "relevant": ["reference/ports-and-protocols.md"]},
    ]
    (folder / "queries.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), "utf-8")
    config = tmp_path / "sweep.yaml"
    spans = {**SWEEP, "evaluation": {"metrics": ["span_recall@5", "ndcg@10"], "depth": 20}}
    config.write_text(yaml.safe_dump(spans), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGBENCH_CACHE", str(root / "cache"))
    err = _one_line_exit_2([str(folder), str(root / "ict"), "--config", str(config)], capsys)
    assert "span metrics need span evidence" in err and str(folder) in err
    runs = root / "runs/agreement-agree"
    with pytest.raises(
        DataError,
        match=r"real: --metric 'map' was not evaluated; the run evaluated ndcg@10, recall@20",
    ):
        agreement(runs / "real", runs / "synthetic", "map")
