"""Every benchmark in one command, written to benchmarks/RESULTS.md.

``python -m benchmarks [--full] [--tiny] [--out FILE] [--runs DIR] [--cache DIR]
[--only SECTION ...] [--stores INDEX ...]``

* default (minutes): the BM25 SciFact reproduction through scifact-reproduce.yaml and the runner,
  metrics vs pytrec_eval, retrieval vs bm25s / rank-bm25 / numpy (+ hnsw recall on the cached
  SciFact MiniLM vectors when a finished run left them in the stage cache), the engine sweep and
  embedding throughput.
* ``--full`` adds the whole scifact-reproduce.yaml (MiniLM exact and hnsw), chunking.yaml,
  experiments/scifact-tuned.yaml when it exists, pseudo-relevance feedback on SciFact
  (scifact-prf.yaml), fine-tuning inside the sweep (scifact-finetune.yaml: models trained
  once, cached), sentence windows on the chunking evaluation (chunking-window.yaml), and
  the cross-encoder path and latency; they read the stage cache, so reruns cost minutes. It
  also runs the scale curve (exact, hnsw, BM25 and bm25s alone at 10k, 100k and 1M synthetic
  chunks, about an hour), the Dask executor against serial, and ragbench side by side with
  AutoRAG on the same SciFact sweep (AutoRAG in its own virtual environment, created on first
  use).
* ``--only SECTION ...`` runs the named sections; when ``--out`` already exists, only their
  parts of it are replaced (the other sections keep the figures of the run that wrote them).
* ``--stores INDEX ...`` measures only those indexes in the scale curve (e.g. ``bm25 bm25s``:
  ragbench's BM25 against bm25s alone); an existing file keeps its scale curve, whose rows
  such a run does not all measure.
* ``--tiny`` runs every section on tiny slices (a few documents and queries, the hashing
  embedder, tiny random models) into a temporary directory: a smoke test, not results.

Sections that need the shared datasets (``shared/datasets`` beside the repository) are
skipped, with the reason in the file, when they are absent. A failing section is recorded as
failed and the others still run; the exit code is 1 when any section failed. Each section of
the file is stamped with the command, date and commit that measured it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from benchmarks import bench_chunking, bench_prf, bench_quality, bench_scale, results
from benchmarks.machine import machine
from benchmarks.render import relative
from ragbench.experiment.latency import cpu_times, other_cpu_share

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "RESULTS.md"
TINY_QUERIES = 5
QUICKSTART = REPO / "experiments" / "quickstart.yaml"
INT8 = (
    '{"kind": "sentence-transformers", "model": "all-MiniLM-L6-v2", "max_seq_length": 256, '
    '"backend": "onnx", "quantize": "int8"}'
)
CACHE = "`RAGBENCH_CACHE` (default `~/.cache/ragbench`)"  # where the stage cache was, generically
WALL_EMBEDDER = [f"sweep.embedder=[{INT8}]", f"sweep.reranker[1].embedder={INT8}"]


@dataclass
class Settings:
    """What every section needs to know about this invocation."""

    full: bool
    tiny: bool
    runs: Path
    cache: str
    data: Path  # where tiny slices of the shared datasets are written
    stores: tuple[str, ...] = ()  # the scale curve's indexes (empty: all)

    def scifact(self) -> Path:
        """SciFact, or its tiny slice."""
        if not self.tiny:
            return bench_quality.SCIFACT
        return bench_quality.tiny_beir(bench_quality.SCIFACT, self.data / "scifact")

    def chunking_eval(self) -> Path:
        """Chroma's chunking evaluation set, or a one-corpus slice."""
        if not self.tiny:
            return bench_quality.CHUNKING_EVAL
        return bench_chunking.tiny_chunking(bench_quality.CHUNKING_EVAL, self.data / "chunking")

    def overrides(self, config: Path, dataset: Path, one_chunker: bool = False) -> list[str]:
        """Config overrides for a tiny run (none otherwise)."""
        if not self.tiny:
            return []
        return bench_quality.tiny_overrides(config, dataset, one_chunker)

    @property
    def limit(self) -> int | None:
        """Query limit of the quality runs."""
        return TINY_QUERIES if self.tiny else None


class Skip(Exception):
    """A section that does not apply to this invocation (the message says why)."""


def _need(path: Path) -> None:
    if not path.exists():
        raise Skip(f"dataset not available: {path.relative_to(REPO.parent)}")


# ---------------------------------------------------------------- sections


def scifact(s: Settings) -> dict[str, Any]:
    """BM25 reproduction (default) or the whole scifact-reproduce.yaml (``--full``/``--tiny``)."""
    _need(bench_quality.SCIFACT)
    dataset = s.scifact()
    full = s.full or s.tiny
    overrides = s.overrides(bench_quality.REPRODUCE, dataset)
    return bench_quality.scifact_reproduce(full, s.runs, s.cache, overrides, s.limit)


def chunking(s: Settings) -> dict[str, Any]:
    """chunking.yaml (``--full``)."""
    _need(bench_quality.CHUNKING_EVAL)
    dataset = s.chunking_eval()
    overrides = s.overrides(bench_chunking.CONFIG, dataset)
    return bench_chunking.chunking(s.runs, s.cache, overrides, s.limit)


def tuned(s: Settings) -> dict[str, Any]:
    """experiments/scifact-tuned.yaml if it exists (``--full``)."""
    if not bench_quality.TUNED.is_file():
        raise Skip(f"{bench_quality.TUNED.relative_to(REPO)} does not exist yet")
    _need(bench_quality.SCIFACT)
    overrides = s.overrides(bench_quality.TUNED, s.scifact(), one_chunker=True)
    found = bench_quality.tuned(s.runs, s.cache, overrides, s.limit)
    assert found is not None
    return found


def prf(s: Settings) -> dict[str, Any]:
    """scifact-prf.yaml: RM3 on BM25, selected on train, reported on test (``--full``)."""
    _need(bench_quality.SCIFACT)
    overrides = s.overrides(bench_prf.CONFIG, s.scifact())
    return bench_prf.prf(s.runs, s.cache, overrides, s.limit)


def finetune(s: Settings) -> dict[str, Any]:
    """scifact-finetune.yaml: models fine-tuned inside the sweep, a trained cross-encoder, and
    chunking-finetune.yaml, the held-out check (``--full``)."""
    from benchmarks import bench_finetune

    _need(bench_quality.SCIFACT)
    _need(bench_quality.CHUNKING_EVAL)
    overrides = bench_finetune.tiny_overrides(s.scifact()) if s.tiny else []
    held_out = bench_finetune.tiny_held_out(s.chunking_eval()) if s.tiny else []
    return bench_finetune.finetune(s.runs, s.cache, overrides, s.limit, held_out)


def window(s: Settings) -> dict[str, Any]:
    """chunking-window.yaml: sentence chunks with and without windows (``--full``)."""
    _need(bench_quality.CHUNKING_EVAL)
    overrides = s.overrides(bench_chunking.WINDOW_CONFIG, s.chunking_eval())
    return bench_chunking.chunking_window(s.runs, s.cache, overrides, s.limit)


def metrics(s: Settings) -> dict[str, Any]:
    """ragbench metrics vs pytrec_eval on a synthetic run."""
    from benchmarks import bench_metrics

    if s.tiny:
        return bench_metrics.measure(queries=50, depth=100, repeat=1)
    return bench_metrics.measure()


def retrieval(s: Settings) -> dict[str, Any]:
    """BM25 vs bm25s / rank-bm25, exact vs numpy, hnsw (real MiniLM vectors when cached)."""
    from benchmarks import bench_retrieval

    _need(bench_quality.SCIFACT)
    if s.tiny:
        return bench_retrieval.measure(s.scifact(), n_queries=TINY_QUERIES, repeat=1)
    found = bench_retrieval.cached_minilm_vectors(cache_root=s.cache)
    if found is None:
        return bench_retrieval.measure(bench_quality.SCIFACT)
    vectors, query_vectors, source = found
    return bench_retrieval.measure(
        bench_quality.SCIFACT,
        vectors=vectors,
        query_vectors=query_vectors,
        vector_source=source,
    )


def engine(s: Settings) -> dict[str, Any]:
    """The 12-trial engine sweep on the demo set (hashing embedder when tiny)."""
    from benchmarks import bench_engine

    if s.tiny:
        return bench_engine.measure("demo", TINY_QUERIES, bench_quality.HASHING, repeat=1)
    return bench_engine.measure("demo")


def embed(s: Settings) -> dict[str, Any]:
    """ragbench's sentence-transformers embedder vs a direct encode on SciFact abstracts."""
    from benchmarks import bench_embed
    from benchmarks.models import local_model

    _need(bench_quality.SCIFACT)
    if s.tiny:
        texts = bench_embed.texts_of(s.scifact(), 10)
        return bench_embed.measure(texts, str(local_model("tiny-bi-encoder", s.cache)), repeat=1)
    return bench_embed.measure(bench_embed.texts_of(bench_quality.SCIFACT, 300))


def onnx(s: Settings) -> dict[str, Any]:
    """Torch against the ONNX backend (fp32, int8): texts/s on 300 SciFact abstracts, and
    nDCG@10 of each on SciFact through scifact-onnx.yaml (``--full``)."""
    from benchmarks import bench_embed
    from benchmarks.models import local_model

    _need(bench_quality.SCIFACT)
    overrides = [f"dataset.path={json.dumps(str(s.scifact()))}"]
    if s.tiny:
        model = str(local_model("tiny-bi-encoder", s.cache))
        speed = bench_embed.backends(bench_embed.texts_of(s.scifact(), 10), model, repeat=1)
        overrides += [f"sweep.embedder[{i}].model={json.dumps(model)}" for i in (0, 1)]
    else:
        speed = bench_embed.backends(bench_embed.texts_of(bench_quality.SCIFACT, 300))
    return bench_embed.onnx_quality(speed, overrides, s.runs, s.limit, s.cache)


def latency(s: Settings) -> dict[str, Any]:
    """The same dense sweep's latency pass, quiet and under two CPU burners (``--full``)."""
    from benchmarks import bench_latency

    if s.tiny:
        return bench_latency.measure(
            queries=TINY_QUERIES, embedder=bench_quality.HASHING, processes=1
        )
    return bench_latency.measure()


def estimate(s: Settings) -> dict[str, Any]:
    """The dry run's estimate of a cold SciFact sweep against the cold run (``--full``)."""
    from benchmarks import bench_estimate

    _need(bench_quality.SCIFACT)
    if s.tiny:
        return bench_estimate.measure(s.scifact(), bench_quality.HASHING, TINY_QUERIES)
    return bench_estimate.measure()


def agreement(s: Settings) -> dict[str, Any]:
    """Real labels against generated ones (the default method, five seeds; an LLM's as a floor)
    on SciFact and the chunking evaluation: do they rank one sweep's trials alike? (``--full``)"""
    from benchmarks import bench_agreement

    _need(bench_quality.SCIFACT)
    _need(bench_quality.CHUNKING_EVAL)
    if not s.tiny:
        return bench_agreement.measure(s.runs, s.cache)
    scifact, chunking = s.scifact(), s.chunking_eval()
    overrides = {
        "scifact": s.overrides(bench_agreement.SCIFACT_CONFIG, scifact),
        "chunking": s.overrides(bench_agreement.CHUNKING_CONFIG, chunking),
    }
    return bench_agreement.measure(
        s.runs,
        s.cache,
        scifact,
        chunking,
        overrides,
        n=6 * TINY_QUERIES,  # some with span evidence; the runs evaluate TINY_QUERIES of them
        seeds=1,
        limit=TINY_QUERIES,
        llm_n=0,
        judged_ks=(2, TINY_QUERIES),
    )


def sample(s: Settings) -> dict[str, Any]:
    """optimize's default sweep on 10%, 25% and 50% samples of SciFact and of the chunking
    evaluation (five seeds), labels generated from the sample, against the real labels over
    every document (``--full``)."""
    from benchmarks import bench_sample

    _need(bench_quality.SCIFACT)
    _need(bench_quality.CHUNKING_EVAL)
    if not s.tiny:
        return bench_sample.measure(s.runs, s.cache)
    return bench_sample.measure(
        s.runs,
        s.cache,
        s.scifact(),
        s.chunking_eval(),
        [f"sweep.embedder={json.dumps([bench_quality.HASHING])}"],
        fractions=(50,),
        seeds=1,
    )


def rerank(s: Settings) -> dict[str, Any]:
    """The cross-encoder path on scifact-rerank.yaml and its latency (``--full``)."""
    from benchmarks import bench_rerank

    _need(bench_quality.SCIFACT)
    if s.tiny:
        return bench_rerank.measure(
            queries=2,
            proof_queries=2,
            candidates=(5, 10, 20),
            tiny=True,
            runs=s.runs,
            cache_root=s.cache,
            dataset=str(s.scifact()),
            extra=["sweep.reranker[1].max_length=128", "sweep.reranker[1].candidates=10"],
        )
    return bench_rerank.measure(runs=s.runs, cache_root=s.cache)


def serve(s: Settings) -> dict[str, Any]:
    """`ragbench serve` on the demo collection: HTTP search latency one at a time, and errors
    and latency of 1,000 requests 50 at once, beside the server of an earlier commit."""
    from benchmarks import bench_serve

    if s.tiny:
        return bench_serve.measure(queries=10, tiny=True, requests=200)
    return bench_serve.measure()


def ingest(s: Settings) -> dict[str, Any]:
    """`ragbench ingest` of 100k and 1M synthetic passages streamed into a collection (wall
    time, rate, peak memory), and one killed half-way and resumed (``--full``; tiny: 2,000)."""
    from benchmarks import bench_ingest

    return bench_ingest.measure((2_000,) if s.tiny else bench_ingest.SIZES)


def wall(s: Settings) -> dict[str, Any]:
    """A cold scifact-tuned.yaml sweep against embedding its distinct texts once: the config
    as written (torch), then with the ONNX int8 embedder for the trials and the dense reranker
    (``--full``; tiny: the demo set, hashing embedder, 5 queries)."""
    from benchmarks import bench_wall

    if s.tiny:
        demo = s.overrides(QUICKSTART, REPO / "datasets" / "demo")
        return {"runs": [bench_wall.measure(QUICKSTART, demo, TINY_QUERIES)]}
    _need(bench_quality.SCIFACT)
    as_written = bench_wall.measure(bench_wall.TUNED)
    return {"runs": [as_written, bench_wall.measure(bench_wall.TUNED, WALL_EMBEDDER)]}


def scale(s: Settings) -> dict[str, Any]:
    """Exact, hnsw, BM25 and bm25s alone (or ``--stores``) at 10k, 100k and 1M synthetic
    chunks, plotted (``--full``; tiny: 1k and 3k chunks; the plot goes to the run directory
    when tiny or restricted)."""
    stores = s.stores or bench_scale.STORES
    if s.tiny:
        found = bench_scale.measure((1_000, 3_000), 4 * TINY_QUERIES, stores=stores)
    else:
        found = bench_scale.measure(stores=stores)
    whole = not (s.tiny or found["restricted"])
    path = REPO / "benchmarks" / "scale.png" if whole else s.runs / "scale.png"
    found["plot"] = relative(bench_scale.plot(found, path))
    return found


def peers(s: Settings) -> dict[str, Any]:
    """ragbench against AutoRAG in its own virtual environment, on SciFact (``--full``; not
    with ``--tiny``: the environment alone is a 3 GB install)."""
    from benchmarks import bench_peers

    if s.tiny:
        raise Skip(
            "needs AutoRAG's own virtual environment (a 3 GB install of minutes), which a "
            "smoke run does not create; it runs with --full"
        )
    _need(bench_quality.SCIFACT)
    return bench_peers.measure(work=s.runs / "peers")


def dask(s: Settings) -> dict[str, Any]:
    """Serial, process-pool and Dask executors on one CPU-bound demo sweep (``--full``)."""
    from benchmarks import bench_dask

    if s.tiny:
        return bench_dask.measure(limit_queries=TINY_QUERIES, sizes=(300,))
    return bench_dask.measure()


# The SciFact sweep runs first so that its peak RSS is not inflated by the other sections.
SECTIONS: list[tuple[str, Callable[[Settings], dict[str, Any]]]] = [
    ("scifact", scifact),
    ("chunking", chunking),
    ("tuned", tuned),
    ("prf", prf),
    ("finetune", finetune),
    ("window", window),
    ("metrics", metrics),
    ("retrieval", retrieval),
    ("engine", engine),
    ("embed", embed),
    ("rerank", rerank),
    ("onnx", onnx),
    ("latency", latency),
    ("estimate", estimate),
    ("agreement", agreement),
    ("sample", sample),
    ("serve", serve),
    ("ingest", ingest),
    ("wall", wall),
    ("scale", scale),
    ("dask", dask),
    ("peers", peers),
]


FULL_ONLY = {  # sections that run with --full (and --tiny) only
    *("chunking", "tuned", "prf", "finetune", "window", "rerank", "onnx", "latency", "estimate"),
    *("agreement", "sample", "ingest", "wall", "scale", "dask", "peers"),
}


def run_sections(s: Settings, only: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Run every section (or those in ``only``); failures are recorded, not raised."""
    out: dict[str, dict[str, Any]] = {}
    for name, section in SECTIONS:
        if only and name not in only:
            out[name] = {"skipped": "not selected (--only)"}
            continue
        started = time.perf_counter()
        print(f"[benchmarks] {name} ...", file=sys.stderr, flush=True)
        try:
            if name in FULL_ONLY and not (s.full or s.tiny):
                raise Skip("runs with --full")
            out[name] = section(s)
        except Skip as why:
            out[name] = {"skipped": str(why)}
        except Exception as exc:  # one broken section must not lose the others' figures
            traceback.print_exc()
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        out[name]["_seconds"] = time.perf_counter() - started
        state = next((k for k in ("skipped", "error") if k in out[name]), "done")
        print(
            f"[benchmarks] {name}: {state} ({out[name]['_seconds']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--full", action="store_true", help="add the expensive sections")
    parser.add_argument("--tiny", action="store_true", help="every section on tiny slices")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the Markdown file to write")
    parser.add_argument("--runs", type=Path, default=None, help="where run directories go")
    parser.add_argument("--cache", type=Path, default=None, help="stage cache root")
    parser.add_argument("--only", nargs="+", choices=[n for n, _ in SECTIONS], default=[])
    parser.add_argument(
        "--stores", nargs="+", choices=bench_scale.STORES, default=[], help="scale curve indexes"
    )
    args = parser.parse_args(argv)

    from ragbench.index.cache import default_cache_root

    cache = str(args.cache or default_cache_root())
    temporary = None
    if args.runs is not None:
        runs = args.runs
    elif args.tiny:
        temporary = Path(tempfile.mkdtemp(prefix="ragbench-bench-tiny-"))
        runs = temporary
    else:
        runs = REPO / "runs" / "bench"
    settings = Settings(args.full, args.tiny, runs, cache, runs / "data", tuple(args.stores))
    cpu_start = cpu_times()
    started = time.perf_counter()
    try:
        sections = run_sections(settings, args.only)
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    seconds = time.perf_counter() - started
    command = "python -m benchmarks" + "".join(
        f" --{flag}" for flag in ("full", "tiny") if getattr(args, flag)
    )
    command += f" --only {' '.join(args.only)}" if args.only else ""
    command += f" --stores {' '.join(args.stores)}" if args.stores else ""
    found = {
        "mode": "tiny" if args.tiny else "full" if args.full else "default",
        "command": command,
        "machine": machine(),
        "cache": "the `--cache` directory" if args.cache else CACHE,
        "runs": relative(runs),
        "runs_kept": temporary is None,
        "seconds": seconds,
        "other_cpu": other_cpu_share(cpu_start, cpu_times(), seconds),
        "sections": sections,
    }
    if args.only and args.out.is_file():
        path = results.update(found, args.out, args.only)
    else:
        path = results.write(found, args.out)
    print(f"wrote {path}")
    return 1 if any("error" in v for v in sections.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
