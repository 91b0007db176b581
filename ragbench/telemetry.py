"""OpenTelemetry spans of sweep trials and of every stage they compute or load.

Off unless enabled, by (first that applies) an experiment config's ``telemetry`` section
(``exporter: console | otlp``, ``endpoint``), ``use(provider)`` (an application's own tracer
provider, for this process), or the environment variable ``RAGBENCH_TELEMETRY`` (``console`` or
``otlp``; the OTLP exporter then reads the standard ``OTEL_EXPORTER_OTLP_*`` variables). While
off, ``span`` returns a shared no-op span after one check, and opentelemetry is never imported.

Span names are stage names (``chunks``, ``doc_vectors``, ``bm25_index``, ``dense``, ``fusion``,
``rerank``, ...) and ``trial``, ``evaluate``, ``latency``, and a pipeline's ``ingest``,
``search`` and ``delete``. Attributes are ``ragbench.*`` (``key``, ``area``, ``cache_hit``,
``update``, ``rows``, ``items``, ``queries``, ``trial_id``, ``label``, ``status``, ...) and,
where a stage calls an LLM, the GenAI semantic conventions' ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` and ``output_tokens``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, TYPE_CHECKING, Any, Literal, cast

from pydantic import model_validator

from ragbench.errors import ConfigError
from ragbench.registry import ConfigModel

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

__all__ = ["ENV", "Span", "TelemetrySpec", "flush", "setup", "span", "suppressed", "use"]

ENV = "RAGBENCH_TELEMETRY"
_OTEL_EXTRA = "pip install ragbench[otel]"
_OTLP_PACKAGE = "pip install opentelemetry-exporter-otlp"

Attribute = str | bool | int | float


class TelemetrySpec(ConfigModel):
    """Where spans go: printed to stderr (``console``) or sent to an OTLP collector (``otlp``;
    ``endpoint`` is its traces URL, e.g. ``http://localhost:4318/v1/traces``, default the
    exporter's own or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""

    exporter: Literal["console", "otlp"]
    endpoint: str | None = None

    @model_validator(mode="after")
    def _endpoint_needs_otlp(self) -> TelemetrySpec:
        if self.endpoint is not None and self.exporter != "otlp":
            raise ValueError("endpoint: only the otlp exporter sends spans to an endpoint")
        return self


class Span:
    """A span being recorded — or, this base class, none: every method does nothing."""

    recording = False
    """Whether attributes are kept (compute costly ones only then)."""

    def __enter__(self) -> Span:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, **attributes: Attribute | None) -> None:
        """Set ``ragbench.<name>`` attributes (None values are left out)."""

    def tokens(self, model: str, prompt: int, completion: int) -> None:
        """Record an LLM call's model and tokens (GenAI semantic conventions)."""

    def fail(self, message: str) -> None:
        """Mark the span as failed with ``message``."""


class _Recording(Span):
    recording = True

    def __init__(self, tracer: Tracer, name: str, attributes: Mapping[str, Attribute]) -> None:
        self._tracer, self._name, self._attributes = tracer, name, attributes

    def __enter__(self) -> Span:
        self._manager = self._tracer.start_as_current_span(self._name, attributes=self._attributes)
        self._span = self._manager.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._manager.__exit__(*exc)

    def set(self, **attributes: Attribute | None) -> None:
        self._span.set_attributes(_attributes(attributes))

    def tokens(self, model: str, prompt: int, completion: int) -> None:
        self._span.set_attributes(
            {
                "gen_ai.request.model": model,
                "gen_ai.usage.input_tokens": int(prompt),
                "gen_ai.usage.output_tokens": int(completion),
            }
        )

    def fail(self, message: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_status(Status(StatusCode.ERROR, message))


def _attributes(attributes: Mapping[str, Any]) -> dict[str, Attribute]:
    """``ragbench.``-prefixed attributes, numpy scalars made plain, None values left out."""
    return {
        f"ragbench.{name}": value.item() if hasattr(value, "item") else value
        for name, value in attributes.items()
        if value is not None
    }


_NO_SPAN = Span()
_UNSET: Any = object()
_tracer: Tracer | None = _UNSET  # where spans go (None: off); set up on first use
_given: Tracer | None = None  # from ``use``
_providers: dict[TelemetrySpec, TracerProvider] = {}  # built by ``setup``, one per setting
_quiet: ContextVar[bool] = ContextVar("ragbench_telemetry_quiet", default=False)


def span(name: str, **attributes: Attribute | None) -> Span:
    """A span ``name`` under the current one, with ``ragbench.*`` attributes; a no-op unless
    telemetry is enabled (see the module docstring)."""
    if _tracer is _UNSET:
        setup()
    if _tracer is None or _quiet.get():
        return _NO_SPAN
    return _Recording(_tracer, name, _attributes(attributes))


@contextmanager
def suppressed() -> Iterator[None]:
    """No span inside the block (a latency pass runs each stage thousands of times)."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def use(provider: TracerProvider | None) -> None:
    """Send this process's spans to ``provider`` (an application's own tracer provider, e.g.
    with an in-memory exporter), or stop with None; a config's ``telemetry`` section still
    takes precedence for its run."""
    global _tracer, _given
    _given = provider.get_tracer("ragbench") if provider is not None else None
    _tracer = _given


def setup(settings: TelemetrySpec | None = None, where: str = "telemetry.exporter") -> None:
    """Enable spans as a config's ``telemetry`` section (``settings``) says, else as ``use``
    or ``RAGBENCH_TELEMETRY`` does, else turn them off; a missing package is a ``ConfigError``
    naming ``where`` (the config key) and what to install."""
    global _tracer
    if settings is None and _given is not None:
        _tracer = _given
        return
    if settings is None:
        exporter = os.environ.get(ENV, "").strip()
        if not exporter:
            _tracer = None
            return
        if exporter not in ("console", "otlp"):
            raise ConfigError(f"{ENV}: expected console or otlp, got {exporter!r}")
        settings, where = TelemetrySpec(exporter=cast("Literal['console', 'otlp']", exporter)), ENV
    if settings not in _providers:
        _providers[settings] = _provider(settings, where)
    _tracer = _providers[settings].get_tracer("ragbench")


def flush() -> None:
    """Export the spans ended so far (a pool worker may exit without running exit hooks)."""
    for provider in _providers.values():
        provider.force_flush()


class _Stderr:
    """Writes to ``sys.stderr`` as it is at the time (a notebook or a test may replace it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _provider(settings: TelemetrySpec, where: str) -> TracerProvider:
    """A tracer provider exporting as ``settings`` says."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError:
        raise ConfigError(f"{where}: spans need the 'otel' extra: {_OTEL_EXTRA}") from None
    provider = TracerProvider(resource=Resource.create({"service.name": "ragbench"}))
    if settings.exporter == "console":
        console = ConsoleSpanExporter(out=cast("IO[str]", _Stderr()))
        provider.add_span_processor(SimpleSpanProcessor(console))
    else:
        provider.add_span_processor(BatchSpanProcessor(_otlp(settings.endpoint, where)))
    return provider


def _otlp(endpoint: str | None, where: str) -> SpanExporter:
    """The OTLP span exporter (HTTP/protobuf, else gRPC) of ``opentelemetry-exporter-otlp``."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                f"{where}: the otlp exporter needs opentelemetry-exporter-otlp: {_OTLP_PACKAGE}"
            ) from None
    return OTLPSpanExporter(endpoint=endpoint)
