"""Content-addressed, on-disk caches shared by processes and sessions.

Two stores live under one root (``RAGBENCH_CACHE``, default ``~/.cache/ragbench``):

* ``ArtifactCache`` keeps one directory per (stage, key) — chunks, indexes, rankings. A directory
  is built under a temporary name and renamed into place, so a reader never sees a partial
  artifact, and a per-key file lock makes concurrent runs build each artifact once.
  ``StageCache`` puts an in-process memo and hit counters in front of it, and records each
  artifact's build time beside it.
* ``EmbeddingCache`` keeps vectors per text, keyed by (embedder identity, role, text hash), in
  append-only shards of ``.npy`` files (memory-mapped when read). A shard becomes visible only
  when its key file is renamed into place, after its vectors, so a process killed mid-write
  leaves nothing readable behind. ``CachedEmbedder`` wraps any embedder with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from ragbench.protocols import Embedder, Role

__all__ = [
    "ArtifactCache",
    "CacheInfo",
    "CachedEmbedder",
    "EmbeddingCache",
    "StageCache",
    "default_cache_root",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

_KEY_BYTES = 16
_COMPACT_AFTER = 64  # shards per namespace before they are merged into one


def default_cache_root() -> Path:
    """``$RAGBENCH_CACHE`` or ``~/.cache/ragbench``."""
    env = os.environ.get("RAGBENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "ragbench"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")


def _save_npy_atomic(path: Path, array: np.ndarray) -> None:
    tmp = _tmp_name(path)
    with tmp.open("wb") as fh:
        np.save(fh, array)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class CacheInfo:
    """Size of a cache root, by top-level area (stage names and ``embeddings``)."""

    root: Path
    entries: dict[str, int]
    bytes: dict[str, int]

    def __str__(self) -> str:
        lines = [f"cache root: {self.root}"]
        for area in sorted(self.entries):
            lines.append(
                f"  {area:<20} {self.entries[area]:>7} entries  {self.bytes[area] / 1e6:>9.1f} MB"
            )
        total = sum(self.bytes.values()) / 1e6
        lines.append(f"  {'total':<20} {sum(self.entries.values()):>7} entries  {total:>9.1f} MB")
        return "\n".join(lines)


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class ArtifactCache:
    """Directories of stage artifacts, one per (stage, key), written atomically."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_root()

    def path(self, stage: str, key: str) -> Path:
        """Where the artifact of ``stage`` with ``key`` lives (it may not exist yet)."""
        return self.root / stage / key[:2] / key

    def has(self, stage: str, key: str) -> bool:
        """Whether a complete artifact exists."""
        return self.path(stage, key).is_dir()

    def get_or_build(
        self, stage: str, key: str, build: Callable[[Path], None]
    ) -> tuple[Path, bool]:
        """Return (artifact dir, was_cached); ``build(tmp_dir)`` fills a new one if needed.

        A lock per key makes a concurrent builder wait and then reuse the result.
        """
        final = self.path(stage, key)
        if final.is_dir():
            return final, True
        with _file_lock(final.with_name(final.name + ".lock")):
            if final.is_dir():
                return final, True
            tmp = _tmp_name(final)
            tmp.mkdir(parents=True)
            try:
                build(tmp)
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return final, False

    def info(self) -> CacheInfo:
        """Entry counts and sizes per area."""
        entries: dict[str, int] = {}
        sizes: dict[str, int] = {}
        if self.root.is_dir():
            for area in sorted(p for p in self.root.iterdir() if p.is_dir()):
                items = [p for p in area.glob("*/*") if not p.name.endswith(".lock")]
                if area.name == "embeddings":
                    items = list(area.glob("*/*/*.keys.npy"))
                entries[area.name] = len(items)
                sizes[area.name] = _tree_bytes(area)
        return CacheInfo(self.root, entries, sizes)

    def clear(self, older_than_seconds: float | None = None) -> int:
        """Delete artifacts (all, or those unmodified for ``older_than_seconds``); returns count."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - older_than_seconds if older_than_seconds is not None else None
        removed = 0
        for item in self.root.glob("*/*/*"):
            if not item.is_dir() or (cutoff is not None and item.stat().st_mtime >= cutoff):
                continue
            shutil.rmtree(item, ignore_errors=True)
            item.with_name(item.name + ".lock").unlink(missing_ok=True)
            removed += 1
        return removed


@dataclass
class StageCache:
    """Artifacts on disk (``ArtifactCache``) plus an in-process memo, with hit counters."""

    root: Path
    hits: int = 0
    misses: int = 0
    build_seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.artifacts = ArtifactCache(self.root)
        self.embeddings = EmbeddingCache(self.root)
        self._memo: dict[tuple[str, str], Any] = {}

    def has(self, stage: str, key: str) -> bool:
        """Whether the artifact exists on disk."""
        return self.artifacts.has(stage, key)

    def get(
        self,
        stage: str,
        key: str,
        compute: Callable[[], T],
        save: Callable[[T, Path], None],
        load: Callable[[Path], T],
    ) -> T:
        """The artifact's value: from memory, from disk, or computed (timed) and stored."""
        if (stage, key) in self._memo:
            self.hits += 1
            return self._memo[(stage, key)]
        fresh: list[T] = []

        def build(tmp: Path) -> None:
            started = time.perf_counter()
            value = compute()
            seconds = time.perf_counter() - started
            save(value, tmp)
            (tmp / "meta.json").write_text(json.dumps({"seconds": seconds}), "utf-8")
            fresh.append(value)

        path, cached = self.artifacts.get_or_build(stage, key, build)
        if cached:
            self.hits += 1
            value = load(path)
        else:
            self.misses += 1
            value = fresh[0]
        meta = json.loads((path / "meta.json").read_text("utf-8"))
        self.build_seconds[f"{stage}:{key}"] = float(meta["seconds"])
        self._memo[(stage, key)] = value
        return value

    def recorded_seconds(self, stage: str, key: str) -> float:
        """Build time recorded with an artifact (0 when it does not exist)."""
        if f"{stage}:{key}" in self.build_seconds:
            return self.build_seconds[f"{stage}:{key}"]
        meta = self.artifacts.path(stage, key) / "meta.json"
        return float(json.loads(meta.read_text("utf-8"))["seconds"]) if meta.is_file() else 0.0


class EmbeddingCache:
    """Per-text vectors in append-only ``.npy`` shards, one namespace per (identity, role)."""

    def __init__(self, root: Path | str | None = None) -> None:
        base = Path(root) if root is not None else default_cache_root()
        self.root = base / "embeddings"
        self._index: dict[Path, dict[bytes, tuple[np.ndarray, int]]] = {}
        self._seen: dict[Path, set[str]] = {}

    def namespace(self, identity: str, role: Role) -> Path:
        """Directory holding the vectors of one embedder identity and role."""
        digest = hashlib.sha256(identity.encode()).hexdigest()[:24]
        return self.root / digest / role

    @staticmethod
    def text_keys(texts: Sequence[str]) -> list[bytes]:
        """16-byte SHA-256 prefixes of the texts."""
        return [
            hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()[:_KEY_BYTES] for t in texts
        ]

    def _refresh(self, ns: Path) -> dict[bytes, tuple[np.ndarray, int]]:
        index = self._index.setdefault(ns, {})
        seen = self._seen.setdefault(ns, set())
        if not ns.is_dir():
            return index
        for keys_file in sorted(ns.glob("*.keys.npy")):
            shard = keys_file.name.removesuffix(".keys.npy")
            if shard in seen:
                continue
            try:
                keys = np.load(keys_file)
                vecs = np.load(ns / f"{shard}.vecs.npy", mmap_mode="r")
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable embedding shard %s: %s", keys_file, exc)
                continue
            if keys.ndim != 2 or keys.shape[1] != _KEY_BYTES or len(keys) != len(vecs):
                log.warning("ignoring inconsistent embedding shard %s", keys_file)
                continue
            seen.add(shard)
            for row, key in enumerate(keys):
                index.setdefault(key.tobytes(), (vecs, row))
        return index

    def lookup(self, identity: str, role: Role, keys: Sequence[bytes]) -> list[np.ndarray | None]:
        """Cached vectors for ``keys`` (None where missing)."""
        ns = self.namespace(identity, role)
        index = self._index.get(ns)
        if index is None or any(k not in index for k in keys):
            index = self._refresh(ns)
        out: list[np.ndarray | None] = []
        for key in keys:
            hit = index.get(key)
            out.append(None if hit is None else np.asarray(hit[0][hit[1]]))
        return out

    def store(self, identity: str, role: Role, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Append one shard (merging the namespace when it has many)."""
        if not keys:
            return
        ns = self.namespace(identity, role)
        ns.mkdir(parents=True, exist_ok=True)
        self._write_shard(ns, keys, vectors)
        if len(list(ns.glob("*.keys.npy"))) > _COMPACT_AFTER:
            self.compact(identity, role)

    @staticmethod
    def _write_shard(ns: Path, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Vectors first, then the key file whose appearance makes the shard visible."""
        shard = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        key_arr = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), _KEY_BYTES)
        _save_npy_atomic(ns / f"{shard}.vecs.npy", np.ascontiguousarray(vectors, np.float32))
        _save_npy_atomic(ns / f"{shard}.keys.npy", key_arr)

    def compact(self, identity: str, role: Role) -> None:
        """Merge a namespace's shards into one (readers keep working on their memory maps)."""
        ns = self.namespace(identity, role)
        with _file_lock(ns / ".compact.lock"):
            old = sorted(ns.glob("*.keys.npy"))
            if len(old) <= 1:
                return
            index = self._refresh(ns)
            vectors = np.stack([np.asarray(v[r]) for v, r in index.values()])
            self._write_shard(ns, list(index), vectors)
            for keys_file in old:
                name = keys_file.name.removesuffix(".keys.npy")
                keys_file.unlink(missing_ok=True)
                (ns / f"{name}.vecs.npy").unlink(missing_ok=True)
            self._index.pop(ns, None)
            self._seen.pop(ns, None)


class CachedEmbedder:
    """An embedder that serves repeated texts from an ``EmbeddingCache``.

    Only texts never embedded before (by this identity and role) reach the wrapped model, each
    distinct text once per call; ``hits`` / ``misses`` count texts served and computed. Roles
    outside ``roles`` always reach the model (e.g. queries, when their latency is measured).
    """

    def __init__(
        self,
        inner: Embedder,
        cache: EmbeddingCache | None = None,
        roles: tuple[Role, ...] = ("document", "query"),
    ) -> None:
        self.inner = inner
        self.cache = cache or EmbeddingCache()
        self.roles = roles
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        """Dimension of the wrapped embedder."""
        return self.inner.dimension

    @property
    def identity(self) -> str:
        """Identity of the wrapped embedder (the cache is transparent)."""
        return self.inner.identity

    def embed(self, texts: Sequence[str], role: Role = "document") -> np.ndarray:
        """Vectors for ``texts``, computing only the ones not cached yet."""
        if role not in self.roles:
            return self.inner.embed(texts, role)
        identity = self.inner.identity
        keys = self.cache.text_keys(texts)
        found = self.cache.lookup(identity, role, keys)
        missing: dict[bytes, str] = {}
        for key, text, vec in zip(keys, texts, found, strict=True):
            if vec is None:
                missing.setdefault(key, text)
        self.hits += sum(1 for v in found if v is not None)
        self.misses += len(missing)
        if missing:
            computed = self.inner.embed(list(missing.values()), role)
            self.cache.store(identity, role, list(missing), computed)
            fresh = dict(zip(missing, computed, strict=True))
            found = [fresh[k] if v is None else v for k, v in zip(keys, found, strict=True)]
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # every missing vector was filled in from ``fresh`` above
        return np.stack(cast("list[np.ndarray]", found)).astype(np.float32, copy=False)
