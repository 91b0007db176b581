"""Plots of a run directory: quality against chunk size, latency, LLM cost, cutoff and swept
parameters.

Every function takes the run-directory frames (``trials``, ``per_query``, ``curves``), returns a
``matplotlib.figure.Figure`` built without pyplot (no global state, nothing shown), and raises
``DataError`` with a message naming what is missing when there is nothing to draw (``ConfigError``
when an argument names nothing that exists: a baseline that is no trial, no trial ids). Only trials
with ``status == "ok"`` and a value for the plotted metric are drawn. Colours follow the
retriever kind, the same in every plot.
"""

from __future__ import annotations

import io
import re
import textwrap
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.metrics import higher_is_better
from ragbench.registry import components
from ragbench.report.grids import CHUNKER, chunker_kinds, grid_problem, is_trend
from ragbench.report.tables import short_labels, spend

__all__ = [
    "NARROW",
    "heatmap",
    "kind_colour",
    "metric_at_k",
    "metric_vs_chunk_size",
    "pareto",
    "pareto_front",
    "per_query_difference",
    "quality_vs_cost",
    "save",
]

SIZE = "param.chunker.size"
RETRIEVER = "param.retriever.kind"
TOTAL_P95 = "latency.total.p95_ms"

_PALETTE = [mpl.colormaps["tab10"](i) for i in range(10)]
_LINESTYLES = ["-", "--", "-.", ":"]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
_LATENCY = re.compile(r"latency\.(?P<stage>[^.]+)\.(?P<pct>p\d+)_ms")
_NUMBER_OFFSETS = [(6, 4), (6, -12), (-14, 4)]
_DPI = 110
_WIN, _LOSS, _NEUTRAL = "#2ca02c", "#d62728", "#7f7f7f"
_WRAP = 80  # characters per line of a trial label in a legend
NARROW = 0.05
"""A colour scale spanning less than this share of its values' magnitude (at least 1) says so
in its title: colours far apart on the scale may be close in value. Every colour bar states the
range it spans."""


# ---------------------------------------------------------------- shared helpers


def png(fig: Figure) -> bytes:
    """``fig`` as PNG bytes (tight bounding box, readable DPI)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return buffer.getvalue()


def save(fig: Figure, path: Path | str) -> Path:
    """Write ``fig`` as a PNG file; return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(png(fig))
    return out


def kind_colour(kind: object) -> tuple[float, float, float, float]:
    """The colour of a retriever kind: the palette slot the kind declares (``colour``), else
    one of the spare slots, picked by its name (stable across runs)."""
    name = str(kind)
    retrievers = components("retriever")
    slot = retrievers.config_class(name).colour if name in retrievers.kinds() else None
    if slot is not None:
        return _PALETTE[slot]
    spare = _PALETTE[3:]
    return spare[zlib.crc32(name.encode()) % len(spare)]


def _wrapped(text: str, width: int = _WRAP) -> str:
    """``text`` on lines of at most ``width`` characters, broken at spaces (whole, never cut)."""
    return textwrap.fill(text, width, break_on_hyphens=False)


def _usable(trials: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """Finished trials with a value in every one of ``columns`` (DataError when none)."""
    missing = [c for c in columns if c not in trials.columns]
    if missing:
        raise DataError(f"{what}: no column {', '.join(map(repr, missing))} in the trials")
    ok = trials[trials["status"] == "ok"] if "status" in trials.columns else trials
    ok = ok.dropna(subset=list(columns))
    if ok.empty:
        raise DataError(f"{what}: no finished trial has values for {', '.join(columns)}")
    return ok


def _new_figure(width: float = 8.0, height: float = 5.0) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _legend_outside(ax: Axes, title: str | None = None) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, title=title)


def _legend_below(fig: Figure, handles: Sequence[Artist], labels: Sequence[str], **kw: Any) -> None:
    """A legend under the plot, in the figure's layout (labels wrapped, never cut)."""
    fig.legend(
        handles,
        [_wrapped(label) for label in labels],
        loc="outside lower center",
        alignment="left",
        fontsize=9,
        **kw,
    )


def _latency_label(column: str) -> str:
    match = _LATENCY.fullmatch(column)
    if match is None:
        return column
    return f"{match['stage']} {match['pct']} latency (ms per query)"


def _param_name(column: str) -> str:
    return column.removeprefix("param.")


def _best_of(metric: str) -> Literal["max", "min"]:
    """The aggregation picking the best value of ``metric``: ``max``, or ``min`` when lower is
    better."""
    return "max" if higher_is_better(metric) else "min"


def _tick(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


# ---------------------------------------------------------------- metric vs chunk size


def metric_vs_chunk_size(trials: pd.DataFrame, metric: str) -> Figure:
    """``metric`` against chunk size, one line per (chunker kind, retriever kind).

    Where other parameters vary, each point is the best trial at that size ("best of N").
    Trials without a size (chunker ``none``) become a dashed reference line per retriever.
    With fewer than ``grids.TREND`` sizes a line would be one slope between two points, so
    the points are drawn alone (a dot plot) and the title says so.
    """
    ok = _usable(trials, [metric, CHUNKER, RETRIEVER], "metric_vs_chunk_size")
    if SIZE not in ok.columns:
        raise DataError(f"metric_vs_chunk_size: no column {SIZE!r} in the trials")
    ok = ok.assign(_size=pd.to_numeric(ok[SIZE], errors="coerce"))
    sized = ok[ok["_size"].notna()]
    if sized.empty:
        raise DataError("metric_vs_chunk_size: no finished trial has a chunk size")
    fig, ax = _new_figure()
    chunkers = sorted(sized[CHUNKER].astype(str).unique())
    trend = is_trend(sized["_size"])
    for (chunker, retriever), series in sized.groupby([CHUNKER, RETRIEVER], sort=True):
        name = f"{chunker} · {retriever}"
        _size_series(ax, series, metric, name, chunkers.index(chunker), trend)
    for retriever, series in ok[ok["_size"].isna()].groupby(RETRIEVER, sort=True):
        _reference_line(ax, series, metric, str(retriever))
    _size_axis(ax, sized)
    ax.set_ylabel(metric)
    sizes = sized["_size"].nunique()
    note = "" if trend else f"\n({sizes} size{'s' if sizes > 1 else ''}: points, not a trend)"
    ax.set_title(f"{metric} by chunk size{note}")
    ax.grid(alpha=0.3)
    _legend_outside(ax, "chunker · retriever")
    return fig


def _size_series(
    ax: Axes, series: pd.DataFrame, metric: str, name: str, style: int, trend: bool
) -> None:
    """The best trial at each size of one (chunker, retriever) series: a line when the
    sizes can show a ``trend``, else the points alone."""
    pick = _best_of(metric)
    best = series.groupby("_size")[metric].agg([pick, "size"])
    tried = int(best["size"].max())
    ax.plot(
        best.index,
        best[pick],
        linestyle=_LINESTYLES[style % len(_LINESTYLES)] if trend else "none",
        marker=_MARKERS[style % len(_MARKERS)],
        color=kind_colour(series[RETRIEVER].iloc[0]),
        label=name + (f" (best of {tried})" if tried > 1 else ""),
    )


def _reference_line(ax: Axes, series: pd.DataFrame, metric: str, retriever: str) -> None:
    """A dashed line at the best score of the unsized trials of one retriever kind."""
    chunkers = "/".join(sorted(series[CHUNKER].astype(str).unique()))
    note = f", best of {len(series)}" if len(series) > 1 else ""
    ax.axhline(
        series[metric].agg(_best_of(metric)),
        linestyle="--",
        linewidth=1.2,
        color=kind_colour(retriever),
        label=f"{chunkers} · {retriever} (no size{note})",
    )


def _size_axis(ax: Axes, sized: pd.DataFrame) -> None:
    """Log scale for wide size ranges; ticks at the swept sizes when there are few."""
    sizes = np.sort(sized["_size"].unique())
    if sizes[-1] / max(sizes[0], 1e-9) >= 4:
        ax.set_xscale("log")
        ax.minorticks_off()
    if len(sizes) <= 10:
        ax.set_xticks(sizes, [_tick(float(s)) for s in sizes], rotation=45 if len(sizes) > 6 else 0)
    units: Sequence[object] | np.ndarray = (
        sized["param.chunker.unit"].dropna().unique() if "param.chunker.unit" in sized else []
    )
    unit = units[0] if len(units) == 1 else "units vary by chunker" if len(units) else "units"
    ax.set_xlabel(f"chunk size ({unit})")


# ---------------------------------------------------------------- quality vs latency


def pareto_front(trials: pd.DataFrame, metric: str, latency: str = TOTAL_P95) -> pd.DataFrame:
    """The trials no other trial beats on both counts (better ``metric``: higher, or lower when
    lower is better; lower ``latency``), sorted by latency. Trials with equal values on both
    counts are all kept."""
    ok = _usable(trials, [metric, latency], "pareto_front")
    higher = higher_is_better(metric)
    quality = ok[metric].to_numpy(dtype=float) * (1.0 if higher else -1.0)
    cost = ok[latency].to_numpy(dtype=float)
    no_worse = (quality[None, :] >= quality[:, None]) & (cost[None, :] <= cost[:, None])
    better = (quality[None, :] > quality[:, None]) | (cost[None, :] < cost[:, None])
    dominated = np.any(no_worse & better, axis=1)
    front = ok[~dominated]
    return front.sort_values([latency, metric], ascending=[True, not higher]).reset_index(drop=True)


def pareto(
    trials: pd.DataFrame,
    metric: str,
    latency: str = TOTAL_P95,
    baseline: str | None = None,
) -> Figure:
    """Quality against latency per trial, the Pareto front connected and numbered (its labels
    listed beside the plot), and the ``baseline`` trial id, if given, drawn as a star."""
    return _pareto(trials, metric, latency, _latency_label(latency), baseline, "pareto")


def quality_vs_cost(trials: pd.DataFrame, metric: str, baseline: str | None = None) -> Figure:
    """Quality against LLM cost per query (US dollars; a trial that calls no LLM costs 0), as
    ``pareto`` draws it. When the cost of some trial is unknown (the config gives no price for
    its model), the x axis is LLM tokens per query instead (prompt + completion), and its label
    says why. ``DataError`` when no trial called an LLM."""
    spent = spend(trials)
    if spent.empty:
        raise DataError("quality_vs_cost: no trial called an LLM (no tokens.* columns)")
    unknown = spent["cost.total"].isna()
    column, label = "cost.total", "LLM cost per query (US dollars)"
    if unknown.any():
        why = "no prices given" if unknown[spent["tokens.total"] > 0].all() else "a price missing"
        column = "tokens.total"
        label = f"LLM tokens per query (prompt + completion; costs unknown: {why})"
    frame = trials.assign(**{column: spent[column]})
    return _pareto(frame, metric, column, label, baseline, "quality_vs_cost")


def _pareto(
    trials: pd.DataFrame, metric: str, x: str, label: str, baseline: str | None, what: str
) -> Figure:
    """Quality against column ``x`` (lower is better) per trial, the front numbered."""
    ok = _usable(trials, [metric, x], what)
    front = pareto_front(ok, metric, x)
    fig, ax = _new_figure(9.0, 5.5)
    kinds = ok[RETRIEVER] if RETRIEVER in ok.columns else pd.Series("trial", index=ok.index)
    for kind, group in ok.groupby(kinds.astype(str), sort=True):
        ax.scatter(group[x], group[metric], s=30, alpha=0.75, color=kind_colour(kind), label=kind)
    ax.plot(front[x], front[metric], color="black", linewidth=1, drawstyle="steps-post", zorder=3)
    ax.scatter(
        front[x],
        front[metric],
        s=90,
        facecolors="none",
        edgecolors="black",
        linewidths=1.5,
        zorder=4,
        label=f"Pareto front ({len(front)})",
    )
    if baseline is not None:
        _mark_baseline(ax, trials, ok, baseline, metric, x, what)
    key = _number_front(ax, ok, front, metric, x)
    _cost_axis(ax, ok[x], label)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} vs {label.split(' (')[0]}: Pareto front")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    blank = [Line2D([], [], linestyle="none") for _ in key]
    _legend_below(fig, blank, key, title="Pareto front", handlelength=0, handletextpad=0)
    return fig


def _mark_baseline(
    ax: Axes,
    trials: pd.DataFrame,
    ok: pd.DataFrame,
    baseline: str,
    metric: str,
    x: str,
    what: str,
) -> None:
    row = ok[ok["trial_id"] == baseline]
    if row.empty:
        if "trial_id" in trials.columns and baseline not in set(trials["trial_id"]):
            raise ConfigError(f"{what}: baseline {baseline!r} is not the id of any trial")
        raise DataError(f"{what}: baseline {baseline!r} is not a finished trial with {metric}")
    ax.scatter(
        row[x],
        row[metric],
        marker="*",
        s=260,
        color="gold",
        edgecolors="black",
        zorder=5,
        label="baseline",
    )


def _number_front(
    ax: Axes, ok: pd.DataFrame, front: pd.DataFrame, metric: str, x: str
) -> list[str]:
    """Number the front points on the plot; return the key, one whole label per number
    (without the parts every trial's label shares)."""
    column = "label" if "label" in ok.columns else "trial_id"
    names = short_labels(front[column].astype(str), None, among=ok[column].astype(str).tolist())
    points = zip(front[x], front[metric], strict=True)
    for i, point in enumerate(points, start=1):
        offset = _NUMBER_OFFSETS[i % len(_NUMBER_OFFSETS)]
        ax.annotate(str(i), point, xytext=offset, textcoords="offset points", weight="bold")
    return [f"{i}. {name}" for i, name in enumerate(names, start=1)]


def _cost_axis(ax: Axes, values: pd.Series, label: str) -> None:
    """Log scale when the values (latency, tokens, dollars) span more than 1.5 decades."""
    low, high = float(values.min()), float(values.max())
    log = low > 0 and np.log10(high / low) > 1.5
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(label + (", log scale" if log else ""))


# ---------------------------------------------------------------- per-query difference


def per_query_difference(
    per_query: pd.DataFrame,
    trial_id: str,
    baseline_id: str,
    metric: str,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """Sorted bars of ``metric`` per query, trial minus baseline (green: trial better, red:
    worse, by the metric's direction; ties left empty); wins, ties, losses and the mean
    difference in the title."""
    diff = _differences(per_query, trial_id, baseline_id, metric)
    better = diff > 0 if higher_is_better(metric) else diff < 0
    wins, losses = int(better.sum()), int(((diff != 0) & ~better).sum())
    ties = len(diff) - wins - losses
    fig, ax = _new_figure(9.0, 5.0)
    changed = diff[diff != 0]
    positions = np.flatnonzero(diff.to_numpy() != 0)
    colours = [_WIN if b else _LOSS for b in better[diff != 0]]
    ax.bar(positions, changed.to_numpy(), width=0.85, color=colours)
    ax.axhline(0, color=_NEUTRAL, linewidth=0.8)
    _query_axis(ax, diff)
    ax.set_ylabel(f"Δ {metric} (trial − baseline)", fontsize=12)
    ax.tick_params(axis="y", labelsize=11)
    trial, base = short_labels([(labels or {}).get(t, t) for t in (trial_id, baseline_id)], None)
    ax.set_title(
        f"{_wrapped(f'{metric} per query: {trial}  vs  baseline {base}', 85)}\n"
        f"wins {wins} · ties {ties} · losses {losses} · mean Δ {diff.mean():+.4f}",
        fontsize=13,
    )
    ax.grid(axis="y", alpha=0.3)
    return fig


def _differences(
    per_query: pd.DataFrame, trial_id: str, baseline_id: str, metric: str
) -> pd.Series:
    """Trial minus baseline per query both have a value for, sorted descending."""
    rows = per_query[per_query["metric"] == metric]
    values = {}
    for tid in (trial_id, baseline_id):
        found = rows[rows["trial_id"] == tid].set_index("query_id")["value"].dropna()
        if found.empty:
            raise DataError(f"per_query_difference: no {metric} values for trial {tid!r}")
        values[tid] = found
    diff = (values[trial_id] - values[baseline_id]).dropna()
    if diff.empty:
        raise DataError(
            f"per_query_difference: trials {trial_id!r} and {baseline_id!r} share no query"
        )
    return diff.sort_values(ascending=False, kind="stable")


def _query_axis(ax: Axes, diff: pd.Series) -> None:
    """Query ids as ticks when they fit, otherwise just the count."""
    ax.set_xlim(-0.6, len(diff) - 0.4)
    if len(diff) <= 40:
        ax.set_xticks(range(len(diff)), diff.index.astype(str), rotation=90, fontsize=10)
        ax.set_xlabel("query (sorted by difference)", fontsize=12)
    else:
        ax.set_xticks([])
        ax.set_xlabel(f"{len(diff)} queries, sorted by difference", fontsize=12)


# ---------------------------------------------------------------- metric@k curves


def metric_at_k(
    curves: pd.DataFrame,
    trial_ids: Sequence[str],
    family: str,
    labels: Mapping[str, str] | None = None,
) -> Figure:
    """One line per trial: the mean of metric ``family`` (e.g. ``recall``) at each cutoff k."""
    family = family.split("@")[0]
    rows = curves[(curves["metric"] == family) & curves["trial_id"].isin(trial_ids)]
    rows = rows.dropna(subset=["value"])
    if not trial_ids:
        raise ConfigError("metric_at_k: no trial ids given")
    missing = [t for t in trial_ids if t not in set(rows["trial_id"])]
    if missing:
        raise DataError(f"metric_at_k: no {family}@k curve for trials {', '.join(missing)}")
    fig, ax = _new_figure()
    names = short_labels([(labels or {}).get(t, t) for t in trial_ids], None)
    depth = int(rows["k"].max())
    for i, (tid, name) in enumerate(zip(trial_ids, names, strict=True)):
        curve = rows[rows["trial_id"] == tid].sort_values("k")
        ax.plot(
            curve["k"],
            curve["value"],
            marker=_MARKERS[i % len(_MARKERS)] if depth <= 20 else None,
            markersize=4,
            color=_PALETTE[i % len(_PALETTE)],
            linestyle=_LINESTYLES[i // len(_PALETTE) % len(_LINESTYLES)],
            label=name,
        )
    ax.set_xlabel("cutoff k (rank)")
    ax.set_ylabel(f"mean {family}@k")
    ax.set_xlim(1, depth)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{family}@k for k = 1..{depth}")
    ax.grid(alpha=0.3)
    _legend_below(fig, *ax.get_legend_handles_labels())
    return fig


# ---------------------------------------------------------------- parameter grids


def heatmap(
    trials: pd.DataFrame, x: str, y: str, metric: str, chunker: str | None = None
) -> Figure:
    """``metric`` over the grid of two swept parameters, each cell annotated; where other
    parameters vary, a cell shows the best trial with its (x, y) values. ``chunker`` keeps
    the trials of one chunker kind; a grid over a chunker option must not mix kinds
    (``chunker_kinds``). ``DataError`` when the grid says nothing (``grids.grid_problem``:
    a single value, or parameters the sweep changed together). A colour scale spanning a
    narrow range (``NARROW``) says so."""
    ok = _usable(trials, [x, y, metric], "heatmap")
    if chunker is not None:
        ok = ok[ok[CHUNKER].astype(str) == chunker]
        if ok.empty:
            raise DataError(f"heatmap: no finished {chunker!r} chunker trial has {x} and {y}")
    elif chunker_kinds(ok, x, y) != [None]:
        raise DataError(
            f"heatmap: {_param_name(x)} × {_param_name(y)} mixes chunker kinds "
            f"({', '.join(map(str, chunker_kinds(ok, x, y)))}); draw one per kind (chunker=...)"
        )
    problem = grid_problem(ok, x, y)
    if problem is not None:
        raise DataError(f"heatmap: {problem}")
    pick = _best_of(metric)
    grid = ok.pivot_table(index=y, columns=x, values=metric, aggfunc=pick)
    counts = ok.groupby([y, x]).size()
    fig, ax = _new_figure(max(5.0, 1.1 * grid.shape[1] + 3), max(4.0, 0.6 * grid.shape[0] + 2))
    values = grid.to_numpy(dtype=float)
    image = ax.imshow(values, cmap="viridis", origin="lower", aspect="auto")
    _annotate_cells(ax, grid, image)
    ax.set_xticks(range(grid.shape[1]), [_tick(v) for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [_tick(v) for v in grid.index])
    if max(len(_tick(v)) for v in grid.columns) * grid.shape[1] > 60:
        ax.tick_params(axis="x", labelrotation=45)
    ax.set_xlabel(_param_name(x))
    ax.set_ylabel(_param_name(y))
    kind = f" ({chunker} chunker)" if chunker is not None else ""
    notes = [f"{pick} over the other parameters"] if counts.max() > 1 else []
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    narrow = high - low < NARROW * max(1.0, abs(low), abs(high))
    if narrow:
        notes.append(f"colours span only {high - low:.2g}")
    note = f"\n({'; '.join(notes)})" if notes else ""
    ax.set_title(f"{metric} by {_param_name(x)} × {_param_name(y)}{kind}{note}")
    span = "narrow range" if narrow else "colours span"
    fig.colorbar(image, ax=ax, label=f"{metric} ({span} {low:.3f}–{high:.3f})")
    return fig


def _annotate_cells(ax: Axes, grid: pd.DataFrame, image: mpl.image.AxesImage) -> None:
    """Write each cell's value, dark on light cells and light on dark ones."""
    values = grid.to_numpy(dtype=float)
    for row, col in np.argwhere(~np.isnan(values)):
        value = values[row, col]
        red, green, blue, _ = image.cmap(image.norm(value))
        light = 0.299 * red + 0.587 * green + 0.114 * blue > 0.5
        ax.text(
            col, row, f"{value:.3f}", ha="center", va="center", color="black" if light else "white"
        )
