"""The generation half in sweeps: generators as a sweep axis, answers in the run directory,
answer metrics and ragas metrics per query, tokens and cost — offline (extractive) and against
the scripted OpenAI-compatible server over real HTTP, where a rerun makes no request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ragbench.errors import ConfigError
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import run
from ragbench.pipeline import RAGPipeline
from ragbench.retrieve.generate import ContextOptions, extract_answer, pack_context
from ragbench.testing import ScriptedLLMServer, scripted_llm_server
from ragbench.types import Chunk
from tests.paths import DEMO, require

HASHING = {"kind": "hashing", "dim": 256}
LIMIT = 12


def _config(generators: list[dict[str, Any]], metrics: list[str], **extra: Any) -> dict:
    return {
        "name": "gen",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": metrics, "depth": 10, **extra.pop("evaluation", {})},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 500, "overlap": 0}],
            "embedder": [HASHING],
            "retriever": [{"kind": "bm25"}, {"kind": "hybrid"}],
            "generator": generators,
            **extra.pop("sweep", {}),
        },
        **extra,
    }


@pytest.fixture()
def server() -> ScriptedLLMServer:
    with scripted_llm_server() as running:
        yield running


def test_extractive_answers_are_the_best_matching_sentences() -> None:
    chunks = [
        Chunk("a:0", "a", 0, 0, 60, "Kestrel is a broker. Retention deletes closed segments.", {}),
        Chunk("b:0", "b", 0, 0, 40, "Compaction keeps the last value per key.", {}),
    ]
    assert extract_answer("when are closed segments deleted?", chunks) == (
        "Retention deletes closed segments."
    )
    two = extract_answer("which value per key is kept by retention?", chunks, sentences=2)
    assert two == "Retention deletes closed segments. Compaction keeps the last value per key."
    text, used = pack_context(chunks, ContextOptions(budget_tokens=40))
    assert used == ["a:0"] and "<retrieved_context" in text and "| Kestrel" in text
    plain, used = pack_context(chunks, ContextOptions(budget_tokens=40, framing="none"))
    assert used == ["a:0", "b:0"] and "<" not in plain


def test_an_offline_sweep_writes_answers_and_scores_them(tmp_path: Path) -> None:
    generators = [
        {"kind": "extractive", "context": {"budget_tokens": [150, 1500]}},
    ]
    metrics = ["ndcg@10", "token_f1", "rouge_l", "exact_match", "answer_supported"]
    result = run(
        _config(generators, metrics),
        tmp_path / "run",
        cache_root=tmp_path / "c",
        limit_queries=LIMIT,
        progress=False,
    )
    trials = result.trials
    assert len(trials) == 4 and set(trials["status"]) == {"ok"}
    assert trials["label"].str.contains("gen:extractive").all()
    answers = pd.read_parquet(result.path / "answers.parquet")
    assert len(answers) == 4 * LIMIT and answers["answer"].str.len().gt(0).all()
    used = answers.assign(n=answers["chunk_ids"].map(lambda ids: len(json.loads(ids))))
    small, large = (
        used.merge(trials[["trial_id", "param.generator.context.budget_tokens"]])
        .groupby("param.generator.context.budget_tokens")["n"]
        .mean()
    )
    assert small < large  # a bigger budget packs more chunks into the context
    per_query = result.per_query
    f1 = per_query[per_query["metric"] == "token_f1"]["value"]
    assert len(f1) == 4 * LIMIT and 0 < f1.mean() < 1
    assert (per_query[per_query["metric"] == "answer_supported"]["value"] == 1.0).all()
    assert "latency.generate.p50_ms" in trials.columns


def test_answer_metrics_need_a_generator_on_every_trial_and_llm_metrics_a_judge() -> None:
    with pytest.raises(ConfigError, match="token_f1 scores answers, and 2 trial"):
        load_config(_config([{"kind": "none"}], ["ndcg@10", "token_f1"]))
    with pytest.raises(ConfigError, match="ragas:Faithfulness asks an LLM judge"):
        load_config(_config([{"kind": "extractive"}], ["ragas:Faithfulness"]))


def test_an_llm_generator_sweep_counts_tokens_and_cost_and_reruns_for_free(
    tmp_path: Path, server: ScriptedLLMServer
) -> None:
    generator = {"kind": "llm", "base_url": server.url, "model": "scripted", "max_concurrency": 2}
    config = _config(
        [generator],
        ["ndcg@10", "token_f1", "ragas:Faithfulness", "ragas:IDBasedContextRecall"],
        evaluation={"llm": {"base_url": server.url, "model": "judge"}},
        prices={"scripted": {"input": 1.0, "output": 4.0}},
    )
    first = run(
        config, tmp_path / "a", cache_root=tmp_path / "c", limit_queries=LIMIT, progress=False
    )
    trials = first.trials.set_index("trial_id")
    assert set(trials["status"]) == {"ok"}
    made = server.total
    assert made > 0 and trials["llm_requests"].sum() == made
    answers = pd.read_parquet(first.path / "answers.parquet")
    assert (answers["prompt_tokens"] > answers["completion_tokens"]).all()
    cost = (answers["prompt_tokens"] * 1.0 + answers["completion_tokens"] * 4.0) / 1e6
    assert np.allclose(answers["cost"], cost)
    by_trial = answers.groupby("trial_id")["cost"].mean()
    assert np.allclose(trials.loc[by_trial.index, "cost.generate"], by_trial)
    assert np.allclose(
        trials["tokens.generate.prompt"],
        answers.groupby("trial_id")["prompt_tokens"].mean()[trials.index],
    )
    per_query = first.per_query
    for metric in ("ragas:Faithfulness", "ragas:IDBasedContextRecall", "token_f1"):
        assert len(per_query[per_query["metric"] == metric]) == 2 * LIMIT
    # a deployed trial answers as the sweep did
    trial_id = str(trials.index[0])
    pipeline = RAGPipeline.from_trial(first.path, trial_id)
    mine = answers[answers["trial_id"] == trial_id]
    questions = pd.read_parquet(first.path / "queries.parquet").set_index("query_id")["text"]
    assert pipeline.search(list(questions[mine["query_id"]]), 5).answers == list(mine["answer"])
    assert pipeline.answer(questions[mine["query_id"].iloc[0]]) == mine["answer"].iloc[0]
    # the same sweep again, in a new run directory: every call comes from the cache
    again = run(
        config, tmp_path / "b", cache_root=tmp_path / "c", limit_queries=LIMIT, progress=False
    )
    assert server.total == made and (again.trials["llm_requests"] == 0).all()
    pd.testing.assert_frame_equal(
        again.per_query.sort_values(["trial_id", "query_id", "metric"]).reset_index(drop=True),
        per_query.sort_values(["trial_id", "query_id", "metric"]).reset_index(drop=True),
    )


def test_an_llm_reranker_and_an_api_embedder_in_a_sweep(
    tmp_path: Path, server: ScriptedLLMServer
) -> None:
    config = _config(
        [{"kind": "none"}],
        ["ndcg@10"],
        sweep={
            "embedder": [{"kind": "openai", "base_url": server.url, "model": "emb"}],
            "retriever": [{"kind": "dense"}],
            "reranker": [
                {"kind": "llm", "base_url": server.url, "model": "judge", "candidates": 5}
            ],
        },
    )
    first = run(config, tmp_path / "a", cache_root=tmp_path / "c", limit_queries=6, progress=False)
    trial = first.trials.iloc[0]
    assert trial["status"] == "ok" and trial["tokens.rerank.prompt"] > 0
    assert server.requests["/v1/embeddings"] > 0 and server.requests["/v1/chat/completions"] > 0
    made = server.total
    run(config, tmp_path / "b", cache_root=tmp_path / "c", limit_queries=6, progress=False)
    assert server.total == made


def test_metrics_needing_reference_answers_are_skipped_with_a_note(tmp_path: Path) -> None:
    corpus = tmp_path / "set" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "a.md").write_text("Retention deletes closed segments after seven days.\n")
    (corpus / "b.md").write_text("Compaction keeps the last value for every key.\n")
    queries = [
        {
            "id": "q1",
            "text": "when are segments deleted",
            "evidence": [{"doc_id": "a.md", "text": "Retention deletes closed segments"}],
        },
        {
            "id": "q2",
            "text": "what does compaction keep",
            "evidence": [{"doc_id": "b.md", "text": "keeps the last value for every key"}],
        },
    ]
    (tmp_path / "set" / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    config = _config([{"kind": "extractive"}], ["ndcg@10", "token_f1", "answer_supported"])
    config["dataset"] = {"path": str(tmp_path / "set")}
    result = run(config, tmp_path / "run", cache_root=tmp_path / "c", progress=False)
    assert result.manifest["skipped_metrics"] == {
        "token_f1": "dataset 'set' has no reference answers"
    }
    assert result.metrics == ["ndcg@10", "answer_supported"]
    assert "token_f1" not in set(result.per_query["metric"])
