"""The ``llm`` generation method: a chat model reads a sampled passage and writes a question,
verbatim excerpts of the passage that answer it and a reference answer.

Passages are runs of consecutive sentences of one section, up to ``passage_words`` words (a
longer sentence is a passage of its own); passages of fewer than ``min_words`` words are
skipped. The prompt asks for JSON following the schema of ``GeneratedQuestion``, written into
the prompt the way ragas' prompts do, so any OpenAI-compatible endpoint works; the request also
asks for that schema, bounded (``_REPLY_SCHEMA``), as structured output where the endpoint takes
it, which lets a small local model reply in valid JSON and end its reply. Every call goes through
``LLMClient`` and its ``LLMCache``: a rerun makes no request.

A reply becomes a query only if it parses (raw control characters in its strings allowed:
grammar-constrained local models write raw newlines), and every excerpt is found in the
passage's document (``locate_excerpt``: exact, then with any run of whitespace matching any run,
then a fuzzy alignment near the passage scoring at least ``min_match`` of 100). Then,
optionally, a question whose content words mostly come from its excerpts (share above
``max_overlap``) is dropped, and of near-duplicate questions (cosine similarity of their
``embedder`` vectors above ``dedup``) the later one. With ``multi_hop`` K, K of the questions
are asked over two passages of two different documents, and need evidence in both.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError
from rapidfuzz import fuzz

from ragbench.data.generate.base import (
    CheckedOptions,
    Draft,
    Generation,
    Section,
    Span,
    check_option,
    document_sections,
    stratified,
    unjudged,
    word_count,
)
from ragbench.data.spans import find_passage
from ragbench.errors import DataError
from ragbench.index.cache import default_cache_root
from ragbench.llm.cache import LLMCache
from ragbench.llm.client import LLMClient, LLMConfig
from ragbench.protocols import Embedder
from ragbench.registry import ComponentConfig, components
from ragbench.text.tokenize import ENGLISH_STOPWORDS, TokenizerConfig, WordTokenizer
from ragbench.types import Document

__all__ = [
    "PROMPT_VERSION",
    "GeneratedQuestion",
    "LLMMethod",
    "Located",
    "copy_share",
    "locate_excerpt",
    "near_duplicates",
]

PROMPT_VERSION = 1
"""Changes whenever the prompts change (it is recorded with every generated query)."""

Passage = tuple[Document, int, int]


class GeneratedQuestion(BaseModel):
    """What the model returns for a passage (or a pair of passages)."""

    question: str = Field(
        description="A question someone searching the documents might ask, answered by the text"
    )
    excerpts: list[str] = Field(
        description="The parts of the text that answer the question, each copied verbatim"
    )
    answer: str = Field(description="A short reference answer, from the text alone")


def _reply_schema() -> dict[str, Any]:
    """``GeneratedQuestion``'s JSON schema with bounds that let a small model finish its reply:
    a question and an answer of up to 300 characters, one to four excerpts of up to 600."""
    schema = GeneratedQuestion.model_json_schema()
    properties = schema["properties"]
    properties["question"]["maxLength"] = properties["answer"]["maxLength"] = 300
    properties["excerpts"] |= {"minItems": 1, "maxItems": 4}
    properties["excerpts"]["items"]["maxLength"] = 600
    return schema


_REPLY_SCHEMA = _reply_schema()
"""The schema a reply is asked for as structured output (``LLMClient.chat``'s ``schema``)."""


class _OnePassage(BaseModel):
    passage: str


class _TwoPassages(BaseModel):
    passage_1: str
    passage_2: str


_SINGLE = (
    "Read the passage and write one question that someone searching these documents might ask "
    "and that the passage answers. The question must stand on its own: name what it is about "
    "instead of saying 'the passage' or 'the text', and prefer your own words to the passage's. "
    "Copy the part or parts of the passage that answer it into 'excerpts', character for "
    "character (each a run of consecutive text of the passage, usually a sentence or two), and "
    "write a short reference answer into 'answer'."
)
_SINGLE_EXAMPLE = (
    _OnePassage(
        passage="Retention decides how long records are kept. A segment is deleted once its "
        "newest record is older than log.retention.ms (7 days by default)."
    ),
    GeneratedQuestion(
        question="After how long are old log segments removed by default?",
        excerpts=[
            "A segment is deleted once its newest record is older than log.retention.ms "
            "(7 days by default)."
        ],
        answer="After 7 days: a segment is deleted once its newest record is older than "
        "log.retention.ms.",
    ),
)
_MULTI = (
    "Read the two passages, which come from different documents, and write one question that "
    "needs both of them to be answered. The question must stand on its own: name what it is "
    "about instead of saying 'the passages', and prefer your own words to theirs. Copy the parts "
    "of the passages that answer it into 'excerpts', character for character (each a run of "
    "consecutive text of one passage; at least one from each passage), and write a short "
    "reference answer into 'answer'."
)
_MULTI_EXAMPLE = (
    _TwoPassages(
        passage_1="Brokers listen for clients on port 7422.",
        passage_2="The admin API is served on port 7480 and needs a token.",
    ),
    GeneratedQuestion(
        question="Which ports do clients and the admin API use?",
        excerpts=[
            "Brokers listen for clients on port 7422.",
            "The admin API is served on port 7480",
        ],
        answer="Clients connect on port 7422, the admin API on port 7480.",
    ),
)


def _prompt(instruction: str, example: tuple[BaseModel, BaseModel], data: BaseModel) -> str:
    """The prompt, laid out like a ragas ``PydanticPrompt`` (schema, example, input)."""
    schema = json.dumps(GeneratedQuestion.model_json_schema())
    given, wanted = example
    return (
        f"{instruction}\n"
        "Please return the output in a JSON format that complies with the following schema as "
        f"specified in JSON Schema:\n{schema}"
        "Do not use single quotes in your response but double quotes,properly escaped with a "
        "backslash.\n"
        "\n--------EXAMPLES-----------\n"
        f"Example 1\nInput: {given.model_dump_json(indent=4)}\n"
        f"Output: {wanted.model_dump_json(indent=4)}\n"
        "-----------------------------\n"
        "\nNow perform the same with the following input\n"
        f"input: {data.model_dump_json(indent=4)}\n"
        "Output: "
    )


def _parse(reply: str) -> GeneratedQuestion | None:
    """The reply's JSON object (code fences and prose around it ignored, raw control characters
    in strings allowed), if it is one."""
    start, end = reply.find("{"), reply.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        parsed = GeneratedQuestion.model_validate(json.loads(reply[start : end + 1], strict=False))
    except (json.JSONDecodeError, ValidationError):
        return None
    if not parsed.question.strip() or not parsed.excerpts:
        return None
    return parsed


# ---------------------------------------------------------------- locating excerpts


@dataclass(frozen=True)
class Located:
    """Where an excerpt was found: ``[start, end)`` of ``doc_id``, how, and the match score
    (100 for exact and whitespace matches)."""

    doc_id: str
    start: int
    end: int
    how: Literal["exact", "whitespace", "fuzzy"]
    score: float


def _fuzzy(excerpt: str, source: Passage) -> Located | None:
    """The best alignment of ``excerpt`` with the text around the passage (the passage and as
    many characters as the excerpt has on each side), widened to whole words and to the
    punctuation the excerpt starts or ends with."""
    doc, lo, hi = source
    text = doc.text
    left, right = max(0, lo - len(excerpt)), min(len(text), hi + len(excerpt))
    region = text[left:right]
    if len(excerpt) >= len(region):
        score, start, end = fuzz.ratio(excerpt, region), left, right
    else:
        found = fuzz.partial_ratio_alignment(excerpt, region)
        if found is None:  # only with a score cutoff, which is not given
            return None
        score, start, end = found.score, left + found.dest_start, left + found.dest_end
    while 0 < start < end and text[start - 1].isalnum() and text[start].isalnum():
        start -= 1
    while start < end < len(text) and text[end - 1].isalnum() and text[end].isalnum():
        end += 1
    if start > 0 and not excerpt[0].isalnum() and text[start - 1] == excerpt[0]:
        start -= 1  # the opening quote or bracket the excerpt starts with
    if end < len(text) and not excerpt[-1].isalnum() and text[end] == excerpt[-1]:
        end += 1  # the full stop (or closing mark) the excerpt ends with
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Located(doc.id, start, end, "fuzzy", float(score))


def locate_excerpt(
    excerpt: str, sources: Sequence[Passage], min_match: float = 90.0
) -> Located | None:
    """Where ``excerpt`` is in the documents of ``sources`` (passages as (document, start,
    end)): verbatim or with whitespace normalised (``find_passage``; in a passage first, else
    anywhere in its document), else the best fuzzy alignment near a passage if it scores at
    least ``min_match``."""
    excerpt = excerpt.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not excerpt:
        return None
    for doc, lo, hi in [*sources, *((doc, 0, len(doc.text)) for doc, _, _ in sources)]:
        found = find_passage(excerpt, doc.text[lo:hi])
        if found is not None:
            start, end = lo + found[0], lo + found[1]
            how: Literal["exact", "whitespace"] = (
                "exact" if doc.text[start:end] == excerpt else "whitespace"
            )
            return Located(doc.id, start, end, how, 100.0)
    aligned = [fit for source in sources if (fit := _fuzzy(excerpt, source)) is not None]
    best = max(aligned, key=lambda fit: fit.score, default=None)
    return best if best and best.score >= min_match and best.start < best.end else None


_QUESTION_WORDS = (
    "what which who whom whose when where why how do does did can could should would may might "
    "must shall is are was were be been being has have had am i my me we our you your"
).split()
_CONTENT_WORDS = TokenizerConfig(stopwords=tuple(sorted(ENGLISH_STOPWORDS | {*_QUESTION_WORDS})))


def copy_share(question: str, excerpts: Sequence[str]) -> float:
    """The share of the question's distinct content words (stemmed; stop and question words
    left out) that occur in ``excerpts``; 0 for a question without content words."""
    tokenizer = WordTokenizer(_CONTENT_WORDS)
    wanted = set(tokenizer.tokenize(question))
    if not wanted:
        return 0.0
    return len(wanted & set(tokenizer.tokenize("\n".join(excerpts)))) / len(wanted)


def near_duplicates(texts: Sequence[str], embedder: Embedder, threshold: float) -> list[bool]:
    """For each text, whether it is a near-duplicate of an earlier text that is not one
    itself: the cosine similarity of their vectors exceeds ``threshold``."""
    vectors = np.asarray(embedder.embed(list(texts), "query"), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    kept: list[int] = []
    duplicate = []
    for i, vector in enumerate(vectors):
        repeats = bool(kept) and float(np.max(vectors[kept] @ vector)) > threshold
        duplicate.append(repeats)
        if not repeats:
            kept.append(i)
    return duplicate


def _merged(spans: Iterable[Span], docs: Mapping[str, Document]) -> tuple[Span, ...]:
    """``spans`` in order, those of a document that overlap or lie only whitespace apart
    joined into one."""
    merged: list[Span] = []
    for doc_id, start, end in sorted(spans):
        if merged and merged[-1][0] == doc_id:
            _, first, last = merged[-1]
            if start <= last or not docs[doc_id].text[last:start].strip():
                merged[-1] = (doc_id, first, max(end, last))
                continue
        merged.append((doc_id, start, end))
    return tuple(merged)


# ---------------------------------------------------------------- the method


def _default_embedder() -> ComponentConfig:
    return components("embedder").parse({"kind": "sentence-transformers"})


@dataclass(frozen=True)
class LLMMethod(CheckedOptions):
    """Questions, excerpts and answers written by ``llm`` (see the module docstring); calls
    are cached under ``cache`` (default: the stage cache root)."""

    llm: LLMConfig
    cache: Path | None = None
    passage_words: int = 200
    min_words: int = 30
    min_match: float = 90.0
    dedup: float = 0.95
    embedder: ComponentConfig = field(default_factory=_default_embedder)
    max_overlap: float | None = None
    multi_hop: int = 0
    name: ClassVar[str] = "llm"
    bounds: ClassVar = {
        "passage_words": (1, None),
        "min_words": (1, None),
        "min_match": (0.0, 100.0),
        "dedup": (0.0, 1.0),
        "max_overlap": (0.0, 1.0),
        "multi_hop": (0, None),
    }

    @property
    def candidate(self) -> str:
        """What a candidate is."""
        return f"passages of at least {self.min_words} words"

    def settings(self) -> dict[str, Any]:
        """The options recorded in each query's metadata (the model's, not its endpoint)."""
        return {
            "model": self.llm.model,
            "temperature": self.llm.temperature,
            "llm_seed": self.llm.seed,
            "prompt_version": PROMPT_VERSION,
            "passage_words": self.passage_words,
            "min_words": self.min_words,
            "min_match": self.min_match,
            "dedup": self.dedup,
            "embedder": self.embedder.label(),
            "max_overlap": self.max_overlap,
            "multi_hop": self.multi_hop,
        }

    def run(
        self, documents: Sequence[Document], n: int, seed: int, level: str | None = None
    ) -> Generation:
        """Up to ``n`` questions (``multi_hop`` of them over two documents), one request per
        sampled passage or pair; with ``level``, those judged at it (with span evidence)."""
        check_option("--multi-hop", self.multi_hop, 0, n)
        skipped: Counter[str] = Counter()
        strata = [
            [self._passages(section, skipped) for section in document_sections(doc)]
            for doc in documents
        ]
        jobs: list[tuple[Passage, ...]] = [
            (p,) for p in islice(stratified(strata, seed), n - self.multi_hop)
        ]
        exhausted = len(jobs) < n - self.multi_hop  # every passage is asked about
        jobs += self._pairs(strata, seed)
        client = LLMClient(self.llm, LLMCache(self.cache or default_cache_root()), where="llm")
        replies = client.chat_many([self._messages(job) for job in jobs], _REPLY_SCHEMA)
        dropped: Counter[str] = Counter()
        drafts = [
            draft
            for job, reply in zip(jobs, replies, strict=True)
            if (draft := self._draft(job, reply.text, dropped)) is not None
        ]
        if level is not None:
            judged = [draft for draft in drafts if draft.judged_at(level)]
            dropped[unjudged(level)] += len(drafts) - len(judged)
            drafts = judged
        requests, cached = client.usage.requests, client.usage.cached
        if self.dedup < 1 and len(drafts) > 1:
            embedder = components("embedder").build(self.embedder, "--embedder")
            own = getattr(embedder, "client", None)
            if isinstance(own, LLMClient):  # an embeddings endpoint: cached like the chat
                own.cache = client.cache
            repeats = near_duplicates([d.text for d in drafts], embedder, self.dedup)
            dropped["duplicate"] += sum(repeats)
            drafts = [d for d, repeat in zip(drafts, repeats, strict=True) if not repeat]
            if isinstance(own, LLMClient):
                requests, cached = requests + own.usage.requests, cached + own.usage.cached
        candidates = sum(len(passages) for sections in strata for passages in sections)
        return Generation(drafts, candidates, skipped, +dropped, requests, cached, exhausted)

    def _passages(self, section: Section, skipped: Counter[str]) -> list[Passage]:
        """The section's sentences packed into passages of up to ``passage_words`` words."""
        text, passages = section.doc.text, []
        groups: list[list[tuple[int, int, int]]] = [[]]
        for sentence in section.sentences:
            words = word_count(text[sentence.start : sentence.end])
            if groups[-1] and sum(w for *_, w in groups[-1]) + words > self.passage_words:
                groups.append([])
            groups[-1].append((sentence.start, sentence.end, words))
        for group in groups:
            if not group:
                continue
            if sum(w for *_, w in group) < self.min_words:
                skipped["short passage"] += 1
            else:
                passages.append((section.doc, group[0][0], group[-1][1]))
        return passages

    def _pairs(self, strata: list[list[list[Passage]]], seed: int) -> list[tuple[Passage, ...]]:
        """``multi_hop`` pairs of passages of two different documents, from a second
        stratified order (round-robin, so consecutive passages come from different ones)."""
        if not self.multi_hop:
            return []
        if sum(1 for sections in strata if any(sections)) < 2:
            raise DataError("--multi-hop: needs passages in two documents; the corpus has one")
        pairs: list[tuple[Passage, ...]] = []
        waiting: Passage | None = None
        for passage in stratified(strata, f"{seed}:multi-hop"):
            if len(pairs) == self.multi_hop:
                break
            if waiting is None:
                waiting = passage
            elif passage[0].id != waiting[0].id:
                pairs.append((waiting, passage))
                waiting = None
        return pairs

    def _messages(self, job: tuple[Passage, ...]) -> list[dict[str, str]]:
        texts = [doc.text[start:end] for doc, start, end in job]
        if len(texts) == 1:
            prompt = _prompt(_SINGLE, _SINGLE_EXAMPLE, _OnePassage(passage=texts[0]))
        else:
            data = _TwoPassages(passage_1=texts[0], passage_2=texts[1])
            prompt = _prompt(_MULTI, _MULTI_EXAMPLE, data)
        return [{"role": "user", "content": prompt}]

    def _draft(self, job: tuple[Passage, ...], reply: str, dropped: Counter[str]) -> Draft | None:
        """The reply to ``job`` as a draft, or None after counting why it is dropped."""
        parsed = _parse(reply)
        if parsed is None:
            dropped["invalid reply"] += 1
            return None
        found = [locate_excerpt(x, job, self.min_match) for x in parsed.excerpts]
        located = [f for f in found if f is not None]
        if len(located) < len(found):
            dropped["unlocatable excerpt"] += 1
            return None
        if len(job) > 1 and len({f.doc_id for f in located}) < 2:
            dropped["evidence in one document"] += 1
            return None
        docs = {doc.id: doc for doc, _, _ in job}
        evidence = _merged(((f.doc_id, f.start, f.end) for f in located), docs)
        if self.max_overlap is not None:
            excerpts = [docs[d].text[start:end] for d, start, end in evidence]
            if copy_share(parsed.question, excerpts) > self.max_overlap:
                dropped["overlap"] += 1
                return None
        matches = [
            {"how": f.how, "score": round(f.score, 1)}
            | ({"excerpt": excerpt} if f.how != "exact" else {})
            for f, excerpt in zip(located, parsed.excerpts, strict=True)
        ]
        return Draft(
            text=" ".join(parsed.question.split()),
            type="multi_hop" if len(job) > 1 else self.name,
            evidence=evidence,
            sources=tuple((doc.id, start, end) for doc, start, end in job),
            answer=parsed.answer.strip() or None,
            details={"matches": matches},
        )
