"""Quality runs through ragbench's own configs and runner: the SciFact reproduction, Chroma's
chunking evaluation and (when present) the tuned SciFact sweep with honest selection.

Every function runs an experiment file from ``experiments/`` with ``ragbench.run`` into a run
directory (``--runs``, default ``runs/bench``) and reads its figures back from that directory;
the stage cache makes reruns cheap. ``dry_run`` is taken first, so each result says which
stages were already cached and which this run rebuilt.

* ``scifact_reproduce(full=False)``: scifact-reproduce.yaml restricted to its BM25 trial (an
  override of ``sweep.retriever``); ``full=True`` runs the whole file (BM25, MiniLM exact,
  MiniLM hnsw): hnsw's nDCG@10 loss against exact and the dense search speed-up from
  ``latency.dense.p50_ms``.
* ``chunking()``: chunking.yaml (span level, top 5), with the mean chunk size of every chunker
  in cl100k tokens (counted with ``bpe-openai`` on the cached chunks) and, for any chunker
  whose span recall is more than 3 points from the published MiniLM table, its recall per
  corpus.
* ``tuned()``: experiments/scifact-tuned.yaml if it exists, and its selection table.
* ``prf()``: scifact-prf.yaml — BM25 with and without RM3 pseudo-relevance feedback, selected
  on train and reported on test, with the paired permutation test of the chosen trial against
  plain BM25 on the test queries.
* ``chunking_window()``: chunking-window.yaml — sentence chunks and sentence-window chunks with
  and without the ``window`` postprocess; span recall / precision / IoU @5 and the paired test
  of each window trial against its chunking without windows.
* ``tiny_beir`` / ``tiny_chunking`` write small slices of the shared datasets for ``--tiny``.

``python -m benchmarks.bench_quality [--full] [--chunking] [--tuned] [--prf] [--window]`` prints
the figures.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from ragbench.evaluate.significance import paired_test, win_tie_loss
from ragbench.experiment import runner
from ragbench.experiment.config import ExperimentConfig, expand, load_config
from ragbench.experiment.store import RunStore
from ragbench.experiment.trial import RunSpec, chunk_depth, context, run_trial
from ragbench.index.cache import default_cache_root
from ragbench.retrieve.graph import Execution

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "datasets"
SCIFACT = SHARED / "beir" / "scifact"
CHUNKING_EVAL = SHARED / "chunking_evaluation"
REPRODUCE = REPO / "experiments" / "scifact-reproduce.yaml"
CHUNKING = REPO / "experiments" / "chunking.yaml"
TUNED = REPO / "experiments" / "scifact-tuned.yaml"
PRF = REPO / "experiments" / "scifact-prf.yaml"
WINDOW = REPO / "experiments" / "chunking-window.yaml"
RUNS = REPO / "runs" / "bench"
HASHING = {"kind": "hashing"}
RECALL_GAP = 0.03  # a chunker this far from the published recall gets a per-corpus breakdown


# ---------------------------------------------------------------- running configs


def run_config(
    config: ExperimentConfig, out: Path, limit: int | None, cache_root: str
) -> dict[str, Any]:
    """Run ``config`` into ``out`` (overwriting); returns the result, the seconds it took and
    what the stage cache held before."""
    before = runner.dry_run(config, limit, cache_root)
    started = time.perf_counter()
    result = runner.run(
        config, out, overwrite=True, limit_queries=limit, cache_root=cache_root, progress=False
    )
    rebuilt = sorted({s for m in before["missing"] for s in m.split(", ") if s != "-"})
    return {
        "result": result,
        "seconds": time.perf_counter() - started,
        "stages": int(before["stages"].sum()),
        "cached": int(before["cached"].sum()),
        "rebuilt": rebuilt,
    }


def _provenance(done: dict[str, Any]) -> dict[str, Any]:
    """What a results section says about where its numbers come from."""
    return {
        "run": relative(done["result"].path),
        "seconds": done["seconds"],
        "stages": done["stages"],
        "cached": done["cached"],
        "rebuilt": done["rebuilt"],
        "queries": int(done["result"].manifest["queries"]["count"]),
    }


def relative(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def _raw(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def tiny_overrides(path: Path, dataset: Path, one_chunker: bool = False) -> list[str]:
    """Overrides that point ``path``'s config at a tiny slice, swap every embedder (trial and
    dense reranker) for the hashing embedder and, with ``one_chunker``, keep only the first
    chunker choice."""
    sweep = _raw(path).get("sweep", {})
    out = [f"dataset.path={json.dumps(str(dataset))}"]
    if "embedder" in sweep:
        out.append(f"sweep.embedder={json.dumps([HASHING])}")
    for i, reranker in enumerate(sweep.get("reranker", [])):
        if isinstance(reranker, dict) and reranker.get("kind") == "dense":
            out.append(f"sweep.reranker[{i}].embedder={json.dumps(HASHING)}")
    if one_chunker and len(sweep.get("chunker", [])) > 1:
        out.append(f"sweep.chunker={json.dumps(sweep['chunker'][:1])}")
    return out


# ---------------------------------------------------------------- SciFact


def bm25_only(path: Path = REPRODUCE) -> str:
    """The override that keeps only the config's BM25 retriever(s)."""
    bm25 = [r for r in _raw(path)["sweep"]["retriever"] if r.get("kind") == "bm25"]
    return f"sweep.retriever={json.dumps(bm25)}"


def _system(row: pd.Series) -> str:
    kind = row.get("param.retriever.kind")
    if kind == "dense":
        return f"dense-{row.get('param.retriever.store.kind')}"
    return str(kind)


def scifact_reproduce(
    full: bool = False,
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """scifact-reproduce.yaml (BM25 only unless ``full``); per system its metrics and
    latency, hnsw's loss and speed-up against exact, and the sweep's peak RSS."""
    root = str(cache_root or default_cache_root())
    config = load_config(REPRODUCE, [*overrides, *([] if full else [bm25_only()])])
    done = run_config(config, runs / ("scifact-reproduce" if full else "scifact-bm25"), limit, root)
    trials = done["result"].trials
    metrics = [m.name for m in config.evaluation.metrics]
    systems: dict[str, dict[str, Any]] = {}
    for _, row in trials.iterrows():
        entry = {"label": row["label"], "status": row["status"]}
        entry |= {m: float(row[m]) for m in metrics if m in row and row["status"] == "ok"}
        for stage in ("bm25", "dense", "embed_query", "total"):
            if f"latency.{stage}.p50_ms" in row and pd.notna(row[f"latency.{stage}.p50_ms"]):
                entry[f"{stage}_p50_ms"] = float(row[f"latency.{stage}.p50_ms"])
        systems[_system(row)] = entry
    out = {
        **_provenance(done),
        "full": full,
        "config": relative(REPRODUCE),
        "metrics": metrics,
        "systems": systems,
        "peak_rss_mb": float(trials["peak_rss_mb"].max()),
        "depth": chunk_depth(config, expand(config)[0]),
        "embedder": _embedder(trials),
    }
    exact, hnsw = systems.get("dense-exact"), systems.get("dense-hnsw")
    if exact and hnsw and "ndcg@10" in exact and "ndcg@10" in hnsw:
        out["hnsw_ndcg_loss"] = exact["ndcg@10"] - hnsw["ndcg@10"]
        out["hnsw_speedup"] = exact["dense_p50_ms"] / hnsw["dense_p50_ms"]
    return out


def tiny_beir(src: Path, dst: Path, n_queries: int = 5, n_docs: int = 200) -> Path:
    """A BEIR slice: the first ``n_queries`` queries of every split, the documents they judge
    and the first ``n_docs`` documents of the corpus."""
    splits: dict[str, list[str]] = {}
    keep_queries: set[str] = set()
    judged: set[str] = set()
    (dst / "qrels").mkdir(parents=True, exist_ok=True)
    for qrels in sorted((src / "qrels").glob("*.tsv")):
        lines = qrels.read_text(encoding="utf-8").splitlines()
        wanted = list(dict.fromkeys(line.split("\t")[0] for line in lines[1:]))[:n_queries]
        rows = [line for line in lines[1:] if line.split("\t")[0] in wanted]
        splits[qrels.stem] = wanted
        keep_queries.update(wanted)
        judged.update(line.split("\t")[1] for line in rows)
        (dst / "qrels" / qrels.name).write_text("\n".join([lines[0], *rows]) + "\n", "utf-8")
    corpus = src / "corpus.jsonl.gz"
    opener = gzip.open if corpus.exists() else open
    with opener(corpus if corpus.exists() else src / "corpus.jsonl", "rt", encoding="utf-8") as f:
        docs = [line for n, line in enumerate(f) if n < n_docs or json.loads(line)["_id"] in judged]
    with gzip.open(dst / "corpus.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("".join(docs))
    with open(src / "queries.jsonl", encoding="utf-8") as f:
        queries = [line for line in f if json.loads(line)["_id"] in keep_queries]
    (dst / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
    return dst


# ---------------------------------------------------------------- chunking evaluation

# Chroma's report, all-MiniLM-L6-v2 table (n = 5 chunks; sizes in cl100k tokens; percent).
# Published reference values, not measurements: /work/shared/datasets/README.md section 3.
CHUNKING_PUBLISHED = {
    ("recursive", 250, 125): {"recall": 78.7, "precision": 4.9, "iou": 4.9, "mean_size": 180},
    ("fixed", 250, 125): {"recall": 82.4, "precision": 3.6, "iou": 3.5, "mean_size": None},
    ("recursive", 250, 0): {"recall": 78.5, "precision": 5.4, "iou": 5.4, "mean_size": 162},
    ("fixed", 250, 0): {"recall": 77.1, "precision": 3.3, "iou": 3.3, "mean_size": None},
    ("recursive", 200, 0): {"recall": 75.7, "precision": 6.5, "iou": 6.5, "mean_size": 128},
    ("fixed", 200, 0): {"recall": 76.6, "precision": 4.1, "iou": 4.1, "mean_size": None},
}


def _chunk_sizes(config: ExperimentConfig, limit: int | None, root: str) -> dict[str, Any]:
    """Per trial id: mean chunk size in cl100k tokens and the chunk count (cached chunks)."""
    from ragbench.text.tokenize import token_counter

    counter = token_counter("tokens", "cl100k")
    ctx = context(RunSpec(config, limit, root))
    out = {}
    for trial in expand(config):
        plan = ctx.plan(trial)
        chunks = Execution(plan, ctx.env, ctx.cache)[plan.chunks].chunks
        sizes = [counter.count(c.text) for c in chunks]
        out[trial.id] = {"mean_tokens": float(np.mean(sizes)), "chunks": len(chunks)}
    return out


def _per_corpus(run_dir: Path, trial_id: str, metric: str) -> dict[str, float]:
    """Mean of ``metric`` per corpus (the judged document of each query)."""
    queries = pd.read_parquet(run_dir / "queries.parquet")
    corpus = {
        q: next(iter(json.loads(r)), "?")
        for q, r in zip(queries["query_id"], queries["qrels"], strict=True)
    }
    per_query = runner.RunResult(run_dir).per_query
    values = per_query[(per_query["trial_id"] == trial_id) & (per_query["metric"] == metric)]
    grouped = values.assign(corpus=values["query_id"].map(corpus)).groupby("corpus")["value"]
    return {str(k): float(v) for k, v in grouped.mean().items()}


def _embedder(trials: pd.DataFrame) -> str | None:
    """The model (or kind) of the run's embedder."""
    for column in ("param.embedder.model", "param.embedder.kind"):
        if column in trials and trials[column].notna().any():
            return str(trials[column].dropna().iloc[0])
    return None


def chunking(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """chunking.yaml: per chunker our span recall / precision / IoU @5 (percent), the mean
    chunk size in cl100k tokens, the published MiniLM row and the differences."""
    root = str(cache_root or default_cache_root())
    config = load_config(CHUNKING, overrides)
    done = run_config(config, runs / "chunking", limit, root)
    trials = done["result"].trials
    sizes = _chunk_sizes(config, limit, root)
    per_query = done["result"].per_query
    recall = per_query[per_query["metric"] == "span_recall@5"].groupby("trial_id")["value"]
    ci95 = (1.96 * 100 * recall.std(ddof=1) / np.sqrt(recall.count())).to_dict()
    rows = []
    for _, row in trials.iterrows():
        kind = str(row["param.chunker.kind"])
        size, overlap = int(row["param.chunker.size"]), int(row["param.chunker.overlap"])
        published = CHUNKING_PUBLISHED.get((kind, size, overlap))
        ours = {
            "recall": 100 * float(row["span_recall@5"]),
            "precision": 100 * float(row["span_precision@5"]),
            "iou": 100 * float(row["span_iou@5"]),
        }
        entry: dict[str, Any] = {
            "chunker": "Recursive" if kind == "recursive" else "TokenText (fixed, tokens)",
            "kind": kind,
            "size": size,
            "overlap": overlap,
            **ours,
            "recall_ci95": float(ci95.get(row["trial_id"], float("nan"))),
            **sizes.get(row["trial_id"], {}),
            "published": published,
        }
        if published is not None:
            entry["delta"] = {k: ours[k] - published[k] for k in ours}
            if abs(entry["delta"]["recall"]) > 100 * RECALL_GAP:
                run_dir = Path(done["result"].path)
                entry["recall_by_corpus"] = {
                    k: 100 * v
                    for k, v in _per_corpus(run_dir, row["trial_id"], "span_recall@5").items()
                }
        rows.append(entry)
    gaps = [abs(r["delta"]["recall"]) for r in rows if "delta" in r]
    return {
        **_provenance(done),
        "config": relative(CHUNKING),
        "embedder": _embedder(trials),
        "rows": rows,
        "max_recall_gap": max(gaps) if gaps else None,
    }


def tiny_chunking(src: Path, dst: Path, corpus: str = "state_of_the_union") -> Path:
    """A chunking_evaluation slice: one corpus file and its questions."""
    (dst / "corpora").mkdir(parents=True, exist_ok=True)
    name = f"{corpus}.md"
    (dst / "corpora" / name).write_bytes((src / "corpora" / name).read_bytes())
    with open(src / "questions_df.csv", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = [r for r in reader if r["corpus_id"] == corpus]
    with open(dst / "questions_df.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return dst


# ---------------------------------------------------------------- tuned sweep


def tuned(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
    path: Path = TUNED,
) -> dict[str, Any] | None:
    """The tuned sweep and its selection table (None when the config does not exist)."""
    from ragbench.report.report import Report

    if not path.is_file():
        return None
    root = str(cache_root or default_cache_root())
    config = load_config(path, overrides)
    done = run_config(config, runs / "scifact-tuned", limit, root)
    report = Report.from_run(done["result"].path)
    table = report.selection_table()
    trials = done["result"].trials
    return {
        **_provenance(done),
        "config": relative(path),
        "trials": len(trials),
        "failed": int((trials["status"] != "ok").sum()),
        "baseline": report.label(report.baseline),
        "note": report.selection_note(),
        "selection": [] if table is None else table.to_dict(orient="records"),
        "columns": [] if table is None else list(table.columns),
    }


# ---------------------------------------------------------------- pseudo-relevance feedback


def _paired(base: pd.Series, other: pd.Series) -> dict[str, Any]:
    """Mean difference ``other - base`` over the same queries, its paired permutation p-value
    (10,000 sign flips, seed 0) and wins / ties / losses."""
    base, other = base.sort_index(), other.sort_index()
    if list(base.index) != list(other.index):
        raise ValueError("paired values must cover the same queries")
    wins, ties, losses = win_tie_loss(base.to_numpy(), other.to_numpy())
    return {
        "delta": float(other.mean() - base.mean()),
        "p": paired_test(base.to_numpy(), other.to_numpy(), "permutation").p_value,
        "wins": wins,
        "ties": ties,
        "losses": losses,
    }


def _number(value: Any) -> int | float:
    """A swept value as it was written (parquet makes integers floats next to a NaN)."""
    return int(value) if float(value).is_integer() else float(value)


def prf(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """scifact-prf.yaml: every trial on the selection split, then per metric the trial chosen
    there against plain BM25 on the report split (means, difference, paired p-value)."""
    root = str(cache_root or default_cache_root())
    config = load_config(PRF, overrides)
    done = run_config(config, runs / "scifact-prf", limit, root)
    result = done["result"]
    trials = result.trials
    found = RunStore(result.path).selection()
    if found is None:
        raise RuntimeError(f"{result.path}: the run made no selection")
    summary, per_query = found
    baseline = summary["baseline"]
    metrics = [m.name for m in config.evaluation.metrics]
    grid = []
    for _, row in trials.iterrows():
        params = {
            k.removeprefix("param.query."): _number(row[k])
            for k in ("param.query.fb_docs", "param.query.fb_terms", "param.query.original_weight")
            if k in row and pd.notna(row[k])
        }
        entry = {"trial_id": row["trial_id"], "status": row["status"], "prf": params or None}
        grid.append(entry | {m: float(row[m]) for m in metrics if row["status"] == "ok"})
    chosen, best_prf = [], []
    ok = trials[(trials["status"] == "ok") & (trials["trial_id"] != baseline)]
    report = RunSpec(config, limit, root, config.evaluation.report_on)
    by_id = {t.id: t for t in expand(config)}
    for metric, pick in summary["chosen"].items():
        values = per_query[per_query["metric"] == metric]
        by_trial = values.pivot(index="query_id", columns="trial_id", values="value")
        # the best prf trial on the selection split, evaluated once on the report split
        best = str(ok.loc[ok[metric].idxmax(), "trial_id"])
        if best in by_trial:
            reported = by_trial[best]
        else:
            done_best = run_trial(report, by_id[best])
            if done_best.status != "ok":
                raise RuntimeError(f"{done_best.label} failed on the report split")
            ids = context(report).query_ids
            reported = pd.Series(done_best.per_query[metric], index=ids)
        best_prf.append(
            {
                "metric": metric,
                "trial_id": best,
                "label": by_id[best].label,
                "selected": float(ok.set_index("trial_id").loc[best, metric]),
                "reported": float(reported.mean()),
            }
            | _paired(by_trial[baseline], reported)
        )
        entry = {
            "metric": metric,
            "trial_id": pick["trial_id"],
            "label": pick["label"],
            "selected": pick["selected"],
            "reported": pick["reported"],
            "baseline_selected": float(trials.set_index("trial_id").loc[baseline, metric]),
            "baseline_reported": pick["baseline_reported"],
            "is_baseline": pick["trial_id"] == baseline,
        }
        chosen.append(entry | _paired(by_trial[baseline], by_trial[pick["trial_id"]]))
    return {
        **_provenance(done),
        "config": relative(PRF),
        "select_on": summary["select_on"],
        "report_on": summary["report_on"],
        "report_queries": summary["report_queries"],
        "baseline": baseline,
        "bm25": config.sweep["retriever"][0],
        "grid": grid,
        "chosen": chosen,
        "best_prf": best_prf,
    }


# ---------------------------------------------------------------- sentence windows


def chunking_window(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """chunking-window.yaml: per trial span recall / precision / IoU @5 (percent, recall with
    its 95% CI) and, for each window trial, the paired difference in span recall@5 against
    the same chunking without windows."""
    root = str(cache_root or default_cache_root())
    config = load_config(WINDOW, overrides)
    done = run_config(config, runs / "chunking-window", limit, root)
    result = done["result"]
    trials = result.trials
    sizes = _chunk_sizes(config, limit, root)
    per_query = result.per_query
    recall = per_query[per_query["metric"] == "span_recall@5"].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    rows = []
    for _, row in trials.iterrows():
        post = row.get("param.postprocess.kind")
        entry: dict[str, Any] = {
            "trial_id": row["trial_id"],
            "label": row["label"],
            "chunker": str(row["param.chunker.kind"]),
            "postprocess": "none" if pd.isna(post) else str(post),
            "recall": 100 * float(row["span_recall@5"]),
            "recall_ci95": 100
            * 1.96
            * float(recall[row["trial_id"]].std(ddof=1))
            / np.sqrt(len(recall)),
            "precision": 100 * float(row["span_precision@5"]),
            "iou": 100 * float(row["span_iou@5"]),
            **sizes.get(row["trial_id"], {}),
        }
        rows.append(entry)
    by_key = {(r["chunker"], r["postprocess"]): r["trial_id"] for r in rows}
    for entry in rows:
        plain = by_key.get((entry["chunker"], "none"))
        if entry["postprocess"] != "none" and plain is not None:
            paired = _paired(recall[plain], recall[entry["trial_id"]])
            entry["vs_plain"] = paired | {"delta": 100 * paired["delta"]}
    return {
        **_provenance(done),
        "config": relative(WINDOW),
        "embedder": _embedder(trials),
        "rows": rows,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="all of scifact-reproduce.yaml")
    parser.add_argument("--chunking", action="store_true", help="also run chunking.yaml")
    parser.add_argument("--tuned", action="store_true", help="also run scifact-tuned.yaml")
    parser.add_argument("--prf", action="store_true", help="also run scifact-prf.yaml")
    parser.add_argument("--window", action="store_true", help="also run chunking-window.yaml")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--set", action="append", default=[], help="KEY.PATH=VALUE override")
    args = parser.parse_args(argv)
    found = scifact_reproduce(args.full, args.runs, args.cache, args.set, args.limit_queries)
    print(json.dumps(found, indent=2, default=str))
    if args.chunking:
        print(json.dumps(chunking(args.runs, args.cache, [], args.limit_queries), indent=2))
    if args.tuned:
        found = tuned(args.runs, args.cache, [], args.limit_queries)
        print(json.dumps(found, indent=2, default=str) if found else f"{TUNED} does not exist")
    if args.prf:
        print(json.dumps(prf(args.runs, args.cache, [], args.limit_queries), indent=2, default=str))
    if args.window:
        found = chunking_window(args.runs, args.cache, [], args.limit_queries)
        print(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
