"""Ingest at any size: `ragbench ingest` of synthetic passages streamed into a collection.

``python -m benchmarks.bench_ingest [--sizes N ...] [--embedder hashing|minilm]`` writes the
first N passages of the scale benchmark's seeded synthetic corpus (``bench_scale.Corpus``:
Zipf-distributed words, mean 150 words) as one JSONL file, then runs ``ragbench ingest
--source FILE`` on it in a fresh process into a new collection of the pipeline defaults
(hybrid: BM25 and an hnsw dense store) with one chunk per passage (``chunker: none``) and the
``hashing`` embedder at 384 dimensions (MiniLM's width; ``--embedder minilm`` takes the int8
MiniLM instead, hours at a million), and records its wall time, rate and peak resident memory
(the child's ``ru_maxrss``). At the smallest size it also kills an ingest (SIGKILL) half-way
and runs the same command again: the documents the killed one committed are reported
unchanged, none indexed twice. ``measure()`` returns the figures as a dict.

``INGEST`` draws its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.bench_scale import Corpus
from benchmarks.render import Figures, Lines, num, part, table

SIZES = (100_000, 1_000_000)
HASHING = {"kind": "hashing", "dim": 384}
MINILM = {"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2", "backend": "onnx"}
MINILM["quantize"] = "int8"
TARGET_MB = 3_000
_COUNTS = re.compile(r"documents loaded (\d+), indexed (\d+), unchanged (\d+)")


def corpus(work: Path, n: int) -> Path:
    """The first ``n`` synthetic passages as ``passages-<n>.jsonl`` in ``work`` (made once)."""
    path = work / f"passages-{n}.jsonl"
    if path.is_file():
        return path
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        for ids, texts in Corpus().batches(n):
            out.writelines(
                json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts, strict=True)
            )
    tmp.replace(path)
    return path


def _command(source: Path, db: Path, embedder: dict[str, Any]) -> list[str]:
    spec = {"chunker": {"kind": "none"}, "embedder": embedder}
    return [
        *[sys.executable, "-m", "ragbench.cli", "ingest", "--source", str(source)],
        "--db",
        str(db),
        "--collection",
        "c",
        "--config",
        json.dumps(spec),
    ]


def _child_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def ingest_once(source: Path, db: Path, embedder: dict[str, Any]) -> Figures:
    """One ingest in a fresh process: wall time, documents, peak resident MB."""
    started = time.perf_counter()
    before = _child_peak_mb()
    done = subprocess.run(_command(source, db, embedder), capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    loaded, indexed, unchanged = map(int, _COUNTS.findall(done.stdout)[-1])
    peak = _child_peak_mb()
    return {
        "seconds": seconds,
        "documents": loaded,
        "indexed": indexed,
        "unchanged": unchanged,
        # ru_maxrss of children is the largest child's peak so far: a later, larger child
        # raises it, an earlier larger one hides a smaller one (sizes run smallest first)
        "peak_mb": peak if peak > before else None,
    }


def killed_and_resumed(source: Path, db: Path, embedder: dict[str, Any], n: int) -> Figures:
    """An ingest killed (SIGKILL) once half its documents are committed, then the same
    command again: what it found committed and what it still indexed."""
    store = db / "c" / "store.sqlite"
    proc = subprocess.Popen(
        _command(source, db, embedder), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    import sqlite3

    committed = 0
    while proc.poll() is None and committed < n // 2:
        time.sleep(0.2)
        if store.is_file():
            try:
                with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as con:
                    committed = con.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
            except sqlite3.Error:
                continue
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    after = ingest_once(source, db, embedder)
    return {"killed_at": committed, **after}


def measure(
    sizes: Sequence[int] = SIZES, embedder: dict[str, Any] = HASHING, work: Path | None = None
) -> Figures:
    """Ingest each size into a fresh collection; at the smallest, kill one and resume it."""
    root = work or Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    rows = []
    for n in sorted(sizes):
        source = corpus(root, n)
        db = Path(tempfile.mkdtemp(prefix=f"db-{n}-", dir=root))
        found = ingest_once(source, db, embedder)
        rows.append({"passages": n, **found, "rate": found["documents"] / found["seconds"]})
    n = min(sizes)
    db = Path(tempfile.mkdtemp(prefix="db-killed-", dir=root))
    resumed = killed_and_resumed(corpus(root, n), db, embedder, n)
    return {
        "embedder": embedder,
        "rows": rows,
        "resumed": {"passages": n, **resumed},
        "cpus": os.cpu_count(),
    }


# ---------------------------------------------------------------- RESULTS.md

HEADERS = ("passages", "wall time (s)", "passages/s", "peak memory (MB)", f"≤ {TARGET_MB:,} MB")


def draw(section: Figures) -> Lines:
    """Wall time, rate and peak memory per size, and the killed ingest resumed."""
    rows = []
    for r in section["rows"]:
        peak = r["peak_mb"]
        rows.append(
            (
                num(r["passages"]),
                num(r["seconds"], 1),
                num(r["rate"], 0),
                "–" if peak is None else num(peak, 0),
                "–" if peak is None else ("yes" if peak <= TARGET_MB else "**no**"),
            )
        )
    k = section["resumed"]
    embedder = section["embedder"]
    dim = embedder.get("dim", 384)
    per = dim * 4 + 2 * 16 * 4 + 4 + 8  # hnswlib's level-0 element: vector, links, count, label
    return [
        f"`ragbench ingest --source passages.jsonl` in a fresh process into a new collection: "
        "the pipeline defaults (hybrid RRF over BM25 and an hnsw store), one chunk per passage "
        f"(`chunker: none`), the `{embedder['kind']}` embedder"
        f"{' at ' + str(embedder['dim']) + ' dimensions' if 'dim' in embedder else ''}; the "
        "passages are the scale benchmark's seeded synthetic text (mean 150 words). Peak "
        "memory is the process's resident high-water mark (`ru_maxrss`).",
        "",
        table(HEADERS, rows),
        "",
        f"Killed (SIGKILL) once {num(k['killed_at'])} of {num(k['passages'])} passages were "
        f"committed, then the same command again: {num(k['unchanged'])} reported unchanged "
        f"(none embedded or indexed again), {num(k['indexed'])} indexed, in "
        f"{num(k['seconds'], 1)} s.",
        "",
        f"Of a million passages' peak, the hnsw store alone holds {num(per)} MB: "
        f"hnswlib keeps every vector with its graph links in memory ({num(per)} bytes a "
        f"passage at {dim} dimensions and M=16).",
    ]


INGEST = part("ingest", "Ingest at any size: streamed, resumable", draw)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    parser.add_argument("--work", type=Path)
    args = parser.parse_args(argv)
    embedder = HASHING if args.embedder == "hashing" else MINILM
    found = measure(args.sizes, embedder, args.work)
    print(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
