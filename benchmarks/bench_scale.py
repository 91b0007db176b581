"""Scale curve: the exact, hnsw and BM25 indexes from 10k to 1M chunks of synthetic text, and
bm25s alone beside ragbench's BM25.

``python -m benchmarks.bench_scale [--sizes N ...] [--stores S ...] [--queries N]
[--hnsw-threads N] [--work DIR] [--plot FILE]`` prints, for every index (``--stores``: only
those) and size, the build time, the peak memory, the p50 / p95 latency of one query at a time,
the size on disk (the index's ``save``), and the growth exponent of each column fitted by least
squares on log-log axes; ``--plot`` draws the curves. With both ``bm25`` and ``bm25s``, it also
prints ragbench's BM25 over bm25s alone (``benchmarks.bm25s_alone``) and their top-10 agreement.

The corpus is seeded synthetic text of realistic length: 100–200 words per passage (uniform),
drawn from a Zipf–Mandelbrot distribution (p(r) ∝ 1 / (r + 2.7)) over a vocabulary of a million
words whose most frequent ones are Lucene's English stop set and the rest pronounceable
pseudo-words, shorter the more frequent. Passages are made in seeded batches, so a smaller
corpus is a prefix of a larger one. Queries: 3–10 words from the same distribution.

Dense vectors come from the ``hashing`` embedder (384 dimensions), embedded once for the largest
size into a raw float32 file (the embedding time is reported, not charged to the stores). Each
index at each size is then built in a fresh process (``--worker``) that reads its input batch by
batch: dense stores read their vectors from the file, BM25 (ragbench's and bm25s alone)
generates and tokenizes its texts (tokenizing is part of its build time). Without a dense store,
nothing is embedded. Peak memory is that process's resident-set high-water mark (``VmHWM``,
reset after start-up through /proc/self/clear_refs) minus its resident size at that point: what
building, querying and saving the index added. Latency is ``per_query`` (one
query at a time, the engine's own per-query timing) after a warm-up pass, at k=10; dense
latency excludes embedding the query. ``measure()`` returns the figures as a dict.

``SCALE`` draws its RESULTS.md section (``bm25s_alone.BM25S`` the comparison with bm25s).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import bm25s_alone
from benchmarks.render import Figures, Lines, num, part, percent, ratio, status, table
from ragbench.experiment.latency import cpu_times, other_cpu_share

SIZES = (10_000, 100_000, 1_000_000)
STORES = ("exact", "hnsw", "bm25", "bm25s")
DENSE = ("exact", "hnsw")
DIM = 384
K = 10
QUERIES = 300
WARM_UP = 20
HNSW_THREADS = 2
EMBED_PROCESSES = 2  # the corpus is input, not a measurement: embed it on every core
BATCH = 5_000  # passages per seeded batch: the unit of generation, embedding and adding
VOCABULARY = 1_000_000
ZIPF_SHIFT = 2.7  # Mandelbrot's q; the exponent is 1
PASSAGE_WORDS = (100, 200)
QUERY_WORDS = (3, 10)
VECTORS = "vectors.f32"
QUERY_VECTORS = "query-vectors.npy"
COLUMNS = ("build_s", "peak_mb", "p50_ms", "disk_mb")
# One query at a time is a matrix-vector product: BLAS threads only add hand-offs, which a busy
# machine stretches (see the exact store's second latency figure).
ONE_BLAS_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
_QUERY_STREAM = 1 << 30  # the seed stream of the queries, apart from every passage batch


@cache
def vocabulary() -> list[str]:
    """The words by frequency rank: Lucene's English stop set, then pseudo-words of
    consonant-vowel syllables, one syllable before two, two before three, and so on."""
    from ragbench.text.tokenize import ENGLISH_STOPWORDS

    syllables = [c + v for c in "bcdfghjklmnprstvz" for v in "aeiou"]
    pseudo = (
        word
        for length in itertools.count(1)
        for word in map("".join, itertools.product(syllables, repeat=length))
        if word not in ENGLISH_STOPWORDS
    )
    stop = sorted(ENGLISH_STOPWORDS)
    return stop + list(itertools.islice(pseudo, VOCABULARY - len(stop)))


@cache
def _cdf() -> np.ndarray:
    """Cumulative probability of each frequency rank."""
    cdf = np.cumsum(1.0 / (np.arange(1, VOCABULARY + 1) + ZIPF_SHIFT))
    return cdf / cdf[-1]


class Corpus:
    """Seeded synthetic passages and queries (see the module docstring), made ``batch``
    passages at a time."""

    def __init__(self, seed: int = 0, batch: int = BATCH) -> None:
        self.seed = seed
        self.batch = batch

    def _texts(self, rng: np.random.Generator, n: int, lengths: tuple[int, int]) -> list[str]:
        sizes = rng.integers(lengths[0], lengths[1] + 1, n)
        ranks = np.searchsorted(_cdf(), rng.random(int(sizes.sum())), side="right")
        ends = np.cumsum(sizes).tolist()
        words = vocabulary()
        picked = [words[r] for r in ranks.tolist()]
        return [" ".join(picked[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def part(self, index: int, n: int) -> tuple[list[str], list[str]]:
        """(ids, texts) of batch ``index`` of the first ``n`` passages."""
        start = index * self.batch
        rng = np.random.default_rng([self.seed, index])
        texts = self._texts(rng, self.batch, PASSAGE_WORDS)[: n - start]
        return [chunk_id(i) for i in range(start, start + len(texts))], texts

    def parts(self, n: int) -> int:
        """How many batches the first ``n`` passages take."""
        return -(-n // self.batch)

    def batches(self, n: int) -> Iterator[tuple[list[str], list[str]]]:
        """(ids, texts) of the first ``n`` passages, a batch at a time."""
        return (self.part(i, n) for i in range(self.parts(n)))

    def queries(self, n: int) -> list[str]:
        """``n`` query texts."""
        return self._texts(np.random.default_rng([self.seed, _QUERY_STREAM]), n, QUERY_WORDS)


def chunk_id(i: int) -> str:
    """The id of passage ``i``."""
    return f"c{i:07d}"


# ---------------------------------------------------------------- one index in a fresh process


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _reset_peak() -> bool:
    """Reset this process's VmHWM to its current resident size (Linux ≥ 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _embedder() -> Any:
    from ragbench.index.embedders import HashingConfig, HashingEmbedder

    return HashingEmbedder(HashingConfig(dim=DIM))


def _embed_part(seed: int, index: int, n: int) -> tuple[np.ndarray, int, int, float]:
    """Vectors of batch ``index``, its words and characters, and the seconds embedding took."""
    _, texts = Corpus(seed).part(index, n)
    started = time.perf_counter()
    vectors = _embedder().embed(texts)
    seconds = time.perf_counter() - started
    return vectors, sum(t.count(" ") + 1 for t in texts), sum(map(len, texts)), seconds


def _embed(work: Path, n: int, queries: int, seed: int) -> dict[str, Any]:
    """Embed the first ``n`` passages into ``VECTORS`` (in order, batches embedded by
    ``EMBED_PROCESSES`` processes) and the queries into ``QUERY_VECTORS``."""
    corpus = Corpus(seed)
    words = chars = 0
    seconds = 0.0
    started = time.perf_counter()
    with (
        open(work / VECTORS, "wb") as out,
        ProcessPoolExecutor(EMBED_PROCESSES) as pool,
    ):
        parts = range(corpus.parts(n))
        for vectors, w, c, s in pool.map(
            _embed_part, itertools.repeat(seed), parts, itertools.repeat(n)
        ):
            vectors.tofile(out)
            words, chars, seconds = words + w, chars + c, seconds + s
    np.save(work / QUERY_VECTORS, _embedder().embed(corpus.queries(queries), "query"))
    return {
        "chunks": n,
        "embed_wall_s": time.perf_counter() - started,
        "embed_s": seconds,
        "processes": EMBED_PROCESSES,
        "mean_words": words / n,
        "mean_chars": chars / n,
    }


def _dense(kind: str, work: Path, n: int, threads: int) -> tuple[Any, float]:
    """A ``kind`` store of the first ``n`` vectors, and the seconds its ``add`` calls took."""
    from ragbench.index.dense import ExactStore, HnswConfig, HnswStore

    store = ExactStore() if kind == "exact" else HnswStore(HnswConfig(threads=threads))
    seconds = 0.0
    with open(work / VECTORS, "rb") as source:
        for start in range(0, n, BATCH):
            rows = min(BATCH, n - start)
            vectors = np.fromfile(source, dtype=np.float32, count=rows * DIM).reshape(rows, DIM)
            ids = [chunk_id(i) for i in range(start, start + rows)]
            started = time.perf_counter()
            store.add(ids, vectors)
            seconds += time.perf_counter() - started
    return store, seconds


def _sparse(kind: str, corpus: Corpus, n: int, first_query: str) -> tuple[Any, float, Figures]:
    """A BM25 index of the first ``n`` passages (ragbench's, or bm25s alone), the seconds its
    adds and its build took (both build lazily, on the first search), and the passages' mean
    words and characters (counted outside the timing)."""
    from ragbench.index.sparse import BM25Index

    index = BM25Index() if kind == "bm25" else bm25s_alone.Bm25sAlone()
    seconds = 0.0
    words = chars = 0
    for ids, texts in corpus.batches(n):
        started = time.perf_counter()
        index.add(ids, texts)
        seconds += time.perf_counter() - started
        words += sum(t.count(" ") + 1 for t in texts)
        chars += sum(map(len, texts))
    started = time.perf_counter()
    index.search([first_query], K)
    seconds += time.perf_counter() - started
    return index, seconds, {"chunks": n, "mean_words": words / n, "mean_chars": chars / n}


def run_worker(
    kind: str, work: Path, n: int, queries: int, threads: int, seed: int
) -> dict[str, Any]:
    """Build, query and save one index in this (fresh) process; returns its figures."""
    from ragbench.retrieve.timed import per_query, percentiles_ms

    corpus = Corpus(seed)
    described: Figures = {}
    if kind in DENSE:
        vectors = np.load(work / QUERY_VECTORS)
    else:
        texts = corpus.queries(WARM_UP + queries)
        # part of the baseline, not of the index: the words, and the libraries both rows import
        _ = vocabulary(), _cdf(), bm25s_alone.libraries()
    reset = _reset_peak()
    baseline_kb = _status_kb("VmRSS")
    if kind in DENSE:
        index, build_s = _dense(kind, work, n, threads)
        search = lambda s: index.search(vectors[s], K)  # noqa: E731
    else:
        index, build_s, described = _sparse(kind, corpus, n, texts[0])
        search = lambda s: index.search(texts[s], K)  # noqa: E731
    built_kb = _status_kb("VmHWM")
    ranking, seconds = per_query(search, WARM_UP + queries, K, warm_up=False)
    p50, p95 = percentiles_ms(seconds[WARM_UP:])  # the first WARM_UP queries warm up
    resident_kb = _status_kb("VmRSS")
    folder = work / f"{kind}-{n}"
    started = time.perf_counter()
    index.save(folder)
    save_s = time.perf_counter() - started
    disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    shutil.rmtree(folder)
    return {
        "store": kind,
        "chunks": n,
        "build_s": build_s,
        "peak_mb": (_status_kb("VmHWM") - baseline_kb) / 1024,
        "build_peak_mb": (built_kb - baseline_kb) / 1024,
        "resident_mb": (resident_kb - baseline_kb) / 1024,
        "p50_ms": p50,
        "p95_ms": p95,
        "disk_mb": disk / 1024**2,
        "save_s": save_s,
        "peak_reset": reset,
        "top_ids": ranking.ids[WARM_UP:].tolist(),
        "top_scores": ranking.scores[WARM_UP:].tolist(),
        "corpus": described,
    }


# ---------------------------------------------------------------- the curve


def _in_fresh_process(
    work: Path, *args: str, one_blas_thread: bool = True
) -> tuple[dict[str, Any], float | None]:
    """Run ``--worker ...`` in a fresh interpreter (BLAS pinned to one thread unless told
    otherwise): its figures, and the share of the machine's CPU time other processes used
    meanwhile."""
    command = [sys.executable, "-m", "benchmarks.bench_scale", "--work", str(work), *args]
    env = {**os.environ, **(ONE_BLAS_THREAD if one_blas_thread else {})}
    before, started = cpu_times(), time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return found, other_cpu_share(before, cpu_times(), seconds)


def exponent(sizes: Sequence[float], values: Sequence[float]) -> float | None:
    """Slope of log(value) against log(size) by least squares (None with < 2 positive points)."""
    points = [(s, v) for s, v in zip(sizes, values, strict=True) if v is not None and v > 0]
    if len(points) < 2:
        return None
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def _recall(found: list[list[str]], truth: list[list[str]]) -> float:
    """Mean overlap of two rankings' top ids, as a share of the truth's."""
    shares = [len(set(f) & set(t)) / max(1, len(t)) for f, t in zip(found, truth, strict=True)]
    return float(np.mean(shares))


def _one_size(work: Path, n: int, stores: Sequence[str], common: list[str]) -> list[Figures]:
    """Every index of ``stores`` at ``n`` chunks, each in a fresh process; hnsw's recall against
    exact search and bm25s alone's agreement with ragbench's BM25 when both ran."""
    rows = []
    tops: dict[str, tuple[list[list[str]], list[list[float]]]] = {}
    for kind in stores:
        args = ["--worker", kind, "--size", str(n), *common]
        row, busy = _in_fresh_process(work, *args)
        tops[kind] = row.pop("top_ids"), row.pop("top_scores")
        if kind == "hnsw" and "exact" in tops:
            row["recall_at_10"] = _recall(tops["hnsw"][0], tops["exact"][0])
        if kind == "bm25s" and "bm25" in tops:
            row["agreement"] = bm25s_alone.agreement(tops["bm25s"][0], *tops["bm25"])
        if kind == "exact":  # the same search with numpy's default BLAS threads
            again, _ = _in_fresh_process(work, *args, one_blas_thread=False)
            row["p50_ms_default_blas"] = again["p50_ms"]
        rows.append({**row, "other_cpu": busy})
        print(f"[scale] {kind} {n:,}: {_line(row)}", file=sys.stderr, flush=True)
    return rows


def measure(
    sizes: Sequence[int] = SIZES,
    queries: int = QUERIES,
    hnsw_threads: int = HNSW_THREADS,
    work: Path | None = None,
    seed: int = 0,
    stores: Sequence[str] = STORES,
) -> dict[str, Any]:
    """Every index of ``stores`` at every size, each in a fresh process; work files go to
    ``work`` (default: a temporary directory, removed afterwards)."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-scale-") as tmp:
            return measure(sizes, queries, hnsw_threads, Path(tmp), seed, stores)
    work.mkdir(parents=True, exist_ok=True)
    sizes, stores = sorted(sizes), [kind for kind in STORES if kind in stores]
    common = ["--queries", str(queries), "--seed", str(seed), "--hnsw-threads", str(hnsw_threads)]
    started = time.perf_counter()
    corpus = None
    if set(stores) & set(DENSE):
        args = ["--worker", "embed", "--size", str(sizes[-1]), *common]
        corpus, _ = _in_fresh_process(work, *args)
    rows = [row for n in sizes for row in _one_size(work, n, stores, common)]
    (work / VECTORS).unlink(missing_ok=True)
    counted = [row.pop("corpus") for row in rows]
    if corpus is None:  # nothing embedded: the largest corpus as a BM25 worker counted it
        corpus = counted[-1]
    fits = {
        kind: {
            column: exponent(
                [r["chunks"] for r in rows if r["store"] == kind],
                [r[column] for r in rows if r["store"] == kind],
            )
            for column in COLUMNS
        }
        for kind in stores
    }
    return {
        "sizes": sizes,
        "stores": stores,
        "restricted": stores != list(STORES),
        "queries": queries,
        "warm_up": WARM_UP,
        "k": K,
        "dim": DIM,
        "hnsw_threads": hnsw_threads,
        "corpus": corpus,
        "rows": rows,
        "exponents": fits,
        "bm25s": bm25s_alone.compare(rows),
        "seconds": time.perf_counter() - started,
    }


def _line(row: dict[str, Any]) -> str:
    return (
        f"build {row['build_s']:.2f} s, peak {row['peak_mb']:.0f} MB, p50 {row['p50_ms']:.3f} ms, "
        f"disk {row['disk_mb']:.1f} MB"
    )


def plot(found: dict[str, Any], path: Path) -> Path:
    """The four columns against the number of chunks, log-log, one line per index, as a PNG."""
    from matplotlib.figure import Figure

    titles = {
        "build_s": "build time (s)",
        "peak_mb": "peak memory (MB)",
        "p50_ms": f"p50 query latency (ms, k={found['k']})",
        "disk_mb": "size on disk (MB)",
    }
    figure = Figure(figsize=(10, 7.5), layout="constrained")
    for axes, column in zip(figure.subplots(2, 2).flat, COLUMNS, strict=True):
        for kind in found["stores"]:
            rows = [r for r in found["rows"] if r["store"] == kind and r[column] > 0]
            slope = found["exponents"][kind][column]
            label = kind if slope is None else f"{kind} (n^{slope:.2f})"
            axes.plot([r["chunks"] for r in rows], [r[column] for r in rows], "o-", label=label)
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("chunks")
        axes.set_title(titles[column])
        axes.grid(True, which="both", alpha=0.3)
        axes.legend()
    figure.suptitle(
        f"ragbench indexes at scale (hashing embedder, {found['dim']} dims; "
        f"hnsw built with {found['hnsw_threads']} threads)"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


# ---------------------------------------------------------------- RESULTS.md

HASHING_RECALL = (
    "The hashing embedder's vectors of random text have almost no neighbourhood structure "
    "(a query's nearest passage is barely nearer than any other), the worst case for a graph "
    "index; these rows measure cost, not quality. On real MiniLM vectors of SciFact, hnsw's "
    "recall@10 against exact search is in the table above (Against the libraries ragbench "
    "wraps)."
)
MEASURED = (
    "Build: the stores' `add` calls over vectors read batch by batch (dense), or `add` of "
    "the texts (tokenizing included) plus the lazy build on the first search (BM25, and "
    "bm25s alone: see the next section). Peak "
    "memory: the process's resident high-water mark (`VmHWM`, reset after start-up) minus "
    "its resident size before the build, over build, queries and `save`. Query latency: "
    "{queries} queries one at a time through `per_query` after {warm_up} warm-up queries; "
    "dense latency excludes embedding the query, and BLAS is pinned to one thread. On disk: "
    "the files `save` writes. Growth exponent: the slope of a least-squares line through "
    "log(value) against log(chunks). Others' CPU: the share of the machine's CPU time other "
    "processes used while that index was measured (from /proc/stat)."
)


def _rows(section: Figures) -> list[tuple[str, ...]]:
    """Every index at every size, then its growth exponents."""
    rows = section["rows"]
    out: list[tuple[str, ...]] = []
    for kind in dict.fromkeys(r["store"] for r in rows):
        out += [
            (
                kind,
                num(r["chunks"]),
                num(r["build_s"], 2),
                num(r["peak_mb"], 0),
                num(r["p50_ms"], 3),
                num(r["p95_ms"], 3),
                num(r["disk_mb"], 1),
                percent(r["other_cpu"]),
            )
            for r in rows
            if r["store"] == kind
        ]
        fits = section["exponents"][kind]
        cells = (num(fits[c], 2) for c in ("build_s", "peak_mb", "p50_ms"))
        out.append((kind, "**growth exponent**", *cells, "–", num(fits["disk_mb"], 2), "–"))
    return out


def _corpus(section: Figures) -> str:
    """The synthetic corpus, its vectors (if embedded) and how the indexes were built."""
    corpus = section["corpus"]
    text = (
        f"{num(corpus['chunks'])} passages of seeded synthetic text (mean "
        f"{corpus['mean_words']:.0f} words, {corpus['mean_chars']:.0f} characters; words drawn "
        "from a Zipf–Mandelbrot distribution over a million-word vocabulary, Lucene's English "
        "stop set at the top), smaller corpora being prefixes of the largest"
    )
    if "embed_s" in corpus:
        text += (
            f"; dense vectors from the `hashing` embedder, {section['dim']} dimensions "
            f"(embedding {num(corpus['chunks'])} passages took {corpus['embed_wall_s']:.0f} s "
            f"with {corpus['processes']} processes, {corpus['chunks'] / corpus['embed_s']:.0f} "
            "passages/s per process; not counted in the build times)"
        )
    text += ". Each index at each size was built, queried and saved in a fresh process"
    if "hnsw" not in section["stores"]:
        return text + "."
    return text + (
        f"; **hnsw was built with {section['hnsw_threads']} threads** (`HnswConfig.threads`; "
        "faster, but two builds may differ — the default, 1 thread, builds the same graph every "
        "time), with the other defaults (M=16, ef_construction=200, ef_search=100)."
    )


def _asides(rows: list[Figures]) -> Lines:
    """Exact search with default BLAS threads, hnsw's recall (each when measured) and the
    build's own peak memory."""
    exact = [r for r in rows if r["store"] == "exact"]
    hnsw = [r for r in rows if r["store"] == "hnsw" and "recall_at_10" in r]
    builds = (
        f"{kind} "
        + ", ".join(f"{num(r['build_peak_mb'], 0)} MB" for r in rows if r["store"] == kind)
        for kind in dict.fromkeys(r["store"] for r in rows)
    )
    lines = []
    if exact:
        lines.append(
            "- Exact search one query at a time with numpy's default BLAS threads instead of "
            "one: "
            + ", ".join(
                f"p50 {num(r['p50_ms_default_blas'], 3)} ms at {num(r['chunks'])} chunks"
                for r in exact
            )
            + "."
        )
    if hnsw:
        lines.append(
            "- hnsw recall@10 against exact search, same queries: "
            + ", ".join(f"{num(r['recall_at_10'], 3)} at {num(r['chunks'])}" for r in hnsw)
            + ". "
            + HASHING_RECALL
        )
    builds_line = "; ".join(builds)
    return [*lines, f"- Peak memory of the build alone (before queries and `save`): {builds_line}."]


def draw(section: Figures) -> Lines:
    """Build time, peak memory, latency and size of each index against the corpus size."""
    headers = (
        "index",
        "chunks",
        "build (s)",
        "peak memory (MB)",
        f"p50 query (ms, k={section['k']})",
        "p95 query (ms)",
        "on disk (MB)",
        "others' CPU",
    )
    lines = [
        _corpus(section),
        "",
        table(headers, _rows(section)),
        "",
        MEASURED.format(queries=section["queries"], warm_up=section["warm_up"]),
        "",
        *_asides(section["rows"]),
    ]
    plot = section.get("plot")
    if plot == "benchmarks/scale.png":
        lines += ["", "![Build time, peak memory, latency and size against chunks](scale.png)"]
    elif plot:
        lines += ["", f"Plot: `{plot}`."]
    return lines


def _every_store(sections: Mapping[str, Figures]) -> bool:
    """Whether the scale section measured every index (a failed or skipped one counts: its
    block says so)."""
    section = sections.get("scale")
    if status(section) is not None:
        return True
    assert section is not None
    return not section["restricted"]


SCALE = part("scale", "Scale curve: exact, hnsw and BM25 from 10k to 1M chunks", draw, _every_store)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the curve (or, with ``--worker``, one index) and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--stores", nargs="+", choices=STORES, default=list(STORES))
    parser.add_argument("--queries", type=int, default=QUERIES)
    parser.add_argument("--hnsw-threads", type=int, default=HNSW_THREADS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--plot", type=Path, help="write the log-log curves to this PNG")
    parser.add_argument("--worker", choices=["embed", *STORES], help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "embed":
        print(json.dumps(_embed(args.work, args.size, WARM_UP + args.queries, args.seed)))
        return 0
    if args.worker:
        found = run_worker(
            args.worker, args.work, args.size, args.queries, args.hnsw_threads, args.seed
        )
        print(json.dumps(found))
        return 0
    cpu = cpu_times()
    found = measure(args.sizes, args.queries, args.hnsw_threads, args.work, args.seed, args.stores)
    busy = other_cpu_share(cpu, cpu_times(), found["seconds"])
    print(f"{'index':6} {'chunks':>10} {'build s':>9} {'peak MB':>8} {'p50 ms':>8} {'disk MB':>8}")
    for r in found["rows"]:
        print(
            f"{r['store']:6} {r['chunks']:>10,} {r['build_s']:>9.2f} {r['peak_mb']:>8.0f} "
            f"{r['p50_ms']:>8.3f} {r['disk_mb']:>8.1f}"
        )
    for kind, fits in found["exponents"].items():
        shown = "  ".join(f"{c} {'–' if v is None else f'{v:.2f}'}" for c, v in fits.items())
        print(f"{kind:6} growth exponents: {shown}")
    for pair in found["bm25s"]:
        shown = "  ".join(f"{c} {ratio(v)}" for c, v in pair["ratios"].items())
        agree = pair["bm25s"]["agreement"]
        print(
            f"bm25 / bm25s at {pair['chunks']:,}: {shown}  top-10 agreement "
            f"{percent(agree['top'])}, ties aside {percent(agree['ties_aside'])}"
        )
    share = "–" if busy is None else f"{100 * busy:.0f}%"
    print(f"total {found['seconds']:.0f} s; other processes used {share} of the machine's CPU")
    if args.plot:
        print(f"wrote {plot(found, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
