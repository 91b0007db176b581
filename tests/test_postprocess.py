"""Post-retrieval steps: thresholds on every scale, sentence windows, neighbours, dedup and a
token budget — on hand-made rankings, in sweeps on the demo set (a query may keep no hit and
every metric still computes; span metrics score the windows) and in a live pipeline whose
windows follow its changes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import bpe_openai
import numpy as np
import pandas as pd
import pytest

from ragbench.experiment.runner import run
from ragbench.pipeline import RAGPipeline
from ragbench.retrieve.artifacts import ChunkSet
from ragbench.retrieve.postprocess import (
    AssembleConfig,
    DedupConfig,
    NeighborsConfig,
    ThresholdConfig,
)
from ragbench.types import Chunk, Document
from tests.paths import DEMO, require

LIMIT = 20
HITS = [("a", 10.0), ("b", 8.0), ("c", 5.0), ("d", 2.0)]
# min-max normalised: a 1, b 0.75, c 0.375, d 0; their cumulative shares of the total 2.125:
# a 0.47, a-b 0.82, a-c 1.0, a-d 1.0


@pytest.mark.parametrize(
    ("scale", "value", "kept"),
    [
        ("absolute", 5.0, "abc"),
        ("absolute", 100.0, ""),
        ("relative", 0.75, "ab"),  # >= 7.5
        ("relative", 0.5, "abc"),  # >= 5
        ("minmax", 0.5, "ab"),
        ("minmax", 0.0, "abcd"),
        ("top_p", 0.4, "a"),  # the fewest top hits holding 40% of the mass
        ("top_p", 0.8, "ab"),
        ("top_p", 0.85, "abc"),
        ("top_p", 1.0, "abc"),  # d adds nothing to the mass
    ],
)
def test_threshold_keeps_what_each_scale_says(scale: str, value: float, kept: str) -> None:
    step = ThresholdConfig(scale=scale, value=value)  # type: ignore[arg-type]
    assert [c for c, _ in step.process(ChunkSet([]), 0, list(HITS))] == list(kept)


def test_threshold_on_equal_scores_and_no_hits() -> None:
    same = [("a", 3.0), ("b", 3.0)]
    assert ThresholdConfig(scale="minmax", value=0.9).process(ChunkSet([]), 0, same) == same
    assert ThresholdConfig(scale="top_p", value=0.5).process(ChunkSet([]), 0, same) == same[:1]
    assert ThresholdConfig(scale="relative", value=0.9).process(ChunkSet([]), 0, []) == []
    logits = [("a", -1.0), ("b", -1.4), ("c", -3.0)]  # a cross-encoder's scores may be negative
    relative = ThresholdConfig(scale="relative", value=0.5)
    assert relative.process(ChunkSet([]), 0, logits) == logits[:2]  # within 0.5 of |-1|


def _demo(sweep: dict[str, Any], metrics: list[str], level: str = "document") -> dict[str, Any]:
    return {
        "name": "post",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"level": level, "metrics": metrics, "depth": 10},
        "sweep": {"retriever": [{"kind": "bm25"}], **sweep},
    }


def test_a_query_left_without_hits_scores_zero_on_every_metric(tmp_path: Path) -> None:
    metrics = [
        "ndcg@10",
        "recall@10",
        "mrr@10",
        "span_recall@5",
        "span_precision@5",
        "span_iou@5",
        "recall@300tok",
    ]
    cut = {"kind": "threshold", "scale": "absolute", "value": 12.0}  # BM25's raw scale
    config = _demo(
        {
            "chunker": [{"kind": "sentence", "size": 300, "overlap": 0}],
            "postprocess": [{"kind": "none"}, cut],
        },
        metrics,
    )
    result = run(
        config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=LIMIT, progress=False
    )
    trials = result.trials.set_index(result.trials["param.postprocess.kind"].fillna("none"))
    assert set(trials["status"]) == {"ok"}
    plain, kept = trials.loc["none", "trial_id"], trials.loc["threshold", "trial_id"]
    top = pd.read_parquet(result.path / "runs" / f"{plain}.top.parquet")
    best = top[top["rank"] == 1].set_index("query_id")["score"]
    emptied = set(best[best < 12.0].index)
    assert 0 < len(emptied) < LIMIT  # some queries keep no hit, others keep some
    trec = (result.path / "runs" / f"{kept}.trec").read_text().splitlines()
    assert {line.split()[0] for line in trec}.isdisjoint(emptied)
    values = result.per_query.pivot_table(
        index=["query_id", "metric"], columns="trial_id", values="value"
    )
    assert len(values) == LIMIT * len(metrics) and np.isfinite(values.to_numpy()).all()
    for (query_id, metric), row in values.iterrows():
        if query_id in emptied:
            assert row[kept] == 0.0, (query_id, metric)
        elif metric in ("ndcg@10", "recall@10", "mrr@10", "span_recall@5"):
            assert row[kept] <= row[plain] + 1e-12, (query_id, metric)  # only hits are dropped
    assert trials.loc["threshold", "recall@10"] < trials.loc["none", "recall@10"]


def test_span_metrics_score_the_windows_the_hits_stand_for(tmp_path: Path) -> None:
    config = _demo(
        {
            "chunker": [
                {"kind": "sentence", "size": 120, "overlap": 0},
                {"kind": "sentence_window", "window": 1},
            ],
            "postprocess": [{"kind": "none"}, {"kind": "window", "sentences": 1}],
        },
        ["span_recall@5", "span_precision@5", "span_iou@5"],
        level="span",
    )
    result = run(
        config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=LIMIT, progress=False
    )
    trials = result.trials
    assert len(trials) == 4 and set(trials["status"]) == {"ok"}
    recall = result.per_query[result.per_query["metric"] == "span_recall@5"].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    for chunker, group in trials.groupby("param.chunker.kind"):
        by_post = group.set_index(group["param.postprocess.kind"].fillna("none"))["trial_id"]
        plain, window = by_post["none"], by_post["window"]
        # a window holds its hit, so it covers every evidence character the hit covered
        assert (recall[window] >= recall[plain] - 1e-12).all(), chunker
        assert recall[window].mean() > recall[plain].mean(), chunker
        top = pd.read_parquet(result.path / "runs" / f"{window}.top.parquet")
        assert top["chunk_id"].str.endswith("#window").all()
        sentences = pd.read_parquet(result.path / "runs" / f"{plain}.top.parquet")
        pairs = top.merge(sentences, on=["query_id", "rank"], suffixes=("", "_hit"))
        assert (pairs["chunk_id"] == pairs["chunk_id_hit"] + "#window").all()
        assert ((pairs["start"] <= pairs["start_hit"]) & (pairs["end"] >= pairs["end_hit"])).all()
        assert (pairs["end"] - pairs["start"] > pairs["end_hit"] - pairs["start_hit"]).any()


# ---------------------------------------------------------------- hand-made chunk sets


def _chunks(docs: dict[str, list[str]]) -> ChunkSet:
    """Chunks ``<doc>:<i>`` of the given texts, each document's texts back to back."""
    found = []
    for doc, texts in docs.items():
        start = 0
        for i, text in enumerate(texts):
            found.append(Chunk(f"{doc}:{i}", doc, i, start, start + len(text), text, {}))
            start += len(text) + 1
    return ChunkSet(found)


def test_neighbors_follow_each_hit_once_just_below_its_score() -> None:
    chunks = _chunks({"A": [f"a{i}" for i in range(5)], "B": ["b0", "b1", "b2"]})
    hits = [("A:2", 5.0), ("B:0", 3.0), ("A:3", 2.0)]
    found = NeighborsConfig(before=1, after=1).process(chunks, 0, hits)
    # A:3 is a hit of its own, so it is not A:2's neighbour; B:0 has nothing before it
    assert [c for c, _ in found] == ["A:2", "A:1", "B:0", "B:1", "A:3", "A:4"]
    scores = [s for _, s in found]
    assert scores == pytest.approx([5.0, 5.0, 3.0, 3.0, 2.0, 2.0])
    assert all(a > b for a, b in itertools.pairwise(scores))
    wide = NeighborsConfig(before=0, after=2).process(chunks, 0, [("B:1", 1.0)])
    assert [c for c, _ in wide] == ["B:1", "B:2"]  # the document ends


def test_dedup_drops_repeated_texts_whitespace_aside() -> None:
    chunks = _chunks(
        {"A": ["Retention  deletes\nsegments.", "Other."], "B": ["Retention deletes segments."]}
    )
    hits = [("B:0", 3.0), ("A:1", 2.0), ("A:0", 1.0)]
    assert DedupConfig().process(chunks, 0, hits) == hits[:2]


def test_assemble_keeps_hits_in_rank_order_within_the_token_budget() -> None:
    encoding = bpe_openai.get_encoding("cl100k_base")
    texts = {
        "long": "Retention deletes closed segments once they are older than the period. " * 4,
        "short": "Compaction keeps the last value per key.",
        "mid": "Tiered storage moves closed segments to an object store.",
    }
    tokens = {k: len(encoding.encode(t)) for k, t in texts.items()}
    chunks = ChunkSet([Chunk(k, k, 0, 0, len(t), t, {}) for k, t in texts.items()])
    hits = [("short", 3.0), ("long", 2.0), ("mid", 1.0)]
    budget = tokens["short"] + tokens["mid"]  # too small for the long one after the short one
    kept = AssembleConfig(budget_tokens=budget).process(chunks, 0, hits)
    assert kept == [("short", 3.0), ("mid", 1.0)]  # the long hit is skipped, not a stop
    roomy = AssembleConfig(budget_tokens=sum(tokens.values())).process(chunks, 0, hits)
    assert roomy == hits
    assert AssembleConfig(budget_tokens=tokens["short"] - 1).process(chunks, 0, hits[:2]) == []


# ---------------------------------------------------------------- a live pipeline

SENTENCES = [
    "Kestrel is a log broker.",
    "Retention deletes closed segments.",
    "The default period is seven days.",
    "Compaction keeps the last value per key.",
    "Tiered storage moves segments to object stores.",
]


def _window_pipeline(post: dict[str, Any]) -> RAGPipeline:
    return RAGPipeline.from_config(
        {
            "chunker": {"kind": "sentence", "size": 50, "overlap": 0},  # one sentence a chunk
            "retriever": {"kind": "bm25"},
            "postprocess": post,
            "generator": {"kind": "extractive"},
        }
    )


def test_a_pipeline_answers_from_windows_that_follow_its_changes() -> None:
    pipeline = _window_pipeline({"kind": "window", "sentences": 1})
    other = "Quotas limit client bytes per second."
    report = pipeline.index([Document("log.md", " ".join(SENTENCES)), Document("q.md", other)])
    assert report.chunks_created == 6 and not report.errors
    hit = pipeline.retrieve("retention closed segments", 1)[0]
    assert hit.chunk.id == "log.md:chunk-1#window"
    assert hit.chunk.text == " ".join(SENTENCES[:3])  # one sentence on each side
    assert hit.chunk.metadata["window_of"] == "log.md:chunk-1"
    # the generator reads the windows: the answer may come from the hit's neighbour
    assert pipeline.answer("what is the default retention period in days", 1) == SENTENCES[2]
    # a changed document: its windows are cut from the new text
    changed = [*SENTENCES[:2], "Thirty days is the new period.", *SENTENCES[3:]]
    assert pipeline.update(Document("log.md", " ".join(changed))).documents_indexed == 1
    hit = pipeline.retrieve("retention closed segments", 1)[0]
    assert hit.chunk.text == " ".join(changed[:3])
    assert pipeline.answer("what is the new retention period in days", 1) == changed[2]
    # a deleted document: no window of it is left, the others still answer
    assert pipeline.delete_document("log.md") == 5
    assert [h.chunk.id for h in pipeline.retrieve("segments retention bytes client", 5)] == [
        "q.md:chunk-0#window"
    ]
    assert pipeline.retrieve("quotas", 1)[0].chunk.text == other


def test_a_pipeline_keeps_its_answers_within_an_assembled_budget() -> None:
    encoding = bpe_openai.get_encoding("cl100k_base")
    budget = 20
    pipeline = _window_pipeline({"kind": "assemble", "budget_tokens": budget})
    pipeline.index([Document("log.md", " ".join(SENTENCES))])
    hits = pipeline.retrieve("segments retention compaction storage kestrel", 5)
    used = sum(len(encoding.encode(h.chunk.text)) for h in hits)
    assert 0 < used <= budget < sum(len(encoding.encode(s)) for s in SENTENCES)
    assert len(hits) < 5


def test_a_saved_window_pipeline_reopens_with_its_windows(tmp_path: Path) -> None:
    pipeline = _window_pipeline({"kind": "window", "sentences": 1})
    pipeline.index([Document("log.md", " ".join(SENTENCES), {"team": "ops"})])
    pipeline.save(tmp_path / "col")
    reopened = RAGPipeline.open(tmp_path / "col")
    hit = reopened.retrieve("retention closed segments", 1)[0]
    assert hit.chunk.id == "log.md:chunk-1#window"
    assert hit.chunk.text == " ".join(SENTENCES[:3])  # the window needs the saved documents
    assert (
        reopened.index(
            [Document("log.md", " ".join(SENTENCES), {"team": "ops"})]
        ).documents_unchanged
        == 1
    )
