"""``ragbench eval``: score a TREC run against qrels, like trec_eval."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import TYPE_CHECKING

from ragbench.cli.common import at_least_one
from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pandas as pd

_DEFAULT_METRICS = "ndcg@10,recall@100,map,mrr@10,precision@10"


def _eval(args: argparse.Namespace) -> int:
    from ragbench.data.trec import read_qrels, read_run
    from ragbench.evaluate.metrics import evaluate_run, parse_metrics

    metrics = parse_metrics([m for m in args.metrics.split(",") if m.strip()])
    if not metrics:
        raise ConfigError("--metrics: expected a comma-separated list such as ndcg@10,map")
    qrels, run = read_qrels(args.qrels), read_run(args.run)
    query_ids = list(qrels) if args.complete else [q for q in qrels if q in run]
    if not query_ids:
        raise DataError(f"{args.run}: no query of the run is judged in {args.qrels}")
    lacking = len(qrels) - len(query_ids)
    if lacking:  # trec_eval's default; said, so that a mean over part of the set is not taken
        print(  # for one over all of it
            f"{args.run}: {lacking} of the {len(qrels)} queries judged in {args.qrels} "
            f"{'is' if lacking == 1 else 'are'} not in the run and left out of the means (-c "
            "scores them 0)",
            file=sys.stderr,
        )
    _write_scores(evaluate_run(qrels, run, metrics, args.level, query_ids), len(qrels), args)
    return 0


def _write_scores(frame: pd.DataFrame, judged: int, args: argparse.Namespace) -> None:
    """Means (and, with --per-query, each query first) as a trec_eval table (with its
    ``num_q``, the queries scored), JSON or CSV; ``judged``: the queries the qrels judge."""
    means = frame.mean()
    if args.format == "json":
        result = {"queries": len(frame), "judged": judged, "means": means.to_dict()}
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
    lines = [
        (metric, qid, f"{value:.4f}") for qid, values in rows for metric, value in values.items()
    ]
    lines.insert(len(lines) - len(means), ("num_q", "all", str(len(frame))))  # as trec_eval says
    sys.stdout.writelines(f"{metric:<22}\t{qid}\t{value}\n" for metric, qid, value in lines)


EVAL = Command(
    "eval",
    help="score a TREC run against qrels (trec_eval-like)",
    description="Score queries judged in the qrels and present in the run (trec_eval's "
    "default; -c: every qrels query, a missing one scoring 0).",
    args=(
        Arg("--qrels", path="input file", required=True, help="TREC qrels or BEIR qrels TSV"),
        Arg(
            "--run",
            path="input file",
            required=True,
            help="TREC run (qid Q0 docid rank score tag)",
        ),
        Arg(
            "--metrics",
            default=_DEFAULT_METRICS,
            help=f"comma-separated metrics (default: {_DEFAULT_METRICS})",
        ),
        Arg("--per-query", action="store_true", help="also print each query"),
        Arg("--format", choices=["table", "json", "csv"], default="table"),
        Arg(
            "-l",
            "--level",
            type=at_least_one,
            default=1,
            help="lowest grade that counts as relevant (trec_eval -l)",
        ),
        Arg(
            "-c",
            "--complete",
            action="store_true",
            help="average over every qrels query (trec_eval -c)",
        ),
    ),
    run=_eval,
)
