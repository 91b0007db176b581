"""Reports: significance-tested tables, exports, drill-down, HTML in headless Chromium, compare."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from ragbench.cli import main
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.significance import compare
from ragbench.experiment.runner import run
from ragbench.report.compare import compare_runs
from ragbench.report.drilldown import drilldown
from ragbench.report.report import Report
from tests.paths import DEMO, REPO, require

ARTIFACTS = REPO / "test-artifacts"


def _config(name: str = "rep", depth: int = 20, metrics: tuple = ("ndcg@10", "recall@20")) -> dict:
    return {
        "name": name,
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": list(metrics), "depth": depth},
        "baseline": "bm25(k1=0.9, b=0.4) | recursive(size=300)",
        "sweep": {
            "chunker": [{"kind": "recursive", "size": [300, 900]}],
            "embedder": [{"kind": "hashing"}],
            "retriever": [
                {"kind": "bm25", "k1": [0.9, 1.5], "b": [0.4, 0.9]},
                {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 10}},
            ],
        },
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    return run(_config(), root / "run", cache_root=root / "cache", progress=False).path


def test_table_statistics_and_exports(run_dir: Path, tmp_path: Path) -> None:
    report = Report.from_run(run_dir)
    assert report.label(report.baseline) == "bm25(k1=0.9, b=0.4) | recursive(size=300)"
    frame = report.to_dataframe()
    assert len(frame) == 10 and frame["ndcg@10"].is_monotonic_decreasing
    expected = compare(report.store.per_query(), report.baseline, "ndcg@10")
    for trial_id, row in frame.iterrows():
        assert row["ndcg@10"] == pytest.approx(expected.loc[trial_id, "mean"])
        assert row["ndcg@10 ci_low"] <= row["ndcg@10"] <= row["ndcg@10 ci_high"]
        assert row["ndcg@10 p_adj"] == pytest.approx(
            expected.loc[trial_id, "p_adjusted"], nan_ok=True
        )
    shown = report.display_table()
    assert shown.loc[report.baseline, "ndcg@10"].endswith("(base)")
    marked = shown["ndcg@10"].str.contains("▲|▼")
    assert marked.sum() == frame["ndcg@10 sig"].sum()
    markdown = report.to_markdown()
    assert markdown.count("\n") == len(frame) + 1 and "| trial |" in markdown
    latex = report.to_latex()
    assert latex.startswith(r"\begin{tabular}") and latex.count(r"\\") == len(frame) + 1
    assert r"\_" not in latex.split(r"\midrule")[0] or "index build s" in latex
    csv = pd.read_csv(report.to_csv(tmp_path / "t.csv"), index_col=0)
    assert list(csv.index) == list(frame.index)


def test_drilldown_lists_the_largest_differences(run_dir: Path) -> None:
    report = Report.from_run(run_dir)
    drill = report.drilldown(n=5)
    assert len(drill) == 5
    deltas = drill["delta"].abs().tolist()
    assert deltas == sorted(deltas, reverse=True) and all(d > 0 for d in deltas)
    first = drill.iloc[0]
    assert first["query"] and first["gold"]["evidence"] and first["top_a"] and first["top_b"]
    assert first["top_a"][0]["rank"] == 1


def test_write_html_markdown_and_plots(run_dir: Path, tmp_path: Path) -> None:
    paths = Report.from_run(run_dir).write(("html", "md", "latex"), out=tmp_path)
    page = paths["html"].read_text()
    images = re.findall(r"<img src='([^']+)'", page)
    assert len(images) >= 4 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not re.search(r"""(src|href)=["']https?://""", page)  # self-contained
    for needle in (
        "<table class='trials'>",
        "Drill-down",
        "Environment",
        "Config",
        "dataset fingerprint",
    ):
        assert needle in page
    md = paths["md"].read_text()
    pngs = sorted(p.name for p in (tmp_path / "plots").glob("*.png"))
    assert pngs and all(f"plots/{name}" in md for name in pngs)
    assert any(name.startswith("heatmap_retriever.k1_retriever.b") for name in pngs)
    assert paths["latex"].read_text().startswith(r"\begin{tabular}")


def test_html_report_renders_in_headless_chromium(run_dir: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    page = Report.from_run(run_dir).write(("html",), out=tmp_path)["html"]
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=5000",
    ]
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    total = int(re.search(r'data-images="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    loaded = int(re.search(r'data-images-loaded="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    assert total >= 4 and loaded == total
    assert dom.count("<table") >= 3 and "trials" in dom
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    subprocess.run(
        [chromium, *flags, "--window-size=1300,3000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_warns_when_runs_differ(run_dir: Path, tmp_path: Path) -> None:
    other = run(
        _config("other", depth=10, metrics=("ndcg@5", "recall@10")),
        tmp_path / "o",
        cache_root=tmp_path / "c",
        progress=False,
    ).path
    table, warnings = compare_runs([run_dir, run_dir])
    assert warnings == [] and len(table) == 10  # the same run named twice counts once
    table, warnings = compare_runs([run_dir, other], metric="ndcg@10")
    text = " ".join(warnings)
    assert "differ in depth" in text and "ndcg at different cutoffs" in text
    assert set(table["run"]) == {"rep"}  # the other run has no ndcg@10


def test_cli_report_and_compare(run_dir: Path, tmp_path: Path, capsys) -> None:
    assert main(["report", str(run_dir), "--format", "md", "--baseline", "hybrid"]) == 0
    out = capsys.readouterr().out
    assert "report.md" in out and "(base)" in out
    assert main(["report", str(tmp_path)]) == 2
    assert "not a ragbench run directory" in capsys.readouterr().err
    assert main(["report", str(run_dir), "--baseline", "no-such-trial"]) == 2
    assert main(["report", str(run_dir), "--metric", "map"]) == 2
    assert main(["compare", str(run_dir), str(run_dir)]) == 0
    assert "rep" in capsys.readouterr().out


def _unfinished(run_dir: Path, folder: Path) -> Path:
    """A run directory whose sweep wrote its manifest but finished no trial."""
    folder.mkdir()
    shutil.copy(run_dir / "manifest.json", folder / "manifest.json")
    return folder


def test_report_errors_are_raised_where_found(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^--metric 'bogus': the run evaluated ndcg@10, recall@20$"
    ):
        Report.from_run(run_dir, metric="bogus")
    with pytest.raises(
        ConfigError, match=r"^--baseline 'no-such-trial': matches no finished trial"
    ):
        Report.from_run(run_dir, baseline="no-such-trial")
    empty = _unfinished(run_dir, tmp_path / "empty")
    with pytest.raises(DataError, match=rf"^{re.escape(str(empty))}: no finished trial to report"):
        Report.from_run(empty)
    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["config"]["baseline"] = "no-such-label"
    (moved / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"manifest\.json: the config's baseline 'no-such-label'"):
        Report.from_run(moved)


def test_compare_and_drilldown_errors_are_raised_where_found(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--metric 'map': no run evaluated it"):
        compare_runs([run_dir], metric="map")
    with pytest.raises(ConfigError, match="at least one run directory"):
        compare_runs([])
    empty = _unfinished(run_dir, tmp_path / "empty")
    with pytest.raises(DataError, match=rf"^{re.escape(str(empty))}: no finished trial with"):
        compare_runs([empty])
    table, _ = compare_runs([run_dir, empty])  # one run with finished trials is enough
    assert len(table) == 10
    report = Report.from_run(run_dir)
    with pytest.raises(ConfigError, match=r"^metric 'map': the run .* evaluated ndcg@10"):
        drilldown(run_dir, report.baseline, report.best, "map")
    with pytest.raises(
        DataError, match=r"per_query\.parquet: no 'ndcg@10' values for trial\(s\) zz"
    ):
        drilldown(run_dir, report.baseline, "zz", "ndcg@10")


def test_cli_report_and_compare_errors_are_one_line_naming_the_flag_or_run(
    run_dir: Path, tmp_path: Path, capsys
) -> None:
    empty = _unfinished(run_dir, tmp_path / "empty")
    for args, start in (
        (["report", str(run_dir), "--metric", "bogus"], "ragbench report: --metric 'bogus'"),
        (["report", str(run_dir), "--baseline", "zz"], "ragbench report: --baseline 'zz'"),
        (["report", str(empty)], f"ragbench report: {empty}: no finished trial"),
        (["compare", str(run_dir), "--metric", "map"], "ragbench compare: --metric 'map'"),
        (["compare", str(empty)], f"ragbench compare: {empty}: no finished trial"),
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(start) and err.count("\n") == 1, err


def test_cli_does_not_turn_library_bugs_into_user_errors(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr("ragbench.report.compare.compare_runs", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["compare", str(run_dir)])


def test_metric_spellings_and_a_one_query_run(tmp_path: Path, capsys) -> None:
    import yaml

    from ragbench.cli import main

    config = {
        "name": "one",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
        "sweep": {"chunker": [{"kind": "none"}], "retriever": [{"kind": "bm25", "b": [0.4, 0.75]}]},
    }
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    out = tmp_path / "one"
    assert main(["run", str(path), "--out", str(out), "--limit-queries", "1"]) == 0
    err = capsys.readouterr().err
    assert "report skipped:" in err and "needs at least 2 queries; this run has 1" in err
    assert (out / "trials.parquet").is_file()  # the trials are kept
    two = tmp_path / "two"
    assert main(["run", str(path), "--out", str(two), "--limit-queries", "5"]) == 0
    capsys.readouterr()
    assert main(["report", str(two), "--metric", "NDCG@10", "--format", "md"]) == 0
    assert main(["compare", str(two), "--metric", "NDCG@10"]) == 0
