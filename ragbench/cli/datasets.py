"""``ragbench datasets``: list, describe, validate, download and import labeled sets (generating
and checking labels: ``cli/labels.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ragbench.cli.common import QUERIES_FILE
from ragbench.cli.labels import COMMANDS as LABEL_COMMANDS
from ragbench.cli.spec import Arg, Command


def _list(args: argparse.Namespace) -> int:
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


def _info(args: argparse.Namespace) -> int:
    from ragbench.data.catalog import dataset_format, load_dataset, resolve_dataset
    from ragbench.data.folder import QUERIES, query_splits
    from ragbench.data.problems import DEFAULT_SPLIT, MissingSplit, split_case
    from ragbench.data.summary import summarize

    path = resolve_dataset(args.path)
    fmt = dataset_format(path, args.format, args.queries)
    split, shown = args.split or DEFAULT_SPLIT, ""
    try:
        labeled = load_dataset(path, format=fmt, split=split, queries=args.queries)
    except MissingSplit as exc:  # without --split: the set's first split, and which it has
        if args.split is not None or not exc.splits:
            raise
        split, splits = exc.splits[0], ", ".join(exc.splits)
        shown = f" (no split {DEFAULT_SPLIT!r}, the default; splits: {splits}; --split picks one)"
        labeled = load_dataset(path, format=fmt, split=split, queries=args.queries)
    info = summarize(labeled)
    unscored = sum(not any(g > 0 for g in judged.values()) for judged in labeled.qrels.values())
    grades = ", ".join(f"grade {g}: {n:,}" for g, n in info.judgements.items())
    rows = [
        ("name", info.name),
        ("path", str(path)),
        ("format", fmt),
        ("split", info.split + shown),
        ("documents", f"{info.documents:,} ({info.characters:,} characters)"),
        ("queries", f"{info.queries:,}" + _unscored(unscored)),
        ("judgements", f"{sum(info.judgements.values()):,} ({grades or 'none'})"),
    ]
    if info.mean_span_chars is not None:
        rows.append(("spans", f"{info.spans:,} (mean {info.mean_span_chars:.0f} characters)"))
    if info.query_types:
        rows.append(("query types", ", ".join(f"{t} {n}" for t, n in info.query_types.items())))
    if info.answers:
        rows.append(("answers", f"{info.answers:,} of {info.queries:,} queries"))
    if info.restricted:
        only = ", ".join(f"{n:,} at the {at} levels only" for at, n in info.restricted.items())
        rows.append(("judged", only))
    rows.append(("fingerprint", info.fingerprint))
    for key, value in rows:
        sys.stdout.write(f"{key:<12} {value}\n")
    if fmt in ("folder", "spans"):
        file = Path(args.queries or path / QUERIES)
        for line in split_case(query_splits(file)):
            print(f"warning: {file}: {line}", file=sys.stderr)
    return 0


def _unscored(count: int) -> str:
    """What ``info`` says of the queries judged with no relevant document: no run scores them."""
    if not count:
        return ""
    queries = "1 has" if count == 1 else f"{count:,} have"
    return f" ({queries} no relevant (grade > 0) document and will not be scored)"


def _validate(args: argparse.Namespace) -> int:
    from ragbench.data.validate import validate_dataset

    report = validate_dataset(args.path, format=args.format, queries=args.queries)
    sys.stdout.write(f"{report}\n")
    return 0 if report.ok else 1


def _download(args: argparse.Namespace) -> int:
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


def _import_ragas(args: argparse.Namespace) -> int:
    from ragbench.data.ragas_import import import_ragas

    result = import_ragas(args.file, args.out, corpus=args.corpus)
    for problem in result.problems:
        print(f"{problem.severity}: {problem}", file=sys.stderr)
    sys.stdout.write(
        f"{result.path}: {result.queries:,} queries ({result.answers:,} with a reference "
        f"answer), {result.documents:,} documents; {result.left_out:,} row(s) left out\n"
    )
    return 0


_FORMAT = Arg(
    "--format",
    choices=["beir", "spans", "chunking_evaluation", "folder"],
    help="dataset format (default: detected)",
)

_COMMANDS = (
    Command("list", help="bundled sets and downloadable BEIR sets", run=_list),
    Command(
        "info",
        help="counts and fingerprint of a dataset",
        args=(
            Arg(
                "path",
                path="input folder",
                names=True,
                help="dataset folder, bundled name (demo) or downloaded BEIR name",
            ),
            Arg("--split", help="the split to describe (default: test, else the set's first)"),
            _FORMAT,
            QUERIES_FILE,
        ),
        run=_info,
    ),
    Command(
        "validate",
        help="list every problem of a dataset (exit 1 when there are any)",
        args=(
            Arg("path", path="input folder", names=True, help="dataset folder or name"),
            _FORMAT,
            QUERIES_FILE,
        ),
        run=_validate,
    ),
    Command(
        "download",
        help="download a BEIR dataset",
        args=(
            Arg("name", help="BEIR name, e.g. scifact (see `ragbench datasets list`)"),
            Arg(
                "--dir",
                path="output folder",
                help="parent folder (default: RAGBENCH_DATA or ~/.cache/ragbench/datasets)",
            ),
            Arg("--url", help="base URL (default: RAGBENCH_BEIR_URL or the UKP server)"),
            Arg("--sha256", help="expected sha256 of the zip (overrides the known one)"),
            Arg("--force", action="store_true", help="download again if present"),
        ),
        run=_download,
    ),
    Command(
        "import-ragas",
        help="turn a ragas test set (JSONL or CSV) into a span-labeled set",
        description="Write a ragas EvaluationDataset/Testset file (to_jsonl or to_csv) as a "
        "span-labeled set: each row a query with its reference contexts as evidence and its "
        "reference as the answer. Rows left out and contexts not found are reported by row.",
        args=(
            Arg("file", path="input file", help="the .jsonl or .csv file ragas wrote"),
            Arg(
                "--out", path="output folder", required=True, help="folder to write (new or empty)"
            ),
            Arg(
                "--corpus",
                path="input path",
                help="folder of the documents the contexts come from: contexts are located in "
                "them and they become the set's corpus (default: one document per distinct "
                "context)",
            ),
        ),
        run=_import_ragas,
    ),
)

DATASETS = Command(
    "datasets",
    help="list, describe, validate, download, import or generate datasets",
    commands=_COMMANDS + LABEL_COMMANDS,
    dest="datasets_command",
)
