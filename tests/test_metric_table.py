"""The metric table: a metric added by registration alone, built-in rows, span routing, and the
report picking the best trial by each metric's direction."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest

from ragbench.data.labeled import Evidence, LabeledSet
from ragbench.errors import ConfigError
from ragbench.evaluate.labels import SpanCoverage, evaluate_chunks
from ragbench.evaluate.metrics import (
    Judgements,
    Metric,
    MetricSpec,
    RankedHits,
    allowed_forms,
    evaluate,
    evaluate_run,
    higher_is_better,
    metric_table,
    parse_metric,
    register_metric,
    unregister_metric,
)
from ragbench.report.plots import pareto_front
from ragbench.report.tables import best_per_metric, trial_table
from ragbench.text.chunk_table import ChunkTable
from ragbench.types import Chunk, Document, Query, Ranking
from tests.paths import REPO

BUILT_IN_FORMS = (
    "ndcg@K, recall@K, precision@K (p@K), mrr, mrr@K, map, map@K, hit_rate@K (success@K), "
    "r_precision, span_recall@K, span_precision@K, span_iou@K, recall@Ntok, exact_match, "
    "token_f1, rouge_l, answer_supported, ragas:<Name> (K and N positive integers)"
)


def first_relevant_rank(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """1-based rank of the first relevant document within the top k; k + 1 when there is none."""
    relevant = hits.within(k).relevant_only()
    rows, first = np.unique(relevant.rows, return_index=True)  # hits are in (row, rank) order
    out = np.full(n, float(k) + 1)  # type: ignore[arg-type]  # the cutoff is required
    out[rows] = relevant.ranks[first] + 1
    return out


def missed_evidence(coverage: SpanCoverage) -> np.ndarray:
    """Evidence characters the retrieved chunks leave out."""
    return (coverage.evidence_union - coverage.covered).astype(np.float64)


@pytest.fixture
def first_rel_rank() -> Iterator[MetricSpec]:
    spec = MetricSpec(
        "first_rel_rank",
        first_relevant_rank,
        "Rank of the first relevant document in the top k (k + 1 without one).",
        higher_is_better=False,
        aliases=("frr",),
    )
    yield register_metric(spec)
    unregister_metric(spec.name)


@pytest.fixture
def span_miss() -> Iterator[MetricSpec]:
    spec = MetricSpec(
        "span_miss",
        missed_evidence,
        "Evidence characters outside the top k chunks.",
        level="span",
        higher_is_better=False,
    )
    yield register_metric(spec)
    unregister_metric(spec.name)


# ---------------------------------------------------------------- a new metric, one registration


def test_a_registered_metric_parses_computes_and_is_lower_is_better(
    first_rel_rank: MetricSpec,
) -> None:
    assert parse_metric("First_Rel_Rank@3") == Metric("first_rel_rank@3", "first_rel_rank", k=3)
    assert parse_metric("frr@3") == parse_metric("first_rel_rank@3")
    with pytest.raises(ConfigError, match=r"'frr' needs a cutoff @K"):
        parse_metric("frr")
    with pytest.raises(ConfigError) as info:
        parse_metric("nope@3")
    assert "first_rel_rank@K (frr@K)" in str(info.value)

    qrels = {"q1": {"a": 1, "c": 1}, "q2": {"x": 1}, "q3": {"b": 0, "d": 2}}
    rows = [
        [("b", 0.9), ("c", 0.8), ("a", 0.7)],  # first relevant at rank 2
        [("a", 0.9), ("b", 0.8)],  # none relevant
        [("b", 0.9), ("e", 0.8), ("f", 0.7), ("d", 0.6)],  # b has grade 0; d at rank 4
    ]
    queries = ["q1", "q2", "q3"]
    values = evaluate(qrels, Ranking.from_rows(rows), queries, ["frr@3", "first_rel_rank@5"])
    assert values["first_rel_rank@3"].tolist() == [2.0, 4.0, 4.0]
    assert values["first_rel_rank@5"].tolist() == [2.0, 6.0, 4.0]
    run = {q: dict(row) for q, row in zip(queries, rows, strict=True)}
    frame = evaluate_run(qrels, run, ["frr@3"], query_ids=queries)
    assert frame["first_rel_rank@3"].tolist() == [2.0, 4.0, 4.0]

    assert higher_is_better("frr@3") is False
    assert higher_is_better("ndcg@10") is True
    assert parse_metric("frr@3").level == "rank"


def test_unregistering_removes_the_metric_and_spellings_must_be_free() -> None:
    spec = MetricSpec("dummy", first_relevant_rank, "A placeholder.", aliases=("dm",))
    register_metric(spec)
    with pytest.raises(ValueError, match="already registered"):
        register_metric(spec)
    unregister_metric("dummy")
    with pytest.raises(ConfigError, match="unknown metric 'dm@3'"):
        parse_metric("dm@3")
    assert "dummy" not in metric_table() and "dummy" not in allowed_forms()
    # spellings of rank and span built-ins are taken; a failed registration changes nothing
    for alias in ("p", "span_iou"):
        with pytest.raises(ValueError, match=f"'{alias}'"):
            register_metric(MetricSpec("other", first_relevant_rank, "x", aliases=(alias,)))
        assert "other" not in metric_table()
    with pytest.raises(ValueError, match="needs level 'span'"):
        MetricSpec("ranked_budget", first_relevant_rank, "x", cutoff="budget")


# ---------------------------------------------------------------- the built-in rows


def test_built_in_rows_have_docs_and_every_form_is_listed_and_parses() -> None:
    table = metric_table()
    assert allowed_forms() == BUILT_IN_FORMS
    for name, spec in table.items():
        assert spec.name == name and spec.doc.strip(), name
        assert all(spelling in allowed_forms() for spelling in spec.spellings), name
        for form in filter(None, re.split(r", | \(|\)", spec.forms)):
            text = form.replace("@Ntok", "@100tok").replace("@K", "@5")
            assert parse_metric(text).family == name, text
    assert {n for n, s in table.items() if s.level == "span"} == {
        "span_recall",
        "span_precision",
        "span_iou",
        "token_recall",
    }
    assert all(s.higher_is_better for s in table.values())


# ---------------------------------------------------------------- span level via the table


def test_span_metrics_load_lazily_from_the_metrics_module_alone() -> None:
    code = (
        "import sys\n"
        "from ragbench.evaluate.metrics import parse_metric\n"
        "assert 'ragbench.evaluate.labels' not in sys.modules\n"
        "assert parse_metric('span_recall@5').is_span\n"
        "assert 'ragbench.evaluate.labels' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_a_registered_span_metric_is_routed_to_the_span_path(span_miss: MetricSpec) -> None:
    text = "a" * 100
    chunks = [Chunk("a:0", "a", 0, 0, 40, text[:40]), Chunk("a:1", "a", 1, 40, 100, text[40:])]
    labeled = LabeledSet(
        "toy",
        [Document("a", text)],
        [Query("q1", "q1")],
        {"q1": {"a": 1}},
        evidence={"q1": [Evidence("q1", "a", 30, 50)]},
    )
    ranking = Ranking.from_rows([[("a:1", 0.9), ("a:0", 0.5)]])
    metrics = ["span_miss@1", "span_miss@2", "ndcg@5"]
    values = evaluate_chunks(ranking, ["q1"], ChunkTable.from_chunks(chunks), labeled, metrics)
    assert values["span_miss@1"].tolist() == [10.0]  # a:1 covers [40, 50) of [30, 50)
    assert values["span_miss@2"].tolist() == [0.0]
    assert values["ndcg@5"].tolist() == [1.0]
    assert parse_metric("span_miss@1").is_span
    with pytest.raises(ConfigError, match=r"span_miss@1.*evaluate_chunks"):
        evaluate({"q1": {"a": 1}}, ranking, ["q1"], ["span_miss@1"])


# ---------------------------------------------------------------- the report follows direction


def test_report_tables_pick_the_minimum_of_a_lower_is_better_metric(
    first_rel_rank: MetricSpec,
) -> None:
    trials = pd.DataFrame(
        {
            "trial_id": ["t1", "t2", "t3", "t4"],
            "label": ["one", "two", "three", "four"],
            "status": ["ok", "ok", "ok", "error"],
            "first_rel_rank@10": [3.0, 1.5, 2.0, 1.0],
            "ndcg@10": [0.2, 0.5, 0.7, 0.9],
            "latency.total.p95_ms": [10.0, 30.0, 20.0, 1.0],
            "index_build_s": [1.0, 1.0, 1.0, 1.0],
        }
    )
    best = best_per_metric(trials, ["first_rel_rank@10", "ndcg@10"]).set_index("metric")
    assert best.loc["first_rel_rank@10", "trial_id"] == "t2"  # t4 is lower but failed
    assert best.loc["first_rel_rank@10", "value"] == 1.5
    assert best.loc["ndcg@10", "trial_id"] == "t3"
    assert list(trial_table(trials, ["first_rel_rank@10"]).index) == ["t2", "t3", "t1"]
    assert list(trial_table(trials, ["ndcg@10"]).index) == ["t3", "t2", "t1"]
    # lower ranks are better: no trial beats another on both counts (were higher better, t1
    # would dominate both); with nDCG, t3 beats t2 on both
    assert list(pareto_front(trials, "first_rel_rank@10")["trial_id"]) == ["t1", "t3", "t2"]
    assert list(pareto_front(trials, "ndcg@10")["trial_id"]) == ["t1", "t3"]
