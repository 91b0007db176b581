"""``report.html``: one self-contained file (plots embedded as data URIs, no external assets)."""

from __future__ import annotations

import base64
import html
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from ragbench.evaluate.metrics import best_index, higher_is_better
from ragbench.report.markdown import summary_lines

if TYPE_CHECKING:
    from ragbench.report.report import Report

__all__ = ["render_html"]

_CAPTIONS = {
    "pareto": "Quality against p95 latency per query; the Pareto front is highlighted.",
    "pareto_cost": "Quality against LLM cost per query (tokens per query where the config "
    "gives no prices); the Pareto front is highlighted.",
    "chunk_size": "The primary metric against chunk size, per chunker and retriever.",
    "per_query": "Per-query difference of the best trial against the baseline.",
    "at_k": "The metric at every cutoff k for the five best trials.",
}

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto;
       max-width: 1280px; padding: 0 1rem; color: #1d2330; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #dde; }
.meta { color: #5a6275; }
table { border-collapse: collapse; margin: .6rem 0; font-size: 13px; }
th, td { border: 1px solid #dde; padding: 4px 8px; text-align: right; vertical-align: top;
         white-space: nowrap; }
th { background: #f2f4f8; }
td.label, th.label { text-align: left; white-space: normal; min-width: 260px; }
td.best { font-weight: 700; background: #e8f6ec; }
td.base { background: #f6f6fb; }
.up { color: #137a34; } .down { color: #b3261e; }
figure { display: inline-block; margin: .5rem 1rem 1rem 0; vertical-align: top; }
figure img { max-width: 620px; border: 1px solid #e4e6ee; }
figcaption { color: #5a6275; font-size: 12px; max-width: 620px; }
.query { margin: 1rem 0 1.6rem; } .query h3 { font-size: 15px; margin-bottom: .3rem; }
.cols { display: grid; grid-template-columns: 1fr 1fr 1fr; gap: 1rem; }
.chunk { font-size: 12px; background: #fafbfd; border-left: 3px solid #c9cfdd;
         padding: 4px 8px; margin: 4px 0; white-space: pre-wrap; }
.gold .chunk { border-left-color: #d4a72c; }
.answer { font-size: 12px; background: #eef4ff; border-left: 3px solid #5b7fd6;
          padding: 4px 8px; margin: 4px 0; white-space: pre-wrap; }
pre { background: #f6f8fa; padding: .8rem; overflow-x: auto; font-size: 12px; }
"""

_SCRIPT = """
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute('data-images', imgs.length);
  document.body.setAttribute('data-images-loaded', ok);
});
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _spent(numeric: pd.DataFrame, column: str) -> pd.Series | None:
    """The numbers behind a display column of latency (p95), tokens or cost per query."""
    if column.endswith("p50/p95 ms"):
        return numeric[column.replace("p50/p95 ms", "p95 ms")]
    if column.endswith("tokens in/out"):
        stage = column.removesuffix(" tokens in/out")
        return numeric[f"{stage} prompt tokens"] + numeric[f"{stage} completion tokens"]
    if column == "tokens/query":
        return numeric["total tokens"]
    if column.endswith("USD/query"):
        return numeric[f"{column.removesuffix('USD/query').strip() or 'total'} USD"]
    return None


def _trial_table(report: Report, stages: bool) -> str:
    """Metrics with total latency, tokens and cost, or (``stages``) those of every stage."""
    numeric = report.to_dataframe()
    shown = report.display_table(stages=stages)
    if stages:
        shown = shown[["trial", *[c for c in shown.columns if _spent(numeric, c) is not None]]]
    best: dict[Hashable, set[object]] = {}
    for metric in report.metrics:
        best[metric] = {best_index(numeric[metric], metric)}
    for column in shown.columns:
        values = _spent(numeric, column)
        if values is not None:
            best[column] = set(values.index[values == values.min()])
    head = "".join(
        f'<th class="{"label" if c in ("id", "trial") else ""}">{_e(c)}</th>'
        for c in ["id", *shown]
    )
    rows = []
    for trial_id, row in shown.iterrows():
        cells = [f"<td class='label'><code>{_e(trial_id)}</code></td>"]
        for name, value in row.items():
            classes = ["label"] if name == "trial" else []
            if trial_id in best.get(name, ()):
                classes.append("best")
            if trial_id == report.baseline:
                classes.append("base")
            text = (
                _e(value)
                .replace("▲", "<span class='up'>▲</span>")
                .replace("▼", "<span class='down'>▼</span>")
            )
            cells.append(f"<td class='{' '.join(classes)}'>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = "".join(rows)
    return f"<table class='trials'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _selection(report: Report) -> str:
    table = report.selection_table()
    if table is None:
        return ""
    body = table.to_html(index=False, float_format=lambda v: f"{v:.4f}", border=0)
    return f"<h2>Honest selection</h2><p class='meta'>{_e(report.selection_note())}</p>{body}"


def _figures(images: dict[str, bytes]) -> str:
    parts = []
    for name, data in images.items():
        uri = "data:image/png;base64," + base64.b64encode(data).decode()
        caption = _CAPTIONS.get(name, name.replace("heatmap_", "Heatmap: ").replace("_", " "))
        parts.append(
            f"<figure><img src='{uri}' alt='{_e(name)}'><figcaption>{_e(caption)}"
            "</figcaption></figure>"
        )
    return "".join(parts)


def _answer(answer: str | None) -> str:
    return "" if answer is None else f"<div class='answer'><b>Answer</b>\n{_e(answer)}</div>"


def _chunks(items: list[dict]) -> str:
    if not items:
        return "<div class='chunk'>(no results)</div>"
    return "".join(
        f"<div class='chunk'><b>{int(c['rank'])}.</b> <code>{_e(c['chunk_id'])}</code> "
        f"({c['score']:.3f})\n{_e(c['text'])}</div>"
        for c in items
    )


def _drilldown(report: Report) -> str:
    if report.best == report.baseline:
        return "<p>The baseline is the best trial; no drill-down.</p>"
    frame = report.drilldown(n=8)
    if frame.empty:
        return "<p>The best trial and the baseline agree on every query.</p>"
    base, best = report.label(report.baseline), report.label(report.best)
    parts = [
        f"<p>Baseline <code>{_e(base)}</code> vs best <code>{_e(best)}</code> on "
        f"{_e(report.metric)}.</p>"
    ]
    rows: Iterable[Any] = frame.itertuples()  # named tuples of the drill-down's columns
    for row in rows:
        gold = row.gold
        evidence = "".join(
            f"<div class='chunk'><code>{_e(e['doc_id'])}</code>\n{_e(e['text'])}</div>"
            for e in gold["evidence"]
        ) or "".join(
            f"<div class='chunk'><code>{_e(d)}</code> grade {g}</div>"
            for d, g in gold["qrels"].items()
        )
        reference = gold["reference"]
        if reference is not None:
            evidence += f"<div class='answer'><b>Reference answer</b>\n{_e(reference)}</div>"
        cls = "up" if (row.delta > 0) == higher_is_better(report.metric) else "down"
        parts.append(
            f"<div class='query'><h3><code>{_e(row.query_id)}</code> {_e(row.query)} "
            f"<span class='{cls}'>{row.delta:+.3f}</span></h3><div class='cols'>"
            f"<div class='gold'><b>Gold evidence</b>{evidence}</div>"
            f"<div><b>Baseline</b> ({row.a:.3f}){_answer(row.answer_a)}{_chunks(row.top_a)}</div>"
            f"<div><b>Best</b> ({row.b:.3f}){_answer(row.answer_b)}{_chunks(row.top_b)}</div>"
            "</div></div>"
        )
    return "".join(parts)


def _environment(report: Report) -> str:
    manifest = report.manifest
    items = {
        "dataset path": manifest["dataset"]["path"],
        "dataset fingerprint": manifest["dataset_fingerprint"],
        "queries": manifest["queries"]["count"],
        "git commit": manifest.get("git_commit") or "-",
        "started": manifest.get("started", "-"),
        "finished": manifest.get("finished", "-"),
        "sweep seconds": f"{manifest.get('seconds', 0):.1f}",
        **manifest.get("versions", {}),
    }
    rows = "".join(
        f"<tr><th class='label'>{_e(k)}</th><td class='label'>{_e(v)}</td></tr>"
        for k, v in items.items()
    )
    return f"<table>{rows}</table>"


def _stages_heading(report: Report) -> str:
    if report.spend.empty:
        return "Latency by stage (ms per query, p50 / p95)"
    return (
        "Latency (ms, p50 / p95), LLM tokens (prompt / completion) and cost (US dollars) by "
        "stage, per query"
    )


def render_html(report: Report, images: dict[str, bytes]) -> str:
    """The whole report as one HTML document."""
    manifest = report.manifest
    dataset = manifest["dataset"]
    summary = "".join(
        f"<li>{_e(line[2:])}</li>" if line.startswith("- ") else f"<p>{_e(line)}</p>"
        for line in summary_lines(report)
    ).replace("**", "")
    failed = ""
    if not report.failed.empty:
        failed = "<h2>Failed trials</h2>" + pd.DataFrame(report.failed).to_html(index=False)
    config = yaml.safe_dump(manifest["config"], sort_keys=False)
    meta = (
        f"Dataset <b>{_e(dataset['name'])}</b> ({_e(dataset['split'])}, "
        f"{dataset['documents']} documents), {manifest['queries']['count']} queries, "
        f"{len(report.trials)} trials, level {_e(manifest['evaluation']['level'])}. "
        f"Fingerprint <code>{_e(manifest['dataset_fingerprint'][:16])}</code>."
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{_e(manifest["config"]["name"])} — ragbench report</title>
<style>{_STYLE}</style></head>
<body>
<h1>{_e(manifest["config"]["name"])}</h1>
<p class="meta">{meta}</p>
<h2>Summary</h2><ul>{summary}</ul>
<h2>Trials</h2>
<p class="meta">Mean ± half the {int(100 * 0.95)}% bootstrap interval; ▲/▼: significantly
better/worse than the baseline after correction; best value per column highlighted (latency:
lowest p95; tokens and cost: lowest).</p>
{_trial_table(report, stages=False)}
<h3>{_e(_stages_heading(report))}</h3>
{_trial_table(report, stages=True)}
{_selection(report)}
<h2>Plots</h2>{_figures(images)}
<h2>Drill-down</h2>{_drilldown(report)}
{failed}
<h2>Config</h2><pre>{_e(config)}</pre>
<h2>Environment</h2>{_environment(report)}
<script>{_SCRIPT}</script>
</body></html>
"""
