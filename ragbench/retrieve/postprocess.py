"""Post-retrieval steps — the ``postprocess`` axis: what happens to the final ranking before it
is returned (and scored).

- ``none``: the ranking as it is.
- ``threshold``: drop hits below ``value`` on a declared ``scale``: ``absolute`` (the raw
  score), ``relative`` (within ``1 - value`` of the top score's magnitude: for a positive top
  score, at least ``value`` × it), ``minmax`` (the score min-max
  normalised over the query's hits) or ``top_p`` (the fewest top hits whose min-max normalised
  scores hold a share ``value`` of the query's total). The raw scale of RRF scores (~0.01–0.03)
  is not that of a cosine or a cross-encoder, so the scale is always explicit. A query may keep
  no hit at all; every metric handles that.
- ``window``: each hit is replaced by its sentence window — the ``sentence_window`` chunker's
  stored window, or ``sentences`` sentences on each side of any other chunk — so span metrics
  score the text an LLM would be shown.
- ``neighbors``: each hit is followed by its ``before`` / ``after`` neighbouring chunks of the
  same document (not already ranked), within the same depth.
- ``dedup``: a hit whose text (whitespace-normalised) equals an earlier hit's is dropped.
- ``assemble``: hits are kept in rank order while their texts fit ``budget_tokens`` (cl100k);
  score the result with ``recall@Ntok`` and the span metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from ragbench.registry import components
from ragbench.retrieve.artifacts import CHUNKS, RANKING, ChunkSet, Timed
from ragbench.retrieve.graph import Env, PlanBuilder, StepConfig, component_key
from ragbench.text.sentences import split_sentences
from ragbench.text.tokenize import token_counter
from ragbench.types import Chunk, Document, Ranking

__all__ = [
    "AssembleConfig",
    "DedupConfig",
    "NeighborsConfig",
    "NoPostprocessConfig",
    "ThresholdConfig",
    "WindowConfig",
    "apply_threshold",
]

Hits = list[tuple[str, float]]


class NoPostprocessConfig(StepConfig):
    """Return the ranking as it is."""

    kind: Literal["none"] = "none"

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> None:
        """No stage."""
        return None


def apply_threshold(ranking: Ranking, threshold: float | None) -> Ranking:
    """Pad away hits scoring below ``threshold`` (None keeps everything)."""
    if threshold is None:
        return ranking
    drop = ranking.scores < threshold
    return Ranking(np.where(drop, "", ranking.ids), np.where(drop, -np.inf, ranking.scores))


def _per_query(ranking: Timed, k: int, step: Callable[[int, Hits], Hits]) -> Timed:
    """Apply ``step(row, hits)`` to each query's hits, timed per query."""
    found = []
    seconds = np.zeros(len(ranking.ranking.ids))
    for row in range(len(ranking.ranking.ids)):
        started = time.perf_counter()
        found.append(step(row, ranking.ranking.row(row))[:k])
        seconds[row] = time.perf_counter() - started
    return Timed(Ranking.from_rows(found, k), seconds)


class _PostprocessConfig(StepConfig):
    """One stage over the final ranking and the chunks it refers to."""

    def process(self, chunks: ChunkSet, row: int, hits: Hits) -> Hits:
        """The new hits of one query."""
        raise NotImplementedError

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """A ``postprocess`` stage."""
        if upstream is None:
            raise ValueError(f"postprocess {self.kind!r} needs a ranking")

        def compute(env: Env, ranking: Timed, chunks: ChunkSet) -> Timed:
            return _per_query(ranking, k, lambda row, hits: self.process(chunks, row, hits))

        inputs = (upstream, g.result_chunks or g.chunks())
        parts = (component_key(self), k)
        return g.add(
            "postprocess", "postprocess", inputs, parts, compute, RANKING, latency="postprocess"
        )


class ThresholdConfig(_PostprocessConfig):
    """Keep hits reaching ``value`` on ``scale`` (see the module)."""

    kind: Literal["threshold"] = "threshold"
    scale: Literal["absolute", "relative", "minmax", "top_p"]
    value: float

    def process(self, chunks: ChunkSet, row: int, hits: Hits) -> Hits:
        """The hits that pass."""
        if not hits:
            return hits
        scores = np.array([s for _, s in hits], dtype=np.float64)
        if self.scale == "absolute":
            keep = scores >= self.value
        elif self.scale == "relative":  # within (1 - value) of the top score's magnitude
            keep = scores >= scores[0] - (1 - self.value) * abs(scores[0])
        else:
            spread = scores.max() - scores.min()
            norm = (scores - scores.min()) / spread if spread > 0 else np.ones(len(scores))
            if self.scale == "minmax":
                keep = norm >= self.value
            else:
                share = np.cumsum(norm) / norm.sum()
                keep = np.concatenate([[True], share[:-1] < self.value])
        return [hit for hit, kept in zip(hits, keep, strict=True) if kept]


class DedupConfig(_PostprocessConfig):
    """Drop hits whose text repeats an earlier hit's (e.g. the same page in two documents)."""

    kind: Literal["dedup"] = "dedup"

    def process(self, chunks: ChunkSet, row: int, hits: Hits) -> Hits:
        """The first hit of each distinct text."""
        seen: set[str] = set()
        kept = []
        for cid, score in hits:
            text = " ".join(chunks.texts[cid].split())
            if text not in seen:
                seen.add(text)
                kept.append((cid, score))
        return kept


class AssembleConfig(_PostprocessConfig):
    """Hits in rank order while their texts fit ``budget_tokens`` cl100k tokens."""

    kind: Literal["assemble"] = "assemble"
    budget_tokens: int = Field(1000, gt=0)

    def process(self, chunks: ChunkSet, row: int, hits: Hits) -> Hits:
        """The hits that fit (a hit too long for what is left is skipped, not a stop)."""
        counter = token_counter("tokens", "cl100k")
        left, kept = self.budget_tokens, []
        for cid, score in hits:
            tokens = counter.count(chunks.texts[cid])
            if tokens <= left:
                kept.append((cid, score))
                left -= tokens
        return kept


class NeighborsConfig(_PostprocessConfig):
    """Each hit followed by its ``before`` and ``after`` neighbouring chunks."""

    kind: Literal["neighbors"] = "neighbors"
    before: int = Field(1, ge=0)
    after: int = Field(1, ge=0)

    def process(self, chunks: ChunkSet, row: int, hits: Hits) -> Hits:
        """Hits and their neighbours, each neighbour scored just below its hit."""
        table = chunks.table
        position = {cid: i for i, cid in enumerate(chunks.ids)}
        taken = {cid for cid, _ in hits}
        found: Hits = []
        for cid, score in hits:
            found.append((cid, score))
            siblings = list(table.ids[table.doc_rows(chunks.by_id[cid].doc_id)])
            siblings.sort(key=lambda c: position[c])
            at = siblings.index(cid)
            near = siblings[max(0, at - self.before) : at] + siblings[at + 1 : at + 1 + self.after]
            for offset, neighbour in enumerate(near, start=1):
                if neighbour not in taken:
                    taken.add(neighbour)
                    found.append((str(neighbour), score - 1e-9 * offset))
        return found


class WindowConfig(StepConfig):
    """Each hit replaced by its sentence window (``sentences`` on each side when the chunk
    carries none)."""

    kind: Literal["window"] = "window"
    sentences: int = Field(2, ge=0)

    def plan(self, g: PlanBuilder, upstream: str | None, k: int) -> str:
        """A ``windows`` chunk set (once per chunking) and a stage mapping hits onto it."""
        if upstream is None:
            raise ValueError("postprocess 'window' needs a ranking")
        sentences = self.sentences

        def windows(env: Env, chunks: ChunkSet, corpus: Sequence[Document]) -> ChunkSet:
            texts = {d.id: d.text for d in corpus}
            split: dict[str, list[tuple[int, int]]] = {}  # each document split once

            def bounds(doc_id: str) -> list[tuple[int, int]]:
                if doc_id not in split:
                    split[doc_id] = split_sentences(texts[doc_id])
                return split[doc_id]

            return ChunkSet([_window(c, texts[c.doc_id], bounds, sentences) for c in chunks.chunks])

        chunks = g.chunks()
        parts = (component_key(self),)
        window_set = g.add(
            "windows", "windows", (chunks, "corpus"), parts, windows, CHUNKS, index=True
        )

        def compute(env: Env, ranking: Timed) -> Timed:
            return _per_query(ranking, k, lambda row, hits: [(f"{c}#window", s) for c, s in hits])

        g.result_chunks = window_set
        return g.add(
            "window",
            "postprocess",
            (upstream,),
            (component_key(self), k),
            compute,
            RANKING,
            latency="postprocess",
        )


def _window(
    chunk: Chunk, text: str, split: Callable[[str], list[tuple[int, int]]], sentences: int
) -> Chunk:
    """The window chunk of ``chunk``: its stored window, else whole sentences around it
    (``split(doc_id)``: the sentence bounds of its document)."""
    meta = chunk.metadata
    if "window_start" in meta and "window_end" in meta:
        start, end = int(meta["window_start"]), int(meta["window_end"])
    else:
        bounds = split(chunk.doc_id)
        inside = [i for i, (a, b) in enumerate(bounds) if a < chunk.end and b > chunk.start]
        if inside:
            first = max(0, inside[0] - sentences)
            last = min(len(bounds) - 1, inside[-1] + sentences)
            start, end = min(bounds[first][0], chunk.start), max(bounds[last][1], chunk.end)
        else:
            start, end = chunk.start, chunk.end
    return Chunk(
        f"{chunk.id}#window",
        chunk.doc_id,
        chunk.index,
        start,
        end,
        text[start:end],
        {**meta, "window_of": chunk.id},
    )


for _config in (
    NoPostprocessConfig,
    ThresholdConfig,
    WindowConfig,
    NeighborsConfig,
    DedupConfig,
    AssembleConfig,
):
    components("postprocess").register_config(_config)
