"""ragbench against a real model: llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct
(``ragbench.llm.local``), over real HTTP, nothing mocked.

At 135M parameters what the model says is near noise, so these tests check the shape of its
replies and how ragbench handles them — structured output, replies that do not parse, tokens,
the cache (a rerun makes no request, counted in the server's own access log) — never their
content. Every test here makes a handful of requests of a few seconds each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from ragbench.cli import main
from ragbench.data.generate import build_method, corpus_documents
from ragbench.data.generate.llm import LLMMethod
from ragbench.evaluate.answers import AnswerSample, evaluate_answers
from ragbench.experiment.runner import run
from ragbench.llm.cache import LLMCache
from ragbench.llm.client import LLMClient, LLMConfig
from ragbench.llm.local import LlamaServer
from ragbench.testing import ScriptedLLMServer

pytestmark = pytest.mark.xdist_group("llama")
slow = pytest.mark.slow

DOCS = {
    "alpha.md": "# Alpha\n\nService alpha stores its segments on the fast local disks. It "
    "replicates every segment to two other brokers. A background task checks each replica "
    "every ten minutes.\n",
    "bravo.md": "# Bravo\n\nService bravo keeps the compaction log for fourteen days before it "
    "removes old files. It also writes a checkpoint to the shared volume every hour.\n",
    "charlie.md": "# Charlie\n\nService charlie accepts client connections on port nine "
    "thousand. Its admin console needs a separate login, and sessions expire after thirty "
    "minutes.\n",
}


def _corpus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text)
    return folder


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------- datasets generate --method llm


@slow
def test_a_real_model_generates_a_set_that_validates(
    llama: LlamaServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, cache = _corpus(tmp_path / "docs"), tmp_path / "cache"
    argv = [
        "datasets", "generate", str(corpus), "--out", str(tmp_path / "set"),
        "--method", "llm", "--base-url", llama.url, "--model", llama.model,
        "--llm-cache", str(cache), "--n", "3", "--min-words", "5", "--dedup", "1",
        "--min-match", "0",  # every excerpt is placed: the set is written whatever the model says
    ]  # fmt: skip
    answered, received = llama.requests(200), llama.requests()
    assert main(argv) == 0
    assert "LLM requests: 3 made, 0 cached" in capsys.readouterr().out.splitlines()
    # structured output: a form the server refuses costs one request per client, at most
    assert llama.requests(200) - answered == 3 and llama.requests() - received <= 4
    assert main(["datasets", "validate", str(tmp_path / "set")]) == 0
    queries = _jsonl(tmp_path / "set" / "queries.jsonl")
    assert queries and all(q["type"] == "llm" and q["text"] for q in queries)
    for query in queries:  # the bounds of the requested schema held
        assert len(query["text"]) <= 300 and len(query.get("answer") or "") <= 300
        assert all(len(m.get("excerpt", "")) <= 600 for m in query["metadata"]["matches"])
    near = sum(min(m["score"] for m in q["metadata"]["matches"]) >= 90 for q in queries)

    # the same replies at the default --min-match: all from the cache, each one accounted for
    method = build_method(
        "llm", base_url=llama.url, model=llama.model, llm_cache=str(cache), min_words=5, dedup=1.0
    )
    documents, _ = corpus_documents(corpus)
    again = method.run(documents, 3, 0)
    assert (again.requests, again.cached) == (0, 3) and llama.requests() - received <= 4
    assert "invalid reply" not in again.dropped  # every structured reply parsed
    assert len(again.drafts) == near
    assert again.dropped == ({"unlocatable excerpt": 3 - near} if near < 3 else {})


@slow
def test_replies_cut_short_are_dropped_as_invalid(llama: LlamaServer, tmp_path: Path) -> None:
    config = LLMConfig(base_url=llama.url, model=llama.model, max_tokens=8)  # < one reply
    method = LLMMethod(config, cache=tmp_path / "cache", min_words=5, dedup=1.0)
    documents, _ = corpus_documents(_corpus(tmp_path / "docs"))
    generation = method.run(documents, 2, 0)
    assert generation.drafts == [] and generation.dropped == {"invalid reply": 2}
    assert (generation.requests, generation.cached) == (2, 0)


class RawNewlines(ScriptedLLMServer):
    """The scripted server writing a raw newline into the first excerpt of each JSON reply, as
    llama.cpp's JSON-schema grammar lets a model do (strict JSON forbids it)."""

    def answer(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = super().answer(path, body)
        if path.endswith("/chat/completions"):
            for choice in payload["choices"]:
                text = choice["message"]["content"]
                first = json.dumps(json.loads(text)["excerpts"][0])
                choice["message"]["content"] = text.replace(first, first.replace(" ", "\n", 1))
        return status, payload


def test_a_reply_with_raw_newlines_in_its_strings_is_read(tmp_path: Path) -> None:
    documents, _ = corpus_documents(_corpus(tmp_path / "docs"))
    with RawNewlines() as server:
        config = LLMConfig(base_url=server.url, model="scripted")
        method = LLMMethod(config, cache=tmp_path / "cache", min_words=5, dedup=1.0)
        generation = method.run(documents, 2, 0)
    assert len(generation.drafts) == 2 and generation.dropped == {}
    assert [d.details["matches"][0]["how"] for d in generation.drafts] == ["whitespace"] * 2


# ---------------------------------------------------------------- structured output


class Refusing(ScriptedLLMServer):
    """The scripted server answering any ``response_format`` with HTTP 400, as an endpoint
    without structured output does."""

    def answer(self, path: str, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        if "response_format" in body:
            message = f"response_format {body['response_format']['type']!r} is not supported"
            return 400, {"error": {"message": message, "type": "invalid_request_error"}}
        return super().answer(path, body)


def test_an_endpoint_refusing_structured_output_gets_the_prompt_alone(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    prompt = (
        "Please return the output in a JSON format that complies with the following schema as "
        f"specified in JSON Schema:\n{json.dumps(schema)}Do not use single quotes\n\n"
        'input: {"text": "Segments are kept for seven days."}\nOutput: '
    )
    with Refusing() as server:
        client = LLMClient(LLMConfig(base_url=server.url, model="m"), LLMCache(tmp_path))
        first = client.chat([{"role": "user", "content": prompt}], schema)
        assert server.total == 3  # json_schema refused, json_object refused, then plain
        second = client.chat([{"role": "user", "content": prompt + " "}], schema)
        assert server.total == 4  # the client remembers: no second try of either form
        client.chat([{"role": "user", "content": prompt}], schema)
        assert server.total == 4  # cached by the schema, whatever form it went in
    assert (
        json.loads(first.text)
        == json.loads(second.text)
        == {"a": "Segments are kept for seven days."}
    )
    assert client.usage.requests == 2 and client.usage.cached == 1


# ---------------------------------------------------------------- generator axis and judge


def _labeled_set(folder: Path) -> Path:
    _corpus(folder / "corpus")
    queries = [
        {
            "id": "q1",
            "text": "How long does bravo keep the compaction log?",
            "answer": "Fourteen days.",
            "evidence": [{"doc_id": "bravo.md", "text": "keeps the compaction log for fourteen"}],
        },
        {
            "id": "q2",
            "text": "Which port does charlie accept client connections on?",
            "answer": "Port nine thousand.",
            "evidence": [{"doc_id": "charlie.md", "text": "on port nine\nthousand"}],
        },
    ]
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return folder


JUDGED = "ragas:LLMContextPrecisionWithoutReference"  # one judge request per context


@slow
def test_an_llm_generator_and_judge_in_a_sweep_record_tokens_and_rerun_for_free(
    llama: LlamaServer, tmp_path: Path
) -> None:
    endpoint = {"base_url": llama.url, "model": llama.model, "max_concurrency": 1}
    config = {
        "name": "llama",
        "dataset": {"path": str(_labeled_set(tmp_path / "set"))},
        "evaluation": {
            "metrics": ["ndcg@10", "token_f1", "answer_supported", JUDGED],
            "llm": {**endpoint, "max_tokens": 256},
        },
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 500, "overlap": 0}],
            "retriever": [{"kind": "bm25"}],
            "generator": [
                {"kind": "llm", **endpoint, "max_tokens": 48, "context": {"top_k": 1}},
            ],
        },
    }
    received = llama.requests()
    first = run(config, tmp_path / "a", cache_root=tmp_path / "c", progress=False)
    trial = first.trials.iloc[0]
    assert trial["status"] == "ok"
    made = llama.requests() - received
    assert 4 <= made <= 5  # two answers, two judgements (and one refused form, at most)
    assert trial["llm_requests"] == 4
    answers = pd.read_parquet(first.path / "answers.parquet")
    assert len(answers) == 2
    assert (answers["prompt_tokens"] > 0).all() and answers["completion_tokens"].between(
        1, 48
    ).all()
    assert np.isclose(trial["tokens.generate.prompt"], answers["prompt_tokens"].mean())
    assert np.isclose(trial["tokens.generate.completion"], answers["completion_tokens"].mean())
    per_query = first.per_query
    judged = per_query[per_query["metric"] == JUDGED]["value"]
    assert len(judged) == 2 and judged.between(0, 1).all()  # parsed (no NaN) and in range
    supported = per_query[per_query["metric"] == "answer_supported"]["value"]
    assert len(supported) == 2 and supported.between(0, 1).all()

    again = run(config, tmp_path / "b", cache_root=tmp_path / "c", progress=False)
    assert llama.requests() - received == made and again.trials.iloc[0]["llm_requests"] == 0
    pd.testing.assert_frame_equal(
        again.per_query.sort_values(["query_id", "metric"]).reset_index(drop=True),
        per_query.sort_values(["query_id", "metric"]).reset_index(drop=True),
    )


@slow
def test_a_judge_cut_short_scores_nan_and_the_rest_goes_on(
    llama: LlamaServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sample = AnswerSample(
        "q1",
        "How long does bravo keep the compaction log?",
        "For fourteen days.",
        [DOCS["bravo.md"]],
        ["bravo.md"],
        "Fourteen days.",
    )
    config = LLMConfig(base_url=llama.url, model=llama.model, max_tokens=5)  # < one verdict
    client = LLMClient(config, LLMCache(tmp_path))
    with caplog.at_level(logging.WARNING, logger="ragbench.evaluate.ragas"):
        scores = evaluate_answers([sample], [JUDGED, "token_f1"], llm=client)
    assert np.isnan(scores[JUDGED][0]) and 0 < scores["token_f1"][0] <= 1
    assert f"{JUDGED}, query q1" in caplog.text and "scored NaN" in caplog.text
    assert client.usage.requests >= 2  # the reply, then ragas' repair attempt
    received = llama.requests()
    again = LLMClient(config, LLMCache(tmp_path))
    assert np.isnan(evaluate_answers([sample], [JUDGED], llm=again)[JUDGED][0])
    assert llama.requests() == received and again.usage.requests == 0
