"""Plots of a run directory: titles, axes, what is drawn, the Pareto front, heatmap cells,
PNG output, errors, and every plot on a real (hashing-embedder) run."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from ragbench.errors import ConfigError, DataError
from ragbench.report import grids, plots, tables
from tests.paths import DEMO, require

METRIC = "ndcg@10"
CHUNKER = "param.chunker.kind"


def _trial(tid: str, chunker: str, size: float, retriever: str, **extra: object) -> dict:
    return {
        "trial_id": tid,
        "label": f"{retriever} | {chunker}(size={size}) | all-MiniLM-L6-v2",
        "status": "ok",
        "error": "",
        "param.chunker.kind": chunker,
        "param.chunker.size": size,
        "param.chunker.unit": "chars",
        "param.retriever.kind": retriever,
        **extra,
    }


@pytest.fixture
def trials() -> pd.DataFrame:
    """bm25 over k1 × b at two sizes, dense at two sizes, an unsized dense, a failed trial."""
    rows = []
    for size in (300, 600):
        for k1 in (0.9, 1.5):
            for b in (0.4, 0.75):
                score = 0.5 + size / 10_000 + k1 / 100 + b / 1_000
                rows.append(
                    _trial(
                        f"bm25-{size}-{k1}-{b}",
                        "recursive",
                        size,
                        "bm25",
                        **{"param.retriever.k1": k1, "param.retriever.b": b, METRIC: score},
                        **{"latency.total.p95_ms": 1.0 + k1},
                    )
                )
        rows.append(
            _trial(
                f"dense-{size}",
                "recursive",
                size,
                "dense",
                **{METRIC: 0.4, "latency.total.p95_ms": 5},
            )
        )
    rows.append(
        _trial("dense-none", "none", np.nan, "dense", **{METRIC: 0.45, "latency.total.p95_ms": 4})
    )
    rows.append(_trial("broken", "recursive", 300, "hybrid", status="failed", **{METRIC: np.nan}))
    return pd.DataFrame(rows)


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts]


# ---------------------------------------------------------------- helpers


def test_short_labels_drop_shared_parts_and_cut() -> None:
    labels = ["bm25 | recursive(size=300)", "dense | recursive(size=300) | minilm"]
    assert tables.short_labels(labels) == ["bm25", "dense | minilm"]
    assert tables.short_labels(["a | x", "a | x"]) == ["a", "a"]
    assert tables.short_labels(["a" * 60], width=10) == ["a" * 9 + "…"]
    among = [*labels, "bm25 | fixed(size=300)"]
    assert tables.short_labels(labels[:1], among=among) == ["bm25 | recursive(size=300)"]


def test_kind_colours_are_stable_and_distinct() -> None:
    assert plots.kind_colour("bm25") != plots.kind_colour("dense") != plots.kind_colour("hybrid")
    assert plots.kind_colour("custom") == plots.kind_colour("custom")


def test_save_writes_a_png(tmp_path: Path, trials: pd.DataFrame) -> None:
    path = plots.save(plots.pareto(trials, METRIC), tmp_path / "sub" / "p.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert 10_000 < len(data) < 2_000_000


# ---------------------------------------------------------------- metric vs chunk size


def test_metric_vs_chunk_size_lines_and_reference(trials: pd.DataFrame) -> None:
    fig = plots.metric_vs_chunk_size(trials, METRIC)
    ax = fig.axes[0]
    # two sizes: a line would be one slope, so the points are drawn alone and the title says so
    assert ax.get_title() == f"{METRIC} by chunk size\n(2 sizes: points, not a trend)"
    assert ax.get_xlabel() == "chunk size (chars)"
    assert ax.get_ylabel() == METRIC
    names = [line.get_label() for line in ax.lines]
    assert len(ax.lines) == 3  # recursive·bm25, recursive·dense, the unsized dense reference
    assert "recursive · bm25 (best of 4)" in names
    assert "recursive · dense" in names
    assert "none · dense (no size)" in names
    bm25 = ax.lines[names.index("recursive · bm25 (best of 4)")]
    assert list(bm25.get_xdata()) == [300, 600] and bm25.get_linestyle() == "None"
    best = trials[trials["param.retriever.kind"] == "bm25"].groupby("param.chunker.size")[METRIC]
    np.testing.assert_allclose(bm25.get_ydata(), best.max().to_numpy())
    reference = ax.lines[names.index("none · dense (no size)")]
    assert reference.get_linestyle() == "--"
    assert list(reference.get_ydata()) == [0.45, 0.45]


def test_metric_vs_chunk_size_without_sizes(trials: pd.DataFrame) -> None:
    with pytest.raises(DataError, match="no finished trial has a chunk size"):
        plots.metric_vs_chunk_size(trials[trials["param.chunker.kind"] == "none"], METRIC)
    with pytest.raises(DataError, match="recall@5"):
        plots.metric_vs_chunk_size(trials, "recall@5")


# ---------------------------------------------------------------- Pareto


def _points(rows: list[tuple[str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"trial_id": t, "label": t, "status": "ok", METRIC: m, "latency.total.p95_ms": lat}
            for t, m, lat in rows
        ]
    )


def test_pareto_front_excludes_dominated_and_keeps_ties() -> None:
    frame = _points(
        [
            ("fast", 0.5, 1.0),
            ("fast-twin", 0.5, 1.0),  # equal on both counts: neither dominates
            ("slower-same", 0.5, 2.0),  # same quality, slower: dominated
            ("mid", 0.7, 3.0),
            ("mid-worse", 0.6, 3.0),  # same latency, lower quality: dominated
            ("worse", 0.4, 5.0),
            ("best", 0.9, 10.0),
            ("nan", np.nan, 0.1),
        ]
    )
    front = plots.pareto_front(frame, METRIC)
    assert list(front["trial_id"]) == ["fast", "fast-twin", "mid", "best"]
    assert front["latency.total.p95_ms"].is_monotonic_increasing


def test_pareto_front_ignores_failed_trials(trials: pd.DataFrame) -> None:
    failed = trials.assign(status="failed")
    with pytest.raises(DataError, match="no finished trial"):
        plots.pareto_front(failed, METRIC)


def test_pareto_plot(trials: pd.DataFrame) -> None:
    front = plots.pareto_front(trials, METRIC)
    fig = plots.pareto(trials, METRIC, baseline="dense-300")
    ax = fig.axes[0]
    assert ax.get_title() == f"{METRIC} vs total p95 latency: Pareto front"
    assert ax.get_xlabel() == "total p95 latency (ms per query)"
    assert ax.get_xscale() == "linear"
    kinds = trials[trials["status"] == "ok"].dropna(subset=[METRIC, "latency.total.p95_ms"])
    by_kind = kinds.groupby("param.retriever.kind").size()
    scatter = {c.get_label(): len(c.get_offsets()) for c in ax.collections}
    assert scatter == {
        "bm25": by_kind["bm25"],
        "dense": by_kind["dense"],
        f"Pareto front ({len(front)})": len(front),
        "baseline": 1,
    }
    (line,) = ax.lines
    assert list(line.get_xdata()) == list(front["latency.total.p95_ms"])
    numbers = [t.get_text() for t in ax.texts]
    assert numbers == [str(i) for i in range(1, len(front) + 1)]
    (key,) = fig.legends
    assert key.get_title().get_text() == "Pareto front"
    assert key.get_texts()[0].get_text().startswith("1. ")


def test_pareto_log_scale_and_bad_baseline() -> None:
    frame = _points([("a", 0.5, 0.1), ("b", 0.6, 10.0), ("c", 0.7, 100.0)])
    assert plots.pareto(frame, METRIC).axes[0].get_xscale() == "log"
    with pytest.raises(ConfigError, match="baseline 'zzz' is not the id of any trial"):
        plots.pareto(frame, METRIC, baseline="zzz")
    frame.loc[frame["trial_id"] == "a", METRIC] = np.nan
    with pytest.raises(DataError, match="baseline 'a' is not a finished trial with"):
        plots.pareto(frame, METRIC, baseline="a")


# ---------------------------------------------------------------- per-query difference


def _per_query() -> pd.DataFrame:
    trial = {"q1": 1.0, "q2": 0.5, "q3": 0.2, "q4": 0.0, "q5": 0.3}
    base = {"q1": 0.5, "q2": 0.5, "q3": 0.6, "q4": 0.0, "q5": 0.1, "q6": 0.9}
    rows = [("t", q, METRIC, v) for q, v in trial.items()]
    rows += [("b", q, METRIC, v) for q, v in base.items()]
    rows += [("t", "q1", "recall@20", 1.0)]
    return pd.DataFrame(rows, columns=["trial_id", "query_id", "metric", "value"])


def test_per_query_difference_bars_and_counts() -> None:
    fig = plots.per_query_difference(_per_query(), "t", "b", METRIC, labels={"t": "bm25 | x"})
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights, [0.5, 0.2, -0.4])  # sorted, ties omitted
    colours = [p.get_facecolor()[:3] for p in ax.patches]
    assert colours[0][1] > colours[0][0] and colours[2][0] > colours[2][1]  # green, green, red
    title = ax.get_title()
    assert "wins 2 · ties 2 · losses 1" in title
    assert "mean Δ +0.0600" in title
    assert "bm25 | x" in title and "baseline b" in title
    assert ax.get_ylabel() == f"Δ {METRIC} (trial − baseline)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["q1", "q5", "q2", "q4", "q3"]


def test_per_query_difference_text_is_large_enough_to_read_in_the_report() -> None:
    fig = plots.per_query_difference(_per_query(), "t", "b", METRIC)
    ax = fig.axes[0]
    assert fig.get_figwidth() <= 10  # the report shows it at most 620 px wide
    assert ax.title.get_fontsize() >= 12 and ax.yaxis.label.get_fontsize() >= 12
    assert min(t.get_fontsize() for t in ax.get_xticklabels()) >= 10
    assert min(t.get_fontsize() for t in ax.get_yticklabels()) >= 10


def test_per_query_difference_errors() -> None:
    with pytest.raises(DataError, match="'missing'"):
        plots.per_query_difference(_per_query(), "missing", "b", METRIC)
    with pytest.raises(DataError, match="no recall@20 values for trial 'b'"):
        plots.per_query_difference(_per_query(), "t", "b", "recall@20")


# ---------------------------------------------------------------- metric@k


def _curves() -> pd.DataFrame:
    rows = [
        (tid, family, k, 1 - np.exp(-k / scale))
        for tid, scale in (("a", 2.0), ("b", 4.0), ("c", 6.0))
        for family in ("recall", "ndcg")
        for k in range(1, 11)
    ]
    return pd.DataFrame(rows, columns=["trial_id", "metric", "k", "value"])


def test_metric_at_k_one_line_per_trial() -> None:
    curves = _curves()
    fig = plots.metric_at_k(curves, ["a", "c"], "recall@10", labels={"a": "bm25 | x"})
    ax = fig.axes[0]
    assert ax.get_title() == "recall@k for k = 1..10"
    assert ax.get_xlabel() == "cutoff k (rank)"
    assert ax.get_ylabel() == "mean recall@k"
    assert [line.get_label() for line in ax.lines] == ["bm25 | x", "c"]
    assert list(ax.lines[0].get_xdata()) == list(range(1, 11))
    expected = curves[(curves.trial_id == "c") & (curves.metric == "recall")]["value"]
    np.testing.assert_allclose(ax.lines[1].get_ydata(), expected)


LONG = [
    "hybrid(fusion=rrf(k=60)) | sentence(size=600, overlap=100) | all-MiniLM-L6-v2 | "
    f"rerank:dense(candidates={n}, embedder=sentence-transformers:all-MiniLM-L6-v2)"
    for n in (10, 20, 30)
]


def _legend_lines(fig: Figure) -> list[str]:
    """The texts of the figure's legends, each entry on one line."""
    return [t.get_text().replace("\n", " ") for legend in fig.legends for t in legend.get_texts()]


def _below_the_axes(fig: Figure) -> bool:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    axes = fig.axes[0].get_window_extent()
    return all(legend.get_window_extent().y1 <= axes.y0 for legend in fig.legends)


def test_legends_show_whole_labels_below_the_plot() -> None:
    # each label without the parts every label shares, never cut, wrapped to 80 characters
    own = [label.split(" | ")[-1] for label in LONG]
    curves = _curves()
    at_k = plots.metric_at_k(
        curves, ["a", "b", "c"], "recall", labels=dict(zip("abc", LONG, strict=True))
    )
    assert _legend_lines(at_k) == own and _below_the_axes(at_k)
    frame = _points([("a", 0.5, 1.0), ("b", 0.6, 2.0), ("c", 0.7, 3.0)])
    frame["label"] = LONG
    frame["param.retriever.kind"] = "hybrid"
    pareto = plots.pareto(frame, METRIC)
    assert _legend_lines(pareto) == [f"{i}. {label}" for i, label in enumerate(own, start=1)]
    assert _below_the_axes(pareto)
    long = plots.metric_at_k(curves, ["a", "b"], "recall", labels={"a": LONG[0] * 2})
    lines = long.legends[0].get_texts()[0].get_text().splitlines()
    assert len(lines) > 2 and max(map(len, lines)) <= 80
    assert " ".join(lines) == LONG[0] * 2 and "…" not in " ".join(_legend_lines(long))


def test_metric_at_k_missing_trial() -> None:
    with pytest.raises(DataError, match="zzz"):
        plots.metric_at_k(_curves(), ["a", "zzz"], "recall")
    with pytest.raises(ConfigError, match="no trial ids"):
        plots.metric_at_k(_curves(), [], "recall")


# ---------------------------------------------------------------- heatmap


def test_swept_parameters(trials: pd.DataFrame) -> None:
    assert grids.swept_parameters(trials) == [
        "param.chunker.kind",
        "param.chunker.size",
        "param.retriever.kind",
        "param.retriever.k1",
        "param.retriever.b",
    ]


def test_heatmap_cells_equal_the_pivot(trials: pd.DataFrame) -> None:
    x, y = "param.retriever.k1", "param.retriever.b"
    fig = plots.heatmap(trials, x, y, METRIC)
    ax = fig.axes[0]
    expected = trials.pivot_table(index=y, columns=x, values=METRIC, aggfunc="max")
    (image,) = ax.images
    np.testing.assert_allclose(image.get_array(), expected.to_numpy())
    assert sorted(_texts(fig)) == sorted(f"{v:.3f}" for v in expected.to_numpy().ravel())
    assert ax.get_xlabel() == "retriever.k1" and ax.get_ylabel() == "retriever.b"
    low, high = expected.min().min(), expected.max().max()
    assert high - low < 0.01  # a narrow range: the title and the colour bar say so
    assert ax.get_title() == (
        f"{METRIC} by retriever.k1 × retriever.b\n"
        f"(max over the other parameters; colours span only {high - low:.2g})"
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.9", "1.5"]
    assert len(fig.axes) == 2  # the colour bar
    assert fig.axes[1].get_ylabel() == f"{METRIC} (narrow range {low:.3f}–{high:.3f})"


def test_a_wide_colour_range_is_stated_but_not_flagged(trials: pd.DataFrame) -> None:
    wide = trials.assign(**{METRIC: trials[METRIC] * 10 * trials["param.retriever.k1"]})
    fig = plots.heatmap(wide, "param.retriever.k1", "param.retriever.b", METRIC)
    assert "colours span only" not in fig.axes[0].get_title()
    assert fig.axes[1].get_ylabel().startswith(f"{METRIC} (colours span ")


def test_a_chunker_option_grid_is_drawn_once_per_chunker_kind() -> None:
    rows = [
        _trial(
            f"{kind}-{size}-{overlap}",
            kind,
            size,
            "bm25",
            **{
                "param.chunker.overlap": overlap,
                METRIC: (0.3 if kind == "fixed" else 0.6) + size / 10_000 + overlap / 1_000,
            },
        )
        for kind in ("fixed", "sentence")
        for size in (300, 600)
        for overlap in (0, 50)
    ]
    rows.append(_trial("whole", "none", np.nan, "bm25", **{METRIC: 0.5}))
    frame = pd.DataFrame(rows)
    x, y = "param.chunker.size", "param.chunker.overlap"
    assert grids.chunker_kinds(frame, x, y) == ["fixed", "sentence"]
    assert grids.chunker_kinds(frame[frame[CHUNKER] != "fixed"], x, y) == [None]
    with pytest.raises(DataError, match="mixes chunker kinds \\(fixed, sentence\\)"):
        plots.heatmap(frame, x, y, METRIC)
    for kind in ("fixed", "sentence"):
        fig = plots.heatmap(frame, x, y, METRIC, kind)
        own = frame[frame[CHUNKER] == kind].pivot_table(index=y, columns=x, values=METRIC)
        np.testing.assert_allclose(fig.axes[0].images[0].get_array(), own.to_numpy())
        assert f"({kind} chunker)" in fig.axes[0].get_title()
    with pytest.raises(DataError, match="no finished 'semantic' chunker trial"):
        plots.heatmap(frame, x, y, METRIC, "semantic")


def test_heatmap_errors(trials: pd.DataFrame) -> None:
    with pytest.raises(DataError, match=r"param\.nope"):
        plots.heatmap(trials, "param.nope", "param.retriever.b", METRIC)
    one_k1 = trials[trials["param.retriever.k1"] != 1.5]
    with pytest.raises(DataError, match=r"heatmap: retriever\.k1 takes fewer than 2 values"):
        plots.heatmap(one_k1, "param.retriever.k1", "param.retriever.b", METRIC)
    with pytest.raises(DataError, match="no finished trial"):
        plots.heatmap(trials.iloc[0:0], "param.retriever.k1", "param.retriever.b", METRIC)


# ---------------------------------------------------------------- a real run


def test_every_plot_on_a_real_run(tmp_path: Path) -> None:
    from ragbench.experiment.runner import run

    config = {
        "name": "plots",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": [METRIC, "recall@20"], "depth": 20},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": [300, 1200]}, {"kind": "none"}],
            "embedder": [{"kind": "hashing", "dim": 256}],
            "retriever": [{"kind": "bm25", "k1": [0.9, 1.5], "b": [0.4, 0.75]}, {"kind": "dense"}],
        },
    }
    result = run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    trials, per_query = result.trials, result.per_query
    ids = list(trials["trial_id"])
    drawn = {
        "size": plots.metric_vs_chunk_size(trials, METRIC),
        "pareto": plots.pareto(trials, "recall@20", baseline=ids[0]),
        "diff": plots.per_query_difference(per_query, ids[1], ids[0], METRIC),
        "heat": plots.heatmap(trials, "param.retriever.k1", "param.retriever.b", METRIC),
        "at_k": plots.metric_at_k(result.curves, ids[:3], "recall"),
    }
    assert "param.retriever.k1" in grids.swept_parameters(trials)
    for name, fig in drawn.items():
        assert plots.save(fig, tmp_path / f"{name}.png").stat().st_size > 10_000


def test_a_report_draws_chunker_grids_per_kind(tmp_path: Path) -> None:
    from ragbench.experiment.runner import run
    from ragbench.report.report import Report

    chunkers = [
        {"kind": kind, "size": [300, 600], "overlap": [0, 50]} for kind in ("fixed", "sentence")
    ]
    config = {
        "name": "grids",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": [METRIC], "depth": 10},
        "sweep": {"chunker": chunkers, "retriever": [{"kind": "bm25"}]},
    }
    out = run(config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=10, progress=False)
    figures = Report.from_run(out.path).figures()
    grids = sorted(name for name in figures if name.startswith("heatmap_chunker.size"))
    assert grids == [
        "heatmap_chunker.size_chunker.overlap_fixed",
        "heatmap_chunker.size_chunker.overlap_sentence",
    ]
    trials = out.trials
    for kind in ("fixed", "sentence"):
        image = figures[f"heatmap_chunker.size_chunker.overlap_{kind}"].axes[0].images[0]
        own = trials[trials[CHUNKER] == kind].pivot_table(
            index="param.chunker.overlap", columns="param.chunker.size", values=METRIC
        )
        np.testing.assert_allclose(image.get_array(), own.to_numpy())
