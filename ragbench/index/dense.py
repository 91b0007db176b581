"""Dense vector stores: ``exact`` (float32 matrix, dot product) and ``hnsw`` (hnswlib graph);
``lancedb`` (a LanceDB table) lives in ``ragbench.index.lancedb_store`` and shares the helpers here.

Both map string chunk ids to vectors with optional metadata, replace a vector when its id is
added again, ignore deletes of unknown ids, filter by exact match on every key of a metadata
dict, and save to plain files (``.npy`` / hnswlib's own format plus JSON; no pickle).

Scores are always "higher is better": cosine / inner-product similarity, or the negative
squared L2 distance (hnswlib's ``l2``) for ``hnsw`` with ``space="l2"``. Exact results are
ordered by score descending, then id ascending, also across the k-th place, so ties never
depend on insertion order; hnsw results keep hnswlib's (approximate) order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from ragbench.errors import ConfigError, DataError
from ragbench.index.filters import MetadataTable
from ragbench.registry import ComponentConfig, components
from ragbench.types import Ranking

if TYPE_CHECKING:
    import hnswlib

__all__ = ["ExactConfig", "ExactStore", "HnswConfig", "HnswStore", "similarity"]

# Scores per query chunk (float32 scores + int64 argpartition indices: about 48 MB).
_SCORE_BUDGET = 4 * 1024 * 1024
# A filter matching at most this many items is answered by exact search over them.
_BRUTE_FORCE_LIMIT = 4096

Metadata = Sequence[Mapping[str, Any]] | None


_SIMILARITIES = {
    "cosine": "cosine similarity (-1 to 1)",
    "ip": "inner product of the embeddings",
    "l2": "negative squared L2 distance (0 is identical)",
}


def similarity(metric: str) -> str:
    """What a store's scores under ``metric`` (its distance or similarity) mean."""
    return _SIMILARITIES.get(metric, f"{metric} similarity")


class ExactConfig(ComponentConfig):
    """Exhaustive search over a float32 matrix."""

    kind: Literal["exact"] = "exact"
    metric: Literal["cosine", "ip"] = "cosine"

    def score_scale(self) -> str:
        """The similarity of its ``metric``."""
        return similarity(self.metric)


class HnswConfig(ComponentConfig):
    """Approximate search over an hnswlib graph; M, ef_construction and ef_search trade recall
    for speed and memory.

    ``threads`` inserts vectors with that many threads: faster, but the graph then depends on
    thread scheduling, so two builds may differ. The default, 1, keeps every build of the same
    vectors identical; it is left out of the config's serialised form (hence of cache keys and
    trial ids), which are those of a config from before the option existed.
    """

    kind: Literal["hnsw"] = "hnsw"
    space: Literal["cosine", "ip", "l2"] = "cosine"
    M: int = Field(16, ge=2)
    ef_construction: int = Field(200, ge=1)
    ef_search: int = Field(100, ge=1)
    seed: int = Field(100, ge=0)
    threads: int = Field(1, ge=1)

    def score_scale(self) -> str:
        """The similarity of its ``space``."""
        return similarity(self.space)

    @model_serializer(mode="wrap")
    def _omit_default_threads(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.threads == 1:
            data.pop("threads", None)
        return data


# --------------------------------------------------------------------------- shared helpers


def _as_matrix(vectors: np.ndarray, dimension: int | None) -> np.ndarray:
    """``vectors`` as a C-contiguous float32 (n, d) array, checked against ``dimension``."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise DataError(f"expected vectors of shape (n, d) or (d,), got shape {arr.shape}")
    if dimension is not None and arr.shape[1] != dimension:
        raise DataError(f"vector dimension {arr.shape[1]} does not match the store's {dimension}")
    return np.ascontiguousarray(arr)


def _check_batch(ids: Sequence[str], vectors: np.ndarray, metadata: Metadata) -> None:
    if len(vectors) != len(ids):
        raise DataError(f"got {len(ids)} ids but {len(vectors)} vectors")
    if metadata is not None and len(metadata) != len(ids):
        raise DataError(f"got {len(ids)} ids but {len(metadata)} metadata entries")


def _last_occurrence(ids: Sequence[str]) -> list[int]:
    """Positions of the last occurrence of each distinct id (a repeated id: the last one wins)."""
    return list({id_: i for i, id_ in enumerate(ids)}.values())


def _normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero)."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, np.finfo(np.float32).tiny)


def _id_ranks(ids: np.ndarray) -> np.ndarray:
    """Rank of each id in ascending string order, for tie-breaking by id."""
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    return ranks


def _top_k(scores: np.ndarray, k: int, id_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column positions and scores of the ``k`` best of each row: score desc, then id asc.

    ``argpartition`` selects the k best; rows where the k-th score is tied with columns left
    out are redone exactly, so the result does not depend on the partition's arbitrary order.
    """
    n = scores.shape[1]
    if k < n:
        cols = np.argpartition(scores, n - k, axis=1)[:, n - k :]
        top = np.take_along_axis(scores, cols, axis=1)
        kth = top.min(axis=1)
        for r in np.flatnonzero((scores >= kth[:, None]).sum(axis=1) > k):
            cand = np.flatnonzero(scores[r] >= kth[r])
            cols[r] = cand[np.lexsort((id_rank[cand], -scores[r, cand]))[:k]]
            top[r] = scores[r, cols[r]]
    else:
        cols = np.broadcast_to(np.arange(n), scores.shape).copy()
        top = scores
    order = np.lexsort((id_rank[cols], -top), axis=1)
    return np.take_along_axis(cols, order, axis=1), np.take_along_axis(top, order, axis=1)


def _ranking(ids: np.ndarray, scores: np.ndarray, k: int) -> Ranking:
    """Pad (n, m) ids/scores with m <= k to the (n, k) shape of a :class:`Ranking`."""
    n, m = ids.shape
    out_ids = np.full((n, k), "", dtype=object)
    out_scores = np.full((n, k), -np.inf, dtype=np.float64)
    out_ids[:, :m] = ids
    out_scores[:, :m] = scores
    return Ranking(out_ids, out_scores)


def _no_hits(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Empty (n, 0) ids and scores, for a search with nothing to return."""
    return np.empty((n, 0), dtype=object), np.empty((n, 0))


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def _write_json(path: Path, payload: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")


def _read_state(path: Path | str) -> tuple[Path, dict[str, Any]]:
    """The folder ``path`` of a saved store and its ``store.json``."""
    directory = Path(path)
    return directory, json.loads((directory / "store.json").read_text(encoding="utf-8"))


class _Store:
    """What the dense stores share: a batch checked and cut to the last vector of each id,
    query vectors checked, and the ``store.json`` of a save (config, dimension, ids,
    metadata)."""

    config: ComponentConfig

    @property
    def dimension(self) -> int | None:
        """Vector dimension, or None before the first add."""
        raise NotImplementedError

    def count(self) -> int:
        """Number of stored vectors."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.count()

    def _batch(
        self, ids: Sequence[str], vectors: np.ndarray, metadata: Metadata
    ) -> tuple[np.ndarray, list[int]]:
        """``vectors`` as a checked matrix and the positions to store (the last of each id)."""
        matrix = _as_matrix(vectors, self.dimension)
        _check_batch(ids, matrix, metadata)
        return matrix, _last_occurrence(ids)

    def _queries(self, vectors: np.ndarray, k: int, unit: bool = False) -> np.ndarray:
        """``vectors`` as a checked matrix of query vectors, rows of unit length with ``unit``
        (``k`` checked too)."""
        _check_k(k)
        queries = _as_matrix(vectors, self.dimension)
        return _normalize(queries) if unit else queries

    def _write_state(self, directory: Path, ids: list[str], **extra: Any) -> None:
        """``store.json`` in ``directory``: config, dimension, ``ids`` and ``extra`` (the
        metadata, as the store keeps it)."""
        _write_json(
            directory / "store.json",
            {
                "config": self.config.model_dump(mode="json"),
                "dimension": self.dimension,
                "ids": ids,
                **extra,
            },
        )


def _saved_metadata(state: Mapping[str, Any], rows: Sequence[int]) -> MetadataTable:
    """The metadata of a ``store.json``: its columns, or (written by an older version) one
    dict per row in a list, or by hnsw label in a dict (``rows``: the labels in use)."""
    if "metadata_columns" in state:
        return MetadataTable.from_json(state["metadata_columns"])
    saved = state["metadata"]
    if isinstance(saved, list):
        return MetadataTable.of(saved)
    table = MetadataTable()
    table.set(list(rows), [saved.get(str(row), {}) for row in rows])
    return table


# --------------------------------------------------------------------------- exact


class ExactStore(_Store):
    """Exhaustive dot-product search over a float32 matrix (rows unit-normalised for cosine).

    The matrix grows by doubling; a delete moves the last row into the hole. Queries are scored
    in chunks with one matmul each, and the top k are picked with ``argpartition``.
    """

    config: ExactConfig

    def __init__(self, config: ExactConfig | None = None) -> None:
        self.config = config or ExactConfig()
        self._matrix = np.zeros((0, 0), dtype=np.float32)
        self._ids = np.empty(0, dtype=object)
        self._meta = MetadataTable()  # by row
        self._row: dict[str, int] = {}
        self._ranks: np.ndarray | None = None

    @property
    def dimension(self) -> int | None:
        """Vector dimension, or None before the first add."""
        return self._matrix.shape[1] if self._matrix.shape[1] else None

    def count(self) -> int:
        """Number of stored vectors."""
        return len(self._row)

    def add(self, ids: Sequence[str], vectors: np.ndarray, metadata: Metadata = None) -> None:
        """Store vectors under ``ids``; an id already present is replaced."""
        matrix, keep = self._batch(ids, vectors, metadata)
        if self.config.metric == "cosine":
            matrix = _normalize(matrix)
        self._reserve(self.count() + len(keep), matrix.shape[1])
        rows = []
        for i in keep:
            row = self._row.get(ids[i])
            if row is None:
                row = self._row[ids[i]] = len(self._row)
                self._ids[row] = ids[i]
            self._matrix[row] = matrix[i]
            rows.append(row)
        self._meta.set(rows, [{} if metadata is None else metadata[i] for i in keep])
        self._ranks = None

    def _reserve(self, rows: int, dim: int) -> None:
        """Grow the matrix (and id array) to hold ``rows`` rows, doubling the capacity."""
        capacity = len(self._matrix)
        if rows <= capacity and self._matrix.shape[1] == dim:
            return
        n, new_capacity = self.count(), max(rows, 2 * capacity, 16)
        matrix = np.zeros((new_capacity, dim), dtype=np.float32)
        ids = np.full(new_capacity, "", dtype=object)
        if n:
            matrix[:n] = self._matrix[:n]
            ids[:n] = self._ids[:n]
        self._matrix, self._ids = matrix, ids

    def delete(self, ids: Sequence[str]) -> None:
        """Remove ``ids`` (unknown ids are ignored)."""
        for id_ in ids:
            row = self._row.pop(id_, None)
            if row is None:
                continue
            last = self.count()  # the row of the last vector, its id popped above
            if row != last:
                moved = self._ids[last]
                self._matrix[row] = self._matrix[last]
                self._ids[row] = moved
                self._meta.move(last, row)
                self._row[moved] = row
            self._ids[last] = ""
            self._meta.truncate(last)
        self._ranks = None

    def search(
        self, vectors: np.ndarray, k: int, filter: Mapping[str, Any] | None = None
    ) -> Ranking:
        """Top-``k`` ids and scores for each query vector (a (d,) vector is one query)."""
        queries = self._queries(vectors, k, unit=self.config.metric == "cosine")
        rows = self._rows(filter)
        if len(rows) == 0 or len(queries) == 0:
            return _ranking(*_no_hits(len(queries)), k)
        n = self.count()
        full = len(rows) == n
        matrix = self._matrix[:n] if full else self._matrix[rows]
        ranks = self._id_ranks() if full else self._id_ranks()[rows]
        kk = min(k, len(rows))
        step = max(1, _SCORE_BUDGET // len(rows))
        out_cols, out_scores = [], []
        for start in range(0, len(queries), step):
            scores = queries[start : start + step] @ matrix.T
            cols, top = _top_k(scores, kk, ranks)
            out_cols.append(cols)
            out_scores.append(top)
        cols = np.concatenate(out_cols)
        found = self._ids[cols] if full else self._ids[rows[cols]]
        return _ranking(found, np.concatenate(out_scores), k)

    def _rows(self, filter: Mapping[str, Any] | None) -> np.ndarray:
        """Row positions passing ``filter`` (all rows without one)."""
        if not filter:
            return np.arange(self.count())
        return np.flatnonzero(self._meta.rows(filter))

    def _id_ranks(self) -> np.ndarray:
        if self._ranks is None:
            self._ranks = _id_ranks(self._ids[: self.count()])
        return self._ranks

    def save(self, path: Path | str) -> None:
        """Write ``vectors.npy`` and ``store.json`` (config, ids, metadata) into ``path``."""
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        n = self.count()
        np.save(directory / "vectors.npy", self._matrix[:n], allow_pickle=False)
        self._write_state(directory, self._ids[:n].tolist(), metadata_columns=self._meta.to_json())

    @classmethod
    def load(cls, path: Path | str) -> ExactStore:
        """Read a store written by :meth:`save`."""
        directory, state = _read_state(path)
        store = cls(ExactConfig.model_validate(state["config"]))
        matrix = np.load(directory / "vectors.npy", allow_pickle=False)
        if state["dimension"] is not None:
            store._reserve(len(matrix), state["dimension"])
            store._matrix[: len(matrix)] = matrix
            store._ids[: len(matrix)] = state["ids"]
        store._meta = _saved_metadata(state, range(len(state["ids"])))
        store._row = {id_: i for i, id_ in enumerate(state["ids"])}
        return store


# --------------------------------------------------------------------------- hnsw


def _hnswlib() -> Any:
    """The ``hnswlib`` module, or a one-line error saying how to install it: PyPI has it as
    source only, so the lean install (``pip install ragbench``) leaves it out."""
    try:
        import hnswlib
    except ImportError:
        raise ConfigError(
            "store.kind: hnsw needs the hnswlib package, which compiles from source (about "
            "30 s): pip install 'ragbench[hnsw]'; or use store: {kind: exact}"
        ) from None
    return hnswlib


class HnswStore(_Store):
    """Approximate nearest-neighbour search with hnswlib.

    Each id owns an integer hnswlib label; a deleted id's label is marked deleted and reused by
    the next new id, so the graph never holds more labels than the most items ever stored at
    once. Capacity grows by doubling (``resize_index``). Filters matching at most 4096 items,
    and searches where the graph cannot deliver k results (hnswlib raises), are answered exactly
    from the stored vectors, so k results come back whenever at least k items match. Vectors
    are inserted with the config's seed by one thread, so a build is reproducible, unless
    ``threads`` > 1 (faster builds whose graph, hence results, may differ from build to build).
    """

    config: HnswConfig

    def __init__(self, config: HnswConfig | None = None) -> None:
        self.config = config or HnswConfig()
        _hnswlib()  # a missing package fails here, before any work
        self._index: hnswlib.Index | None = None
        self._ids = np.empty(0, dtype=object)  # id by label; "" for free labels
        self._next = 0  # labels [0, _next) have been used
        self._free: list[int] = []
        self._meta = MetadataTable()  # by label
        self._label: dict[str, int] = {}

    @property
    def dimension(self) -> int | None:
        """Vector dimension, or None before the first add."""
        return None if self._index is None else self._index.dim

    def count(self) -> int:
        """Number of stored vectors."""
        return len(self._label)

    def add(self, ids: Sequence[str], vectors: np.ndarray, metadata: Metadata = None) -> None:
        """Store vectors under ``ids``; an id already present is replaced."""
        matrix, keep = self._batch(ids, vectors, metadata)
        new = sum(ids[i] not in self._label for i in keep)
        index = self._reserve(matrix.shape[1], self._next + max(0, new - len(self._free)))
        labels = [self._assign_label(ids[i]) for i in keep]
        self._meta.set(labels, [{} if metadata is None else metadata[i] for i in keep])
        if labels:  # with one thread, every build of the same vectors is the same graph
            found = np.asarray(labels, dtype=np.int64)
            index.add_items(matrix[keep], found, num_threads=self.config.threads)

    def _reserve(self, dim: int, labels: int) -> hnswlib.Index:
        """The hnswlib index (created on first use) with room for ``labels`` labels."""
        cfg = self.config
        if self._index is None:
            self._index = _hnswlib().Index(space=cfg.space, dim=dim)
            self._index.init_index(
                max_elements=max(labels, 16),
                M=cfg.M,
                ef_construction=cfg.ef_construction,
                random_seed=cfg.seed,
            )
        capacity = self._index.get_max_elements()
        if labels > capacity:
            capacity = max(labels, 2 * capacity)
            self._index.resize_index(capacity)
        if len(self._ids) < capacity:
            ids = np.full(capacity, "", dtype=object)
            ids[: len(self._ids)] = self._ids
            self._ids = ids
        return self._index

    def _assign_label(self, id_: str) -> int:
        """The label of ``id_``: its own, a freed one, or the next unused one."""
        label = self._label.get(id_)
        if label is None:
            if self._free:
                label = self._free.pop()
            else:
                label, self._next = self._next, self._next + 1
            self._label[id_] = label
            self._ids[label] = id_
        return label

    def delete(self, ids: Sequence[str]) -> None:
        """Remove ``ids`` (unknown ids are ignored)."""
        freed = []
        for id_ in ids:
            label = self._label.pop(id_, None)
            if label is None:
                continue
            assert self._index is not None  # an id is known only after the index exists
            self._index.mark_deleted(label)
            self._ids[label] = ""
            freed.append(label)
            self._free.append(label)
        self._meta.clear(freed)

    def search(
        self, vectors: np.ndarray, k: int, filter: Mapping[str, Any] | None = None
    ) -> Ranking:
        """Approximate top-``k`` ids and scores for each query vector."""
        queries = self._queries(vectors, k)
        allowed = self._allowed(filter)
        kk = min(k, self.count() if allowed is None else len(allowed))
        if kk == 0 or len(queries) == 0:
            return _ranking(*_no_hits(len(queries)), k)
        if allowed is not None and len(allowed) <= _BRUTE_FORCE_LIMIT:
            labels, scores = self._exact(queries, kk, np.fromiter(allowed, dtype=np.int64))
        else:
            labels, scores = self._approximate(queries, kk, allowed)
        return _ranking(self._ids[labels], scores, k)

    def _allowed(self, filter: Mapping[str, Any] | None) -> set[int] | None:
        """Labels passing ``filter``, or None when there is no filter."""
        if not filter:
            return None
        passed = np.flatnonzero(self._meta.rows(filter)).tolist()
        return {label for label in passed if self._ids[label]}

    def _approximate(
        self, queries: np.ndarray, k: int, allowed: set[int] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """hnswlib search with ef = max(ef_search, k); exact search if the graph falls short."""
        assert self._index is not None  # callers check that the store is not empty
        self._index.set_ef(max(self.config.ef_search, k))
        try:
            if allowed is None:
                labels, distances = self._index.knn_query(queries, k=k)
            else:  # a Python filter runs under the GIL: threads would only contend
                labels, distances = self._index.knn_query(
                    queries, k=k, num_threads=1, filter=allowed.__contains__
                )
        except RuntimeError:  # fewer than k reachable, e.g. after many deletions
            pool = allowed if allowed is not None else self._label.values()
            return self._exact(queries, k, np.fromiter(pool, dtype=np.int64))
        distances = distances.astype(np.float64)
        scores = -distances if self.config.space == "l2" else 1.0 - distances
        return labels.astype(np.int64), scores

    def _exact(
        self, queries: np.ndarray, k: int, labels: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` labels and scores among ``labels``, from the stored vectors."""
        assert self._index is not None  # callers check that the store is not empty
        vectors = np.asarray(self._index.get_items(labels), dtype=np.float32)
        if self.config.space == "l2":
            cross = queries @ vectors.T
            scores = 2 * cross - (queries**2).sum(1)[:, None] - (vectors**2).sum(1)
        else:
            q = _normalize(queries) if self.config.space == "cosine" else queries
            scores = q @ vectors.T
        cols, top = _top_k(scores.astype(np.float64), k, _id_ranks(self._ids[labels]))
        return labels[cols], top

    def recall_against_exact(self, queries: np.ndarray, k: int) -> float:
        """Mean recall@k of the hnsw results against exact search over the same vectors."""
        queries = self._queries(queries, k)
        kk = min(k, self.count())
        if kk == 0 or len(queries) == 0:
            raise ValueError("recall needs a non-empty store and at least one query")
        approx, _ = self._approximate(queries, kk, None)
        exact, _ = self._exact(queries, kk, np.fromiter(self._label.values(), dtype=np.int64))
        hits = [len(set(a) & set(e)) for a, e in zip(approx.tolist(), exact.tolist(), strict=True)]
        return float(np.mean(hits)) / kk

    def save(self, path: Path | str) -> None:
        """Write hnswlib's ``index.bin`` and ``store.json`` (config, ids, metadata) to ``path``."""
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        if self._index is not None:
            self._index.save_index(str(directory / "index.bin"))
        self._write_state(
            directory,
            self._ids[: self._next].tolist(),
            metadata_columns=self._meta.to_json(),
            free=self._free,
        )

    @classmethod
    def load(cls, path: Path | str) -> HnswStore:
        """Read a store written by :meth:`save`."""
        directory, state = _read_state(path)
        store = cls(HnswConfig.model_validate(state["config"]))
        if state["dimension"] is not None:
            store._index = _hnswlib().Index(space=store.config.space, dim=state["dimension"])
            store._index.load_index(str(directory / "index.bin"))
        ids = state["ids"]
        store._ids = np.array(ids, dtype=object)
        store._next = len(ids)
        store._free = list(state["free"])
        store._label = {id_: label for label, id_ in enumerate(ids) if id_}
        store._meta = _saved_metadata(state, sorted(store._label.values()))
        return store


components("dense").register(ExactConfig)(ExactStore)
components("dense").register(HnswConfig)(HnswStore)
