"""Metrics against pytrec_eval (trec_eval) per query, on random runs full of ties."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import pytrec_eval

from ragbench.errors import ConfigError
from ragbench.evaluate.metrics import (
    Metric,
    evaluate,
    evaluate_run,
    mean,
    parse_metric,
    parse_metrics,
    relevant_query_ids,
)
from ragbench.types import Ranking

CUTOFFS = (1, 3, 5, 10, 40)
# ids of different lengths and a non-ASCII one, so that tie-breaking by id is exercised
DOCS = [f"d{i}" for i in range(25)] + ["D7", "é1", "e2", "zz"]
TREC_MEASURES = {
    "ndcg@{k}": "ndcg_cut_{k}",
    "precision@{k}": "P_{k}",
    "recall@{k}": "recall_{k}",
    "map@{k}": "map_cut_{k}",
    "hit_rate@{k}": "success_{k}",
}
PYTREC_REQUEST = {
    f"{measure}.{','.join(map(str, CUTOFFS))}"
    for measure in ("ndcg_cut", "P", "recall", "map_cut", "success")
} | {"map", "Rprec", "recip_rank"}
OUR_METRICS = [p.format(k=k) for p in TREC_MEASURES for k in CUTOFFS] + [
    "map",
    "r_precision",
    "mrr",
    *(f"mrr@{k}" for k in CUTOFFS),
]


def random_case(seed: int) -> tuple[dict, dict]:
    """Graded qrels and a run whose scores come from a handful of values (many ties)."""
    rng = np.random.default_rng(seed)
    n_queries = int(rng.integers(1, 10))
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    levels = rng.choice([0.0, 0.5, 1.0, 2.0, -1.0], size=int(rng.integers(1, 4)), replace=False)
    for q in range(n_queries):
        qid = f"q{q}"
        if rng.random() < 0.9:
            judged = rng.choice(DOCS, size=int(rng.integers(1, 12)), replace=False)
            grades = rng.choice([0, 0, 1, 2, 3], size=len(judged))
            if rng.random() < 0.15:
                grades[:] = 0  # a query without relevant documents
            qrels[qid] = {str(d): int(g) for d, g in zip(judged, grades, strict=True)}
        if rng.random() < 0.85:  # some queries are missing from the run
            depth = int(rng.integers(0, len(DOCS)))
            docs = rng.choice(DOCS, size=depth, replace=False)
            run[qid] = {str(d): float(rng.choice(levels)) for d in docs}
    return qrels, run


def trec_order(results: dict[str, float]) -> list[tuple[str, float]]:
    """trec_eval's ordering: score descending, then doc id descending (UTF-8 byte order)."""
    return sorted(results.items(), key=lambda p: (p[1], p[0].encode()), reverse=True)


def pytrec_values(qrels: dict, run: dict, level: int) -> dict[str, dict[str, float]]:
    """Our metric name → query → trec_eval value (queries of qrels; missing from run → 0)."""
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, PYTREC_REQUEST, relevance_level=level)
    raw = evaluator.evaluate({q: r for q, r in run.items() if r})
    expected: dict[str, dict[str, float]] = {}
    for q in qrels:
        row = raw.get(q, {})
        for pattern, trec in TREC_MEASURES.items():
            for k in CUTOFFS:
                expected.setdefault(pattern.format(k=k), {})[q] = row.get(trec.format(k=k), 0.0)
        expected.setdefault("map", {})[q] = row.get("map", 0.0)
        expected.setdefault("r_precision", {})[q] = row.get("Rprec", 0.0)
        expected.setdefault("mrr", {})[q] = row.get("recip_rank", 0.0)
    for k in CUTOFFS:  # recip_rank has no cutoff: evaluate the run cut at its top k
        cut = {q: dict(trec_order(r)[:k]) for q, r in run.items() if r}
        cut_raw = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}, relevance_level=level)
        values = cut_raw.evaluate(cut)
        expected[f"mrr@{k}"] = {q: values.get(q, {}).get("recip_rank", 0.0) for q in qrels}
    return expected


def assert_matches(ours: pd.DataFrame, expected: dict[str, dict[str, float]]) -> None:
    for name, per_query in expected.items():
        for q, value in per_query.items():
            assert ours.loc[q, name] == pytest.approx(value, abs=1e-9), (name, q)


def shuffled_ranking(run: dict, query_ids: list[str], rng: np.random.Generator) -> Ranking:
    """The run as a padded Ranking in random column order, with repeated ids whose first
    occurrence carries the run's score."""
    rows = []
    for q in query_ids:
        items = list(run.get(q, {}).items())
        rng.shuffle(items)
        repeats = [(d, s + 5.0) for d, s in items[: int(rng.integers(0, 3))]]
        rows.append(items + repeats)
    ranking = Ranking.from_rows(rows)
    extra = np.full((len(rows), 2), "", dtype=object)  # more padding than needed
    return Ranking(
        np.hstack([ranking.ids, extra]), np.hstack([ranking.scores, np.full(extra.shape, -np.inf)])
    )


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("seed", range(60))
def test_equals_trec_eval_per_query(seed: int, level: int) -> None:
    qrels, run = random_case(seed)
    expected = pytrec_values(qrels, run, level)
    query_ids = list(qrels)
    frame = evaluate_run(qrels, run, OUR_METRICS, relevance_level=level, query_ids=query_ids)
    assert_matches(frame, expected)
    ranking = shuffled_ranking(run, query_ids, np.random.default_rng(seed))
    arrays = evaluate(qrels, ranking, query_ids, OUR_METRICS, relevance_level=level)
    assert_matches(pd.DataFrame(arrays, index=query_ids), expected)


def test_negative_grades_are_never_relevant_like_trec_eval() -> None:
    qrels = {"q": {"a": -1, "b": 1, "c": 2}}
    run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0, "x": 0.5}}
    for level in (1, 2):
        expected = pytrec_values(qrels, run, level)
        frame = evaluate_run(qrels, run, OUR_METRICS, relevance_level=level, query_ids=["q"])
        assert_matches(frame, expected)


def test_relevance_level_changes_binary_metrics_not_ndcg() -> None:
    qrels = {"q": {"a": 1, "b": 2}}
    ranking = Ranking.from_rows([[("a", 2.0), ("b", 1.0)]])
    one = evaluate(qrels, ranking, ["q"], ["recall@1", "ndcg@2"], relevance_level=1)
    two = evaluate(qrels, ranking, ["q"], ["recall@1", "ndcg@2"], relevance_level=2)
    assert one["recall@1"][0] == pytest.approx(0.5)
    assert two["recall@1"][0] == 0.0
    assert one["ndcg@2"][0] == two["ndcg@2"][0]


def test_ties_are_broken_by_doc_id_descending_whatever_the_order() -> None:
    qrels = {"q": {"a": 1}}
    for row in ([("a", 1.0), ("b", 1.0)], [("b", 1.0), ("a", 1.0)]):
        values = evaluate(qrels, Ranking.from_rows([row]), ["q"], ["mrr"])
        assert values["mrr"][0] == 0.5  # "b" > "a" comes first


def test_repeated_id_keeps_its_first_occurrence() -> None:
    qrels = {"q": {"a": 1}}
    ranking = Ranking.from_rows([[("b", 2.0), ("a", 1.0), ("b", 0.0), ("a", 9.0)]])
    assert evaluate(qrels, ranking, ["q"], ["mrr", "p@4"]) == {
        "mrr": pytest.approx([0.5]),
        "precision@4": pytest.approx([0.25]),
    }


def test_queries_without_results_or_relevant_documents_score_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"a": 0}, "q3": {"b": 2}}
    run = {"q1": {"a": 1.0}, "q2": {"a": 1.0}}
    frame = evaluate_run(qrels, run, ["ndcg@10", "map", "mrr"], query_ids=list(qrels))
    assert frame.loc["q1"].tolist() == [1.0, 1.0, 1.0]
    assert frame.loc["q2"].tolist() == [0.0, 0.0, 0.0]
    assert frame.loc["q3"].tolist() == [0.0, 0.0, 0.0]


def test_evaluate_run_defaults_to_queries_with_a_relevant_judgement() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"a": 0}, "q3": {"b": 2}}
    assert relevant_query_ids(qrels) == ["q1", "q3"]
    assert relevant_query_ids(qrels, relevance_level=2) == ["q3"]
    frame = evaluate_run(qrels, {"q1": {"a": 1.0}}, ["recall@5"])
    assert list(frame.index) == ["q1", "q3"]
    assert frame.index.name == "query_id"
    assert mean({"recall@5": frame["recall@5"].to_numpy()}) == {"recall@5": 0.5}


def test_empty_inputs() -> None:
    empty = Ranking(np.empty((0, 0), dtype=object), np.empty((0, 0)))
    assert evaluate({}, empty, [], ["ndcg@10", "map"])["map"].shape == (0,)
    no_results = Ranking(np.empty((2, 0), dtype=object), np.empty((2, 0)))
    values = evaluate({"a": {"x": 1}}, no_results, ["a", "b"], ["ndcg@10", "r_precision"])
    assert values["ndcg@10"].tolist() == [0.0, 0.0]
    assert evaluate_run({}, {}, ["mrr"]).empty
    assert np.isnan(mean({"mrr": np.empty(0)})["mrr"])


def test_ranking_shape_must_match_query_ids() -> None:
    ranking = Ranking.from_rows([[("a", 1.0)]])
    with pytest.raises(ValueError, match=r"len\(query_ids\)=2"):
        evaluate({}, ranking, ["q1", "q2"], ["mrr"])


def test_nan_scores_and_relevance_level_below_one_are_rejected() -> None:
    ranking = Ranking.from_rows([[("a", float("nan"))]])
    with pytest.raises(ValueError, match="NaN"):
        evaluate({"q": {"a": 1}}, ranking, ["q"], ["mrr"])
    with pytest.raises(ValueError, match="relevance_level"):
        evaluate({"q": {"a": 1}}, ranking, ["q"], ["mrr"], relevance_level=0)


@pytest.mark.parametrize(
    ("text", "metric"),
    [
        ("nDCG@10", Metric("ndcg@10", "ndcg", k=10)),
        (" p@5 ", Metric("precision@5", "precision", k=5)),
        ("success@3", Metric("hit_rate@3", "hit_rate", k=3)),
        ("MRR", Metric("mrr", "mrr")),
        ("mrr@010", Metric("mrr@10", "mrr", k=10)),
        ("map", Metric("map", "map")),
        ("R_Precision", Metric("r_precision", "r_precision")),
        ("span_iou@5", Metric("span_iou@5", "span_iou", k=5)),
        ("recall@2000TOK", Metric("recall@2000tok", "token_recall", budget=2000)),
    ],
)
def test_parse_metric(text: str, metric: Metric) -> None:
    assert parse_metric(text) == metric
    assert parse_metric(metric) is metric
    assert str(metric) == metric.name


@pytest.mark.parametrize(
    "text", ["ndcg", "foo@10", "recall@0", "r_precision@5", "ndcg@10tok", "map@x", "", "p@-1"]
)
def test_parse_metric_errors_name_the_string_and_the_forms(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_metric(text)
    assert repr(text) in str(info.value)
    assert "ndcg@K" in str(info.value)


def test_parse_metrics_drops_repeats_and_flags_span_metrics() -> None:
    parsed = parse_metrics(["p@5", "precision@5", "span_recall@5"])
    assert [m.name for m in parsed] == ["precision@5", "span_recall@5"]
    assert [m.is_span for m in parsed] == [False, True]
    with pytest.raises(ConfigError, match=r"span_recall@5.*evaluate_chunks"):
        evaluate({}, Ranking.from_rows([[]]), ["q"], ["span_recall@5"])
