"""Generate a span-labeled set from documents alone (``ragbench datasets generate``).

``generate(corpus, out, method, n=50, seed=0, level="document")`` samples places of the corpus,
makes a query of each until ``n`` of them are judged at the evaluation ``level`` (see "Judged
at a level" below), and writes a span-labeled set (``corpus/`` + ``queries.jsonl``, see
``ragbench.data.spans``) that ``ragbench datasets validate`` accepts. The corpus is a file or
folder ``ragbench.load`` reads, or a labeled set of any format (its documents are used, e.g.
SciFact's or the chunking-evaluation corpora); the documents keep the ids they were loaded with.
Files are copied into ``corpus/`` when every document is one file, else every document is
written to ``corpus/contexts.jsonl``.

Sampling is stratified: round-robin over the documents (in a seeded random order), each turn
taking from the document's next section (sections split at Markdown and HTML headings), so a
small ``n`` spreads over many documents and, within one, over its sections.

Methods:

- ``ict`` (``IctMethod``, offline, the default): the inverse cloze task. A prose sentence (not
  a heading, code, a table row, a code-like line, a sentence with digits or one that opens by
  referring back) of at least ``min_words`` words is the query; its document is relevant, and
  the ``window`` sentences before and after it that share ``evidence_terms`` terms with it are
  its span evidence.
- ``headings`` (``HeadingsMethod``, offline; Markdown and HTML): a heading is the query, its
  section's body the evidence; empty and generic headings ("Overview", "Examples", ...) and
  sections of fewer than ``min_words`` words are skipped.
- ``llm`` (``LLMMethod``): a chat model writes a question, verbatim excerpts that answer it and
  a reference answer per sampled passage; the excerpts are located in the document (exact,
  whitespace-normalised, then fuzzy), near-duplicate questions are removed, and K questions can
  span two documents (``multi_hop``). See ``ragbench.data.generate.llm``.

**Held out.** The offline methods' queries are the documents' own words, which exact matching
would find trivially; so the text a query was taken from is cut out of the corpus the set is
evaluated on (``cuts.jsonl``, applied on load, ``ragbench.data.cuts``; the copied files stay as
they were), and evidence offsets refer to the cut text. A query of ``COPY_WORDS`` words or more
whose text (or the text it was cut from) would still be found verbatim somewhere — a sentence
repeated in the corpus — is dropped, and so is one whose cut would take text out of another
query's evidence. How well the result ranks configurations like real labels is measured in
``benchmarks/RESULTS.md``.

**Judged at a level.** ``n`` counts the queries a run at evaluation ``level`` scores: at the
document level, those that judge a document (an ict sentence whose context repeats most of its
words is judged at the chunk and span levels only); at the chunk and span levels, those with
span evidence. Sampling goes on (seeded: the same set for the same seed) until ``n`` such
queries are kept once held out, and the set holds those ``n`` alone (the others drawn are
counted as dropped, ``not judged at the <level> level``); a corpus that cannot give that many
gives every one it can, and the summary says so in one line (``GenerationResult.shortfall``).

Every query records, in its ``metadata``: ``method``, ``sources`` (the passages it was made from,
``doc_id``/``start``/``end`` in the documents as cut), ``cut`` (the range taken out, in the document
as stored), the method's details (a heading's level, how each LLM excerpt was matched) and
``generator`` (method, n, level, seed and the method's settings: window, evidence terms, filters,
model, prompt version, ...). Its ``type`` is the method (``multi_hop`` for questions over two
documents).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragbench.data.catalog import FORMATS, load_dataset, resolve_dataset
from ragbench.data.cuts import Cuts, widen
from ragbench.data.generate.base import (
    Draft,
    Generation,
    Method,
    Span,
    check_option,
    copies,
    folded,
)
from ragbench.data.generate.llm import LLMMethod, copy_share, locate_excerpt, near_duplicates
from ragbench.data.generate.offline import GENERIC_HEADINGS, HeadingsMethod, IctMethod
from ragbench.data.labeled import LEVELS
from ragbench.data.sample import Sampled
from ragbench.data.spans import DEFAULT_EVIDENCE_GRADE, write_spans
from ragbench.errors import ConfigError, DataError, RagbenchError
from ragbench.llm.client import LLMConfig
from ragbench.registry import components, format_validation_error
from ragbench.text.loaders import LoadProblem, load
from ragbench.types import Document

__all__ = [
    "DEFAULT_LEVEL",
    "GENERIC_HEADINGS",
    "METHODS",
    "Generation",
    "GenerationResult",
    "HeadingsMethod",
    "IctMethod",
    "LLMMethod",
    "Method",
    "build_method",
    "copy_share",
    "corpus_documents",
    "generate",
    "generate_from",
    "held_out",
    "locate_excerpt",
    "near_duplicates",
]

StrPath = str | os.PathLike[str]

METHODS = ("ict", "headings", "llm")
DEFAULT_LEVEL = "document"
"""The evaluation level ``n`` counts judged queries at by default: ``evaluation.level``'s
default, the level ``ragbench optimize`` sweeps at."""
# option -> the methods it applies to
_OPTIONS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("window", "evidence_terms", "repeated_share", "keep_numbers", "keep_references"),
        ("ict",),
    ),
    "min_words": METHODS,
    **dict.fromkeys(
        (
            "base_url",
            "model",
            "credential",
            "llm_cache",
            "passage_words",
            "min_match",
            "dedup",
            "embedder",
            "max_overlap",
            "multi_hop",
        ),
        ("llm",),
    ),
}
_FILE_FORMATS = frozenset({"md", "txt", "html", "pdf"})


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def build_method(method: str = "ict", **options: Any) -> Method:
    """The generation method named ``method`` with ``options`` (the ``datasets generate``
    flags, as keywords: ``window=2``, ``base_url=...``, ``embedder={"kind": "hashing"}``; None
    means the default). ``ConfigError`` names the flag of a bad value, of an option another
    method takes, or of a missing endpoint."""
    if method not in METHODS:
        raise ConfigError(f"--method: expected one of {', '.join(METHODS)}, got {method!r}")
    given = {key: value for key, value in options.items() if value is not None}
    for key in given:
        if key not in _OPTIONS:
            raise TypeError(f"build_method() got an unexpected option {key!r}")
        if method not in _OPTIONS[key]:
            raise ConfigError(
                f"{_flag(key)}: applies to --method {' or '.join(_OPTIONS[key])} only"
            )
    if method == "ict":
        return IctMethod(**given)
    if method == "headings":
        return HeadingsMethod(**given)
    missing = [_flag(key) for key in ("base_url", "model") if key not in given]
    if missing:
        raise ConfigError(
            f"--method llm: give {' and '.join(missing)} (an OpenAI-compatible endpoint)"
        )
    try:
        llm = LLMConfig(
            base_url=given.pop("base_url"),
            model=given.pop("model"),
            credential=given.pop("credential", None),
        )
    except ValidationError as exc:
        problems = (line.partition(": ") for line in format_validation_error("", exc).splitlines())
        raise ConfigError("; ".join(f"{_flag(key)}: {what}" for key, _, what in problems)) from None
    if "embedder" in given:
        given["embedder"] = components("embedder").parse(given["embedder"], "--embedder")
    cache = given.pop("llm_cache", None)
    return LLMMethod(llm, cache=Path(cache) if cache is not None else None, **given)


def corpus_documents(
    corpus: StrPath, include: Sequence[str] = (), exclude: Sequence[str] = ()
) -> tuple[list[Document], list[LoadProblem]]:
    """The documents of ``corpus`` and the files its loader skipped: a labeled set's documents
    (any format ``load_dataset`` reads, by path or name), else what ``ragbench.load`` reads
    from the file or folder, its files selected by the globs ``include`` / ``exclude``. With
    globs, a folder labeled by its ``queries.jsonl`` is read as the folder of documents it is
    (the label file is no document); other labeled sets take no globs."""
    path = Path(corpus)
    if not path.exists():
        path = resolve_dataset(corpus)
    found = [name for name, fmt in FORMATS.items() if path.is_dir() and fmt.detect(path)]
    if found and (include or exclude) and found[0] != "folder":
        raise ConfigError(
            f"--include/--exclude: {path} is a labeled set ({found[0]} format); they select "
            "the files of a folder of documents"
        )
    if found and not (include or exclude):
        return load_dataset(path).documents, []
    loader = load(path, include=include, exclude=exclude)
    documents = list(loader)
    if not documents:
        raise DataError(loader.report.nothing_loaded(path))
    return documents, loader.report.problems


@dataclass(frozen=True)
class GenerationResult:
    """The set ``generate`` wrote at ``path`` and how it went: queries written (each judged at
    evaluation ``level``; ``n`` were asked for), candidates the corpus offered and those
    skipped, sampled places dropped (both by reason), LLM requests made and answered from the
    cache, files the loader skipped."""

    path: Path
    method: str
    queries: int
    documents: int
    candidates: int
    n: int
    level: str
    skipped: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    cached: int = 0
    problems: list[LoadProblem] = field(default_factory=list)

    @property
    def shortfall(self) -> str | None:
        """One line saying why fewer than ``n`` queries were written, or None when ``n``
        were."""
        if self.queries >= self.n:
            return None
        queries = "query" if self.queries == 1 else "queries"
        return (
            f"--n {self.n}: the documents give only {self.queries:,} {queries} judged at the "
            f"{self.level} level (every one of the {self.candidates:,} candidates was drawn; "
            "see what was skipped and dropped)"
        )

    def __str__(self) -> str:
        lines = [
            f"{self.path}: {self.queries:,} queries written (method {self.method}) from "
            f"{self.documents:,} documents, {self.candidates:,} candidates",
            f"dropped: {_counts(self.dropped)}",
        ]
        if self.shortfall is not None:
            lines.insert(0, self.shortfall)
        if self.skipped:
            lines.append(f"candidates skipped: {_counts(self.skipped)}")
        if self.method == "llm":
            lines.append(f"LLM requests: {self.requests:,} made, {self.cached:,} cached")
        return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {count:,}" for reason, count in counts.items()) or "none"


def generate(
    corpus: StrPath,
    out: StrPath,
    method: Method | None = None,
    *,
    n: int = 50,
    seed: int = 0,
    level: str = DEFAULT_LEVEL,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> GenerationResult:
    """Write a span-labeled set of ``n`` queries judged at evaluation ``level`` (fewer when the
    corpus has no more) generated from ``corpus`` by ``method`` (default ``IctMethod()``) into
    ``out``, a new or empty folder (see the module docstring); ``include`` / ``exclude``
    select the files of a folder by glob (``DirectoryLoader``)."""
    chosen = method or IctMethod()
    check_option("--n", n, 1)
    check_option("--seed", seed, 0)
    _check_level(level)
    _check_target(Path(out))
    documents, problems = corpus_documents(corpus, include, exclude)
    return generate_from(
        documents, out, chosen, n=n, seed=seed, level=level, where=corpus, problems=problems
    )


def _check_level(level: str) -> None:
    """``ConfigError`` naming ``--level`` unless ``level`` is an evaluation level."""
    if level not in LEVELS:
        raise ConfigError(f"--level: expected one of {', '.join(LEVELS)}, got {level!r}")


def _check_target(target: Path) -> None:
    """``DataError`` unless ``target`` is a new or empty folder."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise DataError(f"{target}: already exists and is not an empty folder (choose a new one)")


def generate_from(
    documents: Sequence[Document],
    out: StrPath,
    method: Method,
    *,
    n: int,
    seed: int,
    where: StrPath,
    level: str = DEFAULT_LEVEL,
    problems: Sequence[LoadProblem] = (),
    sample: Sampled | None = None,
) -> GenerationResult:
    """``generate`` over ``documents`` already read (from ``where``, its loader having skipped
    ``problems``); ``sample`` says which sample of a larger corpus they are, recorded in every
    query's ``generator`` metadata (a run on the set reports it, ``ragbench.data.sample``)."""
    target = Path(out)
    _check_target(target)
    _check_level(level)
    docs = {doc.id: doc for doc in documents}
    generation, drafts, cuts = _drawn(documents, docs, method, n, seed, level)
    if not generation.candidates:
        skipped = f" (skipped: {_counts(generation.skipped)})" if generation.skipped else ""
        raise DataError(f"{where}: no {method.candidate}{skipped}")
    generator = {"method": method.name, "n": n, "level": level, "seed": seed, **method.settings()}
    generator["source"] = str(Path(where).resolve())
    if sample is not None:
        generator["sample"] = sample.as_dict()
    if not drafts:
        raise RagbenchError(f"{where}: no query was kept (dropped: {_counts(generation.dropped)})")
    width = max(3, len(str(len(drafts))))
    ids = [f"q{i:0{width}d}" for i in range(1, len(drafts) + 1)]
    records = [
        _record(qid, draft, docs, cuts, generator) for qid, draft in zip(ids, drafts, strict=True)
    ]
    whole_files = all(
        doc.metadata.get("format") in _FILE_FORMATS
        and doc.metadata.get("path") == doc.id
        and Path(doc.source).is_file()
        for doc in documents
    )
    written = list(documents) if whole_files else [doc for doc in documents if doc.text.strip()]
    cut_lines = [
        (cut["doc_id"], cut["start"], cut["end"], record["id"])
        for record in records
        if (cut := record["metadata"].get("cut"))
    ]
    write_spans(target, written, records, corpus_given=whole_files, cuts=cut_lines)
    return GenerationResult(
        path=target,
        method=method.name,
        queries=len(records),
        documents=len(written),
        candidates=generation.candidates,
        n=n,
        level=level,
        skipped=dict(generation.skipped),
        dropped=dict(generation.dropped),
        requests=generation.requests,
        cached=generation.cached,
        problems=list(problems),
    )


def _drawn(
    documents: Sequence[Document],
    docs: Mapping[str, Document],
    method: Method,
    n: int,
    seed: int,
    level: str,
) -> tuple[Generation, list[Draft], dict[str, Cuts]]:
    """The first ``n`` drafts of ``method`` judged at ``level`` (``Draft.judged_at``) that are
    kept once held out (``_held_out``), their cuts, and the last draw: each draw asks for as
    many more as are still missing, until ``n`` are kept or every candidate is drawn. The LLM
    requests are those of every draw (a later draw finds an earlier one's in the cache)."""
    want, made = n, 0
    while True:
        generation = method.run(documents, want, seed, level)
        made += generation.requests
        kept, _ = _held_out(generation.drafts, docs, generation.dropped)
        if len(kept) >= n or generation.exhausted or not generation.drafts:
            break
        want += n - len(kept)
    generation.cached -= made - generation.requests
    generation.requests = made
    chosen = kept[:n]
    return generation, chosen, _cuts(chosen, docs)


def held_out(
    documents: Sequence[Document], method: Method, n: int, seed: int
) -> tuple[list[Draft], dict[str, Cuts]]:
    """Up to ``n`` drafts of ``method`` over ``documents`` as ``generate`` keeps them, and the
    cuts per document (what a set of them is evaluated on, or trained on, without their text)."""
    generation = method.run(documents, n, seed)
    return _held_out(generation.drafts, {doc.id: doc for doc in documents}, generation.dropped)


def _widened(text: str, cut: Span) -> tuple[int, int]:
    return widen(text, cut[1], cut[2])


def _held_out(
    drafts: Sequence[Draft], docs: Mapping[str, Document], dropped: Counter[str]
) -> tuple[list[Draft], dict[str, Cuts]]:
    """The drafts kept once each draft's ``cut`` is taken out of its document, and the cuts per
    document: a draft made of a document's text (one with a cut) that exact match could still
    find (``copies``) in a document (its own: ``still in its document``; another: ``in another
    document``) is counted in ``dropped`` and left out, its cut with it. (An LLM's questions are
    no document's text; ``max_overlap`` bounds how much of it they copy.)"""
    kept = list(drafts)
    originals = {doc_id: doc.text for doc_id, doc in docs.items()}
    while True:
        cuts = _cuts(kept, docs)
        texts = {
            doc_id: folded(cuts[doc_id].apply(doc.text) if doc_id in cuts else doc.text)
            for doc_id, doc in docs.items()
        }
        everything = "\0".join(texts.values())
        found: list[str | None] = []
        for draft in kept:
            left = {text for text in copies(draft, originals) if text in everything}
            own = {doc_id for doc_id, _, _ in (*draft.evidence, *draft.sources)}
            if not left:
                found.append(None)
            elif any(text in texts[doc_id] for text in left for doc_id in own):
                found.append("still in its document")
            else:
                found.append("in another document")
        if not any(found):
            return kept, cuts
        dropped.update(reason for reason in found if reason)
        kept = [draft for draft, reason in zip(kept, found, strict=True) if reason is None]


def _cuts(drafts: Sequence[Draft], docs: Mapping[str, Document]) -> dict[str, Cuts]:
    """The drafts' cuts per document, each widened over the blanks next to it."""
    ranges: dict[str, list[tuple[int, int]]] = {}
    for draft in drafts:
        if draft.cut is not None:
            ranges.setdefault(draft.cut[0], []).append(_widened(docs[draft.cut[0]].text, draft.cut))
    return {doc_id: Cuts.of(spans) for doc_id, spans in ranges.items()}


def _record(
    qid: str,
    draft: Draft,
    docs: Mapping[str, Document],
    cuts: Mapping[str, Cuts],
    generator: dict[str, Any],
) -> dict[str, Any]:
    """The ``queries.jsonl`` line of ``draft``: evidence and sources at their offsets in the
    documents as cut; the cut itself at its offsets before cutting."""

    def place(span: Span) -> tuple[str, int, int]:
        doc_id, start, end = span
        return (doc_id, *cuts[doc_id].span(start, end)) if doc_id in cuts else span

    def text(doc_id: str) -> str:
        doc = docs[doc_id].text
        return cuts[doc_id].apply(doc) if doc_id in cuts else doc

    record: dict[str, Any] = {"id": qid, "text": draft.text, "type": draft.type}
    if draft.answer is not None:
        record["answer"] = draft.answer
    evidence = [
        {"doc_id": doc_id, "start": start, "end": end, "text": text(doc_id)[start:end]}
        for doc_id, start, end in map(place, draft.evidence)
        if text(doc_id)[start:end].strip()
    ]
    if evidence:
        record["evidence"] = evidence
    if draft.judged:
        record["qrels"] = dict.fromkeys(draft.judged, DEFAULT_EVIDENCE_GRADE)
    if draft.levels and evidence:
        record["levels"] = list(draft.levels)
    record["metadata"] = {
        "method": generator["method"],
        "sources": [
            {"doc_id": doc_id, "start": start, "end": end}
            for doc_id, start, end in map(place, draft.sources)
        ],
        **draft.details,
        "generator": generator,
    }
    if draft.cut is not None:
        start, end = _widened(docs[draft.cut[0]].text, draft.cut)
        record["metadata"]["cut"] = {"doc_id": draft.cut[0], "start": start, "end": end}
    return record
