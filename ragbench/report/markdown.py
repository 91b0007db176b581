"""``report.md``: summary, trial table with significance marks, plots, drill-down, config.

Text from configs and data (names, labels, queries, errors) is escaped: it renders as written,
never as HTML, links or Markdown structure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from ragbench.evaluate.metrics import best_index, higher_is_better
from ragbench.report.tables import markdown_table, md_code, md_fence, md_text

if TYPE_CHECKING:
    from ragbench.report.report import Report

__all__ = ["render_markdown", "summary_lines"]


def summary_lines(report: Report) -> list[str]:
    """Plain sentences: the baseline, and the best trial per metric with its difference."""
    base = md_code(report.label(report.baseline))
    lines = [
        f"Baseline: {base}. Test: {report.test}, {report.correction} correction, "
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
            lines.append(f"- **{md_text(metric)}**: the baseline is best ({row['mean']:.4f}).")
            continue
        verdict = "significant" if row["significant"] else "not significant"
        lines.append(
            f"- **{md_text(metric)}**: {md_code(report.label(best))} {row['mean']:.4f} "
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
        f"# {md_text(manifest['config']['name'])}",
        "",
        f"Dataset {md_code(dataset['name'])} ({md_text(dataset['split'])}, "
        f"{dataset['documents']} documents), {manifest['queries']['count']} queries, "
        f"fingerprint {md_code(manifest['dataset_fingerprint'][:16])}, "
        f"level {md_text(manifest['evaluation']['level'])}.",
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
            md_text(report.selection_note()),
            "",
            markdown_table(selection, index=False),
            "",
        ]
    if images:
        lines += ["## Plots", ""] + [f"![{name}](plots/{name}.png)" for name in images] + [""]
    drill = report.drilldown(n=5) if report.best != report.baseline else None
    if drill is not None and not drill.empty:
        lines += [
            f"## Queries where {md_code(report.label(report.best))} and the baseline differ most",
            "",
        ]
        for row in drill.itertuples():
            lines.append(f"- {md_code(row.query_id)} ({row.delta:+.3f}): {md_text(row.query)}")
        lines.append("")
    if not report.failed.empty:
        lines += ["## Failed trials", ""]
        lines += [
            f"- {md_code(r.trial_id)} {md_text(r.label)}: {md_text(r.error)}"
            for r in report.failed.itertuples()
        ]
        lines.append("")
    config = yaml.safe_dump(manifest["config"], sort_keys=False)
    lines += ["## Config", "", md_fence(config, "yaml"), ""]
    return "\n".join(lines)
