"""``report.md``: summary, trial table with significance marks, plots, drill-down, config."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from ragbench.evaluate.metrics import best_index, higher_is_better
from ragbench.report.tables import markdown_table

if TYPE_CHECKING:
    from ragbench.report.report import Report

__all__ = ["render_markdown", "summary_lines"]


def summary_lines(report: Report) -> list[str]:
    """Plain sentences: the baseline, and the best trial per metric with its difference."""
    base = report.label(report.baseline)
    lines = [
        f"Baseline: `{base}`. Test: {report.test}, {report.correction} correction, "
        f"alpha {report.alpha}; ▲/▼ mark significant differences from the baseline."
    ]
    stats = report.stats
    for metric in report.metrics:
        part = stats.loc[metric]
        best = best_index(part["mean"], metric)
        row = part.loc[best]
        wins, losses = int(row["wins"]), int(row["losses"])  # wins: higher than the baseline
        if not higher_is_better(metric):
            wins, losses = losses, wins
        if best == report.baseline:
            lines.append(f"- **{metric}**: the baseline is best ({row['mean']:.4f}).")
            continue
        verdict = "significant" if row["significant"] else "not significant"
        lines.append(
            f"- **{metric}**: `{report.label(best)}` {row['mean']:.4f} "
            f"({row['delta']:+.4f} vs baseline, p_adj = {row['p_adjusted']:.3g}, {verdict}; "
            f"95% CI {row['ci_low']:.4f}–{row['ci_high']:.4f}; "
            f"wins/ties/losses {wins}/{int(row['ties'])}/{losses})"
        )
    return lines


def render_markdown(report: Report, images: list[str]) -> str:
    """The whole Markdown report; ``images`` are plot names saved under ``plots/``."""
    manifest = report.manifest
    dataset = manifest["dataset"]
    lines = [
        f"# {manifest['config']['name']}",
        "",
        f"Dataset `{dataset['name']}` ({dataset['split']}, {dataset['documents']} documents), "
        f"{manifest['queries']['count']} queries, fingerprint "
        f"`{manifest['dataset_fingerprint'][:16]}`, level {manifest['evaluation']['level']}.",
        "",
        "## Best trial per metric",
        "",
        *summary_lines(report),
        "",
        "## Trials",
        "",
        report.to_markdown(),
        "",
    ]
    selection = report.selection_table()
    if selection is not None:
        lines += [
            "## Honest selection",
            "",
            report.selection_note(),
            "",
            markdown_table(selection, index=False),
            "",
        ]
    if images:
        lines += ["## Plots", ""] + [f"![{name}](plots/{name}.png)" for name in images] + [""]
    drill = report.drilldown(n=5) if report.best != report.baseline else None
    if drill is not None and not drill.empty:
        lines += [
            f"## Queries where `{report.label(report.best)}` and the baseline differ most",
            "",
        ]
        for row in drill.itertuples():
            lines.append(f"- `{row.query_id}` ({row.delta:+.3f}): {row.query}")
        lines.append("")
    if not report.failed.empty:
        lines += ["## Failed trials", ""]
        lines += [f"- `{r.trial_id}` {r.label}: {r.error}" for r in report.failed.itertuples()]
        lines.append("")
    config = yaml.safe_dump(manifest["config"], sort_keys=False).rstrip()
    lines += ["## Config", "", "```yaml", config, "```", ""]
    return "\n".join(lines)
