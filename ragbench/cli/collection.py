"""``ragbench ingest``, ``search`` and ``serve``: persistent collections (deployed pipelines)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import itertools
import json
import socket
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

    from ragbench.errors import path_problem

    db = args.db or os.environ.get("RAGBENCH_DB") or Path.home() / ".local/share/ragbench"
    problem = path_problem(db)
    if problem is not None:
        raise ConfigError(f"--db {db}: {problem}")
    if Path(db).exists() and not Path(db).is_dir():
        raise ConfigError(f"--db {db}: is a file, not a folder of collections")
    return Path(db) / args.collection


def _ingest(args: argparse.Namespace) -> int:
    from ragbench.ingest import IngestOptions, Progress, ingest

    options = IngestOptions(
        source=args.source,
        from_run=args.from_run,
        trial=args.trial,
        spec=json_arg("--config", args.config) if args.config else None,
        replace=args.replace,
        follow_symlinks=args.follow_symlinks,
        include=tuple(args.include),
        exclude=tuple(args.exclude),
        executor=args.executor,
        workers=args.workers,
        scheduler=args.scheduler,
    )
    shown = [0.0]
    live = sys.stderr.isatty()  # a terminal redraws one line; a log gets a line now and then

    def show(progress: Progress) -> None:
        if time.monotonic() - shown[0] >= (1 if live else 30):
            shown[0] = time.monotonic()
            if live:
                print(f"\r{progress.line()}\033[K", end="", file=sys.stderr, flush=True)
            else:
                print(progress.line(), file=sys.stderr, flush=True)

    target = _collection_dir(args)
    try:
        pipeline, reports = ingest(target, options, show)
    finally:
        if shown[0] and live:
            print(file=sys.stderr)  # an error, or the report, starts on a line of its own
    if args.from_run:
        print(f"trial {args.trial}: {pipeline.trial.label}, over the run's corpus")
    for report in reports:
        print(report)
    print(f"collection {args.collection!r}: {len(pipeline.chunks)} chunks in {target}")
    return 0


def _open_collection(args: argparse.Namespace) -> RAGPipeline:
    from ragbench.pipeline import RAGPipeline

    target = _collection_dir(args)
    if not target.exists():
        raise DataError(f"no collection {args.collection!r} in {target.parent}")
    return RAGPipeline.open(target)


def _search(args: argparse.Namespace) -> int:
    from ragbench.service import LIMITS, MAX_K, check_query, warm_up

    if not 1 <= args.k <= MAX_K:
        raise ConfigError(f"-k: expected a number of results from 1 to {MAX_K}, got {args.k}")
    if (args.query is None) != args.interactive:
        raise ConfigError("search: give a query, or --interactive to read queries from stdin")
    filter = json_arg("--filter", args.filter, '{"tenant": "a"}') if args.filter else None
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
    refused = 0
    for number in itertools.count(1):  # the collection and its models stay loaded meanwhile
        sys.stderr.write("query> ")
        sys.stderr.flush()
        try:  # a line that is no query is said, and the next one read
            line = _stdin_line(LIMITS.max_query_chars)
            query = line.strip() if line is not None else ""
            if not query or query == ":q":
                break
            _search_once(pipeline, check_query(query), args, filter)
        except (ConfigError, DataError) as exc:
            print(f"ragbench search: line {number}: {exc}", file=sys.stderr, flush=True)
            refused += 1
        sys.stdout.flush()
    return 2 if refused else 0


def _stdin_line(max_chars: int) -> str | None:
    """The next line of stdin (None at its end); ``RequestError`` naming ``query`` when it is
    no UTF-8 or clearly longer than ``max_chars`` (the rest of the line is read and dropped)."""
    from ragbench.service import RequestError

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream (a notebook's, a test's): decoded already
        return sys.stdin.readline() or None
    limit = 4 * max_chars + 2  # UTF-8 bytes of max_chars characters, and a newline
    raw = stream.readline(limit)
    if not raw:
        return None
    if len(raw) == limit and not raw.endswith(b"\n"):
        while (rest := stream.readline(limit)) and not rest.endswith(b"\n"):
            pass
        raise RequestError("query", f"longer than {max_chars:,} characters")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = f"byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        raise RequestError("query", f"not UTF-8: {at}") from None


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
    except OSError as exc:  # the address is the host's fault when it names none of this machine
        host = isinstance(exc, socket.gaierror) or exc.errno in (
            errno.EADDRNOTAVAIL,
            errno.EAFNOSUPPORT,
        )
        flag = f"--host {args.host}" if host else f"--port {args.port}"
        where = f"{args.host}:{args.port}"
        raise ConfigError(f"{flag}: cannot listen on {where}: {exc.strerror or exc}") from None
    print(
        f"serving collection {args.collection!r} ({len(pipeline.chunks)} chunks, "
        f"{', '.join(pipeline.retrievers)}) on {server.url}: POST /search, GET /health, "
        "GET /metrics, GET /openapi.json",
        flush=True,
    )
    # uvicorn raises the signal again once it stopped, when asyncio's own SIGINT handler has
    # not already seen the task finish
    with server, contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    print("stopped", file=sys.stderr)
    return 0


def _pipeline_models(flag: str, value: str) -> None:
    """``ConfigError`` before an ingest reads a document when the pipeline spec ``value``
    names a model that cannot be loaded here: one that is nowhere, or a local folder that is
    no model (its embedder is loaded, as ``run --dry-run`` loads it); each document would
    fail to embed, leaving an empty collection."""
    from ragbench.index.embedders import EmbeddingError
    from ragbench.models import check_models, model_fields, resolve_model
    from ragbench.pipeline import pipeline_trial
    from ragbench.retrieve.graph import Env

    spec = json_arg(flag, value)
    try:
        trial = pipeline_trial(spec)
        check_models([trial.configs], spec, "pipeline")
        embedder = trial.get("embedder")
        names = model_fields(embedder.model_dump(mode="json"), "") if embedder else []
        local = any(Path(resolve_model(name)).exists() for _, name in names)
        if embedder is not None and local and getattr(embedder, "finetune", None) is None:
            Env(warm_up=False).embedder(embedder).embed(["warm up"], "query")  # loads it
    except ConfigError as exc:
        raise ConfigError(f"{flag}: {exc}") from None
    except EmbeddingError as exc:
        raise ConfigError(f"{flag}: embedder: {str(exc).splitlines()[0]}") from None


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
                "--executor",
                choices=["serial", "dask"],
                default="serial",
                help="where documents are embedded: here, or on a Dask cluster's workers "
                "(a local one of --workers processes, or --scheduler's)",
            ),
            Arg("--workers", type=int, default=2, help="local Dask workers (default 2)"),
            Arg("--scheduler", metavar="ADDRESS", help="a Dask scheduler, e.g. tcp://host:8786"),
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
