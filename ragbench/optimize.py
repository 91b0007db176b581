"""The whole job on your own documents, in one call (``ragbench optimize DOCS``).

``optimize(docs)`` generates labels from the documents (the default offline method,
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
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from ragbench.data.generate import GenerationResult, IctMethod, corpus_documents, generate
from ragbench.data.labeled import corpus_fingerprint
from ragbench.errors import ConfigError
from ragbench.experiment.runner import RunResult, run
from ragbench.report.report import Report

__all__ = ["DEFAULT_SWEEP", "Optimized", "default_config", "optimize"]

StrPath = str | os.PathLike[str]

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
        "dataset": {"path": str(Path(labels).resolve())},
        "evaluation": {"level": "document", "metrics": ["ndcg@10", "recall@5"], "depth": 100},
        "baseline": "bm25",
        "sweep": {**DEFAULT_SWEEP, "embedder": [_embedder()]},
    }


@dataclass(frozen=True)
class Optimized:
    """What ``optimize`` did: the labels (and whether they came from an earlier call), the
    run, its report and the report's files."""

    labels: Path
    labels_cached: bool
    generation: GenerationResult | None
    run: RunResult
    report: Report
    files: dict[str, Path]

    @property
    def queries(self) -> int:
        """Queries the sweep evaluated: those judged at the document level (a generated query
        whose context repeats most of its words is judged at the span levels only)."""
        return int(self.run.manifest["queries"]["count"])

    @property
    def generated(self) -> int:
        """Queries in the labels."""
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
    same documents and settings; older sets there are removed."""
    method = IctMethod()
    target = out / f"labels-{_labels_key(docs, method, n, seed, include, exclude)}"
    if (target / "queries.jsonl").is_file():
        return target, True, None
    for old in out.glob("labels-*"):
        shutil.rmtree(old, ignore_errors=True)
    return (
        target,
        False,
        generate(docs, target, method, n=n, seed=seed, include=include, exclude=exclude),
    )


def optimize(
    docs: StrPath,
    out: StrPath | None = None,
    *,
    n: int = 300,
    seed: int = 0,
    cache_root: str | Path | None = None,
    progress: bool = True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> Optimized:
    """Generate labels for the documents ``docs`` (cached), run the default sweep on them into
    ``<out>/run`` (default ``out``: ``runs/optimize-<folder name>``) and write its report;
    ``include`` / ``exclude`` select the folder's files by glob (``DirectoryLoader``)."""
    source = Path(docs)
    if not source.exists():
        raise ConfigError(f"{source}: no such file or directory (give a folder of documents)")
    name = f"optimize-{source.resolve().name or 'docs'}"
    root = Path(out) if out is not None else Path("runs") / name
    root.mkdir(parents=True, exist_ok=True)
    labels, cached, generation = _labels(source, root, n, seed, include, exclude)
    result = run(
        default_config(labels, name),
        root / "run",
        overwrite=True,
        cache_root=cache_root,
        progress=progress,
    )
    report = Report.from_run(result.path)
    files = report.write(("html", "md"))
    return Optimized(labels, cached, generation, result, report, files)
