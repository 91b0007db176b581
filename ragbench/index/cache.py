"""Content-addressed, on-disk caches shared by processes and sessions.

Two stores live under one root (``RAGBENCH_CACHE``, default ``~/.cache/ragbench``; a file there
is a ``ConfigError``), beside the LLM calls (``ragbench.llm.cache``, area ``llm``: ``info`` and
``clear`` count and clear them too):

* ``ArtifactCache`` keeps one directory per (stage, key) — chunks, indexes, rankings. A directory
  is built under a temporary name and renamed into place, so a reader never sees a partial
  artifact, and a per-key file lock makes concurrent runs build each artifact once. Its
  ``meta.json`` records the size and SHA-256 of every file (and checksums itself); an entry is
  verified before a codec reads it, so damaged bytes never reach a native parser (hnswlib,
  numpy, pyarrow): a bad entry is logged, removed and rebuilt. ``StageCache`` puts an
  in-process memo and hit counters in front of it (so each artifact is verified once per
  process), and records each artifact's build time in its ``meta.json``.
* ``EmbeddingCache`` keeps vectors per text, keyed by (embedder identity, role, text hash), in
  append-only shards of ``.npy`` files, merged by size tiers, read a vector at a time (a reader
  holds only the keys, whatever the size). A shard becomes visible only
  when its checksum file is renamed into place, after its vectors and keys, so a process killed
  mid-write leaves nothing readable behind; a shard that does not match its checksums is
  removed, never served (its texts are embedded again). ``CachedEmbedder`` wraps any embedder.

A build killed mid-way leaves a ``.tmp-*`` entry; the next ``StageCache`` removes those no live
process holds a lock on, and ``info`` never counts them. A file where the caches make a folder,
or a folder where they take a lock file, is damage too: logged and removed. ``seal`` and
``seal_damage`` give the artifacts' checksums to a folder kept elsewhere (a saved collection).
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

import numpy as np

from ragbench.errors import nearest_folder, writable_folder
from ragbench.llm.cache import LLM_AREA, LLMCache
from ragbench.protocols import Embedder, Role

__all__ = [
    "ArtifactCache",
    "CacheInfo",
    "CachedEmbedder",
    "EmbeddingCache",
    "StageCache",
    "default_cache_root",
    "seal",
    "seal_damage",
    "writable_cache_root",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

_KEY_BYTES = 16
_FAN = 16  # embedding shards of one size tier that are merged into one
_MERGE_ROWS = 4096  # vectors a merge reads at a time
_META = "meta.json"
_TMP = ".tmp-"
_SUMS = ".sums.json"  # an embedding shard's checksums; its appearance makes the shard visible
_STALE_AFTER = 600.0  # seconds after which an unlocked temporary file is a killed writer's


def default_cache_root() -> Path:
    """``$RAGBENCH_CACHE`` or ``~/.cache/ragbench``: ``ConfigError`` naming the variable when
    it is a file or a path under one, so no command reads an empty cache in its place."""
    env = os.environ.get("RAGBENCH_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "ragbench"
    nearest_folder(root, "RAGBENCH_CACHE" if env else "cache root")
    return root


def writable_cache_root(root: str | Path | None = None) -> Path:
    """``root`` (default: ``default_cache_root()``) once checked to be a folder this process
    can write into: else ``ConfigError`` naming it (as RAGBENCH_CACHE when it comes from
    there), before any work starts."""
    if root is not None:
        return writable_folder(root, "cache root")
    name = "RAGBENCH_CACHE" if os.environ.get("RAGBENCH_CACHE") else "cache root"
    return writable_folder(default_cache_root(), name)


def _make_folder(path: Path, root: Path) -> None:
    """Make the folder ``path`` under the cache ``root``; a file standing where one of its
    folders goes is damage of the cache: logged and removed."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        return
    except (FileExistsError, NotADirectoryError):
        pass
    node = path
    while node != root and node.parent != node:
        if node.exists() and not node.is_dir():
            log.warning("cache: %s is a file where a folder belongs; removing it", node)
            node.unlink()
            break
        node = node.parent
    path.mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def _file_lock(path: Path, root: Path) -> Iterator[None]:
    """Hold the lock file ``path`` under the cache ``root`` (a folder in its place, which no
    live process can be locking, is removed)."""
    _make_folder(path.parent, root)
    if path.is_dir() and not path.is_symlink():
        log.warning("cache: %s is a folder where a lock file belongs; removing it", path)
        shutil.rmtree(path, ignore_errors=True)
    with path.open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _unless_locked(path: Path) -> Iterator[bool]:
    """Yields whether no live process locks ``path`` (a missing file is unlocked), holding the
    lock meanwhile; flock locks die with their process, so a free lock means its holder is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield True
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        os.close(fd)


def _tmp_name(path: Path) -> Path:
    return path.with_name(f"{_TMP}{uuid.uuid4().hex}-{path.name}")


def _tmp_target(tmp: Path) -> str:
    """The name a ``_tmp_name`` was made for."""
    return tmp.name.split("-", 2)[-1]


def _remove(path: Path) -> None:
    """Take ``path`` out of sight at once (rename), then delete it."""
    trash = _tmp_name(path)
    try:
        os.replace(path, trash)
    except FileNotFoundError:
        return
    if trash.is_dir():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def _write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file under a temporary name, locked while written, and rename it into place."""
    tmp = _tmp_name(path)
    with tmp.open("wb") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # tells a cleaner that its writer is alive
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
        os.replace(tmp, path)


def _fingerprint(path: Path) -> list[Any]:
    """``[size, sha256]`` of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(partial(fh.read, 1 << 20), b""):
            digest.update(block)
    return [path.stat().st_size, digest.hexdigest()]


def _shard_name(stamp: str | None = None) -> str:
    """A new embedding shard's name: a time stamp (``stamp``: an older shard's, to take its
    place in the order) and a random part."""
    return f"{stamp or f'{time.time_ns():020d}'}-{uuid.uuid4().hex[:8]}"


def _tier(rows: int) -> int:
    """The size tier of a shard of ``rows`` vectors: ``_FAN**t <= rows < _FAN**(t+1)``."""
    tier = 0
    while rows >= _FAN ** (tier + 1):
        tier += 1
    return tier


def _json_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


class _Corrupt(Exception):
    """A cache entry whose files do not match its recorded checksums."""


def _check_files(
    files: Mapping[str, Path], expected: Any, deep: bool, recorded: str = _META
) -> None:
    """Raise ``_Corrupt`` unless ``files`` (name → path) are exactly the ``expected`` ones
    (name → [size, sha256], read from the file ``recorded``); sizes only unless ``deep``."""
    if not isinstance(expected, dict):
        raise _Corrupt(f"{recorded}: no checksums recorded")
    for name in sorted(set(expected) | set(files)):
        if name not in files:
            raise _Corrupt(f"{name}: missing")
        if name not in expected:
            raise _Corrupt(f"{name}: a file no checksum was recorded for")
        entry = expected[name]
        if not (isinstance(entry, list) and len(entry) == 2):
            raise _Corrupt(f"{recorded}: malformed checksum of {name}")
        size, digest = entry
        actual = files[name].stat().st_size
        if actual != size:
            raise _Corrupt(f"{name}: {actual} bytes, expected {size}")
        if deep and _fingerprint(files[name])[1] != digest:
            raise _Corrupt(f"{name}: does not match its checksum")


def _write_meta(directory: Path, extra: Mapping[str, Any]) -> None:
    """``meta.json``: ``extra``, every file's size and SHA-256, and its own checksum."""
    files = {
        p.relative_to(directory).as_posix(): _fingerprint(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
    body = {**extra, "files": files}
    (directory / _META).write_text(json.dumps({**body, "sha256": _json_digest(body)}), "utf-8")


def _read_meta(directory: Path) -> dict[str, Any]:
    """An entry's ``meta.json`` if it matches its own checksum (else ``_Corrupt``)."""
    try:
        meta = json.loads((directory / _META).read_text("utf-8"))
    except FileNotFoundError:
        raise _Corrupt(f"{_META}: missing") from None
    except (OSError, ValueError) as exc:
        raise _Corrupt(f"{_META}: unreadable ({exc})") from None
    if not isinstance(meta, dict) or "sha256" not in meta:
        raise _Corrupt(f"{_META}: holds no checksums")
    body = {k: v for k, v in meta.items() if k != "sha256"}
    if meta["sha256"] != _json_digest(body):
        raise _Corrupt(f"{_META}: does not match its checksum")
    return body


def seal(directory: Path) -> None:
    """Record the size and SHA-256 of every file under ``directory`` in its ``meta.json``, so
    that a reader can tell (``seal_damage``) whether any of them changed since."""
    _write_meta(directory, {})


def seal_damage(directory: Path) -> str | None:
    """The file under a sealed ``directory`` that no longer matches its ``meta.json`` (changed,
    missing or added) and how, as ``<path>: <how>``; None when all match or it was never
    sealed."""
    if not (directory / _META).is_file():
        return None
    try:
        _verify(directory)
    except _Corrupt as exc:
        return f"{directory}/{exc}"
    return None


def _verify(directory: Path, deep: bool = True) -> dict[str, Any]:
    """The meta of an artifact directory whose files all match it (else ``_Corrupt``)."""
    meta = _read_meta(directory)
    files = {
        p.relative_to(directory).as_posix(): p
        for p in directory.rglob("*")
        if p.is_file() and p != directory / _META
    }
    _check_files(files, meta.get("files"), deep)
    return meta


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
    """Directories of stage artifacts, one per (stage, key), written atomically and verified."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_root()

    def path(self, stage: str, key: str) -> Path:
        """Where the artifact of ``stage`` with ``key`` lives (it may not exist yet)."""
        return self.root / stage / key[:2] / key

    def has(self, stage: str, key: str) -> bool:
        """Whether a complete artifact exists (its files and sizes match its meta.json; the
        checksums are read when it is loaded)."""
        try:
            _verify(self.path(stage, key), deep=False)
        except _Corrupt:
            return False
        return True

    def meta(self, stage: str, key: str) -> dict[str, Any] | None:
        """The ``meta.json`` of an artifact (None when there is none; a damaged one is removed)."""
        path = self.path(stage, key)
        with contextlib.suppress(_Corrupt):
            return _read_meta(path) if path.exists() else None
        with _file_lock(self._lock(path), self.root):
            try:
                return _read_meta(path) if path.exists() else None
            except _Corrupt as exc:  # still damaged under the lock: no builder is replacing it
                self._discard(stage, key, str(exc))
        return None

    def get_or_build(
        self, stage: str, key: str, build: Callable[[Path], Mapping[str, Any] | None]
    ) -> tuple[Path, bool]:
        """Return (artifact dir, was_cached); ``build(tmp_dir)`` fills a new one if needed and
        may return extra fields for its ``meta.json``.

        A cached artifact is verified against its checksums first; a damaged one is removed and
        built again. A lock per key makes a concurrent builder wait and then reuse the result.
        """
        final = self.path(stage, key)
        if final.exists() and self._intact(final):
            return final, True
        with _file_lock(self._lock(final), self.root):
            if final.exists():
                try:
                    _verify(final)
                    return final, True  # another process has just built it
                except _Corrupt as exc:
                    self._discard(stage, key, str(exc))
            for stale in final.parent.glob(f"{_TMP}*-{final.name}"):
                shutil.rmtree(stale, ignore_errors=True)  # under the lock, their builder is gone
            tmp = _tmp_name(final)
            tmp.mkdir(parents=True)
            try:
                _write_meta(tmp, build(tmp) or {})
                os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        return final, False

    def remove(self, stage: str, key: str) -> None:
        """Delete an artifact (under its lock; a missing one is fine)."""
        final = self.path(stage, key)
        with _file_lock(self._lock(final), self.root):
            _remove(final)

    @staticmethod
    def _lock(final: Path) -> Path:
        return final.with_name(final.name + ".lock")

    @staticmethod
    def _intact(final: Path) -> bool:
        try:
            _verify(final)
        except _Corrupt:
            return False
        return True

    def _discard(self, stage: str, key: str, reason: str) -> None:
        """Remove a damaged artifact (the caller holds its lock)."""
        log.warning(
            "stage cache: %s %s is damaged (%s); removing it (it is built again when needed)",
            stage,
            key,
            reason,
        )
        _remove(self.path(stage, key))

    def clean_stale(self) -> int:
        """Remove the temporary directories of builds whose builder is gone (no live process
        holds their key's lock); returns how many."""
        removed = 0
        for tmp in self.root.glob(f"*/*/{_TMP}*"):
            with _unless_locked(tmp.with_name(_tmp_target(tmp) + ".lock")) as free:
                if free:
                    shutil.rmtree(tmp, ignore_errors=True)
                    removed += 1
        return removed

    def info(self) -> CacheInfo:
        """Entry counts and sizes per area (builds in progress are not entries; the LLM
        cache's entries are its calls)."""
        entries: dict[str, int] = {}
        sizes: dict[str, int] = {}
        if self.root.is_dir():
            for area in sorted(p for p in self.root.iterdir() if p.is_dir()):
                if area.name == LLM_AREA:
                    calls = LLMCache(self.root)
                    entries[area.name], sizes[area.name] = len(calls), calls.size()
                    continue
                if area.name == "embeddings":
                    items = list(area.glob(f"*/*/*{_SUMS}"))
                else:
                    items = list(area.glob("*/*"))
                items = [p for p in items if not p.name.startswith(_TMP)]
                entries[area.name] = len([p for p in items if not p.name.endswith(".lock")])
                sizes[area.name] = _tree_bytes(area)
        return CacheInfo(self.root, entries, sizes)

    def clear(self, older_than_seconds: float | None = None) -> int:
        """Delete artifacts and LLM calls (all, or those unmodified for
        ``older_than_seconds``) and stale temporary files; returns the count of entries
        deleted."""
        if not self.root.is_dir():
            return 0
        self.clean_stale()
        cutoff = time.time() - older_than_seconds if older_than_seconds is not None else None
        removed = LLMCache(self.root).clear(older_than_seconds)
        for item in self.root.glob("*/*/*"):
            if item.name.startswith(_TMP) or not _entry(item, self.root):
                continue
            if cutoff is not None and item.stat().st_mtime >= cutoff:
                continue
            shutil.rmtree(item, ignore_errors=True)
            item.with_name(item.name + ".lock").unlink(missing_ok=True)
            removed += 1
        return removed


def _entry(item: Path, root: Path) -> bool:
    """Whether the folder ``item`` (``<area>/<shard>/<key>`` under ``root``) is an entry the
    cache wrote: an artifact (it holds ``meta.json``), a namespace's embedding shards, or a
    model training wrote (``training.json``). Anything else under the root stays."""
    if not item.is_dir() or item.is_symlink():
        return False
    if (item / _META).is_file():
        return True
    area = item.parent.parent
    if area == root / "embeddings":
        return all(f.name.endswith((".npy", ".json", ".lock")) for f in item.iterdir())
    return area == root / "training" and (item / "training.json").is_file()


@dataclass
class StageCache:
    """Artifacts on disk (``ArtifactCache``) plus an in-process memo, with hit counters.

    Creating one removes what killed builds left behind in its root.
    """

    root: Path
    hits: int = 0
    misses: int = 0
    build_seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.artifacts = ArtifactCache(self.root)
        self.embeddings = EmbeddingCache(self.root)
        self._memo: dict[tuple[str, str], Any] = {}
        self.artifacts.clean_stale()
        self.embeddings.clean_stale()

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
        own_seconds: Callable[[], float] | None = None,
    ) -> T:
        """The artifact's value: from memory, from disk (verified), or computed (timed) and
        stored; ``own_seconds`` gives the time to record when ``compute`` also computes the
        artifacts it needs (theirs are recorded with them, not again here)."""
        if (stage, key) in self._memo:
            self.hits += 1
            return self._memo[(stage, key)]
        fresh: list[tuple[T, float]] = []

        def build(tmp: Path) -> dict[str, float]:
            started = time.perf_counter()
            value = compute()
            seconds = time.perf_counter() - started if own_seconds is None else own_seconds()
            save(value, tmp)
            fresh.append((value, seconds))
            return {"seconds": seconds}

        path, cached = self.artifacts.get_or_build(stage, key, build)
        if cached:
            self.hits += 1
            value = load(path)
        else:
            self.misses += 1
            value, self.build_seconds[f"{stage}:{key}"] = fresh[0]
        self._memo[(stage, key)] = value
        return value

    def forget(self, stage: str, key: str) -> None:
        """Drop an artifact from memory and disk (it is built again when next asked for)."""
        self._memo.pop((stage, key), None)
        self.artifacts.remove(stage, key)

    def recorded_seconds(self, stage: str, key: str) -> float:
        """Build time recorded with an artifact (0 when it does not exist)."""
        name = f"{stage}:{key}"
        if name not in self.build_seconds:
            meta = self.artifacts.meta(stage, key)
            if meta is None:
                return 0.0
            self.build_seconds[name] = float(meta.get("seconds", 0.0))
        return self.build_seconds[name]


class _Shard:
    """One embedding shard as a reader holds it: its keys sorted (``S16``, with the row of
    each), and its vectors file, read a row at a time (``os.pread``) rather than memory-mapped,
    so vectors served stay out of the process once used. The file stays open: a shard merged
    away meanwhile is still read whole."""

    def __init__(self, name: str, keys: np.ndarray, vecs: BinaryIO) -> None:
        self.name = name
        flat = np.ascontiguousarray(keys).view(f"S{_KEY_BYTES}").ravel()
        self.order = np.argsort(flat, kind="stable").astype(np.int64)
        self.keys = flat[self.order]
        self.file = vecs
        fmt = np.lib.format
        version = fmt.read_magic(vecs)
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, _, dtype = read(vecs)
        self.rows, self.dim = shape
        self.dtype = np.dtype(dtype)
        self.offset = vecs.tell()

    def __len__(self) -> int:
        return int(self.rows)

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The row of each of ``keys`` in this shard, -1 where it has none."""
        if not len(self.keys):
            return np.full(len(keys), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.order[at], -1)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start`` to ``stop`` of its vectors."""
        size = self.dim * self.dtype.itemsize
        out = np.empty((stop - start, self.dim), dtype=self.dtype)
        view, at = out.data.cast("B"), self.offset + start * size
        while view:
            done = os.preadv(self.file.fileno(), [view], at)
            if not done:
                raise OSError(f"embedding shard {self.name} ends before row {stop}")
            view, at = view[done:], at + done
        return out


class EmbeddingCache:
    """Per-text vectors in append-only ``.npy`` shards, one namespace per (identity, role).

    Shards are merged by size tiers: once ``_FAN`` shards of one tier (``_FAN``**t to
    ``_FAN``**(t+1) rows) are there, they become one shard of the next, so a namespace holds
    few shards and each vector is rewritten a few times however many are added. A reader holds
    each shard's sorted keys only (16 bytes and a row number a vector), never its vectors."""

    def __init__(self, root: Path | str | None = None) -> None:
        base = Path(root) if root is not None else default_cache_root()
        self.root = base / "embeddings"
        self._shards_read: dict[Path, list[_Shard]] = {}

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

    @staticmethod
    def _shards(ns: Path) -> list[str]:
        """Names of the visible shards of a namespace, oldest first."""
        found = [p.name for p in ns.glob(f"*{_SUMS}") if not p.name.startswith(_TMP)]
        return sorted(name.removesuffix(_SUMS) for name in found)

    @staticmethod
    def _files(ns: Path, shard: str) -> dict[str, Path]:
        return {part: ns / f"{shard}.{part}" for part in ("keys.npy", "vecs.npy")}

    def _verified(self, ns: Path, shard: str) -> bool:
        """Whether a shard matches its checksums; one that does not is removed."""
        try:
            try:
                sums = json.loads((ns / f"{shard}{_SUMS}").read_text("utf-8"))
            except (OSError, ValueError) as exc:
                raise _Corrupt(f"{shard}{_SUMS}: unreadable ({exc})") from None
            _check_files(self._files(ns, shard), sums, deep=True, recorded=f"{shard}{_SUMS}")
        except _Corrupt as exc:
            if not (ns / f"{shard}{_SUMS}").exists():
                return False  # merged into another shard meanwhile (``compact``)
            log.warning("embedding cache: shard %s/%s is damaged (%s); removing it", ns, shard, exc)
            self._delete_shard(ns, shard)
            return False
        return True

    @staticmethod
    def _delete_shard(ns: Path, shard: str) -> None:
        """Checksums first (the shard disappears at once), then its files."""
        (ns / f"{shard}{_SUMS}").unlink(missing_ok=True)
        for path in EmbeddingCache._files(ns, shard).values():
            path.unlink(missing_ok=True)

    def _open(self, ns: Path, shard: str) -> _Shard | None:
        """A verified shard opened for reading, None when it is gone or inconsistent."""
        if not self._verified(ns, shard):
            return None
        files = self._files(ns, shard)
        try:
            keys = np.load(files["keys.npy"])
            vecs = files["vecs.npy"].open("rb")
        except OSError as exc:  # merged into another shard since it was listed
            log.debug("embedding shard %s/%s went away: %s", ns, shard, exc)
            return None
        try:
            opened = _Shard(shard, keys, vecs)
        except (ValueError, OSError):
            opened = None
        if (
            opened is None
            or keys.ndim != 2
            or keys.shape[1] != _KEY_BYTES
            or len(keys) != len(opened)
        ):
            vecs.close()
            log.warning("ignoring inconsistent embedding shard %s/%s", ns, shard)
            return None
        return opened

    def _refresh(self, ns: Path) -> list[_Shard]:
        """The namespace's shards as they are now, oldest first: new ones opened, those merged
        away since forgotten (their vectors are in the shard that replaced them)."""
        held = {s.name: s for s in self._shards_read.get(ns, [])}
        listed = self._shards(ns) if ns.is_dir() else []
        shards = []
        for name in listed:
            shard = held.pop(name, None) or self._open(ns, name)
            if shard is not None:
                shards.append(shard)
        for gone in held.values():
            gone.file.close()
        self._shards_read[ns] = shards
        return shards

    @staticmethod
    def _key_array(keys: Sequence[bytes]) -> np.ndarray:
        return np.frombuffer(b"".join(keys), dtype=f"S{_KEY_BYTES}") if keys else np.empty(0, "S16")

    def lookup(self, identity: str, role: Role, keys: Sequence[bytes]) -> list[np.ndarray | None]:
        """Cached vectors for ``keys`` (None where missing); a key in two shards is served
        from the older."""
        ns = self.namespace(identity, role)
        wanted = self._key_array(keys)
        shards = self._shards_read.get(ns)
        where = self._locate(shards or [], wanted)
        if shards is None or (where[0] < 0).any():
            where = self._locate(self._refresh(ns), wanted)
            shards = self._shards_read[ns]
        out: list[np.ndarray | None] = [None] * len(keys)
        for s, shard in enumerate(shards):
            at = np.flatnonzero(where[0] == s)
            for i, row in zip(at.tolist(), where[1][at].tolist(), strict=True):
                out[i] = shard.read(row, row + 1)[0]
        return out

    @staticmethod
    def _locate(shards: Sequence[_Shard], keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each key, the first shard holding it and its row there (-1, -1 where none)."""
        shard = np.full(len(keys), -1, dtype=np.int64)
        row = np.full(len(keys), -1, dtype=np.int64)
        for s, held in enumerate(shards):
            todo = np.flatnonzero(shard < 0)
            if not len(todo):
                break
            found = held.find(keys[todo])
            hit = found >= 0
            shard[todo[hit]], row[todo[hit]] = s, found[hit]
        return shard, row

    def store(self, identity: str, role: Role, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        """Append one shard (merging shards of a size tier once there are ``_FAN`` of them)."""
        if not keys:
            return
        ns = self.namespace(identity, role)
        _make_folder(ns, self.root.parent)
        key_arr = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), _KEY_BYTES)
        vecs = np.ascontiguousarray(vectors, np.float32)
        self._write_shard(ns, _shard_name(), key_arr, [vecs], vecs.shape)
        self.compact(identity, role)

    @staticmethod
    def _write_shard(
        ns: Path, shard: str, keys: np.ndarray, parts: Iterable[np.ndarray], shape: tuple[int, int]
    ) -> None:
        """Vectors (``parts``, end to end) and keys first, then the checksums whose appearance
        makes the shard visible."""
        files = EmbeddingCache._files(ns, shard)
        header = {"descr": "<f4", "fortran_order": False, "shape": shape}

        def write_vectors(fh: BinaryIO) -> None:
            np.lib.format.write_array_header_1_0(fh, header)
            for part in parts:
                fh.write(np.ascontiguousarray(part, dtype="<f4").data)

        _write_atomic(files["vecs.npy"], write_vectors)
        _write_atomic(files["keys.npy"], lambda fh: np.save(fh, keys))
        sums = json.dumps({part: _fingerprint(path) for part, path in files.items()})
        _write_atomic(ns / f"{shard}{_SUMS}", lambda fh: fh.write(sums.encode()))

    def compact(self, identity: str, role: Role, fan: int = 0) -> None:
        """Merge the shards of each size tier that holds ``fan`` (default ``_FAN``) or more,
        smallest tier first, a block of vectors at a time; readers keep reading the files they
        opened. ``fan=2`` merges every tier with two shards or more."""
        fan = fan or _FAN
        ns = self.namespace(identity, role)
        if len(self._shards(ns)) < fan:
            return
        with _file_lock(ns / ".compact.lock", self.root):
            while True:
                shards = self._refresh(ns)
                tiers: dict[int, list[_Shard]] = {}
                for shard in shards:
                    tiers.setdefault(_tier(len(shard)), []).append(shard)
                full = [group for _, group in sorted(tiers.items()) if len(group) >= fan]
                if not full:
                    return
                self._merge(ns, full[0])

    def _merge(self, ns: Path, shards: list[_Shard]) -> None:
        """One shard holding the vectors of ``shards`` (oldest first; a key in several keeps
        the oldest's vector), named after the oldest so it takes its place in the order."""
        keys = np.concatenate([s.keys for s in shards])
        source = np.concatenate([np.full(len(s), i, dtype=np.int64) for i, s in enumerate(shards)])
        rows = np.concatenate([s.order for s in shards])
        _, first = np.unique(keys, return_index=True)
        first.sort()  # shard by shard, each in row order
        source, rows, keys = source[first], rows[first], keys[first]
        order = np.lexsort((rows, source))
        source, rows, keys = source[order], rows[order], keys[order]

        def parts() -> Iterator[np.ndarray]:
            for i, shard in enumerate(shards):
                mine = rows[source == i]
                for start in range(0, len(shard), _MERGE_ROWS):
                    stop = min(start + _MERGE_ROWS, len(shard))
                    block = mine[(mine >= start) & (mine < stop)]
                    if len(block):
                        yield shard.read(start, stop)[block - start]

        dim = shards[0].dim
        key_arr = keys.view(np.uint8).reshape(len(keys), _KEY_BYTES)
        name = _shard_name(shards[0].name.split("-", 1)[0])
        self._write_shard(ns, name, key_arr, parts(), (len(keys), dim))
        for shard in shards:
            self._delete_shard(ns, shard.name)

    def clean_stale(self) -> int:
        """Remove what killed writers left: temporary files no live writer locks and shard files
        without checksums, both older than ``_STALE_AFTER``; returns how many."""
        cutoff = time.time() - _STALE_AFTER
        removed = 0
        for ns in self.root.glob("*/*"):
            if not ns.is_dir():
                continue
            visible = set(self._shards(ns))
            for path in ns.iterdir():
                name = path.name
                orphan = name.endswith(".npy") and name.split(".", 1)[0] not in visible
                if not (name.startswith(_TMP) or orphan):
                    continue
                with contextlib.suppress(FileNotFoundError), _unless_locked(path) as free:
                    if free and path.stat().st_mtime < cutoff:
                        path.unlink()
                        removed += 1
        return removed


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
