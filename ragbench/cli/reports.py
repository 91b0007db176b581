"""``ragbench report``, ``compare`` and ``export``: read finished run directories."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ragbench.cli.common import MLFLOW, PICK, RUN_DIR, options, picked, print_frame
from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError, writable_folder

# the significance test and its correction, passed to ``Report.from_run`` as they are
_TESTS = ("test", "correction")


def _folder(out: str | None, default: Path, what: str, of: str) -> Path:
    """The folder for the ``what`` of ``of`` (run directories' real paths), taken
    (``ragbench.owned.claim``): ``--out`` as given, refused when it holds another folder's
    output; else ``default``, or ``default-2``, ``-3``, ... when it holds another run's (said)."""
    from ragbench.owned import claim

    if out is not None:
        return claim(out, "--out", what, of=of)
    folder, number = default, 1
    while True:
        try:
            claim(folder, "--out", what, of=of)
        except ConfigError:
            if not folder.exists():
                raise
            number += 1  # another's output, or the user's files: the next name
            folder = default.with_name(f"{default.name}-{number}")
            continue
        if number > 1:
            print(
                f"note: {default} holds another run's output; this {what} goes to {folder}",
                file=sys.stderr,
            )
        return folder


def _report(args: argparse.Namespace) -> int:
    from ragbench.experiment.mlflow_log import log_run, require_mlflow
    from ragbench.report.report import Report, report_folder

    if args.mlflow:
        require_mlflow()
    out = writable_folder(args.out or report_folder(args.run_dir), "--out")
    report = Report.from_run(
        Path(args.run_dir), args.baseline, args.metric, **options(args, _TESTS), **picked(args)
    )
    run = os.path.realpath(args.run_dir)
    if os.path.realpath(out) != run:  # a report into its own run directory is the run's
        out = _folder(args.out, out, "report", run)
    formats = ["html", "md"] if args.format == "html" else [args.format]
    paths = report.write(formats, out)
    print_frame(report.display_table())
    for fmt, path in paths.items():
        print(f"{fmt:<6} {path}")
    if args.mlflow:
        print(f"mlflow {log_run(args.run_dir, args.mlflow, next(iter(paths.values())).parent)}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from ragbench.report.compare import compare_folder, compare_runs, write_comparison

    table, warnings = compare_runs([Path(d) for d in args.run_dirs], args.metric)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print_frame(table.set_index(["run", "trial_id"]))
    runs = ", ".join(os.path.realpath(d) for d in args.run_dirs)
    out = _folder(args.out, compare_folder(args.run_dirs), "comparison", runs)
    paths = write_comparison(table, warnings, out)
    for fmt, path in paths.items():
        print(f"{fmt:<6} {path}")
    return 0


def _export_ragas(args: argparse.Namespace) -> int:
    from ragbench.owned import stream
    from ragbench.report.export import export_ragas

    done = export_ragas(args.run_dir, args.trial, args.out)
    said = sys.stderr if stream(done.path) else sys.stdout  # the samples may go to stdout
    print(f"{done.path}: {done.rows:,} samples of trial {done.trial_id} ({done.label})", file=said)
    return 0


REPORT = Command(
    "report",
    help="write report.html / report.md for a run directory",
    args=(
        RUN_DIR,
        Arg("--baseline", help="trial id or label (default: the config's, else first)"),
        Arg("--metric", help="primary metric (default: the first evaluated)"),
        Arg(
            "--format",
            choices=["html", "md", "latex"],
            default="html",
            help="html also writes report.md and plots/",
        ),
        Arg("--test", choices=["permutation", "t", "wilcoxon"], default="permutation"),
        Arg("--correction", choices=["holm", "bonferroni", "bh", "none"], default="holm"),
        *PICK,
        Arg(
            "--out",
            path="output folder",
            help="output folder (default: reports/<run-name>, or -2, -3, ... if another's)",
        ),
        MLFLOW,
    ),
    run=_report,
)

COMPARE = Command(
    "compare",
    help="trials of several runs in one table",
    args=(
        Arg("run_dirs", path="input folder", nargs="+", help="run directories"),
        Arg("--metric", help="metric to sort by (default: the first run's first)"),
        Arg(
            "--out",
            path="output folder",
            help="output folder for compare.md/.csv (default: reports/<run-name>, or -2, ...)",
        ),
    ),
    run=_compare,
)

EXPORT = Command(
    "export",
    help="write a run's samples for other tools",
    commands=(
        Command(
            "ragas",
            help="one trial's samples as a ragas EvaluationDataset JSONL file",
            description="Write one row per query (user_input, retrieved_contexts and their ids, "
            "response, reference, reference_contexts and their ids) for "
            "ragas.EvaluationDataset.from_jsonl.",
            args=(
                RUN_DIR,
                Arg(
                    "--trial",
                    default="best",
                    metavar="ID",
                    help="trial id, or 'best': the trial the run's report recommends (default)",
                ),
                Arg(
                    "--out",
                    path="output file",
                    help="file to write (default: RUN/ragas/<trial id>.jsonl)",
                ),
            ),
            run=_export_ragas,
        ),
    ),
    dest="export_format",
)
