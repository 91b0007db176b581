"""A collection built from a source or a run's trial, at any size: streamed in batches, each
committed as it is done, resumed by the same call after a crash, with its rate and the time
left, its embedding spread over Dask workers when asked.

``ingest(target, IngestOptions(...))`` is ``ragbench ingest``: it creates the collection (or
opens it: a second call adds what changed, a call after a killed one goes on where it stopped),
deploys a run's trial over the run's corpus (``from_run``) and indexes a folder, file or URL
(``source``). Documents are read, chunked, embedded and indexed a batch at a time
(``RAGPipeline.index``), so no more than a batch of texts or vectors is in memory beside the
indexes. With ``executor="dask"`` the chunks of the batches ahead are embedded on the
cluster's workers and their vectors put in the embedding cache that indexing reads, so the
collection is the one a serial ingest builds.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ragbench.errors import ConfigError, DataError
from ragbench.experiment.executors import check_workers, dask_client
from ragbench.experiment.store import RunStore
from ragbench.index.cache import EmbeddingCache, default_cache_root
from ragbench.index.finetune import TunedModel
from ragbench.owned import owned
from ragbench.pipeline import (
    CONFIG,
    IndexReport,
    RAGPipeline,
    collection_lock,
    pipeline_trial,
    run_origin,
)
from ragbench.registry import ComponentConfig
from ragbench.report.pick import chosen_trial
from ragbench.retrieve.graph import Env
from ragbench.text.loaders import load
from ragbench.types import Document

__all__ = ["IngestOptions", "Progress", "ingest"]

_AHEAD = 4  # batches embedded on workers ahead of the one being indexed
_BATCH = 64  # documents a batch sent to the workers holds


@dataclass(frozen=True)
class IngestOptions:
    """What to ingest and how: a ``source`` (folder, file or URL, selected by ``include`` /
    ``exclude``) and/or a run's trial (``from_run`` and ``trial``: an id or ``best``), a
    pipeline ``spec`` for a new collection, ``replace`` (documents of another source may
    replace those of the same id) and where embedding runs (``executor``, ``workers``,
    ``scheduler``)."""

    source: str | None = None
    from_run: str | None = None
    trial: str | None = None
    spec: dict[str, Any] | None = None
    replace: bool = False
    follow_symlinks: bool = False
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    executor: Literal["serial", "dask"] = "serial"
    workers: int = 2
    scheduler: str | None = None


@dataclass
class Progress:
    """How far an ingest is: documents read of those ``expected`` (None: unknown), and the
    rate and the time left, for a line the caller shows."""

    what: str
    expected: int | None
    started: float = field(default_factory=time.monotonic)
    report: IndexReport = field(default_factory=IndexReport)

    def line(self) -> str:
        """One line: documents read (of how many), indexed, chunks, rate, time left."""
        r = self.report
        seconds = max(time.monotonic() - self.started, 1e-9)
        rate = r.documents_loaded / seconds
        read = f"{r.documents_loaded:,}"
        if self.expected:
            read += f" of about {self.expected:,}"
        left = ""
        if self.expected and rate > 0 and r.documents_loaded < self.expected:
            left = f", about {_duration((self.expected - r.documents_loaded) / rate)} left"
        return (
            f"{self.what}: {read} documents ({r.documents_indexed:,} indexed, "
            f"{r.documents_unchanged:,} unchanged), {r.chunks_stored:,} chunks; "
            f"{rate:,.1f} documents/s{left}"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _files(path: str) -> int | None:
    """About how many documents a folder holds (its visible files), None for a URL."""
    if "://" in path:
        return None
    root = Path(path)
    if root.is_file():
        return 1
    count = 0
    for _, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        count += sum(1 for f in files if not f.startswith("."))
    return count


def ingest(
    target: Path, options: IngestOptions, show: Callable[[Progress], object] | None = None
) -> tuple[RAGPipeline, list[IndexReport]]:
    """Build or update the collection in the folder ``target`` as ``options`` say; ``show``
    hears the progress after every batch. One ingest writes a collection at a time (others
    wait); readers go on meanwhile."""
    if options.source is None and options.from_run is None:
        raise ConfigError("ingest: give --source PATH, --from-run RUN --trial ID, or both")
    if (options.from_run is None) != (options.trial is None):
        raise ConfigError("--from-run and --trial go together (--trial ID, or --trial best)")
    if options.spec is not None and options.from_run is not None:
        raise ConfigError("--config and --from-run: give one (the trial is the config)")
    if options.executor == "dask":
        check_workers(options.workers)
    source = (
        None
        if options.source is None
        else load(
            options.source,
            follow_symlinks=options.follow_symlinks,
            include=options.include,
            exclude=options.exclude,
        )
    )
    reports: list[IndexReport] = []
    with collection_lock(target):
        exists = (target / CONFIG).is_file()
        if (
            target.exists()
            and not exists
            and any(target.iterdir())
            and not owned(target, "collection")
        ):
            raise ConfigError(
                f"--collection {target.name}: {target} is a folder ragbench did not write, "
                "not a collection; it stays as it is (choose another name, or another --db)"
            )
        pipeline: RAGPipeline | None = None
        client, cluster = None, None
        try:
            if options.from_run is not None:
                run, trial_id = options.from_run, options.trial or ""
                if exists:
                    _same_trial(target, run, trial_id)
                pipeline, documents = RAGPipeline.for_trial(run, trial_id, target)
                steps: list[tuple[str, Iterable[Document], int | None]] = [
                    (f"trial {trial_id}", _Corpus(documents, run_origin(run)), len(documents))
                ]
            else:
                trial = pipeline_trial(options.spec or {})
                pipeline = RAGPipeline.open(target) if exists else RAGPipeline.create(trial, target)
                if options.spec is not None and pipeline.trial.id != trial.id:
                    raise ConfigError(
                        f"--config: collection {target.name!r} exists with another "
                        "configuration; its config stays (ingest into another --collection)"
                    )
                steps = []
            if pipeline.env.embeddings is None:  # vectors embedded before are not embedded again
                pipeline.env.embeddings = EmbeddingCache(default_cache_root())
            if source is not None and options.source is not None:
                steps.append((str(options.source), source, _files(options.source)))
            if options.executor == "dask":
                client, cluster = dask_client(options.workers, options.scheduler)
            for what, given, expected in steps:
                progress = Progress(what, expected)

                def tell(report: IndexReport, progress: Progress = progress) -> None:
                    progress.report = report
                    if show is not None:
                        show(progress)

                read = given if client is None else _Ahead(given, pipeline, client)
                reports.append(pipeline.index(read, options.replace, tell))
            _check_indexed(reports, target.name, exists)
        except BaseException as exc:
            made = not exists and owned(target, "collection")
            refused = isinstance(exc, ConfigError | DataError)  # not a kill: nothing goes on
            if made and (refused or pipeline is None or not pipeline.document_ids):
                shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
    return pipeline, reports


def _same_trial(target: Path, run: str, trial_id: str) -> None:
    """``ConfigError`` when the collection at ``target`` is of another configuration than
    the trial ``trial_id`` of ``run``, naming both and the way out."""
    wanted = chosen_trial(RunStore(run), trial_id)
    have = RAGPipeline.open(target).trial
    if have.id != wanted.id:
        raise ConfigError(
            f"--collection {target.name}: a collection of another configuration "
            f"({have.label}) than trial {trial_id} of {run} ({wanted.label}); its config "
            "stays (deploy the trial into another --collection)"
        )


def _check_indexed(reports: list[IndexReport], name: str, existed: bool) -> None:
    """``DataError`` when an ingest indexed no document and documents failed: each one it
    tried failed (a model that does not load, say), which is no success to report."""
    errors = [error for report in reports for error in report.errors]
    if not errors or any(report.documents_indexed for report in reports):
        return
    where, why = errors[0]
    kept = (
        f"nothing was indexed into collection {name!r}"
        if existed
        else (f"collection {name!r} is not created")
    )
    raise DataError(
        f"{where}: {why.splitlines()[0] if why else 'failed'}; every document to index "
        f"failed ({len(errors)}), {kept}"
    )


@dataclass(frozen=True)
class _Corpus(Iterable[Document]):
    """A run's corpus and where it comes from (``origin``: ``run_origin``), so that its
    documents and a folder's never replace each other unasked."""

    documents: list[Document]
    origin: str

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)


class _Ahead(Iterable[Document]):
    """Documents passed on in order, the chunks of the next batches embedded on the workers
    meanwhile; the loader's attributes (its report, its folder) show through."""

    def __init__(self, documents: Iterable[Document], pipeline: RAGPipeline, client: Any) -> None:
        self.documents, self.pipeline, self.client = documents, pipeline, client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.documents, name)

    def __iter__(self) -> Iterator[Document]:
        docs = iter(self.documents)
        pending: list[tuple[list[Document], list[_Sent]]] = []
        while True:
            while len(pending) < _AHEAD:
                batch = list(islice(docs, _BATCH))
                if not batch:
                    break
                pending.append((batch, self._submit(batch)))
            if not pending:
                return
            batch, sent = pending.pop(0)
            for one in sent:
                one.cache.store(one.identity, "document", one.keys, one.future.result())
            yield from batch

    def _submit(self, batch: list[Document]) -> list[_Sent]:
        """Send the texts of ``batch`` the embedding cache lacks to the workers."""
        sent = []
        for config, model, texts in self.pipeline.embedding_work(batch):
            cached = self.pipeline.env.embedder(config, cached=True, model=model)
            cache = getattr(cached, "cache", None)
            if not isinstance(cache, EmbeddingCache):
                continue
            keys = cache.text_keys(texts)
            found = cache.lookup(cached.identity, "document", keys)
            missing = {k: t for k, t, v in zip(keys, texts, found, strict=True) if v is None}
            if missing:
                path = str(model.path) if model is not None else None
                future = self.client.submit(
                    _embed, config, path, list(missing.values()), pure=False
                )
                sent.append(_Sent(future, cache, cached.identity, list(missing)))
        return sent


@dataclass(frozen=True)
class _Sent:
    """Texts sent to a worker: the future of their vectors and where they go in the cache."""

    future: Any
    cache: EmbeddingCache
    identity: str
    keys: list[bytes]


def _embed(config: ComponentConfig, model: str | None, texts: list[str]) -> np.ndarray:
    """On a worker: the document vectors of ``texts`` by the embedder of ``config`` (running
    its trained ``model`` when it has one); one embedder per worker process."""
    key = (config.key(), model)
    if key not in _WORKER_EMBEDDERS:
        _WORKER_EMBEDDERS[key] = Env().embedder(
            config, model=TunedModel(Path(model)) if model is not None else None
        )
    return _WORKER_EMBEDDERS[key].embed(texts, "document")


_WORKER_EMBEDDERS: dict[tuple[str, str | None], Any] = {}
