"""The whole job on your own documents, in one call (``ragbench optimize DOCS``).

``optimize(docs)`` uses the labels the documents' folder holds (a ``queries.jsonl``, or a
labeled set's layout), else generates them from the documents (the default offline method,
``ragbench.data.generate``; cached: the same documents and settings reuse the set written
before), runs a default sweep over them that covers the families — BM25 at four k1/b settings,
dense MiniLM, hybrid RRF and hybrid convex fusion, each on two chunkings (``DEFAULT_SWEEP``) —
writes the report, and returns the recommendation with its bootstrap confidence and the command
that deploys it. The sweep's stages are cached like any run's, so a second call costs seconds.

MiniLM runs on ONNX Runtime with int8 weights when ``onnxruntime`` is installed (about 2× torch's
speed on a CPU at +0.0015 nDCG@10 on SciFact, benchmarks/RESULTS.md), else on torch; the run's
config and the report name the backend.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ragbench.data.catalog import FORMATS, load_dataset
from ragbench.data.generate import GenerationResult, IctMethod, corpus_documents, generate
from ragbench.data.labeled import corpus_fingerprint
from ragbench.errors import ConfigError, DataError
from ragbench.experiment.runner import RunResult, run
from ragbench.index.cache import writable_cache_root
from ragbench.owned import claim, remove
from ragbench.report.report import Report

__all__ = ["DEFAULT_SWEEP", "Optimized", "default_config", "optimize", "own_labels"]

StrPath = str | os.PathLike[str]

_SPLIT = "test"  # the split of a labeled set the default sweep evaluates

_MINILM = {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2", "max_seq_length": 256}

DEFAULT_SWEEP: dict[str, Any] = {
    "chunker": [
        {"kind": "recursive", "size": 500, "overlap": 50},
        {"kind": "recursive", "size": 1200, "overlap": 100},
    ],
    "retriever": [
        {"kind": "bm25", "k1": [0.9, 1.5], "b": [0.4, 0.75]},
        {"kind": "dense"},
        {"kind": "hybrid", "fusion": {"kind": "rrf", "k": 60}},
        {"kind": "hybrid", "fusion": {"kind": "convex", "normalization": "minmax"}},
    ],
}
"""The families a first sweep compares (14 trials); the embedder is added by
``default_config``."""


def _embedder() -> dict[str, Any]:
    """MiniLM on ONNX Runtime (int8) where it is installed, else on torch."""
    if find_spec("onnxruntime") is not None and find_spec("onnx") is not None:
        return {**_MINILM, "backend": "onnx", "quantize": "int8"}
    return dict(_MINILM)


def default_config(labels: StrPath, name: str) -> dict[str, Any]:
    """The default sweep on the labeled set ``labels``, at the document level (every
    generated query judges its document; span evidence only some): nDCG@10 first, then recall
    of the top 5 (is the query's document among the passages a prompt would get)."""
    return {
        "name": name,
        "dataset": {"path": str(Path(labels).resolve()), "split": _SPLIT},
        "evaluation": {"level": "document", "metrics": ["ndcg@10", "recall@5"], "depth": 100},
        "baseline": "bm25",
        "sweep": {**DEFAULT_SWEEP, "embedder": [_embedder()]},
    }


@dataclass(frozen=True)
class Optimized:
    """What ``optimize`` did: the labels (and whether they came from an earlier call, or
    ``own``: the documents' own), the run, its report and the report's files."""

    labels: Path
    labels_cached: bool
    generation: GenerationResult | None
    run: RunResult
    report: Report
    files: dict[str, Path]
    own: bool = False

    @property
    def queries(self) -> int:
        """Queries the sweep evaluated: those judged at the document level (a generated query
        whose context repeats most of its words is judged at the span levels only)."""
        return int(self.run.manifest["queries"]["count"])

    @property
    def generated(self) -> int:
        """Queries in the generated labels (0 for the documents' own)."""
        if self.own:
            return 0
        with open(self.labels / "queries.jsonl", encoding="utf-8") as lines:
            return sum(1 for line in lines if line.strip())


def _labels_key(
    docs: StrPath,
    method: IctMethod,
    n: int,
    seed: int,
    include: Sequence[str],
    exclude: Sequence[str],
) -> str:
    """What the generated labels depend on: the documents' text, the method and sampling."""
    documents, _ = corpus_documents(docs, include, exclude)
    settings = {"method": method.name, **method.settings(), "n": n, "seed": seed}
    text = corpus_fingerprint(documents) + json.dumps(settings, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _labels(
    docs: StrPath, out: Path, n: int, seed: int, include: Sequence[str], exclude: Sequence[str]
) -> tuple[Path, bool, GenerationResult | None]:
    """The generated set for ``docs`` (its files selected by the globs ``include`` and
    ``exclude``) under ``out`` (``labels-<key>``), written unless an earlier call wrote it for the
    same documents and settings; older sets optimize wrote there are removed (a folder of
    another maker, ``labels-handwritten``, stays)."""
    method = IctMethod()
    target = out / f"labels-{_labels_key(docs, method, n, seed, include, exclude)}"
    if (target / "queries.jsonl").is_file():
        return target, True, None
    for old in out.glob("labels-*"):
        remove(old)
    return (
        target,
        False,
        generate(docs, target, method, n=n, seed=seed, include=include, exclude=exclude),
    )


def own_labels(docs: StrPath) -> str | None:
    """The format of the labels ``docs`` holds itself (a ``queries.jsonl`` at its top, or the
    layout of a labeled set: BEIR, span-labeled, chunking evaluation), or None."""
    path = Path(docs)
    found = [name for name, fmt in FORMATS.items() if path.is_dir() and fmt.detect(path)]
    return found[0] if found else None


def _checked_own(docs: Path, fmt: str, include: Sequence[str], exclude: Sequence[str]) -> None:
    """``ConfigError`` unless the labels ``docs`` holds (in format ``fmt``) load as the sweep
    will load them; the message says why they cannot be used and how to go on."""
    labels = docs / "queries.jsonl" if fmt == "folder" else docs
    if include or exclude:
        raise ConfigError(
            f"--include/--exclude: {labels} labels the documents of {docs} as they are; "
            "pass --generate to generate labels from the files you select"
        )
    try:
        load_dataset(docs, split=_SPLIT)
    except DataError as exc:
        raise ConfigError(
            f"{labels}: labels of your own that cannot be used ({exc}); fix them, or pass "
            "--generate to generate labels instead"
        ) from None


def optimize(
    docs: StrPath,
    out: StrPath | None = None,
    *,
    n: int | None = None,
    seed: int = 0,
    generate_labels: bool = False,
    cache_root: str | Path | None = None,
    progress: bool = True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> Optimized:
    """Label the documents ``docs``, run the default sweep on them into ``<out>/run`` (default
    ``out``: ``runs/optimize-<folder name>``, a folder optimize made or a new or empty one) and
    write its report. Labels ``docs`` holds itself (``own_labels``: a ``queries.jsonl``, or a
    labeled set's layout) are used as they are; otherwise, or with ``generate_labels``, ``n``
    queries (default 300) are generated (cached). ``include`` / ``exclude`` select the folder's
    files by glob (``DirectoryLoader``)."""
    source = Path(docs)
    if not source.exists():
        raise ConfigError(f"{source}: no such file or directory (give a folder of documents)")
    own = None if generate_labels else own_labels(source)
    if own is not None and n is not None:
        raise ConfigError(
            f"--n: {source} holds labels of its own, which optimize uses as they are; pass "
            "--generate to generate queries instead"
        )
    if own is not None:
        _checked_own(source, own, include, exclude)
    writable_cache_root(cache_root)  # a cache root that cannot be used fails before --out
    name = f"optimize-{source.resolve().name or 'docs'}"
    root = claim(
        Path(out) if out is not None else Path("runs") / name,
        "--out",
        "labels and run of optimize",
        earlier=_earlier_optimize,
    )
    if own is not None:
        labels, cached, generation = source, True, None
    else:
        labels, cached, generation = _labels(source, root, n or 300, seed, include, exclude)
    result = run(
        default_config(labels, name),
        root / "run",
        overwrite=True,
        cache_root=cache_root,
        progress=progress,
    )
    report = Report.from_run(result.path)
    files = report.write(("html", "md"))
    return Optimized(labels, cached, generation, result, report, files, own is not None)


def _earlier_optimize(folder: Path) -> bool:
    """Whether ``folder`` holds only what an older optimize wrote (generated sets and a run),
    from before the folders ragbench makes were marked."""
    return all(
        (entry.name.startswith("labels-") and (entry / "cuts.jsonl").is_file())
        or (entry.name == "run" and (entry / "manifest.json").is_file())
        for entry in folder.iterdir()
    )
