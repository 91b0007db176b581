"""What a run's evidence cannot carry, said beside its pick: a report checks before it
recommends.

``assess(report)`` reads the run directory and returns the ``Evidence``: how many trials the
run planned, finished and lost, and its ``Caveat`` lines, each a sentence the summary, the
recommendation and the terminal's answer show:

* an incomplete run: trials the manifest plans (``planned``; TPE runs ``search.n``) that never
  ran — the manifest has no ``finished`` time until the sweep ends — or that failed. The pick
  and the confidence in it are then among the finished trials only, and say so; a run still
  running (its run directory held) is said to be, and one that stopped is said to resume.
* queries the run did not score: judged queries it left out (``queries.left_out`` of the
  manifest: every document they judge relevant is absent from the corpus, or they lack the
  span evidence the evaluation needs), and a run of the first ``--limit-queries`` of them.
* queries that cannot separate the trials, on the primary metric: no query's value differs
  between any two trials, or — a ranking metric at the document level — a ranking that ignores
  the query scores as much as any ranking can on these labels (for each query, the documents
  the other queries are judged on, the most often judged first, then the rest of the corpus:
  held out from the query's own judgements). A corpus of one document, or a set whose queries
  are all judged on one document, rewards no retrieval. Then no trial is recommended
  (``withheld``), unless the second metric (``--select``) separates them. A query-blind
  ranking that merely scores as much as the best trial is said beside the pick.
* a corpus no larger than the primary metric's cutoff at the document level: every trial can
  rank all of it, so the metric measures only the order of those documents.
* what the run found when it started (the manifest's ``evidence``,
  ``experiment/runner.py``): models trained on the queries the sweep selects on, and queries
  the selection split and the report split share.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ragbench.errors import DataError
from ragbench.evaluate.metrics import TIE_RTOL, best_index, evaluate, parse_metric
from ragbench.report.tables import md_code, md_text
from ragbench.types import Ranking

if TYPE_CHECKING:
    from ragbench.report.report import Report

__all__ = ["Caveat", "Evidence", "assess", "counted", "lost", "shared_text"]


@dataclass(frozen=True)
class Caveat:
    """One thing the evidence cannot carry: a bold ``title`` and a Markdown sentence;
    ``withholds`` when no trial is recommended because of it."""

    title: str
    text: str
    withholds: bool = False

    def line(self) -> str:
        """The summary's list item."""
        return f"- **{self.title}**: {self.text}"


@dataclass(frozen=True)
class Evidence:
    """A report's trials — ``planned`` by the run, ``finished``, ``failed`` — and its
    caveats, the one that withholds the pick first."""

    planned: int
    finished: int
    failed: int
    caveats: tuple[Caveat, ...]
    inseparable: Mapping[str, str]
    """Per metric of the report whose queries cannot separate the trials, why."""

    @property
    def withheld(self) -> Caveat | None:
        """Why no trial is recommended, or None when one is."""
        return next((c for c in self.caveats if c.withholds), None)

    @property
    def among(self) -> str:
        """Which trials a pick is among: empty for a complete run, else ``among the 1 of 6
        planned trials that finished``."""
        if self.finished >= self.planned:
            return ""
        return f"among the {self.finished} of {self.planned} planned trials that finished"


def assess(report: Report) -> Evidence:
    """The evidence of ``report``'s run, checked (see the module docstring)."""
    manifest = report.manifest
    planned, finished, failed = counted(manifest, report.run_trials)
    inseparable = {m: why for m in report.metrics if (why := _inseparable(report, m))}
    caveats = _separation(report, inseparable) + _incomplete(report, planned, finished, failed)
    if not any(c.withholds for c in caveats):
        caveats += _small_corpus(report)
    caveats += _unscored(manifest) + _recorded(manifest)
    return Evidence(planned, finished, failed, tuple(caveats), inseparable)


def counted(manifest: Mapping[str, Any], trials: pd.DataFrame) -> tuple[int, int, int]:
    """The trials a run planned, those that finished and those that failed (``trials``:
    its ``trials.parquet``). The plan is the manifest's count, else (a run from before it kept
    one) its trials, TPE's ``search.n`` of them."""
    finished = int((trials["status"] == "ok").sum()) if len(trials) else 0
    planned = manifest.get("planned")
    if not isinstance(planned, int):
        listed = manifest.get("trials")
        planned = len(listed) if isinstance(listed, Mapping) else len(trials)
        search = manifest.get("config", {}).get("search", {})
        if search.get("strategy") == "tpe" and search.get("n"):
            planned = min(int(search["n"]), planned)
    return max(planned, len(trials)), finished, len(trials) - finished


def lost(manifest: Mapping[str, Any], trials: pd.DataFrame, running: bool = False) -> str | None:
    """``1 of 6 planned trials finished; the other 5 never ran (...)``: the trials of a run
    that never ran or failed — a run still ``running`` has not run them yet —, or None when
    every planned trial finished."""
    planned, finished, failed = counted(manifest, trials)
    never = planned - finished - failed
    if never <= 0 and not failed:
        return None
    said = [f"{failed} failed (see Failed trials)"] if failed else []
    if never > 0 and running:
        said.append(f"{never} have not run yet ({_RUNNING})")
    elif never > 0:
        stopped = "finished" not in manifest
        resume = " (the run stopped before them: `ragbench run --resume` continues it)"
        said.append(f"{never} never ran" + (resume if stopped else ""))
    head = f"{finished} of {planned} planned trials finished; "
    return head + (" and ".join(said) if failed else f"the other {said[0]}")


def _incomplete(report: Report, planned: int, finished: int, failed: int) -> list[Caveat]:
    """Trials that never ran (or have not yet) or failed, and a selection the run stopped
    before (or has not reached yet)."""
    running = report.running
    text = lost(report.manifest, report.run_trials, running)
    if text is not None:
        title = "Incomplete run" if planned > finished + failed else "Failed trials"
        title = "Run still running" if running else title
        return [Caveat(title, f"{text}: the pick is among the finished ones only.")]
    evaluation = report.manifest.get("config", {}).get("evaluation", {})
    selects = evaluation.get("report_on") is not None or evaluation.get("folds") is not None
    if "finished" not in report.manifest and selects and report.store.selection() is None:
        when = f"({_RUNNING})" if running else "(`ragbench run --resume` completes it)"
        return [
            Caveat(
                "Run still running" if running else "Incomplete run",
                "the run has not made its honest selection: the pick is scored on the "
                f"queries it was selected on only {when}.",
            )
        ]
    return []


_RUNNING = "the run is still running: report on it again once it has finished"


def _separation(report: Report, inseparable: Mapping[str, str]) -> list[Caveat]:
    """Whether the queries can separate the trials on the metric that decides the pick (the
    primary one, and the second when the report has one)."""
    first = inseparable.get(report.metric)
    if first is None:
        return _blind_wins(report)
    then = report.then
    if then is not None and then not in inseparable:
        text = f"{first}; the pick rests on {md_text(then)}."
        return [Caveat(f"{md_text(report.metric)} cannot separate the trials", text)]
    text = (
        f"{first}: no trial is recommended. Choosing needs a set whose queries can separate "
        "trials: more documents, or queries judged on other documents."
    )
    return [Caveat("No pick", text, withholds=True)]


def _inseparable(report: Report, metric: str) -> str | None:
    """Why the compared queries cannot separate the trials on ``metric``, or None: no query's
    value differs between two trials, or a ranking that ignores the query scores as much as
    any ranking can on these labels (``_query_blind``)."""
    values = _values(report, metric)
    x = values.to_numpy(dtype=np.float64)
    if x.shape[1] > 1 and np.isclose(x, x[:, :1], rtol=TIE_RTOL, atol=0.0).all():
        same = f" ({x[0, 0]:.4f} on every query)" if np.ptp(x) == 0 else ""
        return (
            f"no query tells the trials apart: on each of the {len(x)} queries every trial "
            f"has the same {md_text(metric)}{same}"
        )
    blind = _query_blind(report, metric, list(values.index))
    if blind is None or not _reaches(blind.score, blind.ideal, metric):
        return None
    return (
        f"a ranking that ignores the query ({_BLIND}) scores {blind.score:.4f} "
        f"{md_text(metric)}, as much as any ranking can on these labels; {blind.size}"
    )


_BLIND = "the documents the other queries are judged on, the most often judged first"


def _blind_wins(report: Report) -> list[Caveat]:
    """A caveat when a ranking that ignores the query scores at least as much as the best
    trial on the primary metric (the trials rank no better than the documents' popularity)."""
    values = _values(report, report.metric)
    blind = _query_blind(report, report.metric, list(values.index))
    means = report.stats.loc[report.metric]["mean"]
    best = float(means[best_index(means, report.metric)])
    if blind is None or not _reaches(blind.score, best, report.metric):
        return []
    text = (
        f"a ranking that ignores the query ({_BLIND}) scores {blind.score:.4f} "
        f"{md_text(report.metric)}, no less than the best trial ({best:.4f}): no trial ranks "
        f"better than the documents' popularity among these queries; {blind.size}."
    )
    return [Caveat("No trial beats ignoring the query", text)]


def _values(report: Report, metric: str) -> pd.DataFrame:
    """The compared per-query values of ``metric``, queries × trials."""
    rows = report.per_query[report.per_query["metric"] == metric]
    return rows.pivot(index="query_id", columns="trial_id", values="value")


def _reaches(value: float, target: float, metric: str) -> bool:
    """Whether ``value`` is as good as ``target`` on ``metric`` (ties within ``TIE_RTOL``)."""
    gap = value - target if parse_metric(metric).higher_is_better else target - value
    return gap >= -TIE_RTOL * abs(target)


@dataclass(frozen=True)
class _Blind:
    """A query-blind ranking's mean value, the ideal rankings' mean value, and a sentence on
    the corpus and its judged documents."""

    score: float
    ideal: float
    size: str


def _query_blind(report: Report, metric: str, query_ids: list[str]) -> _Blind | None:
    """How a ranking that ignores the query scores ``metric`` over ``query_ids``, against
    the ideal ranking of each query (its judged documents by grade); None where it does not
    apply (another level than documents, a metric of spans or answers, a run directory
    without judgements).

    Each query's ranking is the same list save for what its own judgements would add, so it
    is held out from them: the documents the *other* queries judge relevant, the most often
    judged first, then the rest of the corpus, the query's own relevant documents that no
    other query judges last (at the end of the corpus, its size from the manifest)."""
    evaluation = report.manifest.get("evaluation", {})
    parsed = parse_metric(metric)
    if evaluation.get("level") != "document" or parsed.level != "rank":
        return None
    if not query_ids or not (report.store.path / "queries.parquet").is_file():
        return None
    queries = report.store.queries()
    if not {"query_id", "qrels"} <= set(queries.columns):
        return None
    judged = dict(zip(queries["query_id"].astype(str), queries["qrels"], strict=True))
    try:
        qrels = {q: {str(d): int(g) for d, g in json.loads(judged[q]).items()} for q in query_ids}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise DataError(
            f"{report.store.path / 'queries.parquet'}: expected each evaluated query's qrels "
            "as a JSON object of document id → grade"
        ) from None
    level = int(evaluation.get("relevance_level", 1))
    relevant = {q: {d for d, g in grades.items() if g >= level} for q, grades in qrels.items()}
    counts = Counter(d for found in relevant.values() for d in found)
    if not counts:
        return None
    depth = int(evaluation.get("depth", 100))
    depth = min(depth, parsed.k or depth)
    documents = report.manifest.get("dataset", {}).get("documents")
    corpus = documents if isinstance(documents, int) else depth
    order = sorted(counts, key=lambda d: (-counts[d], d))
    blind, ideal = [], []
    for q in query_ids:
        others: list[str] = []
        for d in order:  # the query's own judgements left out
            if counts[d] > (d in relevant[q]):
                others.append(d)
                if len(others) == depth:
                    break
        alone = sorted(d for d in relevant[q] if counts[d] == 1)
        rest = max(0, corpus - len(others) - len(alone))
        fill = [f"\x00{i}" for i in range(min(rest, depth - len(others)))]
        blind.append((others + fill + alone)[:depth])
        ideal.append(sorted((d for d, g in qrels[q].items() if g > 0), key=lambda d: -qrels[q][d]))
    score, best = (
        float(
            np.mean(evaluate(qrels, _ranking(rows, depth), query_ids, [parsed], level)[parsed.name])
        )
        for rows in (blind, ideal)
    )
    size = f"the set has {documents} document(s), " if isinstance(documents, int) else ""
    return _Blind(score, best, f"{size}{len(order)} of them judged relevant to some query")


def _ranking(rows: list[list[str]], depth: int) -> Ranking:
    """Rows of document ids as a ranking ``depth`` deep (scores falling with the rank)."""
    ids = np.full((len(rows), depth), "", dtype=object)
    for i, row in enumerate(rows):
        ids[i, : len(row[:depth])] = row[:depth]
    scores = np.tile(np.arange(depth, 0, -1, dtype=np.float64), (len(rows), 1))
    return Ranking(ids, scores)


def _small_corpus(report: Report) -> list[Caveat]:
    """A ranking metric at the document level whose cutoff reaches past the whole corpus."""
    documents = report.manifest.get("dataset", {}).get("documents")
    metric = parse_metric(report.metric)
    level = report.manifest.get("evaluation", {}).get("level")
    if level != "document" or metric.level != "rank" or not isinstance(documents, int):
        return []
    if metric.k is None or documents > metric.k:
        return []
    return [
        Caveat(
            "Small corpus",
            f"the set has {documents} document(s), no more than the cutoff of "
            f"{md_text(report.metric)}: every trial can rank all of them, so it measures only "
            "their order; a pick made here may not hold on a larger corpus.",
        )
    ]


_LEFT_OUT = {
    "missing_documents": "judge only documents the corpus does not hold: no ranking can find "
    "them, so they would score nothing in every trial and pull every mean down",
    "no_spans": "have no span evidence, which the evaluation's level or metrics need",
}


def _unscored(manifest: Mapping[str, Any]) -> list[Caveat]:
    """Judged queries the run left out, and a run of the first ``--limit-queries`` of
    them."""
    queries = manifest.get("queries", {})
    count, of = int(queries.get("count", 0)), queries.get("of")
    judged = (of if isinstance(of, int) else count) + sum(
        queries.get("left_out", {}).get(why, 0) for why in _LEFT_OUT
    )
    caveats = []
    for why, text in _LEFT_OUT.items():
        left = queries.get("left_out", {}).get(why, 0)
        if left:
            caveats.append(
                Caveat(
                    "Queries left out",
                    f"{left:,} of the {judged:,} judged queries {text}; they are left out, and "
                    "the scores are over the others.",
                )
            )
    limit = queries.get("limit")
    if isinstance(limit, int) and (count < of if isinstance(of, int) else count >= limit):
        among = f"of the {of:,} queries " if isinstance(of, int) else "queries "
        caveats.append(
            Caveat(
                "Limited queries",
                f"the run scored the first {count:,} {among}it could evaluate "
                f"(`--limit-queries {limit}`): the pick holds for those {count:,} only.",
            )
        )
    return caveats


def _recorded(manifest: Mapping[str, Any]) -> list[Caveat]:
    """What the run found when it started: models trained on the queries the sweep selects
    on, and queries the selection and report splits share."""
    found = manifest.get("evidence", {})
    report_on = manifest.get("config", {}).get("evaluation", {}).get("report_on")
    elsewhere = (
        f"; the Honest selection section scores the pick on split {md_code(report_on)}, "
        "kept out of training"
        if report_on
        else ""
    )
    caveats = []
    for entry in found.get("trained_on", []):
        split = md_code(entry["split"])
        if entry.get("model") is None:
            who = f"trials fine-tuned on {md_code('pairs: select')} trained"
            whom = "they are"
        else:
            who = f"model {md_code(entry['model'])} ({md_text(entry['where'])}) was fine-tuned"
            whom = "the trials running it are"
        text = (
            f"{who} on {entry['shared']} of the {entry['of']} queries of split {split} this "
            f"table scores and selects on, so {whom} scored on queries the model trained on"
            f"{elsewhere}."
        )
        caveats.append(Caveat("Trained on evaluated queries", text))
    shared = found.get("shared_queries")
    if shared:
        caveats.append(Caveat("Selection and report share queries", shared_text(shared)))
    return caveats


def shared_text(shared: Mapping[str, Any], name: Callable[[str], str] = md_code) -> str:
    """The sentence on queries the selection split and the report split share (the
    manifest's ``evidence.shared_queries``); ``name`` shows a split's name."""
    return (
        f"{shared['shared']} of the {shared['of']} queries of split {name(shared['report_on'])} "
        f"(reported on) are on split {name(shared['select_on'])} (selected on) too, by id or "
        "text: the reported score of the pick is not independent of its selection."
    )
