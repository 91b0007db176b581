"""The ``ragbench`` command: parses arguments, calls library functions, prints results.

Exit codes: 0 success, 1 failure during work, 2 bad usage or invalid config/input (a message,
no traceback).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ragbench.errors import ConfigError, DataError, RagbenchError, writable_folder

if TYPE_CHECKING:
    import pandas as pd

    from ragbench.evaluate.metric_table import Metric
    from ragbench.experiment.config import ExperimentConfig
    from ragbench.pipeline import RAGPipeline

__all__ = ["main"]

Command = Callable[[argparse.Namespace], int]

_MLFLOW_URI = "sqlite:///mlruns.db"  # ragbench.experiment.mlflow_log.DEFAULT_URI


def _json_arg(flag: str, value: str) -> dict:
    from ragbench.data.problems import DuplicateKey, loads_json

    try:
        spec = loads_json(value)
    except DuplicateKey as exc:
        raise ConfigError(f"{flag}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"{flag}: invalid JSON (nested too deeply)") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{flag}: expected a JSON object like '{{\"kind\": ...}}'")
    return spec


def _cmd_chunk(args: argparse.Namespace) -> int:
    from ragbench.text.chunkers import build_chunker, chunk_documents
    from ragbench.text.loaders import load

    chunker = build_chunker(_json_arg("--chunker", args.chunker))
    source = load(Path(args.path), follow_symlinks=args.follow_symlinks)
    started = time.perf_counter()
    docs = list(source)
    chunks = chunk_documents(chunker, docs)
    elapsed = time.perf_counter() - started
    out = sys.stdout
    if args.format == "jsonl":
        for c in chunks:
            row = {
                "doc_id": c.doc_id,
                "id": c.id,
                "index": c.index,
                "start": c.start,
                "end": c.end,
                "text": c.text,
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif args.format == "table":
        out.write(f"{'id':<48} {'start':>8} {'end':>8} {'chars':>6}  text\n")
        for c in chunks:
            preview = c.text[:60].replace("\n", " ")
            out.write(f"{c.id:<48} {c.start:>8} {c.end:>8} {len(c.text):>6}  {preview}\n")
    else:
        sizes = [len(c.text) for c in chunks]
        out.write(f"chunker     {chunker.config.label()}\n")
        out.write(f"documents   {len(docs)}\n")
        out.write(f"chunks      {len(chunks)}\n")
        if sizes:
            out.write(
                f"chunk chars min {min(sizes)} / median {statistics.median(sizes):.0f} / "
                f"mean {statistics.fmean(sizes):.0f} / max {max(sizes)}\n"
            )
        out.write(f"time        {elapsed:.2f} s\n")
    if source.report.problems:
        print(source.report.summary(), file=sys.stderr)
    return 0


# ---------------------------------------------------------------- datasets


def _cmd_datasets_list(args: argparse.Namespace) -> int:
    from ragbench.data.catalog import DATASETS
    from ragbench.data.download import BEIR_DATASETS, data_dir

    out = sys.stdout
    out.write("bundled (the repository's datasets/ folder):\n")
    for bundled in DATASETS.values():
        where = bundled.path if bundled.path.is_dir() else "missing: not a source checkout"
        out.write(f"  {bundled.name:<18} {bundled.format:<20} {bundled.description} [{where}]\n")
    root = data_dir()
    out.write(f"BEIR (`ragbench datasets download NAME`; data dir {root}):\n")
    for name in BEIR_DATASETS:
        state = "downloaded" if (root / name).is_dir() else "-"
        out.write(f"  {name:<18} {state}\n")
    return 0


def _cmd_datasets_info(args: argparse.Namespace) -> int:
    from ragbench.data.catalog import dataset_format, load_dataset, resolve_dataset
    from ragbench.data.summary import summarize

    path = resolve_dataset(args.path)
    fmt = dataset_format(path, args.format, args.queries)
    info = summarize(load_dataset(path, format=fmt, split=args.split, queries=args.queries))
    grades = ", ".join(f"grade {g}: {n:,}" for g, n in info.judgements.items())
    rows = [
        ("name", info.name),
        ("path", str(path)),
        ("format", fmt),
        ("split", info.split),
        ("documents", f"{info.documents:,} ({info.characters:,} characters)"),
        ("queries", f"{info.queries:,}"),
        ("judgements", f"{sum(info.judgements.values()):,} ({grades or 'none'})"),
    ]
    if info.mean_span_chars is not None:
        rows.append(("spans", f"{info.spans:,} (mean {info.mean_span_chars:.0f} characters)"))
    if info.query_types:
        rows.append(("query types", ", ".join(f"{t} {n}" for t, n in info.query_types.items())))
    if info.answers:
        rows.append(("answers", f"{info.answers:,} of {info.queries:,} queries"))
    rows.append(("fingerprint", info.fingerprint))
    for key, value in rows:
        sys.stdout.write(f"{key:<12} {value}\n")
    return 0


def _cmd_datasets_validate(args: argparse.Namespace) -> int:
    from ragbench.data.validate import validate_dataset

    report = validate_dataset(args.path, format=args.format, queries=args.queries)
    sys.stdout.write(f"{report}\n")
    return 0 if report.ok else 1


def _cmd_datasets_download(args: argparse.Namespace) -> int:
    from ragbench.data.download import download_beir

    result = download_beir(
        args.name, args.dir, base_url=args.url, sha256=args.sha256, force=args.force
    )
    if not result.downloaded:
        sys.stdout.write(f"{args.name}: already in {result.path} (--force downloads again)\n")
        return 0
    checked = "sha256 verified" if result.verified else "not verified: no known checksum"
    sys.stdout.write(f"{args.name}: downloaded to {result.path} ({checked})\n")
    return 0


def _cmd_datasets_import_ragas(args: argparse.Namespace) -> int:
    from ragbench.data.ragas_import import import_ragas

    result = import_ragas(args.file, args.out, corpus=args.corpus)
    for problem in result.problems:
        print(f"{problem.severity}: {problem}", file=sys.stderr)
    sys.stdout.write(
        f"{result.path}: {result.queries:,} queries ({result.answers:,} with a reference "
        f"answer), {result.documents:,} documents; {result.left_out:,} row(s) left out\n"
    )
    return 0


_GENERATE_NUMBERS: dict[str, type[int] | type[float]] = {
    "n": int,
    "seed": int,
    "window": int,
    "min_words": int,
    "evidence_terms": int,
    "passage_words": int,
    "min_match": float,
    "dedup": float,
    "max_overlap": float,
    "multi_hop": int,
}


def _cmd_datasets_generate(args: argparse.Namespace) -> int:
    from ragbench.data.generate import build_method, generate
    from ragbench.text.loaders import skipped_summary

    options: dict[str, int | float | None] = {}
    for name, kind in _GENERATE_NUMBERS.items():
        text = getattr(args, name)
        try:
            options[name] = None if text is None else kind(text)
        except ValueError:
            expected = "an integer" if kind is int else "a number"
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag}: expected {expected}, got {text!r}") from None
    n, seed = options.pop("n"), options.pop("seed")
    method = build_method(
        args.method,
        base_url=args.base_url,
        model=args.model,
        credential=args.credential,
        llm_cache=args.llm_cache,
        embedder=_json_arg("--embedder", args.embedder) if args.embedder else None,
        keep_numbers=args.keep_numbers or None,
        keep_references=args.keep_references or None,
        **options,
    )
    result = generate(
        args.corpus,
        args.out,
        method,
        n=50 if n is None else int(n),
        seed=int(seed or 0),
        include=args.include,
        exclude=args.exclude,
    )
    if result.problems:
        print(skipped_summary(result.problems), file=sys.stderr)
    sys.stdout.write(f"{result}\n")
    return 0


def _cmd_datasets_agreement(args: argparse.Namespace) -> int:
    from ragbench.report.agreement import run_agreement

    found = run_agreement(
        args.config,
        args.real,
        args.synthetic,
        metric=args.metric,
        out=args.out,
        limit_queries=args.limit_queries,
        overwrite=args.overwrite,
        n_resamples=args.resamples,
        seed=args.seed,
    )
    sys.stdout.write(f"{found.to_markdown()}\n")
    return 0


def _cmd_datasets_judge(args: argparse.Namespace) -> int:
    from ragbench.report.judged import JUDGED_SPLIT, JudgingSession, judged_agreement

    session = JudgingSession(args.set, args.run, n=args.queries, k=args.depth, seed=args.seed)
    out = sys.stdout
    out.write(session.start())
    while not session.done:
        out.flush()
        line = sys.stdin.readline()
        if line and not sys.stdin.isatty():  # piped answers: shown, so the output reads
            out.write(line if line.endswith("\n") else line + "\n")
        out.write(session.answer(line) if line else "\n" + session.quit())
    for run in args.run if args.agreement else ():
        found = judged_agreement(
            args.set, run, metric=args.metric, n_resamples=args.resamples, seed=args.seed
        )
        out.write(
            f"\nAgreement of {run} with the judged queries (real: split {JUDGED_SPLIT!r} of "
            f"{args.set}; synthetic: the generated labels the run evaluated)\n\n"
            f"{found.to_markdown()}\n"
        )
    return 0


# ---------------------------------------------------------------- run, cache


def _print_frame(frame: pd.DataFrame) -> None:
    import pandas as pd

    with pd.option_context(
        "display.width",
        200,
        "display.max_colwidth",
        70,
        "display.max_columns",
        20,
        "display.float_format",
        "{:.4f}".format,
    ):
        print(frame.to_string())


def _cmd_run(args: argparse.Namespace) -> int:
    from ragbench.experiment.mlflow_log import log_run, require_mlflow
    from ragbench.experiment.runner import dry_run, run
    from ragbench.report.markdown import answer_lines
    from ragbench.report.report import Report
    from ragbench.report.tables import trial_table

    config = _run_config(args)
    if args.dry_run:
        return _print_dry_run(dry_run(config, args.limit_queries))
    if args.select is not None:
        _check_select(args.select, config.evaluation.metrics)
    if args.mlflow:
        require_mlflow()
    result = run(
        config,
        args.out,
        resume=args.resume,
        overwrite=args.overwrite,
        executor=args.executor,
        workers=args.workers,
        scheduler=args.scheduler,
        limit_queries=args.limit_queries,
        remeasure_latency=args.remeasure_latency,
    )
    trials = result.trials
    finished = int((trials["status"] == "ok").sum()) if not trials.empty else 0
    if finished:
        _print_frame(trial_table(trials, result.metrics))
    print(f"\nrun directory: {result.path}")
    report_dir = None
    if not finished:
        print("no trial finished: no table and no report", file=sys.stderr)
    elif not args.no_report:
        try:
            report = Report.from_run(
                result.path, latency_budget_ms=args.latency_budget, then=args.select
            )
            paths = report.write(("html", "md"))
            print(f"report:        {paths['html']}\n")
            print("\n".join(answer_lines(report)))
            report_dir = paths["html"].parent
        except DataError as exc:  # the trials are kept; only the report does not apply
            print(f"report skipped: {exc}", file=sys.stderr)
    if args.mlflow:
        print(f"mlflow:        {log_run(result.path, args.mlflow, report_dir)}")
    failed = len(trials) - finished
    if failed:
        print(f"{failed} trial(s) failed; see {result.path / 'trials.parquet'}", file=sys.stderr)
    return 1 if failed else 0


def _run_config(args: argparse.Namespace) -> ExperimentConfig:
    """The config of ``ragbench run``: the file, its ``--set`` overrides, and ``--dataset`` /
    ``--queries`` in place of its labeled set."""
    from ragbench.experiment.config import load_config

    config = load_config(args.config, args.set or ())
    dataset: dict[str, str | None] = {}
    if args.dataset:  # another set: its own labels unless --queries gives them
        given = Path(args.dataset)
        dataset = {
            "path": str(given.resolve()) if given.exists() else args.dataset,
            "queries": None,
        }
    if args.queries:
        dataset["queries"] = str(Path(args.queries).resolve())
    if dataset:
        config = config.model_copy(update={"dataset": config.dataset.model_copy(update=dataset)})
    return config


def _print_dry_run(planned: pd.DataFrame) -> int:
    """The dry run's table, its total estimate, and a word on redundant trials."""
    _print_frame(planned.set_index("trial_id"))
    print(_estimate_line(planned))
    redundant = int((planned["redundant"] != "-").sum())
    if redundant:
        print(
            f"{redundant} redundant trial(s): they cannot rank differently from another "
            "trial (column redundant); drop them from the sweep",
            file=sys.stderr,
        )
    return 0


def _check_select(metric: str, metrics: Sequence[Metric]) -> None:
    """``ConfigError`` before a run unless ``--select`` names one of its later metrics."""
    from ragbench.evaluate.metrics import parse_metric

    later = [m.name for m in metrics[1:]]
    try:
        wanted = parse_metric(metric).name
    except ConfigError as exc:
        raise ConfigError(f"--select: {exc}") from None
    if wanted not in later:
        raise ConfigError(
            f"--select {metric!r}: expected a metric of the config's evaluation.metrics after "
            f"the first ({', '.join(later) or 'there is none'})"
        )


def _estimate_line(planned: pd.DataFrame) -> str:
    """The dry run's total: the estimated time of the sweep, and its LLM calls and price."""
    seconds = float(planned["estimated_s"].sum())
    total = f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
    line = f"\nestimated: {total} for {len(planned)} trial(s) on this machine"
    calls = int(planned["llm_calls"].sum())
    if calls:
        dollars = planned["llm_usd"].dropna()
        price = f", ~${dollars.sum():.2f}" if len(dollars) else " (no price in the config)"
        line += f", plus up to {calls:,} LLM calls{price} (their time is the endpoint's)"
    return line


def _cmd_optimize(args: argparse.Namespace) -> int:
    from ragbench.optimize import optimize
    from ragbench.report.markdown import answer_lines
    from ragbench.report.tables import trial_table

    for flag, value, low in (("--n", args.n, 1), ("--seed", args.seed, 0)):
        if value < low:
            raise ConfigError(f"{flag}: expected an integer >= {low}, got {value}")
    done = optimize(
        args.docs, args.out, n=args.n, seed=args.seed, include=args.include, exclude=args.exclude
    )
    made = done.generation
    how = "reused" if made is None else f"generated from {made.documents:,} documents"
    print(f"labels:        {done.labels} ({done.queries:,} queries, {how})")
    _print_frame(trial_table(done.run.trials, done.run.metrics))
    print(f"\nrun directory: {done.run.path}\nreport:        {done.files['html']}\n")
    print("\n".join(answer_lines(done.report, args.collection)))
    return 0


def _add_globs(parser: argparse.ArgumentParser, folder: str) -> None:
    """The repeatable ``--include`` / ``--exclude`` flags that select the files of ``folder``
    by gitignore-like globs (``ragbench.text.loaders.DirectoryLoader``)."""
    for flag, what in (("--include", "read only files matching"), ("--exclude", "skip")):
        parser.add_argument(
            flag,
            action="append",
            default=[],
            metavar="GLOB",
            help=f"{what} GLOB, relative to {folder} (e.g. '**/*.md', 'build/**'; repeatable)",
        )


def _add_optimize(sub: argparse._SubParsersAction) -> None:
    optimize = sub.add_parser(
        "optimize",
        help="generate labels for a folder of documents, sweep the usual configurations, "
        "recommend one",
        description="Generate labels from DOCS (offline, cached), run the default sweep on them "
        "(BM25 at four settings, dense MiniLM, hybrid RRF and convex fusion, on two chunkings), "
        "write the report and print the recommendation, how sure it is and the command that "
        "deploys it. A second call reuses the labels and the cached stages.",
    )
    optimize.add_argument("docs", help="folder (or file) of your documents")
    _add_globs(optimize, "DOCS")
    optimize.add_argument(
        "--out", help="folder for the labels and the run (default: runs/optimize-<DOCS name>)"
    )
    optimize.add_argument("--n", type=int, default=300, help="queries to generate (default 300)")
    optimize.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    optimize.add_argument(
        "--collection", default="default", help="collection name in the deploy command"
    )
    optimize.set_defaults(func=_cmd_optimize)


def _cmd_report(args: argparse.Namespace) -> int:
    from ragbench.experiment.mlflow_log import log_run, require_mlflow
    from ragbench.report.report import Report, report_folder

    if args.mlflow:
        require_mlflow()
    out = writable_folder(args.out or report_folder(args.run_dir), "--out")
    report = Report.from_run(
        Path(args.run_dir),
        args.baseline,
        args.metric,
        test=args.test,
        correction=args.correction,
        latency_budget_ms=args.latency_budget,
        then=args.select,
    )
    formats = ["html", "md"] if args.format == "html" else [args.format]
    paths = report.write(formats, out)
    _print_frame(report.display_table())
    for fmt, path in paths.items():
        print(f"{fmt:<6} {path}")
    if args.mlflow:
        print(f"mlflow {log_run(args.run_dir, args.mlflow, next(iter(paths.values())).parent)}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from ragbench.report.compare import compare_folder, compare_runs, write_comparison

    table, warnings = compare_runs([Path(d) for d in args.run_dirs], args.metric)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    _print_frame(table.set_index(["run", "trial_id"]))
    paths = write_comparison(table, warnings, args.out or compare_folder(args.run_dirs))
    for fmt, path in paths.items():
        print(f"{fmt:<6} {path}")
    return 0


def _milliseconds(text: str) -> float:
    """``--latency-budget``: a positive number of milliseconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected a positive number of milliseconds (p50 total per query), got {text!r}"
        )
    return value


def _cmd_cache(args: argparse.Namespace) -> int:
    from ragbench.index.cache import ArtifactCache

    cache = ArtifactCache(args.root)
    if args.cache_command == "info":
        print(cache.info())
        return 0
    older = _duration(args.older_than) if args.older_than is not None else None
    print(f"removed {cache.clear(older)} entries from {cache.root}")
    return 0


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 86400}


def _duration(text: str) -> float:
    """Seconds in ``--older-than`` (``7d``, ``12h``, ``30m``, ``45s``; a bare number is days)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            "--older-than: expected a duration such as 7d, 12h, 30m or 45s (a bare number is "
            f"days), got {text!r}"
        )
    return float(match[1]) * _SECONDS[match[2]]


def _add_mlflow(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mlflow",
        nargs="?",
        const=_MLFLOW_URI,
        metavar="URI",
        help=f"log the sweep to MLflow: a parent run, a child per trial, the report (default "
        f"URI: {_MLFLOW_URI}; pip install ragbench[mlflow])",
    )


def _add_pick(parser: argparse.ArgumentParser) -> None:
    """What the recommendation weighs besides the primary metric (``run`` and ``report``)."""
    parser.add_argument(
        "--latency-budget",
        type=_milliseconds,
        metavar="MS",
        help="recommend the best trial within this p50 total latency (default: the baseline's)",
    )
    parser.add_argument(
        "--select",
        metavar="METRIC",
        help="a second metric that picks among the trials the first metric cannot separate "
        "(its bootstrap leaders), e.g. span_recall@5",
    )


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a sweep from a YAML config")
    run.add_argument("config", help="experiment YAML file")
    run.add_argument("--out", help="run directory (default: runs/<name>)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run")
    run.add_argument(
        "--remeasure-latency",
        action="store_true",
        help="measure each trial's latency again (nothing else is recomputed)",
    )
    run.add_argument("--overwrite", action="store_true", help="start an existing run again")
    run.add_argument("--executor", choices=["serial", "process", "dask"], default="serial")
    run.add_argument("--workers", type=int, default=2, help="processes for process/dask")
    run.add_argument("--scheduler", help="dask scheduler address (default: a LocalCluster)")
    run.add_argument("--limit-queries", type=int, help="evaluate only the first N queries")
    run.add_argument(
        "--dataset", help="dataset path or name, replacing the config's (and its queries file)"
    )
    run.add_argument(
        "--queries",
        metavar="FILE",
        help="queries file labeling a plain folder of documents (default: its queries.jsonl)",
    )
    run.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set sweep.reranker[1].model=/models/ce",
    )
    run.add_argument("--dry-run", action="store_true", help="list trials and cached artifacts")
    run.add_argument("--no-report", action="store_true", help="skip the HTML/Markdown report")
    _add_mlflow(run)
    _add_pick(run)
    run.set_defaults(func=_cmd_run)
    report = sub.add_parser("report", help="write report.html / report.md for a run directory")
    report.add_argument("run_dir", help="a run directory written by `ragbench run`")
    report.add_argument("--baseline", help="trial id or label (default: the config's, else first)")
    report.add_argument("--metric", help="primary metric (default: the first evaluated)")
    report.add_argument(
        "--format",
        choices=["html", "md", "latex"],
        default="html",
        help="html also writes report.md and plots/",
    )
    report.add_argument("--test", choices=["permutation", "t", "wilcoxon"], default="permutation")
    report.add_argument(
        "--correction", choices=["holm", "bonferroni", "bh", "none"], default="holm"
    )
    _add_pick(report)
    report.add_argument("--out", help="output folder (default: reports/<run-name>)")
    _add_mlflow(report)
    report.set_defaults(func=_cmd_report)
    compare = sub.add_parser("compare", help="trials of several runs in one table")
    compare.add_argument("run_dirs", nargs="+", help="run directories")
    compare.add_argument("--metric", help="metric to sort by (default: the first run's first)")
    compare.add_argument(
        "--out", help="output folder for compare.md/.csv (default: reports/<run-name>)"
    )
    compare.set_defaults(func=_cmd_compare)
    cache = sub.add_parser("cache", help="inspect or clear the stage cache")
    cache.add_argument("--root", help="cache root (default: RAGBENCH_CACHE or ~/.cache/ragbench)")
    commands = cache.add_subparsers(dest="cache_command", required=True)
    commands.add_parser("info", help="entries and sizes per stage")
    clear = commands.add_parser("clear", help="delete cached artifacts")
    clear.add_argument("--older-than", help="only entries unused for this long (e.g. 7d, 12h)")
    cache.set_defaults(func=_cmd_cache)


# ---------------------------------------------------------------- export


def _cmd_export_ragas(args: argparse.Namespace) -> int:
    from ragbench.report.export import export_ragas

    done = export_ragas(args.run_dir, args.trial, args.out)
    print(f"{done.path}: {done.rows:,} samples of trial {done.trial_id} ({done.label})")
    return 0


def _add_export(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="write a run's samples for other tools")
    formats = export.add_subparsers(dest="export_format", required=True)
    ragas = formats.add_parser(
        "ragas",
        help="one trial's samples as a ragas EvaluationDataset JSONL file",
        description="Write one row per query (user_input, retrieved_contexts and their ids, "
        "response, reference, reference_contexts and their ids) for "
        "ragas.EvaluationDataset.from_jsonl.",
    )
    ragas.add_argument("run_dir", help="a run directory written by `ragbench run`")
    ragas.add_argument(
        "--trial",
        default="best",
        metavar="ID",
        help="trial id, or 'best' on the run's first metric (default)",
    )
    ragas.add_argument("--out", help="file to write (default: RUN/ragas/<trial id>.jsonl)")
    ragas.set_defaults(func=_cmd_export_ragas)


# ---------------------------------------------------------------- collections


_MAX_COLLECTION_NAME = 100


def _collection_dir(args: argparse.Namespace) -> Path:
    import os

    db = args.db or os.environ.get("RAGBENCH_DB") or Path.home() / ".local/share/ragbench"
    if Path(db).exists() and not Path(db).is_dir():
        raise ConfigError(f"--db {db}: is a file, not a folder of collections")
    name = args.collection
    plain = 0 < len(name) <= _MAX_COLLECTION_NAME and name.isprintable()
    if not plain or "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(
            f"--collection: expected a plain name (1-{_MAX_COLLECTION_NAME} printable "
            f"characters, no '/' or '\\', not starting with '.'), got {name!r}"
        )
    return Path(db) / name


def _cmd_ingest(args: argparse.Namespace) -> int:
    from ragbench.pipeline import RAGPipeline, collection_lock, pipeline_trial
    from ragbench.text.loaders import load

    target = _collection_dir(args)
    if args.source is None and args.from_run is None:
        raise ConfigError("ingest: give --source PATH, --from-run RUN --trial ID, or both")
    if (args.from_run is None) != (args.trial is None):
        raise ConfigError("--from-run and --trial go together (--trial ID, or --trial best)")
    if args.config and args.from_run:
        raise ConfigError("--config and --from-run: give one (the trial is the config)")
    spec = _json_arg("--config", args.config) if args.config else None
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
            print(pipeline.index(source))
        pipeline.save(target)
    print(f"collection {args.collection!r}: {len(pipeline.chunks)} chunks in {target}")
    return 0


def _open_collection(args: argparse.Namespace) -> RAGPipeline:
    from ragbench.pipeline import RAGPipeline

    target = _collection_dir(args)
    if not target.exists():
        raise DataError(f"no collection {args.collection!r} in {target.parent}")
    return RAGPipeline.open(target, lambda message: print(message, file=sys.stderr, flush=True))


def _cmd_search(args: argparse.Namespace) -> int:
    from ragbench.service import MAX_K, check_query, warm_up

    if not 1 <= args.k <= MAX_K:
        raise ConfigError(f"-k: expected a number of results from 1 to {MAX_K}, got {args.k}")
    if (args.query is None) != args.interactive:
        raise ConfigError("search: give a query, or --interactive to read queries from stdin")
    filter = _json_arg("--filter", args.filter) if args.filter else None
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


def _cmd_serve(args: argparse.Namespace) -> int:
    from ragbench.service import SearchServer, check_host, check_port

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
        "GET /openapi.json",
        flush=True,
    )
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
    return 0


def _add_collections(sub: argparse._SubParsersAction) -> None:
    db_help = "collections folder (default: RAGBENCH_DB or ~/.local/share/ragbench)"
    ingest = sub.add_parser(
        "ingest",
        help="index a file or folder into a persistent collection, or deploy a sweep's trial",
    )
    ingest.add_argument("--source", help="file or directory to index, or an http(s) URL")
    _add_globs(ingest, "--source")
    ingest.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow links in --source that lead outside it (skipped and reported otherwise)",
    )
    ingest.add_argument(
        "--from-run",
        metavar="RUN",
        help="a run directory: the collection runs its trial --trial over the run's corpus",
    )
    ingest.add_argument("--trial", metavar="ID", help="trial id of --from-run, or 'best'")
    ingest.add_argument("--collection", default="default", help="collection name")
    ingest.add_argument("--db", help=db_help)
    ingest.add_argument(
        "--config",
        help="pipeline spec for a new collection as JSON, one component per axis, e.g. "
        '\'{"chunker": {"kind": "recursive", "size": 400}, "retriever": {"kind": "bm25"}}\'',
    )
    ingest.set_defaults(func=_cmd_ingest)
    search = sub.add_parser("search", help="query a collection")
    search.add_argument("query", nargs="?", help="the text to search for")
    search.add_argument("--collection", default="default", help="collection name")
    search.add_argument("-k", type=int, default=5, help="number of results")
    search.add_argument("--db", help=db_help)
    search.add_argument("--format", choices=["table", "json"], default="table")
    search.add_argument(
        "--retriever",
        choices=["bm25", "dense", "hybrid"],
        help="first stage to run (default: the collection's; a hybrid one also serves bm25 "
        "and dense alone)",
    )
    search.add_argument(
        "--filter", metavar="JSON", help='chunk metadata to match exactly, e.g. \'{"tenant": "a"}\''
    )
    search.add_argument(
        "--interactive",
        action="store_true",
        help="read queries from stdin, one a line, until EOF, an empty line or :q (the "
        "collection and its model load once)",
    )
    search.set_defaults(func=_cmd_search)
    serve = sub.add_parser(
        "serve",
        help="serve a collection over HTTP (JSON: POST /search, GET /health, GET /openapi.json)",
    )
    serve.add_argument("--collection", default="default", help="collection name")
    serve.add_argument("--db", help=db_help)
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    serve.add_argument("--port", type=int, default=8765, help="port (0: any free port)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (the API has no authentication)",
    )
    serve.set_defaults(func=_cmd_serve)


# ---------------------------------------------------------------- eval

_DEFAULT_METRICS = "ndcg@10,recall@100,map,mrr@10,precision@10"


def _cmd_eval(args: argparse.Namespace) -> int:
    from ragbench.data.trec import read_qrels, read_run
    from ragbench.evaluate.metrics import evaluate_run, parse_metrics

    metrics = parse_metrics([m for m in args.metrics.split(",") if m.strip()])
    if not metrics:
        raise ConfigError("--metrics: expected a comma-separated list such as ndcg@10,map")
    for flag, path, kind in (("--qrels", args.qrels, "qrels"), ("--run", args.run, "run")):
        if not Path(path).exists():
            raise DataError(f"{flag} {path}: no such file")
        if Path(path).is_dir():
            raise DataError(f"{flag} {path}: is a directory, expected a {kind} file")
    qrels, run = read_qrels(args.qrels), read_run(args.run)
    query_ids = list(qrels) if args.complete else [q for q in qrels if q in run]
    if not query_ids:
        raise DataError(f"{args.run}: no query of the run is judged in {args.qrels}")
    _write_scores(evaluate_run(qrels, run, metrics, args.level, query_ids), args)
    return 0


def _write_scores(frame: pd.DataFrame, args: argparse.Namespace) -> None:
    """Means (and, with --per-query, each query first) as a trec_eval table, JSON or CSV."""
    means = frame.mean()
    if args.format == "json":
        result = {"queries": len(frame), "means": means.to_dict()}
        if args.per_query:
            result["per_query"] = frame.to_dict(orient="index")
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return
    rows = [*(frame.iterrows() if args.per_query else []), ("all", means)]
    if args.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["query_id", *frame.columns])
        for qid, values in rows:
            writer.writerow([qid, *(repr(float(v)) for v in values)])
        return
    for qid, values in rows:
        for metric, value in values.items():
            sys.stdout.write(f"{metric:<22}\t{qid}\t{value:.4f}\n")


def _relevance_level(text: str) -> int:
    try:
        level = int(text)
    except ValueError:
        level = 0
    if level < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return level


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragbench", description="Evaluate and tune RAG retrieval on your corpus."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    chunk = sub.add_parser("chunk", help="load a file or directory and print its chunks")
    chunk.add_argument("path", help="file or directory to load")
    chunk.add_argument(
        "--chunker",
        default='{"kind": "recursive", "size": 512, "overlap": 64}',
        help='chunker spec as JSON, e.g. \'{"kind":"recursive","size":400,"overlap":50}\'',
    )
    chunk.add_argument("--format", choices=["table", "jsonl", "summary"], default="table")
    chunk.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="follow links in PATH that lead outside it (skipped and reported otherwise)",
    )
    chunk.set_defaults(func=_cmd_chunk)
    _add_datasets(sub)
    _add_eval(sub)
    _add_collections(sub)
    _add_run(sub)
    _add_optimize(sub)
    _add_export(sub)
    return parser


def _add_datasets(sub: argparse._SubParsersAction) -> None:
    datasets = sub.add_parser(
        "datasets", help="list, describe, validate, download, import or generate datasets"
    )
    commands = datasets.add_subparsers(dest="datasets_command", required=True)
    listing = commands.add_parser("list", help="bundled sets and downloadable BEIR sets")
    listing.set_defaults(func=_cmd_datasets_list)
    formats = ["beir", "spans", "chunking_evaluation", "folder"]
    queries = "queries file labeling a plain folder of documents (default: its queries.jsonl)"
    info = commands.add_parser("info", help="counts and fingerprint of a dataset")
    info.add_argument("path", help="dataset folder, bundled name (demo) or downloaded BEIR name")
    info.add_argument("--split", default="test")
    info.add_argument("--format", choices=formats, help="dataset format (default: detected)")
    info.add_argument("--queries", metavar="FILE", help=queries)
    info.set_defaults(func=_cmd_datasets_info)
    validate = commands.add_parser(
        "validate", help="list every problem of a dataset (exit 1 when there are any)"
    )
    validate.add_argument("path", help="dataset folder or name")
    validate.add_argument("--format", choices=formats, help="dataset format (default: detected)")
    validate.add_argument("--queries", metavar="FILE", help=queries)
    validate.set_defaults(func=_cmd_datasets_validate)
    download = commands.add_parser("download", help="download a BEIR dataset")
    download.add_argument("name", help="BEIR name, e.g. scifact (see `ragbench datasets list`)")
    download.add_argument(
        "--dir", help="parent folder (default: RAGBENCH_DATA or ~/.cache/ragbench/datasets)"
    )
    download.add_argument("--url", help="base URL (default: RAGBENCH_BEIR_URL or the UKP server)")
    download.add_argument("--sha256", help="expected sha256 of the zip (overrides the known one)")
    download.add_argument("--force", action="store_true", help="download again if present")
    download.set_defaults(func=_cmd_datasets_download)
    ragas = commands.add_parser(
        "import-ragas",
        help="turn a ragas test set (JSONL or CSV) into a span-labeled set",
        description="Write a ragas EvaluationDataset/Testset file (to_jsonl or to_csv) as a "
        "span-labeled set: each row a query with its reference contexts as evidence and its "
        "reference as the answer. Rows left out and contexts not found are reported by row.",
    )
    ragas.add_argument("file", help="the .jsonl or .csv file ragas wrote")
    ragas.add_argument("--out", required=True, help="folder to write (new or empty)")
    ragas.add_argument(
        "--corpus",
        help="folder of the documents the contexts come from: contexts are located in them and "
        "they become the set's corpus (default: one document per distinct context)",
    )
    ragas.set_defaults(func=_cmd_datasets_import_ragas)
    _add_generate(commands)
    _add_agreement(commands)
    _add_judge(commands)


def _add_generate(commands: argparse._SubParsersAction) -> None:
    generate = commands.add_parser(
        "generate",
        help="generate a span-labeled set from documents (ict, headings or an LLM)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Sample N places of CORPUS (round-robin over documents, then over their sections,
seeded), make a query of each and write a span-labeled set to --out that
`ragbench datasets validate` accepts. CORPUS is a file or folder of documents, or
a labeled set (BEIR, span-labeled, chunking_evaluation) whose documents are used.

methods:
  ict       (offline, the default) a sentence is the query (inverse cloze task):
            cut out of the set's corpus (cuts.jsonl), so only its context can
            find its document; span evidence is the --window sentences before
            and after it that share --evidence-terms terms with it. Skipped:
            headings, code, table rows, sentences that open by referring back
            (This, However, We, ...) and sentences with digits
  headings  (offline; Markdown and HTML) a heading is the query, cut out of the
            corpus; its section's body the evidence; generic headings and short
            sections are skipped
  llm       a chat model writes a question, verbatim excerpts of the passage
            that answer it (located exactly, whitespace-normalised or fuzzily)
            and a reference answer; near-duplicate questions are removed;
            every call is cached, so a rerun makes no request

A query of five words or more is never found verbatim in the corpus the set
is evaluated on: sentences repeated in the corpus are no queries. How well a
generated set ranks configurations like real labels is measured in
benchmarks/RESULTS.md (`ragbench datasets agreement`). The summary lists the
queries written, those dropped (and why) and the LLM requests made and cached.""",
    )
    generate.add_argument("corpus", help="file or folder of documents, or a labeled set")
    _add_globs(generate, "CORPUS")
    generate.add_argument("--out", required=True, help="folder to write (new or empty)")
    generate.add_argument(
        "--method", default="ict", metavar="{ict,headings,llm}", help="(default: ict)"
    )
    generate.add_argument("--n", metavar="N", help="queries to generate (default: 50)")
    generate.add_argument("--seed", metavar="S", help="sampling seed (default: 0)")
    generate.add_argument(
        "--min-words",
        metavar="N",
        help="skip a sentence (ict, default 8), section (headings, 20) or passage (llm, 30) "
        "of fewer words",
    )
    generate.add_argument(
        "--window", metavar="W", help="ict: sentences of context on each side (default: 2)"
    )
    generate.add_argument(
        "--evidence-terms",
        metavar="K",
        help="ict: terms a context sentence shares with the query to be its evidence (default: 3)",
    )
    generate.add_argument(
        "--keep-numbers", action="store_true", help="ict: sentences with digits may be queries"
    )
    generate.add_argument(
        "--keep-references",
        action="store_true",
        help="ict: sentences that open by referring back (This, However, ...) may be queries",
    )
    llm = generate.add_argument_group("--method llm")
    llm.add_argument(
        "--base-url", help="OpenAI-compatible endpoint, e.g. https://api.openai.com/v1"
    )
    llm.add_argument("--model", help="chat model name")
    llm.add_argument("--credential", help="credential name (see README: Endpoints and credentials)")
    llm.add_argument(
        "--llm-cache", metavar="DIR", help="LLM cache root (default: the stage cache root)"
    )
    llm.add_argument(
        "--passage-words", metavar="N", help="words per passage shown to the model (default: 200)"
    )
    llm.add_argument(
        "--min-match",
        metavar="S",
        help="lowest fuzzy match score (0-100) of an excerpt not found verbatim (default: 90)",
    )
    llm.add_argument(
        "--embedder",
        metavar="JSON",
        help="embedder spec for near-duplicate questions (default: sentence-transformers)",
    )
    llm.add_argument(
        "--dedup",
        metavar="T",
        help="drop a question more similar than T (cosine) to an earlier one (default: 0.95; "
        "1: keep all)",
    )
    llm.add_argument(
        "--max-overlap",
        metavar="F",
        help="drop a question when more than the share F of its content words are in its "
        "excerpts (default: keep all)",
    )
    llm.add_argument(
        "--multi-hop",
        metavar="K",
        help="K of the N questions over passages of two documents (default: 0)",
    )
    generate.set_defaults(func=_cmd_datasets_generate)


def _add_agreement(commands: argparse._SubParsersAction) -> None:
    agreement = commands.add_parser(
        "agreement",
        help="do two labeled sets (real, generated) rank a sweep's trials alike?",
        description="Run the sweep of --config on REAL and on SYNTH (its dataset replaced by "
        "each; no honest selection) into --out/real and --out/synthetic, resuming runs that "
        "exist, and print how alike the two sets rank the trials by their mean --metric: "
        "Kendall tau-b (with a 95% bootstrap interval over each set's queries) and Spearman "
        "rho, top-1 agreement (each set's best and its rank on the other; a tie is shown as "
        "one), the regret of the synthetic pick on real labels, each set's confidence in its "
        "pick (share of bootstrap resamples in which it is best), top-3 overlap and the trials "
        "that swap places.",
    )
    agreement.add_argument("real", help="the labeled set with real labels (path or name)")
    agreement.add_argument("synthetic", help="the generated set (`ragbench datasets generate`)")
    agreement.add_argument("--config", required=True, help="the sweep (an experiment YAML file)")
    agreement.add_argument("--metric", help="metric to rank by (default: the config's first)")
    agreement.add_argument(
        "--out", help="parent of the two run directories (default: runs/agreement-<name>)"
    )
    agreement.add_argument("--limit-queries", type=int, help="only the first N queries of each")
    agreement.add_argument(
        "--overwrite", action="store_true", help="run both sweeps again instead of resuming"
    )
    agreement.add_argument(
        "--resamples",
        type=_relevance_level,  # an integer >= 1
        default=1000,
        help="bootstrap resamples of each set's queries (default: 1000)",
    )
    agreement.add_argument("--seed", type=int, default=0, help="seed of the resamples")
    agreement.set_defaults(func=_cmd_datasets_agreement)


def _add_judge(commands: argparse._SubParsersAction) -> None:
    judge = commands.add_parser(
        "judge",
        help="judge a generated set's queries by hand in the terminal (split judged)",
        description="Sample --queries queries (seeded) of the split the runs evaluated, pool "
        "the top --depth documents of every finished trial of the runs for each, and ask for a "
        "grade per document (0 not relevant, 1 partly, 2 relevant; s skips the query, b goes "
        "back, q saves and quits), one answer a line on stdin. Each query's grades are written "
        "to SET's queries.jsonl as a new line <id>~judged of split 'judged' when its last "
        "document is graded; queries judged before are passed over, so a session resumes. "
        "Evaluate them over the same corpus and cuts: ragbench run CONFIG --dataset SET --set "
        "dataset.split=judged. --agreement then runs each run's sweep on the judged split "
        "(into <run>-judged) and prints how alike it ranks the trials (Kendall tau-b with its "
        "95%% bootstrap interval).",
    )
    judge.add_argument("set", help="the generated set (or a plain folder with queries.jsonl)")
    judge.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="RUN",
        help="a run directory of a sweep on SET (repeat for several)",
    )
    judge.add_argument("--queries", type=int, default=20, metavar="N", help="(default: 20)")
    judge.add_argument(
        "--depth", type=int, default=5, metavar="K", help="documents per trial (default: 5)"
    )
    judge.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seed")
    judge.add_argument(
        "--agreement",
        action="store_true",
        help="after judging, the agreement of each run with the judged queries",
    )
    judge.add_argument("--metric", help="--agreement: metric to rank by (default: the run's first)")
    judge.add_argument(
        "--resamples",
        type=_relevance_level,  # an integer >= 1
        default=1000,
        help="--agreement: bootstrap resamples of each side's queries (default: 1000)",
    )
    judge.set_defaults(func=_cmd_datasets_judge)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    evaluate = sub.add_parser(
        "eval",
        help="score a TREC run against qrels (trec_eval-like)",
        description="Score queries judged in the qrels and present in the run (trec_eval's "
        "default; -c: every qrels query, a missing one scoring 0).",
    )
    evaluate.add_argument("--qrels", required=True, help="TREC qrels or BEIR qrels TSV")
    evaluate.add_argument("--run", required=True, help="TREC run (qid Q0 docid rank score tag)")
    evaluate.add_argument(
        "--metrics",
        default=_DEFAULT_METRICS,
        help=f"comma-separated metrics (default: {_DEFAULT_METRICS})",
    )
    evaluate.add_argument("--per-query", action="store_true", help="also print each query")
    evaluate.add_argument("--format", choices=["table", "json", "csv"], default="table")
    evaluate.add_argument(
        "-l",
        "--level",
        type=_relevance_level,
        default=1,
        help="lowest grade that counts as relevant (trec_eval -l)",
    )
    evaluate.add_argument(
        "-c",
        "--complete",
        action="store_true",
        help="average over every qrels query (trec_eval -c)",
    )
    evaluate.set_defaults(func=_cmd_eval)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    from ragbench.progress import quiet_libraries

    args = _parser().parse_args(argv)
    quiet_libraries()  # one display speaks: ragbench's own
    try:
        return args.func(args)
    except (ConfigError, DataError) as exc:
        print(f"ragbench {args.command}: {exc}", file=sys.stderr)
        return 2
    except RagbenchError as exc:
        print(f"ragbench {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
