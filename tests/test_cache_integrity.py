"""A corrupted cache heals itself: every artifact is checksummed at commit and verified before
its codec reads it; a bad entry is removed and rebuilt, never loaded. Builds killed mid-way
leave temporary entries that the next start removes and `cache info` never counts."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragbench.index.cache import ArtifactCache, CachedEmbedder, EmbeddingCache, StageCache
from ragbench.index.embedders import HashingConfig, HashingEmbedder
from tests.paths import DEMO, REPO, require

METRICS = ["ndcg@10", "recall@20", "map"]


def _config() -> dict:
    return {
        "name": "integrity",
        "dataset": {"path": str(require(DEMO))},
        "evaluation": {"metrics": METRICS, "depth": 20},
        "sweep": {
            "chunker": [{"kind": "recursive", "size": 600, "overlap": 0}],
            "embedder": [{"kind": "hashing", "dim": 256}],
            "retriever": [
                {"kind": "bm25"},
                # hnswlib builds with several threads, so two builds of a graph differ; an ef
                # above the corpus size (488 chunks) searches it all: results independent of it
                {"kind": "dense", "store": [{"kind": "exact"}, {"kind": "hnsw", "ef_search": 512}]},
            ],
            "reranker": [
                {"kind": "none"},
                {"kind": "dense", "embedder": {"kind": "hashing", "dim": 64}, "candidates": 10},
            ],
        },
    }


def _sweep(cache: Path, out: Path) -> pd.DataFrame:
    from ragbench.experiment.runner import run

    result = run(_config(), out, cache_root=cache, limit_queries=20, progress=False)
    return result.trials.set_index("trial_id").sort_index()


def _artifacts(cache: Path) -> list[Path]:
    return sorted(
        p for p in cache.glob("*/*/*") if p.is_dir() and not p.is_relative_to(cache / "embeddings")
    )


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    root = tmp_path_factory.mktemp("pristine")
    trials = _sweep(root / "cache", root / "run")
    assert (trials["status"] == "ok").all()
    return root / "cache", trials


def _data_file(artifact: Path) -> Path:
    """The largest file of an artifact other than its meta.json."""
    files = [p for p in artifact.rglob("*") if p.is_file() and p.name != "meta.json"]
    return max(files, key=lambda p: p.stat().st_size)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _append(path: Path) -> None:
    with path.open("ab") as fh:
        fh.write(b"\0" * 16)


def _empty(artifact: Path) -> None:
    for item in list(artifact.iterdir()):
        if item.is_dir():
            shutil.rmtree(item)
        else:
            item.unlink()


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "flip bytes": lambda a: _flip(_data_file(a)),
    "truncate": lambda a: _truncate(_data_file(a)),
    "append": lambda a: _append(_data_file(a)),
    "delete a file": lambda a: _data_file(a).unlink(),
    "extra file": lambda a: (a / "stray.bin").write_bytes(b"x"),
    "garble meta.json": lambda a: (a / "meta.json").write_text("{not json"),
    "delete meta.json": lambda a: (a / "meta.json").unlink(),
    "empty directory": _empty,
}


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_every_corrupted_artifact_is_rebuilt_with_the_same_results(
    pristine: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    corrupt: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(pristine[0], cache)
    artifacts = _artifacts(cache)
    assert {a.parent.parent.name for a in artifacts} >= {
        "chunks",
        "doc_vectors",
        "dense_index",
        "bm25_index",
        "query_vectors",
        "bm25",
        "dense",
        "rerank",
    }
    for artifact in artifacts:
        CORRUPTIONS[corrupt](artifact)
    with caplog.at_level("WARNING", logger="ragbench.index.cache"):
        trials = _sweep(cache, tmp_path / "run")
    assert (trials["status"] == "ok").all(), trials["error"].tolist()
    pd.testing.assert_frame_equal(trials[METRICS], pristine[1][METRICS])
    assert trials["cache_misses"].sum() == len(artifacts)  # each rebuilt, once
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for artifact in artifacts:
        assert f"{artifact.parent.parent.name} {artifact.name}" in warned
    again = tmp_path / "again"  # the healed cache verifies: a fresh process reuses everything
    shutil.copytree(cache, again)
    assert _sweep(again, tmp_path / "run2")["cache_misses"].sum() == 0


SWEEP = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[3])
    from tests.test_cache_integrity import _sweep, METRICS
    from pathlib import Path
    trials = _sweep(Path(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({"status": trials["status"].tolist(), **trials[METRICS].to_dict()}))
    """
)


def test_a_corrupted_hnsw_header_is_rebuilt_not_a_segfault(
    pristine: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(pristine[0], cache)
    for area in ("dense", "rerank"):  # the sweep must read the index again
        shutil.rmtree(cache / area)
    (index,) = cache.glob("dense_index/*/*/index/index.bin")
    header = bytearray(index.read_bytes())
    header[52:56] = b"\xff\xff\xff\xff"  # hnswlib's entry point: out of range
    index.write_bytes(bytes(header))
    proc = subprocess.run(
        [sys.executable, "-c", SWEEP, str(cache), str(tmp_path / "run"), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(found.pop("status")) == {"ok"}
    expected = pristine[1][METRICS].to_dict()
    assert found == json.loads(json.dumps(expected))


def test_a_corrupted_embedding_shard_is_never_served(tmp_path: Path) -> None:
    texts = [f"text number {i}" for i in range(20)]
    first = CachedEmbedder(HashingEmbedder(HashingConfig(dim=32)), EmbeddingCache(tmp_path))
    expected = first.embed(texts)
    ns = first.cache.namespace(first.identity, "document")
    (vecs,) = ns.glob("*.vecs.npy")
    _flip(vecs)
    again = CachedEmbedder(HashingEmbedder(HashingConfig(dim=32)), EmbeddingCache(tmp_path))
    assert np.array_equal(again.embed(texts), expected)
    assert again.misses == 20 and again.hits == 0  # embedded again, not read from the shard
    assert not vecs.exists()  # the bad shard is gone
    third = CachedEmbedder(HashingEmbedder(HashingConfig(dim=32)), EmbeddingCache(tmp_path))
    assert np.array_equal(third.embed(texts), expected) and third.hits == 20


# ---------------------------------------------------------------- stale temporary entries

BUILDER = textwrap.dedent(
    """
    import sys, time
    from ragbench.index.cache import ArtifactCache

    def build(path):
        (path / "half.bin").write_bytes(b"x" * 100)
        print("building", flush=True)
        time.sleep(600)

    ArtifactCache(sys.argv[1]).get_or_build("chunks", "abcdef0123", build)
    """
)


def test_a_killed_build_is_cleaned_on_the_next_start_and_never_counted(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)

    def build(path: Path) -> None:
        (path / "a.txt").write_text("ok")

    cache.get_or_build("chunks", "0123456789", build)
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "building\n"
        (partial,) = tmp_path.glob("chunks/*/.tmp-*")
        assert cache.info().entries["chunks"] == 1  # a build in progress is not an entry
        StageCache(tmp_path)  # a start while the builder lives keeps its directory
        assert partial.is_dir()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert cache.info().entries["chunks"] == 1
    StageCache(tmp_path)
    assert not partial.exists()
    assert cache.has("chunks", "0123456789")


def test_stale_embedding_temp_files_are_removed_on_the_next_start(tmp_path: Path) -> None:
    cached = CachedEmbedder(HashingEmbedder(HashingConfig(dim=8)), EmbeddingCache(tmp_path))
    cached.embed(["a", "b"])
    ns = cached.cache.namespace(cached.identity, "document")
    stale = ns / ".tmp-0000-00001-deadbeef.keys.npy"
    fresh = ns / ".tmp-1111-00002-deadbeef.vecs.npy"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    assert ArtifactCache(tmp_path).info().entries["embeddings"] == 1
    StageCache(tmp_path)
    assert not stale.exists() and fresh.exists()
