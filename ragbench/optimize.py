"""The whole job on your own documents, in one call (``ragbench optimize DOCS``).

``optimize(docs)`` uses the labels the documents' folder holds (a ``queries.jsonl``, or a labeled
set's layout), else generates them from the documents (the default offline method,
``ragbench.data.generate``: ``n`` queries judged at the level the sweep evaluates, fewer only when
the documents give no more, said in one line; cached: the same documents and settings reuse the set
written before), runs a default sweep over them that covers the families — BM25 at four k1/b
settings, dense MiniLM, hybrid RRF and hybrid convex fusion, each on two chunkings
(``DEFAULT_SWEEP``) — writes the report, and returns the recommendation with its bootstrap
confidence and the command that deploys it. The sweep's stages are cached like any run's, so a
second call costs seconds.

A corpus of more than ``SAMPLE_CHARS`` characters is swept on a sample of its documents
(``ragbench.data.sample``: half seeds stratified by folder, file type and size, half their
nearest neighbours by tf-idf, so that queries have near misses to rank; seeded): labels are
generated from the sample, or a labeled set's sweep keeps the documents its queries judge. The
pick is deployed on every document: the printed deploy command indexes the folder as it is
then (``Optimized.deploy_command``), not the copy of its documents generated labels hold.

MiniLM runs on ONNX Runtime with int8 weights (``onnxruntime`` and ``onnx`` are dependencies:
about 2× torch's speed on a CPU at +0.0015 nDCG@10 on SciFact, benchmarks/RESULTS.md); the
run's config and the report name the backend.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragbench.data.catalog import FORMATS, load_dataset
from ragbench.data.generate import GenerationResult, IctMethod, corpus_documents, generate_from
from ragbench.data.labeled import LabeledSet, corpus_fingerprint
from ragbench.data.sample import Sampled, SampleSize, check_size, choose, documents_for
from ragbench.errors import ConfigError, DataError, command_line
from ragbench.experiment.config import load_config
from ragbench.experiment.runner import RunResult, run
from ragbench.index.cache import writable_cache_root
from ragbench.owned import claim, owned, remove, seal
from ragbench.report.pick import chosen_trial
from ragbench.report.report import Report
from ragbench.text.loaders import LoadProblem
from ragbench.types import Document

__all__ = [
    "DEFAULT_SWEEP",
    "SAMPLE_CHARS",
    "Optimized",
    "default_config",
    "default_size",
    "optimize",
    "own_labels",
]

StrPath = str | os.PathLike[str]

_SPLIT = "test"  # the split of a labeled set the default sweep evaluates

_MINILM = {
    "kind": "sentence-transformers",
    "model": "all-MiniLM-L6-v2",
    "max_seq_length": 256,
    "backend": "onnx",
    "quantize": "int8",
}

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


SAMPLE_CHARS = 3_000_000
"""optimize's default budget, in characters of text: a larger corpus is swept on a sample of
about this many (``default_size``). Characters, not documents, because a sweep's time grows
with the chunks it embeds: at this budget a cold ``optimize`` of a 100,000-document folder
takes minutes on 2 cores. ``benchmarks/bench_sample.py`` measures how faithfully samples rank
the trials."""


def default_size(documents: Sequence[Document]) -> int | None:
    """How many ``documents`` optimize sweeps on by default: every one (None) up to
    ``SAMPLE_CHARS`` characters, else as many as hold about that many characters."""
    chars = sum(len(d.text) for d in documents)
    if chars <= SAMPLE_CHARS:
        return None
    return max(1, math.ceil(len(documents) * SAMPLE_CHARS / chars))


def default_config(
    labels: StrPath, name: str, sample: SampleSize = None, sample_seed: int = 0
) -> dict[str, Any]:
    """The default sweep on the labeled set ``labels`` (on a ``sample`` of its documents, when
    given), at the document level (every generated query judges its document; span evidence
    only some): nDCG@10 first, then recall of the top 5 (is the query's document among the
    passages a prompt would get)."""
    dataset: dict[str, Any] = {"path": str(Path(labels).resolve()), "split": _SPLIT}
    if sample is not None:
        dataset.update(sample=sample, sample_seed=sample_seed)
    return {
        "name": name,
        "dataset": dataset,
        "evaluation": {"level": "document", "metrics": ["ndcg@10", "recall@5"], "depth": 100},
        "baseline": "bm25",
        "sweep": {**DEFAULT_SWEEP, "embedder": [dict(_MINILM)]},
    }


@dataclass(frozen=True)
class Optimized:
    """What ``optimize`` did: the labels (and whether they came from an earlier call, or
    ``own``: the documents' own), the run, its report and the report's files, and the
    documents ``docs`` (with the globs that selected their files) generated labels came from."""

    labels: Path
    labels_cached: bool
    generation: GenerationResult | None
    run: RunResult
    report: Report
    files: dict[str, Path]
    own: bool = False
    docs: Path | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    n: int | None = None

    @property
    def queries(self) -> int:
        """Queries the sweep evaluated: those judged at its level (of generated labels, every
        one: ``n`` unless the documents give fewer, ``shortfall``)."""
        return int(self.run.manifest["queries"]["count"])

    @property
    def shortfall(self) -> str | None:
        """One line saying that the sweep evaluated fewer generated queries than the ``n``
        asked for, and why; None when it evaluated ``n`` (or the labels are the documents'
        own)."""
        if self.n is None or self.queries >= self.n:
            return None
        if self.generation is not None and self.generation.shortfall is not None:
            return self.generation.shortfall
        level = self.run.manifest["evaluation"]["level"]
        return (
            f"--n {self.n}: the documents give only {self.queries:,} queries judged at the "
            f"{level} level (every candidate was drawn when these labels were generated)"
        )

    @property
    def own_queries(self) -> int:
        """Queries of the documents' own labels, before a sample of the documents left some
        out (``queries`` are those the sweep evaluated)."""
        sample = self.sample
        if sample is not None and sample.queries_of is not None:
            return sample.queries_of
        return int(self.run.manifest["queries"].get("of", self.queries))

    @property
    def sample(self) -> Sampled | None:
        """The sample of the documents the sweep ran on, or None when it ran on every one."""
        found = self.run.manifest["dataset"].get("sample")
        return Sampled.from_dict(found) if found is not None else None

    @property
    def documents(self) -> int:
        """Documents in the corpus (all of them, however many the sweep ran on)."""
        sample = self.sample
        return sample.of if sample is not None else int(self.run.manifest["dataset"]["documents"])

    def deploy_command(self, collection: str = "default") -> str:
        """The command that builds a searchable collection of the recommended trial over the
        documents as they are when it runs. Generated labels hold a copy of the documents made
        when they were generated, so the run's corpus goes stale as the folder is edited: the
        command indexes the folder (``--source``, with the globs) with the trial's config
        (``--config``). A trial with a fine-tuned model is deployed from the run, which holds
        the model, plus the folder (an edited file is then refused, never served stale).
        Labels of the documents' own are the run's corpus (``Report.deploy_command``: a run
        whose set changed since is refused)."""
        if self.own or self.docs is None:
            return self.report.deploy_command(collection)
        pick = self.report.recommendation().best
        trial = chosen_trial(self.run.path, pick)
        words: dict[str, object] = {
            "source": self.docs.resolve(),
            "include": [*self.include],
            "exclude": [*self.exclude],
        }
        if any(getattr(c, "finetune", None) for c in trial.configs.values()):
            words = {"from_run": self.run.path, "trial": pick, **words}
        else:
            words["config"] = json.dumps(trial.effective(), separators=(",", ":"))
        return command_line("ragbench ingest", **words, collection=collection)

    @property
    def generated(self) -> int:
        """Queries in the generated labels (0 for the documents' own)."""
        if self.own:
            return 0
        with open(self.labels / "queries.jsonl", encoding="utf-8") as lines:
            return sum(1 for line in lines if line.strip())


def _labels_key(
    documents: Sequence[Document],
    method: IctMethod,
    n: int,
    level: str,
    seed: int,
    sample: Sampled | None,
) -> str:
    """What the generated labels depend on: the text of the documents they are generated from
    (the sample's, when there is one), the method, the sampling of queries (``n`` judged at
    ``level``: a set keyed without a level counted every query it drew, and is not reused)
    and the sample."""
    settings = {"method": method.name, **method.settings(), "n": n, "level": level, "seed": seed}
    if sample is not None:
        settings["sample"] = sample.as_dict()
    text = corpus_fingerprint(documents) + json.dumps(settings, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _labels(
    documents: Sequence[Document],
    problems: Sequence[LoadProblem],
    sample: Sampled | None,
    out: Path,
    n: int,
    level: str,
    seed: int,
    where: Path,
) -> tuple[Path, bool, GenerationResult | None]:
    """The set of ``n`` queries judged at ``level`` generated from ``documents`` (read from
    ``where``; on ``sample`` of them, when given) under ``out`` (``labels-<key>``), written unless
    an earlier call wrote it for the same documents and settings, and sealed (``owned.seal``); older
    sets optimize wrote there are removed when they are as it wrote them (a folder of another maker,
    ``labels-handwritten``, stays, and so does a set judged or edited by hand, said in one line)."""
    method = IctMethod()
    picked = documents
    if sample is not None:
        picked = choose(documents, sample.documents, sample.seed)
    target = out / f"labels-{_labels_key(picked, method, n, level, seed, sample)}"
    if (target / "queries.jsonl").is_file():
        return target, True, None
    for old in out.glob("labels-*"):
        kept = remove(old) if owned(old) else None
        if kept is not None:
            logging.getLogger(__name__).warning(
                "%s: an older generated set, kept: %s; delete it yourself when you no longer "
                "need it",
                old,
                kept,
            )
    made = generate_from(
        picked,
        target,
        method,
        n=n,
        seed=seed,
        level=level,
        where=where,
        problems=problems,
        sample=sample,
    )
    seal(target, "labeled set")
    return target, False, made


def own_labels(docs: StrPath) -> str | None:
    """The format of the labels ``docs`` holds itself (a ``queries.jsonl`` at its top, or the
    layout of a labeled set: BEIR, span-labeled, chunking evaluation), or None."""
    path = Path(docs)
    found = [name for name, fmt in FORMATS.items() if path.is_dir() and fmt.detect(path)]
    return found[0] if found else None


def _checked_own(
    docs: Path, fmt: str, include: Sequence[str], exclude: Sequence[str]
) -> LabeledSet:
    """The labels ``docs`` holds (in format ``fmt``), loaded as the sweep will load them;
    ``ConfigError`` saying why they cannot be used and how to go on otherwise."""
    labels = docs / "queries.jsonl" if fmt == "folder" else docs
    if include or exclude:
        raise ConfigError(
            f"--include/--exclude: {labels} labels the documents of {docs} as they are; "
            "pass --generate to generate labels from the files you select"
        )
    try:
        return load_dataset(docs, split=_SPLIT)
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
    sample: int | str | None = None,
    generate_labels: bool = False,
    cache_root: str | Path | None = None,
    progress: bool = True,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    overrides: Sequence[str] = (),
) -> Optimized:
    """Label the documents ``docs``, run the default sweep on them into ``<out>/run`` (default
    ``out``: ``runs/optimize-<folder name>``, a folder optimize made or a new or empty one) and
    write its report. Labels ``docs`` holds itself (``own_labels``: a ``queries.jsonl``, or a
    labeled set's layout) are used as they are; otherwise, or with ``generate_labels``, ``n``
    queries (default 300) judged at the level the sweep evaluates are generated (cached; fewer when
    the documents give no more: ``Optimized.shortfall``). ``include`` / ``exclude`` select the
    folder's files by glob (``DirectoryLoader``).

    ``sample`` is the sample of the documents the sweep runs on (a number of documents, a
    percentage ``"25%"``, or ``"all"``; default: ``default_size``), drawn with ``seed``, which
    also seeds the generated queries. ``overrides`` (``key.path=value``, as ``ragbench run
    --set``) change the default config."""
    source = Path(docs)
    if not source.exists():
        raise ConfigError(f"{source}: no such file or directory (give a folder of documents)")
    _sample_flag(sample)  # a bad --sample fails before any work
    own = None if generate_labels else own_labels(source)
    if own is not None and n is not None:
        raise ConfigError(
            f"--n: {source} holds labels of its own, which optimize uses as they are; pass "
            "--generate to generate queries instead"
        )
    labeled = _checked_own(source, own, include, exclude) if own is not None else None
    writable_cache_root(cache_root)  # a cache root that cannot be used fails before --out
    name = f"optimize-{source.resolve().name or 'docs'}"
    root = claim(
        Path(out) if out is not None else Path("runs") / name,
        "--out",
        "labels and run of optimize",
        earlier=_earlier_optimize,
    )
    if labeled is not None:
        labels, cached, generation = source, True, None
        size = default_size(labeled.documents) if sample is None else _sample_flag(sample)
        config = default_config(labels, name, size, seed)
        labeled = None  # the sweep loads the set itself: this copy goes before it
    else:
        n = n or 300
        # the level the sweep evaluates (after --set): n queries are judged at it
        level = load_config(default_config(root, name), overrides).evaluation.level
        labels, cached, generation = _generated(
            source, root, n, level, seed, sample, include, exclude
        )
        config = default_config(labels, name)
    result = run(
        load_config(config, overrides),
        root / "run",
        overwrite=True,
        cache_root=cache_root,
        progress=progress,
    )
    report = Report.from_run(result.path)
    files = report.write(("html", "md"))
    if own is not None:
        return Optimized(labels, cached, generation, result, report, files, own=True)
    return Optimized(
        labels,
        cached,
        generation,
        result,
        report,
        files,
        docs=source,
        include=tuple(include),
        exclude=tuple(exclude),
        n=n,
    )


def _generated(
    source: Path,
    root: Path,
    n: int,
    level: str,
    seed: int,
    sample: int | str | None,
    include: Sequence[str],
    exclude: Sequence[str],
) -> tuple[Path, bool, GenerationResult | None]:
    """The labels of ``n`` queries judged at ``level`` generated from the documents of
    ``source`` (on ``sample`` of them, by default ``default_size``) under ``root``
    (``_labels``). The documents are read here and let
    go before the sweep, which reads the labeled set alone."""
    documents, problems = corpus_documents(source, include, exclude)
    size = default_size(documents) if sample is None else _sample_flag(sample)
    chosen = _sampled(source, documents, size, seed, include, exclude)
    return _labels(documents, problems, chosen, root, n, level, seed, source)


def _sample_flag(sample: int | str | None) -> SampleSize:
    """``sample`` as a sample's size (None: every document, or the default when not given);
    ``ConfigError`` naming ``--sample`` when it is none."""
    try:
        return check_size(sample)
    except ValueError as exc:
        raise ConfigError(f"--sample: {exc}") from None


def _sampled(
    source: Path,
    documents: Sequence[Document],
    size: SampleSize,
    seed: int,
    include: Sequence[str],
    exclude: Sequence[str],
) -> Sampled | None:
    """The sample of ``documents`` (read from ``source``) labels are generated from, or None
    for every document. It names ``source`` when a deployment can index it whole (a file or
    folder of documents, not a labeled set of another layout)."""
    kept = documents_for(size, len(documents))
    if kept >= len(documents):
        return None
    readable = own_labels(source) in (None, "folder")
    return Sampled(
        kept,
        len(documents),
        seed,
        source=str(source.resolve()) if readable else None,
        include=tuple(include),
        exclude=tuple(exclude),
    )


def _earlier_optimize(folder: Path) -> bool:
    """Whether ``folder`` holds only what an older optimize wrote (generated sets and a run),
    from before the folders ragbench makes were marked."""
    return all(
        (entry.name.startswith("labels-") and (entry / "cuts.jsonl").is_file())
        or (entry.name == "run" and (entry / "manifest.json").is_file())
        for entry in folder.iterdir()
    )
