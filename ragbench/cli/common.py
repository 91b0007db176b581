"""What several commands share: options declared once, argument value types and checks, the
JSON option reader and the table printer."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragbench.cli.spec import Arg
from ragbench.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

MLFLOW_URI = "sqlite:///mlruns.db"  # ragbench.experiment.mlflow_log.DEFAULT_URI
MAX_COLLECTION_NAME = 100


def json_arg(flag: str, value: str, example: str = '{"kind": ...}') -> dict:
    """The JSON object given to ``flag``; ``ConfigError`` naming the flag otherwise (and
    showing ``example``, an object the flag takes)."""
    from ragbench.data.problems import DuplicateKey, loads_json
    from ragbench.registry import described

    try:
        spec = loads_json(value)
    except DuplicateKey as exc:
        raise ConfigError(f"{flag}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"{flag}: invalid JSON (nested too deeply)") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{flag}: expected a JSON object like '{example}', got {described(spec)}")
    return spec


def print_frame(frame: pd.DataFrame) -> None:
    """Print a table wide enough for trial labels, floats to four places."""
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


def options(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The parsed values of ``names``, as keywords of the library call they pass through to."""
    return {name: getattr(args, name) for name in names}


def milliseconds(text: str) -> float:
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


def at_least_one(text: str) -> int:
    """An integer >= 1 (a relevance level, a number of resamples)."""
    try:
        level = int(text)
    except ValueError:
        level = 0
    if level < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return level


def collection_name(flag: str, name: str) -> None:
    """``ConfigError`` naming ``flag`` unless ``name`` is a plain folder name for a collection
    (it becomes a folder under the collections folder, and a word of commands: one that
    starts with ``-`` would read as an option)."""
    plain = 0 < len(name) <= MAX_COLLECTION_NAME and name.isprintable()
    if not plain or "/" in name or "\\" in name or name.startswith((".", "-")):
        raise ConfigError(
            f"{flag}: expected a plain name (1-{MAX_COLLECTION_NAME} printable characters, no "
            f"'/' or '\\', not starting with '.' or '-'), got {name!r}"
        )


def sample_size(flag: str, value: str) -> None:
    """``ConfigError`` naming ``flag`` unless ``value`` is a sample's size: a number of
    documents, a percentage or ``all`` (``ragbench.data.sample``)."""
    from ragbench.data.sample import check_size

    try:
        check_size(value)
    except ValueError as exc:
        raise ConfigError(f"{flag}: {exc}") from None


def sample(help: str) -> Arg:
    """``--sample N|P%|all``: the sample of the documents a sweep runs on (``sample_size``)."""
    return Arg("--sample", metavar="N|P%|all", check=sample_size, help=help)


def collection(help: str) -> Arg:
    """``--collection``: the name of a collection (``collection_name``)."""
    return Arg("--collection", default="default", check=collection_name, help=help)


def model_name(flag: str, name: str) -> None:
    """``ConfigError`` naming ``flag`` when the model ``name`` cannot be loaded here: a path
    that does not exist, or a hub id neither cached nor (online) on the hub."""
    from ragbench.models import model_problem

    problem = model_problem(name)
    if problem is not None:
        raise ConfigError(f"{flag} {name}: no such model ({problem})")


def globs(folder: str) -> tuple[Arg, Arg]:
    """The repeatable ``--include`` / ``--exclude`` flags that select the files of ``folder``
    by gitignore-like globs (``ragbench.text.loaders.DirectoryLoader``)."""

    def glob(flag: str, what: str) -> Arg:
        return Arg(
            flag,
            action="append",
            default=[],
            metavar="GLOB",
            help=f"{what} GLOB, relative to {folder} (e.g. '**/*.md', 'build/**'; repeatable)",
        )

    return glob("--include", "read only files matching"), glob("--exclude", "skip")


def follow_symlinks(where: str) -> Arg:
    """``--follow-symlinks`` for the files read from ``where``."""
    return Arg(
        "--follow-symlinks",
        action="store_true",
        help=f"follow links in {where} that lead outside it (skipped and reported otherwise)",
    )


MLFLOW = Arg(
    "--mlflow",
    nargs="?",
    const=MLFLOW_URI,
    metavar="URI",
    help=f"log the sweep to MLflow: a parent run, a child per trial, the report (default "
    f"URI: {MLFLOW_URI}; pip install ragbench[mlflow])",
)

# What the recommendation weighs besides the primary metric (``run`` and ``report``).
PICK = (
    Arg(
        "--latency-budget",
        type=milliseconds,
        metavar="MS",
        help="recommend the best trial within this p50 total latency (default: the baseline's)",
    ),
    Arg(
        "--select",
        metavar="METRIC",
        help="a second metric that picks among the trials the first metric cannot separate "
        "(its bootstrap leaders), e.g. span_recall@5",
    ),
)


def picked(args: argparse.Namespace) -> dict[str, Any]:
    """The ``PICK`` options as the keywords of ``Report.from_run``."""
    return {"latency_budget_ms": args.latency_budget, "then": args.select}


QUERIES_FILE = Arg(
    "--queries",
    path="input file",
    metavar="FILE",
    help="queries file labeling a plain folder of documents (default: its queries.jsonl)",
)

RUN_DIR = Arg("run_dir", path="input folder", help="a run directory written by `ragbench run`")
