"""Reports: significance-tested tables, exports, drill-down, HTML in headless Chromium, compare."""

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ragbench.cli import main
from ragbench.data.generate import IctMethod, generate
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.significance import bootstrap_ci, compare
from ragbench.experiment.runner import dry_run, run
from ragbench.report.compare import compare_runs
from ragbench.report.confidence import pick_confidence
from ragbench.report.drilldown import drilldown
from ragbench.report.figures import VARYING, Plot
from ragbench.report.grids import grid_problem, heatmap_pairs, is_trend, together
from ragbench.report.html import inline_html, render_html
from ragbench.report.markdown import recommendation_line, summary_lines
from ragbench.report.plots import heatmap, metric_vs_chunk_size
from ragbench.report.report import Report
from tests.paths import DEMO, REPO, require

HASHING = {"kind": "hashing", "dim": 256}
SAME_MODEL_RERANK = {"kind": "dense", "candidates": 20, "embedder": HASHING}


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


def _wide_config() -> dict:
    """Quickstart-like: long labels, four metrics, a rerank axis (with redundant trials)."""
    return {
        "name": "wide",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20", "mrr@10", "span_recall@5"], "depth": 20},
        "baseline": "bm25 | recursive(size=400)",
        "sweep": {
            "chunker": [
                {"kind": "recursive", "size": [400, 1200], "overlap": 0},
                {"kind": "sentence", "size": 600, "overlap": 100},
            ],
            "embedder": [HASHING],
            "retriever": [
                {"kind": "bm25"},
                {"kind": "dense"},
                {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 60}},
            ],
            "reranker": [{"kind": "none"}, SAME_MODEL_RERANK],
        },
    }


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wide")
    cache = root / "cache"
    return run(
        _wide_config(), root / "run", cache_root=cache, limit_queries=40, progress=False
    ).path


def _trial_rows(page: str) -> dict[str, list[str]]:
    """Per trial id, the classes of the cells of its row in the first trial table."""
    table = page.split("<table class='trials'>")[1].split("</table>")[0]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1]):
        trial_id = re.search(r"<code class='id'>([^<]+)</code>", row).group(1)  # type: ignore[union-attr]
        rows[trial_id] = re.findall(r"<td class='([^']*)'", row)
    return rows


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


def test_when_the_baseline_wins_the_drilldown_shows_the_runner_up(
    run_dir: Path, tmp_path: Path
) -> None:
    best = Report.from_run(run_dir).best
    report = Report.from_run(run_dir, baseline=best)
    means = report.stats.loc[report.metric]["mean"]
    assert report.best == report.baseline and report.contender == means.drop(best).idxmax()
    drill = report.drilldown(n=3)
    assert len(drill) == 3 and (drill["delta"] != 0).all()  # best against the runner-up
    paths = report.write(("md",), tmp_path / "out")
    text = paths["md"].read_text()
    assert "and the runner-up differ most" in text and "runner-up answer" not in text


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


def test_a_rewritten_report_reads_its_plots_from_the_cache(run_dir: Path, tmp_path: Path) -> None:
    first = Report.from_run(run_dir).write(("md",), out=tmp_path / "first")
    drawn = {p.name: p.read_bytes() for p in (tmp_path / "first" / "plots").glob("*.png")}
    assert drawn and first["md"].is_file()
    # a new process writes the same report without importing matplotlib
    out = str(tmp_path / "again")
    script = (
        "import sys; from ragbench.report.report import Report; "
        f"Report.from_run({str(run_dir)!r}).write(('md', 'html'), out={out!r}); "
        "print('matplotlib' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    again = {p.name: p.read_bytes() for p in (tmp_path / "again" / "plots").glob("*.png")}
    assert again == drawn


def test_a_plot_key_follows_what_it_draws_not_the_run_that_drew_it(run_dir: Path) -> None:
    report = Report.from_run(run_dir)
    plots = {p.name: p for p in report.plots()}
    pareto = plots["pareto"]
    trials = pareto.args[0]
    assert not set(VARYING) & set(trials.columns)
    same = Plot(pareto.name, pareto.function, (trials.copy(), *pareto.args[1:]), pareto.kwargs)
    assert same.key() == pareto.key()
    moved = trials.copy()
    moved.loc[0, report.metric] += 1e-6
    changed = Plot(pareto.name, pareto.function, (moved, *pareto.args[1:]), pareto.kwargs)
    assert changed.key() != pareto.key()
    other = Plot(pareto.name, pareto.function, pareto.args, {"baseline": report.best})
    assert (other.key() == pareto.key()) == (report.best == report.baseline)


# Appended to a copy of the report: writes what the test asserts into the DOM it dumps
# (backticks: in the report's own text, as a document's text may hold some).
PROBE = """<script>
window.addEventListener('load', function () {
  var root = document.documentElement, body = document.body;
  var boxes = Array.prototype.slice.call(document.querySelectorAll('.wide'));
  var spill = boxes.map(function (b) { return b.scrollWidth - b.clientWidth; });
  body.setAttribute('data-scroll-width', root.scrollWidth);
  body.setAttribute('data-inner-width', window.innerWidth);
  body.setAttribute('data-table-spill', Math.max.apply(null, spill.concat([0])));
  var headline = document.getElementById('headline').getBoundingClientRect();
  body.setAttribute('data-headline-top', Math.floor(headline.top + window.scrollY));
  body.setAttribute('data-headline-bottom', Math.ceil(headline.bottom + window.scrollY));
  // the report's own text: not the documents' (chunks, answers) nor the config
  var own = body.cloneNode(true);
  own.querySelectorAll('script, pre, .chunk, .answer').forEach(function (e) { e.remove(); });
  body.setAttribute('data-backticks', (own.textContent.match(/`/g) || []).length);
});
</script>"""


def _artifact(path: Path) -> None:
    """Keep ``path`` beyond the test: copied into ``$RAGBENCH_TEST_ARTIFACTS`` when set."""
    folder = os.environ.get("RAGBENCH_TEST_ARTIFACTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(folder) / path.name)


def test_html_report_renders_in_headless_chromium(wide_run: Path, tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (.ci/run installs it)")
    page = Report.from_run(wide_run).write(("html",), out=tmp_path)["html"]
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"), encoding="utf-8")
    for width in (1280, 1400):
        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / f'profile-{width}'}",
            "--virtual-time-budget=5000",
        ]
        dom = subprocess.run(
            [chromium, *flags, f"--window-size={width},900", "--dump-dom", probe.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        found = dict(re.findall(r'data-([a-z-]+)="(\d+)"', dom))
        assert int(found["images"]) >= 4 and found["images-loaded"] == found["images"]
        assert dom.count("<table") >= 3 and "trials" in dom
        assert int(found["inner-width"]) == width
        assert int(found["scroll-width"]) <= width, (width, found)  # nothing past the edge
        assert found["table-spill"] == "0", (width, found)  # no table needs its scroll bar
        assert found["backticks"] == "0"  # Markdown code spans became <code>
        # the first screen holds the answer: the headline block lies within the first 900 px
        # of the page (a 1400 × 900 screen; the window's own bars take part of its height)
        assert 0 < int(found["headline-top"]) < int(found["headline-bottom"]) <= 900, found
        shot = tmp_path / f"report-{width}.png"
        subprocess.run(
            [
                chromium,
                *flags,
                f"--window-size={width},3000",
                f"--screenshot={shot}",
                page.as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        _artifact(shot)


def test_summary_renders_markdown_code_as_html_and_recommends(
    wide_run: Path, tmp_path: Path
) -> None:
    report = Report.from_run(wide_run)
    paths = report.write(("html", "md"), out=tmp_path)
    page, md = paths["html"].read_text(), paths["md"].read_text()
    summary = page.split("<h2>Summary</h2>")[1].split("<h2>")[0]
    assert "`" not in summary and "**" not in summary
    assert f"<code>{report.name(report.baseline)}</code>" in summary
    assert "<code>ragbench run --remeasure-latency</code>" in summary
    pick = report.recommendation()
    line = next(x for x in md.splitlines() if x.startswith("- **Recommendation**"))
    assert f"best overall `{report.name(pick.best)}`" in line
    stats = report.stats.loc[report.metric]
    interval = f"[95% CI {stats['ci_low'][pick.best]:.4f}–{stats['ci_high'][pick.best]:.4f}]"
    assert f"{report.metric} {stats['mean'][pick.best]:.4f} {interval}" in line
    assert "within the baseline's latency (p50 total ≤" in line
    assert pick.within is not None and report.name(pick.within) in line
    assert "<li class='pick'><b>Recommendation</b>: best overall" in summary
    assert inline_html("`` a`b `` **x** \\| &amp;") == "<code>a`b</code> <b>x</b> | &amp;"


def test_the_recommendation_respects_the_latency(wide_run: Path) -> None:
    report = Report.from_run(wide_run)
    trials = report.trials.set_index("trial_id")
    p50 = trials["latency.total.p50_ms"]
    means = report.stats.loc[report.metric]["mean"]
    pick = report.recommendation()
    assert pick.bound == "baseline" and pick.bound_ms == p50[report.baseline]
    assert means[pick.best] == means.max()
    fast = means[p50 <= pick.bound_ms]
    assert pick.within in fast.index and means[pick.within] == fast.max()
    slowest = float(p50.max())
    budget = Report.from_run(wide_run, latency_budget_ms=slowest).recommendation()
    assert budget.bound == "budget" and budget.within == budget.best == pick.best
    none = Report.from_run(wide_run, latency_budget_ms=float(p50.min()) / 2).recommendation()
    assert none.within is None
    with pytest.raises(ConfigError, match=r"^--latency-budget -1: must be a positive"):
        Report.from_run(wide_run, latency_budget_ms=-1.0)


def test_redundant_trials_are_flagged_in_the_dry_run_and_the_report(
    wide_run: Path, tmp_path: Path
) -> None:
    config = _wide_config()
    planned = dry_run(config, limit_queries=40, cache_root=tmp_path / "cache")
    flagged = planned[planned["redundant"] != "-"]
    assert len(flagged) == 3  # dense retrieval reranked by its own embedder, per chunking
    assert all(
        label.startswith("dense |") and "rerank:dense" in label for label in flagged["label"]
    )
    report = Report.from_run(wide_run)
    assert set(report.redundant) == set(flagged["trial_id"])
    values = report.per_query.pivot_table(
        index=["metric", "query_id"], columns="trial_id", values="value"
    )
    for trial_id in report.redundant:  # it ranks as its twin without the reranker
        label = report.label(trial_id).rsplit(" | rerank:", 1)[0]
        twin = report.trials.loc[report.trials["label"] == label, "trial_id"].item()
        assert (values[trial_id] == values[twin]).all()
    page = report.write(("html", "md"), out=tmp_path / "out")["html"].read_text()
    assert page.count("<span class='note'>redundant: ") == 3
    md = (tmp_path / "out" / "report.md").read_text()
    assert "- **3 redundant trial(s)** cannot differ from another trial" in md


def test_every_trial_tied_for_best_is_highlighted(tmp_path: Path) -> None:
    config = {
        "name": "ties",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": [400, 1200]}],
            "embedder": [HASHING],
            "retriever": [{"kind": "dense"}],
            "reranker": [{"kind": "none"}, SAME_MODEL_RERANK],
        },
    }
    out = run(config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=20, progress=False)
    report = Report.from_run(out.path)
    numeric = report.to_dataframe()
    rows = _trial_rows(report.write(("html",), out=tmp_path / "out")["html"].read_text())
    for column, metric in enumerate(report.metrics, start=2):  # after "#" and "trial"
        best = set(numeric.index[numeric[metric] == numeric[metric].max()])
        assert len(best) == 2  # each chunking's trial with and without the same-model rerank
        assert {t for t, classes in rows.items() if "best" in classes[column]} == best
    md = report.write(("md",), out=tmp_path / "md")["md"].read_text()
    for metric in report.metrics:
        line = next(x for x in md.splitlines() if x.startswith(f"- **{metric}**"))
        assert line.endswith("tied with 1 other trial(s))"), line
    # a tie is not a pick: the recommendation names both, and the bootstrap cannot separate them
    pick = report.recommendation()
    means = numeric[report.metric]
    assert set(pick.tied) == best == set(means.index[means == means.max()]) and pick.best in best
    p50 = report.trials.set_index("trial_id")["latency.total.p50_ms"]
    other = next(t for t in pick.tied if t != pick.best)
    assert p50[pick.best] <= p50[other]  # the fastest of the tie
    names = " and ".join(f"`{report.name(t)}`" for t in pick.tied)
    tie = f"tie: {names} at {means.max():.4f}"
    line = next(x for x in md.splitlines() if x.startswith("- **Recommendation**"))
    if p50[pick.best] < p50[other]:
        assert f"best overall `{report.name(pick.best)}` (" in line
        assert f"; the fastest in a {tie})" in line
    else:
        assert f"best overall {tie} ({report.metric}; latency does not separate them)" in line
    confidence = report.confidence
    assert confidence.p_best[pick.tied[0]] == confidence.p_best[pick.tied[1]]
    assert set(confidence.leaders) >= best and not confidence.separated
    shown = next(x for x in md.splitlines() if x.startswith("- **Confidence in the pick**"))
    assert shown.startswith(f"- **Confidence in the pick** ({report.metric}): cannot separate `")
    for trial_id in pick.tied:
        assert f"`{report.name(trial_id)}` ({confidence.p_best[trial_id]:.0%})" in shown


def test_the_confidence_on_the_pick_is_the_bootstrap_share_of_best(run_dir: Path) -> None:
    report = Report.from_run(run_dir)
    per_query = pd.read_parquet(run_dir / "per_query.parquet")
    values = per_query[per_query["metric"] == "ndcg@10"].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    labels = dict(zip(report.trials["trial_id"], report.trials["label"], strict=True))
    expected = pick_confidence(values, "ndcg@10", labels, n_resamples=report.n_resamples)
    assert report.confidence.p_best.to_dict() == expected.p_best.to_dict()
    assert report.confidence.queries == 117 and report.confidence.n_resamples == 10_000
    lines = summary_lines(report)
    at = next(i for i, x in enumerate(lines) if x.startswith("- **Recommendation**"))
    assert lines[at + 1] == (
        "- **Confidence in the pick** (ndcg@10): "
        + expected.line(lambda t: f"`{report.name(t)}`")
        + "."
    )
    assert not any("Labels: generated" in x for x in lines)  # the demo's labels were written
    page = render_html(report, {})
    assert "<li class='pick'><b>Confidence in the pick</b> (ndcg@10): " in page


def test_the_report_says_when_the_labels_were_generated(tmp_path: Path) -> None:
    generate(require(DEMO), tmp_path / "ict", IctMethod(), n=30)
    config = {
        "name": "gen",
        "dataset": {"path": str(tmp_path / "ict")},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 20},
        "sweep": {"chunker": [{"kind": "none"}], "retriever": [{"kind": "bm25", "b": [0.4, 0.9]}]},
    }
    out = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False).path
    queries = pd.read_parquet(out / "queries.parquet")
    assert set(queries["method"]) == {"ict"} and len(queries) == 30
    report = Report.from_run(out)
    assert report.generated_labels == {"ict": 30}
    md = report.write(("md", "html"), out=tmp_path / "out")
    line = "- **Labels: generated** (ict), 30 queries: the pick holds as far as these labels"
    assert line in md["md"].read_text()
    assert "<li class='caveat'><b>Labels: generated</b> (ict), 30 queries" in md["html"].read_text()


def test_a_run_without_a_latency_pass_reports_without_latency_columns(tmp_path: Path) -> None:
    config = {**_config("nolat"), "latency": {"queries": 0}}
    config["sweep"] = {
        "chunker": [{"kind": "none"}],
        "retriever": [{"kind": "bm25", "b": [0.4, 0.9]}],
    }
    config["baseline"] = None
    out = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False).path
    report = Report.from_run(out)
    shown = report.display_table(stages=True)
    assert len(shown) == 2 and not any("ms" in column for column in shown.columns)
    written = report.write(("md", "html"), out=tmp_path / "out")
    assert "ndcg@10" in written["md"].read_text()


def test_cli_dry_run_flags_redundant_trials(tmp_path: Path, capsys, monkeypatch) -> None:
    import yaml

    monkeypatch.setenv("RAGBENCH_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(_wide_config()), encoding="utf-8")
    assert main(["run", str(path), "--dry-run", "--limit-queries", "5"]) == 0
    captured = capsys.readouterr()
    assert "redundant" in captured.out.splitlines()[0]
    assert captured.out.count("dense rerank with the retriever's own embedder") == 3
    assert captured.err.startswith("3 redundant trial(s): they cannot rank differently")
    quickstart = dry_run(REPO / "experiments" / "quickstart.yaml", cache_root=tmp_path / "cache")
    assert (quickstart["redundant"] == "-").all()


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


def test_cli_report_and_compare(
    run_dir: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # reports/ is made in the current folder
    assert main(["report", str(run_dir), "--format", "md", "--baseline", "hybrid"]) == 0
    out = capsys.readouterr().out
    written = Path("reports") / run_dir.name / "report.md"
    assert f"md     {written}" in out and "(base)" in out and written.is_file()
    assert not (run_dir / "report.md").exists()  # the run directory is left as it was
    assert main(["report", str(run_dir), "--format", "md", "--out", "elsewhere"]) == 0
    assert Path("elsewhere/report.md").is_file()
    assert main(["report", str(tmp_path)]) == 2
    assert "not a ragbench run directory" in capsys.readouterr().err
    assert main(["report", str(run_dir), "--baseline", "no-such-trial"]) == 2
    assert main(["report", str(run_dir), "--metric", "map"]) == 2
    assert main(["compare", str(run_dir), str(run_dir)]) == 0
    printed = capsys.readouterr()
    compared = Path("reports") / f"{run_dir.name}-2"  # reports/<name> holds the run's report
    assert f"csv    {compared / 'compare.csv'}" in printed.out
    assert f"this comparison goes to {compared}" in printed.err, printed.err
    table = pd.read_csv(compared / "compare.csv")
    assert len(table) == 10 and table["ndcg@10"].is_monotonic_decreasing
    header = "# Comparison\n\n| run | documents | trial_id |"
    assert (compared / "compare.md").read_text().startswith(header)
    other = tmp_path / "other"
    shutil.copytree(run_dir, other)
    assert main(["compare", str(run_dir), str(other), "--out", "cmp"]) == 0
    assert Path("cmp/compare.md").is_file()
    assert main(["compare", str(run_dir), str(other)]) == 0
    assert (Path("reports") / f"{run_dir.name}-vs-other" / "compare.csv").is_file()


def test_cli_latency_budget(run_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    p50 = Report.from_run(run_dir).trials["latency.total.p50_ms"]
    budget = f"{float(p50.max()) * 2:g}"
    assert main(["report", str(run_dir), "--format", "md", "--latency-budget", budget]) == 0
    md = (Path("reports") / run_dir.name / "report.md").read_text()
    assert f"within the latency budget (p50 total ≤ {budget} ms)" in md
    for bad in ("0", "-5", "fast", "inf"):
        with pytest.raises(SystemExit) as stop:
            main(["report", str(run_dir), "--latency-budget", bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "argument --latency-budget: expected a positive number of milliseconds" in err


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


def test_metric_spellings_and_a_one_query_run(tmp_path: Path, capsys, monkeypatch) -> None:
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
    monkeypatch.chdir(tmp_path)  # where reports/ goes
    assert main(["run", str(path), "--out", str(two), "--limit-queries", "5"]) == 0
    capsys.readouterr()
    assert main(["report", str(two), "--metric", "NDCG@10", "--format", "md"]) == 0
    assert main(["compare", str(two), "--metric", "NDCG@10"]) == 0


def test_select_decides_among_the_trials_the_first_metric_cannot_separate(
    run_dir: Path, tmp_path: Path, capsys
) -> None:
    plain = Report.from_run(run_dir)
    leaders = plain.confidence.leaders
    assert len(leaders) > 1  # the demo's BM25 settings are too close for 117 queries
    report = Report.from_run(run_dir, then="recall@20")
    pick = report.recommendation()
    assert pick.then == "recall@20" and set(pick.among) == set(leaders)
    second = report.stats.loc["recall@20"]["mean"].reindex(leaders)
    assert second[pick.best] == second.max()
    assert report.deploy_command().split("--trial=")[1].startswith(pick.best)
    line = recommendation_line(report)
    assert f"the best on recall@20 of the {len(leaders)} trials ndcg@10 cannot separate" in line
    with pytest.raises(ConfigError, match="--select 'ndcg@10': expected another metric"):
        Report.from_run(run_dir, then="ndcg@10")
    assert main(["report", str(run_dir), "--select", "recall@20", "--out", str(tmp_path)]) == 0
    assert "the best on recall@20" in (tmp_path / "report.md").read_text()
    config = tmp_path / "rep.yaml"
    config.write_text(json.dumps(_config()), "utf-8")
    capsys.readouterr()
    assert main(["run", str(config), "--select", "mrr@10", "--out", str(tmp_path / "r")]) == 2
    assert "--select 'mrr@10': expected a metric of the config's" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- the answer first


def test_the_headline_leads_with_the_answer_in_numbers_the_details_show(
    run_dir: Path, tmp_path: Path
) -> None:
    report = Report.from_run(run_dir)
    pick = report.recommendation()
    paths = report.write(("md", "html"), out=tmp_path)
    md, page = paths["md"].read_text(), paths["html"].read_text()
    lines = md.splitlines()
    assert lines[2] == f"**Recommended**: `{report.name(pick.best)}`"  # right under the title
    assert md.index("**Recommended**") < md.index("## Best trial per metric")
    row = report.stats.loc[report.metric].loc[pick.best]
    base = report.stats.loc[report.metric].loc[report.baseline]
    values = report.per_query[report.per_query["metric"] == report.metric].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    low, high = bootstrap_ci(
        (values[pick.best] - values[report.baseline]).to_numpy(), n_resamples=report.n_resamples
    )
    assert low <= row["delta"] <= high
    gain = next(x for x in lines if x.startswith("- **Gain over the baseline**"))
    assert gain == (
        f"- **Gain over the baseline** `{report.name(report.baseline)}`: {report.metric} "
        f"{row['delta']:+.4f} ({base['mean']:.4f} → {row['mean']:.4f}; 95% CI of the "
        f"difference {low:+.4f} to {high:+.4f}), p_adj = {row['p_adjusted']:.3g}, "
        f"{'significant' if row['significant'] else 'not significant'}."
    )
    confidence = next(x for x in lines if x.startswith("- **Confidence**: "))
    share = f"{report.confidence.p_best[pick.best]:.0%}"
    assert confidence.startswith(f"- **Confidence**: best in {share} of 10,000 bootstrap")
    p50 = report.trials.set_index("trial_id")["latency.total.p50_ms"]
    latency = next(x for x in lines if x.startswith("- **Latency**: "))
    assert latency.startswith(
        f"- **Latency**: p50 {p50[pick.best]:.3g} ms per query, the baseline's "
        f"{p50[report.baseline]:.3g} ms"
    )
    assert "- **Labels**: the dataset's own, not generated." in lines
    headline = page.split("<section class='headline' id='headline'>")[1].split("</section>")[0]
    assert page.index("id='headline'") < page.index("<h2>Summary</h2>")
    assert f"<b>Recommended</b>: <code>{report.name(pick.best)}</code>" in headline
    assert headline.count("<li>") == 4 and "`" not in headline and "**" not in headline


def test_the_dataset_is_named_by_the_folder_the_labels_were_generated_from(
    run_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    documents = manifest["dataset"]["documents"]
    manifest["dataset"]["sample"] = {
        "documents": documents,
        "of": documents,
        "seed": 0,
        "source": "/home/me/abstracts",
    }
    (copy / "manifest.json").write_text(json.dumps(manifest))
    report = Report.from_run(copy)
    assert report.dataset_name == "/home/me/abstracts"
    md = report.write(("md",), out=tmp_path / "out")["md"].read_text()
    name = manifest["dataset"]["name"]
    assert f"Dataset `/home/me/abstracts` (test, a sample of {documents} of" in md
    assert f"labels in `{name}`)" in md
    plain = Report.from_run(run_dir).write(("md",), out=tmp_path / "plain")["md"].read_text()
    assert f"Dataset `{name}` (test, " in plain  # no folder recorded: the dataset's name


def _parts(label: str) -> list[str]:
    return label.split(" | ")


def test_no_trial_label_repeats_a_setting_every_trial_shares(
    wide_run: Path, tmp_path: Path
) -> None:
    report = Report.from_run(wide_run)
    shared = report.labels.shared
    assert [(s.axis, s.part) for s in shared] == [("embedder", "hashing(dim=256)")]
    full = dict(zip(report.trials["trial_id"], report.trials["label"], strict=True))
    with_embedder = [t for t, label in full.items() if "hashing(dim=256)" in _parts(label)]
    assert shared[0].using == len(with_embedder) < shared[0].of == len(full)
    names = [report.name(t) for t in full]
    assert len(set(names)) == len(full)  # still one name per trial
    assert not any("hashing(dim=256)" in _parts(name) for name in names)
    # the rerank part is not shared by every trial: it stays where it is
    assert sum("rerank:" in name for name in names) == sum("rerank:" in x for x in full.values())
    paths = report.write(("md", "html"), out=tmp_path)
    page, md = paths["html"].read_text(), paths["md"].read_text()
    assert "Shared by every trial: embedder <code>hashing(dim=256)</code>" in page
    assert "Shared by every trial: embedder `hashing(dim=256)` (in every trial that has one" in md
    # both trial tables of the page: the short label shown, the whole one on hover
    tables = page.split("<h2>Trials</h2>")[1].split("<h2>")[0]
    cells = re.findall(r"<span title='([^']*)'>(.*?)</span>", tables)
    assert len(cells) == 2 * len(full)
    named = {label: report.name(t) for t, label in full.items()}
    for title, inner in cells:
        shown = html.unescape(re.sub(r"<[^>]+>", "", inner))
        assert shown == named[html.unescape(title)]
    # the Markdown table's trial column, and the config section that keeps the whole spec
    rows = md.split("## Trials")[1].split("\n## ")[0].splitlines()[4:]
    labels = [re.split(r"(?<!\\)\|", row)[1].strip().replace("\\|", "|") for row in rows if row]
    assert sorted(labels) == sorted(names)
    assert "dim: 256" in md.split("## Config")[1]


# ---------------------------------------------------------------- plots that can say something


def _grid(rows: list[tuple[float, float, float]]) -> pd.DataFrame:
    """Finished trials of a recursive chunker at (size, overlap) and BM25 b, with a metric."""
    return pd.DataFrame(
        [
            {
                "status": "ok",
                "trial_id": f"t{i}",
                "label": f"t{i}",
                "param.chunker.kind": "recursive",
                "param.chunker.size": size,
                "param.chunker.overlap": overlap,
                "param.retriever.kind": "bm25",
                "param.retriever.b": b,
                "ndcg@10": 0.5 + i / 100,
            }
            for i, (size, overlap, b) in enumerate(rows)
        ]
    )


def test_a_heatmap_is_drawn_only_over_a_full_grid_and_a_line_only_through_a_trend() -> None:
    size, overlap, b = "param.chunker.size", "param.chunker.overlap", "param.retriever.b"
    # two chunkings that set size and overlap at once, each with two values of b
    trials = _grid([(500, 50, 0.4), (500, 50, 0.9), (1200, 100, 0.4), (1200, 100, 0.9)])
    assert together(trials, size, overlap) and not together(trials, size, b)
    assert grid_problem(trials, size, overlap) == (
        "chunker.size and chunker.overlap change together: 2 of the 4 combinations of their "
        "values were swept"
    )
    assert grid_problem(trials, size, b) is None
    assert heatmap_pairs(trials, [size, overlap, b]) == [(size, b, None)]  # overlap goes with size
    with pytest.raises(DataError, match=r"^heatmap: chunker\.size and chunker\.overlap change"):
        heatmap(trials, size, overlap, "ndcg@10")
    one = _grid([(500, 50, 0.4), (500, 50, 0.9)])
    assert (
        grid_problem(one, size, b)
        == "chunker.size takes fewer than 2 values among the trials with both"
    )
    # a partial grid (3 of 4 cells) is no heatmap either
    assert "3 of the 4 combinations" in str(grid_problem(trials.iloc[:3], size, b))
    # two sizes: points, no line between them; three: a line
    assert not is_trend([500, 1200, 500]) and is_trend([300, 500, 1200])
    figure = metric_vs_chunk_size(trials, "ndcg@10")
    lines = figure.axes[0].get_lines()
    assert lines and all(line.get_linestyle() == "None" for line in lines)
    assert figure.axes[0].get_title().endswith("(2 sizes: points, not a trend)")
    three = _grid([(300, 50, 0.4), (500, 50, 0.4), (1200, 50, 0.4)])
    drawn = metric_vs_chunk_size(three, "ndcg@10").axes[0]
    assert drawn.get_lines()[0].get_linestyle() == "-" and "trend" not in drawn.get_title()


def test_a_run_whose_chunkings_change_size_and_overlap_at_once_draws_no_heatmap_over_them(
    tmp_path: Path,
) -> None:
    config = {
        "name": "chunkings",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10"], "depth": 10},
        "latency": {"queries": 0},
        "sweep": {
            "chunker": [
                {"kind": "recursive", "size": 300, "overlap": 0},
                {"kind": "recursive", "size": 900, "overlap": 100},
            ],
            "retriever": [{"kind": "bm25", "b": [0.4, 0.9]}],
        },
    }
    out = run(config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=20, progress=False)
    report = Report.from_run(out.path)
    names = [plot.name for plot in report.plots()]
    assert "heatmap_chunker.size_retriever.b" in names
    assert not any("chunker.overlap" in name for name in names)
    md = report.write(("md",), out=tmp_path / "out")["md"].read_text()
    assert "- chunker.size and chunker.overlap change together in this sweep" in md
    assert "(2 sizes: points, not a trend)" not in md  # said in the figure, not the text
    pngs = {p.stem for p in (tmp_path / "out" / "plots").glob("*.png")}
    assert "heatmap_chunker.size_retriever.b" in pngs and "chunk_size" in pngs
