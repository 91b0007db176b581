"""Which labeled sets ragbench knows: the formats it reads, the sets it bundles, and
``load_dataset``, which finds a set by path or name and reads it in the right format.

A path is recognised by its layout: ``qrels/`` + ``corpus.jsonl[.gz]`` is BEIR,
``corpora/`` + ``questions_df.csv`` is chunking_evaluation, ``corpus/`` + ``queries.jsonl`` is
the span-labeled format, and any other folder is a plain folder of documents labeled by its
``queries.jsonl`` or by a queries file given separately (``ragbench.data.folder``). A name is a
bundled set (``demo``, found in the repository's ``datasets/`` folder next to the package) or a
BEIR set downloaded into ``data_dir()``. An existing path wins over a name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import ragbench
from ragbench.data.beir import check_beir, is_beir, load_beir
from ragbench.data.chunking_eval import check_chunking_eval, is_chunking_eval, load_chunking_eval
from ragbench.data.download import BEIR_DATASETS, data_dir
from ragbench.data.folder import check_folder, is_folder, load_folder, no_labels
from ragbench.data.labeled import LabeledSet
from ragbench.data.problems import Problem
from ragbench.data.spans import check_spans, is_spans, load_spans
from ragbench.errors import ConfigError, DataError, path_problem

__all__ = [
    "DATASETS",
    "FORMATS",
    "BundledSet",
    "DatasetFormat",
    "Format",
    "bundled_dir",
    "dataset_format",
    "detect_format",
    "load_dataset",
    "resolve_dataset",
]

Format = Literal["beir", "spans", "chunking_evaluation", "folder"]
StrPath = str | os.PathLike[str]


class DatasetFormat(NamedTuple):
    """How to recognise, load and check one on-disk format."""

    layout: str
    detect: Callable[[Path], bool]
    load: Callable[..., LabeledSet]
    check: Callable[..., list[Problem]]


FORMATS: dict[str, DatasetFormat] = {
    "beir": DatasetFormat("qrels/ + corpus.jsonl[.gz]", is_beir, load_beir, check_beir),
    "chunking_evaluation": DatasetFormat(
        "corpora/ + questions_df.csv", is_chunking_eval, load_chunking_eval, check_chunking_eval
    ),
    "spans": DatasetFormat("corpus/ + queries.jsonl", is_spans, load_spans, check_spans),
    "folder": DatasetFormat(
        "documents + queries.jsonl (no corpus/), or a queries file given separately",
        is_folder,
        load_folder,
        check_folder,
    ),
}


def bundled_dir() -> Path:
    """The repository's ``datasets/`` folder (it exists only in a source checkout)."""
    return Path(ragbench.__file__).resolve().parents[1] / "datasets"


@dataclass(frozen=True, slots=True)
class BundledSet:
    """A labeled set shipped in the repository's ``datasets/`` folder."""

    name: str
    format: Format
    description: str

    @property
    def path(self) -> Path:
        """Its folder (which may be missing when the package is installed on its own)."""
        return bundled_dir() / self.name


DATASETS: dict[str, BundledSet] = {
    "demo": BundledSet(
        "demo",
        "spans",
        "synthetic docs of a made-up message broker: 58 documents, 117 span-labeled queries",
    ),
}


def resolve_dataset(path_or_name: StrPath) -> Path:
    """The folder of a dataset given by path, bundled name or downloaded BEIR name."""
    path = Path(path_or_name).expanduser()
    problem = path_problem(path)  # a symbolic link loop, a name too long
    if problem is not None:
        raise DataError(f"{path_or_name}: {problem}")
    if path.exists():
        return path
    name = str(path_or_name)
    if name in DATASETS:
        folder = DATASETS[name].path
        if not folder.is_dir():
            raise DataError(
                f"bundled dataset {name!r}: {folder} does not exist; the package is installed "
                "without the repository's datasets/ folder (pass the dataset's path instead)"
            )
        return folder
    if name in BEIR_DATASETS:
        folder = data_dir() / name
        if not folder.is_dir():
            raise DataError(
                f"{name!r} is not downloaded (looked in {folder}); "
                f"run `ragbench datasets download {name}`"
            )
        return folder
    raise DataError(
        f"{name}: no such dataset path or name (bundled: {', '.join(DATASETS)}; "
        f"BEIR names once downloaded: {', '.join(BEIR_DATASETS)})"
    )


def detect_format(path: Path, queries: StrPath | None = None) -> Format:
    """The format whose layout ``path`` has; a folder with none is a plain folder of documents
    when ``queries`` labels it. ``DataError`` naming the layouts, or saying how to label a
    folder, otherwise."""
    if path.is_dir():
        for name, fmt in FORMATS.items():
            if fmt.detect(path):
                return cast(Format, name)
        if queries is not None:
            return "folder"
        raise DataError(no_labels(path))
    layouts = "; ".join(f"{name}: {fmt.layout}" for name, fmt in FORMATS.items())
    raise DataError(f"{path}: not a recognised dataset layout (expected {layouts})")


def dataset_format(path: Path, format: str | None, queries: StrPath | None = None) -> Format:
    """``format`` checked against the known ones, or detected from ``path``; a separate
    ``queries`` file goes with a plain folder of documents only (``ConfigError`` otherwise)."""
    if format is None:
        fmt = detect_format(path, queries)
    elif format in FORMATS:
        fmt = cast(Format, format)
    else:
        raise ConfigError(f"unknown dataset format {format!r}; known: {', '.join(FORMATS)}")
    if queries is not None and fmt != "folder":
        raise ConfigError(
            f"queries file {queries}: only a plain folder of documents takes a separate queries "
            f"file, and {path} is a {fmt} set ({FORMATS[fmt].layout}) with its own queries"
        )
    return fmt


def load_dataset(
    path_or_name: StrPath,
    format: Format | None = None,
    split: str = "test",
    queries: StrPath | None = None,
    **options: Any,
) -> LabeledSet:
    """Load a labeled set by path or name; ``format`` is detected from the layout unless given,
    ``queries`` labels a plain folder of documents (default: its ``queries.jsonl``), ``options``
    go to the format's loader (e.g. ``title="metadata"`` for BEIR)."""
    path = resolve_dataset(path_or_name)
    fmt = dataset_format(path, format, queries)
    labels = {} if queries is None else {"queries": queries}
    return FORMATS[fmt].load(path, split=split, **labels, **options)
