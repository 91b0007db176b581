"""Embedding and artifact caches: reuse, concurrency, and a writer killed mid-write."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ragbench.index.cache import _FAN, ArtifactCache, CachedEmbedder, EmbeddingCache, _tier
from ragbench.index.embedders import HashingConfig, HashingEmbedder


def _embedder() -> HashingEmbedder:
    return HashingEmbedder(HashingConfig(dim=32))


def test_second_run_computes_nothing(tmp_path: Path) -> None:
    texts = [f"document number {i}" for i in range(50)]
    first = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path))
    a = first.embed(texts + texts[:5])
    assert first.inner.stats.texts == 50  # duplicates inside one call are embedded once
    second = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path))
    b = second.embed(list(reversed(texts)))
    assert second.inner.stats.texts == 0 and second.hits == 50
    assert np.array_equal(a[:50], b[::-1])


def test_roles_and_identities_are_separate_entries(tmp_path: Path) -> None:
    cached = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path))
    cached.embed(["same text"], role="document")
    cached.embed(["same text"], role="query")
    assert cached.misses == 2
    other = CachedEmbedder(HashingEmbedder(HashingConfig(dim=16)), EmbeddingCache(tmp_path))
    assert other.embed(["same text"]).shape == (1, 16) and other.misses == 1


def test_roles_outside_the_cached_ones_always_reach_the_model(tmp_path: Path) -> None:
    cached = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path), roles=("document",))
    cached.embed(["q"], role="query")
    cached.embed(["q"], role="query")
    cached.embed(["d"])
    cached.embed(["d"])
    assert cached.inner.stats.queries == 2 and cached.inner.stats.texts == 3


def test_many_small_shards_are_compacted_without_losing_entries(tmp_path: Path) -> None:
    cached = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path))
    for i in range(80):
        cached.embed([f"text {i}"])
    ns = cached.cache.namespace(cached.identity, "document")
    assert len(list(ns.glob("*.keys.npy"))) < 20
    fresh = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path))
    fresh.embed([f"text {i}" for i in range(80)])
    assert fresh.misses == 0


def test_shards_merge_by_size_tier_and_a_key_keeps_its_oldest_vector(tmp_path: Path) -> None:
    cache, reader = EmbeddingCache(tmp_path), EmbeddingCache(tmp_path)
    keys = cache.text_keys([f"text {i}" for i in range(1200)])
    vectors = np.random.default_rng(0).normal(size=(1200, 8)).astype(np.float32)
    cache.store("model", "document", keys[:3], vectors[:3])
    assert reader.lookup("model", "document", keys[:1])[0] is not None  # holds that shard
    start = 3
    for size in [1, 5, 40, 2, 17] * 12:
        cache.store("model", "document", keys[start : start + size], vectors[start : start + size])
        start += size
    cache.store("model", "document", keys[:2], vectors[:2] + 1.0)  # stored again, later
    ns = cache.namespace("model", "document")
    rows = [len(np.load(ns / f"{shard}.keys.npy")) for shard in cache._shards(ns)]
    tiers = Counter(_tier(n) for n in rows)
    assert start <= sum(rows) <= start + 2 and len(rows) < 61  # merged...
    assert max(tiers.values()) < _FAN  # ...tier by tier
    for found in (
        reader.lookup("model", "document", keys[:start]),
        cache.lookup("model", "document", keys[:start]),
    ):
        assert all(v is not None for v in found)
        assert np.array_equal(np.stack(found), vectors[:start])  # the oldest vector of a key
    assert reader.lookup("model", "document", keys[start:]) == [None] * (1200 - start)


WRITER = textwrap.dedent(
    """
    import sys
    from ragbench.index.cache import CachedEmbedder, EmbeddingCache
    from ragbench.index.embedders import HashingConfig, HashingEmbedder
    cached = CachedEmbedder(HashingEmbedder(HashingConfig(dim=32)), EmbeddingCache(sys.argv[1]))
    start = int(sys.argv[2])
    for i in range(start, start + 100000):
        cached.embed([f"text {i} " + "pad " * 200 + str(j) for j in range(200)])
        print(i, flush=True)
    """
)


def test_writer_killed_mid_write_leaves_no_corrupt_entry(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), "0"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # at least one shard is complete
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reference = _embedder()
    cache = EmbeddingCache(tmp_path)
    ns = cache.namespace(reference.identity, "document")
    leftovers = [p for p in ns.iterdir() if p.name.startswith(".tmp-")]
    index = cache._refresh(ns)
    assert index, "completed shards must be readable"
    texts = [f"text {i} " + "pad " * 200 + str(j) for i in range(3) for j in range(200)]
    found = cache.lookup(reference.identity, "document", cache.text_keys(texts))
    expected = reference.embed(texts)
    for vec, exp in zip(found, expected, strict=True):
        assert vec is None or np.allclose(vec, exp)
    assert found[0] is not None
    assert all(p.stat().st_size >= 0 for p in leftovers)  # partial temp files are never read


def test_two_processes_share_one_cache(tmp_path: Path) -> None:
    script = WRITER.replace("range(start, start + 100000)", "range(start, start + 3)")
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(s)]) for s in (0, 1)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    cached = CachedEmbedder(_embedder(), EmbeddingCache(tmp_path))
    texts = [f"text {i} " + "pad " * 200 + str(j) for i in range(4) for j in range(200)]
    vecs = cached.embed(texts)
    assert cached.misses == 0
    assert np.allclose(vecs, _embedder().embed(texts))


def test_artifact_cache_builds_once_and_is_atomic(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    calls = []

    def build(path: Path) -> None:
        calls.append(path)
        (path / "data.txt").write_text("ok")

    path, cached = cache.get_or_build("chunks", "abcdef", build)
    assert not cached and (path / "data.txt").read_text() == "ok"
    again, cached = cache.get_or_build("chunks", "abcdef", build)
    assert cached and again == path and len(calls) == 1

    def broken(path: Path) -> None:
        (path / "partial.txt").write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cache.get_or_build("chunks", "ffeedd", broken)
    assert not cache.has("chunks", "ffeedd")
    assert not list((tmp_path / "chunks").glob("*/.tmp-*"))
    info = cache.info()
    assert info.entries["chunks"] == 1
    assert cache.clear() == 1 and not cache.has("chunks", "abcdef")
