"""``report.html``: one self-contained file (plots embedded as data URIs, no external assets)."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import yaml

from ragbench.evaluate.metrics import higher_is_better
from ragbench.report.markdown import (
    caveat_lines,
    dataset_line,
    headline_lines,
    shared_line,
    summary_lines,
)

if TYPE_CHECKING:
    from ragbench.report.report import Report

__all__ = ["inline_html", "render_html"]

_CAPTIONS = {
    "pareto": "Quality against p95 latency per query; the Pareto front is highlighted.",
    "pareto_cost": "Quality against LLM cost per query (tokens per query where the config "
    "gives no prices); the Pareto front is highlighted.",
    "chunk_size": "The primary metric against chunk size, per chunker and retriever.",
    "per_query": "Per-query difference of the best trial against the baseline.",
    "at_k": "The metric at every cutoff k for the five best trials.",
}

# Tables stay inside the page: labels and headers wrap, numbers do not; a table that is still
# too wide (many stages or metrics) scrolls inside its own box with the trial column pinned.
_STYLE = """
*, *::before, *::after { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto;
       max-width: 1280px; padding: 0 1rem; color: #1d2330; overflow-wrap: anywhere; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #dde; }
.meta { color: #5a6275; }
.wide { max-width: 100%; overflow-x: auto; margin: .6rem 0; }
table { border-collapse: separate; border-spacing: 0; font-size: 13px; }
th, td { border: 1px solid #dde; border-width: 0 1px 1px 0; padding: 4px 7px;
         text-align: right; vertical-align: top; white-space: nowrap; background: #fff; }
tr > :first-child { border-left-width: 1px; } thead th, table.kv tr:first-child > * {
  border-top-width: 1px; }
th { background: #f2f4f8; white-space: normal; min-width: 4.5em; overflow-wrap: normal; }
.wide tr > :first-child { position: sticky; left: 0; z-index: 1; }
td.label, th.label { text-align: left; white-space: normal; min-width: 12em; max-width: 36em; }
td.rank { color: #5a6275; }
td .ci { color: #5a6275; font-size: 12px; }
td .id { color: #8a90a0; font-size: 11px; }
td .note { color: #8a5a00; font-size: 11px; }
td.best { font-weight: 700; background: #e8f6ec; }
td.base { background: #f6f6fb; }
.up { color: #137a34; } .down { color: #b3261e; }
li.pick { font-size: 15px; margin-bottom: .3rem; }
.headline { border: 1px solid #c9d8c9; border-left: 4px solid #137a34; background: #f4faf5;
            padding: .5rem 1rem; margin: .8rem 0 1rem; }
.headline p.pick { font-size: 16px; margin: .3rem 0; } .headline ul { margin: .3rem 0; }
li.caveat { color: #8a5a00; }
figure { display: inline-block; margin: .5rem 1rem 1rem 0; vertical-align: top;
         max-width: min(100%, 620px); }
figure img { max-width: 100%; border: 1px solid #e4e6ee; }
figcaption { color: #5a6275; font-size: 12px; }
.query { margin: 1rem 0 1.6rem; } .query h3 { font-size: 15px; margin-bottom: .3rem; }
.cols { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 1rem; }
.chunk { font-size: 12px; background: #fafbfd; border-left: 3px solid #c9cfdd;
         padding: 4px 8px; margin: 4px 0; white-space: pre-wrap; }
.gold .chunk { border-left-color: #d4a72c; }
.answer { font-size: 12px; background: #eef4ff; border-left: 3px solid #5b7fd6;
          padding: 4px 8px; margin: 4px 0; white-space: pre-wrap; }
pre { background: #f6f8fa; padding: .8rem; overflow-x: auto; font-size: 12px;
      overflow-wrap: normal; }
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


def _best(values: pd.Series, lowest: bool) -> set[Hashable]:
    """Every trial whose value ties the best one (the lowest, or the highest)."""
    found = values.dropna()
    if found.empty:
        return set()
    top = found.min() if lowest else found.max()
    return set(found.index[np.isclose(found, top, rtol=0.0, atol=1e-12)])


def _label(text: str, full: str) -> str:
    """A trial label that may break after each ``|`` (long labels wrap, not widen the table),
    its whole label on hover."""
    parts = " |<wbr> ".join(_e(part) for part in text.split(" | "))
    return f"<span title='{_e(full)}'>{parts}</span>"


def _value(text: str) -> str:
    """A ``mean ± half-CI ▲`` cell: the interval may go to a second line, in grey."""
    mean, sep, rest = text.partition(" ± ")
    shown = _e(mean) + (f" <span class='ci'>±&nbsp;{_e(rest)}</span>" if sep else "")
    return shown.replace("▲", "<span class='up'>▲</span>").replace(
        "▼", "<span class='down'>▼</span>"
    )


def _trial_table(report: Report, stages: bool) -> str:
    """Metrics with total latency, tokens and cost, or (``stages``) those of every stage.

    The first column is the trial's rank by the primary metric (the same number in both
    tables); both show the label without what every trial shares (the whole label on hover),
    the table of metrics the trial id too."""
    numeric = report.to_dataframe()
    shown = report.display_table(stages=stages)
    if stages:
        shown = shown[["trial", *[c for c in shown.columns if _spent(numeric, c) is not None]]]
    best: dict[Hashable, set[Hashable]] = {
        metric: _best(numeric[metric], lowest=not higher_is_better(metric))
        for metric in report.metrics
    }
    for column in shown.columns:
        values = _spent(numeric, column)
        if values is not None:
            best[column] = _best(values, lowest=True)
    head = "".join(
        f'<th class="{"label" if c == "trial" else ""}">{_e(c)}</th>' for c in ["#", *shown]
    )
    redundant = report.redundant
    rows = []
    for rank, (trial_id, row) in enumerate(shown.iterrows(), start=1):
        label = _label(str(row["trial"]), report.label(str(trial_id)))
        base = " base" if trial_id == report.baseline else ""
        cells = [f"<td class='rank{base}'>{rank}</td>"]
        for name, value in row.items():
            classes = ["label"] if name == "trial" else []
            if trial_id in best.get(name, ()):
                classes.append("best")
            if trial_id == report.baseline:
                classes.append("base")
            if name != "trial":
                text = _value(str(value))
            elif stages:
                text = label
            else:
                text = f"{label}<br><code class='id'>{_e(trial_id)}</code>"
                if trial_id in redundant:
                    text += (
                        f"<br><span class='note'>redundant: {_e(redundant[str(trial_id)])}</span>"
                    )
            cells.append(f"<td class='{' '.join(classes)}'>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = "".join(rows)
    return (
        f"<div class='wide'><table class='trials'><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table></div>"
    )


def _selection(report: Report) -> str:
    table = report.selection_table()
    if table is None:
        return ""
    body = table.to_html(index=False, float_format=lambda v: f"{v:.4f}", border=0)
    note = _e(report.selection_note())
    return f"<h2>Honest selection</h2><p class='meta'>{note}</p><div class='wide'>{body}</div>"


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
    against = report.contender
    if against is None:
        return "<p>One trial; no drill-down.</p>"
    role = "Baseline" if against == report.baseline else "Runner-up (the baseline is the best)"
    frame = report.drilldown(n=8)
    if frame.empty:
        return f"<p>The best trial and the {role.split()[0].lower()} agree on every query.</p>"
    base, best = report.name(against), report.name(report.best)
    parts = [
        f"<p>{_e(role)} <code>{_e(base)}</code> vs best <code>{_e(best)}</code> on "
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
    return f"<table class='kv'>{rows}</table>"


def _stages_heading(report: Report) -> str:
    if report.spend.empty:
        return "Latency by stage (ms per query, p50 / p95)"
    return (
        "Latency (ms, p50 / p95), LLM tokens (prompt / completion) and cost (US dollars) by "
        "stage, per query"
    )


# Markdown inline syntax of the summary lines (``tables.md_text`` / ``md_code``): a backslash
# escape, an entity md_text wrote, a code span (any run of backticks, closed by the same run),
# bold markers, or one other character.
_INLINE = re.compile(
    r"\\(?P<escaped>[\\`\[\]|])|(?P<entity>&(?:amp|lt|gt);)"
    r"|(?P<fence>`+)(?P<code>.*?[^`]|)(?P=fence)(?!`)|(?P<bold>\*\*)|(?P<char>.)",
    re.DOTALL,
)


def inline_html(line: str) -> str:
    """One Markdown line of the summary as HTML: code spans as ``<code>``, ``**`` as bold,
    escapes and entities resolved, everything else escaped (no backtick or ``**`` is left)."""
    out, bold = [], False
    for match in _INLINE.finditer(line):
        if match["escaped"] is not None:
            out.append(_e(match["escaped"]))
        elif match["entity"] is not None:
            out.append(match["entity"])
        elif match["fence"] is not None:
            code = match["code"]
            if code.startswith(" ") and code.endswith(" ") and code.strip():
                code = code[1:-1]
            out.append(f"<code>{_e(code)}</code>")
        elif match["bold"] is not None:
            out.append("</b>" if bold else "<b>")
            bold = not bold
        else:
            out.append(_e(match["char"]))
    return "".join(out) + ("</b>" if bold else "")


# list items of the summary shown apart: the pick and the confidence in it, generated labels
_SUMMARY_CLASSES = {
    "- **Recommendation**": "pick",
    "- **Confidence in the pick**": "pick",
    "- **Labels: generated**": "caveat",
}


def _summary(report: Report) -> str:
    """The summary's sentences and its list (the recommendation and the confidence in it
    first, highlighted; what the evidence cannot carry and a note on generated labels after
    them)."""
    lines = summary_lines(report)
    caveats = set(caveat_lines(report))
    texts = "".join(f"<p>{inline_html(line)}</p>" for line in lines if not line.startswith("- "))
    items = []
    for line in lines:
        if line.startswith("- "):
            kind = next((c for s, c in _SUMMARY_CLASSES.items() if line.startswith(s)), None)
            kind = "caveat" if line in caveats else kind
            opening = f"<li class='{kind}'>" if kind else "<li>"
            items.append(f"{opening}{inline_html(line[2:])}</li>")
    return f"{texts}<ul>{''.join(items)}</ul>"


def _headline(report: Report) -> str:
    """The answer first (``markdown.headline_lines``): the pick, then its gain, confidence,
    latency and labels as a list."""
    lines = headline_lines(report)
    texts = "".join(f"<p class='pick'>{inline_html(x)}</p>" for x in lines if x and x[0] != "-")
    items = "".join(f"<li>{inline_html(x[2:])}</li>" for x in lines if x.startswith("- "))
    return f"<section class='headline' id='headline'>{texts}<ul>{items}</ul></section>"


def _plot_notes(report: Report) -> str:
    notes = report.plot_notes()
    return "".join(f"<p class='meta'>{_e(note)}</p>" for note in notes)


def render_html(report: Report, images: dict[str, bytes]) -> str:
    """The whole report as one HTML document."""
    manifest = report.manifest
    failed = ""
    if not report.failed.empty:
        table = pd.DataFrame(report.failed).to_html(index=False)
        failed = f"<h2>Failed trials</h2><div class='wide'>{table}</div>"
    config = yaml.safe_dump(manifest["config"], sort_keys=False)
    meta = "".join(
        f"<p class='meta'>{inline_html(line)}</p>"
        for line in [dataset_line(report), *shared_line(report)]
        if line
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{_e(manifest["config"]["name"])} — ragbench report</title>
<style>{_STYLE}</style></head>
<body>
<h1>{_e(manifest["config"]["name"])}</h1>
{_headline(report)}
{meta}
<h2>Summary</h2>{_summary(report)}
<h2>Trials</h2>
<p class="meta">Mean ± half the {int(100 * 0.95)}% bootstrap interval; ▲/▼: significantly
better/worse than the baseline after correction; best value per column highlighted, every
trial tied for it (latency: lowest p95; tokens and cost: lowest); #: rank by
{_e(report.metric)}, the same in both tables.</p>
{_trial_table(report, stages=False)}
<h3>{_e(_stages_heading(report))}</h3>
{_trial_table(report, stages=True)}
{_selection(report)}
<h2>Plots</h2>{_figures(images)}{_plot_notes(report)}
<h2>Drill-down</h2>{_drilldown(report)}
{failed}
<h2>Config</h2><pre>{_e(config)}</pre>
<h2>Environment</h2>{_environment(report)}
<script>{_SCRIPT}</script>
</body></html>
"""
