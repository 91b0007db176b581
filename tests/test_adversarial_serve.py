"""`ragbench serve` against malformed requests, slow clients, clients that go away, and load.

One server runs in its own process for the module (the API over a small hashing collection,
short timeouts); everything it logs, at INFO and above, goes to a file. Each case is sent over
real sockets on loopback and must be answered with a 4xx (a client that went away is answered
by nothing) while the log holds no traceback and the server goes on answering. Grouped by the
rule they check: malformed HTTP, text that is no valid Unicode, clients too slow or gone, limits,
load, and what the server says (request errors in JSON's words; a collection saved again that
cannot be opened: one log line, and ``/health`` says the answers come from an older copy).
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import numpy as np
import pytest

from tests.test_serve import _collection

pytestmark = pytest.mark.xdist_group("adversarial-serve")  # one server process for the module

HEAD_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_BODY_BYTES = 4096

SERVER = f"""
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)  # all the server says, INFO and up
from ragbench.api import SearchServer
from ragbench.pipeline import RAGPipeline
from ragbench.service import ServeLimits

limits = ServeLimits(
    head_timeout_s={HEAD_TIMEOUT_S}, body_timeout_s={BODY_TIMEOUT_S},
    max_body_bytes={MAX_BODY_BYTES},
)
server = SearchServer(RAGPipeline.open(sys.argv[1]), "docs", "127.0.0.1", 0, limits=limits)
print(server.url, flush=True)
with server:
    server.serve_forever()
"""


@dataclass(frozen=True)
class Served:
    """The server process's address and log."""

    url: str
    address: tuple[str, int]
    log: Path

    def check(self) -> None:
        """The log holds no traceback, and the server still answers."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in text, text
        assert httpx.get(f"{self.url}/health", timeout=10, trust_env=False).status_code == 200

    def metrics(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/metrics", timeout=10, trust_env=False).json()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("adversarial-serve")
    target = _collection(folder / "db")
    log = folder / "server.log"
    with log.open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(target)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), log.read_text(encoding="utf-8")
        host, port = url.removeprefix("http://").split(":")
        yield Served(url, (host, int(port)), log)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _exchange(served: Served, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` on a new connection and read until the server closes it."""
    with socket.create_connection(served.address, timeout=timeout) as sock:
        sock.sendall(data)
        return _read_to_end(sock)


def _read_to_end(sock: socket.socket) -> bytes:
    found = b""
    while chunk := sock.recv(65536):
        found += chunk
    return found


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def _json(reply: bytes) -> Any:
    return json.loads(reply.partition(b"\r\n\r\n")[2])


def _search_head(length: int | str, extra: str = "") -> bytes:
    return (
        f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


# ---------------------------------------------------------------- malformed HTTP


def test_conflicting_content_length_headers_are_a_400(served: Served) -> None:
    body = b'{"query": "keys"}'
    reply = _exchange(served, _search_head(len(body), "Content-Length: 5\r\n") + body)
    assert _status(reply) == 400
    assert _json(reply) == {"error": "malformed request: conflicting Content-Length headers"}
    served.check()


@pytest.mark.parametrize("length", ["²", "-1", "1e3", "0x10", "", "٣"])
def test_a_content_length_that_is_no_number_is_a_400(served: Served, length: str) -> None:
    reply = _exchange(served, _search_head(length) + b'{"query": "keys"}')
    assert _status(reply) == 400 and "Content-Length" in _json(reply)["error"]
    served.check()


def test_a_request_line_that_is_no_http_is_a_400(served: Served) -> None:
    for garbage in (
        b"HELLO\r\n\r\n",
        b"GET /health HTTP/9\r\n\r\n",
        b"\x16\x03\x01\x00\xa5\r\n\r\n",
    ):
        reply = _exchange(served, garbage)
        assert _status(reply) == 400 and _json(reply)["error"].startswith("malformed request")
    served.check()


def test_a_body_key_given_twice_is_a_400(served: Served) -> None:
    reply = httpx.post(
        f"{served.url}/search", content=b'{"query": "keys", "query": "ports"}', trust_env=False
    )
    assert reply.status_code == 400 and "given twice" in reply.json()["error"]
    served.check()


# ---------------------------------------------------------------- text that is no valid Unicode


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"query": "\\udc80"}', "query"),
        (b'{"query": "keys \\ud800 rotate"}', "query"),
        (b'{"query": "keys", "filter": {"team": "\\udc80"}}', "filter"),
        (b'{"query": "keys", "filter": {"\\udfff": "ops"}}', "filter"),
        (b'{"query": "keys", "retriever": "\\udc80"}', "retriever"),
        (b'{"query": "keys", "\\udc80": 1}', "\\udc80"),
    ],
)
def test_a_lone_surrogate_escaped_in_json_is_a_400_naming_its_field(
    served: Served, body: bytes, field: str
) -> None:
    reply = httpx.post(f"{served.url}/search", content=body, trust_env=False)
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["field"] == field and "lone surrogate" in error["error"]
    assert "\n" not in reply.text.strip()
    served.check()


@pytest.mark.parametrize(
    "body",
    [
        b'{"query": "keys \x80"}',  # a continuation byte alone
        b'{"query": "\xed\xb2\x80"}',  # a surrogate encoded as UTF-8 bytes
        b'{"query": "\xc0\xaf"}',  # an overlong encoding
        b'\xff\xfe{\x00"\x00}\x00',  # UTF-16
    ],
)
def test_bytes_that_are_not_utf8_are_a_400(served: Served, body: bytes) -> None:
    reply = _exchange(served, _search_head(len(body), "Connection: close\r\n") + body)
    assert _status(reply) == 400
    error = _json(reply)
    assert error["field"] == "body" and error["error"].startswith("body: not UTF-8: byte 0x")
    served.check()


# ---------------------------------------------------------------- clients too slow, or gone


@pytest.mark.parametrize(
    "part",
    [b"", b"POST /sea", b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Le"],
    ids=["nothing", "half a request line", "half the headers"],
)
def test_a_request_head_that_does_not_arrive_in_time_is_a_408(served: Served, part: bytes) -> None:
    started = time.perf_counter()
    reply = _exchange(served, part)
    assert _status(reply) == 408 and "not received within" in _json(reply)["error"]
    assert HEAD_TIMEOUT_S <= time.perf_counter() - started < HEAD_TIMEOUT_S + 5
    served.check()


def test_a_head_trickled_a_byte_at_a_time_is_cut_at_the_deadline(served: Served) -> None:
    """Bytes that keep coming do not keep a request's head open past its deadline."""
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 100
    with socket.create_connection(served.address, timeout=10) as sock:
        started = time.perf_counter()
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
        except OSError:  # the server closed the connection at its deadline
            pass
        reply = _read_to_end(sock)
    assert _status(reply) == 408
    assert time.perf_counter() - started < HEAD_TIMEOUT_S + 2
    served.check()


def test_a_body_that_does_not_arrive_in_time_is_a_408(served: Served) -> None:
    reply = _exchange(served, _search_head(40) + b'{"query": "ke')
    assert _status(reply) == 408
    assert _json(reply) == {"error": "body: not received within 1 s", "field": "body"}
    served.check()


@pytest.mark.parametrize(
    "part",
    [b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n", _search_head(40) + b'{"qu'],
    ids=["half the headers", "half the body"],
)
def test_half_a_request_then_close_leaves_no_traceback(served: Served, part: bytes) -> None:
    gone_before = served.metrics()["requests"].get("/search", {}).get("499", 0)
    for reset in (False, True):
        with socket.create_connection(served.address, timeout=10) as sock:
            if reset:  # close with a RST, not a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(part)
    time.sleep(0.3)
    served.check()
    gone = served.metrics()["requests"].get("/search", {}).get("499", 0) - gone_before
    assert gone == (2 if b"{" in part else 0)  # a request with a head is counted as gone


def test_clients_that_close_before_reading_the_reply_leave_no_traceback(served: Served) -> None:
    body = b'{"query": "rotate the signing keys", "k": 50}'
    request = _search_head(len(body)) + body
    sockets = []
    for i in range(120):
        sock = socket.create_connection(served.address, timeout=10)
        if i % 2:  # half of them reset the connection
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.sendall(request)
        sockets.append(sock)
    for sock in sockets:
        sock.close()
    time.sleep(1.0)
    served.check()
    assert _exchange(served, request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))


# ---------------------------------------------------------------- limits


def test_a_body_over_the_limit_is_a_413(served: Served) -> None:
    declared = _exchange(served, _search_head(MAX_BODY_BYTES + 1))  # refused before it is sent
    assert _status(declared) == 413
    assert _json(declared) == {"error": "body: larger than 4,096 bytes", "field": "body"}
    chunked = (
        b"POST /search HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"400\r\n" + b" " * 1024 + b"\r\n" for _ in range(5))
        + b"0\r\n\r\n"
    )
    assert _status(_exchange(served, chunked)) == 413  # no length declared: counted
    served.check()


def test_a_request_head_growing_past_the_limit_is_a_431(served: Served) -> None:
    with socket.create_connection(served.address, timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        try:
            for i in range(10):  # 40 KB of headers, in parts that arrive apart
                sock.sendall(f"X-Part-{i}: ".encode() + b"a" * 4000 + b"\r\n")
                time.sleep(0.02)
        except OSError:  # the server closed the connection at the limit
            pass
        reply = _read_to_end(sock)
    assert _status(reply) == 431
    assert _json(reply) == {"error": "request line and headers larger than 16,384 bytes"}
    served.check()


# ---------------------------------------------------------------- load


def test_300_requests_50_at_a_time_get_no_connection_error(served: Served) -> None:
    """Six waves of 50 requests sent at the same moment, each on a new connection (bursts of
    clients): every one gets a 200, none a reset."""
    queries = ["rotate the signing keys", "admin API port", "who may read topics", "retention"]
    fresh = httpx.Limits(max_connections=50, max_keepalive_connections=0)

    with httpx.Client(limits=fresh, timeout=60, trust_env=False) as client:

        def one(together: threading.Barrier, i: int) -> tuple[float, str | None]:
            together.wait()
            started = time.perf_counter()
            body = {"query": queries[i % len(queries)], "k": 5}
            try:
                reply = client.post(f"{served.url}/search", json=body)
            except httpx.HTTPError as exc:
                return time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
            error = None if reply.status_code == 200 else f"status {reply.status_code}"
            return time.perf_counter() - started, error

        done: list[tuple[float, str | None]] = []
        with ThreadPoolExecutor(50) as pool:
            for wave in range(6):
                done += pool.map(
                    partial(one, threading.Barrier(50)), range(50 * wave, 50 * wave + 50)
                )
    errors = [error for _, error in done if error is not None]
    p50, p95 = np.percentile([seconds * 1000 for seconds, _ in done], [50, 95])
    print(f"300 requests, 50 at a time: {len(errors)} errors, p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    assert len(done) == 300 and errors == []
    assert served.metrics()["search"]["count"] >= 300
    served.check()


# ---------------------------------------------------------------- what the server says


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"null", "body: expected a JSON object, got null"),
        (b"[1, 2]", "body: expected a JSON object, got a list [1, 2]"),
        (b'"keys"', 'body: expected a JSON object, got "keys"'),
        (b'{"query": "keys", "k": "5"}', 'k: input should be a valid integer, got "5"'),
        (b'{"query": "keys", "filter": 5}', "filter: input should be a mapping of keys to values"),
        (b'{"query": null}', "query: input should be a valid string, got null"),
    ],
)
def test_a_request_error_names_json_values_not_python_types(
    served: Served, body: bytes, said: str
) -> None:
    reply = httpx.post(f"{served.url}/search", content=body, trust_env=False)
    assert reply.status_code == 400 and reply.json()["error"].startswith(said), reply.text
    for python in ("NoneType", "None", "dict", "list[", "str", "int"):
        assert python not in reply.json()["error"].replace("integer", "").replace("string", "")
    served.check()


def test_a_saved_collection_it_cannot_open_is_one_log_line_and_stale_in_health(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The collection's folder changes into one that does not open (its config replaced by
    text that is no JSON): the server answers from the copy it loaded, says why in ``/health``
    and logs it once, in one line; once the folder opens again, it answers from that."""
    from ragbench.api import SearchServer
    from ragbench.pipeline import RAGPipeline

    target = _collection(tmp_path / "db")
    server = SearchServer(RAGPipeline.open(target), "docs", "127.0.0.1", 0, path=target)
    config = target / "pipeline.json"
    kept = config.read_bytes()

    def replace(data: bytes) -> None:  # as a save does: a new folder swapped in for the old
        new, old = tmp_path / "db" / ".new", tmp_path / "db" / ".old"
        shutil.copytree(target, new)
        (new / "pipeline.json").write_bytes(data)
        target.rename(old)
        new.rename(target)
        shutil.rmtree(old)

    def health() -> dict[str, Any]:
        return httpx.get(f"{server.url}/health", timeout=10, trust_env=False).json()

    def search() -> httpx.Response:
        body = {"query": "rotate the signing keys", "k": 1}
        return httpx.post(f"{server.url}/search", json=body, timeout=10, trust_env=False)

    with caplog.at_level(logging.INFO), server.background():
        before = health()
        assert before["status"] == "ok" and before["stale"] is None
        replace(b"{not json")
        assert search().status_code == 200  # from the copy loaded before
        found = health()
        assert found["status"] == "stale" and str(config) in found["stale"], found
        assert found["stale"].startswith(f"{target}: the collection as saved last cannot be ")
        assert search().status_code == 200 and health()["stale"] == found["stale"]
        said = [r for r in caplog.records if r.name == "ragbench.api" and r.levelno >= 30]
        assert [r.getMessage() for r in said] == [
            f"{found['stale']}; answering from the copy loaded before"
        ]
        assert all(r.exc_info is None for r in caplog.records) and "Traceback" not in caplog.text
        replace(kept)
        assert health() == {**before, "uptime_s": ANY}


def test_a_collection_saved_again_with_other_retrievers_changes_what_a_request_may_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The served collection is made again with BM25 alone (it was hybrid), then hybrid again:
    a request naming the dense retriever the collection lost is a 400 naming ``retriever``
    (no 500, no traceback), ``/openapi.json`` lists the retrievers it has now, and once it
    has them back, the same request is answered."""
    from ragbench.api import SearchServer
    from ragbench.pipeline import RAGPipeline
    from tests.test_serve import CONFIG

    target = _collection(tmp_path / "db")
    server = SearchServer(RAGPipeline.open(target), "docs", "127.0.0.1", 0, path=target)

    def make_again(config: dict[str, Any]) -> None:  # as an ingest into a new folder does
        fresh = _collection(tmp_path / "made", config=config)
        old = tmp_path / "db" / ".old"
        target.rename(old)
        fresh.rename(target)
        shutil.rmtree(old)

    def dense() -> httpx.Response:
        body = {"query": "rotate the signing keys", "k": 1, "retriever": "dense"}
        return httpx.post(f"{server.url}/search", json=body, timeout=10, trust_env=False)

    def enum() -> list[str]:
        document = httpx.get(f"{server.url}/openapi.json", timeout=10, trust_env=False).json()
        schema = document["paths"]["/search"]["post"]["requestBody"]["content"]
        named = schema["application/json"]["schema"]["properties"]["retriever"]["anyOf"][0]
        return named.get("enum") or [named["const"]]  # one value is a const

    with caplog.at_level(logging.INFO), server.background():
        assert dense().status_code == 200 and enum() == ["hybrid", "bm25", "dense"]
        make_again({**CONFIG, "retriever": {"kind": "bm25"}})
        assert enum() == ["bm25"]  # the first request after the save reopens it
        refused = dense()
        assert refused.status_code == 400, refused.text
        assert refused.json() == {
            "error": "retriever: input should be 'bm25', got \"dense\"",
            "field": "retriever",
        }
        served = httpx.get(f"{server.url}/openapi.json", timeout=10, trust_env=False).json()
        assert server.app.openapi() == served
        make_again(CONFIG)
        answered = dense()  # reopened by the search itself, then checked against it
        assert answered.status_code == 200 and answered.json()["retriever"] == "dense"
        assert enum() == ["hybrid", "bm25", "dense"]
    assert "Traceback" not in caplog.text and all(r.exc_info is None for r in caplog.records)
