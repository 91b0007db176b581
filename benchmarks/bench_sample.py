"""How faithful is a sweep on a sample of the documents? optimize's default sweep on samples of
10%, 25% and 50% of a corpus (five seeds each), with labels generated from the sample as
``ragbench optimize`` generates them, against the same trials scored by the corpus' real labels
over every document.

* SciFact (5,183 abstracts; real labels: the 300 test queries' qrels, document level, the
  default config's nDCG@10 and recall@5).
* Chroma's chunking evaluation (five corpora, one document each; real labels: its 472
  questions, span level with span recall and IoU of the top 5, as the agreement benchmark
  scores it). A sample of documents is here a sample of whole corpora: 10% and 25% of five
  documents are one and two of them.

Per corpus: ``real``, the default sweep (``ragbench.optimize.default_config``) on the real
labels and every document; ``whole-<s>``, ``optimize DOCS --generate --sample all --seed s``
(the whole corpus' own generated labels, for scale); ``p<P>-<s>``, ``optimize DOCS --generate
--sample P% --seed s`` (the sample and its queries both seeded by ``s``). Each of the latter is
compared with ``real`` by ``ragbench.report.agreement`` (Kendall τ-b over the 14 trials, the
regret of its pick: the real value of the trial it picks minus the real best). The latency pass
is off (``latency.queries=0``) and the stage cache holds the vectors (cached per text: a
sample's chunks are the whole corpus' chunks), so each sweep costs its labels, its indexes and
its queries.

``python -m benchmarks.bench_sample [--seeds K]`` prints the figures; ``SAMPLE`` draws the
RESULTS.md section, with the default budget of ``ragbench optimize`` it led to.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_agreement import _figures
from benchmarks.bench_quality import CHUNKING_EVAL, RUNS, SCIFACT, run_config
from benchmarks.render import Figures, Lines, met, part, relative, signed, table
from ragbench.data.generate import corpus_documents
from ragbench.data.sample import choose
from ragbench.experiment.config import load_config
from ragbench.index.cache import default_cache_root
from ragbench.optimize import SAMPLE_CHARS, default_config, optimize
from ragbench.report.agreement import agreement

FRACTIONS = (10, 25, 50)
SEEDS = 5
LATENCY_OFF = "latency.queries=0"
SPAN_LEVEL = "evaluation={level: span, metrics: [span_recall@5, span_iou@5], depth: 5}"
TAU_WITHIN = 0.05  # a sample's mean τ-b within this of the whole corpus' own generated labels
REGRET_FLOOR = -0.01  # and the regret of its pick at least this on every seed
TARGET_FRACTION = 25  # the fraction of SciFact the issue holds to those two


def _chars(documents: Sequence[Any]) -> int:
    return sum(len(d.text) for d in documents)


def _swept(
    dataset: Path,
    root: Path,
    name: str,
    sample: str,
    seed: int,
    overrides: Sequence[str],
    metrics: Sequence[str],
    cache_root: str,
    documents: Sequence[Any],
) -> dict[str, Any]:
    """``optimize`` with generated labels on ``sample`` of ``dataset`` (seed ``seed``) into
    ``root/name``, and its agreement with ``root/real`` on each metric."""
    started = time.perf_counter()
    done = optimize(
        dataset,
        root / name,
        generate_labels=True,
        sample=sample,
        seed=seed,
        cache_root=cache_root,
        progress=False,
        overrides=overrides,
    )
    seconds = time.perf_counter() - started
    kept = choose(documents, done.sample.documents, seed) if done.sample else documents
    found = [agreement(root / "real", done.run.path, metric) for metric in metrics]
    print(
        f"[sample] {root.name} {name}: {len(kept):,} documents, τ-b {found[0].tau:.3f}, "
        f"regret {found[0].regret:+.4f} ({seconds:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    return {
        "run": relative(done.run.path),
        "documents": done.sample.documents if done.sample else done.documents,
        "of": done.documents,
        "chars": _chars(kept),
        "generated": done.generated,
        "queries": done.queries,
        "seconds": seconds,
        "agreement": [_figures(f) for f in found],
    }


def corpus(
    name: str,
    dataset: Path,
    runs: Path,
    cache_root: str,
    overrides: Sequence[str],
    fractions: Sequence[int] = FRACTIONS,
    seeds: int = SEEDS,
) -> dict[str, Any]:
    """The real run of the default sweep on ``dataset``, then per seed the whole corpus' own
    generated labels and per fraction and seed a sample's, each against the real run."""
    root = runs / f"sample-{name}"
    config = load_config(default_config(dataset, f"sample-{name}-real"), overrides)
    metrics = [m.name for m in config.evaluation.metrics]
    real = run_config(config, root / "real", None, cache_root)
    documents, _ = corpus_documents(dataset)
    out: dict[str, Any] = {
        "dataset": relative(dataset),
        "documents": len(documents),
        "chars": _chars(documents),
        "metrics": metrics,
        "real": {
            "run": relative(real["result"].path),
            "queries": int(real["result"].manifest["queries"]["count"]),
            "seconds": real["seconds"],
        },
        "sizes": {},
    }
    for size in ["all", *(f"{p}%" for p in fractions)]:
        label = "whole" if size == "all" else f"p{size.rstrip('%')}"
        out["sizes"][size] = {
            str(seed): _swept(
                dataset,
                root,
                f"{label}-{seed}",
                size,
                seed,
                overrides,
                metrics,
                cache_root,
                documents,
            )
            for seed in range(seeds)
        }
    return out


def measure(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    scifact: Path = SCIFACT,
    chunking: Path = CHUNKING_EVAL,
    extra: Sequence[str] = (),
    fractions: Sequence[int] = FRACTIONS,
    seeds: int = SEEDS,
) -> dict[str, Any]:
    """Both corpora (``extra``: overrides of both sweeps, for tiny runs)."""
    root = str(cache_root or default_cache_root())
    return {
        "fractions": list(fractions),
        "seeds": seeds,
        "budget": SAMPLE_CHARS,
        "corpora": {
            "scifact": corpus(
                "scifact", scifact, runs, root, [LATENCY_OFF, *extra], fractions, seeds
            ),
            "chunking": corpus(
                "chunking", chunking, runs, root, [LATENCY_OFF, SPAN_LEVEL, *extra], fractions,
                seeds,
            ),
        },
    }  # fmt: skip


# ---------------------------------------------------------------- RESULTS.md

NAMES = {
    "scifact": "SciFact (BEIR test queries, document level)",
    "chunking": "Chunking evaluation (Chroma, span level)",
}
HEADERS = (
    "sweep on",
    "documents",
    "characters",
    "metric",
    "τ-b per seed",
    "mean τ-b",
    "Δ mean τ-b vs whole",
    "regret per seed",
    "worst regret",
    "same pick as the real labels",
    "seconds per sweep",
)


def _summary(seeds: Mapping[str, Figures], metric: int) -> dict[str, Any]:
    """τ-b and regret of one size's seeds on one metric."""
    found = [one["agreement"][metric] for one in seeds.values()]
    taus = [a["tau"] for a in found]
    regrets = [a["regret"] for a in found]
    return {
        "taus": taus,
        "tau": float(np.mean(taus)),
        "regrets": regrets,
        "worst": float(min(regrets)),
        "same": sum(bool(a["same_best"]) for a in found),
        "documents": float(np.mean([one["documents"] for one in seeds.values()])),
        "chars": float(np.mean([one["chars"] for one in seeds.values()])),
        "seconds": float(np.mean([one["seconds"] for one in seeds.values()])),
    }


def _rows(found: Figures) -> list[tuple[str, ...]]:
    """One row per size and metric, the whole corpus first."""
    rows = []
    for i, metric in enumerate(found["metrics"]):
        whole = _summary(found["sizes"]["all"], i)
        for size, seeds in found["sizes"].items():
            one = _summary(seeds, i)
            rows.append(
                (
                    "whole corpus" if size == "all" else f"{size} sample",
                    f"{one['documents']:,.0f} of {found['documents']:,}",
                    f"{one['chars'] / 1e6:.2f} M",
                    metric,
                    ", ".join(f"{t:.3f}" for t in one["taus"]),
                    f"{one['tau']:.3f}",
                    "–" if size == "all" else signed(one["tau"] - whole["tau"], 3),
                    ", ".join(signed(r) for r in one["regrets"]),
                    signed(one["worst"]),
                    f"{one['same']} of {len(one['taus'])}",
                    f"{one['seconds']:.0f}",
                )
            )
    return rows


def verdict(found: Figures, fraction: int = TARGET_FRACTION) -> dict[str, Any] | None:
    """The issue's test on the first metric: the ``fraction`` sample's mean τ-b against the
    whole corpus' own, and its worst regret."""
    size = f"{fraction}%"
    if size not in found["sizes"]:
        return None
    whole, one = _summary(found["sizes"]["all"], 0), _summary(found["sizes"][size], 0)
    return {
        "metric": found["metrics"][0],
        "fraction": fraction,
        "tau": one["tau"],
        "whole": whole["tau"],
        "gap": one["tau"] - whole["tau"],
        "worst": one["worst"],
        "close": one["tau"] >= whole["tau"] - TAU_WITHIN,
        "safe": one["worst"] >= REGRET_FLOOR,
        "chars": one["chars"],
    }


def smallest_faithful(found: Figures) -> dict[str, Any] | None:
    """The smallest measured sample that meets both tests on the first metric."""
    for fraction in sorted(int(s.rstrip("%")) for s in found["sizes"] if s != "all"):
        test = verdict(found, fraction)
        if test is not None and test["close"] and test["safe"]:
            return test
    return None


METHOD = (
    "Does a sweep on a sample of the documents rank configurations as a sweep on all of them "
    "would? Per corpus, optimize's default sweep (14 trials: BM25 at four settings, dense "
    "MiniLM int8, hybrid RRF and convex, on two chunkings) runs once on the corpus' real "
    "labels over every document, and once per seed (0 to {last}) on `ragbench optimize DOCS "
    "--generate --sample P% --seed S`: a sample of the documents (`ragbench.data.sample`: "
    "half of it seeds drawn stratified by folder, file type and size quartile, half the "
    "seeds' nearest neighbours by tf-idf cosine, still stratified) and {n} queries generated "
    "from it as "
    "optimize generates them. `ragbench.report.agreement` compares each with the real run: "
    "Kendall τ-b over the 14 trials and the regret of the sample's pick (the real value of "
    "the trial it picks minus the real best; 0 when it picks the real best). The whole corpus' "
    "own generated labels (`--sample all`, same seeds) are the scale: a sample can at best "
    "agree with the real labels as well as labels generated from every document do. Latency "
    "pass off; seconds per sweep are warm (the vectors come from the stage cache), so they "
    "show labels, indexes and queries, not embedding."
)


def _corpus_lines(key: str, found: Figures) -> Lines:
    real = found["real"]
    return [
        f"**{NAMES.get(key, key)}**: `{found['dataset']}`, {found['documents']:,} documents, "
        f"{found['chars'] / 1e6:.2f} M characters; real labels: {real['queries']} queries "
        f"(`{real['run']}`).",
        "",
        table(HEADERS, _rows(found)),
        "",
    ]


def _verdict_lines(found: Figures) -> Lines:
    test = verdict(found)
    if test is None:
        return []
    return [
        f"**The issue's test on SciFact** ({test['metric']}, {test['fraction']}% samples, "
        f"{test['chars'] / 1e6:.2f} M characters): mean τ-b {test['tau']:.3f} against the whole "
        f"corpus' own {test['whole']:.3f} ({signed(test['gap'], 3)}; within {TAU_WITHIN}: "
        f"{met(test['gap'], -TAU_WITHIN)}); worst regret {signed(test['worst'])} (at least "
        f"{REGRET_FLOOR} on every seed: {met(test['worst'], REGRET_FLOOR)}).",
        "",
    ]


def _budget_lines(section: Figures) -> Lines:
    """The default budget of optimize, and what in these figures it rests on."""
    budget = section["budget"]
    lines = [
        f"**The default budget.** `ragbench optimize` sweeps a corpus of more than "
        f"{budget:,} characters on a sample of about {budget:,} (`SAMPLE_CHARS` in "
        "`ragbench/optimize.py`; characters rather than documents, because a sweep's time "
        "grows with the chunks it embeds, however the text is split into files)."
    ]
    scifact = section["corpora"].get("scifact")
    if scifact is None:
        return [*lines, ""]
    lines[0] += " On SciFact: " + "; ".join(_verdicts(scifact)) + ". " + _noise(scifact)
    smallest = smallest_faithful(scifact)
    if smallest is None:
        lines[0] += " No measured SciFact sample met both tests, so none of them supports it."
        return [*lines, ""]
    lines[0] += (
        f" The smallest sample that met both is {smallest['fraction']}% "
        f"({smallest['chars'] / 1e6:.2f} M characters); the budget is "
        f"{budget / smallest['chars']:.1f}× that"
        + (
            ", so a default sample is at least as large as one measured faithful."
            if budget >= smallest["chars"]
            else ", smaller than any sample measured faithful here."
        )
    )
    return [*lines, ""]


def _verdicts(found: Figures) -> list[str]:
    """Per measured fraction: its mean τ-b against the whole corpus', its worst regret, and
    which of the two tests it met."""
    said = []
    for fraction in sorted(int(s.rstrip("%")) for s in found["sizes"] if s != "all"):
        test = verdict(found, fraction)
        if test is None:
            continue
        met = {
            (True, True): "met both tests",
            (False, True): "missed the τ-b test",
            (True, False): "missed the regret test",
            (False, False): "missed both tests",
        }[(test["close"], test["safe"])]
        said.append(
            f"{fraction}% ({test['chars'] / 1e6:.2f} M characters) {met} (mean τ-b "
            f"{test['tau']:.3f} against {test['whole']:.3f}, {signed(test['gap'], 3)}; worst "
            f"regret {signed(test['worst'])})"
        )
    return said


def _noise(found: Figures) -> str:
    """How far apart two means of the seeds' τ-b may fall by chance: the whole corpus' own
    spread over its seeds."""
    taus = _summary(found["sizes"]["all"], 0)["taus"]
    if len(taus) < 2:
        return ""
    spread = float(np.std(taus, ddof=1))
    apart = spread * float(np.sqrt(2 / len(taus)))
    return (
        f"The whole corpus' own τ-b spreads {min(taus):.3f}–{max(taus):.3f} over its "
        f"{len(taus)} seeds (standard deviation {spread:.3f}), so two means of {len(taus)} "
        f"seeds differ by about {apart:.3f} by chance alone (the standard error of their "
        "difference)."
    )


def draw(section: Figures) -> Lines:
    """Both corpora's tables, the issue's test on SciFact and the default budget."""
    lines = [METHOD.format(last=section["seeds"] - 1, n=300), ""]
    for key, found in section["corpora"].items():
        lines += _corpus_lines(key, found)
        if key == "scifact":
            lines += _verdict_lines(found)
    return [*lines, *_budget_lines(section)]


SAMPLE = part("sample", "Sweeps on a sample of the documents", draw)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds per sample size")
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    found = measure(args.runs, args.cache, seeds=args.seeds)
    print(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
