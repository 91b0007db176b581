"""Build benchmarks/RESULTS.md from the figures one ``python -m benchmarks`` run measured.

``render(results)`` turns the dict assembled by ``benchmarks.__main__`` (machine, mode and one
entry per section: the dict a ``measure``-style function returned, or ``{"skipped": why}`` /
``{"error": message}``) into Markdown. Every number in the file comes from that dict; the
only constants here are *published* reference values (marked as such, with their sources, from
/work/shared/datasets/README.md) and the speed targets the benchmark modules print.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ragbench.experiment.latency import cpu_times as cpu_times  # one implementation, shared
from ragbench.experiment.latency import other_cpu_share as other_cpu_share

REPO = Path(__file__).resolve().parents[1]

# Published SciFact test-split references (not measured here).
ANSERINI_FLAT = {"ndcg@10": 0.6789, "recall@100": 0.9253, "recall@1000": 0.9767}
BEIR_BM25 = {"ndcg@10": 0.665}
BEIR_BM25_CE = 0.688
MTEB_MINILM = {"ndcg@10": 0.64508, "recall@100": 0.925}
MTEB_BGE_SMALL = {"ndcg@10": 0.71273, "recall@100": 0.945}
# The goal for a MiniLM-based configuration selected on train, scored on test.
TUNED_TARGET = {"ndcg@10": 0.74}
SOURCES = {
    "anserini": "Anserini BM25 flat regression (castorini/anserini, beir-v1.0.0-scifact.flat)",
    "beir": "BEIR paper, Table 2 (Thakur et al. 2021)",
    "mteb": "MTEB (embeddings-benchmark/mtebpaper, all-MiniLM-L6-v2/SciFact.json)",
    "mteb_bge": "MTEB results (embeddings-benchmark/results, BAAI__bge-small-en-v1.5/SciFact.json)",
}
# Targets the benchmark modules print next to their figures (ratio: >1 means ragbench faster).
TARGETS = {
    "bm25_vs_bm25s": 0.9,
    "bm25_vs_rank_bm25": 50.0,
    "exact_vs_numpy": 0.8,
    "hnsw_recall_at_10": 0.99,
    "embed_ratio": 0.95,
    "embedded_times": 1.0,
    "warm_over_cold": 0.05,
    "overhead": 0.10,
}

BUSY_WARNING = 0.10  # share of CPU time used by other processes above which a run is flagged

TUNED_HEADERS = {
    "baseline": "baseline on the report split",
    "delta": "Δ vs baseline",
    "p": "p (paired permutation)",
}

SECTION_TITLES = {
    "scifact": "SciFact reproduction (scifact-reproduce.yaml)",
    "chunking": "Chunking evaluation (chunking.yaml)",
    "tuned": "Tuned sweep with honest selection (scifact-tuned.yaml)",
    "prf": "Pseudo-relevance feedback on SciFact (scifact-prf.yaml)",
    "window": "Sentence windows on the chunking evaluation (chunking-window.yaml)",
    "metrics": "Metrics vs pytrec_eval",
    "retrieval": "Retrieval vs bm25s / rank-bm25 / numpy",
    "engine": "Engine (12-trial sweep)",
    "embed": "Embedding throughput",
    "rerank": "Cross-encoder path and latency (scifact-rerank.yaml)",
    "onnx": "ONNX backend against torch (scifact-onnx.yaml)",
    "latency": "Latency pass, quiet and under CPU burners",
    "estimate": "Dry-run estimate against the cold run",
    "agreement": "Agreement of generated labels with real ones",
    "serve": "Search server latency (ragbench serve)",
    "wall": "Sweep wall time against embedding time (scifact-tuned.yaml)",
    "scale": "Scale curve: exact, hnsw and BM25 to 1M chunks",
    "dask": "Dask executor against serial",
}


# ---------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, Python, torch, platform, git commit and the date."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = int(line.split()[1]) / 1024**2
                break
    except OSError:
        pass
    versions = {}
    for name in ("torch", "sentence-transformers", "transformers", "numpy", "bm25s", "hnswlib"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gb": ram_gb,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": versions,
        "commit": _git(["rev-parse", "--short", "HEAD"]),
        "dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"])),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _git(args: list[str]) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


# ---------------------------------------------------------------- formatting


def num(value: Any, digits: int = 4) -> str:
    """A number with ``digits`` decimals, or an en dash for missing values."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def signed(value: Any, digits: int = 4) -> str:
    """A difference with its sign (zero when it rounds to zero)."""
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if abs(value) < 0.5 * 10**-digits:
        value = 0.0
    return f"{value:+.{digits}f}"


def ratio(value: Any) -> str:
    """A speed ratio (``1.23x``)."""
    return "–" if value is None else f"{value:.2f}x"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (cells already formatted)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def met(value: float | None, target: float, lower_is_better: bool = False) -> str:
    """Whether ``value`` meets ``target``."""
    if value is None:
        return "–"
    ok = value <= target if lower_is_better else value >= target
    return "yes" if ok else "**no**"


def _status(section: dict[str, Any] | None) -> str | None:
    """None for a measured section, else the line saying why it has no numbers."""
    if section is None:
        return "_Not run._"
    if "skipped" in section:
        return f"_Skipped: {section['skipped']}._"
    if "error" in section:
        return f"_Failed: `{section['error']}`._"
    return None


def _provenance(section: dict[str, Any]) -> str:
    rebuilt = ", ".join(section["rebuilt"]) or "none"
    return (
        f"Run directory `{section['run']}`, produced by this run ({section['queries']} queries, "
        f"{section['seconds']:.1f} s) from `{section['config']}`; before it, the stage cache held "
        f"{section['cached']} of its {section['stages']} stage artifacts (rebuilt: {rebuilt})."
    )


# ---------------------------------------------------------------- sections


def _header(results: dict[str, Any]) -> list[str]:
    mode = results["mode"]
    lines = [
        "# ragbench benchmark results",
        "",
        f"Generated by `{results['command']}` ({mode} mode) on {results['machine']['date']} in "
        f"{results['seconds'] / 60:.1f} minutes. Every figure below was measured by that command "
        "in that run, or read back from the run directories it produced (named per section). "
        "Published reference values are labelled as such; they come from "
        "`/work/shared/datasets/README.md`.",
    ]
    where = "temporary, removed after the run" if not results["runs_kept"] else "kept"
    lines += ["", f"Run directories: `{results['runs']}` ({where})."]
    busy = results.get("other_cpu")
    if busy is not None:
        lines += [
            "",
            f"Other processes used {100 * busy:.0f}% of the machine's CPU time during this run "
            "(from /proc/stat, minus this process and its children).",
        ]
        if busy > BUSY_WARNING:
            lines += [
                "",
                "> **The machine was busy** with other work during this run: timings are "
                "inflated and ratios between implementations less reliable.",
            ]
    if mode == "tiny":
        lines += [
            "",
            "> **Tiny smoke run.** Slices of a few documents and queries, the hashing embedder "
            "instead of MiniLM and tiny random models: these numbers only show that every "
            "benchmark runs. They are not results.",
        ]
    return lines


def _regenerate() -> list[str]:
    return [
        "## How to regenerate",
        "",
        "```bash",
        "make bench                              # = python -m benchmarks (default: cheap parts)",
        "python -m benchmarks                    # BM25 reproduction, metrics, retrieval, engine,",
        "                                        # embedding throughput (minutes)",
        "python -m benchmarks --full             # + full scifact-reproduce.yaml, chunking.yaml,",
        "                                        # scifact-tuned.yaml (if present),",
        "                                        # scifact-prf.yaml, chunking-window.yaml,",
        "                                        # cross-encoder, scale curve to 1M chunks,",
        "                                        # Dask executor",
        "python -m benchmarks --full --only prf window   # those sections, replaced in place",
        "python -m benchmarks --tiny --out /tmp/RESULTS.md   # smoke test on tiny slices",
        "python -m benchmarks.bench_retrieval    # one benchmark on its own; also bench_metrics,",
        "                                        # bench_engine, bench_embed, bench_rerank,",
        "                                        # bench_quality, bench_scale, bench_dask",
        "```",
        "",
        "The expensive parts read the stage cache (`RAGBENCH_CACHE`, default `~/.cache/ragbench`), "
        "so a rerun of `--full` costs minutes; `ragbench run CONFIG --dry-run` shows what is "
        "cached. Run directories go to `runs/bench/` (`--runs DIR`).",
    ]


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    commit = m["commit"] + (" (with uncommitted changes)" if m["dirty"] else "")
    rows = [
        ("CPU", m["cpu"]),
        ("cores", f"{m['cores']} (usable: {m['usable_cores']})"),
        ("RAM", f"{m['ram_gb']:.1f} GB" if m["ram_gb"] else "–"),
        ("Python", m["python"]),
        ("torch", m["versions"].get("torch", "–")),
        ("platform", m["platform"]),
        ("libraries", versions),
        ("ragbench commit", commit or "–"),
        ("date", m["date"]),
        ("stage cache", f"`{results['cache_root']}`"),
    ]
    return ["## Machine", "", table(["", ""], rows)]


def _overview(results: dict[str, Any]) -> list[str]:
    rows = []
    for key, title in SECTION_TITLES.items():
        section = results["sections"].get(key)
        if section is None:
            state = "not run"
        elif "skipped" in section:
            state = f"skipped: {section['skipped']}"
        elif "error" in section:
            state = "**failed**"
        else:
            state = "measured"
        seconds = section.get("_seconds") if section else None
        rows.append((title, state, num(seconds, 1)))
    return ["## Sections in this run", "", table(["section", "status", "seconds"], rows)]


def _scifact(section: dict[str, Any] | None) -> list[str]:
    lines = ["### SciFact (BEIR test split), document level", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    systems = section["systems"]
    lines += [_provenance(section), ""]
    rows = []
    bm25 = systems.get("bm25", {})
    for metric, published, source in [
        ("ndcg@10", ANSERINI_FLAT["ndcg@10"], "anserini"),
        ("ndcg@10", BEIR_BM25["ndcg@10"], "beir"),
        ("recall@100", ANSERINI_FLAT["recall@100"], "anserini"),
        ("recall@1000", ANSERINI_FLAT["recall@1000"], "anserini"),
    ]:
        ours = bm25.get(metric)
        delta = None if ours is None else ours - published
        rows.append(
            (
                "BM25 lucene k1=0.9 b=0.4, stem+stop",
                metric,
                num(ours),
                num(published),
                signed(delta),
                SOURCES[source],
            )
        )
    exact, hnsw = systems.get("dense-exact"), systems.get("dense-hnsw")
    embedder = str(section.get("embedder"))
    label = "MiniLM" if "minilm" in embedder.lower() else f"{embedder} embedder"
    if exact:
        for metric in ("ndcg@10", "recall@100"):
            ours, published = exact.get(metric), MTEB_MINILM[metric]
            delta = None if ours is None else ours - published
            rows.append(
                (
                    f"{label}, exact cosine",
                    metric,
                    num(ours),
                    num(published),
                    signed(delta),
                    SOURCES["mteb"],
                )
            )
    if exact and hnsw:
        fresh = "dense" in section["rebuilt"]
        when = "this run" if fresh else "stage cache (measured when first built)"
        rows += [
            (
                f"{label}, hnsw (defaults)",
                "ndcg@10",
                num(hnsw.get("ndcg@10")),
                "–",
                f"{signed(-section.get('hnsw_ndcg_loss', float('nan')))} vs exact",
                "loss against the exact row above",
            ),
            (
                f"{label}, hnsw vs exact",
                f"dense search p50 ms/query at k={section.get('depth', '?')}",
                f"{num(hnsw.get('dense_p50_ms'), 3)} vs {num(exact.get('dense_p50_ms'), 3)}",
                "–",
                f"speed-up {ratio(section.get('hnsw_speedup'))} (exact ÷ hnsw)",
                f"`latency.dense.p50_ms`, {when}",
            ),
        ]
    lines.append(
        table(
            ["system", "metric", "ours", "published", "Δ (ours − published)", "published source"],
            rows,
        )
    )
    if not section["full"]:
        lines += ["", "MiniLM exact and hnsw rows: _skipped (they run with `--full`)_."]
    lines += [
        "",
        "Anserini's flat index and BEIR's paper used different BM25 setups (0.6789 vs 0.665); "
        "ours follows Anserini's settings (lucene BM25, k1=0.9, b=0.4, English stopwords and "
        "stemming, title + text in one field), so the Anserini row is the one to compare against.",
    ]
    return lines


def _chunking(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Chunking evaluation (Chroma), span level, top 5 chunks", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    lines += [_provenance(section), ""]
    rows = []
    for r in section["rows"]:
        pub = r.get("published") or {}
        delta = r.get("delta") or {}
        rows.append(
            (
                r["chunker"],
                f"{r['size']} / {r['overlap']}",
                num(r.get("chunks")),
                num(r.get("mean_tokens"), 0),
                num(pub.get("mean_size")) if pub.get("mean_size") else "–",
                f"{r['recall']:.1f} (±{r.get('recall_ci95', float('nan')):.1f})",
                num(pub.get("recall"), 1),
                signed(delta.get("recall"), 1),
                num(r["precision"], 1),
                num(pub.get("precision"), 1),
                signed(delta.get("precision"), 1),
                num(r["iou"], 1),
                num(pub.get("iou"), 1),
                signed(delta.get("iou"), 1),
            )
        )
    lines.append(
        table(
            [
                "chunker",
                "size / overlap (cl100k)",
                "chunks",
                "mean size ours",
                "mean size published",
                "recall ours (95% CI)",
                "recall published",
                "Δ",
                "precision ours",
                "published",
                "Δ",
                "IoU ours",
                "published",
                "Δ",
            ],
            rows,
        )
    )
    embedder = section.get("embedder")
    lines += [
        "",
        f"Ours: embedder `{embedder}`, exact cosine search; percent, mean over the queries. "
        "Published: the all-MiniLM-L6-v2 table of Chroma's report (Recursive = LangChain "
        "RecursiveCharacterTextSplitter, TokenText = LangChain TokenTextSplitter; our `fixed` "
        "chunker with `unit: tokens` plays TokenText). Chunk sizes are counted with cl100k "
        "(`bpe-openai`) on the chunks this run used; the report gives mean sizes for Recursive "
        "only. The 95% CI is ±1.96 · std / √n of our per-query recall.",
        "",
    ]
    gap = section.get("max_recall_gap")
    beyond = [r for r in section["rows"] if "recall_by_corpus" in r]
    if gap is None:
        lines.append("No chunker matched a published row.")
    elif not beyond:
        lines.append(
            f"**Recall differences:** the largest |Δ recall| is {gap:.1f} points, so no chunker "
            "differs from the published recall by more than 3 points."
        )
    else:
        lines.append(
            f"**Recall differences beyond 3 points** (largest {gap:.1f}), broken down by corpus "
            "(span recall@5 per corpus, percent, computed from this run's per-query values):"
        )
        corpora = sorted({c for r in beyond for c in r["recall_by_corpus"]})
        lines += [
            "",
            table(
                ["chunker", "size / overlap", "Δ recall", "mean size ours / published", *corpora],
                [
                    (
                        r["chunker"],
                        f"{r['size']} / {r['overlap']}",
                        signed(r["delta"]["recall"], 1),
                        f"{num(r.get('mean_tokens'), 0)} / "
                        f"{num((r.get('published') or {}).get('mean_size'))}",
                        *(num(r["recall_by_corpus"].get(c), 1) for c in corpora),
                    )
                    for r in beyond
                ],
            ),
            "",
            "The published report gives no per-corpus numbers, so the breakdown shows where our "
            "recall sits, not which corpus moved. A chunker whose Δ lies inside our 95% CI moved "
            "by about as much as resampling the queries would move it.",
        ]
    return lines


def _tuned(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Tuned SciFact sweep, honest selection", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    lines += [
        _provenance(section),
        "",
        f"{section['trials']} trials ({section['failed']} failed); "
        f"baseline `{section['baseline']}`. {section['note']}",
        "",
    ]
    intervals = ("ci_low", "ci_high", "delta_ci_low", "delta_ci_high")
    columns = [c for c in section["columns"] if c not in intervals]
    headers = [TUNED_HEADERS.get(c, c) for c in columns]
    has_ci = "ci_low" in section["columns"]
    has_delta_ci = "delta_ci_low" in section["columns"]
    if has_delta_ci:
        headers.append("95% CI of Δ (paired bootstrap)")
    if has_ci:
        headers.append("95% CI of the chosen trial's mean (report split)")
    rows = []
    for record in section["selection"]:
        row = [
            num(record.get(c)) if isinstance(record.get(c), float) else str(record.get(c, "–"))
            for c in columns
        ]
        if has_delta_ci:
            row.append(f"[{num(record.get('delta_ci_low'))}, {num(record.get('delta_ci_high'))}]")
        if has_ci:
            row.append(f"[{num(record.get('ci_low'))}, {num(record.get('ci_high'))}]")
        rows.append(row)
    lines.append(table(headers, rows) if rows else "_No selection was recorded._")
    lines += _tuned_vs_published(section)
    same = [r["metric"] for r in section["selection"] if r.get("chosen") == section["baseline"]]
    if same:
        lines += [
            "",
            f"For {', '.join(same)} the selection chose the baseline itself, so there is no "
            "difference to test.",
        ]
    return lines


def _tuned_vs_published(section: dict[str, Any]) -> list[str]:
    """The chosen trials' report-split scores beside the published SciFact references."""
    report_on = "on test"  # the published numbers are of the test split
    if report_on not in section["columns"]:
        return []
    references = [
        ("BM25 (BEIR paper)", BEIR_BM25, SOURCES["beir"]),
        ("BM25 (Anserini flat)", ANSERINI_FLAT, SOURCES["anserini"]),
        ("all-MiniLM-L6-v2 (MTEB)", MTEB_MINILM, SOURCES["mteb"]),
        ("bge-small-en-v1.5, a larger model (MTEB)", MTEB_BGE_SMALL, SOURCES["mteb_bge"]),
    ]
    rows = []
    for record in section["selection"]:
        metric, ours = record.get("metric"), record.get(report_on)
        if not isinstance(ours, float):
            continue
        for name, values, source in references:
            if metric in values:
                delta = ours - values[metric]
                rows.append([metric, name, num(values[metric]), num(ours), f"{delta:+.4f}", source])
        if metric in TUNED_TARGET:
            target = TUNED_TARGET[metric]
            rows.append(
                [
                    metric,
                    "goal: MiniLM-based, selected on train",
                    num(target),
                    num(ours),
                    f"{ours - target:+.4f} ({'met' if ours >= target else 'not met'})",
                    "the issue",
                ]
            )
    if not rows:
        return []
    headers = ["metric", "reference", "published", f"ours ({report_on})", "Δ", "source"]
    return ["", "Against the published SciFact numbers (test split):", "", table(headers, rows)]


def _prf(section: dict[str, Any] | None) -> list[str]:
    lines = ["### SciFact: pseudo-relevance feedback (RM3) on BM25, honest selection", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    bm25 = section["bm25"]
    tokenizer = bm25.get("tokenizer", {})
    grid = [g for g in section["grid"] if g["prf"]]
    values = {k: sorted({g["prf"][k] for g in grid}) for k in grid[0]["prf"]} if grid else {}
    swept = ", ".join(f"{k} ∈ {{{', '.join(str(v) for v in vs)}}}" for k, vs in values.items())
    lines += [
        _provenance(section),
        "",
        f"BM25 {bm25.get('variant')} k1={bm25.get('k1')} b={bm25.get('b')}, stopwords "
        f"{tokenizer.get('stopwords')}, stemmer {tokenizer.get('stemmer')} (the BM25 of "
        f"scifact-reproduce.yaml), alone (the baseline) and with `query: prf` over the same "
        f"index: {swept} ({len(section['grid'])} trials). Each metric's best trial on split "
        f"'{section['select_on']}' was evaluated once on '{section['report_on']}' "
        f"({section['report_queries']} queries) with the baseline; Δ and p are over those "
        "queries (p: paired permutation test, 10,000 sign flips; wins / ties / losses of the "
        "chosen trial per query).",
        "",
    ]
    rows = [
        (
            c["metric"],
            c["label"],
            num(c["selected"]),
            num(c["baseline_selected"]),
            num(c["reported"]),
            num(c["baseline_reported"]),
            signed(c["delta"]),
            num(c["p"]),
            f"{c['wins']} / {c['ties']} / {c['losses']}",
        )
        for c in section["chosen"]
    ]
    lines.append(
        table(
            [
                "metric",
                "chosen on train",
                "on train",
                "BM25 on train",
                "on test",
                "BM25 on test",
                "Δ on test",
                "p",
                "wins / ties / losses",
            ],
            rows,
        )
    )
    baseline_on = {c["metric"]: c for c in section["chosen"]}
    best_rows = [
        (
            b["metric"],
            b["label"],
            num(b["selected"]),
            num(baseline_on[b["metric"]]["baseline_selected"]),
            num(b["reported"]),
            num(baseline_on[b["metric"]]["baseline_reported"]),
            signed(b["delta"]),
            num(b["p"]),
            f"{b['wins']} / {b['ties']} / {b['losses']}",
        )
        for b in section.get("best_prf", [])
    ]
    if best_rows:
        lines += [
            "",
            "prf against BM25 alone whatever the selection chose: each metric's best prf trial "
            f"on '{section['select_on']}', evaluated once on '{section['report_on']}':",
            "",
            table(
                [
                    "metric",
                    "best prf trial on train",
                    "on train",
                    "BM25 on train",
                    "on test",
                    "BM25 on test",
                    "Δ on test",
                    "p",
                    "wins / ties / losses",
                ],
                best_rows,
            ),
        ]
    metrics = [m for m in ("ndcg@10", "recall@100") if any(m in g for g in section["grid"])]
    grid_rows = [
        (
            *(str(g["prf"][k]) if g["prf"] else "– (BM25 alone)" for k in values),
            *(num(g.get(m)) for m in metrics),
        )
        for g in section["grid"]
    ]
    lines += [
        "",
        f"Every trial on '{section['select_on']}' (mean over its queries):",
        "",
        table([*values, *(f"{m} ({section['select_on']})" for m in metrics)], grid_rows),
    ]
    for b in section.get("best_prf", []):
        if b["metric"] != "ndcg@10":
            continue
        chose = next(c for c in section["chosen"] if c["metric"] == "ndcg@10")
        picked = "BM25 alone" if chose["is_baseline"] else "a prf trial"
        lines += [
            "",
            f"**nDCG@10:** the selection on train chose {picked}; the best prf trial on train "
            f"scores {b['reported']:.4f} on test against BM25's "
            f"{chose['baseline_reported']:.4f}: {'a gain' if b['delta'] > 0 else 'a loss'} of "
            f"{abs(b['delta']):.4f} (paired permutation p = {b['p']:.4f}; "
            f"{'significant' if b['p'] < 0.05 else 'not significant'} at 0.05).",
        ]
    return lines


def _window(section: dict[str, Any] | None) -> list[str]:
    lines = [
        "### Sentence windows on the chunking evaluation (Chroma), span level, top 5 chunks",
        "",
    ]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    rows = []
    for r in section["rows"]:
        paired = r.get("vs_plain")
        rows.append(
            (
                r["chunker"],
                r["postprocess"],
                num(r.get("chunks")),
                num(r.get("mean_tokens"), 0),
                f"{r['recall']:.1f} (±{r['recall_ci95']:.1f})",
                num(r["precision"], 1),
                num(r["iou"], 1),
                signed(paired["delta"], 1) if paired else "–",
                num(paired["p"]) if paired else "–",
                f"{paired['wins']} / {paired['ties']} / {paired['losses']}" if paired else "–",
            )
        )
    lines += [
        _provenance(section),
        "",
        table(
            [
                "chunks",
                "postprocess",
                "texts scored",
                "mean size (cl100k)",
                "span recall@5 (95% CI)",
                "precision@5",
                "IoU@5",
                "Δ recall vs no window",
                "p",
                "wins / ties / losses",
            ],
            rows,
        ),
        "",
        f"Embedder `{section['embedder']}`, exact cosine search; percent, mean over the "
        "queries. `sentence`: whole sentences packed up to 100 cl100k tokens; `sentence_window`: "
        "one sentence embedded, 2 sentences of context on each side kept with it. With "
        "`postprocess: window` each hit is replaced by its window (2 sentences on each side of "
        "a sentence chunk; a sentence-window chunk's stored window) and the span metrics score "
        "the window's characters — the text an LLM would be shown. Texts scored and their mean "
        "size are those of the chunk set the ranking refers to (the windows, for window "
        "trials). Δ and p: paired over the queries against the same chunking without windows "
        "(p: paired permutation test, 10,000 sign flips).",
    ]
    by_key = {(r["chunker"], r["postprocess"]): r for r in section["rows"]}
    plain, windowed = by_key.get(("sentence", "none")), by_key.get(("sentence", "window"))
    if plain and windowed:
        gain = windowed["recall"] - plain["recall"]
        larger = windowed.get("mean_tokens", float("nan")) / plain.get("mean_tokens", 1.0)
        lines += [
            "",
            f"**Span recall@5, sentence chunks with windows vs without:** {windowed['recall']:.1f} "
            f"vs {plain['recall']:.1f} ({gain:+.1f} points, p = {windowed['vs_plain']['p']:.4f}); "
            f"precision {windowed['precision']:.1f} vs {plain['precision']:.1f}: the windows hold "
            f"{larger:.1f}x the text of the chunks (a chunk cut out of a long sentence gets that "
            "whole sentence and two more on each side), so they cover more evidence with more "
            "text.",
        ]
    return lines


def _rerank_proof(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Cross-encoder reranking path (scifact-rerank.yaml)", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    lines += [
        f"`{section['config']}` ran end to end with "
        f"`--set sweep.reranker[1].model=<tiny random BERT cross-encoder>` on the first "
        f"{section['proof_queries']} test queries (run directory `{section['proof_run']}`):",
        "",
        table(
            ["reranker", "status", "nDCG@10", "recall@100", "rerank p50 ms"],
            [
                (
                    r["reranker"],
                    r["status"],
                    num(r["ndcg@10"]),
                    num(r["recall@100"]),
                    num(r["rerank_p50_ms"], 1),
                )
                for r in section["proof"]
            ],
        ),
        "",
        "**The reranked nDCG is meaningless**: no trained cross-encoder installs offline, so the "
        "models here have random weights; only their latency is real. BEIR's BM25+CE "
        f"(SciFact nDCG@10 {BEIR_BM25_CE}, cross-encoder/ms-marco-MiniLM-L-6-v2 over BM25 top 100) "
        "cannot be reproduced offline here. With the model available the one command is "
        "`ragbench run experiments/scifact-rerank.yaml`.",
    ]
    return lines


def _speed(sections: dict[str, Any]) -> list[str]:
    lines = ["### Against the libraries ragbench wraps", ""]
    rows = []
    retrieval, metrics, embed = (sections.get(k) for k in ("retrieval", "metrics", "embed"))
    if retrieval and not _status(retrieval):
        ours, direct, okapi = (r["query_s"] for r in retrieval["bm25"])
        n = retrieval["queries"]
        rows += [
            (
                f"BM25 search, {n} queries (tokenize + retrieve, s)",
                num(ours),
                f"bm25s {num(direct)}",
                ratio(retrieval["bm25_vs_bm25s"]),
                "≥ 0.9x",
                met(retrieval["bm25_vs_bm25s"], TARGETS["bm25_vs_bm25s"]),
            ),
            (
                f"BM25 search, {n} queries (s)",
                num(ours),
                f"rank-bm25 {num(okapi)}",
                ratio(retrieval["bm25_vs_rank_bm25"]),
                "≥ 50x",
                met(retrieval["bm25_vs_rank_bm25"], TARGETS["bm25_vs_rank_bm25"]),
            ),
        ]
        dense = retrieval["dense"]
        nq = retrieval["dense_queries"]
        rows += [
            (
                f"exact dense search, {nq} queries (s)",
                num(dense[1]["query_s"]),
                f"numpy {num(dense[0]['query_s'])}",
                ratio(retrieval["exact_vs_numpy"]),
                "≥ 0.8x",
                met(retrieval["exact_vs_numpy"], TARGETS["exact_vs_numpy"]),
            ),
            (
                f"hnsw search, {nq} queries (s)",
                num(dense[2]["query_s"]),
                f"ragbench exact {num(dense[1]['query_s'])}",
                ratio(retrieval["hnsw_vs_exact"]),
                "–",
                "–",
            ),
            (
                "hnsw recall@10 against exact",
                num(retrieval["hnsw_recall_at_10"]),
                "–",
                "–",
                "≥ 0.99",
                met(retrieval["hnsw_recall_at_10"], TARGETS["hnsw_recall_at_10"]),
            ),
        ]
    if metrics and not _status(metrics):
        shape = f"{num(metrics['queries'])} queries × depth {num(metrics['depth'])}"
        rows += [
            (
                f"metrics, evaluate_run on a dict run, {shape} (s)",
                num(metrics["ragbench_dict_s"]),
                f"pytrec_eval {num(metrics['pytrec_eval_s'])}",
                ratio(metrics["speed_dict"]),
                "–",
                "–",
            ),
            (
                f"metrics, evaluate on Ranking arrays, {shape} (s)",
                num(metrics["ragbench_arrays_s"]),
                f"pytrec_eval {num(metrics['pytrec_eval_s'])}",
                ratio(metrics["speed_arrays"]),
                "–",
                "–",
            ),
            (
                "metrics, max per-query difference to pytrec_eval",
                f"{metrics['max_abs_diff']:.1e}",
                "–",
                "–",
                "≤ 1e-9",
                met(metrics["max_abs_diff"], 1e-9, lower_is_better=True),
            ),
            (
                "metrics, import + first call in a fresh process (s)",
                num(metrics["cold_start_s"], 3),
                "–",
                "–",
                "–",
                "–",
            ),
        ]
    if embed and not _status(embed):
        rows.append(
            (
                f"embedding, {embed['texts']} SciFact abstracts (texts/s)",
                num(embed["ragbench_per_s"], 1),
                f"SentenceTransformer.encode {num(embed['direct_per_s'], 1)}",
                ratio(embed["ratio"]),
                "≥ 0.95x",
                met(embed["ratio"], TARGETS["embed_ratio"]),
            )
        )
    if rows:
        lines.append(
            table(
                [
                    "measurement",
                    "ragbench",
                    "reference",
                    "ratio (>1: ragbench faster)",
                    "target",
                    "met",
                ],
                rows,
            )
        )
    else:
        lines.append("_No comparison was measured in this run._")
    notes = []
    for key in ("retrieval", "metrics", "embed"):
        status = _status(sections.get(key))
        if status:
            notes.append(f"{SECTION_TITLES[key]}: {status}")
    if retrieval and not _status(retrieval):
        builds = ", ".join(f"{r['label']} {r['build_s']:.2f} s" for r in retrieval["bm25"])
        notes.append(
            f"BM25 over {num(retrieval['documents'])} {retrieval['dataset']} documents, "
            f"k={retrieval['k']}; "
            f"index builds (not in the ratios): {builds}. Dense vectors: {retrieval['dense_note']}"
            + (
                "."
                if retrieval["real_vectors"]
                else " — **random vectors**: hnsw recall on real embeddings differs."
            )
        )
    if embed and not _status(embed):
        notes.append(
            f"Embedding: model `{Path(embed['model']).name}`, batch {embed['batch_size']}, "
            "max_seq_length "
            f"{embed['max_seq_length']}, mean {embed['mean_chars']:.0f} characters per text; "
            f"ragbench {num(embed['ragbench_s'], 2)} s vs direct {num(embed['direct_s'], 2)} s "
            "(fastest of the "
            f"passes, run alternately); largest difference between the two sets of vectors "
            f"{embed['max_abs_diff']:.1e}."
        )
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return lines


def _engine(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Engine: 12-trial sweep, one chunker and one embedder", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    rows = [
        (
            "corpus embedded (times)",
            num(section["embedded_times"], 2),
            "1",
            met(section["embedded_times"], 1.0, True),
        ),
        ("cold sweep (s, fresh stage cache)", num(section["cold_s"], 2), "–", "–"),
        ("warm sweep (s, same cache)", num(section["warm_s"], 2), "–", "–"),
        (
            "warm / cold",
            f"{100 * section['warm_over_cold']:.1f}%",
            "≤ 5%",
            met(section["warm_over_cold"], TARGETS["warm_over_cold"], True),
        ),
        (
            f"one hybrid trial through the engine (s, cold, best of {section.get('repeat', 1)})",
            num(section["engine_trial_s"], 2),
            "–",
            "–",
        ),
        ("the same trial by hand (s)", num(section["direct_trial_s"], 2), "–", "–"),
        (
            "engine overhead",
            f"{100 * section['overhead']:+.1f}%",
            "≤ 10%",
            met(section["overhead"], TARGETS["overhead"], True),
        ),
    ]
    lines += [
        f"Dataset `{section['dataset']}`, {section['trials']} trials, "
        f"{section['queries']} queries, "
        f"{section['distinct_chunks']} distinct chunks, embedder `{section['embedder']}`.",
        "",
        table(["figure", "value", "target", "met"], rows),
        "",
        "The engine trial includes what a run directory needs beyond the hand-written pipeline: "
        "loading the dataset into a run context, per-query timing of every stage, writing every "
        "stage artifact to the cache, metric@k curves and the run files.",
    ]
    return lines


def _rerank_latency(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Cross-encoder latency per query", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    rows = [
        (
            num(r["candidates"]),
            num(r["p50_ms"], 1),
            num(r["p95_ms"], 1),
            num(r["pairs_per_s"], 0),
            num(r["bm25_p50_ms"], 2),
            r["status"],
            "this run" if r["fresh"] else "stage cache",
        )
        for r in section["latency"]
    ]
    if section["latency_model"] == "tiny-cross-encoder":
        model = "`tiny-cross-encoder` (randomly initialised BERT, hidden 32, 2 layers; tiny run)"
    else:
        model = (
            f"`{section['latency_model']}` (randomly initialised; the architecture of "
            "cross-encoder/ms-marco-MiniLM-L-6-v2: BERT, hidden 384, 6 layers, 12 heads, "
            "intermediate 1536, max length 512)"
        )
    lines += [
        f"{model}, reranking BM25's top candidates for the first "
        f"{section['latency_queries']} SciFact test queries, one query at a time "
        f"(run directory `{section['latency_run']}`, columns `latency.rerank.p50_ms` / `p95_ms`).",
        "",
        table(
            [
                "candidates",
                "rerank p50 ms",
                "rerank p95 ms",
                "pairs/s at p50",
                "BM25 p50 ms",
                "status",
                "measured",
            ],
            rows,
        ),
        "",
        "Random weights: the ranking quality of this model is meaningless; the latency is real "
        "(it depends on the architecture and input lengths, not on the weights). A rerank stage "
        'found in the stage cache ("measured: stage cache") reports the latency measured when '
        "it was first built, by this benchmark's code (`python -m benchmarks.bench_rerank` or an "
        "earlier `--full`); delete those artifacts or use a fresh `--cache` to measure again.",
    ]
    return lines


def _memory(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Peak memory of the SciFact sweep", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    rebuilt = set(section["rebuilt"])
    model = (
        "the embedding model was loaded (document or query vectors were rebuilt)"
        if rebuilt & {"doc_vectors", "query_vectors"}
        else "no embedding model was loaded: every vector came from the stage cache"
    )
    lines.append(
        f"{section['peak_rss_mb']:.0f} MB: the largest `peak_rss_mb` in "
        f"`{section['run']}/trials.parquet` "
        "(the process's resident-set high-water mark, `ru_maxrss`, after each trial; this sweep "
        f"runs first in the benchmark process). In this run {model}."
    )
    return lines


def _others(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.0f}%"


HASHING_RECALL = (
    "The hashing embedder's vectors of random text have almost no neighbourhood structure "
    "(a query's nearest passage is barely nearer than any other), the worst case for a graph "
    "index; these rows measure cost, not quality. On real MiniLM vectors of SciFact, hnsw's "
    "recall@10 against exact search is in the table above (Against the libraries ragbench "
    "wraps)."
)


def _scale(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Scale curve: exact, hnsw and BM25 from 10k to 1M chunks", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    corpus, rows = section["corpus"], section["rows"]
    table_rows = []
    for kind in dict.fromkeys(r["store"] for r in rows):
        for r in (r for r in rows if r["store"] == kind):
            table_rows.append(
                (
                    kind,
                    num(r["chunks"]),
                    num(r["build_s"], 2),
                    num(r["peak_mb"], 0),
                    num(r["p50_ms"], 3),
                    num(r["p95_ms"], 3),
                    num(r["disk_mb"], 1),
                    _others(r["other_cpu"]),
                )
            )
        fits = section["exponents"][kind]
        cells = (num(fits[c], 2) for c in ("build_s", "peak_mb", "p50_ms"))
        table_rows.append((kind, "**growth exponent**", *cells, "–", num(fits["disk_mb"], 2), "–"))
    exact = [r for r in rows if r["store"] == "exact"]
    hnsw = [r for r in rows if r["store"] == "hnsw"]
    lines += [
        f"{num(corpus['chunks'])} passages of seeded synthetic text (mean "
        f"{corpus['mean_words']:.0f} words, {corpus['mean_chars']:.0f} characters; words drawn "
        "from a Zipf–Mandelbrot distribution over a million-word vocabulary, Lucene's English "
        "stop set at the top), smaller corpora being prefixes of the largest; dense vectors from "
        f"the `hashing` embedder, {section['dim']} dimensions (embedding "
        f"{num(corpus['chunks'])} passages took {corpus['embed_wall_s']:.0f} s with "
        f"{corpus['processes']} processes, {corpus['chunks'] / corpus['embed_s']:.0f} "
        "passages/s per process; not counted in the build times). Each index at each size was "
        "built, queried and saved in a fresh process; "
        f"**hnsw was built with {section['hnsw_threads']} threads** (`HnswConfig.threads`; "
        "faster, but two builds may differ — the default, 1 thread, builds the same graph every "
        "time), with the other defaults (M=16, ef_construction=200, ef_search=100).",
        "",
        table(
            [
                "index",
                "chunks",
                "build (s)",
                "peak memory (MB)",
                f"p50 query (ms, k={section['k']})",
                "p95 query (ms)",
                "on disk (MB)",
                "others' CPU",
            ],
            table_rows,
        ),
        "",
        "Build: the stores' `add` calls over vectors read batch by batch (dense), or `add` of "
        "the texts (tokenizing included) plus the lazy build on the first search (BM25). Peak "
        "memory: the process's resident high-water mark (`VmHWM`, reset after start-up) minus "
        "its resident size before the build, over build, queries and `save`. Query latency: "
        f"{section['queries']} queries one at a time through `per_query` after "
        f"{section['warm_up']} warm-up queries; dense latency excludes embedding the query, and "
        "BLAS is pinned to one thread. On disk: the files `save` writes. Growth exponent: the "
        "slope of a least-squares line through log(value) against log(chunks). Others' CPU: "
        "the share of the machine's CPU time other processes used while that index was "
        "measured (from /proc/stat).",
        "",
        "- Exact search one query at a time with numpy's default BLAS threads instead of one: "
        + ", ".join(
            f"p50 {num(r['p50_ms_default_blas'], 3)} ms at {num(r['chunks'])} chunks" for r in exact
        )
        + ".",
        "- hnsw recall@10 against exact search, same queries: "
        + ", ".join(f"{num(r['recall_at_10'], 3)} at {num(r['chunks'])}" for r in hnsw)
        + ". "
        + HASHING_RECALL,
        "- Peak memory of the build alone (before queries and `save`): "
        + "; ".join(
            f"{kind} "
            + ", ".join(f"{num(r['build_peak_mb'], 0)} MB" for r in rows if r["store"] == kind)
            for kind in dict.fromkeys(r["store"] for r in rows)
        )
        + ".",
    ]
    plot = section.get("plot")
    if plot == "benchmarks/scale.png":
        lines += ["", "![Build time, peak memory, latency and size against chunks](scale.png)"]
    elif plot:
        lines += ["", f"Plot: `{plot}`."]
    return lines


def _dask(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Executors: Dask LocalCluster against serial", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    names = {"serial": "serial", "process": "process pool", "dask": "Dask LocalCluster"}
    rows = [
        (
            names[r["executor"]],
            num(r["workers"]),
            num(r["seconds"], 1),
            ratio(r["speedup"]),
            num(r["failed"]),
            _others(r["other_cpu"]),
        )
        for r in section["rows"]
    ]
    same = "yes" if section["same_results"] else "**no**"
    lines += [
        f"One sweep on `{section['dataset']}`: {section['trials']} trials ("
        f"{section['chunkings']} recursive chunkings × BM25 with two k1, dense and hybrid RRF "
        f"over the `hashing` embedder), {section['queries']} queries, run by "
        "`ragbench.experiment.runner.run` on each executor from a cold stage cache of its own "
        "(wall time, cluster start-up included; workers are single-threaded processes).",
        "",
        table(
            ["executor", "workers", "wall time (s)", "speed-up vs serial", "failed", "others' CPU"],
            rows,
        ),
        "",
        f"Same trials and metrics on every executor: {same}. The machine has 2 cores, so 2 "
        "workers bound the speed-up at 2x; the parent process commits every trial itself.",
    ]
    return lines


def _onnx(section: dict[str, Any] | None) -> list[str]:
    lines = ["### ONNX backend: int8 MiniLM against torch, speed and SciFact quality", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    speed = section["speed"]
    quality = {q["backend"]: q for q in section["quality"]}
    torch_ndcg = quality.get("torch", {}).get("ndcg@10")
    names = {"torch": "torch", "onnx-fp32": "onnx", "onnx-int8": "onnx-int8"}
    rows = []
    for r in speed["rows"]:
        q = quality.get(names[r["backend"]], {})
        loss = None if torch_ndcg is None or "ndcg@10" not in q else torch_ndcg - q["ndcg@10"]
        rows.append(
            (
                r["backend"],
                num(r["per_s"], 1),
                ratio(r["speedup"]),
                num(r["mean_cosine"], 4),
                num(r["min_cosine"], 4),
                num(q.get("ndcg@10")),
                num(q.get("recall@100")),
                signed(-loss if loss is not None else None),
            )
        )
    int8 = next(r for r in speed["rows"] if r["backend"] == "onnx-int8")
    q8 = quality.get("onnx-int8", {})
    loss8 = None if torch_ndcg is None or "ndcg@10" not in q8 else torch_ndcg - q8["ndcg@10"]
    lines += [
        f"Speed: {speed['texts']} SciFact abstracts (title + text, mean {speed['mean_chars']:.0f} "
        f"characters), model `{Path(speed['model']).name}`, max_seq_length "
        f"{speed['max_seq_length']}; torch is `SentenceTransformer.encode` (batch "
        f"{speed['batch_size']}), the ONNX rows ragbench's embedder with `backend: onnx` "
        "(exported once and cached; batches of at most 1,024 padded tokens, texts sorted by "
        f"length); all three alternate, fastest of {speed['repeat']} passes. Quality: "
        f"`{section['run']}`, exact cosine over the whole corpus, {section['queries']} test "
        "queries.",
        "",
        table(
            [
                "backend",
                "texts/s",
                "vs torch",
                "cosine to torch (mean)",
                "cosine (min)",
                "nDCG@10",
                "R@100",
                "Δ nDCG@10 vs torch",
            ],
            rows,
        ),
        "",
        f"Target: int8 ≥ 2x torch's texts/s {met(int8['speedup'], 2.0)} with at most 0.005 "
        "nDCG@10 lost "
        + (met(loss8, 0.005, lower_is_better=True) if loss8 is not None else "(not measured)")
        + ". Why not sentence-transformers' `[onnx]` extra: it pulls optimum-onnx, which pins "
        "transformers < 4.58 and would downgrade sentence-transformers; ragbench exports with "
        "`torch.onnx.export` and needs only `onnxruntime` and `onnx` (`pip install "
        "ragbench[onnx]`).",
    ]
    return lines


def _serve(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Search server: `ragbench serve` on the demo collection", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    lines += [
        f"`ragbench serve` started in its own process on a collection of the demo set "
        f"({num(section['chunks'])} chunks, `{section['pipeline']}`, embedder "
        f"`{section['embedder']}`; ingested once in {section['ingest_s']} s, kept in the stage "
        f"cache); then {section['queries']} `POST /search` requests (k={section['k']}) one "
        "after another over one connection, timed at the client.",
        "",
        table(
            ["start-up (s)", "first request (ms)", "p50 (ms)", "p95 (ms)", "server p50 (ms)"],
            [
                (
                    num(section["startup_s"], 2),
                    num(section["first_ms"], 1),
                    num(section["p50_ms"], 1),
                    num(section["p95_ms"], 1),
                    num(section["server_p50_ms"], 1),
                )
            ],
        ),
        "",
        f"Target: p50 < {section['target_p50_ms']:.0f} ms "
        f"{met(section['p50_ms'], section['target_p50_ms'], lower_is_better=True)}.",
    ]
    return lines


def _wall(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Sweep wall time against embedding time", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    runs = section["runs"]
    first = runs[0]
    rows = []
    for run in runs:
        embedder = run["embedder"]
        backend = embedder.get("backend", "torch")
        backend += " int8" if embedder.get("quantize") == "int8" else ""
        rows.append(
            (
                f"`{embedder.get('model')}` on {backend}"
                + (" (as written)" if not run["overrides"] else ""),
                num(run["embed_s"], 1),
                num(run["wall_s"], 1),
                f"{100 * run['overhead']:+.1f}%",
                _others(run.get("other_cpu")),
            )
        )
    lines += [
        f"`{first['config']}` ({first['trials']} trials, {first['failed']} failed): its "
        f"{num(first['distinct_texts'])} distinct texts ({num(first['chunks'])} chunks of "
        f"{first['chunkings']} chunkings, {num(first['queries'])} queries) embedded once in one "
        "call, then the whole sweep from an empty stage cache (quality and latency passes, "
        "selection and the report split where the config has them, report files), in the same "
        "process after the model was loaded. One row per embedder: the config as written, then "
        "the same sweep with its embedder (trials and dense reranker) on another backend.",
        "",
        table(
            [
                "embedder",
                "embedding the texts once (s)",
                "cold sweep (s)",
                "overhead",
                "others' CPU",
            ],
            rows,
        ),
        "",
        f"Target (the config as written): overhead ≤ 15% "
        f"{met(first['overhead'], 0.15, lower_is_better=True)}.",
    ]
    return lines


def _latency(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Latency pass: the same sweep quiet and under CPU burners", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    rows = [
        (
            r["label"],
            num(r["quiet_p50_ms"], 2),
            num(r["quiet_cpu_p50_ms"], 2) if "quiet_cpu_p50_ms" in r else "–",
            num(r["busy_p50_ms"], 2),
            f"{r['busy_p50_ms'] / r['quiet_p50_ms']:.2f}×",
            f"{100 * r['quiet_contention']:.0f}%",
            f"{100 * r['busy_contention']:.0f}%",
            f"{100 * r['busy_interrupted']:.0f}%",
            r.get("quiet_threads", "–"),
        )
        for r in section["rows"]
    ]
    lines += [
        "One sweep on the demo set (MiniLM, recursive 400: dense, hybrid and BM25, with and "
        "without a dense rerank), its latency pass run twice in one benchmark, each time by "
        "`ragbench run --remeasure-latency` in fresh processes over a warm stage cache (so the "
        "first trial's pass is what loads the model), the fastest of "
        f"{section.get('processes', 1)} processes per trial (a process's memory layout alone "
        "moves BM25's sub-millisecond p50 by up to 2× on a quiet machine): as the machine is, "
        f"then with {section['burners']} processes spinning on the CPU. Each pass: "
        f"{section['queries']} "
        f"queries one at a time after a warm-up, {section['repeats']} repeats, each repeat's "
        "time less the time the measuring thread waited for a CPU (Linux schedstat), the "
        "fastest repeat per query and stage (a repeat the scheduler interrupted is first run "
        "again, up to 3 times), every thread pool fixed to one thread (`latency.threads`).",
        "",
        table(
            [
                "trial",
                "quiet p50 total (ms)",
                "quiet p50 CPU (ms)",
                "busy p50 total (ms)",
                "busy / quiet",
                "contention, quiet",
                "contention, busy",
                "repeats interrupted, busy",
                "thread pools (latency.threads)",
            ],
            rows,
        ),
        "",
        f"Worst difference {100 * section['worst']:.1f}%; target ≤ 25% "
        f"{met(section['worst'], 0.25, lower_is_better=True)}. Contention: the share of the "
        "machine's CPU time other processes used during the pass; the report flags trials "
        "measured above 20%.",
    ]
    return lines


def _estimate(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Dry-run estimate against the cold run", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    rows = [
        (r["label"], r["work"], num(r["estimated_s"], 1), num(r["measured_s"], 1))
        for r in section["rows"]
    ]
    ratio = section["ratio"]
    within = 0.5 <= ratio <= 2
    return [
        *lines,
        f"`ragbench run --dry-run` on a {section['dataset']} sweep (whole abstracts: BM25, dense "
        "MiniLM int8 and their RRF hybrid) over an empty stage cache, then the same sweep run "
        "cold in a fresh process over another empty cache. The dry run computes the chunkings, "
        "loads each model and times it on a sample of the texts it will embed; a stage trials "
        f"share is counted for the first. The dry run itself took {section['dry_run_s']:.0f} s.",
        "",
        table(["trial", "work the dry run found", "estimated (s)", "measured (s)"], rows),
        "",
        f"Total: estimated {section['estimated_s']:.0f} s, measured {section['measured_s']:.0f} s "
        f"(the trials; {section['wall_s']:.0f} s with loading the data): estimate / measured "
        f"{ratio:.2f}, target within 2× {'✓' if within else '✗'}.",
    ]


def _agreement_row(name: str, a: dict[str, Any]) -> tuple[str, ...]:
    """One set's agreement on one metric."""
    tied = len(a["best_synthetic"]) > 1
    return (
        name,
        a["metric"],
        f"{a['tau']:.3f} ({a['tau_low']:.3f} to {a['tau_high']:.3f})",
        f"{a['rho']:.3f}",
        "tie" if tied else ("yes" if a["same_best"] else "no"),
        f"{a['regret']:+.4f}",
        _one_line(a["confidence"] or "–"),
    )


AGREEMENT_HEADERS = (
    "set",
    "metric",
    "Kendall τ-b (95% CI)",
    "Spearman ρ",
    "same best",
    "regret",
    "confidence in the generated set's pick",
)


def _one_line(label: str) -> str:
    """A trial label on one line (chunker separators hold newlines)."""
    return label.encode("unicode_escape").decode("ascii", "replace")


def _seed_spread(corpus: dict[str, Any]) -> list[str]:
    """τ-b and regret of every seed, per metric."""
    seeds = corpus["seeds"]
    if len(seeds) < 2:
        return []
    lines = []
    for i, metric in enumerate(corpus["metrics"]):
        taus = [found["agreement"][i]["tau"] for found in seeds.values()]
        regrets = [found["agreement"][i]["regret"] for found in seeds.values()]
        lines.append(
            f"- {metric}, seeds {', '.join(seeds)}: τ-b "
            f"{', '.join(f'{t:.3f}' for t in taus)} (mean {np.mean(taus):.3f}); regret "
            f"{', '.join(f'{r:+.4f}' for r in regrets)}."
        )
    return lines


def _agreement_details(details: dict[str, Any]) -> list[str]:
    """Seed 0's swaps and mean rank change per retriever kind."""
    change = ", ".join(
        f"{kind} {v:+.1f}" for kind, v in sorted(details["change_by_retriever"].items())
    )
    swaps = "; ".join(
        f"`{_one_line(w['label_ahead_on_real'])}` ahead on real, "
        f"`{_one_line(w['label_ahead_on_synthetic'])}` ahead on generated"
        for w in details["swaps"][:2]
    )
    return [
        f"- Seed 0: {details['swapped']} pairs of trials swap places (most moved: {swaps}). "
        f"Mean rank change per retriever kind (generated rank − real rank; positive: the "
        f"generated set ranks it lower): {change}.",
    ]


def _ceiling(found: dict[str, Any] | None) -> list[str]:
    if not found:
        return []
    return [
        f"**Real labels against real labels, for scale.** The same sweep on SciFact's 809 real "
        f"*train* queries ({found['run']['run']}): {found['samples']} random samples of "
        f"{found['queries']} of them against the test labels reach Kendall τ-b "
        f"{found['tau_mean']:.3f} ± {found['tau_sd']:.3f} on {found['metric']} (τ-b ≥ 0.8 in "
        f"{found['tau_at_least_0_8']:.0%} of the samples; the sample's pick within 0.005 of the "
        f"real best in {found['regret_at_least_minus_0_005']:.0%}; mean regret "
        f"{found['regret_mean']:+.4f}). An independent set of real queries of that size agrees "
        "that well with the test labels; a generated set near it is as good as more real "
        "queries would be.",
        "",
    ]


def _llm_floor(found: dict[str, Any] | None) -> list[str]:
    if not found:
        return []
    if "skipped" in found or "error" in found:
        why = found.get("skipped") or f"failed: {found['error']}"
        return [f"**`llm` with a local model**: {why}.", ""]
    made = found["set"]
    return [
        f"**`llm` with a local model, a floor**: `--method llm` with {found['model']} (135M "
        "parameters, llama.cpp on loopback, `ragbench.llm.local`): "
        f"{made['queries']} questions written ({made['requests']} requests; dropped: "
        f"{_counts(made['dropped'])}). At this size the questions are near noise; a real model "
        "does better.",
        "",
        table(AGREEMENT_HEADERS, [_agreement_row("llm", a) for a in found["agreement"]]),
        "",
    ]


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n:,}" for reason, n in counts.items()) or "none"


def _judged(found: dict[str, Any] | None) -> list[str]:
    if not found or "by_k" not in found:
        return []
    rows = [
        (
            num(k["k"], 0),
            f"{k['median_tau']:.3f} ({k['tau_p05_p95'][0]:.3f} to {k['tau_p05_p95'][1]:.3f})",
            f"{k['median_interval'][0]:.3f} to {k['median_interval'][1]:.3f}",
            f"{k['median_width']:.3f}",
            f"{k['covers_tau_all']:.0%}",
            f"{k['above_chance']:.0%}",
        )
        for k in found["by_k"]
    ]
    return [
        "**How many judged queries check the pick?** Standing a random sample of k real "
        "SciFact queries in for k queries judged by hand (`ragbench datasets judge`), "
        f"{found['repetitions']} samples per k: τ-b of the generated set (seed 0) against the "
        "sample, with its 95% bootstrap interval (both sides resampled, as the command prints "
        f"it; `python -m benchmarks.bench_judged`). Against all {found['queries']['real']} real "
        f"queries τ-b is {found['tau_all']:.3f}.",
        "",
        table(
            (
                "judged queries",
                "τ-b median (5th to 95th percentile)",
                "interval (median bounds)",
                "interval width (median)",
                "interval holds τ-b against all real queries",
                "lower bound above 0",
            ),
            rows,
        ),
        "",
    ]


def _agreement(section: dict[str, Any] | None) -> list[str]:
    lines = ["### Agreement of generated labels with real ones", ""]
    status = _status(section)
    if status:
        return [*lines, status]
    assert section is not None
    names = {"scifact": "SciFact (BEIR test queries)", "chunking": "Chunking evaluation (Chroma)"}
    lines += [
        "Does a set of generated queries rank configurations like real labels? Per corpus one "
        "sweep runs on the real queries and on sets generated from the same corpus with the "
        f"default offline method (`ragbench datasets generate DIR --out OUT --n {section['n']} "
        "--seed S`: a sentence is the query, cut out of the corpus the set is evaluated on; "
        "sentences with digits, code or a back-reference are skipped; span evidence is the "
        "neighbouring sentences that share three of its terms). `ragbench.report.agreement` "
        "compares the trials' mean metric: Kendall τ-b with its 95% bootstrap interval (each "
        "set's queries resampled), Spearman ρ, whether both pick the same best trial, the "
        "regret of the generated set's pick (its real value minus the real best) and the "
        "bootstrap confidence in that pick.",
        "",
    ]
    for key, corpus in section["corpora"].items():
        real = corpus["real"]
        first = next(iter(corpus["seeds"].values()))
        lines += [
            f"**{names.get(key, key)}**: `{corpus['config']}`; real: {real['queries']} queries; "
            f"generated: {first['set']['queries']} queries, of which "
            f"{first['agreement'][0]['queries'][1] if first['agreement'][0]['queries'] else '–'} "
            "evaluated (span metrics score the queries with span evidence).",
            "",
            table(
                AGREEMENT_HEADERS,
                [
                    _agreement_row(f"seed {seed}", a)
                    for seed, found in list(corpus["seeds"].items())[:1]
                    for a in found["agreement"]
                ],
            ),
            "",
            *_seed_spread(corpus),
            *_agreement_details(corpus["details"]),
            "",
        ]
        if key == "scifact":
            lines += _ceiling(section.get("ceiling"))
    lines += _llm_floor(section.get("llm"))
    lines += _judged(section.get("judged"))
    return lines


Block = tuple[tuple[str, ...], Callable[[dict[str, Any]], list[str]]]
# The sections each part of the file renders, in order: what ``update`` may replace.
QUALITY: list[Block] = [
    (("scifact",), lambda s: _scifact(s.get("scifact"))),
    (("chunking",), lambda s: _chunking(s.get("chunking"))),
    (("tuned",), lambda s: _tuned(s.get("tuned"))),
    (("prf",), lambda s: _prf(s.get("prf"))),
    (("window",), lambda s: _window(s.get("window"))),
    (("rerank",), lambda s: _rerank_proof(s.get("rerank"))),
    (("agreement",), lambda s: _agreement(s.get("agreement"))),
]
SPEED: list[Block] = [
    (("retrieval", "metrics", "embed"), _speed),
    (("engine",), lambda s: _engine(s.get("engine"))),
    (("rerank",), lambda s: _rerank_latency(s.get("rerank"))),
    (("scifact",), lambda s: _memory(s.get("scifact"))),
    (("onnx",), lambda s: _onnx(s.get("onnx"))),
    (("latency",), lambda s: _latency(s.get("latency"))),
    (("estimate",), lambda s: _estimate(s.get("estimate"))),
    (("serve",), lambda s: _serve(s.get("serve"))),
    (("wall",), lambda s: _wall(s.get("wall"))),
    (("scale",), lambda s: _scale(s.get("scale"))),
    (("dask",), lambda s: _dask(s.get("dask"))),
]


def render(results: dict[str, Any]) -> str:
    """RESULTS.md for one benchmark run."""
    s = results["sections"]
    parts = [
        _header(results),
        _regenerate(),
        _machine(results),
        _overview(results),
        ["## Quality"],
        *(draw(s) for _, draw in QUALITY),
        ["## Speed"],
        *(draw(s) for _, draw in SPEED),
    ]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def write(results: dict[str, Any], path: Path) -> Path:
    """Render ``results`` to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results), encoding="utf-8")
    return path


def _blocks(text: str) -> list[list[str]]:
    """``text`` cut before every ``##`` / ``###`` heading (the first block: the title)."""
    blocks: list[list[str]] = [[]]
    for line in text.rstrip("\n").split("\n"):
        if line.startswith(("## ", "### ")):
            blocks.append([])
        blocks[-1].append(line)
    return [b[:-1] if b and b[-1] == "" else b for b in blocks]


def _table_rows(lines: Sequence[str]) -> dict[str, list[str]]:
    """First cell → cells of a Markdown table's body rows."""
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    return {r[0]: r for r in rows[2:] if r}


def update(results: dict[str, Any], path: Path, selected: Sequence[str]) -> Path:
    """Replace, in an existing RESULTS.md, the parts that only the ``selected`` sections render
    (their subsections and rows of the section table) with this run's figures, and say so
    under the title; every other part keeps the figures of the run that wrote it."""
    blocks = _blocks(path.read_text(encoding="utf-8"))
    sections = results["sections"]
    for group, parts in (("## Quality", QUALITY), ("## Speed", SPEED)):
        for keys, draw in parts:
            if not set(keys) <= set(selected):
                continue
            new = draw(sections)
            headings = [b[0] if b else "" for b in blocks]
            if new[0] in headings:
                blocks[headings.index(new[0])] = new
                continue
            drawn = [d(sections)[0] for _, d in parts]  # insert after the part drawn before it
            before = [h for h in drawn[: drawn.index(new[0])] if h in headings]
            at = headings.index(before[-1] if before else group) + 1
            blocks.insert(at, new)
    headings = [b[0] if b else "" for b in blocks]
    overview = blocks[headings.index("## Sections in this run")]
    old_rows = _table_rows([line for line in overview if line.startswith("|")])
    drawn_overview = "\n".join(_overview(results)).split("\n")
    new_rows = _table_rows([line for line in drawn_overview if line.startswith("|")])
    rows = []
    for key, title in SECTION_TITLES.items():
        source = new_rows if key in selected else old_rows
        rows.append(source.get(title, [title, "not run", "–"]))
    blocks[headings.index("## Sections in this run")] = [
        "## Sections in this run",
        "",
        table(["section", "status", "seconds"], rows),
    ]
    blocks[headings.index("## How to regenerate")] = _regenerate()
    m = results["machine"]
    commit = m["commit"] + (" with uncommitted changes" if m["dirty"] else "")
    tiny = " **Tiny smoke run: not results.**" if results["mode"] == "tiny" else ""
    notes = [  # one line per section, replacing that section's older line
        f"Updated since: {title}, by `{results['command']}` on {m['date']} (commit {commit}), "
        f"not by the command above.{tiny}"
        for key, title in SECTION_TITLES.items()
        if key in selected
    ]
    replaced = tuple(f"Updated since: {SECTION_TITLES[k]}," for k in selected)
    title = [line for line in blocks[0] if not line.startswith(replaced)]
    at = next((i for i, line in enumerate(title) if line.startswith("Generated by")), 0)
    kept = [line for note in notes for line in ("", note)]
    blocks[0] = [*title[: at + 1], *kept, *title[at + 1 :]]
    blocks[0] = [line for i, line in enumerate(blocks[0]) if line or blocks[0][i - 1]]
    path.write_text("\n\n".join("\n".join(b) for b in blocks) + "\n", encoding="utf-8")
    return path
