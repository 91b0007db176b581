"""``ragbench run``: a sweep from a YAML config, its table, report and recommendation, or with
``--dry-run`` its trials, what is cached and what the rest will cost."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ragbench.cli.common import MLFLOW, PICK, QUERIES_FILE, options, picked, print_frame, sample
from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

    from ragbench.evaluate.metric_table import Metric
    from ragbench.experiment.config import ExperimentConfig

# the options `run` hands to ``ragbench.experiment.runner.run`` as they are
_SWEEP_OPTIONS = (
    "resume",
    "overwrite",
    "executor",
    "workers",
    "scheduler",
    "limit_queries",
    "remeasure_latency",
)


def _run(args: argparse.Namespace) -> int:
    from ragbench.experiment.mlflow_log import log_run, require_mlflow
    from ragbench.experiment.runner import dry_run, run
    from ragbench.report.markdown import answer_lines
    from ragbench.report.report import Report
    from ragbench.report.tables import trial_table

    config = _run_config(args)
    if args.select is not None:  # the dry run checks all the run checks before its work
        _check_select(args.select, config.evaluation.metrics)
    if args.mlflow:
        require_mlflow()
    if args.dry_run:
        return _print_dry_run(dry_run(config, args.limit_queries))
    result = run(config, args.out, **options(args, _SWEEP_OPTIONS))
    trials = result.trials
    finished = int((trials["status"] == "ok").sum()) if not trials.empty else 0
    if finished:
        print_frame(trial_table(trials, result.metrics))
    print(f"\nrun directory: {result.path}")
    report_dir = None
    if not finished:
        print("no trial finished: no table and no report", file=sys.stderr)
    elif not args.no_report:
        try:
            report = Report.from_run(result.path, **picked(args))
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
    """The config of ``ragbench run``: the file, its ``--set`` overrides, ``--sample`` and
    ``--dataset`` / ``--queries`` in place of its labeled set."""
    from ragbench.experiment.config import load_config

    overrides = list(args.set or ())
    if args.sample is not None:
        overrides.append(f"dataset.sample={json.dumps(args.sample)}")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:  # --sample is applied as a --set: name the flag the user gave
        blamed = f"--set {overrides[-1]}:" if args.sample is not None else None
        if blamed is None or blamed not in str(exc):
            raise
        raise ConfigError(str(exc).replace(blamed, f"--sample {args.sample}:")) from None
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
    print_frame(planned.set_index("trial_id"))
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
    from ragbench.evaluate.metric_table import parse_metric

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


RUN = Command(
    "run",
    help="run a sweep from a YAML config",
    args=(
        Arg("config", path="input file", help="experiment YAML file"),
        Arg("--out", path="output folder", help="run directory (default: runs/<name>)"),
        Arg("--resume", action="store_true", help="continue an interrupted run"),
        Arg(
            "--remeasure-latency",
            action="store_true",
            help="measure each trial's latency again (nothing else is recomputed)",
        ),
        Arg("--overwrite", action="store_true", help="start an existing run again"),
        Arg("--executor", choices=["serial", "process", "dask"], default="serial"),
        Arg("--workers", type=int, default=2, help="processes for process/dask"),
        Arg("--scheduler", help="dask scheduler address (default: a LocalCluster)"),
        Arg("--limit-queries", type=int, help="evaluate only the first N queries"),
        Arg(
            "--dataset",
            path="input folder",
            names=True,
            help="dataset path or name, replacing the config's (and its queries file)",
        ),
        QUERIES_FILE,
        sample(
            "sweep on a sample of the documents: N of them, P percent, or all (sets "
            "dataset.sample; the seed is dataset.sample_seed)"
        ),
        Arg(
            "--set",
            action="append",
            metavar="KEY=VALUE",
            help="override a config value, e.g. --set sweep.reranker[1].model=/models/ce",
        ),
        Arg("--dry-run", action="store_true", help="list trials and cached artifacts"),
        Arg("--no-report", action="store_true", help="skip the HTML/Markdown report"),
        MLFLOW,
        *PICK,
    ),
    run=_run,
)
