"""Pseudo-relevance feedback on SciFact: scifact-prf.yaml, BM25 with and without RM3, selected
on train and reported on test, with the paired permutation test of the chosen trial (and of
the best prf trial, whatever the selection chose) against plain BM25 on the test queries.

``prf()`` returns the figures; ``PRF`` draws the RESULTS.md section.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.bench_quality import REPO, RUNS, _paired, _provenance, run_config
from benchmarks.render import Figures, Lines, num, part, provenance, relative, signed, table, wtl
from ragbench.experiment.config import Trial, expand, load_config
from ragbench.experiment.store import RunStore
from ragbench.experiment.trial import RunSpec, context, run_trial
from ragbench.index.cache import default_cache_root

CONFIG = REPO / "experiments" / "scifact-prf.yaml"


def _number(value: Any) -> int | float:
    """A swept value as it was written (parquet makes integers floats next to a NaN)."""
    return int(value) if float(value).is_integer() else float(value)


def _grid(trials: pd.DataFrame, metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Every trial's prf settings (None for BM25 alone) and means on the selection split."""
    grid = []
    for _, row in trials.iterrows():
        params = {
            k.removeprefix("param.query."): _number(row[k])
            for k in ("param.query.fb_docs", "param.query.fb_terms", "param.query.original_weight")
            if k in row and pd.notna(row[k])
        }
        entry = {"trial_id": row["trial_id"], "status": row["status"], "prf": params or None}
        grid.append(entry | {m: float(row[m]) for m in metrics if row["status"] == "ok"})
    return grid


def _reported(report: RunSpec, trial: Trial, metric: str) -> pd.Series:
    """``trial``'s per-query ``metric`` on the report split, evaluated once now."""
    done = run_trial(report, trial)
    if done.status != "ok":
        raise RuntimeError(f"{done.label} failed on the report split")
    return pd.Series(done.per_query[metric], index=context(report).query_ids)


def prf(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
) -> dict[str, Any]:
    """scifact-prf.yaml: every trial on the selection split, then per metric the trial chosen
    there against plain BM25 on the report split (means, difference, paired p-value)."""
    root = str(cache_root or default_cache_root())
    config = load_config(CONFIG, overrides)
    done = run_config(config, runs / "scifact-prf", limit, root)
    result = done["result"]
    trials = result.trials
    found = RunStore(result.path).selection()
    if found is None:
        raise RuntimeError(f"{result.path}: the run made no selection")
    summary, per_query = found
    baseline = summary["baseline"]
    metrics = [m.name for m in config.evaluation.metrics]
    chosen, best_prf = [], []
    ok = trials[(trials["status"] == "ok") & (trials["trial_id"] != baseline)]
    report = RunSpec(config, limit, root, config.evaluation.report_on)
    by_id = {t.id: t for t in expand(config)}
    for metric, pick in summary["chosen"].items():
        values = per_query[per_query["metric"] == metric]
        by_trial = values.pivot(index="query_id", columns="trial_id", values="value")
        # the best prf trial on the selection split, evaluated once on the report split
        best = str(ok.loc[ok[metric].idxmax(), "trial_id"])
        reported = by_trial[best] if best in by_trial else _reported(report, by_id[best], metric)
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
        "config": relative(CONFIG),
        "select_on": summary["select_on"],
        "report_on": summary["report_on"],
        "report_queries": summary["report_queries"],
        "baseline": baseline,
        "bm25": config.sweep["retriever"][0],
        "grid": _grid(trials, metrics),
        "chosen": chosen,
        "best_prf": best_prf,
    }


# ---------------------------------------------------------------- RESULTS.md


def _headers(trial: str) -> list[str]:
    """The columns of a comparison against BM25 alone; ``trial`` names the compared trial."""
    return [
        "metric",
        trial,
        "on train",
        "BM25 on train",
        "on test",
        "BM25 on test",
        "Δ on test",
        "p",
        "wins / ties / losses",
    ]


def _against_bm25(found: dict[str, Any], baseline: dict[str, Any]) -> tuple[str, ...]:
    """One trial against BM25 alone on both splits."""
    return (
        found["metric"],
        found["label"],
        num(found["selected"]),
        num(baseline["baseline_selected"]),
        num(found["reported"]),
        num(baseline["baseline_reported"]),
        signed(found["delta"]),
        num(found["p"]),
        wtl(found),
    )


def _setup(section: Figures, swept: str) -> str:
    """What ran: the BM25, the prf grid and the selection."""
    bm25 = section["bm25"]
    tokenizer = bm25.get("tokenizer", {})
    return (
        f"BM25 {bm25.get('variant')} k1={bm25.get('k1')} b={bm25.get('b')}, stopwords "
        f"{tokenizer.get('stopwords')}, stemmer {tokenizer.get('stemmer')} (the BM25 of "
        f"scifact-reproduce.yaml), alone (the baseline) and with `query: prf` over the same "
        f"index: {swept} ({len(section['grid'])} trials). Each metric's best trial on split "
        f"'{section['select_on']}' was evaluated once on '{section['report_on']}' "
        f"({section['report_queries']} queries) with the baseline; Δ and p are over those "
        "queries (p: paired permutation test, 10,000 sign flips; wins / ties / losses of the "
        "chosen trial per query)."
    )


def _best_prf(section: Figures) -> Lines:
    """Each metric's best prf trial against BM25 alone, and the nDCG@10 verdict."""
    chosen = {c["metric"]: c for c in section["chosen"]}
    best = section.get("best_prf", [])
    if not best:
        return []
    return [
        "",
        "prf against BM25 alone whatever the selection chose: each metric's best prf trial "
        f"on '{section['select_on']}', evaluated once on '{section['report_on']}':",
        "",
        table(
            _headers("best prf trial on train"),
            [_against_bm25(b, chosen[b["metric"]]) for b in best],
        ),
    ]


def _verdict(section: Figures) -> Lines:
    """nDCG@10 of the best prf trial against BM25 alone, in one sentence."""
    lines = []
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


def draw(section: Figures) -> Lines:
    """scifact-prf.yaml: the selection's choice and the best prf trial against BM25 alone,
    then every trial on the selection split."""
    grid = [g for g in section["grid"] if g["prf"]]
    values = {k: sorted({g["prf"][k] for g in grid}) for k in grid[0]["prf"]} if grid else {}
    swept = ", ".join(f"{k} ∈ {{{', '.join(str(v) for v in vs)}}}" for k, vs in values.items())
    metrics = [m for m in ("ndcg@10", "recall@100") if any(m in g for g in section["grid"])]
    grid_rows = [
        (
            *(str(g["prf"][k]) if g["prf"] else "– (BM25 alone)" for k in values),
            *(num(g.get(m)) for m in metrics),
        )
        for g in section["grid"]
    ]
    select_on = section["select_on"]
    return [
        provenance(section),
        "",
        _setup(section, swept),
        "",
        table(_headers("chosen on train"), [_against_bm25(c, c) for c in section["chosen"]]),
        *_best_prf(section),
        "",
        f"Every trial on '{select_on}' (mean over its queries):",
        "",
        table([*values, *(f"{m} ({select_on})" for m in metrics)], grid_rows),
        *_verdict(section),
    ]


PRF = part("prf", "SciFact: pseudo-relevance feedback (RM3) on BM25, honest selection", draw)
