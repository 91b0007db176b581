"""benchmarks/RESULTS.md, assembled from the sections the benchmark modules draw.

Every benchmark module measures and draws its own ``###`` sections (``benchmarks.render.Part``);
this module puts them in order under the title, the regeneration commands, the machine and an
overview, and heads each with its stamp: the command that measured it, when and at which
commit. ``write`` renders the whole file from one run; ``update`` (``--only``) draws again the
sections whose measurements ran and keeps every other part of an existing file verbatim, so a
file can hold sections measured by different runs, each saying which.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import (
    bench_agreement,
    bench_chunking,
    bench_dask,
    bench_embed,
    bench_engine,
    bench_estimate,
    bench_finetune,
    bench_ingest,
    bench_latency,
    bench_peers,
    bench_prf,
    bench_quality,
    bench_rerank,
    bench_retrieval,
    bench_sample,
    bench_scale,
    bench_serve,
    bench_wall,
    bm25s_alone,
    machine,
)
from benchmarks.render import Lines, Part, num, status, table

BUSY_WARNING = 0.10  # share of CPU time used by other processes above which a run is flagged

# The parts of the file in order, under their group headings.
GROUPS: dict[str, list[Part]] = {
    "## Quality": [
        bench_quality.SCIFACT_PART,
        bench_chunking.CHUNKING,
        bench_quality.TUNED_PART,
        bench_prf.PRF,
        bench_finetune.FINETUNE,
        bench_chunking.WINDOW,
        bench_rerank.PROOF,
        bench_agreement.AGREEMENT,
        bench_sample.SAMPLE,
    ],
    "## Speed": [
        bench_retrieval.LIBRARIES,
        bench_engine.ENGINE,
        bench_rerank.LATENCY,
        bench_quality.MEMORY,
        bench_embed.ONNX,
        bench_latency.LATENCY,
        bench_estimate.ESTIMATE,
        bench_serve.SERVE,
        bench_ingest.INGEST,
        bench_wall.WALL,
        bench_scale.SCALE,
        bm25s_alone.BM25S,
        bench_dask.DASK,
        bench_peers.PEERS,
    ],
}

SECTION_TITLES = {
    "scifact": "SciFact reproduction (scifact-reproduce.yaml)",
    "chunking": "Chunking evaluation (chunking.yaml)",
    "tuned": "Tuned sweep with honest selection (scifact-tuned.yaml)",
    "prf": "Pseudo-relevance feedback on SciFact (scifact-prf.yaml)",
    "finetune": "Fine-tuning inside the sweep on SciFact (scifact-finetune.yaml)",
    "window": "Sentence windows on the chunking evaluation (chunking-window.yaml)",
    "metrics": bench_retrieval.TITLES["metrics"],
    "retrieval": bench_retrieval.TITLES["retrieval"],
    "engine": "Engine (12-trial sweep)",
    "embed": bench_retrieval.TITLES["embed"],
    "rerank": "Cross-encoder path and latency (scifact-rerank.yaml)",
    "onnx": "ONNX backend against torch (scifact-onnx.yaml)",
    "latency": "Latency pass, quiet and under CPU burners",
    "estimate": "Dry-run estimate against the cold run",
    "agreement": "Agreement of generated labels with real ones",
    "sample": "Sweeps on a sample of the documents",
    "serve": "Search server latency (ragbench serve)",
    "ingest": "Ingest at any size: streamed, resumable",
    "wall": "Sweep wall time against embedding time (scifact-tuned.yaml)",
    "scale": "Scale curve: exact, hnsw and BM25 to 1M chunks",
    "dask": "Dask executor against serial",
    "peers": "Side by side with AutoRAG (same sweep, same metric code)",
}
OVERVIEW = "## Sections"
REGENERATE = "## How to regenerate"


def _header(results: dict[str, Any]) -> Lines:
    kept = results["runs_kept"]
    where = (
        f"`{results['runs']}` (kept)" if kept else "a temporary directory (removed after the run)"
    )
    lines = [
        "# ragbench benchmark results",
        "",
        "Each section opens with the command that measured it, when and at which commit "
        "(`--only` measures the named sections again and keeps the others as they are). Every "
        "figure was measured by that command, or read back from the run directories it produced "
        "(named per section). Published reference values are labelled as such; they come from "
        "the shared datasets README.",
        "",
        f"Run directories: {where}.",
    ]
    if results["mode"] == "tiny":
        lines += [
            "",
            "> **Tiny smoke run.** Slices of a few documents and queries, the hashing embedder "
            "instead of MiniLM and tiny random models: these numbers only show that every "
            "benchmark runs. They are not results.",
        ]
    return lines


def _regenerate() -> Lines:
    return [
        REGENERATE,
        "",
        "```bash",
        "make bench                              # = python -m benchmarks (default: cheap parts)",
        "python -m benchmarks                    # BM25 reproduction, metrics, retrieval, engine,",
        "                                        # embedding throughput (minutes)",
        "python -m benchmarks --full             # + full scifact-reproduce.yaml, chunking.yaml,",
        "                                        # scifact-tuned.yaml (if present),",
        "                                        # scifact-prf.yaml, scifact-finetune.yaml,",
        "                                        # chunking-window.yaml,",
        "                                        # cross-encoder, scale curve to 1M chunks,",
        "                                        # Dask executor, AutoRAG side by side",
        "python -m benchmarks --full --only prf window   # those sections, replaced in place",
        "python -m benchmarks --full --only scale --stores bm25 bm25s   # BM25 against bm25s",
        "                                        # alone at scale (the scale curve is kept)",
        "python -m benchmarks --tiny --out tiny.md   # smoke test on tiny slices",
        "python -m benchmarks.bench_retrieval    # one benchmark on its own; also bench_metrics,",
        "                                        # bench_engine, bench_embed, bench_rerank,",
        "                                        # bench_quality, bench_scale, bench_dask",
        "```",
        "",
        "The expensive parts read the stage cache (`RAGBENCH_CACHE`, default `~/.cache/ragbench`), "
        "so a rerun of `--full` costs minutes; `ragbench run CONFIG --dry-run` shows what is "
        "cached. Run directories go to `runs/bench/` (`--runs DIR`).",
    ]


def _overview_rows(results: dict[str, Any]) -> dict[str, list[str]]:
    """Section title → its row of the overview: whether it was measured, and in how long."""
    rows = {}
    for key, title in SECTION_TITLES.items():
        section = results["sections"].get(key)
        state = "measured"
        if section is None:
            state = "not run"
        elif "skipped" in section:
            state = f"skipped: {section['skipped']}"
        elif "error" in section:
            state = "**failed**"
        rows[title] = [title, state, num(section.get("_seconds") if section else None, 1)]
    return rows


def _overview(rows: dict[str, list[str]]) -> Lines:
    return [OVERVIEW, "", table(["section", "status", "seconds"], rows.values())]


def stamp(results: dict[str, Any], keys: Sequence[str]) -> str:
    """The line under a section's heading: which command measured it, when, at which commit."""
    m = results["machine"]
    commit = (m["commit"] or "unknown") + (" (with uncommitted changes)" if m["dirty"] else "")
    measured = any(not status(results["sections"].get(k)) for k in keys)
    line = (
        f"{'Measured' if measured else 'Written'} by `{results['command']}` on {m['date']} "
        f"at commit {commit}."
    )
    busy = results.get("other_cpu")
    if measured and busy is not None and busy > BUSY_WARNING:
        line += (
            f" **The machine was busy**: other processes used {100 * busy:.0f}% of its CPU "
            "time, so timings are inflated."
        )
    return line


def _draw(part: Part, results: dict[str, Any]) -> Lines:
    """One section: heading, stamp and what its benchmark draws."""
    return [part.heading, "", stamp(results, part.keys), "", *part.draw(results["sections"])]


def render(results: dict[str, Any]) -> str:
    """RESULTS.md for one benchmark run."""
    parts = [
        _header(results),
        _regenerate(),
        machine.draw(results["machine"], results["cache"]),
        _overview(_overview_rows(results)),
    ]
    for group, members in GROUPS.items():
        parts += [[group], *(_draw(p, results) for p in members)]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def write(results: dict[str, Any], path: Path) -> Path:
    """Render ``results`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results), encoding="utf-8")
    return path


def _blocks(text: str) -> list[Lines]:
    """``text`` cut before every ``##`` / ``###`` heading (the first block: the title)."""
    blocks: list[Lines] = [[]]
    for line in text.rstrip("\n").split("\n"):
        if line.startswith(("## ", "### ")):
            blocks.append([])
        blocks[-1].append(line)
    return [b[:-1] if b and b[-1] == "" else b for b in blocks]


def _put(blocks: list[Lines], new: Lines, before: Sequence[str]) -> None:
    """Replace the block headed like ``new``, or insert it after the last of the headings
    ``before`` (the parts drawn ahead of it, its group heading first) that the file has."""
    headings = [b[0] if b else "" for b in blocks]
    if new[0] in headings:
        blocks[headings.index(new[0])] = new
        return
    at = max((headings.index(h) for h in before if h in headings), default=len(blocks) - 1)
    blocks.insert(at + 1, new)


def _table_rows(block: Lines) -> dict[str, list[str]]:
    """First cell → cells of the body rows of the Markdown table in ``block``."""
    lines = [line for line in block if line.startswith("|")][2:]
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    return {r[0]: r for r in rows if r}


def update(results: dict[str, Any], path: Path, selected: Sequence[str]) -> Path:
    """Draw again, in the RESULTS.md at ``path``, the sections whose measurements are all in
    ``selected`` and complete (and their rows of the overview); every other part keeps its
    text verbatim, and so does a part the run measured only some of, when the file has it."""
    blocks = _blocks(path.read_text(encoding="utf-8"))
    headings = [b[0] if b else "" for b in blocks]
    for group, members in GROUPS.items():
        for i, part in enumerate(members):
            partial = part.heading in headings and not part.complete(results["sections"])
            if set(part.keys) <= set(selected) and not partial:
                _put(blocks, _draw(part, results), [group, *(p.heading for p in members[:i])])
    headings = [b[0] if b else "" for b in blocks]
    kept = _table_rows(blocks[headings.index(OVERVIEW)]) if OVERVIEW in headings else {}
    measured = _overview_rows(results)
    rows = {
        title: measured[title] if key in selected else kept.get(title, [title, "not run", "–"])
        for key, title in SECTION_TITLES.items()
    }
    _put(blocks, _overview(rows), [REGENERATE, "## Machine"])
    _put(blocks, _regenerate(), [])
    path.write_text("\n\n".join("\n".join(b) for b in blocks) + "\n", encoding="utf-8")
    return path
