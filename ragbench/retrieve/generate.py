"""Generators — the ``generator`` axis: answer each query from its retrieved chunks.

``none`` answers nothing (a retrieval-only trial). ``llm`` packs the top chunks into a token
budget with untrusted-data framing (``ragbench.retrieve.assemble``), fills a prompt template
and asks an OpenAI-compatible model through ``ragbench.llm``; every call is cached by content,
so a rerun makes no request. ``extractive`` needs no model: it packs the same context and
answers with the sentence(s) sharing the most words with the question — the offline baseline
that lets the whole generation path run in CI and on a laptop.

A generator plans one ``generate`` stage after the final ranking; its value (``Answers``: the
answer, the chunk ids in the prompt, seconds and tokens per query) is the plan's ``answers``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from ragbench.llm.client import LLMOptions
from ragbench.registry import ConfigModel, components
from ragbench.retrieve.artifacts import ANSWERS, Answers, ChunkSet, QueryUsage, Timed
from ragbench.retrieve.assemble import assemble, system_notice
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, check_template, component_key
from ragbench.text.sentences import split_sentences
from ragbench.text.tokenize import token_counter
from ragbench.types import Chunk

__all__ = [
    "ContextOptions",
    "ExtractiveGeneratorConfig",
    "LLMGeneratorConfig",
    "NoGeneratorConfig",
    "extract_answer",
    "pack_context",
]

DEFAULT_PROMPT = (
    "Answer the question using only the retrieved context. If the context does not contain "
    "the answer, say that you do not know. Answer in one or two sentences.\n\n"
    "{context}\n\nQuestion: {question}\nAnswer:"
)
_WORD = re.compile(r"\w+")
_STOP = frozenset(
    "a an and are as at be by can do does for from has have how i if in is it its of on or "
    "that the this to was what when where which who why will with you your".split()
)


class ContextOptions(ConfigModel):
    """How retrieved chunks become the prompt's context: at most ``top_k`` hits, packed in rank
    order into ``budget_tokens`` (cl100k); ``framing: untrusted`` wraps each chunk as untrusted
    data (tags, quoted lines, a system notice), ``none`` joins the raw texts."""

    budget_tokens: int = Field(1500, ge=0)
    top_k: int = Field(10, gt=0)
    framing: Literal["untrusted", "none"] = "untrusted"


def pack_context(chunks: Sequence[Chunk], options: ContextOptions) -> tuple[str, list[str]]:
    """The context text for ``chunks`` (in rank order) and the ids of the chunks it holds."""
    top = list(chunks)[: options.top_k]
    if options.framing == "untrusted":
        packed = assemble([(c, 0.0) for c in top], options.budget_tokens)
        return packed.text, list(packed.included)
    counter = token_counter("tokens", "cl100k")
    text, used = "", []
    for chunk in top:
        candidate = f"{text}\n\n{chunk.text}" if text else chunk.text
        if counter.count(candidate) <= options.budget_tokens:
            text = candidate
            used.append(chunk.id)
    return text, used


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def extract_answer(question: str, chunks: Sequence[Chunk], sentences: int = 1) -> str:
    """The ``sentences`` sentences of ``chunks`` sharing the most words with ``question``
    (ties: the earlier one), in their order in the context; empty without any chunk."""
    wanted = _words(question)
    found: list[tuple[int, int, str]] = []  # (-overlap, position, sentence)
    for chunk in chunks:
        for start, end in split_sentences(chunk.text):
            sentence = " ".join(chunk.text[start:end].split())
            if _WORD.search(sentence):  # a sentence with words (not a lone "." or a rule)
                found.append((-len(wanted & _words(sentence)), len(found), sentence))
    best = sorted(found)[:sentences]
    return " ".join(sentence for _, _, sentence in sorted(best, key=lambda f: f[1]))


def _selected(ranking: Timed, chunks: ChunkSet, row: int) -> list[Chunk]:
    by_id = chunks.by_id
    return [by_id[cid] for cid, _ in ranking.ranking.row(row) if cid in by_id]


class NoGeneratorConfig(StepConfig):
    """No answer: a retrieval-only trial."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage."""
        return None


class _GeneratorConfig(StepConfig):
    """What every answering kind shares: its context and one ``generate`` stage."""

    context: ContextOptions = Field(default_factory=ContextOptions)

    def wants(self, k: int) -> int:
        """The ranking gives at least the context's ``top_k`` hits."""
        return max(k, self.context.top_k)

    def answer(self, env: Env, questions: Sequence[str], contexts: list[list[Chunk]]) -> Answers:
        """One answer per question from its chunks (rank order)."""
        raise NotImplementedError

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """A ``generate`` stage over the final ranking; it becomes the plan's answers."""
        if upstream is None:
            raise ValueError(f"generator {self.kind!r} needs a ranking to answer from")

        def compute(env: Env, ranking: Timed, chunks: ChunkSet, questions: Sequence[str]) -> Any:
            contexts = [_selected(ranking, chunks, i) for i in range(len(questions))]
            return self.answer(env, questions, contexts)

        inputs = (upstream, g.result_chunks or g.chunks(), "queries")
        g.answers = g.add(
            "generate",
            "answers",
            inputs,
            (component_key(self),),
            compute,
            ANSWERS,
            latency="generate",
            config=self,
        )


class ExtractiveGeneratorConfig(_GeneratorConfig):
    """No model: the context's best-matching ``sentences`` sentence(s) answer."""

    kind: Literal["extractive"] = "extractive"
    sentences: int = Field(1, gt=0)

    def answer(self, env: Env, questions: Sequence[str], contexts: list[list[Chunk]]) -> Answers:
        """Per question: pack the context as an LLM prompt would, then extract from it."""
        texts, used = [], []
        seconds = np.zeros(len(questions))
        for i, (question, chunks) in enumerate(zip(questions, contexts, strict=True)):
            started = time.perf_counter()
            _, ids = pack_context(chunks, self.context)
            kept = [c for c in chunks if c.id in set(ids)]
            texts.append(extract_answer(question, kept, self.sentences))
            seconds[i] = time.perf_counter() - started
            used.append(ids)
        return Answers(texts, used, seconds)


class LLMGeneratorConfig(_GeneratorConfig, LLMOptions):
    """An OpenAI-compatible chat model answers from the packed context; ``prompt`` is a
    template with ``{context}`` and ``{question}``."""

    kind: Literal["llm"] = "llm"
    prompt: str = DEFAULT_PROMPT

    @field_validator("prompt")
    @classmethod
    def _template(cls, value: str) -> str:
        return check_template(value, {"context", "question"})

    def answer(self, env: Env, questions: Sequence[str], contexts: list[list[Chunk]]) -> Answers:
        """One chat completion per question (``max_concurrency`` at a time, cached)."""
        client = env.llm(self, "generator")
        conversations, used = [], []
        system = "You answer questions about documents."
        if self.context.framing == "untrusted":
            system += " " + system_notice()
        for question, chunks in zip(questions, contexts, strict=True):
            text, ids = pack_context(chunks, self.context)
            user = self.prompt.format(context=text, question=" ".join(question.split()))
            conversations.append(
                [{"role": "system", "content": system}, {"role": "user", "content": user}]
            )
            used.append(ids)
        replies = client.chat_many(conversations)
        usage = QueryUsage(
            self.model,
            np.array([r.prompt_tokens for r in replies], dtype=np.int64),
            np.array([r.completion_tokens for r in replies], dtype=np.int64),
        )
        seconds = np.array([r.seconds for r in replies])
        return Answers([r.text.strip() for r in replies], used, seconds, usage)


for _config in (NoGeneratorConfig, ExtractiveGeneratorConfig, LLMGeneratorConfig):
    components("generator").register_config(_config)
