"""Do generated labels rank configurations like real ones? One sweep per corpus, run on the
real labels and on sets generated from the same corpus, and their agreement.

* SciFact (experiments/agreement-scifact.yaml, document level): the 300 real test queries
  against an ``ict`` set of ``n`` queries generated from the SciFact corpus.
* Chroma's chunking evaluation (experiments/agreement-chunking.yaml, span level): the 472 real
  questions against an ``ict`` and a ``headings`` set generated from the five corpora; a method
  the corpora offer no candidates for (``headings`` needs Markdown or HTML headings) is
  recorded with the generator's reason.

Each set is generated afresh (seed 0) into ``<runs>/agreement-<corpus>/sets/<method>``; the
sweeps run into ``<runs>/agreement-<corpus>/{real,<method>}`` through ``bench_quality.run_config``
(the stage cache makes reruns cheap: the sets share the corpus, so chunks, document vectors and
indexes are built once). Per metric of the config: Kendall τ-b, Spearman ρ (with p-values),
pairs, each set's best trial and its rank on the other, top-3 overlap; for the first metric the
trials with both ranks, the swapped pairs that moved most and the mean rank change per
retriever kind (positive: the generated set ranks that kind lower).

``python -m benchmarks.bench_agreement [--n N] [--limit-queries N]`` prints the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.bench_quality import CHUNKING_EVAL, REPO, RUNS, SCIFACT, relative, run_config
from ragbench.data.generate import build_method, generate
from ragbench.errors import DataError
from ragbench.experiment.config import load_config
from ragbench.index.cache import default_cache_root
from ragbench.report.agreement import Agreement, agreement, agreement_config

SCIFACT_CONFIG = REPO / "experiments" / "agreement-scifact.yaml"
CHUNKING_CONFIG = REPO / "experiments" / "agreement-chunking.yaml"
SWAPS = 5  # swapped pairs listed per comparison


def _figures(found: Agreement) -> dict[str, Any]:
    """The numbers of one agreement, as plain values."""
    trials = found.trials
    return {
        "metric": found.metric,
        "trials": len(trials),
        "left_out": list(found.left_out),
        "tau": found.tau,
        "tau_p": found.tau_p,
        "rho": found.rho,
        "rho_p": found.rho_p,
        "concordant": found.concordant,
        "discordant": found.discordant,
        "tied": found.tied,
        "same_best": found.same_best,
        "best": {
            here: [
                {
                    "label": trials.at[t, "label"],
                    "rank_on_other": int(trials.at[t, f"{there}_rank"]),
                }
                for t in found.best(here)
            ]
            for here, there in (("real", "synthetic"), ("synthetic", "real"))
        },
        "top": found.top,
        "top_overlap": found.top_overlap,
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


def _fresh_set(dataset: Path, out: Path, method: str, n: int) -> dict[str, Any]:
    """Generate ``method``'s set of ``dataset`` into ``out`` (replacing an older one)."""
    shutil.rmtree(out, ignore_errors=True)
    result = generate(dataset, out, build_method(method), n=n, seed=0)
    return {"queries": result.queries, "candidates": result.candidates, "path": relative(out)}


def corpus(
    name: str,
    config_path: Path,
    dataset: Path,
    methods: Sequence[str],
    runs: Path,
    cache_root: str,
    overrides: Sequence[str] = (),
    n: int = 200,
    limit: int | None = None,
) -> dict[str, Any]:
    """The real run of ``config_path`` on ``dataset`` and, per generation method, the run on
    its generated set and the agreement of the two."""
    config = load_config(config_path, overrides)
    root = runs / f"agreement-{name}"
    real = run_config(agreement_config(config, dataset), root / "real", limit, cache_root)
    trials = real["result"].trials.set_index("trial_id")
    kinds = trials["param.retriever.kind"]
    out: dict[str, Any] = {
        "config": relative(config_path),
        "real": _provenance(real),
        "metrics": list(config.evaluation.metrics),
        "methods": {},
    }
    for method in methods:
        try:
            made = _fresh_set(dataset, root / "sets" / method, method, n)
        except DataError as exc:  # the corpus offers this method nothing
            out["methods"][method] = {"skipped": str(exc)}
            continue
        synthetic = run_config(
            agreement_config(config, root / "sets" / method), root / method, limit, cache_root
        )
        found = [
            agreement(root / "real", root / method, metric) for metric in config.evaluation.metrics
        ]
        out["methods"][method] = {
            "set": made,
            "run": _provenance(synthetic),
            "agreement": [_figures(f) for f in found],
            **_details(found[0], kinds),
        }
    return out


def _provenance(done: dict[str, Any]) -> dict[str, Any]:
    """Where a run's numbers come from: its directory, queries, seconds and cached stages."""
    return {
        "run": relative(done["result"].path),
        "queries": int(done["result"].manifest["queries"]["count"]),
        "seconds": done["seconds"],
        "stages": done["stages"],
        "cached": done["cached"],
    }


def measure(
    runs: Path = RUNS,
    cache_root: Path | str | None = None,
    scifact: Path = SCIFACT,
    chunking: Path = CHUNKING_EVAL,
    overrides: dict[str, list[str]] | None = None,
    n: int = 200,
    limit: int | None = None,
) -> dict[str, Any]:
    """Both corpora (``overrides``: config overrides per corpus name, for tiny runs)."""
    root = str(cache_root or default_cache_root())
    extra = overrides or {}
    return {
        "n": n,
        "corpora": {
            "scifact": corpus(
                "scifact",
                SCIFACT_CONFIG,
                scifact,
                ["ict"],
                runs,
                root,
                extra.get("scifact", []),
                n,
                limit,
            ),
            "chunking": corpus(
                "chunking",
                CHUNKING_CONFIG,
                chunking,
                ["ict", "headings"],
                runs,
                root,
                extra.get("chunking", []),
                n,
                limit,
            ),
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="queries per generated set")
    parser.add_argument("--limit-queries", type=int, default=None)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args(argv)
    found = measure(args.runs, args.cache, n=args.n, limit=args.limit_queries)
    print(json.dumps(found, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
