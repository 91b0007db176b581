"""``ragbench ingest``, ``search`` and ``serve``: persistent collections (deployed pipelines)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ragbench.cli.common import collection, follow_symlinks, globs, json_arg
from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError, DataError

if TYPE_CHECKING:
    from ragbench.pipeline import RAGPipeline


def _collection_dir(args: argparse.Namespace) -> Path:
    """The folder of ``--collection`` (a plain name, checked as declared) under ``--db``, or
    else RAGBENCH_DB or the default collections folder; ``ConfigError`` when that is a file."""
    import os

    db = args.db or os.environ.get("RAGBENCH_DB") or Path.home() / ".local/share/ragbench"
    if Path(db).exists() and not Path(db).is_dir():
        raise ConfigError(f"--db {db}: is a file, not a folder of collections")
    return Path(db) / args.collection


def _ingest(args: argparse.Namespace) -> int:
    from ragbench.pipeline import RAGPipeline, collection_lock, pipeline_trial
    from ragbench.text.loaders import load

    target = _collection_dir(args)
    if args.source is None and args.from_run is None:
        raise ConfigError("ingest: give --source PATH, --from-run RUN --trial ID, or both")
    if (args.from_run is None) != (args.trial is None):
        raise ConfigError("--from-run and --trial go together (--trial ID, or --trial best)")
    if args.config and args.from_run:
        raise ConfigError("--config and --from-run: give one (the trial is the config)")
    spec = json_arg("--config", args.config) if args.config else None
    source = (
        None
        if args.source is None
        else load(
            args.source,
            follow_symlinks=args.follow_symlinks,
            include=args.include,
            exclude=args.exclude,
        )
    )
    with collection_lock(target):  # other ingests into this collection wait until it is saved
        exists = (target / "pipeline.json").exists()
        if target.exists() and not exists:
            raise ConfigError(
                f"--collection {args.collection}: {target} is a folder ragbench did not write, "
                "not a collection; it stays as it is (choose another name, or another --db)"
            )
        pipeline = RAGPipeline.open(target) if exists else None
        if pipeline is not None and (
            args.from_run or (spec is not None and pipeline_trial(spec).id != pipeline.trial.id)
        ):
            flag = "--config" if args.config else "--from-run"
            raise ConfigError(f"{flag}: collection {args.collection!r} exists; its config stays")
        if pipeline is None and args.from_run:
            pipeline = RAGPipeline.from_trial(args.from_run, args.trial)
            print(
                f"trial {args.trial}: {pipeline.trial.label}, {len(pipeline.document_ids)} "
                "documents of the run's corpus"
            )
        elif pipeline is None:
            pipeline = RAGPipeline.from_config(spec or {})
        if source is not None:
            print(pipeline.index(source, replace=args.replace))
        pipeline.save(target)
    print(f"collection {args.collection!r}: {len(pipeline.chunks)} chunks in {target}")
    return 0


def _open_collection(args: argparse.Namespace) -> RAGPipeline:
    from ragbench.pipeline import RAGPipeline

    target = _collection_dir(args)
    if not target.exists():
        raise DataError(f"no collection {args.collection!r} in {target.parent}")
    return RAGPipeline.open(target, lambda message: print(message, file=sys.stderr, flush=True))


def _search(args: argparse.Namespace) -> int:
    from ragbench.service import MAX_K, check_query, warm_up

    if not 1 <= args.k <= MAX_K:
        raise ConfigError(f"-k: expected a number of results from 1 to {MAX_K}, got {args.k}")
    if (args.query is None) != args.interactive:
        raise ConfigError("search: give a query, or --interactive to read queries from stdin")
    filter = json_arg("--filter", args.filter) if args.filter else None
    if args.query is not None:
        check_query(args.query)
    started = time.perf_counter()
    pipeline = _open_collection(args)
    if args.retriever is not None and args.retriever not in pipeline.retrievers:
        raise ConfigError(
            f"--retriever {args.retriever}: collection {args.collection!r} serves "
            f"{', '.join(pipeline.retrievers)}"
        )
    warm_up(pipeline, [args.retriever])  # loading is not query time: it is printed apart
    loaded_ms = (time.perf_counter() - started) * 1000
    print(f"collection {args.collection!r} loaded in {loaded_ms:.0f} ms", file=sys.stderr)
    if not args.interactive:
        _search_once(pipeline, args.query, args, filter)
        return 0
    while True:  # the collection and its models stay loaded between queries
        sys.stderr.write("query> ")
        sys.stderr.flush()
        line = sys.stdin.readline()
        query = line.strip()
        if not line or not query or query == ":q":
            return 0
        _search_once(pipeline, query, args, filter)
        sys.stdout.flush()


def _search_once(
    pipeline: RAGPipeline, query: str, args: argparse.Namespace, filter: dict | None
) -> None:
    """Print one query's hits: JSON rows, or a table with what each retriever found."""
    from ragbench.service import search

    found = search(pipeline, query, args.k, filter, args.retriever)
    if args.format == "json":
        rows = [
            {
                **{key: value for key, value in hit.to_json().items() if key != "metadata"},
                "score_scale": found.scale,
            }
            for hit in found.hits
        ]
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=2) + "\n")
        return
    scales = "; ".join(f"{name} = {scale}" for name, scale in found.scales.items())
    sys.stdout.write(f"{found.retriever}, {found.took_ms:.0f} ms; score = {found.scale}\n")
    if scales:
        sys.stdout.write(f"{scales}\n")
    for hit in found.hits:
        where = "  ".join(
            f"{name} " + ("-" if f is None else f"#{f.rank} {f.score:.4g}")
            for name, f in hit.found_by.items()
        )
        preview = " ".join(hit.text.split())[:160]
        sys.stdout.write(f"{hit.rank:>2}. {hit.score:8.4f}  {hit.chunk_id}  {where}\n")
        sys.stdout.write(f"    {preview}\n")
    if not found.hits:
        sys.stdout.write("no results\n")


def _serve(args: argparse.Namespace) -> int:
    from ragbench.api import SearchServer
    from ragbench.service import check_host, check_port

    check_host(args.host, args.allow_remote)
    check_port(args.port)
    pipeline = _open_collection(args)
    try:
        server = SearchServer(
            pipeline,
            args.collection,
            args.host,
            args.port,
            args.allow_remote,
            _collection_dir(args),
        )
    except OSError as exc:
        where = f"{args.host}:{args.port}"
        message = f"--port {args.port}: cannot listen on {where}: {exc.strerror or exc}"
        raise ConfigError(message) from None
    print(
        f"serving collection {args.collection!r} ({len(pipeline.chunks)} chunks, "
        f"{', '.join(pipeline.retrievers)}) on {server.url}: POST /search, GET /health, "
        "GET /metrics, GET /openapi.json",
        flush=True,
    )
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:  # uvicorn raises the signal again once it stopped
            print("stopped", file=sys.stderr)
    return 0


def _pipeline_models(flag: str, value: str) -> None:
    """``ConfigError`` before an ingest when the pipeline spec ``value`` names a model that
    cannot be loaded here (each document would fail to embed, leaving an empty collection)."""
    from ragbench.models import check_models
    from ragbench.pipeline import pipeline_trial

    spec = json_arg(flag, value)
    try:
        check_models([pipeline_trial(spec).configs], spec, "pipeline")
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


_COLLECTION = collection("collection name")
_DB_HELP = "collections folder (default: RAGBENCH_DB or ~/.local/share/ragbench)"
# read by search and serve, where a missing one holds no collection (the handler says which)
_DB = Arg("--db", help=_DB_HELP)

COMMANDS = (
    Command(
        "ingest",
        help="index a file or folder into a persistent collection, or deploy a sweep's trial",
        args=(
            Arg(
                "--source",
                path="input path",
                names=True,
                help="file or directory to index, or an http(s) URL",
            ),
            *globs("--source"),
            follow_symlinks("--source"),
            Arg(
                "--from-run",
                path="input folder",
                metavar="RUN",
                help="a run directory: the collection runs its trial --trial over the run's corpus",
            ),
            Arg("--trial", metavar="ID", help="trial id of --from-run, or 'best'"),
            Arg(
                "--replace",
                action="store_true",
                help="let --source replace documents of the same id indexed from another folder "
                "(refused otherwise: two folders' README.md never overwrite each other)",
            ),
            _COLLECTION,
            Arg("--db", path="output folder", help=_DB_HELP),
            Arg(
                "--config",
                check=_pipeline_models,
                help="pipeline spec for a new collection as JSON, one component per axis, e.g. "
                '\'{"chunker": {"kind": "recursive", "size": 400}, "retriever": {"kind": '
                '"bm25"}}\'',
            ),
        ),
        run=_ingest,
    ),
    Command(
        "search",
        help="query a collection",
        args=(
            Arg("query", nargs="?", help="the text to search for"),
            _COLLECTION,
            Arg("-k", type=int, default=5, help="number of results"),
            _DB,
            Arg("--format", choices=["table", "json"], default="table"),
            Arg(
                "--retriever",
                choices=["bm25", "dense", "hybrid"],
                help="first stage to run (default: the collection's; a hybrid one also serves "
                "bm25 and dense alone)",
            ),
            Arg(
                "--filter",
                metavar="JSON",
                help='chunk metadata to match exactly, e.g. \'{"tenant": "a"}\'',
            ),
            Arg(
                "--interactive",
                action="store_true",
                help="read queries from stdin, one a line, until EOF, an empty line or :q (the "
                "collection and its model load once)",
            ),
        ),
        run=_search,
    ),
    Command(
        "serve",
        help="serve a collection over HTTP (JSON: POST /search, GET /health, GET /metrics, "
        "GET /openapi.json)",
        args=(
            _COLLECTION,
            _DB,
            Arg("--host", default="127.0.0.1", help="address to bind (default: loopback)"),
            Arg("--port", type=int, default=8765, help="port (0: any free port)"),
            Arg(
                "--allow-remote",
                action="store_true",
                help="allow a non-loopback --host (the API has no authentication)",
            ),
        ),
        run=_serve,
    ),
)
