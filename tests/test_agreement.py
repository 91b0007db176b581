"""`ragbench datasets agreement`: one sweep on real and generated labels, and how alike they rank
its trials — τ-b and ρ equal scipy's, pairs, top-1 and top-3 counted by hand, swaps are exactly
the discordant pairs, ties are shown as ties, the regret and τ-b's bootstrap interval behave as
worked out by hand, runs resume, and bad input is one line with exit code 2."""

from __future__ import annotations

import itertools
import json
import shutil
import warnings
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
from ragbench.report.agreement import (
    _tau_b,
    agreement,
    compare_rankings,
    run_agreement,
    tau_interval,
)
from ragbench.report.confidence import pick_confidence
from ragbench.report.tables import md_text
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
    assert found.regret == pytest.approx(-0.1)  # b scores 0.8 on real, the real best a 0.9
    assert found.top_trials("synthetic") == ["b", "a", "c", "d"]  # c and d tie for third
    assert found.top_overlap == 3
    swap = found.swaps.iloc[0].to_dict()
    assert len(found.swaps) == 1
    assert (swap["ahead_on_real"], swap["ahead_on_synthetic"], swap["moved"]) == ("a", "b", 2)
    text = found.to_markdown()
    assert "| Kendall τ-b | 0.400 (p = " in text and "| top-3 overlap | 3 of 3 |" in text
    assert "| best on real | a (#2 on synthetic) |" in text
    regret = "-0.1000 ndcg@10 on real labels (b: 0.8000; the real best: 0.9000)"
    assert f"| regret of the synthetic pick | {regret} |" in text
    assert found.tau_ci is None and "95% CI" not in text  # no per-query values given


def test_a_tie_for_first_is_not_a_pick() -> None:
    # the synthetic set ties a and d for first; the real set's best is a
    real = pd.Series({"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.5})
    synthetic = pd.Series({"a": 0.6, "b": 0.4, "c": 0.3, "d": 0.6})
    found = compare_rankings(real, synthetic, "ndcg@10")
    assert found.best("synthetic") == ["a", "d"] and not found.same_best
    assert found.regret == pytest.approx((0.9 + 0.5) / 2 - 0.9)  # the tied trials' real mean
    text = found.to_markdown()
    assert "| best on synthetic | tie: a (#1 on real) and d (#4 on real) at 0.6000 |" in text
    assert (
        "| same best trial | no pick to compare: the synthetic set ties 2 trials for first |"
        in (text)
    )
    assert "0.2000 ndcg@10 on real labels (the mean of the 2 trials tied on synthetic: 0.7000" in (
        text
    )
    same = compare_rankings(real, real, "ndcg@10")
    assert same.same_best and same.regret == 0
    assert "| regret of the synthetic pick | 0 (a is the best on real too) |" in same.to_markdown()


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
    # the pick b is 3.0 on real where the real best a is 1.0: 2.0 worse, with the direction
    # read when the metric was parsed (it is no longer registered here)
    assert found.regret == pytest.approx(-2.0)


def test_a_set_on_which_every_trial_ties_has_no_correlation() -> None:
    found = compare_rankings(
        pd.Series({"a": 1.0, "b": 0.5}), pd.Series({"a": 1.0, "b": 1.0}), "ndcg@10"
    )
    assert np.isnan(found.tau) and np.isnan(found.rho) and found.tied == 1
    assert "undefined: every trial ties on the synthetic set" in found.to_markdown()
    with pytest.raises(DataError, match="agreement needs two or more"):
        compare_rankings(pd.Series({"a": 1.0}), pd.Series({"a": 1.0}), "ndcg@10")


# ---------------------------------------------------------------- τ-b's bootstrap interval


def _sets(queries: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Five trials whose true means rise by 0.05, scored with noise on two sets of queries."""
    rng = np.random.default_rng(seed)
    true = np.array([0.5, 0.55, 0.6, 0.65, 0.7])
    frames = [
        pd.DataFrame(true + rng.normal(0, 0.25, (queries, 5)), columns=list("abcde"))
        for _ in range(2)
    ]
    return frames[0], frames[1]


def test_the_tau_interval_holds_the_estimate_and_shrinks_with_more_queries() -> None:
    widths = []
    for queries in (20, 2000):
        real, synthetic = _sets(queries, seed=queries)
        point = stats.kendalltau(real.mean(), synthetic.mean()).statistic
        low, high = tau_interval(real, synthetic, n_resamples=1000, seed=2)
        assert -1 <= low <= point + 1e-12 and point - 1e-12 <= high <= 1  # scipy rounds 1
        widths.append(high - low)
    assert widths[1] < widths[0] / 2
    # trials apart on every query: every resample orders them alike, τ-b is 1 throughout
    ordered = pd.DataFrame(np.arange(4) + np.random.default_rng(0).random((30, 1)) / 2)
    assert tau_interval(ordered, ordered[::-1].reset_index(drop=True)) == (1.0, 1.0)
    with pytest.raises(ValueError, match="same trials"):
        tau_interval(ordered, ordered.rename(columns={0: 9}))


def test_the_vectorised_tau_b_equals_scipy_with_ties() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.integers(0, 4, (200, 7)).astype(float), rng.integers(0, 4, (200, 7)).astype(float)
    x[0], y[1] = 2.0, 1.0  # every trial tied on one set: undefined
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        expected = [stats.kendalltau(a, b).statistic for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(_tau_b(x, y), expected, rtol=1e-12, atol=1e-12)


def test_per_query_values_give_the_interval_and_each_sets_confidence() -> None:
    real, synthetic = _sets(60, seed=1)
    found = compare_rankings(
        real.mean(), synthetic.mean(), "ndcg@10", per_query=(real, synthetic), n_resamples=400
    )
    assert found.tau_ci == tau_interval(real, synthetic, n_resamples=400)
    for i, name in enumerate(("real", "synthetic")):
        table = (real, synthetic)[i]
        expected = pick_confidence(table, "ndcg@10", n_resamples=400, seed=i)
        assert found.confidence[name].p_best.to_dict() == expected.p_best.to_dict()
        line = f"| confidence on {name} | {expected.line()} |"
        assert line in found.to_markdown()
    low, high = found.tau_ci
    assert f"| Kendall τ-b | {found.tau:.3f} (95% CI {low:.3f} to {high:.3f}; p = " in (
        found.to_markdown()
    )


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
    low, high = found.tau_ci or (np.nan, np.nan)
    assert low <= found.tau <= high
    assert f"| Kendall τ-b | {found.tau:.3f} (95% CI {low:.3f} to {high:.3f}; p = " in printed
    per_query = pd.read_parquet(synthetic_dir / "per_query.parquet")
    values = per_query[per_query["metric"] == "ndcg@10"].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    labels = found.trials["label"].to_dict()
    expected = pick_confidence(values[list(found.trials.index)], "ndcg@10", labels, seed=1)
    assert found.confidence["synthetic"].p_best.to_dict() == expected.p_best.to_dict()
    shown = md_text(expected.line())
    assert expected.queries == 40 and f"| confidence on synthetic | {shown} |" in printed
    real, synthetic = _means(real_dir, "ndcg@10"), _means(synthetic_dir, "ndcg@10")
    picked = synthetic[synthetic == synthetic.max()].index
    assert found.regret == pytest.approx(real[picked].mean() - real.max())


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
    assert "missing: no such folder" in err
    assert not (tmp_path / "runs").exists()  # nothing ran before the second set was checked
    with pytest.raises(SystemExit) as stop:
        main(["datasets", "agreement", "demo", ict, "--config", str(config), "--resamples", "0"])
    assert (
        stop.value.code == 2 and "--resamples: expected an integer >= 1" in capsys.readouterr().err
    )


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
