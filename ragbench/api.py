"""The HTTP JSON API over one collection: FastAPI served by uvicorn.

``SearchServer`` opens a collection, warms it up, then listens: ``POST /search`` (explained
search, ``ragbench.service.search``), ``GET /health`` (the collection served), ``GET /metrics``
(request counts by route and status, latency percentiles of ``/search``) and ``GET
/openapi.json`` (the OpenAPI document FastAPI generates from the pydantic models below). Every
error is JSON, ``{"error": "<one line naming the field>", "field": ...}``: a bad field is a 400
(pydantic's validation errors become that line), a body over the limit a 413, a request whose
head or body does not arrive in time a 408, a request that waited too long for its turn a 503,
a failed search a 500 (the traceback goes to the log), an unknown path or method a 404 or 405,
and a request that is no valid HTTP a 400 from the protocol itself (``_Protocol``). Searches run
one at a time in a worker thread (a pipeline is not thread-safe), in the order they came.
``ServeLimits`` (``ragbench.service``) sets every limit. The server binds to loopback unless
told otherwise (the API has no authentication); given the collection's folder, it follows
re-ingests: the first request after a new save reopens it (a save it cannot open leaves the
loaded copy answering, one line in the log and ``"status": "stale"`` in ``/health``). A request
body is checked against the collection answering it, once it is its turn, and
``/openapi.json`` describes that collection too: a collection saved again with other retrievers
changes which ones a request may name.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import h11
import numpy as np
import uvicorn
from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from ragbench import __version__
from ragbench.data.problems import DuplicateKey, loads_json
from ragbench.errors import RagbenchError
from ragbench.pipeline import RAGPipeline, collection_version
from ragbench.registry import described, validation_problem
from ragbench.service import (
    LIMITS,
    RequestError,
    SearchResult,
    ServeLimits,
    check_host,
    check_port,
    check_query,
    search,
    warm_up,
)

__all__ = ["Error", "Health", "Latency", "Metrics", "SearchServer", "create_app", "request_model"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_FILTER = "Chunk metadata every hit must match exactly (key: value)."
_RETRIEVER = (
    "First stage to run: one of the retrievers the collection serves (GET /health lists "
    "them; default: the collection's own)."
)
_ROUTES = ("/search", "/health", "/metrics", "/openapi.json")
_CLIENT_GONE = 499  # the client closed the connection before its request was read


# ---------------------------------------------------------------- the models


def request_model(retrievers: tuple[str, ...], limits: ServeLimits = LIMITS) -> type[BaseModel]:
    """The ``POST /search`` body for a collection serving ``retrievers``: it validates the
    requests and states the limits in the OpenAPI document."""

    class SearchRequest(BaseModel):
        """A search: the query, how many hits, a metadata filter and the first stage."""

        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=limits.max_query_chars,
                description="What to search for (valid Unicode, not only spaces).",
            ),
            AfterValidator(partial(check_query, max_chars=limits.max_query_chars)),
        ]
        k: int = Field(10, ge=1, le=limits.max_k, description="How many hits.")
        filter: dict[str, Any] | None = Field(None, description=_FILTER)
        retriever: Literal[retrievers] | None = Field(  # type: ignore[valid-type]
            None, description=_RETRIEVER
        )

    return SearchRequest


class Health(BaseModel):
    """The collection served, its counts and its retrievers; ``stale`` when it answers from an
    older copy than the one saved last."""

    status: Literal["ok", "stale"] = "ok"
    stale: str | None = Field(
        None,
        description="Why answers come from the copy loaded before rather than the collection "
        "as saved last (it cannot be opened, or its folder is gone); null when they do not.",
    )
    collection: str
    documents: int
    chunks: int
    pipeline: str = Field(description="The deployed trial's label.")
    retriever: str = Field(description="The collection's own first stage.")
    retrievers: list[str] = Field(description="Those a request's retriever may name.")
    embedder: str | None
    uptime_s: float
    version: str


class Latency(BaseModel):
    """Percentiles of the time answered searches took, from request to response, over the
    latest ``window`` of them."""

    count: int = Field(description="Searches answered since the server started.")
    window: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


class Metrics(BaseModel):
    """What the server answered since it started."""

    requests: dict[str, dict[str, int]] = Field(
        description="Per route (other: any unknown path), responses per HTTP status."
    )
    search: Latency
    uptime_s: float


class Error(BaseModel):
    """A refused or failed request."""

    error: str = Field(description="One line naming the field.")
    field: str | None = Field(None, description="The field at fault (body: the whole body).")


def _error(
    status: int, message: str, field: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    shown = Error(error=message, field=field).model_dump(exclude_none=True)
    return JSONResponse(shown, status, headers)


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The documented error responses of an operation."""
    return {status: {"model": Error, "description": _MEANINGS[status]} for status in statuses}


_MEANINGS = {
    400: "A bad field; the error names it.",
    408: "The body did not arrive in time.",
    413: "The body is larger than the limit.",
    500: "The search failed.",
    503: "The request waited too long for its turn.",
}


# ---------------------------------------------------------------- request bodies


class _Failed(Exception):
    """A request the server could not answer: its status, one line and its headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


class _TooLarge(Exception):
    pass


class _Late(Exception):
    pass


async def _read(request: Request, limits: ServeLimits) -> bytes:
    """The request's body: ``_TooLarge`` past ``max_body_bytes`` (before reading it when
    Content-Length says so), ``_Late`` when it takes longer than ``body_timeout_s``,
    ``ClientDisconnect`` when the client goes away."""
    declared = request.headers.get("content-length")
    if declared is not None and int(declared) > limits.max_body_bytes:
        raise _TooLarge
    parts, size = [], 0
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            async for part in request.stream():
                size += len(part)
                if size > limits.max_body_bytes:
                    raise _TooLarge
                parts.append(part)
    except TimeoutError:
        raise _Late from None
    return b"".join(parts)


def parse_request(body: bytes, model: type[BaseModel]) -> Any:
    """The request in ``body`` (UTF-8 JSON) as ``model``, or ``RequestError`` naming the first
    bad field (``body``: the body as a whole)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(
            "body", f"not UTF-8: byte 0x{body[exc.start]:02x} at offset {exc.start}"
        ) from None
    try:
        data = loads_json(text)
    except DuplicateKey as exc:
        raise RequestError("body", str(exc)) from None
    except (ValueError, RecursionError) as exc:
        where = f" ({exc})" if isinstance(exc, json.JSONDecodeError) else ""
        raise RequestError("body", f"expected a JSON object, got invalid JSON{where}") from None
    if not isinstance(data, dict):
        got = "an empty body" if not text.strip() else described(data)
        raise RequestError("body", f"expected a JSON object, got {got}")
    for key, value in data.items():  # text UTF-8 cannot carry is refused before it is echoed
        if _holds_lone_surrogate([key, value]):
            field = key.encode("utf-8", "backslashreplace").decode("utf-8")
            raise RequestError(field, "not valid Unicode: holds a lone surrogate (e.g. \\udc80)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc.errors()[0], tuple(model.model_fields)) from None


def _holds_lone_surrogate(value: Any) -> bool:
    """Whether ``value`` (parsed JSON) holds text UTF-8 cannot encode: a lone surrogate, from
    a ``\\udc80`` escape."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _field_error(error: ErrorDetails, fields: tuple[str, ...]) -> RequestError:
    """Pydantic's ``error`` as one line naming the field."""
    field = str(error["loc"][0]) if error["loc"] else "body"
    kind = error["type"]
    if kind == "extra_forbidden":
        return RequestError(field, f"unknown field; allowed: {', '.join(fields)}")
    if kind == "missing":
        return RequestError(field, "required")
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, RequestError):
        return cause
    message, got = validation_problem(error)
    return RequestError(field, f"{message[0].lower()}{message[1:]}, got {got}")


# ---------------------------------------------------------------- metrics


class _Meter:
    """Responses counted by route and status, and the latest searches' latencies; touched
    only on the server's event loop."""

    def __init__(self, window: int) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()
        self.searches = 0
        self.latencies: deque[float] = deque(maxlen=window)

    def record(self, route: str, status: int, seconds: float) -> None:
        self.counts[route, status] += 1
        if route == "/search" and status == 200:
            self.searches += 1
            self.latencies.append(seconds * 1000)

    def latency(self) -> Latency:
        values = np.asarray(self.latencies, dtype=np.float64)
        p50, p95, p99 = np.percentile(values, [50, 95, 99]) if len(values) else (None,) * 3
        shown = [None if p is None else round(float(p), 3) for p in (p50, p95, p99)]
        window = self.latencies.maxlen or 0
        return Latency(
            count=self.searches, window=window, p50_ms=shown[0], p95_ms=shown[1], p99_ms=shown[2]
        )

    def requests(self) -> dict[str, dict[str, int]]:
        found: dict[str, dict[str, int]] = {}
        for (route, status), count in sorted(self.counts.items()):
            found.setdefault(route, {})[str(status)] = count
        return found


class _Metered:
    """ASGI middleware: every response recorded on the meter, by route and status."""

    def __init__(self, app: ASGIApp, meter: _Meter) -> None:
        self.app = app
        self.meter = meter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets when the app raises

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope["path"] if scope["path"] in _ROUTES else "other"
            self.meter.record(route, status, time.perf_counter() - started)


# ---------------------------------------------------------------- the app


def create_app(server: SearchServer) -> FastAPI:
    """The API over ``server``'s collection, with ``server.limits``."""
    limits = server.limits
    app = FastAPI(
        title="ragbench search",
        version=__version__,
        description="Search one ragbench collection (made by `ragbench ingest`).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served below, in turn: it follows the collection reopened
    )
    app.add_middleware(_Metered, meter=server.meter)
    documents: dict[tuple[str, ...], dict[str, Any]] = {}

    def describe(pipeline: RAGPipeline) -> dict[str, Any]:
        """The OpenAPI document, with the ``POST /search`` body of ``pipeline``'s retrievers
        (made once per set of retrievers)."""
        retrievers = pipeline.retrievers
        if retrievers not in documents:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            schema = server.request_model(retrievers).model_json_schema()
            document["paths"]["/search"]["post"]["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": schema}},
            }
            documents[retrievers] = document
        return documents[retrievers]

    app.openapi = lambda: describe(server.pipeline)  # type: ignore[method-assign]

    @app.post(
        "/search",
        summary="Top-k chunks for a query, with what each retriever found",
        response_model=SearchResult,
        response_description="The hits, best first, and what their scores mean.",
        responses=_errors(400, 408, 413, 500, 503),
    )
    async def search_route(request: Request) -> Any:
        # The body is read here, not by FastAPI: any Content-Type is read as JSON (curl -d
        # sends a form's), and bytes that are not UTF-8, a key given twice and lone
        # surrogates are refused naming where they are. It is checked in turn, against the
        # collection that answers it (reopened, when saved again since).
        try:
            body = await _read(request, limits)
        except _TooLarge:
            message = f"larger than {limits.max_body_bytes:,} bytes"
            return _error(413, f"body: {message}", "body", {"Connection": "close"})
        except _Late:
            message = f"not received within {limits.body_timeout_s:g} s"
            return _error(408, f"body: {message}", "body", {"Connection": "close"})
        except ClientDisconnect:
            return Response(status_code=_CLIENT_GONE)

        def answer(pipeline: RAGPipeline) -> SearchResult:
            asked = parse_request(body, server.request_model(pipeline.retrievers))
            return search(pipeline, asked.query, asked.k, asked.filter, asked.retriever)

        return await server.in_turn(answer, "search")

    @app.get(
        "/health",
        summary="The collection served and its retrievers",
        response_description="The collection as last saved.",
        responses=_errors(500, 503),
    )
    async def health_route() -> Health:
        return await server.in_turn(server.health, "health")

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi_route() -> JSONResponse:
        return JSONResponse(await server.in_turn(describe, "openapi"))

    @app.get(
        "/metrics",
        summary="Requests answered and search latency since the start",
        response_description="Counts by route and status, latency percentiles of /search.",
    )
    async def metrics_route() -> Metrics:
        return server.metrics()

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError) -> JSONResponse:
        return _error(400, str(exc), exc.field)

    @app.exception_handler(_Failed)
    async def failed(request: Request, exc: _Failed) -> JSONResponse:
        return _error(exc.status, str(exc), None, exc.headers)

    @app.exception_handler(HTTPException)
    async def unrouted(request: Request, exc: HTTPException) -> JSONResponse:
        """A 404 or 405 as JSON; the connection closes, since a body may be left unread."""
        path = request.url.path
        closing = {"Connection": "close"}
        if exc.status_code == 404:
            return _error(404, f"no such path {path}; see /openapi.json", None, closing)
        if exc.status_code == 405:
            allowed = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", ")))
            message = f"{request.method} {path}: use {allowed}"
            return _error(405, message, None, {"Allow": allowed, **closing})
        return _error(exc.status_code, str(exc.detail), None, exc.headers)

    return app


# ---------------------------------------------------------------- the protocol


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's line and headers (a client
    that opens a connection, or starts a request, and does not finish its head in time gets a
    408 and the connection closes), and a JSON 400 naming what is wrong with a request that is
    no valid HTTP (conflicting Content-Length headers, a Content-Length that is no number), or
    a 431 for a head that grows past the limit."""

    head_timeout_s = LIMITS.head_timeout_s
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_late)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiting = self.conn.their_state is h11.IDLE and not self.transport.is_closing()
        if not waiting:
            self._stop_head_timer()
        elif self._head_timer is None:  # the first bytes of a head on a kept-alive connection
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            late = f"request line and headers not received within {self.head_timeout_s:g} s"
            self._refuse(408, late)

    def send_400_response(self, msg: str) -> None:
        """Called by uvicorn while h11's ``RemoteProtocolError`` is being handled: its status
        (431 for a head growing past ``max_head_bytes``, else 400) and what is wrong."""
        cause = sys.exc_info()[1]
        status = getattr(cause, "error_status_hint", 400)
        if status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            limit = self.config.h11_max_incomplete_event_size
            self._refuse(status, f"request line and headers larger than {limit:,} bytes")
        else:
            self._refuse(400, f"malformed request: {cause or msg}")

    def _refuse(self, status: int, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


# ---------------------------------------------------------------- the server


def _stamp(path: Path | None) -> tuple[int, ...] | None:
    """What changes when a collection is worth opening again (``collection_version``)."""
    return None if path is None else collection_version(path)


def _listen(host: str, port: int, backlog: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (``OSError`` when it cannot)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio then disables Nagle's algorithm on each connection, so a
    # response's head and body go out at once (no delayed-ACK stall on kept-alive connections)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


class SearchServer:
    """The HTTP JSON API over one collection, opened and warmed up before it listens; with
    ``path`` (the collection's folder) it answers from the collection as last saved there.
    ``serve_forever`` serves until ``shutdown`` (or a signal, on the main thread);
    ``background`` serves in a thread while a block runs (tests, notebooks)."""

    def __init__(
        self,
        pipeline: RAGPipeline,
        name: str,
        host: str = "127.0.0.1",
        port: int = 8765,
        allow_remote: bool = False,
        path: Path | str | None = None,
        limits: ServeLimits = LIMITS,
    ) -> None:
        check_host(host, allow_remote)
        check_port(port)
        self.pipeline = pipeline
        self.name = name
        self.path = Path(path) if path is not None else None
        self.limits = limits
        self.meter = _Meter(limits.latency_window)
        self._stamp = _stamp(self.path)
        self._models: dict[tuple[str, ...], type[BaseModel]] = {}
        self._gone: str | None = None
        self._unopened: str | None = None
        self._turn = asyncio.Lock()  # one search at a time: indexes and models are shared
        # ... and always on the same thread, so the model libraries keep one pool of threads
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="ragbench-search")
        self.started = time.time()
        self._worker.submit(warm_up, pipeline).result()  # the models load before it listens
        self.socket = _listen(host, port, limits.backlog)
        protocol = type("Protocol", (_Protocol,), {"head_timeout_s": limits.head_timeout_s})
        self.app = create_app(self)
        config = uvicorn.Config(
            self.app,
            http=protocol,
            ws="none",  # an Upgrade header is ignored: the API has no WebSocket
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            headers=[("server", f"ragbench/{__version__}")],
            backlog=limits.backlog,
            limit_concurrency=limits.max_connections,
            timeout_keep_alive=limits.keep_alive_s,
            timeout_graceful_shutdown=limits.shutdown_timeout_s,
            h11_max_incomplete_event_size=limits.max_head_bytes,
        )
        self._server = uvicorn.Server(config)
        self._stopped = threading.Event()  # set while it is not serving
        self._stopped.set()

    @property
    def url(self) -> str:
        """The base URL the server listens on."""
        host, port = self.socket.getsockname()[:2]
        shown = f"[{host}]" if self.socket.family == socket.AF_INET6 else host
        return f"http://{shown}:{port}"

    def serve_forever(self) -> None:
        """Answer requests until ``shutdown`` is called (or, on the main thread, SIGINT or
        SIGTERM: then the signal is raised again once requests in flight finished); once."""
        self._stopped.clear()
        try:
            self._server.run(sockets=[self.socket])
        finally:
            self._stopped.set()

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop ``serve_forever`` (from another thread) and wait until it returned."""
        self._server.should_exit = True
        self._stopped.wait(timeout)

    def close(self) -> None:
        """Release the listening socket (``serve_forever`` releases it when it stops) and the
        search thread."""
        self.socket.close()
        self._worker.shutdown(wait=False)

    def __enter__(self) -> SearchServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def background(self) -> Iterator[str]:
        """Serve in a daemon thread while the block runs; yields the base URL."""
        thread = threading.Thread(target=self.serve_forever, name="ragbench-serve", daemon=True)
        thread.start()
        try:
            while not self._server.started and thread.is_alive():
                time.sleep(0.01)
            yield self.url
        finally:
            self.shutdown()
            self.close()

    def current(self) -> RAGPipeline:
        """The pipeline to answer from (call it in turn: ``in_turn``): reopened when the
        collection was saved again since it was loaded (a re-ingest; an ingest still running
        holds the collection until it saves, and the loaded one answers meanwhile). When the
        new save cannot be opened, or the folder is gone, the loaded one goes on answering,
        ``stale`` says why and the log says it once, in one line."""
        if self.path is None:
            return self.pipeline
        stamp = _stamp(self.path)
        if stamp is None:  # gone (or, for an instant, between the two renames of a save)
            self._gone = f"{self.path}: the collection's folder is gone"
            return self.pipeline
        self._gone = None
        if stamp == self._stamp:
            return self.pipeline
        self._stamp = stamp
        try:
            fresh = RAGPipeline.open(self.path)
        except Exception as exc:
            said = " ".join(str(exc).split())
            if not isinstance(exc, RagbenchError | OSError):  # a fault of ragbench's own
                said = f"{type(exc).__name__}: {said}"
                logger.debug("reopening %s", self.path, exc_info=True)
            self._unopened = f"{self.path}: the collection as saved last cannot be opened: {said}"
            logger.warning("%s; answering from the copy loaded before", self._unopened)
            return self.pipeline
        if fresh.trial.id == self.pipeline.trial.id:
            fresh.env = self.pipeline.env  # the same models, loaded already
        warm_up(fresh)
        self.pipeline = fresh
        self._unopened = None
        return fresh

    def request_model(self, retrievers: tuple[str, ...]) -> type[BaseModel]:
        """The ``POST /search`` body for a collection serving ``retrievers``, with the
        server's limits (made once per set of retrievers: a reopened collection may serve
        others)."""
        if retrievers not in self._models:
            self._models[retrievers] = request_model(retrievers, self.limits)
        return self._models[retrievers]

    @property
    def stale(self) -> str | None:
        """Why the pipeline answering is older than the collection as saved last, or None."""
        return self._gone or self._unopened

    async def in_turn(self, work: Callable[[RAGPipeline], T], what: str) -> T:
        """``work`` on the current pipeline, in a worker thread, once the requests before it
        are done; ``_Failed`` (503) after waiting ``queue_timeout_s``, (500) when it raises
        anything but a ``RequestError`` (a bad field: a 400)."""
        waited = self.limits.queue_timeout_s
        try:
            async with asyncio.timeout(waited):
                await self._turn.acquire()
        except TimeoutError:
            message = f"busy: no turn within {waited:g} s; try again"
            raise _Failed(503, message, {"Retry-After": "1"}) from None
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._worker, lambda: work(self.current()))
        except RequestError:
            raise
        except Exception as exc:  # one line to the client, the traceback to the log
            logger.exception("%s failed", what)
            said = " ".join(str(exc).split())
            raise _Failed(500, f"{what} failed: {type(exc).__name__}: {said}") from None
        finally:
            self._turn.release()

    def health(self, pipeline: RAGPipeline) -> Health:
        """What ``GET /health`` returns about ``pipeline`` (the current one)."""
        embedder = pipeline.trial.get("embedder")
        stale = self.stale
        return Health(
            status="ok" if stale is None else "stale",
            stale=stale,
            collection=self.name,
            documents=len(pipeline.document_ids),
            chunks=len(pipeline.chunks),
            pipeline=pipeline.trial.label,
            retriever=pipeline.trial["retriever"].kind,
            retrievers=list(pipeline.retrievers),
            embedder=embedder.label() if embedder is not None else None,
            uptime_s=round(time.time() - self.started, 3),
            version=__version__,
        )

    def metrics(self) -> Metrics:
        """What ``GET /metrics`` returns."""
        return Metrics(
            requests=self.meter.requests(),
            search=self.meter.latency(),
            uptime_s=round(time.time() - self.started, 3),
        )
