"""The values stages produce — chunk sets, vectors, indexes, timed rankings — and their codecs.

A codec writes an artifact into a cache directory and reads it back; the stage cache (and a
saved collection) stores each artifact in its own directory.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from ragbench.index.finetune import TunedModel
from ragbench.index.sparse import BM25Index
from ragbench.protocols import DenseStore
from ragbench.registry import ComponentConfig, components
from ragbench.text.chunk_table import ChunkTable
from ragbench.types import Chunk, Ranking

__all__ = [
    "ANSWERS",
    "BM25_INDEX",
    "CHUNKS",
    "MODEL",
    "QUERIES",
    "QUERY_VECTORS",
    "RANKING",
    "TEXTS",
    "VECTORS",
    "Answers",
    "ChunkSet",
    "Codec",
    "Queries",
    "QueryUsage",
    "QueryVectors",
    "Timed",
    "dense_index_codec",
    "query_texts",
]


@dataclass(frozen=True)
class Codec:
    """How an artifact is written into, and read back from, a directory."""

    save: Callable[[Any, Path], None]
    load: Callable[[Path], Any]


@dataclass(frozen=True, eq=False)
class ChunkSet:
    """The chunks of a corpus under one chunker, with the lookups stages need."""

    chunks: Sequence[Chunk]

    def __len__(self) -> int:
        return len(self.chunks)

    @cached_property
    def table(self) -> ChunkTable:
        """Offsets table (for document projection and span metrics)."""
        return ChunkTable.from_chunks(self.chunks)

    @cached_property
    def texts(self) -> Mapping[str, str]:
        """Chunk id → text."""
        return {c.id: c.text for c in self.chunks}

    @cached_property
    def by_id(self) -> Mapping[str, Chunk]:
        """Chunk id → chunk."""
        return {c.id: c for c in self.chunks}

    @property
    def ids(self) -> list[str]:
        """Chunk ids, in order."""
        return [c.id for c in self.chunks]

    @property
    def metadata(self) -> list[Mapping[str, Any]]:
        """Chunk metadata, in order."""
        return [c.metadata for c in self.chunks]

    def extended(self, batch: ChunkSet, number: int) -> ChunkSet:
        """This set with the chunks of ``batch`` (batch ``number`` of an ingest) after its own."""
        return ChunkSet([*self.chunks, *batch.chunks])

    def removing(self, doc_ids: Collection[str]) -> tuple[ChunkSet, list[str]]:
        """This set without the chunks of ``doc_ids``, and their ids (in order)."""
        gone = set(doc_ids)
        removed = [c.id for c in self.chunks if c.doc_id in gone]
        if not removed:
            return self, removed
        return ChunkSet([c for c in self.chunks if c.doc_id not in gone]), removed


@dataclass
class QueryUsage:
    """LLM tokens a stage spent per query, and the model that spent them (cost is computed
    from these with the run's price table, so prices never change what is cached)."""

    model: str
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray


@dataclass
class Timed:
    """A ranking with the seconds each query took in the stage that produced it, the LLM tokens
    it spent (stages that call a model), counters per query (``rounds`` of an agentic loop, ...)
    and a JSON trace per query (what a loop did, for drill-downs)."""

    ranking: Ranking
    seconds: np.ndarray
    usage: QueryUsage | None = None
    counters: dict[str, np.ndarray] | None = None
    traces: list[Any] | None = None


@dataclass
class Queries:
    """What retrievers search with after a query transform: one or more ``texts`` per query
    (``owner[i]`` is the query text ``i`` belongs to), optionally with weighted BM25 ``terms``
    per text (pseudo-relevance feedback), the transform's seconds per query and its tokens."""

    texts: list[str]
    owner: np.ndarray
    seconds: np.ndarray
    terms: list[dict[str, float]] | None = None
    usage: QueryUsage | None = None
    notes: list[list[str]] | None = None  # per query: what the transform wrote (drill-down)


def query_texts(value: Sequence[str] | Queries) -> list[str]:
    """The texts to search with: a transform's, or the queries as given."""
    return list(value.texts) if isinstance(value, Queries) else list(value)


@dataclass
class Answers:
    """A generator's answer per query, the chunk ids its prompt held, its seconds per query and
    the tokens it spent."""

    texts: list[str]
    used: list[list[str]]
    seconds: np.ndarray
    usage: QueryUsage | None = None


@dataclass
class QueryVectors:
    """Query vectors with the seconds each query took to embed."""

    vectors: np.ndarray
    seconds: np.ndarray


def _save_chunks(chunks: ChunkSet, path: Path) -> None:
    items = chunks.chunks
    frame = pd.DataFrame(
        {
            "id": [c.id for c in items],
            "doc_id": [c.doc_id for c in items],
            "index": np.array([c.index for c in items], dtype=np.int64),
            "start": np.array([c.start for c in items], dtype=np.int64),
            "end": np.array([c.end for c in items], dtype=np.int64),
            "text": [c.text for c in items],
            "metadata": [json.dumps(c.metadata, ensure_ascii=False) for c in items],
        }
    )
    frame.to_parquet(path / "chunks.parquet", index=False)


def _load_chunks(path: Path) -> ChunkSet:
    frame = pd.read_parquet(path / "chunks.parquet")
    return ChunkSet(
        [
            Chunk(i, d, int(n), int(s), int(e), t, json.loads(m))
            for i, d, n, s, e, t, m in zip(
                frame["id"],
                frame["doc_id"],
                frame["index"],
                frame["start"],
                frame["end"],
                frame["text"],
                frame["metadata"],
                strict=True,
            )
        ]
    )


def _usage_arrays(usage: QueryUsage | None) -> dict[str, Any]:
    if usage is None:
        return {}
    return {
        "usage_model": np.array(usage.model),
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
    }


def _usage_of(data: Any) -> QueryUsage | None:
    if "usage_model" not in data:
        return None
    return QueryUsage(str(data["usage_model"]), data["prompt_tokens"], data["completion_tokens"])


def _save_ranking(timed: Timed, path: Path) -> None:
    """``ranking.npz``: ids as codes into their distinct names (an id recurs across queries,
    and fixed-width text per cell made a ranking ~7 MB), scores, seconds, counters."""
    counters: dict[str, Any] = {f"counter_{n}": v for n, v in (timed.counters or {}).items()}
    ids = timed.ranking.ids
    codes, names = pd.factorize(ids.ravel(), sort=False)
    np.savez(
        path / "ranking.npz",
        names=np.asarray(names, dtype=str),
        codes=codes.astype(np.int32).reshape(ids.shape),
        scores=timed.ranking.scores,
        seconds=timed.seconds,
        **_usage_arrays(timed.usage),
        **counters,
    )
    if timed.traces is not None:
        text = json.dumps(timed.traces, ensure_ascii=False)
        (path / "traces.json").write_text(text, "utf-8")


def _load_ranking(path: Path) -> Timed:
    data = np.load(path / "ranking.npz")
    if "codes" in data.files:
        ids = data["names"].astype(object)[data["codes"]]
    else:  # written before ids were coded
        ids = data["ids"].astype(object)
    ranking = Ranking(ids, data["scores"])
    counters = {k.removeprefix("counter_"): data[k] for k in data.files if k.startswith("counter_")}
    traces = path / "traces.json"
    return Timed(
        ranking,
        data["seconds"],
        _usage_of(data),
        counters or None,
        json.loads(traces.read_text("utf-8")) if traces.is_file() else None,
    )


def _save_answers(answers: Answers, path: Path) -> None:
    (path / "answers.json").write_text(
        json.dumps({"texts": answers.texts, "used": answers.used}, ensure_ascii=False), "utf-8"
    )
    np.savez(path / "answers.npz", seconds=answers.seconds, **_usage_arrays(answers.usage))


def _load_answers(path: Path) -> Answers:
    payload = json.loads((path / "answers.json").read_text("utf-8"))
    data = np.load(path / "answers.npz")
    return Answers(payload["texts"], payload["used"], data["seconds"], _usage_of(data))


def _save_query_vectors(value: QueryVectors, path: Path) -> None:
    np.savez(path / "queries.npz", vectors=value.vectors, seconds=value.seconds)


def _load_query_vectors(path: Path) -> QueryVectors:
    data = np.load(path / "queries.npz")
    return QueryVectors(data["vectors"], data["seconds"])


def _save_texts(texts: Sequence[str], path: Path) -> None:
    (path / "texts.json").write_text(json.dumps(list(texts)), "utf-8")


def _load_texts(path: Path) -> list[str]:
    texts: list[str] = json.loads((path / "texts.json").read_text("utf-8"))
    return texts


CHUNKS = Codec(_save_chunks, _load_chunks)
VECTORS = Codec(
    lambda v, p: np.save(p / "vectors.npy", v),
    lambda p: np.load(p / "vectors.npy", mmap_mode="r"),
)
RANKING = Codec(_save_ranking, _load_ranking)
ANSWERS = Codec(_save_answers, _load_answers)
QUERY_VECTORS = Codec(_save_query_vectors, _load_query_vectors)


def _save_queries(value: Queries, path: Path) -> None:
    payload = {"texts": value.texts, "terms": value.terms, "notes": value.notes}
    (path / "queries.json").write_text(json.dumps(payload, ensure_ascii=False), "utf-8")
    np.savez(
        path / "queries.npz", owner=value.owner, seconds=value.seconds, **_usage_arrays(value.usage)
    )


def _load_queries(path: Path) -> Queries:
    payload = json.loads((path / "queries.json").read_text("utf-8"))
    data = np.load(path / "queries.npz")
    return Queries(
        payload["texts"],
        data["owner"],
        data["seconds"],
        payload["terms"],
        _usage_of(data),
        payload["notes"],
    )


QUERIES = Codec(_save_queries, _load_queries)
TEXTS = Codec(_save_texts, _load_texts)
BM25_INDEX = Codec(lambda i, p: i.save(p / "index"), lambda p: BM25Index.load(p / "index"))


def _save_model(model: TunedModel, path: Path) -> None:
    shutil.copytree(model.path, path / "model")


MODEL = Codec(_save_model, lambda p: TunedModel(p / "model"))
"""A trained model directory, read in place from the cache."""


def dense_index_codec(store: ComponentConfig) -> Codec:
    """The codec of a dense store of ``store``'s kind (the registered class's ``load``)."""
    cls = cast("type[DenseStore]", components("dense").factory(store.kind))
    return Codec(lambda s, p: s.save(p / "index"), lambda p: cls.load(p / "index"))
