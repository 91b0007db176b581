"""The LLM layer over real HTTP: the scripted OpenAI-compatible server, the client (chat,
embeddings, cache, retries, errors, concurrency, credentials) and the API embedder."""

from __future__ import annotations

import json
import socket
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from ragbench.llm.cache import LLMCache
from ragbench.llm.client import LLMClient, LLMConfig, LLMError, Price
from ragbench.registry import components
from ragbench.testing import ScriptedLLMServer, scripted_llm_server

QUESTION = (
    "Context:\nKestrel stores partitions as segment files. Retention deletes closed segments "
    "after seven days. Compaction keeps the last value per key.\n\n"
    "Question: when are closed segments deleted?"
)


@pytest.fixture()
def server() -> ScriptedLLMServer:
    with scripted_llm_server() as running:
        yield running


def _client(server: ScriptedLLMServer, tmp_path: Path | None = None, **options: object):
    config = LLMConfig(base_url=server.url, model="scripted", **options)  # type: ignore[arg-type]
    return LLMClient(config, LLMCache(tmp_path) if tmp_path is not None else None)


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------- the scripted server


def test_the_server_answers_questions_judges_and_schemas(server: ScriptedLLMServer) -> None:
    client = _client(server)
    answer = client.chat(_user(QUESTION))
    assert answer.text == "Retention deletes closed segments after seven days."
    assert answer.prompt_tokens > answer.completion_tokens > 0
    judged = client.chat(
        _user("Query: segment retention\n\n<passage>\nabc\n</passage>\n\nScore (0-10):")
    )
    assert judged.text == "0"
    judged = client.chat(
        _user(
            "Query: segment retention\n\n<passage>\nsegment retention is "
            "seven days\n</passage>\n\nScore (0-10):"
        )
    )
    assert judged.text == "10"

    class Verdicts(BaseModel):
        statements: list[str]
        verdict: int

    prompt = (
        "Please return the output in a JSON format that complies with the following schema as "
        f"specified in JSON Schema:\n{json.dumps(Verdicts.model_json_schema())}Do not use single "
        'quotes\n\ninput: {"response": "Segments are deleted. Keys are kept."}\nOutput: '
    )
    parsed = Verdicts.model_validate_json(client.chat(_user(prompt)).text)
    assert parsed.statements == ["Segments are deleted.", "Keys are kept."]
    assert server.requests["/v1/chat/completions"] == 4


def test_the_server_embeds_deterministically(server: ScriptedLLMServer) -> None:
    client = _client(server)
    a, b = (
        client.embed(["retention of segments", "retention of segments"]),
        client.embed(["something else entirely"]),
    )
    assert a.shape == (2, 64) and np.allclose(np.linalg.norm(a, axis=1), 1.0)
    assert np.array_equal(a[0], a[1]) and float(a[0] @ b[0]) < 0.9


# ---------------------------------------------------------------- the client


def test_a_repeated_call_is_served_from_the_cache(server: ScriptedLLMServer, tmp_path) -> None:
    first = _client(server, tmp_path, temperature=0.3, seed=7)
    reply = first.chat(_user(QUESTION))
    assert server.total == 1 and not reply.cached
    body = server.bodies[0]
    assert body["temperature"] == 0.3 and body["seed"] == 7 and body["model"] == "scripted"
    again = _client(server, tmp_path, temperature=0.3, seed=7).chat(_user(QUESTION))
    assert server.total == 1 and again.cached and again.text == reply.text
    assert again.prompt_tokens == reply.prompt_tokens  # what it cost when it was made
    _client(server, tmp_path, temperature=0.3, seed=8).chat(_user(QUESTION))
    assert server.total == 2  # another seed is another request
    first.embed(["a", "b"])
    first.embed(["a", "b"])
    assert server.requests["/v1/embeddings"] == 1


def test_429_and_5xx_are_retried_with_backoff(server: ScriptedLLMServer) -> None:
    server.fail_next(2, 429)
    assert _client(server, max_retries=3).chat(_user(QUESTION)).text.startswith("Retention")
    assert server.total == 3
    server.fail_next(1, 503)
    _client(server, max_retries=1).chat(_user("Question: again?"))
    assert server.total == 5


def test_failures_name_the_endpoint_and_what_happened(server: ScriptedLLMServer) -> None:
    server.fail_next(3, 500)
    with pytest.raises(LLMError, match=rf"{server.url} \(model scripted\) returned HTTP 500"):
        _client(server, max_retries=2).chat(_user("x"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = LLMConfig(base_url=f"http://127.0.0.1:{port}", model="m", max_retries=0)
    with pytest.raises(LLMError, match=rf"cannot reach http://127.0.0.1:{port}/v1 \(model m\)"):
        LLMClient(config).chat(_user("x"))


def test_many_conversations_keep_their_order(server: ScriptedLLMServer) -> None:
    questions = [f"Context:\nItem {i} is number {i}.\n\nQuestion: item {i}?" for i in range(12)]
    replies = _client(server, max_concurrency=4).chat_many([_user(q) for q in questions])
    assert [r.text for r in replies] == [f"Item {i} is number {i}." for i in range(12)]


def test_usage_counts_tokens_and_cost(server: ScriptedLLMServer, tmp_path) -> None:
    config = LLMConfig(base_url=server.url, model="scripted")
    client = LLMClient(config, LLMCache(tmp_path), price=Price(input=2.0, output=10.0))
    reply = client.chat(_user(QUESTION))
    client.chat(_user(QUESTION))
    usage = client.usage
    assert (usage.requests, usage.cached) == (1, 1)
    assert usage.prompt_tokens == 2 * reply.prompt_tokens
    expected = 2 * (reply.prompt_tokens * 2.0 + reply.completion_tokens * 10.0) / 1e6
    assert usage.cost == pytest.approx(expected)


def test_keys_go_only_where_the_policy_allows(
    server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _client(server).chat(_user("no key"))
    assert "Authorization" not in server.headers[-1] and "authorization" not in server.headers[-1]
    monkeypatch.setenv("RAGBENCH_LAB_API_KEY", "sk-lab")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a proxy that is not there
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    config = LLMConfig(base_url=server.url, model="m", credential="RAGBENCH_LAB_API_KEY")
    LLMClient(config).chat(_user("with key"))  # loopback: straight there, never via a proxy
    assert server.headers[-1].get("Authorization") == "Bearer sk-lab"


# ---------------------------------------------------------------- the API embedder


def test_the_api_embedder_embeds_in_batches(server: ScriptedLLMServer) -> None:
    embedder = components("embedder").build(
        {"kind": "openai", "base_url": server.url, "model": "emb", "batch_size": 3}
    )
    vectors = embedder.embed([f"text number {i}" for i in range(7)], "document")
    assert vectors.shape == (7, 64) and embedder.dimension == 64
    assert server.requests["/v1/embeddings"] == 3
    assert embedder.identity == f"openai|{server.url}|emb"


def test_a_cached_reply_of_another_shape_is_asked_again(
    server: ScriptedLLMServer, tmp_path: Path
) -> None:
    """A row of the LLM cache that parses but lacks a field (damage, or another writer) is a
    miss: the request is made again and its reply replaces the row."""
    client = _client(server, tmp_path)
    reply = client.chat(_user(QUESTION))
    client.embed(["a"])
    cache = LLMCache(tmp_path)
    with sqlite3.connect(cache.path) as db:
        db.execute("UPDATE calls SET reply = '{\"prompt_tokens\": 3}'")
    before = server.total
    again = _client(server, tmp_path).chat(_user(QUESTION))
    assert not again.cached and again.text == reply.text and server.total == before + 1
    assert _client(server, tmp_path).embed(["a"]).shape[0] == 1
    assert server.requests["/v1/embeddings"] == 2
    assert _client(server, tmp_path).chat(_user(QUESTION)).cached
