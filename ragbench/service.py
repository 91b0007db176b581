"""Explained search over a collection, and the limits of the search server.

A collection (``RAGPipeline``) opened once answers many queries: ``search`` runs one query and
says, for every hit, what each first-stage retriever made of it (its rank and score in the BM25
list and in the dense list) and on which scale its score is (``score_scale``: BM25 score,
cosine, RRF, ...). ``ragbench search`` prints the result; the HTTP API (``ragbench.api``)
returns it as its response body, so ``Found``, ``SearchHit`` and ``SearchResult`` are pydantic
models. ``ServeLimits`` holds every limit of the server in one place: what a request may hold
(checked by ``check_query`` here and by the API's request model, and stated in its OpenAPI
document) and how long and how many connections it waits for.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from ragbench.endpoints import is_loopback
from ragbench.errors import ConfigError
from ragbench.pipeline import RAGPipeline

__all__ = [
    "LIMITS",
    "MAX_K",
    "Found",
    "RequestError",
    "SearchHit",
    "SearchResult",
    "ServeLimits",
    "check_host",
    "check_port",
    "check_query",
    "score_scale",
    "search",
    "warm_up",
]


# ---------------------------------------------------------------- limits


class ServeLimits(BaseModel):
    """What the search server accepts and how long it waits: its request checks, its OpenAPI
    document and its HTTP server all read these."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(1 << 20, gt=0, description="Bytes of a request body.")
    max_query_chars: int = Field(10_000, gt=0, description="Characters of a query.")
    max_k: int = Field(1000, gt=0, description="Hits one search may ask for.")
    max_head_bytes: int = Field(
        16_384, gt=0, description="Bytes a request line and headers may take while they arrive."
    )
    backlog: int = Field(2048, gt=0, description="Connections the OS queues before accepting.")
    max_connections: int = Field(
        512, gt=0, description="Connections open at once; a request beyond them gets a 503."
    )
    keep_alive_s: int = Field(5, gt=0, description="An idle connection stays open this long.")
    head_timeout_s: float = Field(
        10.0, gt=0, description="A request line and headers arrive within this, else a 408."
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="A request body arrives within this, else a 408."
    )
    queue_timeout_s: float = Field(
        30.0, gt=0, description="A request waits this long at most for its turn, else a 503."
    )
    shutdown_timeout_s: int = Field(
        5, ge=0, description="When stopping, requests in flight get this long to finish."
    )
    latency_window: int = Field(
        10_000, gt=0, description="The latest searches the latency percentiles are of."
    )


LIMITS = ServeLimits()
MAX_K = LIMITS.max_k  # what `ragbench search -k` allows: as the server does


class RequestError(ConfigError):
    """A bad request (or query): ``field`` names the field at fault (``body`` for the whole
    body)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_query(query: object, max_chars: int = LIMITS.max_query_chars) -> str:
    """``query`` when it is one to search for (a string with a word in it, at most
    ``max_chars`` characters, valid Unicode), else ``RequestError`` naming the field
    ``query``: the API and the command line refuse the same queries."""
    if not isinstance(query, str) or not query.strip():
        shown = json.dumps(query, default=repr)
        raise RequestError("query", f"expected a non-empty string, got {shown}")
    if len(query) > max_chars:
        raise RequestError("query", f"longer than {max_chars:,} characters")
    lone = _SURROGATE.search(query)  # a \udc80 JSON escape, an undecodable command-line byte
    if lone is not None:
        where = f"{lone.group()!a} at character {lone.start()}"
        raise RequestError("query", f"not valid Unicode: a lone surrogate {where}")
    return query


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


# ---------------------------------------------------------------- explained search

_FROZEN = ConfigDict(frozen=True)


class Found(BaseModel):
    """Where one first-stage retriever put a hit: its 1-based rank and score in that list."""

    model_config = _FROZEN

    rank: int = Field(ge=1)
    score: float = Field(description="On that list's scale (found_by_scales).")


class SearchHit(BaseModel):
    """A hit, and per first-stage list searched (``bm25``, ``dense``) where it was in that
    list (None: not among the list's hits)."""

    model_config = _FROZEN

    rank: int = Field(ge=1)
    score: float = Field(description="On the scale of score_scale.")
    chunk_id: str
    doc_id: str
    text: str
    start: int = Field(description="Offset of the text in its document.")
    end: int
    metadata: dict[str, Any]
    found_by: dict[str, Found | None] = Field(
        description="Per first-stage list searched: where it had the hit (null: not among its "
        "hits)."
    )

    def to_json(self) -> dict[str, Any]:
        """The hit as the API returns it (its fields, in order)."""
        return self.model_dump(mode="json")


class SearchResult(BaseModel):
    """One query's hits, the retriever that ran, what the scores mean (score_scale for a
    hit's score, found_by_scales for each first-stage list's; ``scale`` and ``scales`` in
    Python), and the time the search took."""

    model_config = ConfigDict(frozen=True, serialize_by_alias=True)

    query: str
    retriever: str = Field(description="The first stage that ran.")
    scale: str = Field(serialization_alias="score_scale", description="What a hit's score means.")
    scales: dict[str, str] = Field(
        serialization_alias="found_by_scales",
        description="What each first-stage list's scores mean.",
    )
    took_ms: float = Field(description="The search alone, in the server.")
    stages_ms: dict[str, float] = Field(default_factory=dict, description="Per stage.")
    hits: list[SearchHit] = Field(description="Best first.")

    @field_serializer("took_ms")
    def _round(self, value: float) -> float:
        return round(value, 3)

    @field_serializer("stages_ms")
    def _round_each(self, value: dict[str, float]) -> dict[str, float]:
        return {stage: round(ms, 3) for stage, ms in value.items()}

    def to_json(self) -> dict[str, Any]:
        """The result as the API returns it."""
        return self.model_dump(mode="json")


def score_scale(pipeline: RAGPipeline, retriever: str | None = None) -> str:
    """What the scores of ``pipeline``'s hits mean when ``retriever`` (default: its own) runs:
    the reranker's scale when it has one, else the retriever's (each kind says what its scores
    mean: ``ComponentConfig.score_scale``)."""
    reranker = pipeline.trial.get("reranker")
    own = pipeline.retriever(retriever)
    scale = reranker.score_scale() if reranker is not None else None
    return scale or own.score_scale() or f"{own.kind} retriever score"


def _check_filter(filter: Mapping[str, Any] | None) -> None:
    """``RequestError`` naming ``filter`` for a value no chunk's metadata can equal as meant
    (a list or an object: the filter is an exact match on one value per key)."""
    for key, value in (filter or {}).items():
        if isinstance(value, (list, dict)):
            shown = json.dumps(value, default=repr)
            raise RequestError(
                "filter",
                f"key {key!r}: expected one value to match exactly (a string, number or "
                f"boolean), got {shown}",
            )


def _unknown_keys(pipeline: RAGPipeline, filter: Mapping[str, Any]) -> None:
    """``RequestError`` naming ``filter`` when a search found nothing because no chunk has one
    of its keys (a typo, or a field of the hits that is no metadata): an empty answer would
    say nothing matches. Read only when a filtered search found nothing."""
    keys: set[str] = set()
    for chunk in pipeline.chunks.values():
        keys.update(chunk.metadata)
        if keys.issuperset(filter):
            return
    missing = sorted(set(filter) - keys)
    raise RequestError(
        "filter",
        f"no chunk has the metadata key {', '.join(map(repr, missing))} (keys: "
        f"{', '.join(sorted(keys)) or 'none'})",
    )


def search(
    pipeline: RAGPipeline,
    query: str,
    k: int = 10,
    filter: Mapping[str, Any] | None = None,
    retriever: str | None = None,
) -> SearchResult:
    """The top ``k`` hits for ``query`` (metadata ``filter``: exact match; ``retriever``: one
    of ``pipeline.retrievers``), each with its place in every first-stage list; a query
    ``check_query`` refuses is a ``RequestError``, as in a request."""
    check_query(query)
    _check_filter(filter)
    started = time.perf_counter()
    found = pipeline.search([query], k, filter, retriever)
    took_ms = (time.perf_counter() - started) * 1000
    chunks = pipeline.chunks
    lists = {
        name: {cid: Found(rank=rank, score=score) for rank, (cid, score) in enumerate(r.row(0), 1)}
        for name, r in sorted(found.found.items())
    }
    hits: list[SearchHit] = []
    for cid, score in found.ranking.row(0):
        chunk = chunks.get(cid)
        if chunk is None:  # replaced by an ingest after the indexes were written out
            continue
        hits.append(
            SearchHit(
                rank=len(hits) + 1,
                score=score,
                chunk_id=cid,
                doc_id=chunk.doc_id,
                text=chunk.text,
                start=chunk.start,
                end=chunk.end,
                metadata=dict(chunk.metadata),
                found_by={name: where.get(cid) for name, where in lists.items()},
            )
        )
    if filter and not hits:
        _unknown_keys(pipeline, filter)
    return SearchResult(
        query=query,
        retriever=retriever or pipeline.trial["retriever"].kind,
        scale=score_scale(pipeline, retriever),
        scales={name: found.scales[name] for name in lists},
        hits=hits,
        took_ms=took_ms,
        stages_ms={stage: float(s[0]) * 1000 for stage, s in found.timings.items() if len(s)},
    )


def warm_up(pipeline: RAGPipeline, retrievers: Sequence[str | None] | None = None) -> float:
    """Load what ``pipeline`` searches with (models, indexes) by one search per retriever
    (default: each it serves); returns the seconds it took, which no query's time counts."""
    started = time.perf_counter()
    for retriever in pipeline.retrievers if retrievers is None else retrievers:
        pipeline.search(["warm up"], 1, None, retriever)
    return time.perf_counter() - started
