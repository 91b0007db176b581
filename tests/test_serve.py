"""`ragbench serve` and explained search: real HTTP on 127.0.0.1 against a collection made like
`ragbench ingest` makes one, `search --interactive` and `--retriever`, the OpenAPI document
FastAPI generates (validated), the limits in one place and the metrics. Malformed requests,
slow clients and the load test are in tests/test_adversarial_serve.py."""

from __future__ import annotations

import io
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import numpy as np
import pytest
from openapi_spec_validator import validate as validate_openapi

from ragbench.api import SearchServer
from ragbench.cli import main
from ragbench.errors import ConfigError
from ragbench.index.embedders import HashingConfig, HashingEmbedder
from ragbench.pipeline import RAGPipeline
from ragbench.service import LIMITS, ServeLimits, check_host, search
from ragbench.types import Document

EMBEDDER = {"kind": "hashing", "dim": 256}
CONFIG = {
    "chunker": {"kind": "recursive", "size": 200, "overlap": 0},
    "embedder": EMBEDDER,
    "retriever": {"kind": "hybrid", "store": {"kind": "exact"}, "depth": 20},
}
DOCS = [
    Document(
        "ops/keys.md",
        "Rotate the signing keys every ninety days with kestrelctl keys rotate.",
        {"team": "ops"},
    ),
    Document(
        "ops/retention.md",
        "Retention deletes closed segments after retention.ms has passed.",
        {"team": "ops"},
    ),
    Document(
        "sec/acl.md", "ACLs grant principals read or write access to topics.", {"team": "sec"}
    ),
    Document("ref/ports.md", "Port 9743 serves the admin API of every broker.", {"team": "ref"}),
]


def _collection(db: Path, name: str = "docs", config: dict[str, Any] = CONFIG) -> Path:
    pipeline = RAGPipeline.from_config(config)
    pipeline.index(DOCS)
    pipeline.save(db / name)
    return db / name


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchServer]:
    """A server over the collection, listening on a free loopback port in a thread."""
    target = _collection(tmp_path_factory.mktemp("db"))
    running = SearchServer(RAGPipeline.open(target), "docs", "127.0.0.1", 0)
    with running.background():
        yield running


def _post(server: SearchServer, body: Any, raw: bytes | None = None) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(f"{server.url}/search", content=content, timeout=10, trust_env=False)


def _get(server: SearchServer, path: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", timeout=10, trust_env=False)


def _document(server: SearchServer) -> dict[str, Any]:
    """The OpenAPI document the server serves."""
    return _get(server, "/openapi.json").json()


def _validate(document: dict[str, Any], instance: Any, name: str) -> None:
    """Check ``instance`` against the schema ``name`` of the OpenAPI ``document`` (3.1: its
    schemas are JSON Schema 2020-12)."""
    schema = {"$ref": f"#/components/schemas/{name}", **document}
    jsonschema.Draft202012Validator(schema).validate(instance)


def _request_schema(document: dict[str, Any]) -> dict[str, Any]:
    body = document["paths"]["/search"]["post"]["requestBody"]
    assert body["required"] is True
    return body["content"]["application/json"]["schema"]


def test_search_over_http_says_which_retriever_found_each_hit(server: SearchServer) -> None:
    reply = _post(server, {"query": "how do I rotate the signing keys", "k": 3})
    assert reply.status_code == 200, reply.text
    found = reply.json()
    _validate(_document(server), found, "SearchResult")
    assert found["retriever"] == "hybrid" and found["score_scale"].startswith("RRF")
    assert set(found["found_by_scales"]) == {"bm25", "dense"}
    top = found["hits"][0]
    assert (top["doc_id"], top["chunk_id"]) == ("ops/keys.md", "ops/keys.md:chunk-0")
    assert top["text"].startswith("Rotate the signing keys")
    assert top["found_by"]["bm25"]["rank"] == 1 and top["found_by"]["dense"]["rank"] == 1
    assert top["score"] == pytest.approx(2 / 61)  # RRF k=60, first in both lists
    assert [h["rank"] for h in found["hits"]] == [1, 2, 3]
    for hit in found["hits"]:  # every hit came from at least one list
        assert any(where is not None for where in hit["found_by"].values())


def test_dense_scores_are_cosines_and_bm25_scores_bm25(server: SearchServer) -> None:
    query = "which port serves the admin API"
    dense = _post(server, {"query": query, "k": 4, "retriever": "dense"}).json()
    assert dense["retriever"] == "dense" and "cosine" in dense["score_scale"]
    embedder = HashingEmbedder(HashingConfig(dim=256))
    q = embedder.embed([query], "query")[0]
    for hit in dense["hits"]:
        d = embedder.embed([hit["text"]], "document")[0]
        cosine = float(q @ d / (np.linalg.norm(q) * np.linalg.norm(d)))
        assert hit["score"] == pytest.approx(cosine, abs=1e-5)
        assert set(hit["found_by"]) == {"dense"}
    bm25 = _post(server, {"query": query, "k": 4, "retriever": "bm25"}).json()
    assert "BM25" in bm25["score_scale"] and bm25["hits"][0]["doc_id"] == "ref/ports.md"
    assert [h["score"] for h in bm25["hits"]] == [
        h["found_by"]["bm25"]["score"] for h in bm25["hits"]
    ]


def test_a_filter_no_chunk_can_match_is_a_400_naming_it_not_an_empty_answer(
    server: SearchServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for wrong, said in (
        ({"tem": "ops"}, "filter: no chunk has the metadata key 'tem' (keys: "),
        ({"team": ["ops"]}, "filter: key 'team': expected one value to match exactly"),
    ):
        found = _post(server, {"query": "keys retention", "filter": wrong})
        assert found.status_code == 400 and found.json()["error"].startswith(said), found.text
    nothing = _post(server, {"query": "keys retention", "filter": {"team": "nobody"}})
    assert nothing.status_code == 200 and nothing.json()["hits"] == []  # a key some chunk has
    _collection(tmp_path)
    search = ["search", "keys", "--collection", "docs", "--db", str(tmp_path), "--filter"]
    assert main([*search, '{"tem": "ops"}']) == 2
    err = capsys.readouterr().err
    assert "filter: no chunk has the metadata key 'tem'" in err and len(err.splitlines()) == 2


def test_filter_and_health(server: SearchServer) -> None:
    found = _post(
        server, {"query": "keys retention access port", "k": 10, "filter": {"team": "ops"}}
    )
    assert {h["doc_id"] for h in found.json()["hits"]} == {"ops/keys.md", "ops/retention.md"}
    health = _get(server, "/health")
    assert health.status_code == 200
    _validate(_document(server), health.json(), "Health")
    assert health.json()["chunks"] == 4 and health.json()["retrievers"] == [
        "hybrid",
        "bm25",
        "dense",
    ]


def test_the_openapi_document_is_generated_from_the_models_and_valid(
    server: SearchServer,
) -> None:
    document = _document(server)
    validate_openapi(document)  # OpenAPI 3.1: structure, and every $ref resolves
    assert document["openapi"].startswith("3.1") and document["info"]["title"] == "ragbench search"
    schemas = document["components"]["schemas"]
    assert {"SearchResult", "SearchHit", "Found", "Health", "Metrics", "Latency", "Error"} <= set(
        schemas
    )
    served = {("/search", "post"), ("/health", "get"), ("/metrics", "get")}
    assert {(path, method) for path, ops in document["paths"].items() for method in ops} == served
    request = _request_schema(document)
    assert request["title"] == "SearchRequest" and request["additionalProperties"] is False
    assert request["properties"]["retriever"]["anyOf"][0]["enum"] == ["hybrid", "bm25", "dense"]
    checker = jsonschema.Draft202012Validator(request)
    for body in ({"query": "keys"}, {"query": "x", "k": 3, "retriever": "bm25", "filter": None}):
        assert checker.is_valid(body) and _post(server, body).status_code == 200
    for body in ({"k": 3}, {"query": "x", "k": 0}, {"query": "x", "retriever": "sparse"}):
        assert not checker.is_valid(body) and _post(server, body).status_code == 400
    for path, method in served:  # each documented operation answers as documented
        reply = _post(server, {"query": "keys"}) if method == "post" else _get(server, path)
        assert str(reply.status_code) in document["paths"][path][method]["responses"]
        _validate(document, reply.json(), {"/search": "SearchResult"}.get(path, path[1:].title()))
    for status in ("400", "408", "413", "500", "503"):
        response = document["paths"]["/search"]["post"]["responses"][status]
        assert response["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


def test_the_limits_are_set_in_one_place(tmp_path: Path) -> None:
    """One ``ServeLimits`` sets what the requests are checked against and what the OpenAPI
    document says."""
    limits = ServeLimits(max_k=5, max_query_chars=20, max_body_bytes=300)
    assert LIMITS.max_k == 1000 and LIMITS.max_query_chars == 10_000  # the defaults
    running = SearchServer(RAGPipeline.open(_collection(tmp_path)), "docs", port=0, limits=limits)
    with running.background():
        request = _request_schema(_document(running))["properties"]
        assert request["k"]["maximum"] == 5 and request["query"]["maxLength"] == 20
        assert _post(running, {"query": "keys", "k": 5}).status_code == 200
        assert _post(running, {"query": "keys", "k": 6}).json()["field"] == "k"
        too_long = _post(running, {"query": "k" * 21}).json()
        assert too_long["field"] == "query" and "20" in too_long["error"]
        large = _post(running, {"query": "keys", "filter": {"x": "y" * 300}})
        assert large.status_code == 413 and large.json()["error"] == "body: larger than 300 bytes"
    with pytest.raises(ValueError, match="max_k"):
        ServeLimits(max_k=0)
    with pytest.raises(ValueError, match="max_query"):
        ServeLimits(max_query=5)  # type: ignore[call-arg]


def test_metrics_count_requests_by_route_and_status(tmp_path: Path) -> None:
    running = SearchServer(RAGPipeline.open(_collection(tmp_path)), "docs", port=0)
    with running.background():
        for _ in range(20):
            assert _post(running, {"query": "rotate the signing keys"}).status_code == 200
        assert _post(running, {"query": "x", "k": 0}).status_code == 400
        assert _get(running, "/health").status_code == 200
        assert _get(running, "/nope").status_code == 404
        assert _get(running, "/search").status_code == 405
        metrics = _get(running, "/metrics").json()
    _validate(running.app.openapi(), metrics, "Metrics")
    assert metrics["requests"] == {
        "/search": {"200": 20, "400": 1, "405": 1},
        "/health": {"200": 1},
        "other": {"404": 1},
    }
    latency = metrics["search"]
    assert latency["count"] == 20 and latency["window"] == LIMITS.latency_window
    assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] < 10_000


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (b'{"k": 3}', "query"),
        (b'{"query": "  "}', "query"),
        (b'{"query": "x", "k": 0}', "k"),
        (b'{"query": "x", "k": "5"}', "k"),
        (b'{"query": "x", "k": true}', "k"),
        (b'{"query": "x", "k": 1001}', "k"),
        (b'{"query": "x", "filter": ["team"]}', "filter"),
        (b'{"query": "x", "retriever": "sparse"}', "retriever"),
        (b'{"query": "x", "top_k": 5}', "top_k"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field(
    server: SearchServer, body: bytes, field: str
) -> None:
    reply = _post(server, None, raw=body)
    assert reply.status_code == 400
    assert "\n" not in reply.text.strip()
    error = reply.json()
    _validate(_document(server), error, "Error")
    assert error["field"] == field and error["error"].startswith(f"{field}: ")


def test_wrong_paths_and_methods(server: SearchServer) -> None:
    assert _get(server, "/nope").status_code == 404
    wrong = _get(server, "/search")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert httpx.post(f"{server.url}/health", content=b"{}", trust_env=False).status_code == 405


def test_the_model_loads_before_the_server_listens(tmp_path: Path) -> None:
    pipeline = RAGPipeline.open(_collection(tmp_path))
    assert pipeline.embedder is not None and pipeline.embedder.stats.texts == 0
    running = SearchServer(pipeline, "docs", "127.0.0.1", 0)
    embedder = pipeline.embedder
    warmed = embedder.stats.texts
    assert warmed > 0  # the warm-up query went through the model at start
    with running.background():
        for _ in range(3):
            assert _post(running, {"query": "signing keys", "k": 2}).status_code == 200
    assert pipeline.embedder is embedder and embedder.stats.texts == warmed + 3


def test_requests_on_a_kept_alive_connection_do_not_stall(server: SearchServer) -> None:
    """A response's head and body leave together: no 40 ms delayed-ACK wait per request."""
    took = []
    with httpx.Client(base_url=server.url, trust_env=False, timeout=10) as client:
        for _ in range(20):
            started = time.perf_counter()
            assert client.post("/search", json={"query": "signing keys", "k": 3}).is_success
            took.append(time.perf_counter() - started)
    assert float(np.median(took)) < 0.035, took


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_loopback_hosts_are_allowed(host: str) -> None:
    check_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.org", "::"])
def test_a_remote_host_needs_allow_remote(host: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(ConfigError, match="--allow-remote"):
        check_host(host)
    check_host(host, allow_remote=True)
    _collection(tmp_path)
    assert main(["serve", "--collection", "docs", "--db", str(tmp_path), "--host", host]) == 2
    assert "not a loopback address" in capsys.readouterr().err


def test_ragbench_serve_answers_over_http_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    _collection(tmp_path)
    command = [sys.executable, "-m", "ragbench.cli", "serve", "--collection", "docs"]
    process = subprocess.Popen(
        [*command, "--db", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "serving collection 'docs'" in line, process.stderr.read() if process.stderr else ""
        match = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert match is not None, line
        base = match.group()
        assert httpx.get(f"{base}/health", trust_env=False).json()["collection"] == "docs"
        reply = httpx.post(f"{base}/search", json={"query": "admin API port"}, trust_env=False)
        assert reply.json()["hits"][0]["doc_id"] == "ref/ports.md"
        # curl -d sends a form's Content-Type: the body is read as JSON all the same
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        reply = httpx.post(
            f"{base}/search", content=b'{"query": "admin API port"}', headers=form, trust_env=False
        )
        assert reply.status_code == 200 and reply.headers["server"].startswith("ragbench/")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0 and "stopped" in err and "Traceback" not in err, err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_serve_on_a_port_in_use_is_one_line(tmp_path: Path, capsys) -> None:
    _collection(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        where = ["--collection", "docs", "--db", str(tmp_path), "--port", str(port)]
        assert main(["serve", *where]) == 2
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_ragbench_help_loads_no_web_framework() -> None:
    script = (
        "import sys\n"
        "from ragbench.cli import parser\n"
        "parser().format_help()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('fastapi', 'uvicorn', 'starlette') or m == 'ragbench.api'))\n"
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def test_a_failed_search_is_a_500_of_one_line_and_a_traceback_in_the_log(
    server: SearchServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:  # an index that fails at query time
        raise OSError("index file vanished")

    monkeypatch.setattr(server.pipeline, "search", broken)
    reply = _post(server, {"query": "signing keys"})
    assert reply.status_code == 500
    assert reply.json() == {"error": "search failed: OSError: index file vanished"}
    assert any(r.exc_info and r.getMessage() == "search failed" for r in caplog.records)
    monkeypatch.undo()
    assert _post(server, {"query": "signing keys"}).status_code == 200  # it goes on serving


# ---------------------------------------------------------------- the CLI and the pipeline


def test_retriever_override_runs_the_hybrids_own_indexes() -> None:
    hybrid = RAGPipeline.from_config(CONFIG)
    hybrid.index(DOCS)
    alone = {
        "bm25": RAGPipeline.from_config({**CONFIG, "retriever": {"kind": "bm25"}}),
        "dense": RAGPipeline.from_config(
            {**CONFIG, "retriever": {"kind": "dense", "store": {"kind": "exact"}}}
        ),
    }
    queries = ["rotate keys", "admin API port", "who may read topics"]
    for kind, pipeline in alone.items():
        pipeline.index(DOCS)
        expected = pipeline.search(queries, 3).ranking
        got = hybrid.search(queries, 3, retriever=kind)
        assert got.ranking.ids.tolist() == expected.ids.tolist()
        np.testing.assert_allclose(got.ranking.scores, expected.scores)
        assert set(got.found) == {kind}
    with pytest.raises(ConfigError, match="available: bm25"):
        alone["bm25"].search(queries, 3, retriever="dense")


def test_search_result_names_its_scales() -> None:
    pipeline = RAGPipeline.from_config(CONFIG)
    pipeline.index(DOCS)
    found = search(pipeline, "signing keys", k=2)
    assert found.scale.startswith("RRF") and "at most 0.0328" in found.scale
    assert found.scales == {
        "bm25": "BM25 score (0 and up, unbounded: compare within one query)",
        "dense": "cosine similarity (-1 to 1)",
    }
    assert found.took_ms > 0 and found.hits[0].found_by["bm25"] is not None


def test_interactive_search_reads_queries_until_quit(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    _collection(tmp_path)
    args = ["search", "--interactive", "--collection", "docs", "--db", str(tmp_path), "-k", "1"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("admin API port\nsigning keys\n:q\nACLs\n"))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ref/ports.md:chunk-0" in out and "ops/keys.md:chunk-0" in out
    assert "sec/acl.md" not in out  # read after :q
    assert out.count("score = RRF") == 2 and "bm25 #1" in out and "dense #" in out
    monkeypatch.setattr(sys, "stdin", io.StringIO("signing keys\n\nACLs\n"))
    assert main([*args, "--retriever", "bm25", "--format", "json"]) == 0
    [rows] = [json.loads(capsys.readouterr().out)]  # one query: stops at the empty line
    assert rows[0]["doc_id"] == "ops/keys.md" and set(rows[0]["found_by"]) == {"bm25"}
    assert rows[0]["score_scale"].startswith("BM25")
    monkeypatch.setattr(sys, "stdin", io.StringIO("signing keys"))  # EOF without a newline
    assert main(args) == 0 and "ops/keys.md:chunk-0" in capsys.readouterr().out


def test_search_flags_are_checked(tmp_path: Path, capsys) -> None:
    _collection(tmp_path, "lexical", {**CONFIG, "retriever": {"kind": "bm25"}})
    where = ["--collection", "lexical", "--db", str(tmp_path)]
    assert main(["search", "keys", *where, "--retriever", "dense"]) == 2
    assert "--retriever dense: collection 'lexical' serves bm25" in capsys.readouterr().err
    assert main(["search", *where]) == 2
    assert "give a query, or --interactive" in capsys.readouterr().err
    assert (
        main(["search", "topics keys", *where, "--filter", '{"team": "sec"}', "--format", "json"])
        == 0
    )
    assert {r["doc_id"] for r in json.loads(capsys.readouterr().out)} == {"sec/acl.md"}
    # a byte that is not UTF-8 on the command line arrives as a lone surrogate: refused as the
    # API refuses it
    assert main(["search", "keys \udc80", *where]) == 2
    error = capsys.readouterr().err
    assert "query: not valid Unicode: a lone surrogate '\\udc80' at character 5" in error


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_every_method_gets_a_json_answer(server: SearchServer, method: str) -> None:
    reply = httpx.request(method, f"{server.url}/search", content=b"{}", trust_env=False)
    assert reply.status_code == 405 and reply.headers["allow"] == "POST"
    assert reply.json() == {"error": f"{method} /search: use POST"}
    elsewhere = httpx.request(method, f"{server.url}/nope", trust_env=False)
    assert elsewhere.status_code == 404 and "no such path /nope" in elsewhere.json()["error"]


def test_serve_answers_from_a_reingested_collection(tmp_path: Path) -> None:
    """A re-ingest (a new save of the folder) is served from the next request, no restart."""
    target = _collection(tmp_path)
    running = SearchServer(RAGPipeline.open(target), "docs", "127.0.0.1", 0, path=target)
    with running.background():
        assert _get(running, "/health").json()["chunks"] == len(DOCS)
        query = {"query": "heron migration wetlands", "k": 1}
        assert _post(running, query).json()["hits"][0]["doc_id"] != "birds/heron.md"
        pipeline = RAGPipeline.open(target)
        pipeline.index([Document("birds/heron.md", "The heron migration crosses the wetlands.")])
        pipeline.save(target)
        assert _get(running, "/health").json()["chunks"] == len(DOCS) + 1
        assert _post(running, query).json()["hits"][0]["doc_id"] == "birds/heron.md"


def test_search_never_waits_for_an_ingest_and_times_loading_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ingest holds its collection's lock for as long as it runs (hours, for a large
    corpus); a search answers meanwhile from the batches committed so far."""
    from ragbench.pipeline import collection_lock

    target = _collection(tmp_path)
    held, release = threading.Event(), threading.Event()

    def ingest() -> None:  # holds the collection as an ingest does
        with collection_lock(target):
            held.set()
            release.wait(30)

    writer = threading.Thread(target=ingest)
    writer.start()
    held.wait(10)
    where = ["--collection", "docs", "--db", str(tmp_path)]
    try:
        assert main(["search", "admin API port", *where, "--format", "json"]) == 0
        assert writer.is_alive()  # answered while the lock was held
    finally:
        release.set()
        writer.join()
    printed = capsys.readouterr()
    assert re.search(r"collection 'docs' loaded in \d+ ms", printed.err)
    assert json.loads(printed.out)[0]["doc_id"] == "ref/ports.md"
