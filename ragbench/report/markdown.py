"""``report.md``: summary, trial table with significance marks, plots, drill-down, config.

Text from configs and data (names, labels, queries, errors) is escaped: it renders as written,
never as HTML, links or Markdown structure."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from ragbench.evaluate.metrics import best_index, higher_is_better
from ragbench.experiment.latency import CONTENTION
from ragbench.report.confidence import percent, tie_text
from ragbench.report.tables import TOTAL_P50, markdown_table, md_code, md_fence, md_text

if TYPE_CHECKING:
    from ragbench.report.report import Recommendation, Report

__all__ = [
    "answer_lines",
    "caveat_lines",
    "confidence_line",
    "dataset_line",
    "documents_text",
    "headline_lines",
    "labels_line",
    "recommendation_line",
    "render_markdown",
    "sample_line",
    "shared_line",
    "summary_lines",
    "trials_text",
]


def summary_lines(report: Report) -> list[str]:
    """Plain sentences: the baseline, the recommendation with the confidence in it, what the
    evidence cannot carry (``caveat_lines``) and whether the labels were generated, the best
    trial per metric with its difference, then redundant trials, metrics the run skipped or the
    report could not test (and why) and unknown costs."""
    base = md_code(report.name(report.baseline))
    lines = [
        f"Baseline: {base}. Test: {report.test}, {report.correction} correction, "
        f"alpha {report.alpha}; ▲/▼ mark significant differences from the baseline.",
        *_answer(report),
    ]
    stats = report.stats
    inseparable = report.evidence.inseparable
    for metric in report.metrics:
        if metric in inseparable:
            why = inseparable[metric]
            if metric == report.metric and report.evidence.withheld is not None:
                why = "see No pick above"
            lines.append(f"- **{md_text(metric)}**: cannot separate the trials: {why}.")
            continue
        part = stats.loc[metric]
        best = best_index(part["mean"], metric)
        row = part.loc[best]
        wins, losses = int(row["wins"]), int(row["losses"])  # wins: higher than the baseline
        if not higher_is_better(metric):
            wins, losses = losses, wins
        tied = int((part["mean"] == row["mean"]).sum()) - 1
        ties = f"; tied with {tied} other trial(s)" if tied else ""
        if best == report.baseline:
            lines.append(
                f"- **{md_text(metric)}**: the baseline is best ({row['mean']:.4f}{ties})."
            )
            continue
        verdict = "significant" if row["significant"] else "not significant"
        lines.append(
            f"- **{md_text(metric)}**: {md_code(report.name(best))} {row['mean']:.4f} "
            f"({row['delta']:+.4f} vs baseline, p_adj = {row['p_adjusted']:.3g}, {verdict}; "
            f"95% CI {row['ci_low']:.4f}–{row['ci_high']:.4f}; "
            f"wins/ties/losses {wins}/{int(row['ties'])}/{losses}{ties})"
        )
    return lines + _redundant(report) + _notes(report)


def _answer(report: Report) -> list[str]:
    """The recommendation, the confidence in it, the caveats and the labels' origin."""
    return [
        recommendation_line(report),
        confidence_line(report),
        *caveat_lines(report),
        *labels_line(report),
        *sample_line(report),
    ]


def caveat_lines(report: Report) -> list[str]:
    """One line per thing the run's evidence cannot carry (``Report.evidence``)."""
    return [caveat.line() for caveat in report.evidence.caveats]


def recommendation_line(report: Report) -> str:
    """One line: the best configuration on the primary metric, and the best whose p50 total
    latency is within the baseline's (or the latency budget); trials tied on the metric are
    shown as a tie (``tie: A and B at 0.7312``), never as a silent pick. No configuration
    when the queries cannot separate the trials; which trials it is among when some of the
    planned ones did not finish."""
    evidence = report.evidence
    if evidence.withheld is not None:
        return (
            f"- **Recommendation**: none: these queries cannot separate the trials on "
            f"{md_text(report.metric)} (see {evidence.withheld.title} below)."
        )
    pick = report.recommendation()
    shown = _pick(report, pick.best, pick.tied, pick.then or report.metric)
    among = f" ({evidence.among})" if evidence.among else ""
    line = f"- **Recommendation**{among}: best overall {shown}"
    if pick.then is not None:
        first = float(report.stats.loc[report.metric]["mean"][pick.best])
        line += (
            f", the best on {md_text(pick.then)} of the {len(pick.among)} trials "
            f"{md_text(report.metric)} cannot separate ({md_text(report.metric)} {first:.4f})"
        )
    if pick.bound_ms is None:
        return line + "; the run measured no latency, so there is no pick within a latency bound."
    bound = (
        f"the baseline's latency (p50 total ≤ {pick.bound_ms:.3g} ms)"
        if pick.bound == "baseline"
        else f"the latency budget (p50 total ≤ {pick.bound_ms:g} ms)"
    )
    if pick.within is None:
        return line + f"; no trial is within {bound}."
    if pick.within == pick.best:
        return line + f", also the best within {bound}."
    return line + f"; best within {bound}: {_pick(report, pick.within, pick.tied_within)}."


def _pick(report: Report, trial_id: str, tied: tuple[str, ...], metric: str | None = None) -> str:
    """A picked trial with its mean on ``metric`` (default: the primary), the mean's 95%
    bootstrap interval and p50 latency; for a tie, every tied trial, and which of them is the
    fastest when latency separates them."""
    metric = metric or report.metric
    mean = float(report.stats.loc[metric]["mean"][trial_id])
    latency = report.trials.set_index("trial_id").get(TOTAL_P50)
    ms = latency if latency is not None else pd.Series(dtype=float)
    p50 = ms.get(trial_id, float("nan"))
    cost = f", p50 {p50:.3g} ms" if p50 == p50 else ""
    low, high = (float(report.stats.loc[metric][c][trial_id]) for c in ("ci_low", "ci_high"))
    interval = f" [95% CI {low:.4f}–{high:.4f}]" if low == low and high == high else ""
    shown = f"{md_code(report.name(trial_id))} ({metric} {mean:.4f}{interval}{cost}"
    if not tied:
        return shown + ")"
    tie = tie_text([md_code(report.name(t)) for t in tied], mean)
    others = ms.reindex([t for t in tied if t != trial_id])
    if p50 == p50 and others.notna().all() and bool((others > p50).all()):
        return shown + f"; the fastest in a {tie})"
    return f"{tie} ({metric}; latency does not separate them)"


def answer_lines(report: Report, collection: str = "default") -> list[str]:
    """What a terminal shows at the end of a sweep, as plain text: the recommendation, how
    sure it is, what the evidence cannot carry, whether the labels were generated, and the
    command that deploys the pick (none when there is no pick)."""
    plain = [line.removeprefix("- ").replace("**", "").replace("`", "") for line in _answer(report)]
    if report.evidence.withheld is not None:
        return [*plain, "", "deploy:        none (no trial is recommended)"]
    return [*plain, "", f"deploy:        {report.deploy_command(collection)}"]


def confidence_line(report: Report) -> str:
    """How sure the pick on the primary metric is: the trial best in most bootstrap
    resamples of the queries, or the trials the queries cannot separate; among which trials,
    when some of the planned ones did not finish. Nothing to be sure of without a pick or
    with one trial."""
    evidence = report.evidence
    head = f"- **Confidence in the pick** ({md_text(report.metric)})"
    if evidence.withheld is not None:
        return f"{head}: none, there is no pick."
    if evidence.finished == 1:
        if evidence.planned == 1:
            return f"{head}: the run has one trial, so there is no other to compare it with."
        return (
            f"{head}: only 1 of the {evidence.planned} planned trials finished, so there is no "
            "other to compare it with."
        )
    among = f", {evidence.among}" if evidence.among else ""
    return f"{head}: {report.confidence.line(lambda t: md_code(report.name(t)))}{among}."


def labels_line(report: Report) -> list[str]:
    """A line saying the labels were generated (and by which method), when they were."""
    methods = report.generated_labels
    if not methods:
        return []
    queries = int(report.manifest["queries"]["count"])
    generated = sum(methods.values())
    by = ", ".join(m if len(methods) == 1 else f"{m} {n:,}" for m, n in methods.items())
    which = f"{queries:,} queries" if generated == queries else f"{generated:,} of {queries:,}"
    return [
        f"- **Labels: generated** ({md_text(by)}), {which}: the pick holds as far as these "
        "labels rank trials like real ones (measure it: `ragbench datasets agreement`)."
    ]


def documents_text(report: Report) -> str:
    """``5183 documents``, or ``a sample of 2,000 of 104,512 documents (seed 0)``."""
    sample = report.sample
    if sample is None:
        return f"{report.manifest['dataset']['documents']} documents"
    return f"a sample of {sample.text()}"


def sample_line(report: Report) -> list[str]:
    """A line saying the sweep ran on a sample of the documents, when it did, and what the
    deploy command indexes."""
    sample = report.sample
    if sample is None:
        return []
    deployed = (
        "the deploy command indexes every document"
        if report.deploys_whole
        else f"the deploy command indexes these {sample.documents:,} documents only"
    )
    return [
        f"- **Sample**: the sweep ran on {md_text(sample.text())}, drawn to keep the corpus' "
        "mix of folders, file types and sizes; the pick holds as far as the sample ranks "
        f"trials like the whole corpus, and {deployed}."
    ]


def _redundant(report: Report) -> list[str]:
    """Trials that cannot rank differently from another trial of the sweep, and why."""
    found = report.redundant
    if not found:
        return []
    listed = "; ".join(md_code(report.name(t)) for t in list(found)[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    reasons = "; ".join(sorted(set(found.values())))
    return [
        f"- **{len(found)} redundant trial(s)** cannot differ from another trial: {listed}{more} "
        f"({md_text(reasons)}). Drop them from the sweep."
    ]


def _notes(report: Report) -> list[str]:
    """Metrics skipped by the run or compared on fewer queries, and unknown costs."""
    lines = [
        f"- **{md_text(metric)}** skipped by the run: {md_text(why)}."
        for metric, why in report.manifest.get("skipped_metrics", {}).items()
    ]
    queries = int(report.manifest["queries"]["count"])
    why = "no reference answer, or a judge reply that could not be parsed"
    for metric, compared in report.compared.items():
        if compared == queries:
            continue
        name = md_text(metric)
        if metric in report.metrics:
            lines.append(
                f"- **{name}**: {queries - compared} of {queries} queries have no value for some "
                f"trial ({why}); its means, intervals and tests use the other {compared}."
            )
        else:
            lines.append(
                f"- **{name}**: only {compared} of {queries} queries have a value for every "
                f"trial ({why}); too few to test, so it is left out of the tables."
            )
    spent = report.spend
    if not spent.empty:
        unknown = int(spent["cost.total"].isna().sum())
        if unknown:
            lines.append(
                f"- Cost per query is unknown for {unknown} trial(s): the config's `prices` "
                "has no price for their model; the quality-vs-cost plot uses tokens per query."
            )
    return lines + _latency_notes(report)


def _latency_notes(report: Report) -> list[str]:
    """How latency was measured, and which trials were measured on a busy machine."""
    trials = report.trials
    if "latency.queries" not in trials.columns or trials["latency.queries"].isna().all():
        return []
    first = trials.dropna(subset=["latency.queries"]).iloc[0]
    when = sorted({str(v)[:10] for v in trials["latency.measured_at"].dropna()})
    machines = sorted({str(v) for v in trials["latency.machine"].dropna()})
    threads = first.get("latency.threads")
    lines = [
        f"- Latency: {int(first['latency.queries'])} sampled queries, each alone, the fastest "
        f"of {int(first['latency.repeats'])} repeats less the time spent waiting for a CPU"
        + (f", thread pools ({md_text(str(threads))})" if threads == threads and threads else "")
        + f"; measured {', '.join(when)} on {md_text('; '.join(machines))} "
        "(cached: `ragbench run --remeasure-latency` measures again)."
    ]
    share = trials["latency.contention"].astype(float)
    busy = trials[share > CONTENTION]
    if not busy.empty:
        names = ", ".join(map(report.name, busy["trial_id"].head(3)))
        lines.append(
            f"- **Latency of {len(busy)} trial(s) was measured under contention**: other "
            f"processes used up to {share.max():.0%} of the CPU meanwhile "
            f"({md_text(names)}{', ...' if len(busy) > 3 else ''}); "
            "the time they waited for a CPU was taken out of their figures, but cache and "
            "memory contention was not: measure again on a quiet machine to be sure."
        )
    return lines


def headline_lines(report: Report) -> list[str]:
    """The answer before the details, as Markdown: the recommended configuration (its label
    without what every trial shares), then one item each for its gain over the baseline on
    the primary metric (paired difference, its 95% bootstrap interval and corrected p), how
    sure the pick is, its p50 latency against the baseline's, and whether the labels were
    generated. Every number is one the details show (``Report.stats``, ``confidence``,
    ``recommendation``) or the interval of the difference they show (``Report.gain``)."""
    evidence = report.evidence
    if evidence.withheld is not None:
        return [
            f"**No recommendation**: these queries cannot separate the trials on "
            f"{md_text(report.metric)} (see {evidence.withheld.title} below).",
            "",
            _labels_item(report),
        ]
    pick = report.recommendation()
    best = pick.best
    shown = md_code(report.name(best))
    if pick.tied:
        tie = tie_text([md_code(report.name(t)) for t in pick.tied])
        shown += f", the fastest of a {tie}" if best in pick.tied else f" ({tie})"
    among = f" ({evidence.among})" if evidence.among else ""
    return [
        f"**Recommended{among}**: {shown}",
        "",
        _gain_item(report, best),
        _confidence_item(report, best),
        _latency_item(report, pick),
        _labels_item(report),
    ]


def _gain_item(report: Report, trial_id: str) -> str:
    """The pick against the baseline on the primary metric."""
    metric, base = report.metric, report.baseline
    stats = report.stats.loc[metric]
    head = f"- **Gain over the baseline** {md_code(report.name(base))}"
    if trial_id == base:
        return f"{head}: none, the baseline is the pick ({metric} {stats['mean'][base]:.4f})."
    row = stats.loc[trial_id]
    low, high = report.gain(trial_id)
    verdict = "significant" if row["significant"] else "not significant"
    return (
        f"{head}: {md_text(metric)} {row['delta']:+.4f} ({stats['mean'][base]:.4f} → "
        f"{row['mean']:.4f}; 95% CI of the difference {low:+.4f} to {high:+.4f}), "
        f"p_adj = {row['p_adjusted']:.3g}, {verdict}."
    )


def _confidence_item(report: Report, trial_id: str) -> str:
    """How often the pick is the best when the queries are resampled."""
    confidence = report.confidence
    if report.evidence.finished == 1:
        return confidence_line(report)
    share = percent(float(confidence.p_best[trial_id]))
    head = (
        f"- **Confidence**: best in {share} of {confidence.n_resamples:,} bootstrap resamples "
        f"of the {confidence.queries:,} queries"
    )
    others = [t for t in confidence.leaders if t != trial_id]
    if not others:
        return head + "."
    many = f"{len(others)} other trial{'s' if len(others) > 1 else ''}"
    return f"{head}; the queries cannot separate it from {many} (see Confidence in the pick)."


def _latency_item(report: Report, pick: Recommendation) -> str:
    """The pick's p50 latency against the baseline's, and the best within the bound when
    that is another trial."""
    if pick.bound_ms is None:
        return "- **Latency**: the run measured none."
    p50 = report.trials.set_index("trial_id")[TOTAL_P50]
    mine, base = (_ms(float(p50[t])) for t in (pick.best, report.baseline))
    line = f"- **Latency**: p50 {mine} per query, the baseline's {base}"
    if pick.within is None or pick.within == pick.best:
        return line + "."
    mean = float(report.stats.loc[report.metric]["mean"][pick.within])
    bound = "the baseline's" if pick.bound == "baseline" else "the budget's"
    return (
        f"{line}; the best within {bound}: {md_code(report.name(pick.within))} "
        f"({md_text(report.metric)} {mean:.4f}, p50 {float(p50[pick.within]):.3g} ms)."
    )


def _ms(value: float) -> str:
    """A latency in milliseconds, or that it was not measured (NaN)."""
    return f"{value:.3g} ms" if value == value else "not measured"


def _labels_item(report: Report) -> str:
    """Whether the labels were generated."""
    methods = report.generated_labels
    if not methods:
        return "- **Labels**: the dataset's own, not generated."
    return "- **Labels: generated** " + labels_line(report)[0].removeprefix(
        "- **Labels: generated** "
    )


def shared_line(report: Report) -> list[str]:
    """The label parts every trial shares, said once, and a blank line (nothing when no
    part is shared)."""
    shared = report.labels.shared
    if not shared:
        return []
    return [f"Shared by every trial: {'; '.join(s.text(md_code) for s in shared)}.", ""]


def dataset_line(report: Report) -> str:
    """The dataset by the user's name for it, its split, documents and queries, the trials,
    the fingerprint and the evaluation level."""
    manifest = report.manifest
    dataset = manifest["dataset"]
    labels = ""
    if report.dataset_name != dataset["name"]:
        labels = f", labels in {md_code(dataset['name'])}"
    return (
        f"Dataset {md_code(report.dataset_name)} ({md_text(dataset['split'])}, "
        f"{md_text(documents_text(report))}{labels}), {manifest['queries']['count']} queries, "
        f"{trials_text(report)}, fingerprint {md_code(manifest['dataset_fingerprint'][:16])}, "
        f"level {md_text(manifest['evaluation']['level'])}."
    )


def render_markdown(report: Report, images: list[str]) -> str:
    """The whole Markdown report; ``images`` are plot names saved under ``plots/``."""
    manifest = report.manifest
    lines = [
        f"# {md_text(manifest['config']['name'])}",
        "",
        *headline_lines(report),
        "",
        dataset_line(report),
        "",
        *shared_line(report),
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
    notes = [f"- {md_text(note)}" for note in report.plot_notes()]
    if images or notes:
        lines += ["## Plots", ""] + [f"![{name}](plots/{name}.png)" for name in images] + [""]
        lines += [*notes, ""] if notes else []
    lines += _drilldown_lines(report)
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


def trials_text(report: Report) -> str:
    """``6 trials``, or ``1 of 6 planned trials finished`` when some did not."""
    evidence = report.evidence
    if evidence.finished < evidence.planned:
        return f"{evidence.finished} of {evidence.planned} planned trials finished"
    return f"{evidence.finished} trial{'' if evidence.finished == 1 else 's'}"


def _drilldown_lines(report: Report) -> list[str]:
    """The section on the five queries where the best trial and its contender differ most,
    with their answers when there are any (none when no query differs)."""
    drill = report.drilldown(n=5)
    if drill.empty:
        return []
    against = "the baseline" if report.contender == report.baseline else "the runner-up"
    lines = [
        f"## Queries where {md_code(report.name(report.best))} and {against} differ most",
        "",
    ]
    rows: Iterable[Any] = drill.itertuples()  # named tuples of the drill-down's columns
    for row in rows:
        lines.append(f"- {md_code(row.query_id)} ({row.delta:+.3f}): {md_text(row.query)}")
        for name, answer in (
            ("reference answer", row.gold["reference"]),
            (f"{against.removeprefix('the ')} answer", row.answer_a),
            ("best answer", row.answer_b),
        ):
            if answer is not None:
                lines.append(f"  - {name}: {md_text(answer)}")
    lines.append("")
    return lines
