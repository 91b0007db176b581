"""The agentic retriever in sweeps: offline (dense or cross-encoder grades, reformulation by
pseudo-relevance feedback) and against the scripted OpenAI-compatible server (decomposition,
LLM grades and rewrites) — rounds, calls, tokens and traces in the run directory, the loop's
stopping rules, reruns for free, deployment; and one offline sweep crossing the query,
retriever and postprocess axes."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ragbench.experiment.config import expand, load_config
from ragbench.experiment.runner import RunResult, run
from ragbench.experiment.trial import RunSpec, context
from ragbench.pipeline import RAGPipeline
from ragbench.registry import components
from ragbench.retrieve.execution import Execution
from ragbench.testing import ScriptedLLMServer, scripted_llm_server
from tests.paths import DEMO, require

HASHING = {"kind": "hashing", "dim": 256}
CHUNKER = {"kind": "sentence", "size": 300, "overlap": 0}
LIMIT = 12
WORD = re.compile(r"[^\W\d_]{3,}")
Q001 = (
    "Why do workers that take too long on their work get thrown out and then cause another "
    "reshuffle?"
)


def _config(retrievers: list[dict[str, Any]], **sweep: Any) -> dict[str, Any]:
    return {
        "name": "agentic",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@10", "span_recall@5"], "depth": 10},
        "sweep": {"chunker": [CHUNKER], "embedder": [HASHING], "retriever": retrievers, **sweep},
    }


def _traces(result: RunResult, trial_id: str) -> dict[str, list[dict[str, Any]]]:
    traces: dict[str, dict[str, list[dict[str, Any]]]] = json.loads(
        (result.path / "runs" / f"{trial_id}.traces.json").read_text("utf-8")
    )
    assert list(traces) == ["agentic"]
    return traces["agentic"]


def _top(result: RunResult, trial_id: str) -> pd.DataFrame:
    return pd.read_parquet(result.path / "runs" / f"{trial_id}.top.parquet")


def _execution(config: dict[str, Any], trial_id: str, cache: Path) -> Execution:
    """The finished trial's stages, loaded from the stage cache."""
    loaded = load_config(config)
    trial = next(t for t in expand(loaded) if t.id == trial_id)
    ctx = context(RunSpec(loaded, LIMIT, str(cache)))
    return Execution(ctx.plan(trial), ctx.env, ctx.cache)


def _deploys(result: RunResult, trial_id: str) -> None:
    """``RAGPipeline.from_trial`` returns the chunks the run ranked, in its order."""
    pipeline = RAGPipeline.from_trial(result.path, trial_id)
    queries = pd.read_parquet(result.path / "queries.parquet")
    ranking = pipeline.search(list(queries["text"]), 10).ranking
    top = _top(result, trial_id)
    for row, query_id in enumerate(queries["query_id"]):
        theirs = list(top[top["query_id"] == query_id].sort_values("rank")["chunk_id"])
        assert [c for c, _ in ranking.row(row)][: len(theirs)] == theirs, query_id


# ---------------------------------------------------------------- offline


def test_the_offline_loop_grades_by_cosine_and_reformulates_by_feedback(tmp_path: Path) -> None:
    loop = {"kind": "agentic", "inner": {"kind": "bm25"}, "grade": "dense", "threshold": 0.2}
    loop |= {"candidates": 5, "max_rounds": 3, "fb_docs": 2, "fb_terms": 3}
    retrievers = [loop | {"min_relevant": 100}, loop | {"threshold": -1.0, "min_relevant": 1}]
    config = _config(retrievers)
    cache = tmp_path / "cache"
    result = run(config, tmp_path / "run", cache_root=cache, limit_queries=LIMIT, progress=False)
    trials = result.trials.set_index("param.retriever.min_relevant")
    assert set(trials["status"]) == {"ok"}
    assert trials.loc[100, "agentic.rounds"] == 3  # never enough: every round runs
    assert trials.loc[1, "agentic.rounds"] == 1  # every candidate relevant: stops at once
    assert (trials["agentic.llm_calls"] == 0).all() and (trials["llm_requests"] == 0).all()
    assert not any(c.startswith("tokens.agentic") for c in trials.columns)
    trial_id = trials.loc[100, "trial_id"]
    execution = _execution(config, trial_id, cache)
    texts = execution[execution.plan.chunks].texts
    asked = pd.read_parquet(result.path / "queries.parquet").set_index("query_id")["text"]
    for query_id, steps in _traces(result, trial_id).items():
        assert [s["round"] for s in steps] == [1, 2, 3]  # offline: the query itself, no split
        assert steps[0]["question"] == asked[query_id] and len(steps[0]["found"]) == 5
        for before, after in itertools.pairwise(steps):
            # reformulation: the question plus the most frequent new words of its best hits
            assert after["question"].startswith(before["question"] + " ")
            added = after["question"][len(before["question"]) + 1 :].split()
            feedback = " ".join(texts[c] for c in before["found"][:2]).lower()
            counts = Counter(WORD.findall(feedback))
            own = {w.lower() for w in WORD.findall(before["question"])}
            assert len(added) == 3 and not set(added) & own, (query_id, added)
            assert all(counts[w] > 0 for w in added)
            assert [counts[w] for w in added] == sorted((counts[w] for w in added), reverse=True)
    _check_cosine_grades(result, trial_id, threshold=0.2)
    _deploys(result, trial_id)


def _check_cosine_grades(result: RunResult, trial_id: str, threshold: float) -> None:
    """Every ranked chunk scores the cosine of its hashing vector and the query's, relevant
    ones (>= threshold) first, and only chunks the loop found are ranked."""
    embedder = components("embedder").build(components("embedder").parse(HASHING))
    queries = pd.read_parquet(result.path / "queries.parquet").set_index("query_id")["text"]
    traces = _traces(result, trial_id)
    for query_id, hits in _top(result, trial_id).groupby("query_id"):
        q = embedder.embed([queries[query_id]], "query")[0]
        d = embedder.embed(list(hits["text"]), "document")
        cosine = d @ q / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
        assert hits["score"].to_numpy() == pytest.approx(cosine, abs=1e-6)
        assert list(hits["score"]) == sorted(hits["score"], reverse=True)
        found = {c for step in traces[query_id] for c in step["found"]}
        assert set(hits["chunk_id"]) <= found
        relevant = {c for step in traces[query_id] for c in step["relevant"]}
        assert relevant <= found
        for chunk_id, score in zip(hits["chunk_id"], hits["score"], strict=True):
            assert (chunk_id in relevant) == (score >= threshold)


def test_a_cross_encoder_grades_the_offline_loop(tmp_path: Path, tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    loop = {"kind": "agentic", "grade": "cross_encoder", "cross_encoder": str(tiny_cross_encoder)}
    loop |= {"threshold": 0.0, "candidates": 4, "max_rounds": 2, "min_relevant": 2}
    config = _config([loop])
    result = run(
        config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=4, progress=False
    )
    trial = result.trials.iloc[0]
    assert trial["status"] == "ok" and 1 <= trial["agentic.rounds"] <= 2
    model = CrossEncoder(str(tiny_cross_encoder))
    queries = pd.read_parquet(result.path / "queries.parquet").set_index("query_id")["text"]
    for query_id, hits in _top(result, trial["trial_id"]).groupby("query_id"):
        scores = model.predict([(queries[query_id], t) for t in hits["text"]])
        assert hits["score"].to_numpy() == pytest.approx(scores, abs=1e-5)


# ---------------------------------------------------------------- with an LLM


@pytest.fixture()
def server() -> ScriptedLLMServer:
    with scripted_llm_server() as running:
        yield running


def test_the_llm_loop_records_rounds_calls_tokens_and_traces(
    tmp_path: Path, server: ScriptedLLMServer
) -> None:
    llm = {"base_url": server.url, "model": "scripted"}
    loop = {"kind": "agentic", "llm": llm, "grade": "llm", "threshold": 3.0, "decompose": 2}
    loop |= {"candidates": 4, "max_rounds": 2}
    cache = tmp_path / "cache"
    # every round runs: a loop never satisfied
    patient = _config([loop | {"min_relevant": 50}])
    first = run(patient, tmp_path / "a", cache_root=cache, limit_queries=LIMIT, progress=False)
    trial = first.trials.iloc[0]
    assert trial["status"] == "ok" and trial["agentic.rounds"] == 2
    execution = _execution(patient, trial["trial_id"], cache)
    counters = execution.counters()
    calls = counters["agentic.llm_calls"]
    traces = _traces(first, trial["trial_id"])
    for i, (query_id, steps) in enumerate(traces.items()):
        assert {s["round"] for s in steps} == {1, 2} and counters["agentic.rounds"][i] == 2
        distinct = {c for s in steps for c in s["found"]}
        asked = [s["question"] for s in steps if s["round"] == 1]  # each reformulated once
        # one decomposition, one grade per distinct candidate, one rewrite per sub-question
        assert calls[i] == 1 + len(distinct) + len(asked), query_id
        for step in steps:
            assert set(step["relevant"]) <= set(step["found"]) and len(step["found"]) <= 4
    # q001 split at "and" by the server, then each part rewritten to its content words
    assert [s["question"] for s in traces["q001"]] == [
        "Why do workers that take too long on their work get thrown out",
        "then cause another reshuffle",
        "workers that take too long their work get thrown out",
        "then cause another reshuffle",
    ]
    assert server.total == calls.sum() == trial["llm_requests"]  # nothing repeated in a loop
    assert trial["agentic.llm_calls"] == pytest.approx(calls.mean())
    usage = execution.usage()["agentic"]
    spent = [server.answer("/chat/completions", b)[1]["usage"] for b in server.bodies]
    assert usage.prompt_tokens.sum() == sum(u["prompt_tokens"] for u in spent)
    assert usage.completion_tokens.sum() == sum(u["completion_tokens"] for u in spent)
    assert trial["tokens.agentic.prompt"] == pytest.approx(usage.prompt_tokens.mean())
    assert trial["tokens.agentic.completion"] == pytest.approx(usage.completion_tokens.mean())
    _check_relevant_first(first, trial["trial_id"], 3.0)

    # a loop satisfied by one relevant chunk stops after the first round where it has one;
    # its calls are a prefix of the patient loop's, so they all come from the cache
    made = server.total
    both = _config([loop | {"min_relevant": 50}, loop | {"min_relevant": 1}])
    second = run(both, tmp_path / "b", cache_root=cache, limit_queries=LIMIT, progress=False)
    assert server.total == made and (second.trials["llm_requests"] == 0).all()
    eager = second.trials.set_index("param.retriever.min_relevant").loc[1]
    rounds = _execution(both, eager["trial_id"], cache).counters()["agentic.rounds"]
    for i, steps in enumerate(_traces(second, eager["trial_id"]).values()):
        first_round = {c for s in steps if s["round"] == 1 for c in s["relevant"]}
        assert rounds[i] == (1 if first_round else 2)
    assert 1 < eager["agentic.rounds"] < 2  # some stopped early, some did not
    assert eager["agentic.llm_calls"] < trial["agentic.llm_calls"]
    # the patient trial scores as before, and deploys with the run's ranking, from the cache
    patient_again = second.trials.set_index("param.retriever.min_relevant").loc[50]
    assert patient_again["ndcg@10"] == trial["ndcg@10"]
    _deploys(second, eager["trial_id"])
    assert server.total == made


def _check_relevant_first(result: RunResult, trial_id: str, threshold: float) -> None:
    """Chunks judged relevant lead the ranking, by grade; the others follow."""
    traces = _traces(result, trial_id)
    for query_id, hits in _top(result, trial_id).groupby("query_id"):
        relevant = {c for s in traces[query_id] for c in s["relevant"]}
        head = list(hits.sort_values("rank")["chunk_id"])[: len(relevant)]
        assert set(head) <= relevant
        scores = hits.sort_values("rank")["score"].to_numpy()
        assert ((scores >= threshold) == hits.sort_values("rank")["chunk_id"].isin(relevant)).all()


# ---------------------------------------------------------------- the axes crossed


def test_query_retriever_and_postprocess_cross_offline_on_the_demo_set(tmp_path: Path) -> None:
    loop = {"kind": "agentic", "inner": {"kind": "bm25"}, "threshold": 0.2, "candidates": 5}
    loop |= {"max_rounds": 2, "min_relevant": 3}
    config = _config(
        [{"kind": "bm25"}, loop],
        query=[{"kind": "none"}, {"kind": "prf", "fb_docs": 5, "fb_terms": 10}],
        postprocess=[
            {"kind": "none"},
            {"kind": "threshold", "scale": "relative", "value": 0.5},
            {"kind": "window", "sentences": 1},
        ],
    )
    started = time.perf_counter()
    result = run(
        config, tmp_path / "run", cache_root=tmp_path / "c", limit_queries=15, progress=False
    )
    assert time.perf_counter() - started < 60
    trials = result.trials
    assert len(trials) == 12 and set(trials["status"]) == {"ok"}
    key = trials.assign(
        query=trials["param.query.kind"].fillna("none"),
        post=trials["param.postprocess.kind"].fillna("none"),
    ).set_index(["param.retriever.kind", "query", "post"])["trial_id"]
    values = result.per_query.pivot_table(
        index=["metric", "query_id"], columns="trial_id", values="value"
    )
    for retriever in ("bm25", "agentic"):
        # the loop searches with the query transform too: prf changes what it finds
        plain, prf = key[(retriever, "none", "none")], key[(retriever, "prf", "none")]
        assert not np.allclose(values[plain], values[prf]), retriever
        for query in ("none", "prf"):
            base = values[key[(retriever, query, "none")]]
            window = values[key[(retriever, query, "window")]]
            cut = values[key[(retriever, query, "threshold")]]
            # a window holds its hit; a threshold only drops hits
            assert (window.loc["span_recall@5"] >= base.loc["span_recall@5"] - 1e-12).all()
            assert (cut.loc["recall@10"] <= base.loc["recall@10"] + 1e-12).all()
            # windows change no document: the rank metrics stay
            assert window.loc["ndcg@10"].to_numpy() == pytest.approx(base.loc["ndcg@10"])
