"""Do generated labels rank configurations like real ones? One sweep per corpus, run on the
real labels and on sets generated from the same corpus with the default offline method, and
their agreement.

* SciFact (experiments/agreement-scifact.yaml, document level, 16 trials): the 300 real test
  queries against sets of ``n`` generated queries, seeds 0 to 4 (seed 0 is the headline; the
  others show the spread). For scale, the same sweep on the 809 real *train* queries: τ-b of
  random 300-query samples of them against the test labels — what an independent set of real
  queries of the same size reaches.
* Chroma's chunking evaluation (experiments/agreement-chunking.yaml, span level, 18 trials):
  the 472 real questions against sets generated from the five corpora, seeds as above.
* The ``llm`` method with a real local model (llama.cpp, SmolLM2-135M-Instruct;
  ``ragbench.llm.local``) on SciFact, as a floor: a 135M model writes near-noise questions.
* How many judged queries make a check of the pick useful: ``bench_judged`` on SciFact's real
  run and the seed-0 generated run.

Each set is generated afresh into ``<runs>/agreement-<corpus>/sets/seed-<s>``; the sweeps run
into ``<runs>/agreement-<corpus>/{real,seed-<s>}`` through ``bench_quality.run_config`` (the
stage cache makes reruns cheap; a set changes only the documents its queries were cut from, and
vectors are cached per text). Per metric and seed: Kendall τ-b with its 95% bootstrap interval,
Spearman ρ, whether both pick the same best trial, the regret of the generated set's pick (its
real value minus the real best) and the confidence in that pick; for seed 0 and the first metric
the trials with both ranks, the swapped pairs that moved most and the mean rank change per
retriever kind (positive: the generated set ranks that kind lower).

``python -m benchmarks.bench_agreement [--n N] [--seeds K] [--limit-queries N]`` prints the
figures.

``AGREEMENT`` draws its RESULTS.md section (with ``bench_judged.draw``'s paragraph).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from benchmarks import bench_judged
from benchmarks.bench_quality import CHUNKING_EVAL, RUNS, SCIFACT, run_config
from benchmarks.render import REPO, Figures, Lines, one_line, part, relative, table
from ragbench.data.generate import IctMethod, LLMMethod, Method, generate
from ragbench.errors import RagbenchError
from ragbench.experiment.config import ExperimentConfig, load_config
from ragbench.experiment.store import RunStore
from ragbench.index.cache import default_cache_root
from ragbench.llm import local
from ragbench.llm.client import LLMConfig
from ragbench.registry import components
from ragbench.report.agreement import Agreement, agreement, agreement_config

SCIFACT_CONFIG = REPO / "experiments" / "agreement-scifact.yaml"
CHUNKING_CONFIG = REPO / "experiments" / "agreement-chunking.yaml"
SWAPS = 5  # swapped pairs listed per comparison
CEILING_SAMPLES = 200  # random samples of the train queries
LLM_PORT = 18437  # fixed, so a rerun's questions come from the LLM cache (keyed by the URL)


def _figures(found: Agreement) -> dict[str, Any]:
    """The numbers of one agreement, as plain values."""
    low, high = found.tau_ci if found.tau_ci is not None else (float("nan"), float("nan"))
    synthetic = found.confidence.get("synthetic")
    return {
        "metric": found.metric,
        "trials": len(found.trials),
        "left_out": list(found.left_out),
        "queries": list(found.queries or ()),
        "tau": found.tau,
        "tau_low": low,
        "tau_high": high,
        "rho": found.rho,
        "same_best": found.same_best,
        "regret": found.regret,
        "best_real": [found.trials.at[t, "label"] for t in found.best("real")],
        "best_synthetic": [found.trials.at[t, "label"] for t in found.best("synthetic")],
        "confidence": synthetic.line() if synthetic is not None else None,
    }


def _details(found: Agreement, kinds: pd.Series) -> dict[str, Any]:
    """The trials with both ranks, the first swaps and the mean rank change per retriever."""
    trials = found.trials.assign(kind=kinds.reindex(found.trials.index))
    return {
        "ranks": [
            {
                "label": row.label,
                "real": row.real,
                "synthetic": row.synthetic,
                "real_rank": int(row.real_rank),
                "synthetic_rank": int(row.synthetic_rank),
            }
            for row in trials.itertuples()
        ],
        "swaps": found.swaps.head(SWAPS).to_dict(orient="records"),
        "swapped": len(found.swaps),
        "change_by_retriever": {
            str(k): float(v) for k, v in trials.groupby("kind")["change"].mean().items()
        },
    }


def _provenance(done: dict[str, Any]) -> dict[str, Any]:
    """Where a run's numbers come from: its directory, queries, seconds and cached stages."""
    return {
        "run": relative(done["result"].path),
        "queries": int(done["result"].manifest["queries"]["count"]),
        "seconds": done["seconds"],
        "stages": done["stages"],
        "cached": done["cached"],
    }


def _one_set(
    config: ExperimentConfig,
    dataset: Path,
    root: Path,
    name: str,
    method: Method,
    n: int,
    seed: int,
    limit: int | None,
    cache_root: str,
) -> dict[str, Any]:
    """Generate ``method``'s set of ``dataset`` (replacing an older one), run the sweep on it
    and compare it with ``root/real`` on every metric."""
    target = root / "sets" / name
    shutil.rmtree(target, ignore_errors=True)
    made = generate(dataset, target, method, n=n, seed=seed)
    done = run_config(agreement_config(config, target), root / name, limit, cache_root)
    found = [agreement(root / "real", root / name, m.name) for m in config.evaluation.metrics]
    return {
        "set": {
            "queries": made.queries,
            "candidates": made.candidates,
            "dropped": made.dropped,
            "path": relative(target),
            "requests": made.requests,
            "cached": made.cached,
        },
        "run": _provenance(done),
        "agreement": [_figures(f) for f in found],
        "found": found,
    }


def corpus(
    name: str,
    config_path: Path,
    dataset: Path,
    runs: Path,
    cache_root: str,
    overrides: Sequence[str] = (),
    n: int = 300,
    seeds: Sequence[int] = (0,),
    limit: int | None = None,
) -> dict[str, Any]:
    """The real run of ``config_path`` on ``dataset`` and, per seed, the run on a set generated
    with the default method and its agreement with the real one."""
    config = load_config(config_path, overrides)
    root = runs / f"agreement-{name}"
    real = run_config(agreement_config(config, dataset), root / "real", limit, cache_root)
    kinds = real["result"].trials.set_index("trial_id")["param.retriever.kind"]
    out: dict[str, Any] = {
        "config": relative(config_path),
        "real": _provenance(real),
        "metrics": [m.name for m in config.evaluation.metrics],
        "seeds": {},
    }
    for seed in seeds:
        one = _one_set(
            config, dataset, root, f"seed-{seed}", IctMethod(), n, seed, limit, cache_root
        )
        found = one.pop("found")
        if seed == seeds[0]:
            out["details"] = _details(found[0], kinds)
        out["seeds"][str(seed)] = one
    return out


def ceiling(
    runs: Path,
    cache_root: str,
    scifact: Path = SCIFACT,
    overrides: Sequence[str] = (),
    n: int = 300,
    limit: int | None = None,
    seeds: Sequence[int] = (),
) -> dict[str, Any]:
    """How far real labels agree with real labels: the SciFact sweep on its train queries,
    and τ-b of random ``n``-query samples of them (``CEILING_SAMPLES``) against the test run;
    and the generated sets of ``seeds`` against the train run."""
    config = load_config(SCIFACT_CONFIG, overrides)
    root = runs / "agreement-scifact"
    test = agreement_config(config, scifact)
    train = test.model_copy(update={"dataset": test.dataset.model_copy(update={"split": "train"})})
    done = run_config(train, root / "train", limit, cache_root)
    metric = config.evaluation.metrics[0].name
    real = RunStore(root / "real").trials().set_index("trial_id")[metric]
    values = RunStore(root / "train").per_query()
    values = values[values["metric"] == metric].pivot(
        index="query_id", columns="trial_id", values="value"
    )[real.index]
    rng = np.random.default_rng(0)
    size = min(n, len(values))
    taus, regrets = [], []
    for _ in range(CEILING_SAMPLES):
        sample = values.iloc[rng.choice(len(values), size, replace=False)].mean()
        taus.append(float(stats.kendalltau(real, sample).statistic))
        regrets.append(float(real[sample.idxmax()] - real.max()))
    tau = np.array(taus)
    return {
        "run": _provenance(done),
        "metric": metric,
        "queries": size,
        "samples": CEILING_SAMPLES,
        "tau_mean": float(tau.mean()),
        "tau_sd": float(tau.std()),
        "tau_at_least_0_8": float((tau >= 0.8).mean()),
        "regret_mean": float(np.mean(regrets)),
        "regret_at_least_minus_0_005": float((np.array(regrets) >= -0.005).mean()),
        "test_against_train": agreement(root / "train", root / "real", metric).tau,
        "generated_against_train": [
            _figures(agreement(root / "train", root / f"seed-{seed}", metric)) for seed in seeds
        ],
    }


def llm_floor(
    runs: Path,
    cache_root: str,
    scifact: Path = SCIFACT,
    overrides: Sequence[str] = (),
    n: int = 100,
    limit: int | None = None,
) -> dict[str, Any]:
    """``--method llm`` on SciFact with SmolLM2-135M-Instruct on a local llama.cpp server:
    its agreement with the real labels, a floor for what an LLM method gives."""
    reason = "no questions asked for (n = 0)" if n == 0 else local.unavailable()
    if reason is not None:
        return {"skipped": reason}
    config = load_config(SCIFACT_CONFIG, overrides)
    root = runs / "agreement-scifact"
    with (
        tempfile.TemporaryDirectory() as tmp,
        local.llama_server(Path(tmp) / "llama.log", port=LLM_PORT) as llm,
    ):
        method = LLMMethod(
            # one request at a time (the server has one thread), minutes allowed on a busy machine
            LLMConfig(base_url=llm.url, model=llm.model, timeout=600, max_concurrency=1),
            cache=Path(cache_root),
            min_match=0.0,
            embedder=components("embedder").parse({"kind": "hashing", "dim": 256}, "embedder"),
        )
        try:
            one = _one_set(config, scifact, root, "llm", method, n, 0, limit, cache_root)
        except RagbenchError as exc:  # the other sections stand without this one
            return {"error": str(exc)}
    one.pop("found")
    return {"model": local.MODEL, **one}


def measure(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    scifact: Path = SCIFACT,
    chunking: Path = CHUNKING_EVAL,
    overrides: dict[str, list[str]] | None = None,
    n: int = 300,
    seeds: int = 5,
    limit: int | None = None,
    llm_n: int = 100,
    judged_ks: Sequence[int] = (20, 50, 100),
) -> dict[str, Any]:
    """Both corpora (``overrides``: config overrides per corpus name, for tiny runs), the real
    ceiling and the ``llm`` floor on SciFact, and the judged-subset curve."""
    root = str(cache_root or default_cache_root())
    extra = overrides or {}
    seeded = tuple(range(seeds))
    found = {
        "n": n,
        "corpora": {
            "scifact": corpus(
                "scifact", SCIFACT_CONFIG, scifact, runs, root, extra.get("scifact", []), n,
                seeded, limit,
            ),
            "chunking": corpus(
                "chunking", CHUNKING_CONFIG, chunking, runs, root, extra.get("chunking", []), n,
                seeded, limit,
            ),
        },
    }  # fmt: skip
    found["ceiling"] = ceiling(runs, root, scifact, extra.get("scifact", []), n, limit, seeded)
    found["llm"] = llm_floor(runs, root, scifact, extra.get("scifact", []), llm_n, limit)
    scifact_root = runs / "agreement-scifact"
    found["judged"] = bench_judged.measure(
        scifact_root / "real",
        scifact_root / "seed-0",
        found["corpora"]["scifact"]["metrics"][0],
        ks=tuple(judged_ks),
    )
    return found


# ---------------------------------------------------------------- RESULTS.md

HEADERS = (
    "set",
    "metric",
    "Kendall τ-b (95% CI)",
    "Spearman ρ",
    "same best",
    "regret",
    "confidence in the generated set's pick",
)
NAMES = {"scifact": "SciFact (BEIR test queries)", "chunking": "Chunking evaluation (Chroma)"}


def _row(name: str, a: Figures) -> tuple[str, ...]:
    """One set's agreement on one metric."""
    tied = len(a["best_synthetic"]) > 1
    return (
        name,
        a["metric"],
        f"{a['tau']:.3f} ({a['tau_low']:.3f} to {a['tau_high']:.3f})",
        f"{a['rho']:.3f}",
        "tie" if tied else ("yes" if a["same_best"] else "no"),
        f"{a['regret']:+.4f}",
        one_line(a["confidence"] or "–"),
    )


def _seed_spread(corpus: Figures) -> Lines:
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


def _swaps(details: Figures) -> str:
    """Seed 0's swaps and mean rank change per retriever kind."""
    change = ", ".join(
        f"{kind} {v:+.1f}" for kind, v in sorted(details["change_by_retriever"].items())
    )
    swaps = "; ".join(
        f"`{one_line(w['label_ahead_on_real'])}` ahead on real, "
        f"`{one_line(w['label_ahead_on_synthetic'])}` ahead on generated"
        for w in details["swaps"][:2]
    )
    return (
        f"- Seed 0: {details['swapped']} pairs of trials swap places (most moved: {swaps}). "
        f"Mean rank change per retriever kind (generated rank − real rank; positive: the "
        f"generated set ranks it lower): {change}."
    )


def _ceiling(found: Figures | None) -> Lines:
    """Real train labels against the real test labels, for scale."""
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
        *_against_train(found),
    ]


def _against_train(found: Figures) -> Lines:
    """The generated sets against the train labels: real queries no setting was chosen on."""
    sets = found.get("generated_against_train")
    if not sets:
        return []
    taus = [a["tau"] for a in sets]
    regrets = [a["regret"] for a in sets]
    return [
        f"The generated sets against the 809 *train* queries instead (real labels that no "
        f"setting of the generator was chosen on), {found['metric']}, seeds "
        f"{', '.join(map(str, range(len(sets))))}: τ-b {', '.join(f'{t:.3f}' for t in taus)} "
        f"(mean {np.mean(taus):.3f}); regret {', '.join(f'{r:+.4f}' for r in regrets)}. The "
        f"test labels against the train labels: τ-b {found['test_against_train']:.3f}.",
        "",
    ]


def _llm_floor(found: Figures | None) -> Lines:
    """The ``llm`` method with a small local model."""
    if not found:
        return []
    if "skipped" in found or "error" in found:
        why = found.get("skipped") or f"failed: {found['error']}"
        return [f"**`llm` with a local model**: {why}.", ""]
    made = found["set"]
    dropped = ", ".join(f"{reason} {n:,}" for reason, n in made["dropped"].items()) or "none"
    return [
        f"**`llm` with a local model, a floor**: `--method llm` with {found['model']} (135M "
        "parameters, llama.cpp on loopback, `ragbench.llm.local`): "
        f"{made['queries']} questions written ({made['requests'] + made.get('cached', 0)} "
        f"requests, {made.get('cached', 0)} of them answered from the LLM cache; dropped: "
        f"{dropped}). At this size the questions are near noise; a real model does better.",
        "",
        table(HEADERS, [_row("llm", a) for a in found["agreement"]]),
        "",
    ]


def _corpus_lines(key: str, corpus: Figures) -> Lines:
    """One corpus: its sets, seed 0's agreement per metric, the other seeds and the swaps."""
    real = corpus["real"]
    seed, first = next(iter(corpus["seeds"].items()))
    evaluated = first["agreement"][0]["queries"]
    return [
        f"**{NAMES.get(key, key)}**: `{corpus['config']}`; real: {real['queries']} queries; "
        f"generated: {first['set']['queries']} queries, of which "
        f"{evaluated[1] if evaluated else '–'} "
        "evaluated (a document-level run scores the queries judged at that level, a span-level "
        "one those with span evidence).",
        "",
        table(HEADERS, [_row(f"seed {seed}", a) for a in first["agreement"]]),
        "",
        *_seed_spread(corpus),
        _swaps(corpus["details"]),
        "",
    ]


METHOD = (
    "Does a set of generated queries rank configurations like real labels? Per corpus one "
    "sweep runs on the real queries and on sets generated from the same corpus with the "
    "default offline method (`ragbench datasets generate DIR --out OUT --n {n} "
    "--seed S`: a sentence is the query, cut out of the corpus the set is evaluated on; "
    "sentences with digits, code or a back-reference are skipped; span evidence is the "
    "neighbouring sentences that share three of its terms; a sentence whose neighbours "
    "repeat more than 45% of its terms is judged at the span levels only, so document-level "
    "runs evaluate fewer queries than were generated). `ragbench.report.agreement` "
    "compares the trials' mean metric: Kendall τ-b with its 95% bootstrap interval (each "
    "set's queries resampled), Spearman ρ, whether both pick the same best trial, the "
    "regret of the generated set's pick (its real value minus the real best) and the "
    "bootstrap confidence in that pick. The interval is that of τ-b between resampled sets: "
    "resampling adds noise to every trial's mean, which blurs the order, so the interval "
    "sits below the τ-b of the sets themselves and can end below it (a conservative range; "
    "read its lower bound)."
)


def draw(section: Figures) -> Lines:
    """Per corpus the generated sets' agreement with the real labels, then the ceiling, the
    ``llm`` floor and how many judged queries check a pick."""
    lines = [METHOD.format(n=section["n"]), ""]
    for key, corpus in section["corpora"].items():
        lines += _corpus_lines(key, corpus)
        if key == "scifact":
            lines += _ceiling(section.get("ceiling"))
    return [*lines, *_llm_floor(section.get("llm")), *bench_judged.draw(section.get("judged"))]


AGREEMENT = part("agreement", "Agreement of generated labels with real ones", draw)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="queries per generated set")
    parser.add_argument("--seeds", type=int, default=5, help="generated sets per corpus")
    parser.add_argument("--llm-n", type=int, default=100, help="questions of the llm set")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    found = measure(
        args.runs,
        args.cache,
        n=args.n,
        seeds=args.seeds,
        limit=args.limit_queries,
        llm_n=args.llm_n,
    )
    print(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
