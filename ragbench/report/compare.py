"""Trials of several runs in one table, with warnings when the runs are not comparable."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ragbench.data.sample import ranked_text
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.metrics import best_first, parse_metric
from ragbench.experiment.store import RunStore
from ragbench.owned import claim
from ragbench.report.evidence import lost
from ragbench.report.tables import markdown_table, md_text

__all__ = ["compare_folder", "compare_runs", "write_comparison"]


def _differences(manifests: dict[str, dict]) -> list[str]:
    """Why numbers of these runs may not be comparable."""
    warnings = []
    checks = {
        "dataset fingerprint": lambda m: m["dataset_fingerprint"][:16],
        "split": lambda m: m["dataset"]["split"],
        "queries": lambda m: m["queries"]["count"],
        "documents": lambda m: ranked_text(m["dataset"]),
        "depth": lambda m: m["evaluation"]["depth"],
        "evaluation level": lambda m: m["evaluation"]["level"],
        "relevance level": lambda m: m["evaluation"]["relevance_level"],
    }
    for what, get in checks.items():
        values = {run: get(m) for run, m in manifests.items()}
        if len(set(values.values())) > 1:
            listed = ", ".join(f"{run}: {value}" for run, value in values.items())
            warnings.append(f"runs differ in {what} ({listed})")
    return warnings


def _names(manifests: dict[str, dict]) -> dict[str, str]:
    """Each run's name in the table: its config's name, with its folder when another run
    compared has the same name."""
    names = {run: str(m["config"]["name"]) for run, m in manifests.items()}
    counts = Counter(names.values())
    return {run: name if counts[name] == 1 else f"{name} ({run})" for run, name in names.items()}


def compare_runs(
    run_dirs: Sequence[Path | str], metric: str | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """All finished trials of ``run_dirs`` sorted best first by ``metric`` (default: the first
    run's first metric), plus warnings when datasets, splits, depths or metric cutoffs differ
    and when a run is incomplete (trials it planned never ran, or failed).

    Raises ``ConfigError`` when no run evaluated ``metric`` and ``DataError`` when no run has
    a finished trial with it (naming the run directories)."""
    if not run_dirs:
        raise ConfigError("compare: give at least one run directory")
    manifests = {str(d): RunStore(d).manifest() for d in run_dirs}
    evaluated_by = {d: RunStore(d).metrics() for d in manifests}
    metric = metric or next(iter(evaluated_by.values()))[0]
    evaluated = {m for metrics in evaluated_by.values() for m in metrics}
    try:  # parsed once: another spelling of an evaluated metric (NDCG@10, p@5) is the same
        parsed = parse_metric(metric)
    except ConfigError as exc:
        raise ConfigError(f"--metric {metric!r}: {exc}") from None
    if metric not in evaluated:
        metric = parsed.name
    if metric not in evaluated:
        raise ConfigError(
            f"--metric {metric!r}: no run evaluated it; they evaluated "
            f"{', '.join(sorted(evaluated))}"
        )
    warnings = _differences(manifests)
    family = parsed.family
    cutoffs = {
        run: sorted(
            m for m in man["config"]["evaluation"]["metrics"] if parse_metric(m).family == family
        )
        for run, man in manifests.items()
    }
    if len({tuple(c) for c in cutoffs.values()}) > 1:
        listed = ", ".join(f"{run}: {', '.join(c) or 'none'}" for run, c in cutoffs.items())
        warnings.append(f"runs measured {family} at different cutoffs ({listed})")
    frames, names = [], _names(manifests)
    for run, manifest in manifests.items():
        store = RunStore(run)
        trials = store.trials()
        missing = lost(manifest, trials, store.running()) if "status" in trials.columns else None
        if missing is not None:
            warnings.append(f"{run} is incomplete: {missing}")
        if metric not in trials.columns:
            warnings.append(f"{run} has no {metric}; its trials are left out")
            continue
        trials = trials[trials["status"] == "ok"].copy()
        trials.insert(0, "run", names[run])
        trials.insert(1, "documents", ranked_text(manifest["dataset"]))
        frames.append(trials)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if table.empty or metric not in table.columns:
        raise DataError(f"{', '.join(manifests)}: no finished trial with {metric!r}")
    columns = [
        "run",
        "documents",
        "trial_id",
        "label",
        metric,
        "latency.total.p50_ms",
        "latency.total.p95_ms",
    ]
    table = table[[c for c in columns if c in table.columns]]
    return best_first(table, metric), warnings


def compare_folder(run_dirs: Sequence[Path | str]) -> Path:
    """Where ``ragbench compare`` writes by default: ``reports/<run-name>/`` under the current
    folder (``reports/<a>-vs-<b>/`` for several runs, each named once, in the order given)."""
    names = dict.fromkeys(Path(d).resolve().name for d in run_dirs)
    return Path("reports") / "-vs-".join(names)


def write_comparison(
    table: pd.DataFrame, warnings: Sequence[str], out: Path | str
) -> dict[str, Path]:
    """Write ``compare.md`` (the warnings, then the table) and ``compare.csv`` (the table)
    into ``out``; returns the paths written by format."""
    folder = claim(out, "--out", "comparison")
    lines = ["# Comparison", ""]
    lines += [f"- warning: {md_text(w)}" for w in warnings] + ([""] if warnings else [])
    lines += [markdown_table(table, index=False), ""]
    written = {"md": folder / "compare.md", "csv": folder / "compare.csv"}
    written["md"].write_text("\n".join(lines), encoding="utf-8")
    table.to_csv(written["csv"], index=False)
    return written
