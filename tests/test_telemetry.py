"""OpenTelemetry spans: a ``trial`` span per trial with its stages below it (cache hits flip on
a rerun, sizes and LLM tokens as attributes), ``ingest``, ``search`` and ``delete`` spans of a
pipeline over the stages they run, exporters chosen by config or environment, and nothing at
all (not even an import) while telemetry is off."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ragbench import telemetry
from ragbench.errors import ConfigError
from ragbench.experiment.config import expand, load_config
from ragbench.experiment.runner import RunResult, run
from ragbench.pipeline import RAGPipeline
from ragbench.testing import scripted_llm_server
from ragbench.types import Document
from tests.paths import DEMO, require

QUERIES = 4
INDEX_STAGES = {"chunks", "doc_vectors", "dense_index", "bm25_index"}


def _config(**extra: Any) -> dict[str, Any]:
    return {
        "name": "spans",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": ["ndcg@10", "recall@20"], "depth": 20},
        "latency": {"queries": 2, "repeats": 1},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
            "embedder": [{"kind": "hashing", "dim": 64}],
            "retriever": [{"kind": "bm25"}, {"kind": "hybrid"}],
        },
        **extra,
    }


def _run(config: dict[str, Any], tmp_path: Path, **options: Any) -> RunResult:
    """A run of ``config`` on the first queries, in ``tmp_path`` with its own stage cache."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    return run(config, out, cache_root=cache, limit_queries=QUERIES, progress=False, **options)


@pytest.fixture()
def exporter() -> Iterator[InMemorySpanExporter]:
    """Spans of this process, kept in memory (telemetry off again afterwards)."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.use(provider)
    yield spans
    telemetry.use(None)


def _parents(spans: tuple[ReadableSpan, ...]) -> dict[int, ReadableSpan | None]:
    """Span id → its parent span (None for a root), checking every parent was exported."""
    by_id = {s.context.span_id: s for s in spans}
    return {s.context.span_id: None if s.parent is None else by_id[s.parent.span_id] for s in spans}


def _root(span: ReadableSpan, parents: dict[int, ReadableSpan | None]) -> ReadableSpan:
    while (parent := parents[span.context.span_id]) is not None:
        span = parent
    return span


def _stages(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    return [s for s in spans if s.attributes and "ragbench.area" in s.attributes]


def test_a_sweep_emits_trial_spans_over_stage_spans_and_a_rerun_hits_the_cache(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    trials = _run(_config(), tmp_path).trials.set_index("trial_id")
    spans = exporter.get_finished_spans()
    parents = _parents(spans)
    roots = [s for s in spans if parents[s.context.span_id] is None]
    assert sorted(s.name for s in roots) == ["trial", "trial"]  # nothing outside a trial
    by_trial = {s.attributes["ragbench.trial_id"]: s for s in roots}
    assert set(by_trial) == set(trials.index)
    for trial_id, span in by_trial.items():
        assert span.attributes["ragbench.label"] == trials.loc[trial_id, "label"]
        assert span.attributes["ragbench.status"] == "ok"
        assert span.attributes["ragbench.cache_misses"] == trials.loc[trial_id, "cache_misses"]
    under: dict[str, list[ReadableSpan]] = {t: [] for t in by_trial}
    for span in spans:
        if span not in roots:
            under[_root(span, parents).attributes["ragbench.trial_id"]].append(span)

    bm25_id = trials.index[trials["label"].str.startswith("bm25")][0]
    hybrid_id = next(t for t in by_trial if t != bm25_id)
    names = {t: sorted(s.name for s in found) for t, found in under.items()}
    # the latency pass times each query alone without a span per stage: one bm25 span each
    assert names[bm25_id] == ["bm25", "bm25_index", "chunks", "evaluate", "latency"]
    assert names[hybrid_id] == sorted(
        {*names[bm25_id], "dense", "dense_index", "doc_vectors", "fusion", "query_vectors"}
    )
    # stages resolve their inputs on a miss: the chain runs ranking → index → chunks
    named = {s.name: s for s in under[bm25_id]}
    assert parents[named["bm25"].context.span_id] is by_trial[bm25_id]
    assert parents[named["bm25_index"].context.span_id] is named["bm25"]
    assert parents[named["chunks"].context.span_id] is named["bm25_index"]
    assert parents[named["evaluate"].context.span_id] is by_trial[bm25_id]
    assert named["bm25"].attributes["ragbench.rows"] == QUERIES
    assert named["bm25"].attributes["ragbench.queries"] == QUERIES
    assert "ragbench.queries" not in named["chunks"].attributes  # an index-time stage
    assert named["chunks"].attributes["ragbench.items"] > 0
    chunked = named["chunks"].attributes["ragbench.items"]
    assert named["bm25_index"].attributes["ragbench.items"] == chunked
    assert named["evaluate"].attributes["ragbench.metrics"] == 2
    # a cold cache: the first span of every artifact is a miss; the hybrid trial shares chunks
    seen: set[str] = set()
    for span in sorted(_stages(spans), key=lambda s: s.start_time or 0):
        key = span.attributes["ragbench.key"]
        assert span.attributes["ragbench.cache_hit"] is (key in seen), span.name
        seen.add(key)
    hybrid = {s.name: s for s in under[hybrid_id]}
    assert hybrid["chunks"].attributes["ragbench.cache_hit"] is True
    assert hybrid["latency"].attributes["ragbench.cache_hit"] is False

    exporter.clear()
    _run(_config(), tmp_path, overwrite=True)
    again = exporter.get_finished_spans()
    assert sorted(s.name for s in again if s.name == "trial") == ["trial", "trial"]
    stages = _stages(again)
    assert stages and all(s.attributes["ragbench.cache_hit"] is True for s in stages)
    assert {s.attributes["ragbench.key"] for s in stages} <= seen
    assert [s.attributes["ragbench.cache_hit"] for s in again if s.name == "latency"] == [
        True,
        True,
    ]


def test_a_stage_that_calls_an_llm_records_its_tokens(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    with scripted_llm_server() as server:
        config = _config()
        config["sweep"] = {
            "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
            "query": [{"kind": "rewrite", "base_url": server.url, "model": "scripted"}],
            "retriever": [{"kind": "bm25"}],
        }
        result = _run(config, tmp_path)
    row = result.trials.iloc[0]
    spans = {s.name: s for s in exporter.get_finished_spans()}
    query = spans["query"].attributes
    assert query["gen_ai.request.model"] == "scripted"
    assert query["gen_ai.usage.input_tokens"] == round(row["tokens.query.prompt"] * QUERIES)
    assert query["gen_ai.usage.output_tokens"] == round(row["tokens.query.completion"] * QUERIES)
    assert query["gen_ai.usage.input_tokens"] > 0
    assert "gen_ai.usage.input_tokens" not in spans["bm25"].attributes


def _console_spans(text: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporter printed, one per span."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while (start := text.find("{", at)) != -1:
        value, at = decoder.raw_decode(text, start)
        found.append(value)
    return found


def test_the_environment_variable_prints_pipeline_search_spans(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline = RAGPipeline.from_config(
        {"chunker": {"kind": "recursive", "size": 200, "overlap": 0}, "retriever": {"kind": "bm25"}}
    )
    pipeline.index([Document("a", "Kestrel rotates keys nightly."), Document("b", "Port 9743.")])
    monkeypatch.setenv(telemetry.ENV, "console")
    telemetry.setup()
    try:
        hits = pipeline.retrieve("which port", k=1)
    finally:
        monkeypatch.delenv(telemetry.ENV)
        telemetry.setup()
    assert hits[0].chunk.doc_id == "b"
    printed = {s["name"]: s for s in _console_spans(capsys.readouterr().err)}
    assert set(printed) == {"search", "bm25"}  # the live index is provided: no span of its own
    search, bm25 = printed["search"], printed["bm25"]
    assert search["parent_id"] is None
    assert bm25["parent_id"] == search["context"]["span_id"]
    assert search["attributes"]["ragbench.queries"] == 1
    assert "ragbench.cache_hit" not in bm25["attributes"]  # a pipeline has no stage cache
    assert not telemetry.span("off again").recording


def test_ingest_search_and_delete_emit_spans_of_the_stages_they_run(
    exporter: InMemorySpanExporter,
) -> None:
    pipeline = RAGPipeline.from_config(
        {
            "chunker": {"kind": "recursive", "size": 200, "overlap": 0},
            "embedder": {"kind": "hashing", "dim": 64},
            "retriever": {"kind": "hybrid"},
        }
    )
    docs = [Document("a", "Kestrel rotates keys nightly."), Document("b", "Port 9743.")]
    pipeline.index(docs)
    pipeline.index([Document("b", "Port 9744 since May."), Document("c", "ACLs grant access.")])
    assert pipeline.retrieve("which port", k=1)[0].chunk.doc_id == "b"
    assert pipeline.delete_document("a") == 1
    spans = exporter.get_finished_spans()
    parents = _parents(spans)
    roots = [s for s in spans if parents[s.context.span_id] is None]
    assert [s.name for s in roots] == ["ingest", "ingest", "search", "delete"]
    under: dict[int, list[ReadableSpan]] = {id(r): [] for r in roots}
    for span in spans:
        if span not in roots:
            under[id(_root(span, parents))].append(span)
    first, again, search, delete = (under[id(r)] for r in roots)
    # every index-time stage runs its incremental step under the ingest, in plan order
    assert [s.name for s in first] == ["chunks", "doc_vectors", "dense_index", "bm25_index"]
    assert [s.name for s in again] == [s.name for s in first]
    steps = {s.name: s.attributes["ragbench.update"] for s in first}
    assert steps == {
        "chunks": "append",
        "doc_vectors": "batch",
        "dense_index": "extend",
        "bm25_index": "extend",
    }
    assert {s.attributes["ragbench.key"] for s in first} == {
        s.key for s in pipeline.plan(1).index_stages()
    }
    chunks = next(s for s in again if s.name == "chunks")
    assert chunks.attributes["ragbench.items"] == 2  # the batch's own chunks
    assert roots[1].attributes["ragbench.documents"] == 2
    assert roots[0].attributes["ragbench.label"] == pipeline.trial.label
    # a search runs the query-time stages over the live indexes (provided: no span of theirs)
    assert sorted(s.name for s in search) == ["bm25", "dense", "fusion", "query_vectors"]
    assert delete == []  # removing chunks computes nothing


def test_telemetry_is_off_by_default_and_never_imports_opentelemetry() -> None:
    code = (
        "import sys\n"
        "from ragbench import telemetry\n"
        "import ragbench.cli, ragbench.experiment.trial\n"
        "with telemetry.span('x', key='k') as span:\n"
        "    span.set(rows=1)\n"
        "assert not span.recording\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != telemetry.ENV}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.strip() == "[]"


def test_config_errors_name_the_key_and_the_section_leaves_trial_ids_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = load_config(_config())
    traced = load_config(_config(telemetry={"exporter": "console"}))
    assert traced.telemetry is not None and traced.telemetry.exporter == "console"
    assert [t.id for t in expand(traced)] == [t.id for t in expand(plain)]
    with pytest.raises(ConfigError, match=r"telemetry.*only the otlp exporter"):
        load_config(_config(telemetry={"exporter": "console", "endpoint": "http://x"}))
    with pytest.raises(ConfigError, match=r"telemetry\.exporter"):
        load_config(_config(telemetry={"exporter": "zipkin"}))
    monkeypatch.setenv(telemetry.ENV, "zipkin")
    with pytest.raises(ConfigError, match=rf"^{telemetry.ENV}: expected console or otlp"):
        telemetry.setup()
    monkeypatch.delenv(telemetry.ENV)
    telemetry.setup()


@pytest.mark.skipif(
    importlib.util.find_spec("opentelemetry.exporter") is not None,
    reason="opentelemetry-exporter-otlp is installed",
)
def test_otlp_without_its_exporter_package_stops_before_the_run(tmp_path: Path) -> None:
    config = _config(telemetry={"exporter": "otlp", "endpoint": "http://127.0.0.1:4318/v1/traces"})
    with pytest.raises(ConfigError) as caught:
        run(config, tmp_path / "run", cache_root=tmp_path / "cache", progress=False)
    message = str(caught.value)
    assert message.startswith("telemetry.exporter: ") and "\n" not in message
    assert "pip install opentelemetry-exporter-otlp" in message
    assert not (tmp_path / "run").exists()


def test_a_failed_trial_is_a_failed_span(tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    with scripted_llm_server() as server:
        server.fail_next(100, status=400)  # every rewrite request fails: so does the trial
        rewrite = {"kind": "rewrite", "base_url": server.url, "model": "scripted"}
        config = _config()
        config["sweep"] = {
            "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
            "query": [{**rewrite, "max_retries": 0}],
            "retriever": [{"kind": "bm25"}],
        }
        row = _run(config, tmp_path).trials.iloc[0]
    assert row["status"] == "failed"
    (trial,) = [s for s in exporter.get_finished_spans() if s.name == "trial"]
    assert trial.attributes["ragbench.status"] == "failed"
    assert trial.status.status_code is StatusCode.ERROR
    assert trial.status.description == row["error"]
