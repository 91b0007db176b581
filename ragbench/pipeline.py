"""RAGPipeline: a trial deployed — index documents, keep them up to date, retrieve, and expose
retrieval as a tool.

A pipeline runs the very stage plan a sweep's trial runs (``ragbench.retrieve.graph``): its
index-time stages are kept live in memory (chunk sets, dense and BM25 indexes) and updated
document by document; its query-time stages run per call without the cache. Every trial is
deployable: ``RAGPipeline.from_trial(run_dir, trial_id)`` builds the trial's indexes from the
run's corpus through the stage cache (no re-embedding when the sweep already did it), so the
pipeline returns exactly what the sweep scored.

Re-indexing a document id replaces its chunks (the old version stays if the new one fails to
chunk or embed); unchanged documents (same content hash) are not re-embedded; a pipeline saves to
a directory and reopens in another process, which is what ``ragbench ingest`` / ``ragbench
search`` use. ``collection_lock`` serialises the processes that write one collection: ``save``
and ``open`` hold it, and so does ``ragbench ingest`` from opening to saving, so concurrent
ingests wait for each other and keep every document.
"""

from __future__ import annotations

import dataclasses
import html
import json
import logging
import os
import secrets
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from filelock import FileLock, Timeout

from ragbench import telemetry
from ragbench.data.spans import is_spans, whole_documents
from ragbench.endpoints import describe_endpoints
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.config import Trial, load_config, trial_of
from ragbench.experiment.store import RunStore, read_json, write_failure
from ragbench.experiment.trial import RunSpec, context
from ragbench.index.cache import EmbeddingCache, StageCache, default_cache_root
from ragbench.index.finetune import TunedModel
from ragbench.llm.cache import LLMCache
from ragbench.owned import claim, mark, owned
from ragbench.protocols import Embedder
from ragbench.registry import ComponentConfig
from ragbench.report.pick import chosen_trial
from ragbench.retrieve.artifacts import ChunkSet
from ragbench.retrieve.assemble import quote_untrusted, sanitize_attribute, system_notice
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import Env, Plan, compile_plan
from ragbench.retrieve.live import LiveExecution
from ragbench.retrieve.postprocess import apply_threshold
from ragbench.retrieve.snapshot import (
    SNAPSHOTS,
    load_shard,
    load_snapshot,
    prune,
    shard_stages,
    snapshot_stages,
    write_shard,
    write_snapshot,
)
from ragbench.retrieve.stored import STORE_FILE, ChunkStore
from ragbench.retrieve.timed import percentiles_ms
from ragbench.text.loaders import LoadProblem, LoadReport, skipped_summary
from ragbench.types import Chunk, Document, Hit, Ranking

__all__ = [
    "IndexReport",
    "RAGPipeline",
    "Retrieval",
    "RetrievalTool",
    "collection_lock",
    "collection_version",
    "pipeline_trial",
    "run_origin",
]

_BATCH_DOCS = 64
_CHUNKS = "chunks"  # the plan's stage of the trial's own chunking
CONFIG = "pipeline.json"  # a collection's trial and settings
SNAPSHOT = "snapshot"  # the store's record of the last batch the written-out indexes include
BUILT_WITH = "trial"  # the store's record of the trial the written-out indexes were built with
SNAPSHOT_SECONDS = 600.0  # how often a long ingest writes its indexes out
logger = logging.getLogger(__name__)
_DEFAULTS: dict[str, dict[str, Any]] = {
    "chunker": {"kind": "recursive", "size": 800, "overlap": 100},
    "retriever": {"kind": "hybrid", "store": {"kind": "hnsw"}, "depth": 50},
}


@contextmanager
def collection_lock(
    path: Path | str, *, writing: bool = True, waiting: Callable[[str], object] | None = None
) -> Iterator[None]:
    """Hold the inter-process lock of the collection at ``path`` (a file beside it, since
    ``save`` replaces the folder); re-entrant within a thread, so a holder may ``open`` and
    ``save``. Where no lock file can be made (a read-only folder) a writer gets a one-line
    error and a reader goes on without the lock: no writer can be saving there either. When
    another process holds it (an ingest), ``waiting`` is told so before the wait."""
    target = Path(path)
    lock = _lock(target)
    held = False
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            if waiting is not None:
                waiting(
                    f"collection {target.name!r} is locked by an ingest (or another writer) "
                    "saving it; waiting until it is done"
                )
            lock.acquire()
        held = True
    except OSError as exc:
        if writing:
            raise write_failure(target.parent, f"locking collection {target.name!r}", exc) from None
    try:
        yield
    finally:
        if held:
            lock.release()


def _lock(target: Path) -> FileLock:
    """The inter-process lock of the collection at ``target`` (one object per process, so a
    thread holding it sees it held: ``is_locked``)."""
    return FileLock(target.with_name(f".{target.name}.lock"), is_singleton=True)


def pipeline_trial(spec: Mapping[str, Any] | Trial | None = None) -> Trial:
    """The trial a pipeline spec describes: one component spec per axis (``chunker``,
    ``embedder``, ``retriever``, ``reranker``, ...); missing axes take the pipeline defaults
    (recursive 800/100 chunks, hybrid retrieval over an hnsw store)."""
    if isinstance(spec, Trial):
        return spec
    return trial_of({**_DEFAULTS, **(spec or {})}, "pipeline")


@dataclass
class IndexReport:
    """What one ``index`` call did; ``skipped`` lists what the loader skipped (the text
    summarises it in one line), ``errors`` the documents that failed to chunk or embed."""

    documents_loaded: int = 0
    documents_indexed: int = 0
    documents_unchanged: int = 0
    chunks_created: int = 0
    chunks_stored: int = 0
    chunks_removed: int = 0
    documents_removed: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    duration_s: float = 0.0
    skipped: list[LoadProblem] = field(default_factory=list)

    def _repr_html_(self) -> str:
        return "<pre>" + html.escape(str(self)) + "</pre>"

    def __str__(self) -> str:
        documents = (self.documents_loaded, self.documents_indexed, self.documents_unchanged)
        chunks = (self.chunks_created, self.chunks_stored, self.chunks_removed)
        gone = f", removed {self.documents_removed}" if self.documents_removed else ""
        lines = [
            "documents loaded {}, indexed {}, unchanged {}".format(*documents) + gone,
            "chunks created {}, stored {}, removed {}".format(*chunks),
            f"errors {len(self.errors)}, {self.duration_s:.1f} s",
            *(f"  {where}: {why}" for where, why in self.errors),
        ]
        if self.skipped:
            lines.append(skipped_summary(self.skipped))
        return "\n".join(lines)


@dataclass
class Retrieval:
    """A ranking of chunk ids plus the wall time of every stage, in seconds per query, the
    answers when the trial has a generator, the first-stage lists over the same chunks
    (``found``: ``bm25`` and/or ``dense``, one row per query), which say what each retriever
    found before fusion or reranking, and what each list's scores mean (``scales``)."""

    ranking: Ranking
    timings: dict[str, np.ndarray] = field(default_factory=dict)
    answers: list[str] | None = None
    found: dict[str, Ranking] = field(default_factory=dict)
    scales: dict[str, str] = field(default_factory=dict)

    def latency_ms(self) -> dict[str, tuple[float, float]]:
        """(p50, p95) in milliseconds per stage, and for the total."""
        out = {s: percentiles_ms(t) for s, t in self.timings.items()}
        if self.timings:
            out["total"] = percentiles_ms(np.sum(list(self.timings.values()), axis=0))
        return out


@dataclass(frozen=True)
class RetrievalTool:
    """Retrieval as an agent tool: a plain callable plus its JSON schema.

    Results are framed as untrusted data inside a delimiter that is random per call, so text in
    a document cannot guess and forge the closing tag. A tool bound to a ``filter`` (a tenant's
    metadata, say) only ever searches chunks matching it: a caller's ``filter`` narrows the
    search further and can never widen or replace it.
    """

    name: str
    description: str
    schema: dict[str, Any]
    pipeline: RAGPipeline
    format: Literal["markdown", "json", "text"] = "markdown"
    k: int = 5
    filter: Mapping[str, Any] | None = None

    def __call__(
        self, query: str, k: int | None = None, filter: Mapping[str, Any] | None = None
    ) -> str:
        """Retrieve for ``query`` (chunks matching both the bound ``filter`` and the caller's)
        and render the hits as framed, untrusted context."""
        bound = dict(self.filter or {})
        asked = dict(filter or {})
        clash = any(key in asked and asked[key] != value for key, value in bound.items())
        hits = [] if clash else self.pipeline.retrieve(query, k or self.k, {**asked, **bound})
        tag = f"retrieved_{secrets.token_hex(6)}"
        if self.format == "json":
            return json.dumps(
                {
                    "notice": system_notice(tag),
                    "results": [
                        {
                            "rank": h.rank,
                            "score": round(h.score, 6),
                            "doc_id": sanitize_attribute(h.chunk.doc_id),
                            "chunk_id": sanitize_attribute(h.chunk.id),
                            "text": f"<{tag}>\n{quote_untrusted(h.chunk.text, tag)}\n</{tag}>",
                        }
                        for h in hits
                    ],
                },
                ensure_ascii=False,
            )
        blocks = []
        for h in hits:
            attrs = f'rank="{h.rank}" doc_id="{sanitize_attribute(h.chunk.doc_id)}"'
            body = quote_untrusted(h.chunk.text, tag)
            block = f"<{tag} {attrs}>\n{body}\n</{tag}>"
            if self.format == "markdown":
                block = f"**Result {h.rank}** (score {h.score:.3f})\n\n{block}"
            blocks.append(block)
        if not blocks:
            blocks.append("No results.")
        return system_notice(tag) + "\n\n" + "\n\n".join(blocks)


def _trained_models(manifest: Mapping[str, Any], trial: Trial, cache: StageCache) -> dict:
    """The models a run's trial fine-tuned (its ``models`` stages, by name), read from the
    run's stage cache through the run's own plan: a deployed trial runs the models it was
    scored with, whatever corpus it indexes."""
    if not any(getattr(c, "finetune", None) for c in trial.configs.values()):
        return {}
    config = dict(manifest["config"])
    config["dataset"] = {**config["dataset"], "path": manifest["dataset"]["path"]}
    ctx = context(RunSpec(load_config(config), cache_root=str(cache.root)))
    plan = ctx.plan(trial)
    execution = Execution(plan, ctx.env, cache)
    return {s.name: execution[s.name] for s in plan.stages.values() if s.area == "models"}


class RAGPipeline:
    """A trial's stages over a changing corpus: index, update, delete, search, retrieve.

    Its index-time values live in one ``LiveExecution`` (``retrieve/live.py``), which adds and
    removes documents stage by stage; the pipeline keeps the documents' content hashes (an
    unchanged document is not indexed again) and runs the query-time stages per search.
    """

    def __init__(
        self,
        trial: Trial,
        *,
        score_threshold: float | None = None,
        store: ChunkStore | None = None,
        root: Path | None = None,
    ) -> None:
        self.trial = trial
        self.score_threshold = score_threshold
        self._label = trial.label  # once: a label reads the registries (spans name the trial)
        calls_llm = describe_endpoints(trial.configs) != "-"
        env = Env(warm_up=False, llm_cache=LLMCache(default_cache_root()) if calls_llm else None)
        self._plans: dict[tuple[int, str | None], Plan] = {}
        # the documents and chunks (in memory, or a collection's on disk at ``root``)
        self._store = store if store is not None else ChunkStore(None)
        self._root = root
        self._snapshot_at = time.monotonic()
        self._live = LiveExecution(self.plan(1), env, self._chunk_sets())

    def _chunk_sets(self) -> dict[str, ChunkSet]:
        """The plan's chunk sets, as the store keeps them."""
        return {
            s.name: self._store.chunk_set(s.name)
            for s in self.plan(1).index_stages()
            if s.update == "append"
        }

    @property
    def env(self) -> Env:
        """What the pipeline's stages run against (its models, shared by every search)."""
        return self._live.env

    @env.setter
    def env(self, env: Env) -> None:
        self._live.env = env

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | Trial | None = None, score_threshold: float | None = None
    ) -> RAGPipeline:
        """A pipeline of the components ``config`` names per axis (see ``pipeline_trial``)."""
        return cls(pipeline_trial(config), score_threshold=score_threshold)

    @classmethod
    def from_trial(cls, run: str | Path, trial_id: str) -> RAGPipeline:
        """The pipeline of a finished trial of a run directory, indexing the run's corpus.

        Its models are those the trial was scored with and its document vectors come from
        the run's embedding cache, so the pipeline returns the rankings the run scored.
        ``trial_id`` may be ``best``: the trial the run's report recommends (refused, naming
        why, when the report withholds a pick or the run is incomplete).
        """
        pipeline, documents = cls.for_trial(run, trial_id)
        pipeline.index(documents)
        return pipeline

    @classmethod
    def for_trial(
        cls, run: str | Path, trial_id: str, root: Path | None = None
    ) -> tuple[RAGPipeline, list[Document]]:
        """An empty pipeline of a finished trial of a run directory (a new collection at
        ``root``, or in memory), running the models the trial was scored with and reading the
        run's embedding cache, and the run's corpus for it to index. A generated set's cuts
        (its queries' sentences, taken out to evaluate) are no part of a deployed corpus: its
        documents are indexed whole, and only their changed chunks are embedded anew."""
        store = RunStore(run)
        manifest = store.manifest()
        trial = chosen_trial(store, trial_id)
        dataset = manifest["dataset"]
        labeled = store.dataset(whole=True)  # refused when the set changed since the run
        whole = whole_documents(dataset["path"]) if is_spans(Path(dataset["path"])) else None
        documents = labeled.documents if whole is None else whole
        pipeline = cls.create(trial, root=root) if root is not None else cls(trial)
        cache = StageCache(Path(manifest["cache_root"]))
        if pipeline.env.llm_cache is not None:  # the run's LLM calls answer the pipeline's
            pipeline.env.llm_cache = LLMCache(manifest["cache_root"])
        pipeline.env.embeddings = cache.embeddings
        pipeline._live.keep(_trained_models(manifest, trial, cache))
        return pipeline, list(documents)

    # ------------------------------------------------------------ plan and resources

    def plan(self, k: int, retriever: str | None = None) -> Plan:
        """The trial's plan for ``k`` hits per query (no cache keys: it runs in memory); with
        ``retriever``, one of ``retrievers``, its first stage is that kind instead."""
        if retriever == self.trial.configs["retriever"].kind:
            retriever = None
        if (k, retriever) not in self._plans:
            configs = dict(self.trial.configs)
            if retriever is not None:
                configs["retriever"] = self.retriever(retriever)
            self._plans[k, retriever] = compile_plan(configs, k)
        return self._plans[k, retriever]

    @property
    def retrievers(self) -> tuple[str, ...]:
        """The retriever kinds this pipeline's indexes serve: its own, and those its own runs
        alone over the same indexes (``parts``: a hybrid's BM25 and dense sides)."""
        own = self.trial.configs["retriever"]
        return (own.kind, *own.parts())

    def retriever(self, kind: str | None = None) -> ComponentConfig:
        """The retriever that runs for ``kind``, one of ``retrievers`` (default: its own)."""
        own = self.trial.configs["retriever"]
        if kind is None or kind == own.kind:
            return own
        parts = own.parts()
        if kind not in parts:
            raise ConfigError(
                f"retriever {kind!r}: this pipeline ({own.label()}) has no index for it; "
                f"available: {', '.join(self.retrievers)}"
            )
        return parts[kind]

    @property
    def embedder(self) -> Embedder | None:
        """The trial's embedder (None for a BM25-only pipeline), running its trained model
        when it is fine-tuned."""
        config = self.trial.get("embedder")
        if config is None:
            return None
        stages = self.plan(1).stages.values()
        trained = [s.name for s in stages if s.area == "models" and s.config == config]
        model = self._live[trained[0]] if trained else None
        return self.env.embedder(config, model=model)

    @property
    def chunks(self) -> Mapping[str, Chunk]:
        """The indexed chunks by id (of the chunking results refer to; in a collection on
        disk, looked up when asked)."""
        values = self._live.index_values()
        chunks = (values or {}).get(self.plan(1).chunks)
        return chunks.by_id if chunks is not None else {}

    @property
    def document_ids(self) -> list[str]:
        """Ids of the indexed documents."""
        return self._store.document_ids()

    # ------------------------------------------------------------ indexing

    def index(
        self,
        source: Iterable[Document],
        replace: bool = False,
        progress: Callable[[IndexReport], object] | None = None,
    ) -> IndexReport:
        """Add new and changed documents, a batch at a time; unchanged ones are skipped,
        failures reported, and ``progress`` hears the report after each batch. A loader that
        skipped all it read (a binary file) is a ``DataError`` naming what it skipped, before
        anything changes. A document whose id was indexed from another source (the folder,
        file or URL a loader reads: ``origin``) is a ``DataError`` unless ``replace``: two
        folders holding ``README.md`` never overwrite each other silently (the batches indexed
        before it stay indexed; documents another source gave unchanged go over to this one
        only when the whole ingest succeeds); a file and the folder holding it are one source,
        and a run's corpus (``run_origin``) and a folder clash only where a document's text
        differs. A folder holding a source indexed already under other ids (``_check_contained``)
        is a ``DataError`` before anything changes.
        Given a loader's folder or file again, documents indexed from it that it no longer
        gives are removed. In a collection on disk each batch commits as it is done (a killed
        ingest keeps every finished batch; the same call again goes on where it stopped), and
        its indexes are written out every few minutes and at the end."""
        started = time.perf_counter()
        report = IndexReport()
        where = origin(source)
        self._check_contained(where)
        with telemetry.span("ingest", label=self._label) as span, self._store.seen() as seen:
            batch: list[Document] = []
            adopted: list[str] = []
            for doc in source:
                report.documents_loaded += 1
                seen(doc.id)
                known = self._store.document(doc.id)
                same_text = known is not None and known.hash == doc.hash
                claim = "same" if known is None else _claim(known.origin, where, doc, same_text)
                if claim == "clash" and not replace:
                    raise _clash(known.origin if known else "", where, doc)
                if same_text:
                    if claim != "same":  # the new source takes it over if the ingest succeeds
                        adopted.append(doc.id)
                    report.documents_unchanged += 1
                    continue
                batch.append(doc)
                if len(batch) >= _BATCH_DOCS:
                    self._index_batch(batch, report, where, progress)
                    batch = []
            loaded = getattr(source, "report", None)
            loaded = loaded if isinstance(loaded, LoadReport) else LoadReport()
            problems = loaded.problems
            if not report.documents_loaded and loaded.passed_over:  # skipped, or left out
                raise DataError(loaded.nothing_loaded(getattr(source, "path", where)))
            self._index_batch(batch, report, where, progress)
            if adopted:
                with self._store.batch():
                    for doc_id in adopted:
                        self._store.adopt(doc_id, where)
            if where:
                self._mirror(where, report, {os.path.realpath(p.path) for p in problems})
            span.set(documents=report.documents_indexed, chunks=report.chunks_stored)
        report.skipped = list(problems)
        self._snapshot(force=True)
        report.duration_s = time.perf_counter() - started
        return report

    def _mirror(self, where: str, report: IndexReport, skipped: set[str]) -> None:
        """Remove the documents indexed from ``where`` that it no longer gives: deleted files,
        or files the globs now leave out. A file still there that failed to load this time
        (``skipped``: real paths) keeps its last indexed version; a source that gave no
        document at all while the collection holds some of it is a ``DataError`` (an
        unmounted share, a checkout half done), and nothing is removed."""
        gone = [
            doc_id
            for doc_id in self._store.unseen(where)
            if os.path.realpath(os.path.join(where, doc_id)) not in skipped
        ]
        if gone and not report.documents_loaded:
            raise DataError(
                f"{where}: gave no document, and the collection holds {len(gone):,} indexed "
                "from it; nothing removed (if they are gone on purpose, delete the collection "
                "or ingest into a new one)"
            )
        for doc_id in gone:
            report.chunks_removed += self.delete_document(doc_id)
            report.documents_removed += 1

    def _check_contained(self, where: str) -> None:
        """``DataError`` when the folder ``where`` holds a folder or file indexed already
        (not a file right in it, whose id is its name), or when ``where`` lies inside a
        folder indexed already (not as a file right in it): the same files, read under ids
        that start, or no longer start, with their folder's name, would be indexed twice."""
        for known in self._store.origins():
            if os.path.isdir(where) and _inside(known, where):
                if os.path.isdir(known) or os.path.dirname(known) != where:
                    raise DataError(
                        f"{where}: holds {known}, whose documents are in the collection "
                        f"already under other ids (ingesting the folder would index them "
                        f"twice); ingest {where} into a new collection"
                    )
            elif (
                os.path.isabs(known)
                and _inside(where, known)
                and os.path.isdir(known)
                and (os.path.isdir(where) or os.path.dirname(where) != known)
            ):
                raise DataError(
                    f"{where}: lies inside {known}, whose documents are in the collection "
                    f"already under other ids (ingesting it would index them twice); "
                    f"ingest {known} again to update them, or {where} into a new collection"
                )

    def update(self, document: Document) -> IndexReport:
        """Re-index one document (its old chunks are replaced only if the new ones embed)."""
        return self.index([document])

    def _index_batch(
        self,
        docs: Sequence[Document],
        report: IndexReport,
        where: str,
        progress: Callable[[IndexReport], object] | None,
    ) -> None:
        """Add the batch through the live execution, committing its documents, chunks and
        shard together, and record what it did."""
        if not docs:
            return
        number = self._store.last_batch() + 1
        replacing = [d.id for d in docs if self._store.document(d.id) is not None]
        keep_text = self._live.documents() is not None
        with self._store.batch():
            added = self._live.extend(docs, replacing, number)
            if self._root is not None:
                try:
                    write_shard(self._root, self.plan(1), number, added.batch)
                except OSError as exc:
                    what = (
                        f"writing batch {number} of collection {self._root.name!r}; the "
                        "batches before it are kept and the same ingest goes on from there"
                    )
                    raise write_failure(self._root.parent, what, exc) from None
            for doc in docs:
                if doc.id in added.chunks:
                    self._store.put_document(doc, where, number, keep_text)
            self._store.record_batch(number, added.removed, len(added.chunks))
        report.errors.extend(added.errors)
        for chunk_ids in added.chunks.values():
            report.chunks_created += len(chunk_ids[_CHUNKS])
            report.chunks_stored += len(chunk_ids[_CHUNKS])
        report.chunks_removed += len(added.removed.get(_CHUNKS, []))
        report.documents_indexed += len(added.chunks)
        if progress is not None:
            progress(report)
        self._snapshot()

    def embedding_work(
        self, docs: Sequence[Document]
    ) -> list[tuple[ComponentConfig, TunedModel | None, list[str]]]:
        """What indexing ``docs`` will embed: per embedder the trial indexes with (its config
        and trained model), the texts of the documents' chunks — for embedding them elsewhere
        first (``ragbench.ingest``: on Dask workers) into the cache indexing reads."""
        chunked = self._live.chunked(docs)
        work = []
        for stage in self.plan(1).index_stages():
            if stage.update != "batch" or stage.config is None:
                continue
            model = self._live[stage.inputs[1]] if len(stage.inputs) > 1 else None
            texts = [c.text for c in chunked[stage.inputs[0]].chunks]
            work.append((stage.config, model, texts))
        return work

    def delete_document(self, doc_id: str) -> int:
        """Remove a document and its chunks; returns the number of chunks removed."""
        if self._store.document(doc_id) is None:
            return 0
        number = self._store.last_batch() + 1
        with telemetry.span("delete", label=self._label), self._store.batch():
            removed = self._live.delete([doc_id])
            self._store.delete_documents([doc_id])
            self._store.record_batch(number, removed, 0)
        return len(removed.get(_CHUNKS, []))

    # ------------------------------------------------------------ retrieval

    def search(
        self,
        queries: Sequence[str],
        k: int,
        filter: Mapping[str, Any] | None = None,
        retriever: str | None = None,
    ) -> Retrieval:
        """Top-``k`` chunk ids per query through the trial's query-time stages, with each
        stage's seconds per query (a query's share of its batch when many are searched at
        once; metadata ``filter``: exact match; ``retriever``: one of ``retrievers``)."""
        plan = self.plan(k, retriever)
        env = dataclasses.replace(self.env, queries=list(queries), filter=filter)
        provided = self._live.index_values() if self._store.count_documents() else None
        if provided is None:  # nothing indexed: no hit
            empty = np.full((len(queries), k), "", dtype=object)
            return Retrieval(Ranking(empty, np.full((len(queries), k), -np.inf)))
        if plan is not self.plan(k):  # the same live values, under the other plan's names
            by_key = {self.plan(1).stages[name].key: value for name, value in provided.items()}
            provided = {s.name: by_key[s.key] for s in plan.index_stages() if s.key in by_key}
        with telemetry.span("search", queries=len(queries), k=k, label=self._label):
            execution = Execution(plan, env, provided=provided)
            ranking = apply_threshold(execution.output.head(k), self.score_threshold)
            answers = execution[plan.answers].texts if plan.answers else None
            found, scales = _first_stage(execution)
            return Retrieval(ranking, execution.latency(), answers, found, scales)

    def retrieve(
        self, query: str, k: int = 5, filter: Mapping[str, Any] | None = None
    ) -> list[Hit]:
        """The top-``k`` chunks for ``query`` (metadata ``filter`` is an exact match)."""
        ranking = self.search([query], k, filter).ranking
        chunks = self.chunks
        found = [(chunks.get(cid), score) for cid, score in ranking.row(0)]
        kept = [(chunk, score) for chunk, score in found if chunk is not None]
        return [Hit(chunk, score, rank) for rank, (chunk, score) in enumerate(kept, start=1)]

    def answer(self, question: str, k: int = 5) -> str:
        """The trial's generator's answer to ``question`` (``ConfigError`` without one)."""
        answers = self.search([question], k).answers
        if answers is None:
            raise ConfigError(f"trial {self.trial.label!r} has no generator to answer with")
        return answers[0]

    def as_tool(
        self,
        name: str = "search_documents",
        description: str = "Search the indexed documents and return relevant passages.",
        format: Literal["markdown", "json", "text"] = "markdown",
        k: int = 5,
        filter: Mapping[str, Any] | None = None,
    ) -> RetrievalTool:
        """Retrieval as a callable tool with a JSON schema for function calling; bound to a
        metadata ``filter`` (e.g. ``{"tenant": "acme"}``), it never returns a chunk outside it."""
        schema = {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for."},
                    "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": k},
                    "filter": {
                        "type": "object",
                        "description": "Metadata every result must match exactly (key: value).",
                    },
                },
                "required": ["query"],
            },
        }
        bound = dict(filter) if filter is not None else None
        return RetrievalTool(name, description, schema, self, format, k, bound)

    # ------------------------------------------------------------ persistence

    @classmethod
    def create(cls, trial: Trial, root: Path, score_threshold: float | None = None) -> RAGPipeline:
        """A new, empty collection of ``trial`` in the folder ``root`` (a new or empty one,
        or a collection of the same trial), its documents and chunks on disk as it indexes."""
        if (root / CONFIG).is_file():
            pipeline = cls.open(root)
            if pipeline.trial.id != trial.id:
                raise ConfigError(f"{root}: a collection of another configuration")
            return pipeline
        claim(root, "--collection", "collection")
        config = {"trial": trial.effective(), "score_threshold": score_threshold}
        (root / CONFIG).write_text(json.dumps(config, indent=2), "utf-8")
        return cls(
            trial, score_threshold=score_threshold, store=ChunkStore(root, create=True), root=root
        )

    def save(self, path: Path | str) -> None:
        """Write the collection to ``path``: a collection opened from there writes out its
        indexes; any other is copied to ``path`` atomically (replacing an older copy of it,
        never a folder of other files) under its ``collection_lock``. When a write fails (a
        full disk) the older copy stays and the error is one line naming the folder."""
        target = Path(path)
        if self._root is not None and target.resolve() == self._root.resolve():
            self._snapshot(force=True)
            return
        with collection_lock(target):
            if target.exists() and not (owned(target, "collection") or (target / CONFIG).is_file()):
                raise ConfigError(
                    f"{target}: a folder ragbench did not write, not a collection; it stays as "
                    "it is (choose another collection name or folder)"
                )
            tmp = target.with_name(f".tmp-{uuid.uuid4().hex}-{target.name}")
            try:
                tmp.mkdir(parents=True)
                mark(tmp, "collection")
                config = {"trial": self.trial.effective(), "score_threshold": self.score_threshold}
                (tmp / CONFIG).write_text(json.dumps(config, indent=2), "utf-8")
                copy = self._store.copy_to(tmp)
                last = self._store.last_batch()
                write_snapshot(tmp, self.plan(1), self._live.live_values(), last)
                with copy.batch():
                    copy.set(SNAPSHOT, str(last))
                copy.close()
            except OSError as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                what = f"saving collection {target.name!r}; it is unchanged"
                raise write_failure(target.parent, what, exc) from None
            old = target.with_name(f".old-{uuid.uuid4().hex}-{target.name}")
            if target.exists():
                os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)

    def _snapshot(self, force: bool = False) -> None:
        """Write out the indexes of a collection on disk, when ``force`` or every few minutes
        of indexing (a reader replays the batches after the last snapshot)."""
        if self._root is None:
            return
        if not force and time.monotonic() - self._snapshot_at < SNAPSHOT_SECONDS:
            return
        last = self._store.last_batch()
        if _snapshot_of(self._store) != last:
            self._write_out(self._root, last)
        elif force:  # what a killed ingest left behind goes too
            prune(self._root, last)
        if force:
            self._store.checkpoint()
        self._snapshot_at = time.monotonic()

    def _write_out(self, root: Path, last: int) -> None:
        """Write the indexes out as the snapshot of the batches up to ``last``, record it and
        the trial they were built with (``BUILT_WITH``), and remove what it replaces."""
        try:
            write_snapshot(root, self.plan(1), self._live.live_values(), last)
        except OSError as exc:
            what = (
                f"writing the indexes of collection {root.name!r}; its documents "
                "are committed and opening it rebuilds the indexes from them"
            )
            raise write_failure(root.parent, what, exc) from None
        with self._store.batch():
            self._store.set(SNAPSHOT, str(last))
            self._store.set(BUILT_WITH, json.dumps(self.trial.effective(), sort_keys=True))
        prune(root, last)

    @classmethod
    def open(cls, path: Path | str) -> RAGPipeline:
        """Reopen a collection: its indexes as last written out, brought up to date with the
        batches committed since (an ingest still running, or one that was killed, leaves them
        behind), its documents and chunks read from disk as they are asked for. A reader
        never waits for a writer: it sees the batches committed when it opens.

        Opening checks, cheaply, that the parts agree: the store has its tables, the snapshot
        it names exists with a folder for every index over its chunks, the indexes were built
        with the configuration ``pipeline.json`` holds, and each holds as many chunks as the
        store; damage is one ``DataError`` naming the part. A writer holding the collection's
        lock (an ingest) rebuilds damaged or missing indexes from a whole store instead, its
        vectors through the embedding cache, and writes them out."""
        root = Path(path)
        if not (root / CONFIG).is_file():
            raise DataError(f"{root}: not a ragbench collection (no {CONFIG})")
        return cls._read(root)

    @classmethod
    def _read(cls, root: Path) -> RAGPipeline:
        """The collection at ``root``, each file checked where it is read, so that a damaged
        one is one ``DataError`` naming it, never a parser's traceback."""
        file = root / CONFIG
        shape = {"trial?": dict, "score_threshold": (float, type(None))}
        config = read_json(file, shape, "collection config")
        if "trial" not in config or not (root / STORE_FILE).is_file():
            raise DataError(
                f"{root}: a collection of an older ragbench version; ingest its source again"
            )
        try:
            trial = pipeline_trial(config["trial"])
        except ConfigError as exc:
            raise DataError(f"{file}: {exc}") from None
        store = ChunkStore(root)
        pipeline = cls(trial, score_threshold=config["score_threshold"], store=store, root=root)
        plan = pipeline.plan(1)
        _check_built_with(file, pipeline, store)
        snapshot, rebuilt = _snapshot_of(store), False
        try:
            found = load_snapshot(root, plan, snapshot, _required(store, plan, snapshot))
        except DataError as damage:
            if store.last_batch() < 0:
                raise
            if not _lock(root).is_locked:  # a reader: only a writer may write them out
                again = f"ingesting its source again rebuilds them from {STORE_FILE}"
                raise DataError(f"{damage}; {again}") from None
            logger.warning("%s; rebuilding the collection's indexes from %s", damage, store.path)
            if pipeline.env.embeddings is None:  # vectors embedded before are not embedded again
                pipeline.env.embeddings = EmbeddingCache(default_cache_root())
            found, snapshot, rebuilt = {}, -1, True
        values = {**pipeline._chunk_sets(), **found}
        corpus = list(store.corpus())
        pipeline._live = LiveExecution(plan, pipeline.env, values, corpus)
        for number, removed in store.batches(after=snapshot):
            pipeline._live.replay(pipeline._batch_values(number), removed)
        _check_counts(store, plan, pipeline._live.live_values())
        if rebuilt:
            pipeline._write_out(root, store.last_batch())
        return pipeline

    def _batch_values(self, number: int) -> dict[str, Any]:
        """What batch ``number`` extended the indexes with: its chunks (from the store) and its
        document vectors (from its shard, or computed again when the shard is gone)."""
        plan = self.plan(1)
        values: dict[str, Any] = {
            s.name: ChunkSet(self._store.batch_chunks(s.name, number))
            for s in plan.index_stages()
            if s.update == "append"
        }
        for stage in shard_stages(plan):
            found = load_shard(self._root, stage, number) if self._root is not None else None
            if found is not None and len(found) != len(values[stage.inputs[0]]):
                found = None  # a later batch removed some of its chunks
            values[stage.name] = (
                self._live.batch_value(stage.name, values) if found is None else found
            )
        return values

    def __repr__(self) -> str:
        documents = self._store.count_documents()
        return f"RAGPipeline(documents={documents}, chunks={len(self.chunks)})"


def _first_stage(execution: Execution) -> tuple[dict[str, Ranking], dict[str, str]]:
    """The plan's first-stage lists (``Plan.lists``, the first of each name) over the chunks
    its ranking refers to, one row per query (lists over another chunking, or per text of a
    multi-text query, are left out), and what each one's scores mean (its component's
    ``score_scale``)."""
    plan, found, scales = execution.plan, {}, {}
    for name, stage_name in plan.lists:
        stage = plan.stages[stage_name]
        index = plan.stages.get(stage.inputs[0]) if stage.inputs else None
        if name in found or index is None:
            continue
        ranking = execution[stage_name].ranking
        if plan.chunks in index.inputs and len(ranking.ids) == len(execution.env.queries):
            found[name] = ranking
            scale = stage.config.score_scale() if stage.config is not None else None
            scales[name] = scale or f"{name} score"
    return found, scales


def _snapshot_of(store: ChunkStore) -> int:
    """The last batch the written-out indexes include (-1: none yet), as the store records."""
    found = store.get(SNAPSHOT, "-1")
    try:
        return int(found or "-1")
    except ValueError:
        raise DataError(
            f"{store.path}: meta {SNAPSHOT!r} is {found!r}, expected a batch number"
        ) from None


def _upstream(plan: Plan, name: str) -> set[str]:
    """The stages ``name`` is computed from, directly or not."""
    found: set[str] = set()
    todo = list(plan.stages[name].inputs)
    while todo:
        at = todo.pop()
        if at in plan.stages and at not in found:
            found.add(at)
            todo += plan.stages[at].inputs
    return found


def _required(store: ChunkStore, plan: Plan, snapshot: int) -> set[str]:
    """The snapshot stages the snapshot of batch ``snapshot`` must hold a folder for: those
    over a chunking the store holds chunks of from those batches (a stage over no chunk yet
    was saved as nothing)."""
    chunked = {
        s.name
        for s in plan.index_stages()
        if s.update == "append" and store.has_chunks(s.name, snapshot)
    }
    return {s.name for s in snapshot_stages(plan) if _upstream(plan, s.name) & chunked}


def _check_counts(store: ChunkStore, plan: Plan, values: Mapping[str, Any]) -> None:
    """Each index holds as many chunks as the store holds of its chunking (one ``COUNT`` per
    chunking): rows deleted from the store, or an index of other rows, is a ``DataError``."""
    counts: dict[str, int] = {}
    for stage in plan.index_stages():
        chunkings = [
            i for i in stage.inputs if i in plan.stages and plan.stages[i].update == "append"
        ]
        value = values.get(stage.name)
        if stage.update != "extend" or len(chunkings) != 1:
            continue
        if value is not None and not isinstance(value, Sized):
            continue
        held = 0 if value is None else len(value)
        chunking = chunkings[0]
        if chunking not in counts:
            counts[chunking] = store.count_chunks(chunking)
        if held != counts[chunking]:
            raise DataError(
                f"{store.path}: {counts[chunking]} chunks, and the collection's index "
                f"{stage.name!r} holds {held}: the store or the index was changed by "
                "something other than ragbench; ingest its source into a new collection"
            )


def _check_built_with(file: Path, pipeline: RAGPipeline, store: ChunkStore) -> None:
    """The configuration ``file`` holds builds the indexes the store records them built
    with (``BUILT_WITH``): a ``pipeline.json`` edited since to another embedder, chunker,
    ... is a ``DataError`` naming it (query-time changes are fine)."""
    recorded = store.get(BUILT_WITH)
    if recorded is None:  # written out by an older version, or not yet
        return
    try:
        effective = json.loads(recorded)
        built = pipeline_trial(effective)
    except (ValueError, TypeError, ConfigError):
        raise DataError(f"{store.path}: meta {BUILT_WITH!r} is not a configuration") from None
    if effective == pipeline.trial.effective():
        return

    def keys(plan: Plan) -> dict[str, str]:
        return {s.name: s.key for s in plan.index_stages() if s.update != "derive"}

    if keys(compile_plan(built.configs, 1)) != keys(pipeline.plan(1)):
        raise DataError(
            f"{file}: the configuration no longer matches the collection's indexes (they "
            f"were built with {built.label}, the file says {pipeline.trial.label}); put "
            "that configuration back, or ingest the source into a new collection"
        )


def collection_version(path: Path | str) -> tuple[int, int] | None:
    """What changes when a collection at ``path`` is worth opening again: its folder (a save
    swaps in a new one) and its last written-out indexes (an ingest writes them every few
    minutes and at its end); None when it is gone."""
    root = Path(path)
    try:
        folder = os.stat(root).st_ino
        names = os.listdir(root / SNAPSHOTS)
    except OSError:
        return None if not root.is_dir() else (root.stat().st_ino, -1)
    return folder, max((int(n) for n in names if n.isdigit()), default=-1)


def origin(source: Iterable[Document]) -> str:
    """Where a loader reads its documents from — the real path of its folder or file, or its
    URL — or the ``origin`` a source names itself (a run's corpus: ``run_origin``), or ""
    for documents from elsewhere (made in code)."""
    named = getattr(source, "origin", None)
    if isinstance(named, str):
        return named
    url = getattr(source, "url", None)
    if isinstance(url, str):
        return url
    path = getattr(source, "path", None)
    return os.path.realpath(path) if isinstance(path, Path) else ""


def run_origin(run: str | Path) -> str:
    """The origin of a run's corpus deployed into a collection: ``run:`` and the run folder's
    real path, so that its documents and a folder's never replace each other unasked."""
    return _RUN + os.path.realpath(run)


_RUN = "run:"


def _claim(
    known: str, where: str, doc: Document, same_text: bool
) -> Literal["same", "adopt", "clash"]:
    """How ``doc`` read from ``where`` relates to the document of its id indexed from
    ``known``: ``same`` (the same source, or either unknown), ``adopt`` (the same document,
    now from ``where``: a file's folder, or the folder of a run's unchanged corpus file)
    or ``clash`` (another source's document of the same id)."""
    if not where or known == where:
        return "same"
    if not known:  # indexed from no known source (an older ragbench's run corpus)
        return "adopt"
    if _same_file(known, where, doc):  # a file, and the folder holding it
        return "adopt" if os.path.isdir(where) else "same"
    if same_text and _RUN in (known[: len(_RUN)], where[: len(_RUN)]):
        return "adopt" if known.startswith(_RUN) else "same"
    return "clash"


def _inside(known: str, where: str) -> bool:
    """Whether the origin ``known`` is a path under the folder ``where`` (not ``where``)."""
    if "://" in known or known.startswith(_RUN) or not os.path.isabs(known) or known == where:
        return False
    return os.path.commonpath([known, where]) == where


def _same_file(known: str, where: str, doc: Document) -> bool:
    """Whether the document of ``doc``'s id indexed from the folder or file ``known`` and
    ``doc`` read from ``where`` are one file (the same real path) reached two ways."""
    if any("://" in o or o.startswith(_RUN) for o in (known, where)):
        return False
    before = known if os.path.isfile(known) else os.path.join(known, doc.id)
    now = doc.source or os.path.join(where, doc.id)
    return os.path.realpath(before) == os.path.realpath(now)


def _clash(known: str, where: str, doc: Document) -> DataError:
    """The refusal of ``doc`` read from ``where``, its id indexed from ``known`` already,
    with the ways out that apply (a common parent only when it is neither origin)."""
    ways = ["ingest into another collection", "replace it (replace=True / --replace)"]
    if not any("://" in o or o.startswith(_RUN) for o in (known, where)):
        parent = os.path.commonpath([known, where])
        if parent not in (known, where) and os.path.isdir(parent):
            parents = f"ingest the folders' common parent {parent} into a new collection (ids "
            ways[0] = parents + "then start with each folder's name)"
    return DataError(
        f"{doc.source or where}: document id {doc.id!r} is in the collection already, "
        f"indexed from {known}; {', or '.join(ways)}"
    )
