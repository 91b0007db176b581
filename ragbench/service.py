"""A warm search service over a collection: explained search and a small HTTP JSON API.

``ragbench search`` used to load torch and the model for every query. Here a collection
(``RAGPipeline``) is opened once and answers many queries: ``search`` runs one query and says,
for every hit, what each first-stage retriever made of it (its rank and score in the BM25 list
and in the dense list) and on which scale its score is (``score_scale``: BM25 score, cosine,
RRF, ...). ``SearchServer`` serves the same over HTTP (standard library ``http.server``, one
thread per request, searches one at a time): ``POST /search``, ``GET /health`` and
``GET /openapi.json`` (``openapi_schema``); every other path or method is a JSON 404 or 405.
It binds to loopback unless told otherwise: the API has no authentication. Given the
collection's folder, it follows re-ingests: the first request after a new save reopens it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ragbench import __version__
from ragbench.data.problems import DuplicateKey, loads_json
from ragbench.endpoints import is_loopback
from ragbench.errors import ConfigError
from ragbench.pipeline import RAGPipeline

__all__ = [
    "MAX_K",
    "Found",
    "RequestError",
    "SearchHit",
    "SearchRequest",
    "SearchResult",
    "SearchServer",
    "check_host",
    "check_port",
    "check_query",
    "openapi_schema",
    "parse_request",
    "score_scale",
    "search",
    "warm_up",
]

logger = logging.getLogger(__name__)

MAX_K = 1000
_MAX_BODY = 1 << 20  # bytes of a request body
_MAX_QUERY = 10_000  # characters of a query
_FIELDS = ("query", "k", "filter", "retriever")
_ROUTES = {"/search": "POST", "/health": "GET", "/openapi.json": "GET"}


# ---------------------------------------------------------------- explained search


@dataclass(frozen=True)
class Found:
    """Where one first-stage retriever put a hit: its 1-based rank and score in that list."""

    rank: int
    score: float


@dataclass(frozen=True)
class SearchHit:
    """A hit, and per first-stage list searched (``bm25``, ``dense``) where it was in that
    list (None: not among the list's hits)."""

    rank: int
    score: float
    chunk_id: str
    doc_id: str
    text: str
    start: int
    end: int
    metadata: dict[str, Any]
    found_by: dict[str, Found | None]

    def to_json(self) -> dict[str, Any]:
        """The hit as the API returns it (its fields, in order)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SearchResult:
    """One query's hits, the retriever that ran, what the scores mean (``scale`` for the hits'
    score, ``scales`` for each first-stage list's), and the time it took."""

    query: str
    retriever: str
    scale: str
    scales: dict[str, str]
    hits: list[SearchHit]
    took_ms: float
    stages_ms: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The result as the API returns it."""
        took = {"took_ms": round(self.took_ms, 3)}
        stages = {s: round(ms, 3) for s, ms in self.stages_ms.items()}
        hits = [hit.to_json() for hit in self.hits]
        shown = {"score_scale": self.scale, "found_by_scales": self.scales, **took}
        return {
            "query": self.query,
            "retriever": self.retriever,
            **shown,
            "stages_ms": stages,
            "hits": hits,
        }


def score_scale(pipeline: RAGPipeline, retriever: str | None = None) -> str:
    """What the scores of ``pipeline``'s hits mean when ``retriever`` (default: its own) runs:
    the reranker's scale when it has one, else the retriever's (each kind says what its scores
    mean: ``ComponentConfig.score_scale``)."""
    reranker = pipeline.trial.get("reranker")
    own = pipeline.retriever(retriever)
    scale = reranker.score_scale() if reranker is not None else None
    return scale or own.score_scale() or f"{own.kind} retriever score"


def search(
    pipeline: RAGPipeline,
    query: str,
    k: int = 10,
    filter: Mapping[str, Any] | None = None,
    retriever: str | None = None,
) -> SearchResult:
    """The top ``k`` hits for ``query`` (metadata ``filter``: exact match; ``retriever``: one
    of ``pipeline.retrievers``), each with its place in every first-stage list; an empty
    ``query`` is a ``RequestError``, as in a request."""
    check_query(query)
    started = time.perf_counter()
    found = pipeline.search([query], k, filter, retriever)
    took_ms = (time.perf_counter() - started) * 1000
    chunks = pipeline.chunks
    lists = {
        name: {cid: Found(rank, float(score)) for rank, (cid, score) in enumerate(r.row(0), 1)}
        for name, r in sorted(found.found.items())
    }
    hits = []
    for rank, (cid, score) in enumerate(found.ranking.row(0), start=1):
        chunk = chunks[cid]
        hits.append(
            SearchHit(
                rank,
                float(score),
                cid,
                chunk.doc_id,
                chunk.text,
                chunk.start,
                chunk.end,
                dict(chunk.metadata),
                {name: where.get(cid) for name, where in lists.items()},
            )
        )
    return SearchResult(
        query,
        retriever or pipeline.trial["retriever"].kind,
        score_scale(pipeline, retriever),
        {name: found.scales[name] for name in lists},
        hits,
        took_ms,
        {stage: float(s[0]) * 1000 for stage, s in found.timings.items() if len(s)},
    )


# ---------------------------------------------------------------- requests


class RequestError(ConfigError):
    """A bad request (or query): ``field`` names the field at fault (``body`` for the whole
    body)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class SearchRequest:
    """A validated ``POST /search`` body."""

    query: str
    k: int = 10
    filter: dict[str, Any] | None = None
    retriever: str | None = None


def parse_request(body: bytes, retrievers: tuple[str, ...]) -> SearchRequest:
    """The search request in ``body`` (JSON), or ``RequestError`` naming the first bad field;
    ``retrievers`` are the kinds the collection serves."""
    try:
        data = loads_json(body.decode("utf-8"))
    except DuplicateKey as exc:
        raise RequestError("body", str(exc)) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise RequestError("body", "expected a JSON object, got invalid JSON") from None
    if not isinstance(data, dict):
        raise RequestError("body", f"expected a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise RequestError(unknown[0], f"unknown field; allowed: {', '.join(_FIELDS)}")
    query = check_query(data.get("query"))
    k = data.get("k", 10)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise RequestError("k", f"expected an integer from 1 to {MAX_K}, got {json.dumps(k)}")
    filter = data.get("filter")
    if filter is not None and not isinstance(filter, dict):
        raise RequestError("filter", "expected an object of metadata key: value, or null")
    retriever = data.get("retriever")
    if retriever is not None and retriever not in retrievers:
        allowed = ", ".join(retrievers)
        raise RequestError(
            "retriever",
            f"expected one of {allowed} for this collection, got {json.dumps(retriever)}",
        )
    return SearchRequest(query, k, filter or None, retriever)


def check_query(query: object) -> str:
    """``query`` when it is one to search for (a string with a word in it, at most 10,000
    characters), else ``RequestError`` naming the field ``query``: the API and the command line
    refuse the same queries."""
    if not isinstance(query, str) or not query.strip():
        raise RequestError("query", f"expected a non-empty string, got {json.dumps(query)}")
    if len(query) > _MAX_QUERY:
        raise RequestError("query", f"longer than {_MAX_QUERY:,} characters")
    return query


# ---------------------------------------------------------------- the server


def check_host(host: str, allow_remote: bool = False) -> None:
    """``ConfigError`` unless ``host`` is a loopback address or ``allow_remote`` is set."""
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"--host {host}: not a loopback address; the API has no authentication, so serving "
            "other machines needs allow_remote=True / --allow-remote"
        )


def check_port(port: int) -> None:
    """``ConfigError`` unless ``port`` is a TCP port (0 to 65535; 0: any free port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: expected a port from 0 to 65535 (0: any free port)")


def warm_up(pipeline: RAGPipeline, retrievers: Sequence[str | None] | None = None) -> float:
    """Load what ``pipeline`` searches with (models, indexes) by one search per retriever
    (default: each it serves); returns the seconds it took, which no query's time counts."""
    started = time.perf_counter()
    for retriever in pipeline.retrievers if retrievers is None else retrievers:
        pipeline.search(["warm up"], 1, None, retriever)
    return time.perf_counter() - started


def _stamp(path: Path | None) -> tuple[int, ...] | None:
    """What changes when a collection is saved again (``save`` swaps in a new folder)."""
    try:
        found = os.stat(path) if path is not None else None
    except OSError:  # between the two renames of a save, or gone
        return None
    return None if found is None else (found.st_ino, found.st_mtime_ns, found.st_ctime_ns)


class SearchServer(ThreadingHTTPServer):
    """The HTTP JSON API over one collection, opened and warmed up before it listens; with
    ``path`` (the collection's folder) it answers from the collection as last saved there."""

    daemon_threads = True

    def __init__(
        self,
        pipeline: RAGPipeline,
        name: str,
        host: str = "127.0.0.1",
        port: int = 8765,
        allow_remote: bool = False,
        path: Path | str | None = None,
    ) -> None:
        check_host(host, allow_remote)
        check_port(port)
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.pipeline = pipeline
        self.name = name
        self.path = Path(path) if path is not None else None
        self._stamp = _stamp(self.path)
        self.lock = threading.Lock()  # one search at a time: indexes and models are shared
        self.started = time.time()
        warm_up(pipeline)  # loads the models before the first request
        super().__init__((host, port), _Handler)

    def current(self) -> RAGPipeline:
        """The pipeline to answer from (call it holding ``lock``): reopened when the
        collection was saved again since it was loaded (a re-ingest; an ingest still running
        holds the collection until it saves, and the loaded one answers meanwhile)."""
        stamp = _stamp(self.path)
        if self.path is None or stamp is None or stamp == self._stamp:
            return self.pipeline
        self._stamp = stamp
        try:
            fresh = RAGPipeline.open(self.path)
        except Exception:  # the loaded collection goes on answering
            logger.exception("%s: cannot reopen the collection", self.path)
            return self.pipeline
        if fresh.trial.id == self.pipeline.trial.id:
            fresh.env = self.pipeline.env  # the same models, loaded already
        warm_up(fresh)
        self.pipeline = fresh
        return fresh

    @property
    def url(self) -> str:
        """The base URL the server listens on."""
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if self.address_family == socket.AF_INET6 else name
        return f"http://{shown}:{port}"

    def health(self) -> dict[str, Any]:
        """What ``GET /health`` returns."""
        with self.lock:
            pipeline = self.current()
        embedder = pipeline.trial.get("embedder")
        return {
            "status": "ok",
            "collection": self.name,
            "documents": len(pipeline.document_ids),
            "chunks": len(pipeline.chunks),
            "pipeline": pipeline.trial.label,
            "retriever": pipeline.trial["retriever"].kind,
            "retrievers": list(pipeline.retrievers),
            "embedder": embedder.label() if embedder is not None else None,
            "uptime_s": round(time.time() - self.started, 3),
            "version": __version__,
        }


class _Handler(BaseHTTPRequestHandler):
    server: SearchServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: no delayed-ACK stall
    server_version = f"ragbench/{__version__}"

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self._send(200, self.server.health())
        elif path == "/openapi.json":
            self._send(200, openapi_schema())
        else:
            self._unrouted(path)

    def _unrouted(self, path: str) -> None:
        """A 405 naming the method of a known path, a 404 for any other path; the connection
        closes, since a body may be left unread."""
        self.close_connection = True
        allowed = _ROUTES.get(path)
        if allowed is None:
            self._send(404, {"error": f"no such path {path}; see /openapi.json"})
        else:
            error = f"{self.command} {path}: use {allowed}"
            self._send(405, {"error": error}, {"Allow": allowed})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What ``http.server`` refuses itself, as JSON too: an unsupported method (PUT,
        DELETE, ...) is a 405 or 404 like any other wrong one, a malformed request its own
        status."""
        self.close_connection = True
        if code == HTTPStatus.NOT_IMPLEMENTED and self.command:
            self._unrouted(urlsplit(self.path).path)
        else:
            self._send(code, {"error": message or HTTPStatus(code).phrase})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        if path != "/search":
            self._unrouted(path)
            return
        length = self.headers.get("content-length", "")
        if not length.isdigit():
            self._send(411, {"error": "body: a Content-Length header is required", "field": "body"})
            return
        if int(length) > _MAX_BODY:
            self.close_connection = True
            error = f"body: larger than {_MAX_BODY:,} bytes"
            self._send(413, {"error": error, "field": "body"})
            return
        body = self.rfile.read(int(length))
        try:  # a re-ingest keeps the collection's config, so its retrievers
            request = parse_request(body, self.server.pipeline.retrievers)
        except RequestError as exc:
            self._send(400, {"error": str(exc), "field": exc.field})
            return
        try:
            with self.server.lock:
                found = search(
                    self.server.current(),
                    request.query,
                    request.k,
                    request.filter,
                    request.retriever,
                )
        except Exception as exc:  # one line to the client, the traceback to the log
            logger.exception("search failed")
            self._send(500, {"error": f"search failed: {type(exc).__name__}: {exc}"})
            return
        self._send(200, found.to_json())

    def _send(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)


# ---------------------------------------------------------------- the schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _object(required: Sequence[str] | None = None, **properties: Any) -> dict[str, Any]:
    """An object schema of ``properties`` (given as a type name, or a schema), all required
    unless ``required`` names some."""
    shown = {k: {"type": v} if isinstance(v, str | list) else v for k, v in properties.items()}
    needed = list(properties) if required is None else list(required)
    return {"type": "object", "required": needed, "properties": shown}


def _operation(summary: str, responses: dict[str, Any], body: str | None = None) -> dict[str, Any]:
    """One operation: its summary, its JSON request body's schema (if any) and its responses."""
    found: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        found["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    return found


_RANK = {"type": "integer", "minimum": 1}
_NUMBERS = {"type": "object", "additionalProperties": {"type": "number"}}


def _schemas() -> dict[str, Any]:
    """The request and response objects of the API (and ``_status_schemas``)."""
    found: dict[str, Any] = {"anyOf": [_ref("Found"), {"type": "null"}]}
    found["description"] = "Where this list had the hit; null: not among its hits."
    request = _object(
        ["query"],
        query={"type": "string", "minLength": 1, "maxLength": _MAX_QUERY},
        k={"type": "integer", "minimum": 1, "maximum": MAX_K, "default": 10},
        filter={"type": ["object", "null"], "description": _FILTER},
        retriever={"type": ["string", "null"], "description": _RETRIEVER},
    )
    by_list = {
        "type": "object",
        "description": "Per first-stage list searched: what each retriever found.",
    }
    return {
        "SearchRequest": {**request, "additionalProperties": False},
        "Found": _object(
            rank=_RANK, score={"type": "number", "description": "On that list's scale."}
        ),
        "Hit": _object(
            rank=_RANK,
            score={"type": "number", "description": "On the scale of score_scale."},
            chunk_id="string",
            doc_id="string",
            text="string",
            start={"type": "integer", "description": "Offset of the text in its document."},
            end="integer",
            metadata="object",
            found_by={**by_list, "additionalProperties": found},
        ),
        "SearchResponse": _object(
            ["query", "retriever", "score_scale", "found_by_scales", "took_ms", "hits"],
            query="string",
            retriever="string",
            score_scale={"type": "string", "description": "What a hit's score means."},
            found_by_scales={
                **_STRINGS,
                "description": "What each first-stage list's scores mean.",
            },
            took_ms="number",
            stages_ms=_NUMBERS,
            hits={"type": "array", "items": _ref("Hit")},
        ),
        **_status_schemas(),
    }


def _status_schemas() -> dict[str, Any]:
    """The health and error objects of the API."""
    return {
        "Health": _object(
            ["status", "collection", "documents", "chunks", "retrievers"],
            status={"const": "ok"},
            collection="string",
            documents="integer",
            chunks="integer",
            pipeline="string",
            retriever="string",
            retrievers={"type": "array", "items": {"type": "string"}},
            embedder=["string", "null"],
            uptime_s="number",
            version="string",
        ),
        "Error": _object(
            ["error"],
            error={"type": "string", "description": "One line naming the field."},
            field={"type": "string", "description": "The field at fault (or body)."},
        ),
    }


_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_FILTER = "Chunk metadata every hit must match exactly (key: value)."
_RETRIEVER = (
    "First stage to run: one of the retrievers the collection serves (GET /health lists "
    "them; default: the collection's own)."
)


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the API (served at ``/openapi.json``)."""
    error = _ref("Error")
    search = {
        "200": _json(_ref("SearchResponse"), "The hits, best first."),
        "400": _json(error, "A bad field; the error names it."),
        "411": _json(error, "No Content-Length header."),
        "413": _json(error, "The body is larger than 1 MiB."),
        "500": _json(error, "The search failed."),
    }
    summary = "Top-k chunks for a query, with what each retriever found"
    health = {"200": _json(_ref("Health"), "The server is up.")}
    itself = {"200": _json({"type": "object"}, "The OpenAPI document.")}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "ragbench search",
            "version": __version__,
            "description": "Search one ragbench collection (made by `ragbench ingest`).",
        },
        "paths": {
            "/search": {"post": _operation(summary, search, "SearchRequest")},
            "/health": {"get": _operation("The collection served and its retrievers", health)},
            "/openapi.json": {"get": _operation("This document", itself)},
        },
        "components": {"schemas": _schemas()},
    }
