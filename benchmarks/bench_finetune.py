"""Fine-tuning inside the sweep on SciFact: scifact-finetune.yaml (MiniLM as it ships, fine-tuned
on the train split's queries, fine-tuned on queries generated from the corpus alone; dense and
hybrid), selected on train and reported on test, every trial also scored on test, and a
cross-encoder trained from MiniLM's weights on the train pairs reranking the chosen pipeline.
Label-free fine-tuning is also checked on data with real labels of another kind:
chunking-finetune.yaml (Chroma's chunking evaluation, span level), MiniLM as it ships against
MiniLM fine-tuned on queries generated from those corpora.

Per trained model: its pairs, steps, final loss, training wall time and the peak resident memory
of the process that trained it (``training.json``). The chosen pipeline is compared with the best
trial without a tuned model (the untuned winner on train) on the test queries: the paired
difference, its 95% bootstrap interval and the paired permutation p-value.

``finetune()`` returns the figures; ``FINETUNE`` draws the RESULTS.md section.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.bench_quality import REPO, RUNS, _paired, _provenance, run_config
from benchmarks.render import Figures, Lines, num, part, provenance, relative, signed, table
from ragbench.evaluate.significance import bootstrap_ci
from ragbench.experiment.config import Trial, expand, load_config, trial_of
from ragbench.experiment.store import RunStore
from ragbench.experiment.trial import RunSpec, context, run_trial
from ragbench.index.cache import default_cache_root
from ragbench.retrieve.execution import Execution

CONFIG = REPO / "experiments" / "scifact-finetune.yaml"
HELD_OUT = REPO / "experiments" / "chunking-finetune.yaml"
HELD_OUT_METRICS = ("span_recall@5", "span_precision@5", "span_iou@5")
CROSS_ENCODER = {
    "kind": "cross_encoder",
    "model": "all-MiniLM-L6-v2",
    "candidates": 20,
    "max_length": 256,
    "finetune": {"pairs": "select", "loss": "listwise", "n_negatives": 3, "learning_rate": 3e-5},
}
METRICS = ("ndcg@10", "recall@100")


def tiny_overrides(dataset: Path) -> list[str]:
    """``dataset`` (a tiny slice), short sequences, small batches and few generated queries:
    a smoke run of real models in a minute."""
    return [f"dataset.path={json.dumps(str(dataset))}", *_tiny_models(3)]


def _tiny_models(embedders: int) -> list[str]:
    """Short sequences, small batches and few generated queries for each of ``embedders``."""
    found = []
    for i in range(embedders):
        found.append(f"sweep.embedder[{i}].max_seq_length=32")
        if i:
            tuning = f"sweep.embedder[{i}].finetune"
            found += [f"{tuning}.{k}" for k in ("max_seq_length=32", "batch_size=4", "queries=20")]
    return found


def tiny_held_out(dataset: Path) -> list[str]:
    """``dataset`` (a tiny chunking slice) with the tiny model settings of ``tiny_overrides``;
    its one document leaves no hard negative, so the tuned model trains on in-batch ones."""
    tuning = "sweep.embedder[1].finetune"
    return [
        f"dataset.path={json.dumps(str(dataset))}",
        *_tiny_models(2),
        f"{tuning}.loss=mnrl",
        f"{tuning}.negatives=none",
    ]


def held_out(runs: Path, root: str, overrides: Sequence[str], limit: int | None) -> dict[str, Any]:
    """chunking-finetune.yaml: each trial's mean span metrics, and each generated-pairs model
    against the base model per query (paired difference, its bootstrap interval, p)."""
    config = load_config(HELD_OUT, overrides)
    done = run_config(config, runs / "chunking-finetune", limit, root)
    result = done["result"]
    trials = result.trials.set_index("trial_id")
    grid = expand(config)
    per_query = result.per_query
    base = next(t for t in grid if _tuning(t) == "none")
    tuned = [t for t in grid if _tuning(t) == "generated"]

    def values(trial: Trial, metric: str) -> pd.Series:
        rows = per_query[(per_query["trial_id"] == trial.id) & (per_query["metric"] == metric)]
        return rows.set_index("query_id")["value"]

    def against(trial: Trial, metric: str) -> dict[str, Any]:
        difference = values(trial, metric).sort_index() - values(base, metric).sort_index()
        return _paired(values(base, metric), values(trial, metric)) | {
            "ci": bootstrap_ci(difference.to_numpy())
        }

    models = _models(RunSpec(config, limit, root), tuned)
    return {
        **_provenance(done),
        "config": relative(HELD_OUT),
        "rows": [
            {"label": t.label, "pairs": _tuning(t), "queries": _queries(t)}
            | {m: float(trials.loc[t.id, m]) for m in HELD_OUT_METRICS}
            for t in grid
        ],
        "against_base": [
            {"queries": _queries(t), "model": model}
            | {"metrics": {m: against(t, m) for m in HELD_OUT_METRICS}}
            for t, model in zip(tuned, models, strict=True)
        ],
    }


def _queries(trial: Trial) -> int | None:
    """How many generated queries trained the trial's embedder (None: not tuned on them)."""
    tuning = getattr(trial.get("embedder"), "finetune", None)
    return tuning.queries if tuning is not None and tuning.pairs == "generated" else None


def _tuning(trial: Trial) -> str:
    """Which pairs trained the trial's embedder: ``select``, ``generated`` or ``none``."""
    tuning = getattr(trial.get("embedder"), "finetune", None)
    return "none" if tuning is None else tuning.pairs


def _scored(report: RunSpec, trial: Trial) -> pd.DataFrame:
    """``trial``'s per-query metrics on the report split (its cached stages reused)."""
    done = run_trial(report, trial)
    if done.status != "ok":
        raise RuntimeError(f"{done.label} failed on the report split: {done.error}")
    return pd.DataFrame(done.per_query, index=context(report).query_ids)


def _reranked(report: RunSpec, trial: Trial) -> dict[str, Any]:
    """The cross-encoder trial's mean metrics on the report split, or, when the sweep refuses
    it (its model left at chance: ``not_trained``), why."""
    done = run_trial(report, trial)
    if done.status == "ok":
        scored = pd.DataFrame(done.per_query, index=context(report).query_ids)
        return {m: float(scored[m].mean()) for m in METRICS}
    if "not trained" not in (done.error or ""):
        raise RuntimeError(f"{done.label} failed on the report split: {done.error}")
    return {"not_trained": done.error}


def _models(report: RunSpec, trials: Sequence[Trial]) -> list[dict[str, Any]]:
    """What training each distinct model of ``trials`` cost (its ``training.json``)."""
    ctx, found = context(report), {}
    for trial in trials:
        plan = ctx.plan(trial)
        execution = Execution(plan, ctx.env, ctx.cache)
        for stage in plan.stages.values():
            if stage.area == "models" and stage.key not in found:
                record = execution[stage.name].record()
                found[stage.key] = {
                    "family": record["family"],
                    "pairs": record["pairs"],
                    "n_pairs": record["n_pairs"],
                    "loss": record["loss"],
                    "steps": record["steps"],
                    "last_loss": float(np.mean(record["losses"][-5:])),
                    "seconds": record["seconds"],
                    "peak_rss_mb": record["peak_rss_mb"],
                    "trained": not record.get("not_trained"),
                }
    return list(found.values())


def finetune(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    overrides: Sequence[str] = (),
    limit: int | None = None,
    held_out_overrides: Sequence[str] = (),
) -> dict[str, Any]:
    """scifact-finetune.yaml selected on train and reported on test, every trial scored on
    test, the chosen pipeline against the untuned winner, a trained cross-encoder over it,
    what each model cost to train, and the held-out check (``held_out``)."""
    root = str(cache_root or default_cache_root())
    config = load_config(CONFIG, overrides)
    done = run_config(config, runs / "scifact-finetune", limit, root)
    trials = done["result"].trials.set_index("trial_id")
    report = RunSpec(config, limit, root, config.evaluation.report_on)
    grid = expand(config)
    tested = {t.id: _scored(report, t) for t in grid}
    rows = [
        {"trial_id": t.id, "label": t.label, "pairs": _tuning(t)}
        | {f"{m} on train": float(trials.loc[t.id, m]) for m in METRICS}
        | {f"{m} on test": float(tested[t.id][m].mean()) for m in METRICS}
        for t in grid
    ]
    found = RunStore(done["result"].path).selection()
    if found is None:
        raise RuntimeError(f"{done['result'].path}: the run made no selection")
    chosen_id = found[0]["chosen"]["ndcg@10"]["trial_id"]
    chosen = next(t for t in grid if t.id == chosen_id)
    untuned = [t for t in grid if _tuning(t) == "none"]
    winner = max(untuned, key=lambda t: float(trials.loc[t.id, "ndcg@10"]))
    difference = tested[chosen.id]["ndcg@10"] - tested[winner.id]["ndcg@10"]
    reranked_trial = trial_of({**chosen.effective(), "reranker": CROSS_ENCODER})
    reranked = _reranked(report, reranked_trial)
    return {
        **_provenance(done),
        "config": relative(CONFIG),
        "rows": rows,
        "chosen": {"trial_id": chosen.id, "label": chosen.label},
        "dense_picks": _dense_picks(grid, trials, tested),
        "untuned": {"trial_id": winner.id, "label": winner.label},
        "against_untuned": _paired(tested[winner.id]["ndcg@10"], tested[chosen.id]["ndcg@10"])
        | {"ci": bootstrap_ci(difference.to_numpy())},
        "reranked": {"label": reranked_trial.label} | reranked,
        "models": _models(report, [*grid, reranked_trial]),
        "held_out": held_out(runs, root, held_out_overrides, limit),
    }


def _dense_picks(
    grid: Sequence[Trial], trials: pd.DataFrame, tested: dict[str, pd.DataFrame]
) -> list[dict[str, Any]]:
    """Per kind of pairs (none, select, generated), the dense trial best on train among that
    kind's, with its ndcg@10 on train and on test."""
    train = {str(trial): float(value) for trial, value in trials["ndcg@10"].items()}
    found = []
    for pairs in ("none", "select", "generated"):
        own = [
            t
            for t in grid
            if getattr(t.get("retriever"), "kind", None) == "dense" and _tuning(t) == pairs
        ]
        if not own:
            continue
        best = max(own, key=lambda t: train[t.id])
        found.append(
            {
                "pairs": pairs,
                "label": best.label,
                "candidates": len(own),
                "ndcg@10 on train": train[best.id],
                "ndcg@10 on test": float(tested[best.id]["ndcg@10"].mean()),
            }
        )
    return found


# ---------------------------------------------------------------- RESULTS.md


def draw(section: Figures) -> Lines:
    """Every trial on train and test, the chosen pipeline against the untuned winner, the
    cross-encoder row and the training cost of each model."""
    columns = [f"{m} on {split}" for split in ("train", "test") for m in METRICS]
    rows = [(r["label"], r["pairs"], *(num(r[c]) for c in columns)) for r in section["rows"]]
    against = section["against_untuned"]
    low, high = against["ci"]
    reranked = section["reranked"]
    models = [
        (
            m["family"],
            m["pairs"],
            num(m["n_pairs"]),
            m["loss"],
            num(m["steps"]),
            num(m["last_loss"], 3),
            f"{m['seconds'] / 60:.1f}",
            num(m["peak_rss_mb"], 0),
            "yes" if m.get("trained", True) else "no: at chance",
        )
        for m in section["models"]
    ]
    return [
        provenance(section),
        "",
        "Every trial, selected on train; the test column scores each once (pairs: `none` = MiniLM "
        "as it ships, `select` = fine-tuned on the train split's judged queries, `generated` = "
        "fine-tuned on queries generated from the corpus, no labels):",
        "",
        table(["trial", "pairs", *columns], rows),
        "",
        "Dense retrieval alone, per kind of pairs: the model chosen on train among that kind's "
        "dense trials, then scored once on test:",
        "",
        _draw_dense_picks(section["dense_picks"]),
        "",
        f"Chosen on train: `{section['chosen']['label']}`. Against the best trial without a tuned "
        f"model (`{section['untuned']['label']}`) on the test queries: Δ ndcg@10 "
        f"{signed(against['delta'])}, 95% bootstrap CI [{low:.4f}, {high:.4f}], paired "
        f"permutation p = {num(against['p'])}.",
        "",
        f"A cross-encoder trained from MiniLM's weights on the train pairs, reranking the chosen "
        f"pipeline's top {CROSS_ENCODER['candidates']} (`{reranked['label']}`), on test: "
        + _reranked_text(reranked)
        + _chance(section["models"]),
        "",
        "Training, per model (wall time on this machine's 2 cores, shared with whatever else ran; "
        "peak resident memory of the process that trained it):",
        "",
        table(
            ["model", "pairs", "n", "loss", "steps", "final loss", "minutes", "peak MB", "learnt"],
            models,
        ),
        "",
        *_draw_held_out(section["held_out"]),
    ]


def _draw_dense_picks(picks: Sequence[Figures]) -> str:
    """Per kind of pairs, the dense trial chosen on train and its scores."""
    return table(
        ["pairs", "dense trials", "chosen on train", "ndcg@10 on train", "ndcg@10 on test"],
        [
            (
                p["pairs"],
                num(p["candidates"]),
                p["label"],
                num(p["ndcg@10 on train"]),
                num(p["ndcg@10 on test"]),
            )
            for p in picks
        ],
    )


def _reranked_text(reranked: Figures) -> str:
    """The cross-encoder's scores, or that the sweep refused a model left at chance."""
    if reranked.get("not_trained"):
        return f"not scored; the sweep fails the trial: {reranked['not_trained']}."
    return f"ndcg@10 {num(reranked['ndcg@10'])}, recall@100 {num(reranked['recall@100'])}."


def _chance(models: Sequence[Figures]) -> str:
    """What the cross-encoder's final loss says: a listwise loss near ln(group size) is that of
    a scorer guessing at random among the positive and its negatives."""
    found = [m for m in models if m["family"] == "cross-encoder" and m["loss"] == "listwise"]
    if not found:
        return ""
    group = 1 + CROSS_ENCODER["finetune"]["n_negatives"]
    return (
        f" Its final training loss ({num(found[0]['last_loss'], 3)}) is to be read against "
        f"{np.log(group):.3f} = ln {group}, the loss of a random guess among a query's positive "
        f"and its {group - 1} negatives."
    )


def _draw_held_out(section: Figures) -> Lines:
    """The held-out check: every trial's span metrics and each tuned model's paired difference
    against the base model."""

    def name(row: Figures) -> str:
        if row["queries"] is None:
            return "MiniLM as it ships"
        return f"MiniLM fine-tuned on {num(row['queries'])} generated queries"

    rows = [(name(r), *(num(r[m]) for m in HELD_OUT_METRICS)) for r in section["rows"]]
    lines = [
        "**Held out: label-free fine-tuning on data it was never tuned on** (Chroma's chunking "
        "evaluation, span level, top 5 chunks; the model is fine-tuned on queries generated "
        "from its corpora, the real questions train nothing). " + provenance(section),
        "",
        f"Dense retrieval over one recursive 250-token chunking (`{section['config']}`):",
        "",
        table(["embedder", *HELD_OUT_METRICS], rows),
    ]
    for tuned in section["against_base"]:
        model = tuned["model"]
        against = [
            (
                m,
                signed(a["delta"]),
                f"[{a['ci'][0]:.4f}, {a['ci'][1]:.4f}]",
                num(a["p"]),
                f"{a['wins']} / {a['ties']} / {a['losses']}",
            )
            for m, a in tuned["metrics"].items()
        ]
        lines += [
            "",
            f"Fine-tuned on {num(tuned['queries'])} generated queries against MiniLM as it "
            "ships, per question (paired difference, 95% bootstrap CI, paired permutation p, "
            f"wins / ties / losses); training took {model['seconds'] / 60:.1f} minutes "
            f"({num(model['steps'])} steps, {num(model['n_pairs'])} pairs, loss {model['loss']}):",
            "",
            table(["metric", "Δ", "95% CI", "p", "wins / ties / losses"], against),
        ]
    return lines


FINETUNE = part("finetune", "Fine-tuning inside the sweep (SciFact, selected on train)", draw)
