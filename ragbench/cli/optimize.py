"""``ragbench optimize``: labels for a folder of documents, the default sweep on them, the
report and the recommendation."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from ragbench.cli.common import collection, globs, print_frame, sample
from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError

if TYPE_CHECKING:
    from ragbench.optimize import Optimized


def _optimize(args: argparse.Namespace) -> int:
    from ragbench.optimize import optimize
    from ragbench.report.markdown import answer_lines
    from ragbench.report.tables import trial_table
    from ragbench.text.loaders import skipped_summary

    for flag, value, low in (("--n", args.n, 1), ("--seed", args.seed, 0)):
        if value is not None and value < low:
            raise ConfigError(f"{flag}: expected an integer >= {low}, got {value}")
    done = optimize(
        args.docs,
        args.out,
        n=args.n,
        seed=args.seed,
        sample=args.sample,
        generate_labels=args.generate,
        include=args.include,
        exclude=args.exclude,
        overrides=args.set or (),
    )
    made = done.generation
    if made is not None and made.problems:
        print(skipped_summary(made.problems), file=sys.stderr)
    print(f"sample:        {_sample_text(done)}")
    if done.own:
        kept = "" if done.own_queries == done.queries else f", {done.queries:,} in the sample"
        print(
            f"labels:        {done.labels} (yours: {done.own_queries:,} queries{kept}; "
            "--generate generates labels instead)"
        )
    else:
        how = "reused" if made is None else f"generated from {made.documents:,} documents"
        judged = "" if done.generated == done.queries else f", {done.queries:,} judged by document"
        print(f"labels:        {done.labels} ({done.generated:,} queries, {how}{judged})")
        if done.shortfall is not None:
            print(done.shortfall)
    print_frame(trial_table(done.run.trials, done.run.metrics))
    print(f"\nrun directory: {done.run.path}\nreport:        {done.files['html']}\n")
    lines = answer_lines(done.report, args.collection)
    if done.report.evidence.withheld is None:  # the folder as it is, not the labels' copy
        lines[-1] = f"deploy:        {done.deploy_command(args.collection)}"
    print("\n".join(lines))
    return 0


def _sample_text(done: Optimized) -> str:
    """The documents the sweep ran on, of how many, and how to change it."""
    sample = done.sample
    if sample is None:
        return f"none, the sweep ran on all {done.documents:,} documents"
    return (
        f"{sample.documents:,} of {sample.of:,} documents (seed {sample.seed}; --sample all "
        "sweeps every one)"
    )


OPTIMIZE = Command(
    "optimize",
    help="generate labels for a folder of documents, sweep the usual configurations, recommend one",
    description="Use the labels DOCS holds (its queries.jsonl), or generate them from DOCS "
    "(offline, cached), run the default sweep on them "
    "(BM25 at four settings, dense MiniLM, hybrid RRF and convex fusion, on two chunkings), "
    "write the report and print the recommendation, how sure it is and the command that "
    "deploys it. A large corpus is swept on a sample of its documents (--sample), and the "
    "deploy command indexes every one. A second call reuses the labels and the cached stages.",
    args=(
        Arg("docs", path="input path", names=True, help="folder (or file) of your documents"),
        *globs("DOCS"),
        Arg(
            "--out",
            path="output folder",
            help="folder for the labels and the run (default: runs/optimize-<DOCS name>)",
        ),
        Arg(
            "--n",
            type=int,
            help="queries to generate, each judged at the level the sweep evaluates (default "
            "300; fewer, said in one line, when DOCS gives no more)",
        ),
        Arg(
            "--generate",
            action="store_true",
            help="generate labels even when DOCS holds its own (a queries.jsonl at its top, or "
            "a labeled set), which are used otherwise",
        ),
        sample(
            "sweep on a sample of the documents: N of them, P percent, or all (default: all "
            "of a small corpus, a sample of a stratified few thousand of a large one)"
        ),
        Arg("--seed", type=int, default=0, help="seed of the sample and the queries (default 0)"),
        Arg(
            "--set",
            action="append",
            metavar="KEY=VALUE",
            help="override a value of the default sweep's config, e.g. --set latency.queries=0",
        ),
        collection("collection name in the deploy command"),
    ),
    run=_optimize,
)
