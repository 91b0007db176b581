"""Label projection: hand-computed cases, and a character-set reference on random cases."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ragbench.data.labeled import Evidence, LabeledSet
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.labels import (
    chunk_qrels,
    chunking_diagnostics,
    evaluate_chunks,
    span_metrics,
)
from ragbench.evaluate.metrics import evaluate
from ragbench.text.chunk_table import ChunkTable, document_ranking
from ragbench.types import Chunk, Document, Query, Ranking

TEXTS = {"a": "a" * 100, "b": "b" * 50, "c": "c" * 10}
# a: [0,40) [30,70) [70,100) (the first two overlap); b: [0,25) [25,50); c: [0,10)
BOUNDS = {"a": [(0, 40), (30, 70), (70, 100)], "b": [(0, 25), (25, 50)], "c": [(0, 10)]}


class CharCounter:
    """One token per character, so budgets are easy to compute by hand."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def spans(self, text: str) -> np.ndarray:
        starts = np.arange(len(text))
        return np.stack([starts, starts + 1], axis=1)


def make_chunks(bounds: dict[str, list[tuple[int, int]]], texts: dict[str, str]) -> list[Chunk]:
    return [
        Chunk(f"{doc}:chunk-{i}", doc, i, start, end, texts[doc][start:end])
        for doc, spans in bounds.items()
        for i, (start, end) in enumerate(spans)
    ]


@pytest.fixture
def table() -> ChunkTable:
    return ChunkTable.from_chunks(make_chunks(BOUNDS, TEXTS))


@pytest.fixture
def labeled() -> LabeledSet:
    evidence = {
        "q1": [Evidence("q1", "a", 35, 45, grade=2), Evidence("q1", "a", 80, 90)],
        "q2": [Evidence("q2", "b", 20, 30)],  # split across b's two chunks
        "q4": [Evidence("q4", "c", 5, 20)],  # [10, 20) is in no chunk: lost
    }
    return LabeledSet(
        name="toy",
        documents=[Document(d, t) for d, t in TEXTS.items()],
        queries=[Query(q, q) for q in ("q1", "q2", "q3", "q4")],
        qrels={"q1": {"a": 2}, "q2": {"b": 1}, "q3": {"a": 1}, "q4": {"c": 1}},
        evidence=evidence,
    )


def ranking_of(rows: list[list[str]]) -> Ranking:
    """A ranking with descending scores in the given order."""
    return Ranking.from_rows([[(c, 1.0 - 0.1 * i) for i, c in enumerate(r)] for r in rows])


# ---------------------------------------------------------------- document and chunk level


def test_document_ranking_keeps_the_first_chunk_of_each_document(table: ChunkTable) -> None:
    ranking = Ranking.from_rows(
        [
            [("a:chunk-2", 0.9), ("b:chunk-0", 0.8), ("a:chunk-0", 0.7), ("b:chunk-1", 0.6)],
            [("c:chunk-0", 0.5)],
        ]
    )
    docs = document_ranking(ranking, table)
    assert docs.row(0) == [("a", 0.9), ("b", 0.8)]
    assert docs.row(1) == [("c", 0.5)]
    assert docs.ids.shape == (2, 2)
    assert document_ranking(ranking, table) is docs  # projected once per ranking and table
    other = ChunkTable.from_chunks([Chunk("a:chunk-2", "b", 0, 0, 1, "x")])
    assert document_ranking(Ranking.from_rows([[("a:chunk-2", 0.9)]]), other).row(0) == [("b", 0.9)]


def test_document_level_uses_document_qrels(table: ChunkTable, labeled: LabeledSet) -> None:
    ranking = ranking_of([["b:chunk-0", "a:chunk-1", "a:chunk-0"], ["b:chunk-1"], [], []])
    query_ids = ["q1", "q2", "q3", "q4"]
    values = evaluate_chunks(ranking, query_ids, table, labeled, ["mrr", "p@2"])
    assert values["mrr"].tolist() == [0.5, 1.0, 0.0, 0.0]
    assert values["precision@2"].tolist() == [0.5, 0.5, 0.0, 0.0]


def test_chunk_qrels_by_overlap_threshold(table: ChunkTable, labeled: LabeledSet) -> None:
    assert chunk_qrels(table, labeled) == {
        "q1": {"a:chunk-0": 2, "a:chunk-1": 2, "a:chunk-2": 1},
        "q2": {"b:chunk-0": 1, "b:chunk-1": 1},
        "q4": {"c:chunk-0": 1},
    }
    # a:chunk-0 overlaps [35,45) by 5 of min(40, 10): 0.5; b's chunks by 5 of 10: 0.5
    # c:chunk-0 overlaps [5,20) by 5 of min(10, 15): 0.5
    assert chunk_qrels(table, labeled, min_overlap=0.6) == {"q1": {"a:chunk-1": 2, "a:chunk-2": 1}}
    assert chunk_qrels(table, labeled, min_overlap=0.5) == chunk_qrels(table, labeled)


def test_chunk_level_evaluates_chunk_qrels(table: ChunkTable, labeled: LabeledSet) -> None:
    ranking = ranking_of([["b:chunk-0", "a:chunk-0"], ["b:chunk-1"]])
    values = evaluate_chunks(
        ranking, ["q1", "q2"], table, labeled, ["recall@2", "mrr"], level="chunk"
    )
    assert values["recall@2"].tolist() == pytest.approx([1 / 3, 0.5])
    assert values["mrr"].tolist() == [0.5, 1.0]
    strict = evaluate_chunks(
        ranking, ["q1", "q2"], table, labeled, ["mrr"], level="chunk", min_overlap=0.6
    )
    assert strict["mrr"].tolist() == [0.0, 0.0]


# ---------------------------------------------------------------- span level, by hand


def test_span_metrics_with_overlapping_chunks(table: ChunkTable, labeled: LabeledSet) -> None:
    # E = [35,45) ∪ [80,90) (20 chars); top-2 chunks cover [0,70): 10 chars, 80 retrieved
    ranking = ranking_of([["a:chunk-0", "a:chunk-1", "a:chunk-2"]])
    values = span_metrics(
        ranking, ["q1"], table, labeled, ["span_recall@2", "span_precision@2", "span_iou@2"]
    )
    assert values["span_recall@2"][0] == pytest.approx(10 / 20)
    assert values["span_precision@2"][0] == pytest.approx(10 / 80)
    assert values["span_iou@2"][0] == pytest.approx(10 / (80 + 10))


def test_span_metrics_count_chunks_of_other_documents(
    table: ChunkTable, labeled: LabeledSet
) -> None:
    ranking = ranking_of([["b:chunk-0", "a:chunk-2"]])
    values = span_metrics(
        ranking, ["q1"], table, labeled, ["span_recall@2", "span_precision@2", "span_iou@2"]
    )
    assert values["span_recall@2"][0] == pytest.approx(10 / 20)
    assert values["span_precision@2"][0] == pytest.approx(10 / 55)
    assert values["span_iou@2"][0] == pytest.approx(10 / (55 + 10))


def test_repeated_chunks_count_once(table: ChunkTable, labeled: LabeledSet) -> None:
    ranking = ranking_of([["a:chunk-1", "a:chunk-1", "a:chunk-2"]])
    values = span_metrics(ranking, ["q1"], table, labeled, ["span_recall@2"])
    assert values["span_recall@2"][0] == 1.0


def test_token_budget_stops_at_the_first_chunk_that_does_not_fit(
    table: ChunkTable, labeled: LabeledSet
) -> None:
    # 40 + 40 > 75: stop after a:chunk-0 even though a:chunk-2 (30) would still fit
    ranking = ranking_of([["a:chunk-0", "a:chunk-1", "a:chunk-2"]])
    counter = CharCounter()
    cut = span_metrics(ranking, ["q1"], table, labeled, ["recall@75tok"], counter=counter)
    assert cut["recall@75tok"][0] == pytest.approx(5 / 20)
    two = span_metrics(ranking, ["q1"], table, labeled, ["recall@80tok"], counter=counter)
    assert two["recall@80tok"][0] == pytest.approx(10 / 20)
    none = span_metrics(ranking, ["q1"], table, labeled, ["recall@39tok"], counter=counter)
    assert none["recall@39tok"][0] == 0.0


def test_token_budget_texts_from_a_callable(labeled: LabeledSet) -> None:
    chunks = make_chunks(BOUNDS, TEXTS)
    bare = ChunkTable(
        ids=[c.id for c in chunks],
        doc_ids=[c.doc_id for c in chunks],
        starts=[c.start for c in chunks],
        ends=[c.end for c in chunks],
    )
    ranking = ranking_of([["a:chunk-0", "a:chunk-1"]])
    with pytest.raises(ConfigError, match="chunk_text"):
        span_metrics(ranking, ["q1"], bare, labeled, ["recall@75tok"], counter=CharCounter())
    text = {c.id: c.text for c in chunks}.__getitem__
    values = span_metrics(
        ranking, ["q1"], bare, labeled, ["recall@75tok"], counter=CharCounter(), chunk_text=text
    )
    assert values["recall@75tok"][0] == pytest.approx(5 / 20)


def test_default_token_counter_is_cl100k(table: ChunkTable, labeled: LabeledSet) -> None:
    ranking = ranking_of([["a:chunk-1"]])
    values = span_metrics(ranking, ["q1"], table, labeled, ["recall@1000tok"])
    assert values["recall@1000tok"][0] == pytest.approx(10 / 20)


def test_queries_without_evidence_score_zero(table: ChunkTable, labeled: LabeledSet) -> None:
    values = span_metrics(ranking_of([["a:chunk-1"]]), ["q3"], table, labeled, ["span_iou@5"])
    assert values["span_iou@5"].tolist() == [0.0]


# ---------------------------------------------------------------- routing and errors


def test_evaluate_chunks_routes_and_keeps_metric_order(
    table: ChunkTable, labeled: LabeledSet
) -> None:
    ranking = ranking_of([["a:chunk-1", "b:chunk-0"]])
    metrics = ["span_recall@1", "ndcg@10", "recall@40tok"]
    values = evaluate_chunks(
        ranking, ["q1"], table, labeled, metrics, counter=CharCounter(), level="chunk"
    )
    assert list(values) == ["span_recall@1", "ndcg@10", "recall@40tok"]
    expected = evaluate(chunk_qrels(table, labeled), ranking, ["q1"], ["ndcg@10"])
    assert values["ndcg@10"] == pytest.approx(expected["ndcg@10"])
    assert values["span_recall@1"][0] == values["recall@40tok"][0] == pytest.approx(0.5)


def test_routing_errors(table: ChunkTable, labeled: LabeledSet) -> None:
    ranking = ranking_of([["a:chunk-1"]])
    no_spans = LabeledSet("plain", labeled.documents, labeled.queries, labeled.qrels)
    with pytest.raises(ConfigError, match=r"span_iou@5.*'plain'"):
        evaluate_chunks(ranking, ["q1"], table, no_spans, ["ndcg@5", "span_iou@5"])
    with pytest.raises(ConfigError, match="chunk-level labels need span evidence"):
        evaluate_chunks(ranking, ["q1"], table, no_spans, ["ndcg@5"], level="chunk")
    with pytest.raises(ConfigError, match=r"ndcg@5.*level 'document' or 'chunk'"):
        evaluate_chunks(ranking, ["q1"], table, labeled, ["ndcg@5"], level="span")
    with pytest.raises(ConfigError, match="unknown evaluation level 'page'"):
        evaluate_chunks(ranking, ["q1"], table, labeled, ["ndcg@5"], level="page")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="min_overlap"):
        chunk_qrels(table, labeled, min_overlap=1.5)
    with pytest.raises(DataError, match="'x:chunk-9'"):
        evaluate_chunks(ranking_of([["x:chunk-9"]]), ["q1"], table, labeled, ["ndcg@5"])
    assert evaluate_chunks(ranking, ["q1"], table, labeled, ["span_iou@5"], level="span")


def test_chunk_table_validation() -> None:
    with pytest.raises(DataError, match="not unique"):
        ChunkTable(ids=["x", "x"], doc_ids=["a", "a"], starts=[0, 1], ends=[1, 2])
    with pytest.raises(DataError, match="differ in length"):
        ChunkTable(ids=["x"], doc_ids=["a", "a"], starts=[0], ends=[1])
    with pytest.raises(DataError, match="'x' ends before it starts"):
        ChunkTable(ids=["x"], doc_ids=["a"], starts=[5], ends=[1])


# ---------------------------------------------------------------- diagnostics


def test_diagnostics(table: ChunkTable, labeled: LabeledSet) -> None:
    d = chunking_diagnostics(table, labeled, ks=(1, 2))
    assert d.chunks == 6
    assert d.mean_chunk_length == pytest.approx(170 / 6)
    assert d.spans == 4
    assert d.split_spans == 2  # b [20,30) across two chunks, c [5,20) partly lost
    assert d.lost_spans == 1
    assert d.lost_char_fraction == pytest.approx(10 / 45)
    # q1: one chunk covers 10 of 20, two cover all; q2: 5 of 10 then 10; q4: 5 of 15
    assert d.oracle_span_recall[1] == pytest.approx((0.5 + 0.5 + 1 / 3) / 3)
    assert d.oracle_span_recall[2] == pytest.approx((1 + 1 + 1 / 3) / 3)


# ---------------------------------------------------------------- random cases vs reference


def random_corpus(rng: np.random.Generator, overlapping: bool):
    """Random documents, chunkings (overlapping or a partition with gaps) and evidence."""
    texts = {f"d{i}": "x" * int(rng.integers(20, 60)) for i in range(int(rng.integers(1, 4)))}
    bounds: dict[str, list[tuple[int, int]]] = {}
    for doc, text in texts.items():
        cuts = np.sort(rng.choice(np.arange(1, len(text)), size=4, replace=False))
        edges = [0, *cuts.tolist(), len(text)]
        spans = list(itertools.pairwise(edges))
        if overlapping:
            spans = [(max(0, s - int(rng.integers(0, 6))), e) for s, e in spans]
        else:  # drop a piece now and then: characters in no chunk
            spans = [p for p in spans if rng.random() < 0.85] or spans[:1]
        bounds[doc] = spans
    evidence = {}
    for q in range(3):
        spans = []
        for _ in range(int(rng.integers(1 if q == 0 else 0, 4))):
            doc = str(rng.choice(list(texts)))
            start = int(rng.integers(0, len(texts[doc]) - 1))
            end = int(rng.integers(start + 1, len(texts[doc]) + 1))
            spans.append(Evidence(f"q{q}", doc, start, end))
        if spans:
            evidence[f"q{q}"] = spans
    labeled = LabeledSet(
        "random", [Document(d, t) for d, t in texts.items()], [], {}, evidence=evidence
    )
    return make_chunks(bounds, texts), labeled


def reference_scores(chunks: list[Chunk], evidence: list[Evidence]) -> tuple[float, ...]:
    """Chroma's definitions over explicit sets of (document, character)."""
    wanted = {(e.doc_id, x) for e in evidence for x in range(e.start, e.end)}
    got = {(c.doc_id, x) for c in chunks for x in range(c.start, c.end)}
    covered = len(wanted & got)
    spent = sum(c.end - c.start for c in chunks)
    total = sum(e.end - e.start for e in evidence)
    missed = len(wanted - got)
    return (
        covered / total if total else 0.0,
        covered / spent if spent else 0.0,
        covered / (spent + missed) if spent + missed else 0.0,
    )


@pytest.mark.parametrize("seed", range(40))
def test_span_metrics_equal_the_character_set_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    chunks, labeled = random_corpus(rng, overlapping=bool(seed % 2))
    table = ChunkTable.from_chunks(chunks)
    by_id = {c.id: c for c in chunks}
    query_ids = ["q0", "q1", "q2"]
    rows = [list(rng.choice(list(by_id), size=int(rng.integers(0, 8)))) for _ in query_ids]
    k, budget = int(rng.integers(1, 6)), int(rng.integers(0, 80))
    names = [f"span_recall@{k}", f"span_precision@{k}", f"span_iou@{k}", f"recall@{budget}tok"]
    values = span_metrics(ranking_of(rows), query_ids, table, labeled, names, counter=CharCounter())
    for i, q in enumerate(query_ids):
        distinct = [by_id[c] for c in dict.fromkeys(rows[i])]
        evidence = labeled.evidence.get(q, [])
        expected = reference_scores(distinct[:k], evidence)
        assert [values[n][i] for n in names[:3]] == pytest.approx(expected)
        taken, used = [], 0
        for c in distinct:
            if used + len(c.text) > budget:
                break
            taken.append(c)
            used += len(c.text)
        assert values[names[3]][i] == pytest.approx(reference_scores(taken, evidence)[0])


@pytest.mark.parametrize("seed", range(30))
def test_diagnostics_equal_the_character_set_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    overlapping = bool(seed % 2)
    chunks, labeled = random_corpus(rng, overlapping=overlapping)
    d = chunking_diagnostics(ChunkTable.from_chunks(chunks), labeled, ks=(1, 2, 3))
    spans = [e for es in labeled.evidence.values() for e in es]
    chunk_chars = {(c.doc_id, x) for c in chunks for x in range(c.start, c.end)}
    lost = [sum((e.doc_id, x) not in chunk_chars for x in range(e.start, e.end)) for e in spans]
    inside = [
        any(c.doc_id == e.doc_id and c.start <= e.start and e.end <= c.end for c in chunks)
        for e in spans
    ]
    assert d.spans == len(spans)
    assert d.split_spans == inside.count(False)
    assert d.lost_spans == sum(n > 0 for n in lost)
    total = sum(e.end - e.start for e in spans)
    assert d.lost_char_fraction == pytest.approx(sum(lost) / total if total else 0.0)
    for k in (1, 2, 3):  # brute force: the best k chunks of all
        best = [
            max(
                (
                    reference_scores(list(pick), es)[0]
                    for pick in itertools.combinations(chunks, min(k, len(chunks)))
                ),
                default=0.0,
            )
            for es in labeled.evidence.values()
        ]
        expected = float(np.mean(best)) if best else 0.0
        if overlapping:
            assert d.oracle_span_recall[k] <= expected + 1e-12
        else:
            assert d.oracle_span_recall[k] == pytest.approx(expected)
