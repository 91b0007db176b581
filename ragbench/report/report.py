"""A comparison report of one run: which configuration wins, by how much, whether the
difference is real, and what it costs in latency.

``Report.from_run(run_dir)`` reads the run directory contract only (ARCHITECTURE.md, "The run
directory"), tests every trial against the baseline per metric (paired test, multiple-comparison
correction, bootstrap confidence intervals), and renders to a DataFrame, Markdown, LaTeX, CSV, PNG
plots and one self-contained HTML file. Its recommendation reports trials tied on the primary
metric as a tie, comes with the bootstrap confidence in the pick (``confidence``), says when
the labels were generated (``generated_labels``) and what the evidence cannot carry
(``evidence``: an incomplete run, queries that cannot separate the trials — then there is no
pick —, models trained on evaluated queries, splits sharing queries).
"""

from __future__ import annotations

import html
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from ragbench.data.sample import Sampled
from ragbench.errors import ConfigError, DataError, command_line
from ragbench.evaluate.metrics import (
    best_first,
    best_index,
    best_indices,
    higher_is_better,
    parse_metric,
)
from ragbench.evaluate.significance import bootstrap_ci, compare, compare_all
from ragbench.experiment.config import trial_of
from ragbench.experiment.store import RunStore
from ragbench.owned import claim
from ragbench.registry import redundancy
from ragbench.report.confidence import PickConfidence, pick_confidence, tie_text
from ragbench.report.drilldown import drilldown
from ragbench.report.evidence import Evidence, assess, shared_text
from ragbench.report.figures import VARYING, Plot, run_cache
from ragbench.report.figures import images as figure_images
from ragbench.report.grids import changing_together, heatmap_pairs, swept_parameters
from ragbench.report.labels import TrialLabels, trial_labels
from ragbench.report.tables import (
    TOTAL_P50,
    latency_stages,
    markdown_table,
    spend,
    usage_stages,
    usd,
)

__all__ = ["Recommendation", "Report", "report_folder"]

log = logging.getLogger(__name__)

Test = Literal["t", "wilcoxon", "permutation"]
Correction = Literal["holm", "bonferroni", "bh", "none"]


def report_folder(run_dir: Path | str) -> Path:
    """Where ``ragbench report`` writes by default: ``reports/<run-name>/`` under the current
    folder, beside ``runs/`` (the run directory's own name: two runs never share a folder)."""
    return Path("reports") / Path(run_dir).resolve().name


@dataclass(frozen=True)
class Recommendation:
    """The configuration to pick on the primary metric: the best overall, and the best whose
    p50 total latency is at most ``bound_ms`` (the baseline's, or the ``--latency-budget``).

    ``within`` is None when no trial is within the bound, ``bound_ms`` None when the run
    measured no latency. A tie is not a pick: ``tied`` (``tied_within``) holds every trial tied
    with ``best`` (``within``) on the metric, itself included, when there is more than one;
    ``best`` and ``within`` are then the fastest of them (the first in run order when latency
    does not separate them either). With a second metric (``then``, ``--select``), ``best`` is
    the best on it among ``among``: the trials the primary metric cannot separate (its
    bootstrap leaders, when more than one)."""

    metric: str
    best: str
    bound: Literal["baseline", "budget"]
    bound_ms: float | None
    within: str | None
    tied: tuple[str, ...] = ()
    tied_within: tuple[str, ...] = ()
    then: str | None = None
    among: tuple[str, ...] = ()


def _fastest(
    means: pd.Series, latency: pd.Series, metric: str
) -> tuple[str | None, tuple[str, ...]]:
    """The fastest of the trials tied for best of ``means`` (first in order on equal or
    unknown latency), and all of them when they are more than one."""
    tied = [str(t) for t in best_indices(means, metric)]
    if not tied:
        return None, ()
    ms = latency.reindex(tied)
    fastest = str(ms.idxmin()) if ms.notna().any() else tied[0]
    return fastest, tuple(tied) if len(tied) > 1 else ()


def _match(trials: pd.DataFrame, wanted: str) -> str | None:
    """A trial id from an id, an exact label, or text a label contains (first in run order)."""
    for match in (
        trials["trial_id"] == wanted,
        trials["label"] == wanted,
        trials["label"].str.lower().str.contains(wanted.lower(), regex=False),
    ):
        if match.any():
            return str(trials.loc[match, "trial_id"].iloc[0])
    return None


def _canonical(metric: str) -> str:
    """The canonical spelling of ``metric`` (``NDCG@10`` → ``ndcg@10``), or it unchanged."""
    try:
        return parse_metric(metric).name
    except ConfigError:
        return metric


def _resolve(
    trials: pd.DataFrame, run_dir: Path | str, given: str | None, configured: str | None
) -> str:
    """The baseline's trial id: ``given`` (the caller's ``--baseline``), else the run config's
    ``baseline``, else the first finished trial."""
    wanted = given or configured
    if wanted is None:
        return str(trials["trial_id"].iloc[0])
    found = _match(trials, wanted)
    if found is not None:
        return found
    labels = list(trials["label"])[:8]
    if given:
        raise ConfigError(
            f"--baseline {given!r}: matches no finished trial of {run_dir} (labels: {labels})"
        )
    raise DataError(
        f"{RunStore(run_dir).manifest_path}: the config's baseline {configured!r} matches no "
        f"finished trial (labels: {labels})"
    )


@dataclass
class Report:
    """Significance-tested comparison of the trials of a run against a baseline."""

    run_dir: Path
    baseline: str
    metric: str
    test: Test = "permutation"
    correction: Correction = "holm"
    alpha: float = 0.05
    n_resamples: int = 10_000
    latency_budget_ms: float | None = None
    then: str | None = None
    """A second metric that decides among the trials the primary one cannot separate."""
    store: RunStore = field(init=False)

    def __post_init__(self) -> None:
        budget = self.latency_budget_ms
        if budget is not None and not budget > 0:
            raise ConfigError(
                f"--latency-budget {budget:g}: must be a positive number of milliseconds (p50 "
                "total latency per query)"
            )
        self.store = RunStore(self.run_dir)

    @classmethod
    def from_run(
        cls,
        run_dir: Path | str,
        baseline: str | None = None,
        metric: str | None = None,
        **options: Any,
    ) -> Report:
        """Report on ``run_dir``; the baseline defaults to the config's, else the first trial."""
        store = RunStore(run_dir)
        manifest = store.manifest()
        trials = store.trials()
        ok = trials[trials["status"] == "ok"] if not trials.empty else trials
        if ok.empty:
            raise DataError(f"{run_dir}: no finished trial to report on")
        queries = int(manifest.get("queries", {}).get("count", 0))
        if queries < 2:
            raise DataError(
                f"{run_dir}: a report tests trials against each other query by query and needs "
                f"at least 2 queries; this run has {queries}"
            )
        metrics = store.metrics()
        if metric is not None:
            metric = next((m for m in metrics if m == metric or m == _canonical(metric)), metric)
        if metric is not None and metric not in metrics:
            raise ConfigError(f"--metric {metric!r}: the run evaluated {', '.join(metrics)}")
        then = options.get("then")
        if then is not None:
            then = next((m for m in metrics if m == then or m == _canonical(then)), then)
            if then not in metrics or then == (metric or metrics[0]):
                others = ", ".join(m for m in metrics if m != (metric or metrics[0]))
                raise ConfigError(
                    f"--select {then!r}: expected another metric the run evaluated ({others})"
                )
            options = {**options, "then": then}
        chosen = _resolve(ok, run_dir, baseline, manifest["config"].get("baseline"))
        report = cls(Path(run_dir), chosen, metric or metrics[0], **options)
        if report.metric not in report.metrics:
            raise DataError(
                f"{store.path / 'per_query.parquet'}: {report.metric} has a value for every "
                f"trial on {report.compared[report.metric]} of {queries} queries; a report "
                "needs at least 2"
            )
        return report

    # ------------------------------------------------------------ data

    @cached_property
    def manifest(self) -> dict[str, Any]:
        """``manifest.json``."""
        return self.store.manifest()

    @cached_property
    def metrics(self) -> list[str]:
        """Evaluated metrics, the primary one first; those with fewer than 2 queries where
        every trial has a value (see ``compared``) cannot be tested and are left out."""
        listed = [m for m in self.store.metrics() if self.compared.get(m, 0) >= 2]
        return [m for m in dict.fromkeys([self.metric, *listed]) if m in listed]

    @cached_property
    def run_trials(self) -> pd.DataFrame:
        """Every trial of ``trials.parquet``, finished or failed, read once: the report is of
        one version of it, even of a run that is still writing it."""
        return self.store.trials()

    @cached_property
    def running(self) -> bool:
        """Whether the run is still running (another process holds its run directory)."""
        return self.store.running()

    @cached_property
    def _finished(self) -> pd.DataFrame:
        trials = self.run_trials
        return trials[trials["status"] == "ok"].reset_index(drop=True)

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """The per-query values the report compares: those of finished trials, without the
        queries where some trial has no value of the metric (NaN: an answer metric on a query
        without a reference answer, a judge reply ragas could not parse)."""
        finished = self._finished["trial_id"]  # read before the values: a run writes them first
        values = self.store.per_query()
        values = values[values["trial_id"].isin(finished)]
        missing = values.loc[values["value"].isna(), ["metric", "query_id"]].drop_duplicates()
        pairs = pd.MultiIndex.from_frame(values[["metric", "query_id"]])
        return values[~pairs.isin(pd.MultiIndex.from_frame(missing))].reset_index(drop=True)

    @cached_property
    def compared(self) -> dict[str, int]:
        """Per evaluated metric, the number of queries compared (where every trial has a
        value)."""
        counts = self.per_query.groupby("metric")["query_id"].nunique()
        return {m: int(counts.get(m, 0)) for m in self.store.metrics()}

    @cached_property
    def trials(self) -> pd.DataFrame:
        """Finished trials; each metric's column is the mean over the compared queries (the
        mean of trials.parquet unless some query lacks a value)."""
        means = self.stats["mean"].unstack("metric")
        trials = self._finished.copy()
        for metric in self.metrics:
            trials[metric] = trials["trial_id"].map(means[metric])
        return trials

    @cached_property
    def failed(self) -> pd.DataFrame:
        """Trials that failed, with their errors."""
        trials = self.run_trials
        return trials[trials["status"] != "ok"][["trial_id", "label", "error"]]

    @cached_property
    def stats(self) -> pd.DataFrame:
        """Per (metric, trial): mean, CI, delta, p, corrected p, effect size, wins/ties/losses."""
        return compare_all(
            self.per_query,
            self.baseline,
            self.metrics,
            test=self.test,
            correction=self.correction,
            alpha=self.alpha,
            n_resamples=self.n_resamples,
        )

    @property
    def best(self) -> str:
        """Trial id with the best mean of the primary metric (the lowest when lower is better)."""
        return str(best_index(self.stats.loc[self.metric]["mean"], self.metric))

    @property
    def contender(self) -> str | None:
        """The trial the best is shown against (drill-down, per-query plot): the baseline, or
        the runner-up when the baseline is the best; None when there is no other trial."""
        if self.best != self.baseline:
            return self.baseline
        means = self.stats.loc[self.metric]["mean"].drop(self.best)
        return str(best_index(means, self.metric)) if len(means) else None

    def label(self, trial_id: str) -> str:
        """The readable label of a trial."""
        return str(self._finished.set_index("trial_id").loc[trial_id, "label"])

    @cached_property
    def labels(self) -> TrialLabels:
        """The finished trials' labels without the parts every trial shares, and those parts
        (``labels.trial_labels``): what the report's text and tables call the trials."""
        return trial_labels(self._finished)

    def name(self, trial_id: str) -> str:
        """A trial's label without the parts every trial shares (``labels``)."""
        return self.labels(trial_id)

    def gain(self, trial_id: str, metric: str | None = None) -> tuple[float, float]:
        """The 95% bootstrap interval of the paired difference, trial minus baseline, on
        ``metric`` (default: the primary) over the compared queries; its mean is ``stats``'
        ``delta``. The resamples are ``n_resamples`` as for every interval of the report."""
        metric = metric or self.metric
        values = self.per_query[self.per_query["metric"] == metric]
        pairs = values.pivot(index="query_id", columns="trial_id", values="value")
        diffs = (pairs[trial_id] - pairs[self.baseline]).to_numpy()
        return bootstrap_ci(diffs, n_resamples=self.n_resamples)

    @property
    def dataset_name(self) -> str:
        """What the user calls the dataset: the folder the documents were read from when the
        manifest records it (labels generated from a folder: ``dataset.source``, or
        ``dataset.sample.source`` in runs from before it was recorded), else the dataset's
        name."""
        dataset = self.manifest["dataset"]
        if isinstance(dataset.get("source"), str):
            return str(dataset["source"])
        sample = self.sample
        if sample is not None and sample.source is not None:
            return sample.source
        return str(dataset["name"])

    @cached_property
    def redundant(self) -> dict[str, str]:
        """Trials that cannot rank differently from another trial of the sweep (trial id →
        why, ``registry.redundancy``); a trial without a recorded config, or of a kind this
        process does not know, is never listed."""
        if "config" not in self._finished.columns:
            return {}
        found = {
            str(t): _redundancy(c)
            for t, c in zip(self._finished["trial_id"], self._finished["config"], strict=True)
            if isinstance(c, str)
        }
        return {t: why for t, why in found.items() if why is not None}

    def recommendation(self) -> Recommendation:
        """The best trial on the primary metric overall and within the latency bound: the
        ``latency_budget_ms`` when given, else the baseline's p50 total latency; trials tied
        on the metric are listed as a tie."""
        means = self.stats.loc[self.metric]["mean"]
        trials = self.trials.set_index("trial_id")
        latency = trials.get(TOTAL_P50, pd.Series(float("nan"), index=trials.index))
        latency = latency.reindex(means.index)
        best, tied = _fastest(means, latency, self.metric)
        assert best is not None  # a report has finished trials with a mean of its metric
        among: tuple[str, ...] = ()
        if self.then is not None and not self.confidence.separated:
            among = tuple(self.confidence.leaders)
            second = self.stats.loc[self.then]["mean"].reindex(list(among))
            best, tied = _fastest(second, latency, self.then)
            assert best is not None  # the leaders are finished trials
        budget = self.latency_budget_ms
        bound: Literal["baseline", "budget"] = "baseline" if budget is None else "budget"
        then = self.then if among else None
        if latency.isna().all():
            return Recommendation(
                self.metric, best, bound, None, None, tied, then=then, among=among
            )
        bound_ms = float(latency[self.baseline]) if budget is None else budget
        within, tied_within = _fastest(means[latency <= bound_ms], latency, self.metric)
        return Recommendation(
            self.metric, best, bound, bound_ms, within, tied, tied_within, then, among
        )

    def deploy_command(self, collection: str = "default") -> str:
        """The command that builds a searchable collection of the recommended trial, each word
        quoted for a POSIX shell (``command_line``: ``--flag=value``, so a value that starts with
        ``-`` is no option), so that it runs as pasted whatever the paths and names. A
        sweep on a sample of a folder's documents (generated labels) deploys the whole folder:
        the command indexes it (``--source``, with the globs that selected its files) after the
        run's documents, which are skipped as unchanged."""
        pick = self.recommendation().best
        words: dict[str, object] = {
            "from_run": self.run_dir,
            "trial": pick,
            "collection": collection,
        }
        sample = self.sample
        if sample is not None and sample.source is not None:
            words.update(source=sample.source, include=[*sample.include], exclude=[*sample.exclude])
        return command_line("ragbench ingest", **words)

    @cached_property
    def sample(self) -> Sampled | None:
        """The sample of the corpus the sweep ran on (the manifest's ``dataset.sample``), or
        None when it ran on every document."""
        found = self.manifest["dataset"].get("sample")
        return Sampled.from_dict(found) if found is not None else None

    @property
    def deploys_whole(self) -> bool:
        """Whether the deploy command indexes every document of a sampled corpus: a labeled
        set's documents are indexed whole from the run (only its sweep was sampled), a
        folder's from the folder (``--source``)."""
        sample = self.sample
        sampled_set = self.manifest["config"]["dataset"].get("sample") is not None
        return sample is None or sampled_set or sample.source is not None

    @cached_property
    def confidence(self) -> PickConfidence:
        """How sure the pick on the primary metric is: each finished trial's probability of
        being the best over bootstrap resamples of the compared queries (``n_resamples``)."""
        values = self.per_query[self.per_query["metric"] == self.metric].pivot(
            index="query_id", columns="trial_id", values="value"
        )
        labels = dict(zip(self._finished["trial_id"], self._finished["label"], strict=True))
        return pick_confidence(values, self.metric, labels, n_resamples=self.n_resamples)

    @cached_property
    def evidence(self) -> Evidence:
        """What the run's evidence cannot carry (``report.evidence``): trials that never ran
        or failed, queries that cannot separate the trials (then no trial is recommended),
        models trained on evaluated queries, selection and report splits sharing queries."""
        return assess(self)

    @cached_property
    def generated_labels(self) -> dict[str, int]:
        """How many of the run's queries have generated labels, per generator method (the
        ``method`` column of ``queries.parquet``, from each query's metadata); empty for
        labels written by people, or a run directory without that column."""
        path = self.store.path / "queries.parquet"
        if not path.is_file():
            return {}
        queries = self.store.queries()
        if "method" not in queries.columns:
            return {}
        counts = queries["method"].dropna().astype(str).value_counts(sort=False)
        return {str(m): int(n) for m, n in counts.sort_index().items()}

    @cached_property
    def spend(self) -> pd.DataFrame:
        """LLM tokens and US dollars per query of each trial (``tables.spend``, indexed by
        trial id); no columns when no trial called an LLM."""
        return spend(self._finished.set_index("trial_id"))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per trial (best first by the primary metric): label, per metric mean, CI, delta,
        corrected p and significance, then p50/p95 latency per stage, LLM tokens and US dollars
        per query (per stage and in total; only when a trial called an LLM) and index build
        time."""
        stats = self.stats
        frame = self.trials.set_index("trial_id")[["label"]].copy()
        for metric in self.metrics:
            part = stats.loc[metric]
            frame[metric] = part["mean"]
            frame[f"{metric} ci_low"] = part["ci_low"]
            frame[f"{metric} ci_high"] = part["ci_high"]
            frame[f"{metric} delta"] = part["delta"]
            frame[f"{metric} p_adj"] = part["p_adjusted"]
            frame[f"{metric} sig"] = part["significant"].fillna(False).astype(bool)
        for stage in latency_stages(self.trials):
            for q in ("p50", "p95"):
                frame[f"{stage} {q} ms"] = self.trials.set_index("trial_id")[
                    f"latency.{stage}.{q}_ms"
                ]
        spent = self.spend
        for stage in usage_stages(self._finished):
            frame[f"{stage} prompt tokens"] = spent[f"tokens.{stage}.prompt"]
            frame[f"{stage} completion tokens"] = spent[f"tokens.{stage}.completion"]
            frame[f"{stage} USD"] = spent[f"cost.{stage}"]
        if not spent.empty:
            frame["total tokens"] = spent["tokens.total"]
            frame["total USD"] = spent["cost.total"]
        frame["index_build_s"] = self.trials.set_index("trial_id")["index_build_s"]
        return best_first(frame, self.metric)

    # ------------------------------------------------------------ display tables

    def _mark(self, row: pd.Series, metric: str) -> str:
        if row.name == self.baseline:
            return " (base)"
        if not row[f"{metric} sig"]:
            return ""
        better = (row[f"{metric} delta"] > 0) == higher_is_better(metric)
        return " ▲" if better else " ▼"

    def display_table(self, stages: bool = False) -> pd.DataFrame:
        """Strings for people: the trial (its label without what every trial shares,
        ``labels``), ``mean ± half-CI`` with ▲/▼ marks, latency (when the run measured it), LLM
        tokens and US dollars per query (when a trial called an LLM; per stage with
        ``stages``), build time."""
        frame = self.to_dataframe()
        out = pd.DataFrame(index=frame.index)
        out["trial"] = [self.name(str(t)) for t in frame.index]
        for metric in self.metrics:
            half = (frame[f"{metric} ci_high"] - frame[f"{metric} ci_low"]) / 2
            out[metric] = [
                f"{m:.4f} ± {h:.4f}{self._mark(row, metric)}"
                for m, h, (_, row) in zip(frame[metric], half, frame.iterrows(), strict=True)
            ]
        for stage in latency_stages(self.trials) if stages else ["total"]:
            if f"{stage} p50 ms" not in frame:  # the run had no latency pass
                continue
            out[f"{stage} p50/p95 ms"] = [
                f"{a:.1f} / {b:.1f}" if a == a else "–"
                for a, b in zip(frame[f"{stage} p50 ms"], frame[f"{stage} p95 ms"], strict=True)
            ]
        for stage in usage_stages(self._finished) if stages else []:
            out[f"{stage} tokens in/out"] = [
                f"{a:,.1f} / {b:,.1f}"
                for a, b in zip(
                    frame[f"{stage} prompt tokens"],
                    frame[f"{stage} completion tokens"],
                    strict=True,
                )
            ]
            out[f"{stage} USD/query"] = frame[f"{stage} USD"].map(usd)
        if "total tokens" in frame:
            out["tokens/query"] = frame["total tokens"].map(lambda v: f"{v:,.1f}")
            out["USD/query"] = frame["total USD"].map(usd)
        out["index build s"] = frame["index_build_s"].map(lambda v: f"{v:.1f}")
        return out

    def to_markdown(self) -> str:
        """The trial table as Markdown (marks: ▲/▼ significantly better/worse than baseline)."""
        return markdown_table(self.display_table(stages=True), index=False)

    def to_latex(self) -> str:
        """The trial table as a LaTeX tabular (booktabs)."""
        table = self.display_table()
        columns = list(table.columns)
        escape = _latex
        lines = [
            r"\begin{tabular}{l" + "r" * (len(columns) - 1) + "}",
            r"\toprule",
            " & ".join(escape(c) for c in columns) + r" \\",
            r"\midrule",
            *(" & ".join(escape(v) for v in row) + r" \\" for row in table.itertuples(index=False)),
            r"\bottomrule",
            r"\end{tabular}",
        ]
        return "\n".join(lines) + "\n"

    def to_csv(self, path: Path | str) -> Path:
        """The numeric table (``to_dataframe``) as CSV."""
        self.to_dataframe().to_csv(path)
        return Path(path)

    def selection_table(self) -> pd.DataFrame | None:
        """The honest-selection result: per metric the chosen trial (or the tie: then the mean
        of the tied trials' values stands for the pick), its score where it was selected and
        where it is reported, the baseline there, the paired test and a CI."""
        found = self.store.selection()
        if found is None:
            return None
        summary, per_query = found
        rows = []
        for metric, chosen in summary["chosen"].items():
            values = per_query[per_query["metric"] == metric]
            row: dict[str, Any] = {"metric": metric}
            if summary["mode"] == "folds":
                trial = "cv"
                base = self.store.per_query()
                base = base[base["metric"] == metric]
                values = pd.concat([values, base[base["trial_id"] == summary["baseline"]]])
                row |= {
                    "chosen": self._fold_picks(chosen),
                    "in-sample best": chosen["best_in_sample"],
                    "cross-validated": chosen["cross_validated"],
                }
            else:
                tied = chosen.get("tied") or [chosen["trial_id"]]  # older runs: no "tied"
                trial, values = _tie_trial(tied, values)
                labels = chosen.get("tied_labels") or [chosen["label"]]
                reported = chosen.get("tied_reported") or [chosen["reported"]]
                row |= {
                    "chosen": labels[0] if len(tied) == 1 else tie_text(labels, chosen["selected"]),
                    f"on {summary['select_on']}": chosen["selected"],
                    f"on {summary['report_on']}": float(np.mean(reported)),
                }
            if summary["baseline"] and summary["baseline"] != trial:
                row |= self._against_baseline(values, summary["baseline"], trial, metric)
            rows.append(row)
        return pd.DataFrame(rows)

    def _fold_picks(self, chosen: dict[str, Any]) -> str:
        """The distinct picks of the folds; a fold whose selection tied shows the tie."""
        folds = chosen.get("per_fold_tied") or [[t] for t in chosen["per_fold"]]
        picks = {
            self.label(ts[0]) if len(ts) == 1 else tie_text([self.label(t) for t in ts])
            for ts in folds
        }
        return "; ".join(sorted(picks))

    def _against_baseline(
        self, values: pd.DataFrame, baseline: str, trial: str, metric: str
    ) -> dict[str, Any]:
        """The baseline's mean, the paired difference with its CI and p, and the trial's CI."""
        stats = compare(values, baseline, metric, n_resamples=self.n_resamples)
        own = stats.loc[trial]
        pairs = values.pivot(index="query_id", columns="trial_id", values="value")
        low, high = bootstrap_ci(
            (pairs[trial] - pairs[baseline]).to_numpy(), n_resamples=self.n_resamples
        )
        return {
            "baseline": stats.loc[baseline, "mean"],
            "delta": own["delta"],
            "delta_ci_low": low,
            "delta_ci_high": high,
            "p": own["p_value"],
            "ci_low": own["ci_low"],
            "ci_high": own["ci_high"],
        }

    def selection_note(self) -> str:
        """One sentence saying how the selection was made."""
        found = self.store.selection()
        if found is None:
            return ""
        summary = found[0]
        if summary["mode"] == "folds":
            return (
                f"Selected by {summary['folds']}-fold cross-validation over the "
                f"{summary['report_queries']} queries of split {summary['split']!r}: each "
                "query is scored by the trial that was best on the other folds."
            )
        note = (
            f"Selected on split {summary['select_on']!r}, then evaluated once on split "
            f"{summary['report_on']!r} ({summary['report_queries']} queries); p: paired "
            "permutation test against the baseline there; delta_ci: 95% bootstrap interval of "
            "the paired difference; ci: of the chosen trial's mean."
        )
        shared = self.manifest.get("evidence", {}).get("shared_queries")
        return f"{note} {shared_text(shared, repr)}" if shared else note

    def drilldown(self, other: str | None = None, n: int = 10) -> pd.DataFrame:
        """Queries where ``other`` (default: the best trial) and the baseline differ most;
        when ``other`` is the baseline, the runner-up takes the baseline's place."""
        trial = other or self.best
        against = self.baseline if trial != self.baseline else self.contender
        if against is None:
            return pd.DataFrame()
        return drilldown(self.run_dir, against, trial, self.metric, n=n)

    # ------------------------------------------------------------ figures

    def plots(self) -> list[Plot]:
        """Every plot this run could draw (each says itself whether it applies). The trials
        table reaches them without its run-varying columns (``figures.VARYING``), so a rerun
        of the same sweep draws the same plots and finds them cached; its trials are named as
        in the tables (``labels``)."""
        trials = self.trials.drop(columns=[c for c in VARYING if c in self.trials.columns])
        labels = {str(t): self.name(str(t)) for t in trials["trial_id"]}
        trials = trials.assign(label=trials["trial_id"].map(labels))
        baseline = {"baseline": self.baseline}
        wanted = [
            Plot("pareto", "pareto", (trials, self.metric), baseline),
            Plot("pareto_cost", "quality_vs_cost", (trials, self.metric), baseline),
            Plot("chunk_size", "metric_vs_chunk_size", (trials, self.metric)),
            Plot(
                "per_query",
                "per_query_difference",
                (self.per_query, self.best, self.contender or self.baseline, self.metric),
                {"labels": labels},
            ),
            Plot(
                "at_k",
                "metric_at_k",
                (
                    self.store.curves(),
                    list(self.to_dataframe().index[:5]),
                    self.metric.split("@")[0],
                ),
                {"labels": labels},
            ),
        ]
        for x, y, kind in heatmap_pairs(trials, self.grid_parameters):
            name = f"heatmap_{x}_{y}".replace("param.", "")
            wanted.append(
                Plot(
                    name if kind is None else f"{name}_{kind}",
                    "heatmap",
                    (trials, x, y, self.metric, kind),
                )
            )
        return wanted

    @property
    def grid_parameters(self) -> list[str]:
        """The numeric parameters the sweep varied (``param.*`` columns): the axes of its
        heatmaps (``grids.heatmap_pairs``)."""
        trials = self.trials
        swept = swept_parameters(trials)
        return [p for p in swept if pd.api.types.is_numeric_dtype(trials[p])]

    def plot_notes(self) -> list[str]:
        """Why the plots leave out what they leave out: parameters the sweep changed together
        get no heatmap between them (``grids.changing_together``)."""
        pairs = changing_together(self.trials, self.grid_parameters)
        return [
            f"{x.removeprefix('param.')} and {y.removeprefix('param.')} change together in "
            "this sweep (each value of one goes with one value of the other), so no heatmap "
            "is drawn over them: their effects cannot be told apart."
            for x, y in pairs
        ]

    def figures(self) -> dict[str, Any]:
        """Every plot that applies to this run (name → matplotlib Figure), drawn now."""
        out = {}
        for plot in self.plots():
            try:
                out[plot.name] = plot.draw()
            except DataError as exc:  # the plot does not apply to this run
                log.info("skipping plot %s: %s", plot.name, exc)
        return out

    # ------------------------------------------------------------ output

    def write(
        self, formats: Sequence[str] = ("html", "md"), out: Path | str | None = None
    ) -> dict[str, Path]:
        """Write ``report.html`` / ``report.md`` (+ ``plots/*.png``) / ``report.tex`` into the
        run directory (or ``out``: a new or empty folder, or one ragbench made for reports;
        ``out`` naming the run directory itself is the run directory); returns the paths
        written by format."""
        from ragbench.report.html import render_html
        from ragbench.report.markdown import render_markdown

        folder = self.run_dir
        if out is not None and os.path.realpath(out) != os.path.realpath(self.run_dir):
            folder = claim(out, "--out", "report")
        images = figure_images(self.plots(), run_cache(self.manifest.get("cache_root")))
        written: dict[str, Path] = {}
        if "md" in formats:
            (folder / "plots").mkdir(exist_ok=True)
            for name, data in images.items():
                (folder / "plots" / f"{name}.png").write_bytes(data)
            written["md"] = folder / "report.md"
            written["md"].write_text(render_markdown(self, list(images)), encoding="utf-8")
        if "html" in formats:
            written["html"] = folder / "report.html"
            written["html"].write_text(render_html(self, images), encoding="utf-8")
        if "latex" in formats:
            written["latex"] = folder / "report.tex"
            written["latex"].write_text(self.to_latex(), encoding="utf-8")
        return written

    def _repr_html_(self) -> str:
        table = self.display_table().to_html(index=False, escape=True)
        base = html.escape(self.name(self.baseline))
        shared = "; ".join(s.text() for s in self.labels.shared)
        note = f"<p>Shared by every trial: {html.escape(shared)}</p>" if shared else ""
        return (
            f"<p><b>{html.escape(self.metric)}</b> vs baseline <code>{base}</code></p>{note}{table}"
        )


TIE = "tie"  # the trial id standing for a tie in the selection table's per-query values


def _tie_trial(tied: list[str], values: pd.DataFrame) -> tuple[str, pd.DataFrame]:
    """The trial id that stands for the pick, and ``values`` (long per-query rows) with it:
    the trial itself, or for a tie the rows of ``TIE``, each query's mean over the tied
    trials (what a pick at random among them scores on average)."""
    if len(tied) == 1:
        return tied[0], values
    rows = values[values["trial_id"].isin(tied)]
    mean = rows.groupby(["query_id", "metric"], as_index=False, sort=False)["value"].mean()
    return TIE, pd.concat([values, mean.assign(trial_id=TIE)], ignore_index=True)


_LATEX = {
    "\\": r"\textbackslash{}",
    "_": r"\_",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "±": r"$\pm$",
    "▲": r"$\blacktriangle$",
    "▼": r"$\blacktriangledown$",
    "|": r"$|$",
}


def _latex(value: object) -> str:
    """Text safe inside a LaTeX table cell."""
    return "".join(_LATEX.get(ch, ch) for ch in str(value))


def _redundancy(config: str) -> str | None:
    """Why the trial of a recorded ``config`` (JSON) cannot rank differently from another."""
    try:
        return redundancy(trial_of(json.loads(config)).configs)
    except ConfigError:  # a kind this process does not know (a plugin not installed)
        return None
