"""``ragbench finetune``: adapt a model to a corpus outside a sweep and save it."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from ragbench.cli.common import json_arg, model_name
from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError


def _base_model(flag: str, name: str) -> None:
    """``ConfigError`` naming ``flag`` when ``name`` cannot be the model training starts from:
    empty, no such model (``model_name``), or a folder that holds no model (a collection, a
    run folder), found before any document is read."""
    if not name.strip():
        raise ConfigError(f"{flag}: expected a model name or path, got an empty string")
    model_name(flag, name)
    from ragbench.index.finetune import base_problem

    problem = base_problem(name)
    if problem is not None:
        raise ConfigError(f"{flag} {name}: {problem}")


def _finetune(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ragbench import progress
    from ragbench.data import load_dataset
    from ragbench.data.generate import corpus_documents
    from ragbench.data.pairs import generated_pairs, split_pairs
    from ragbench.errors import DataError
    from ragbench.index.cache import default_cache_root
    from ragbench.index.finetune import Family, FinetuneConfig, train
    from ragbench.registry import format_validation_error
    from ragbench.retrieve.graph import stage_key

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out}: exists and is not empty (choose a new folder)")
    settings = {"pairs": args.pairs, **json_arg("--settings", args.settings, '{"epochs": 2}')}
    try:
        config = FinetuneConfig.model_validate(settings)
    except ValidationError as exc:
        raise ConfigError(format_validation_error("--settings", exc)) from None
    family: Family = "cross-encoder" if args.cross_encoder else "bi-encoder"
    try:
        config.check(family)
    except ValueError as exc:
        raise ConfigError(f"--settings: {exc}") from None
    if config.pairs == "select":
        pairs = split_pairs(load_dataset(args.dataset, split=args.split), config.width)
    else:
        documents, _ = corpus_documents(args.dataset)
        pairs = generated_pairs(documents, config.queries, config.seed, config.width)
    too_few = pairs.too_few("--pairs select, with a labeled set")
    if too_few is not None:
        raise DataError(f"{args.dataset}: {too_few}")
    work = (
        default_cache_root()
        / "training"
        / stage_key("finetune-cli", family, args.model, config.model_dump_json(), pairs.key)
    )
    shown = [0.0]

    def show(activity: progress.Activity) -> None:
        if time.monotonic() - shown[0] > 1 or activity.done == activity.total:
            shown[0] = time.monotonic()
            print(f"\r{activity.line()}\033[K", end="", file=sys.stderr, flush=True)

    print(f"{len(pairs):,} pairs {pairs.origin}", file=sys.stderr)
    with progress.listen(show):
        model = train(family, args.model, pairs, config, work)
    print(file=sys.stderr)
    shutil.copytree(model.path, out, dirs_exist_ok=True)
    record = model.record()
    summary = {k: record[k] for k in ("family", "base", "pairs", "n_pairs", "steps", "seconds")}
    print(json.dumps({"model": str(out), **summary, "last_loss": record["losses"][-1]}, indent=1))
    return 0


FINETUNE = Command(
    "finetune",
    help="fine-tune an embedder (or train a cross-encoder) on a labeled set's pairs",
    description=(
        "Adapt a model to a corpus and save it as a sentence-transformers model folder, "
        "usable as any embedder's or cross-encoder's `model`. Pairs come from the judged "
        "queries of --split (--pairs select) or are generated from the documents (--pairs "
        "generated, no labels needed)."
    ),
    args=(
        Arg(
            "dataset",
            path="input path",
            names=True,
            help="a labeled set (path or name); with --pairs generated, any file or folder",
        ),
        Arg("--out", path="output folder", required=True, help="new folder for the trained model"),
        Arg("--split", default="train", help="split whose judged queries train (default train)"),
        Arg("--pairs", choices=["select", "generated"], default="select"),
        Arg(
            "--model",
            default="all-MiniLM-L6-v2",
            check=_base_model,
            help="base model: a name, path or hub id",
        ),
        Arg("--cross-encoder", action="store_true", help="train a cross-encoder from --model"),
        Arg(
            "--settings",
            default="{}",
            help='finetune settings as JSON, e.g. \'{"epochs": 2, "negatives": "bm25"}\'',
        ),
    ),
    run=_finetune,
)
