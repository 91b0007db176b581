"""Sweep wall time against embedding time: what a cold sweep costs beyond embedding its texts.

Embedding dominates a cold sweep, so a sweep should cost little more than embedding each of
its distinct texts once. This benchmark, in one process and one run:

1. collects the sweep's distinct texts: the chunks of every chunking its trials embed (a text
   shared by two chunkings counts once) and the queries of the splits it evaluates;
2. embeds them once with the sweep's embedder (the model loaded and warmed up first), timed;
3. runs the whole sweep from an empty stage cache (``runner.run``: quality pass, latency pass,
   selection and report included), timed.

Overhead = sweep wall time / embedding time − 1 (target ≤ 15%). The default sweep is
experiments/scifact-tuned.yaml (108 trials, selected on train, reported on test).
``python -m benchmarks.bench_wall [--config FILE] [--set KEY=VALUE ...] [--limit-queries N]``
prints the figures; ``measure()`` returns them as a dict.

``WALL`` draws its RESULTS.md section.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.render import REPO, Figures, Lines, met, num, part, percent, relative, table
from ragbench.data import load_dataset
from ragbench.experiment import runner
from ragbench.experiment.config import ExperimentConfig, expand, load_config
from ragbench.experiment.latency import cpu_times, other_cpu_share
from ragbench.registry import components
from ragbench.text.chunkers import build_chunker, chunk_documents

TUNED = REPO / "experiments" / "scifact-tuned.yaml"


def distinct_texts(config: ExperimentConfig, limit: int | None = None) -> dict[str, Any]:
    """The texts a sweep embeds, each once: chunks of the chunkings its embedding trials use,
    and the queries of its sweep and report splits; and the embedder spec they share."""
    trials = expand(config)
    embedded = [t for t in trials if t.get("embedder") is not None]
    specs = {json.dumps(t["embedder"].model_dump(mode="json"), sort_keys=True) for t in embedded}
    if len(specs) != 1:
        raise ValueError(f"the sweep must use one embedder (it uses {len(specs)})")
    chunkers = {t["chunker"].key(): t["chunker"] for t in embedded}
    splits = dict.fromkeys([config.sweep_split, config.evaluation.report_on or config.sweep_split])
    texts: set[str] = set()
    queries = 0
    documents = None
    for split in splits:
        labeled = load_dataset(
            config.dataset_path(),
            format=config.dataset.format,
            split=split,
            queries=config.queries_path(),
        )
        found = [q.text for q in labeled.queries][:limit]
        queries += len(found)
        texts.update(found)
        documents = labeled.documents
    assert documents is not None
    chunks = 0
    for chunker in chunkers.values():
        pieces = [c.text for c in chunk_documents(build_chunker(chunker), documents)]
        chunks += len(pieces)
        texts.update(pieces)
    return {
        "embedder": json.loads(next(iter(specs))),
        "texts": sorted(texts),
        "chunkings": len(chunkers),
        "chunks": chunks,
        "queries": queries,
        "trials": len(trials),
    }


def measure(
    config_path: Path = TUNED,
    overrides: Sequence[str] = (),
    limit: int | None = None,
    work: Path | None = None,
) -> dict[str, Any]:
    """Embed the sweep's distinct texts once, then run the sweep cold; both timed."""
    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-bench-wall-") as tmp:
            return measure(config_path, overrides, limit, Path(tmp))
    config = load_config(config_path, overrides)
    found = distinct_texts(config, limit)
    before, began = cpu_times(), time.perf_counter()
    embedder = components("embedder").build(found["embedder"])
    embedder.embed(found["texts"][:2], "document")  # load the model, warm up
    started = time.perf_counter()
    embedder.embed(found["texts"], "document")
    embed_s = time.perf_counter() - started
    started = time.perf_counter()
    result = runner.run(
        config, work / "run", limit_queries=limit, cache_root=work / "cache", progress=False
    )
    wall_s = time.perf_counter() - started
    trials = result.trials
    return {
        "config": relative(config_path),
        "overrides": list(overrides),
        "trials": found["trials"],
        "failed": int((trials["status"] != "ok").sum()),
        "chunkings": found["chunkings"],
        "chunks": found["chunks"],
        "queries": found["queries"],
        "distinct_texts": len(found["texts"]),
        "embedder": found["embedder"],
        "embed_s": embed_s,
        "wall_s": wall_s,
        "overhead": wall_s / embed_s - 1,
        "other_cpu": other_cpu_share(before, cpu_times(), time.perf_counter() - began),
    }


# ---------------------------------------------------------------- RESULTS.md

HEADERS = ("embedder", "embedding the texts once (s)", "cold sweep (s)", "overhead", "others' CPU")


def _row(run: Figures) -> tuple[str, ...]:
    """One sweep: its embedder, embedding time, wall time and overhead."""
    embedder = run["embedder"]
    backend = embedder.get("backend", "torch")
    backend += " int8" if embedder.get("quantize") == "int8" else ""
    as_written = "" if run["overrides"] else " (as written)"
    return (
        f"`{embedder.get('model')}` on {backend}{as_written}",
        num(run["embed_s"], 1),
        num(run["wall_s"], 1),
        f"{100 * run['overhead']:+.1f}%",
        percent(run.get("other_cpu")),
    )


def draw(section: Figures) -> Lines:
    """Each cold sweep against embedding its distinct texts once."""
    first = section["runs"][0]
    return [
        f"`{first['config']}` ({first['trials']} trials, {first['failed']} failed): its "
        f"{num(first['distinct_texts'])} distinct texts ({num(first['chunks'])} chunks of "
        f"{first['chunkings']} chunkings, {num(first['queries'])} queries) embedded once in one "
        "call, then the whole sweep from an empty stage cache (quality and latency passes, "
        "selection and the report split where the config has them, report files), in the same "
        "process after the model was loaded. One row per embedder: the config as written, then "
        "the same sweep with its embedder (trials and dense reranker) on another backend.",
        "",
        table(HEADERS, [_row(run) for run in section["runs"]]),
        "",
        f"Target (the config as written): overhead ≤ 15% "
        f"{met(first['overhead'], 0.15, lower_is_better=True)}.",
    ]


WALL = part("wall", "Sweep wall time against embedding time", draw)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_wall")
    parser.add_argument("--config", type=Path, default=TUNED)
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--limit-queries", type=int, default=None)
    args = parser.parse_args(argv)
    m = measure(args.config, args.set, args.limit_queries)
    print(
        f"{m['config']}: {m['trials']} trials, {m['distinct_texts']} distinct texts "
        f"({m['chunks']} chunks over {m['chunkings']} chunkings, {m['queries']} queries)"
    )
    print(f"embedding them once: {m['embed_s']:.1f} s; cold sweep: {m['wall_s']:.1f} s")
    print(f"overhead {100 * m['overhead']:+.1f}% (target <= 15%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
