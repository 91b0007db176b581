"""Chat and embeddings against any OpenAI-compatible endpoint, cached by content.

One :class:`LLMClient` per endpoint config talks through the official ``openai`` SDK (OpenAI,
vLLM, Ollama, llama.cpp server, a LiteLLM proxy, or ``ragbench.testing``'s scripted server). The
SDK retries 429/5xx and timeouts with exponential backoff (``max_retries``); ``max_concurrency``
bounds parallel requests. Every call is looked up in an :class:`LLMCache` first, keyed by the
endpoint, model, messages and every parameter that changes the reply, so re-running a sweep makes
no request. Token usage — and cost, from the model's price when one is given — is counted per
call, cached calls included (their usage is what they cost when they were made).

A call may give a JSON ``schema`` its reply should follow. It goes as structured output: OpenAI's
``response_format`` ``json_schema`` (OpenAI, vLLM, Ollama, llama.cpp's ``llama-server``), else
llama-cpp-python's ``json_object`` with a ``schema`` (its server rejects ``json_schema``), else
nothing (the prompt alone asks for the schema). The first such request of a client tries them in
that order — each sent once without retries, as a refusal is an answer (llama-cpp-python refuses
with HTTP 500, which the SDK would retry), other failures then retried as usual — and the client
keeps the first its endpoint accepts. The cache keys the schema, not the form it went in, so a
rerun makes no request whatever the endpoint.

Credentials follow ``ragbench.endpoints``: the key is resolved by the policy and passed
explicitly (the SDK never reads ``OPENAI_API_KEY`` on its own here), and a request to a loopback
host bypasses proxy settings, so a key for a local server never travels to a proxy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

import numpy as np
from pydantic import Field

from ragbench.endpoints import EndpointOptions, is_loopback
from ragbench.errors import RagbenchError
from ragbench.llm.cache import LLMCache
from ragbench.registry import ConfigModel

__all__ = ["Completion", "LLMClient", "LLMConfig", "LLMError", "LLMOptions", "Price", "Usage"]


class LLMError(RagbenchError):
    """An endpoint failed after its retries, or returned something unusable."""


class Price(ConfigModel):
    """US dollars per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class LLMOptions(EndpointOptions):
    """The options of any component that calls an OpenAI-compatible model: where it is
    (``base_url``, ``credential``; see ``ragbench.endpoints``) and what to send."""

    unlabelled: ClassVar[frozenset[str]] = frozenset(
        {"base_url", "credential", "timeout", "max_retries", "max_concurrency"}
    )
    """Options left out of readable labels: where a model runs, not what it does."""

    model: str
    temperature: float = Field(0.0, ge=0)
    seed: int | None = 0
    max_tokens: int | None = Field(None, gt=0)
    timeout: float = Field(60.0, gt=0)
    max_retries: int = Field(4, ge=0)
    max_concurrency: int = Field(4, gt=0)


class LLMConfig(LLMOptions):
    """An OpenAI-compatible model on its own (e.g. ``evaluation.llm``, the ragas judge)."""


@dataclass(frozen=True)
class Completion:
    """One chat reply with its token usage, cost and where it came from."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    cached: bool
    seconds: float


@dataclass
class Usage:
    """Running totals of a client: requests made, calls served from the cache, tokens, cost."""

    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, completion: Completion) -> None:
        """Count one call."""
        with self._lock:
            self.requests += 0 if completion.cached else 1
            self.cached += 1 if completion.cached else 0
            self.prompt_tokens += completion.prompt_tokens
            self.completion_tokens += completion.completion_tokens
            self.cost += completion.cost or 0.0


def _without_authorization(request: Any) -> None:
    """Drop the SDK's placeholder key: an endpoint without a credential gets no header."""
    request.headers.pop("Authorization", None)


log = logging.getLogger(__name__)

_CHAT_REPLY = {"text": str, "prompt_tokens": int, "completion_tokens": int}
_EMBEDDINGS_REPLY = {"vectors": list, "prompt_tokens": int}

_ResponseFormat = Callable[[Mapping[str, Any]], dict[str, Any]]

_FORMATS: tuple[_ResponseFormat, ...] = (
    lambda schema: {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": dict(schema)},
    },
    lambda schema: {"type": "json_object", "schema": dict(schema)},
)
"""The forms a reply's JSON schema is sent in, tried in order (see the module docstring)."""


def _formatted(
    request: Mapping[str, Any], schema: Mapping[str, Any], form: _ResponseFormat | None
) -> dict[str, Any]:
    """``request`` asking for ``schema`` in ``form`` (None: as it is)."""
    return {**request, **({"response_format": form(schema)} if form is not None else {})}


def _rejects_format(exc: Exception) -> bool:
    """Whether ``exc`` is an endpoint refusing the request's ``response_format`` (llama-cpp-python
    answers one it does not know with HTTP 500, others with 400 or 422)."""
    from openai import APIStatusError

    return (
        isinstance(exc, APIStatusError)
        and exc.status_code in (400, 422, 500)
        and "response_format" in f"{exc.message} {exc.body}"
    )


def _cost(price: Price | None, prompt: int, completion: int) -> float | None:
    if price is None:
        return None
    return (prompt * price.input + completion * price.output) / 1e6


class LLMClient:
    """Chat completions and embeddings of one model's options, through the cache; ``price``
    (when known) puts a cost on each call."""

    def __init__(
        self,
        config: LLMOptions,
        cache: LLMCache | None = None,
        where: str = "llm",
        price: Price | None = None,
    ) -> None:
        self.config = config
        self.price = price
        self.endpoint = config.endpoint(where)
        self.cache = cache
        self.usage = Usage()
        self._client: Any = None
        self._lock = threading.Lock()
        self._form: _ResponseFormat | None = None  # how this endpoint takes a schema
        self._form_known = False
        self._form_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The API base URL: the endpoint's, with ``/v1`` added when it has no path."""
        base = self.endpoint.url.rstrip("/")
        return base if urlsplit(base).path not in ("", "/") else base + "/v1"

    @property
    def client(self) -> Any:
        """The ``openai.OpenAI`` client (created on first use)."""
        with self._lock:
            if self._client is None:
                import httpx
                from openai import OpenAI

                host = urlsplit(self.endpoint.url).hostname or ""
                hooks = {} if self.endpoint.api_key else {"request": [_without_authorization]}
                http = httpx.Client(trust_env=not is_loopback(host), event_hooks=hooks)
                self._client = OpenAI(
                    base_url=self.url,
                    api_key=self.endpoint.api_key or "unused",  # never the SDK's env lookup
                    timeout=self.config.timeout,
                    max_retries=self.config.max_retries,
                    http_client=http,
                )
            return self._client

    def _cached(self, key: str, shape: Mapping[str, type]) -> dict[str, Any] | None:
        """The cached reply under ``key`` when its fields have the types of ``shape``; one of
        another shape is damage of the cache, logged and asked again."""
        found = self.cache.get(key) if self.cache is not None else None
        if found is None:
            return None
        if all(type(found.get(name)) is kind for name, kind in shape.items()):
            return found
        log.warning("LLM cache: the reply under %s is damaged; asking again", key[:12])
        return None

    def _key(self, kind: str, payload: Mapping[str, Any]) -> str:
        identity = {"kind": kind, "url": self.url, **payload}
        text = json.dumps(identity, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        schema: Mapping[str, Any] | None = None,
        **params: Any,
    ) -> Completion:
        """One reply to ``messages`` (``params`` override the config's temperature, seed,
        max_tokens), from the cache when the same request was made before; ``schema`` is a JSON
        schema the reply should follow, sent as structured output where the endpoint takes it."""
        c = self.config
        request = {
            "model": c.model,
            "messages": [dict(m) for m in messages],
            "temperature": c.temperature,
            "seed": c.seed,
            "max_tokens": c.max_tokens,
            **params,
        }
        request = {k: v for k, v in request.items() if v is not None}
        key = self._key("chat", request | ({"schema": schema} if schema is not None else {}))
        found = self._cached(key, _CHAT_REPLY)
        if found is not None:  # the seconds it took when it was made
            completion = Completion(
                found["text"],
                found["prompt_tokens"],
                found["completion_tokens"],
                _cost(self.price, found["prompt_tokens"], found["completion_tokens"]),
                cached=True,
                seconds=float(found.get("seconds", 0.0)),
            )
        else:
            completion = self._request(request, schema)
            if self.cache is not None:
                self.cache.put(
                    key,
                    {
                        "text": completion.text,
                        "prompt_tokens": completion.prompt_tokens,
                        "completion_tokens": completion.completion_tokens,
                        "seconds": completion.seconds,
                    },
                )
        self.usage.add(completion)
        return completion

    def _failure(self, exc: Exception) -> LLMError:
        """A one-line error naming the endpoint and what went wrong."""
        from openai import APIConnectionError, APIStatusError, APITimeoutError

        where = f"{self.url} (model {self.config.model})"
        if isinstance(exc, APIStatusError):
            detail = " ".join(str(exc.message).split())[:300]
            return LLMError(f"{where} returned HTTP {exc.status_code}: {detail}")
        if isinstance(exc, APITimeoutError):
            return LLMError(f"{where} did not answer within {self.config.timeout:g} s")
        if isinstance(exc, APIConnectionError):
            return LLMError(f"cannot reach {where}: {exc.__cause__ or exc}")
        return LLMError(f"{where}: {exc}")

    def _request(self, request: Mapping[str, Any], schema: Mapping[str, Any] | None) -> Completion:
        from openai import OpenAIError

        started = time.perf_counter()
        try:
            response = self._create(request, schema)
        except OpenAIError as exc:
            raise self._failure(exc) from exc
        seconds = time.perf_counter() - started
        if not response.choices:
            raise LLMError(f"{self.url} (model {self.config.model}): no choices in the reply")
        text = response.choices[0].message.content or ""
        usage = response.usage
        prompt = int(usage.prompt_tokens) if usage is not None else 0
        completion = int(usage.completion_tokens) if usage is not None else 0
        cost = _cost(self.price, prompt, completion)
        return Completion(text, prompt, completion, cost, cached=False, seconds=seconds)

    def _create(self, request: Mapping[str, Any], schema: Mapping[str, Any] | None) -> Any:
        """The SDK's reply to ``request``, asking for ``schema`` in the first of ``_FORMATS`` the
        endpoint accepts, or in none (found by the first call with a schema; others wait)."""
        from openai import OpenAIError

        if schema is None:
            return self.client.chat.completions.create(**request)
        with self._form_lock:
            if not self._form_known:
                for form in _FORMATS:
                    try:
                        response = self._try(_formatted(request, schema, form))
                    except OpenAIError as exc:
                        if _rejects_format(exc):
                            continue
                        raise
                    self._form, self._form_known = form, True
                    return response
                self._form_known = True  # none taken: the prompt alone asks for the schema
        return self.client.chat.completions.create(**_formatted(request, schema, self._form))

    def _try(self, request: Mapping[str, Any]) -> Any:
        """The SDK's reply to ``request``: sent once, then with the SDK's retries unless the
        endpoint refused its ``response_format``."""
        from openai import OpenAIError

        try:
            return self.client.with_options(max_retries=0).chat.completions.create(**request)
        except OpenAIError as exc:
            if _rejects_format(exc):
                raise
        return self.client.chat.completions.create(**request)

    def chat_many(
        self,
        conversations: Sequence[Sequence[Mapping[str, str]]],
        schema: Mapping[str, Any] | None = None,
        **params: Any,
    ) -> list[Completion]:
        """Replies to many conversations, ``max_concurrency`` requests at a time, in order."""
        if len(conversations) <= 1 or self.config.max_concurrency == 1:
            return [self.chat(m, schema, **params) for m in conversations]
        with ThreadPoolExecutor(self.config.max_concurrency) as pool:
            return list(pool.map(lambda m: self.chat(m, schema, **params), conversations))

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Embedding vectors of ``texts`` (float64 rows, as sent), ``batch_size`` texts per request,
        each batch from the cache when it was embedded before."""
        from openai import OpenAIError

        rows: list[list[float]] = []
        for start in range(0, len(texts), batch_size):
            batch = list(texts[start : start + batch_size])
            key = self._key("embeddings", {"model": self.config.model, "input": batch})
            found = self._cached(key, _EMBEDDINGS_REPLY)
            if found is None:
                try:
                    response = self.client.embeddings.create(model=self.config.model, input=batch)
                except OpenAIError as exc:
                    raise self._failure(exc) from exc
                vectors = [item.embedding for item in sorted(response.data, key=lambda d: d.index)]
                if len(vectors) != len(batch):
                    raise LLMError(
                        f"{self.url} (model {self.config.model}): {len(vectors)} embeddings "
                        f"for {len(batch)} texts"
                    )
                tokens = int(response.usage.prompt_tokens) if response.usage else 0
                found = {"vectors": vectors, "prompt_tokens": tokens}
                if self.cache is not None:
                    self.cache.put(key, found)
                self.usage.add(
                    Completion(
                        "",
                        tokens,
                        0,
                        _cost(self.price, tokens, 0),
                        cached=False,
                        seconds=0.0,
                    )
                )
            else:
                self.usage.add(
                    Completion(
                        "",
                        found["prompt_tokens"],
                        0,
                        _cost(self.price, found["prompt_tokens"], 0),
                        cached=True,
                        seconds=0.0,
                    )
                )
            rows.extend(found["vectors"])
        return np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
