"""Dense store ``lancedb``: chunk vectors in a LanceDB table, searched flat (exhaustively).

Same contract as the ``exact`` and ``hnsw`` stores (``ragbench.index.dense``): string ids,
replace on re-add, deletes of unknown ids ignored, exact-match metadata filters
(``ragbench.index.filters``), results ordered by score descending, then id ascending, also
across the k-th place. No vector index is built, so search is exact and its recall equals the
``exact`` store's.

Scores are "higher is better". ``dot`` is LanceDB's dot distance, ``1 - q·v``, so the score
is ``1 - distance`` (the inner product, as in ``exact`` with ``ip``). ``cosine`` stores unit
vectors, as ``exact`` does, and searches them with the dot distance: the score is the cosine
similarity, and a zero vector scores 0 (LanceDB's own cosine distance drops it as NaN).
``l2`` is LanceDB's squared L2 distance, and the score its negative (as in ``hnsw``). LanceDB
returns float32 distances, so scores agree with ``exact`` to about 1e-7, and scores that close
may be ordered differently.

The live table is written under ``path`` (default: a temporary folder, removed with the store).
``save`` writes the compacted table as a LanceDB folder (``chunks.lance``) beside ``store.json``
(config, ids, metadata); ``load`` reads that folder where it is and copies it to a folder of its
own before the first change, so a saved artifact (a stage-cache entry, a collection) is never
modified. The ``lancedb`` package is imported on first use (the ``lancedb`` extra).
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
import weakref
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import SerializerFunctionWrapHandler, model_serializer

from ragbench.errors import ConfigError
from ragbench.index.dense import (
    Metadata,
    _no_hits,
    _normalize,
    _ranking,
    _read_state,
    _Store,
    similarity,
)
from ragbench.index.filters import matches
from ragbench.registry import ComponentConfig, components
from ragbench.types import Ranking

__all__ = ["LanceDBConfig", "LanceDBStore"]

_TABLE = "chunks"
_FOLDER = f"{_TABLE}.lance"


class LanceDBConfig(ComponentConfig):
    """A LanceDB table searched flat; ``metric`` is LanceDB's distance type (``cosine``,
    ``dot`` or squared ``l2``).

    ``path`` is the folder the live table is written to (default: a temporary folder); it does
    not change results, is left out of labels, and out of the serialised config (hence of cache
    keys and trial ids) when unset.
    """

    kind: Literal["lancedb"] = "lancedb"
    metric: Literal["cosine", "dot", "l2"] = "cosine"
    path: str | None = None

    unlabelled: ClassVar[frozenset[str]] = frozenset({"path"})

    def score_scale(self) -> str:
        """The similarity of its ``metric``."""
        return similarity(self.metric)

    @model_serializer(mode="wrap")
    def _omit_unset_path(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.path is None:
            data.pop("path", None)
        return data


def _lancedb() -> Any:
    """The ``lancedb`` module, or a one-line error saying how to install it."""
    try:
        import lancedb
    except ImportError:
        raise ConfigError(
            "store.kind: lancedb needs the lancedb package: pip install 'ragbench[lancedb]'"
        ) from None
    return lancedb


def _sql_list(ids: Sequence[str]) -> str:
    """``id IN ('a', 'b')`` with the ids quoted as SQL string literals."""
    quoted = ", ".join("'" + id_.replace("'", "''") + "'" for id_ in ids)
    return f"id IN ({quoted})"


class LanceDBStore(_Store):
    """Exhaustive search over a LanceDB table of (id, vector) rows; ids and metadata are also
    kept in memory, where filters are evaluated (exactly as the other stores evaluate them)
    and turned into an ``id IN (...)`` prefilter."""

    config: LanceDBConfig

    def __init__(self, config: LanceDBConfig | None = None) -> None:
        self.config = config or LanceDBConfig()
        self._lancedb = _lancedb()
        self._table: Any = None
        self._folder: Path | None = None  # the LanceDB folder holding the table
        self._owned = False  # whether _folder is this store's own (else a saved artifact)
        self._dimension: int | None = None
        self._meta: dict[str, Mapping[str, Any]] = {}

    @property
    def dimension(self) -> int | None:
        """Vector dimension, or None before the first add."""
        return self._dimension

    def count(self) -> int:
        """Number of stored vectors."""
        return len(self._meta)

    def add(self, ids: Sequence[str], vectors: np.ndarray, metadata: Metadata = None) -> None:
        """Store vectors under ``ids``; an id already present is replaced."""
        matrix, keep = self._batch(ids, vectors, metadata)
        if not keep:
            return
        kept = [ids[i] for i in keep]
        if self.config.metric == "cosine":
            matrix = _normalize(matrix)
        dim = matrix.shape[1]
        rows = pa.table(
            {
                "id": pa.array(kept, type=pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix[keep].ravel()), dim),
            }
        )
        if self._table is None:
            self._folder, self._owned = self._new_folder(), True
            db = self._lancedb.connect(str(self._folder))
            self._table = db.create_table(_TABLE, data=rows)
            self._dimension = dim
        else:
            self._own()
            replaced = [id_ for id_ in kept if id_ in self._meta]
            if replaced:
                self._table.delete(_sql_list(replaced))
            self._table.add(rows)
        for i in keep:
            self._meta[ids[i]] = dict(metadata[i]) if metadata is not None else {}

    def delete(self, ids: Sequence[str]) -> None:
        """Remove ``ids`` (unknown ids are ignored)."""
        known = [id_ for id_ in dict.fromkeys(ids) if id_ in self._meta]
        if not known:
            return
        self._own()
        self._table.delete(_sql_list(known))
        for id_ in known:
            del self._meta[id_]

    def search(
        self, vectors: np.ndarray, k: int, filter: Mapping[str, Any] | None = None
    ) -> Ranking:
        """Top-``k`` ids and scores for each query vector (a (d,) vector is one query)."""
        queries = self._queries(vectors, k, unit=self.config.metric == "cosine")
        allowed = self._allowed(filter)
        kk = min(k, self.count() if allowed is None else len(allowed))
        if kk == 0 or len(queries) == 0:
            return _ranking(*_no_hits(len(queries)), k)
        where = None if allowed is None else _sql_list(allowed)
        found = np.empty((len(queries), kk), dtype=object)
        scores = np.empty((len(queries), kk))
        todo, limit = np.arange(len(queries)), kk + 1
        while len(todo):  # a query whose k-th score is tied past the limit asks for more
            hits = self._nearest(queries[todo], limit, where)
            again = []
            for row, (hit_ids, hit_scores) in zip(todo, hits, strict=True):
                if len(hit_ids) == limit and hit_scores[kk - 1] == hit_scores[-1]:
                    again.append(row)
                    continue
                order = np.lexsort((hit_ids.astype(str), -hit_scores))[:kk]
                found[row], scores[row] = hit_ids[order], hit_scores[order]
            todo, limit = np.asarray(again, dtype=np.int64), 2 * limit
        return _ranking(found, scores, k)

    def _allowed(self, filter: Mapping[str, Any] | None) -> list[str] | None:
        """Ids passing ``filter``, or None when every id passes."""
        if not filter:
            return None
        passed = [id_ for id_, meta in self._meta.items() if matches(meta, filter)]
        return None if len(passed) == self.count() else passed

    def _nearest(
        self, queries: np.ndarray, limit: int, where: str | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """The ``limit`` nearest (ids, scores) of each query, by one flat LanceDB search."""
        query = (
            self._table.search(queries)
            .distance_type("dot" if self.config.metric == "cosine" else self.config.metric)
            .bypass_vector_index()
            .select(["id", "_distance"])
            .limit(limit)
        )
        if where is not None:
            query = query.where(where, prefilter=True)
        result = query.to_arrow()
        ids = np.asarray(result.column("id").to_pylist(), dtype=object)
        distances = result.column("_distance").to_numpy().astype(np.float64)
        scores = -distances if self.config.metric == "l2" else 1.0 - distances
        if "query_index" not in result.column_names:  # one query: no index column
            return [(ids, scores)]
        which = result.column("query_index").to_numpy()
        return [(ids[which == q], scores[which == q]) for q in range(len(queries))]

    def _new_folder(self) -> Path:
        """A fresh folder under ``config.path`` (or the temp dir), removed with the store."""
        parent = self.config.path
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="ragbench-lancedb-", dir=parent))
        weakref.finalize(self, shutil.rmtree, folder, True)
        return folder

    def _own(self) -> None:
        """Copy a table read from a saved artifact to a folder of this store's own."""
        if self._owned:
            return
        assert self._folder is not None  # a table that is not owned was loaded from a folder
        folder = self._new_folder()
        shutil.copytree(self._folder / _FOLDER, folder / _FOLDER)
        self._table = self._lancedb.connect(str(folder)).open_table(_TABLE)
        self._folder, self._owned = folder, True

    def save(self, path: Path | str) -> None:
        """Write the table (``chunks.lance``, compacted) and ``store.json`` (config, ids,
        metadata) into ``path``."""
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        if self._table is not None:
            assert self._folder is not None  # set together with the table
            if self._owned:  # the table is private: no reader needs its older versions
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    self._table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)
            shutil.copytree(self._folder / _FOLDER, directory / _FOLDER)
        self._write_state(directory, list(self._meta), metadata=list(self._meta.values()))

    @classmethod
    def load(cls, path: Path | str) -> LanceDBStore:
        """Read a store written by :meth:`save` (its table is copied before the first change)."""
        directory, state = _read_state(path)
        store = cls(LanceDBConfig.model_validate(state["config"]))
        if state["dimension"] is not None:
            store._table = store._lancedb.connect(str(directory)).open_table(_TABLE)
            store._folder, store._dimension = directory, state["dimension"]
        store._meta = dict(zip(state["ids"], state["metadata"], strict=True))
        return store


components("dense").register(LanceDBConfig)(LanceDBStore)
