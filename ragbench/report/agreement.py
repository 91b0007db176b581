"""Do two labeled sets rank a sweep's trials alike? Real labels against generated ones
(``ragbench datasets agreement REAL SYNTH --config SWEEP.yaml``).

``run_agreement`` runs one sweep twice — its config with the dataset replaced by each set
(``agreement_config``) — into ``<out>/real`` and ``<out>/synthetic`` (resumed when they exist),
and ``agreement`` reads two such run directories. Over the trials finished in both, with each
trial's mean ``metric`` per set:

- **Kendall τ-b** and **Spearman ρ** between the two sets' values (``scipy.stats.kendalltau``,
  which corrects for ties, and ``spearmanr``), with their two-sided p-values, and a 95%
  percentile **interval for τ-b** (``tau_interval``): each set's queries are resampled
  independently (one draw per set and resample, applied to every trial), the trials' means
  and τ-b recomputed per resample;
- **pairs**: concordant (both sets order the two trials alike), discordant (they swap places)
  and tied (on either set);
- **top-1**: each set's best trial (all trials tied for first: a tie is not a pick) and where
  it ranks on the other set; **top-3 overlap**: the trials ranked 1–3 on both sets;
- **regret**: the real value of the synthetic set's pick minus the real best, signed so that
  a worse pick is negative whatever the metric's direction (with a tie on the synthetic set,
  the mean over the tied trials); and each set's
  **confidence** in its pick (``confidence.pick_confidence``, from the per-query values);
- **swaps**: the discordant pairs, those whose trials moved most (the sum of both trials'
  absolute rank changes) first.

Ranks are 1 for the best value (by the metric's direction), tied values sharing the better
rank (1, 2, 2, 4). A generated set that agrees (τ near 1, the same best trial) can stand in for
real labels when choosing among these configurations; ``ict`` and ``headings`` sets are
biased toward lexical matching, so watch where BM25 and dense trials swap.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ragbench.data.catalog import dataset_format, resolve_dataset
from ragbench.data.sample import ranked_text
from ragbench.errors import ConfigError, DataError
from ragbench.evaluate.metrics import TIE_RTOL, parse_metric
from ragbench.evaluate.significance import bootstrap_means
from ragbench.experiment.config import ExperimentConfig, load_config
from ragbench.experiment.runner import run
from ragbench.experiment.store import RunStore
from ragbench.owned import claim
from ragbench.report.confidence import PickConfidence, pick_confidence, tie_text
from ragbench.report.tables import markdown_table

__all__ = [
    "Agreement",
    "agreement",
    "agreement_config",
    "compare_rankings",
    "run_agreement",
    "tau_interval",
]

SETS = ("real", "synthetic")


@dataclass(frozen=True)
class Agreement:
    """How alike two labeled sets rank the same trials on ``metric``.

    ``trials``: one row per trial compared (index ``trial_id``), best on the real set first:
    ``label``, ``real`` and ``synthetic`` (mean metric), ``real_rank``, ``synthetic_rank`` and
    ``change`` (synthetic rank − real rank: positive when the synthetic set ranks it lower).
    ``swaps``: the discordant pairs, largest rank changes first: ``ahead_on_real`` and
    ``ahead_on_synthetic`` (trial ids), their labels, ranks on both sets and ``moved`` (the sum
    of both trials' absolute rank changes). ``tau_ci``: the 95% bootstrap interval of τ-b and
    ``confidence``: each set's confidence in its pick (``real``, ``synthetic``), both from
    per-query values when they were given."""

    metric: str
    trials: pd.DataFrame
    tau: float
    tau_p: float
    rho: float
    rho_p: float
    concordant: int
    discordant: int
    tied: int
    swaps: pd.DataFrame
    left_out: tuple[str, ...] = ()
    runs: tuple[Path, Path] | None = None
    queries: tuple[int, int] | None = None
    documents: tuple[str, str] | None = None
    """The documents each run ranked (``all 58 documents``, ``a sample of 20 of 58 ...``)."""
    top: int = 3
    tau_ci: tuple[float, float] | None = None
    confidence: Mapping[str, PickConfidence] = field(default_factory=dict)
    higher_is_better: bool = True
    """The metric's direction, read once when the metric was parsed."""

    def best(self, labels: str) -> list[str]:
        """The trials ranked first on ``labels`` (``real`` or ``synthetic``): one, or all
        those tied for first."""
        ranks = self.trials[f"{labels}_rank"]
        return list(ranks[ranks == 1].index)

    @property
    def same_best(self) -> bool:
        """Whether both sets pick the same trial: False when either ties for first (a tie is
        not a pick)."""
        real, synthetic = self.best("real"), self.best("synthetic")
        return len(real) == len(synthetic) == 1 and real == synthetic

    @property
    def regret(self) -> float:
        """The synthetic set's pick on real labels minus the real best, in the metric's units
        (≤ 0: how much worse the pick is; 0 when it picks the real best). With a tie on the
        synthetic set, the mean of the tied trials' real values stands for the pick."""
        picked, best = (
            self._mean("real", self.best("synthetic")),
            self._mean("real", self.best("real")),
        )
        return picked - best if self.higher_is_better else best - picked

    def _mean(self, labels: str, trials: list[str]) -> float:
        """The mean of the values of ``trials`` on ``labels``."""
        return float(self.trials[labels].reindex(trials).mean())

    def top_trials(self, labels: str) -> list[str]:
        """The trials ranked ``top`` or better on ``labels`` (more than ``top`` with ties)."""
        ranks = self.trials[f"{labels}_rank"]
        return list(ranks[ranks <= self.top].sort_values(kind="stable").index)

    @property
    def top_overlap(self) -> int:
        """How many trials are among the ``top`` of both sets."""
        return len(set(self.top_trials("real")) & set(self.top_trials("synthetic")))

    def to_markdown(self, swaps: int = 10) -> str:
        """The figures as Markdown: a summary, the trials by rank and the first ``swaps``
        swapped pairs."""
        summary = pd.DataFrame(self._summary_rows(), columns=["figure", "value"])
        parts = [
            markdown_table(summary, index=False),
            "",
            markdown_table(self._table(), index=False),
        ]
        if self.runs is not None:
            parts[:0] = [f"Run directories: real {self.runs[0]}, synthetic {self.runs[1]}.", ""]
        if len(self.swaps):
            shown = self.swaps.head(swaps)
            more = f" (the first {len(shown)} of {len(self.swaps)})"
            more = more if len(shown) < len(self.swaps) else ""
            parts += [
                "",
                f"Trials that swap places{more}, largest rank changes first (ranks: the trial "
                "ahead on real / the trial ahead on synthetic):",
                "",
                markdown_table(_swap_table(shown), index=False),
            ]
        return "\n".join(parts)

    def _summary_rows(self) -> list[tuple[str, str]]:
        """The summary table's (figure, value) rows."""
        trials = self.trials
        rows: list[tuple[str, str]] = [
            ("metric", self.metric),
            ("trials compared", f"{len(trials)}" + self._left_out()),
        ]
        if self.queries is not None:
            rows.append(("queries", f"real {self.queries[0]:,}, synthetic {self.queries[1]:,}"))
        if self.documents is not None:
            rows.append(("documents", f"real {self.documents[0]}, synthetic {self.documents[1]}"))
        rows += [
            ("Kendall τ-b", _coefficient(self.tau, self.tau_p, trials, self.tau_ci)),
            ("Spearman ρ", _coefficient(self.rho, self.rho_p, trials)),
            (
                "pairs of trials",
                f"{self.concordant} concordant, {self.discordant} swapped, {self.tied} tied "
                "on either set",
            ),
            ("same best trial", self._same_best_text()),
        ]
        for here, there in (SETS, SETS[::-1]):
            rows.append((f"best on {here}", self._best_text(here, there)))
        rows.append(("regret of the synthetic pick", self._regret_text()))
        for name in SETS:
            if name in self.confidence:
                rows.append((f"confidence on {name}", self.confidence[name].line()))
        overlap = f"{self.top_overlap} of {min(self.top, len(trials))}"
        rows.append((f"top-{self.top} overlap", overlap))
        return rows

    def _best_text(self, here: str, there: str) -> str:
        """The best trial on ``here`` and its rank on ``there``, or the tie for first."""
        ranks, label = self.trials[f"{there}_rank"], self.trials["label"]
        best = self.best(here)
        placed = [f"{label[t]!s} (#{ranks[t]} on {there})" for t in best]
        if len(placed) == 1:
            return placed[0]
        return tie_text(placed, self._mean(here, best))

    def _same_best_text(self) -> str:
        """yes, no, or which set ties for first (a tie is not a pick)."""
        if self.same_best:
            return "yes"
        ties = [f"the {s} set ties {len(self.best(s))} trials" for s in SETS if self._ties(s)]
        return f"no pick to compare: {' and '.join(ties)} for first" if ties else "no"

    def _ties(self, labels: str) -> bool:
        return len(self.best(labels)) > 1

    def _regret_text(self) -> str:
        """The regret, with the real values it is the difference of."""
        trials, picked = self.trials, self.best("synthetic")
        best, value = self._mean("real", self.best("real")), self._mean("real", picked)
        if self._ties("synthetic"):
            pick = f"the mean of the {len(picked)} trials tied on synthetic"
        else:
            pick = str(trials["label"][picked[0]])
        if self.regret == 0 and not self._ties("synthetic"):
            return f"0 ({pick} is the best on real too)"
        return (
            f"{self.regret:+.4f} {self.metric} on real labels ({pick}: {value:.4f}; the real "
            f"best: {best:.4f})"
        )

    def _table(self) -> pd.DataFrame:
        """The trials by rank on both sets."""
        trials = self.trials
        table = trials.assign(change=trials["change"].map(lambda c: f"{int(c):+d}" if c else "0"))
        table = table.reset_index()[
            ["real_rank", "synthetic_rank", "change", "label", "real", "synthetic", "trial_id"]
        ]
        table.columns = [
            "rank real",
            "rank synthetic",
            "change",
            "trial",
            f"{self.metric} real",
            f"{self.metric} synthetic",
            "trial id",
        ]
        return table

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def _left_out(self) -> str:
        if not self.left_out:
            return ""
        return f" (left out, not finished on both sets: {', '.join(self.left_out)})"


def _swap_table(shown: pd.DataFrame) -> pd.DataFrame:
    """The swapped pairs as shown: labels, ranks on both sets and how far they moved."""
    return pd.DataFrame(
        {
            "ahead on real": shown["label_ahead_on_real"],
            "ahead on synthetic": shown["label_ahead_on_synthetic"],
            "ranks real": [
                f"{a} / {b}"
                for a, b in zip(shown["real_rank_a"], shown["real_rank_b"], strict=True)
            ],
            "ranks synthetic": [
                f"{a} / {b}"
                for a, b in zip(shown["synthetic_rank_a"], shown["synthetic_rank_b"], strict=True)
            ],
            "moved": shown["moved"],
        }
    )


def _coefficient(
    value: float, p: float, trials: pd.DataFrame, interval: tuple[float, float] | None = None
) -> str:
    """A correlation, its bootstrap interval (when given) and p-value, or why it is
    undefined."""
    if value == value:
        if interval is None or interval[0] != interval[0]:
            return f"{value:.3f} (p = {p:.2g})"
        return f"{value:.3f} (95% CI {interval[0]:.3f} to {interval[1]:.3f}; p = {p:.2g})"
    constant = [s for s in SETS if trials[s].nunique() == 1]
    return f"undefined: every trial ties on the {' and the '.join(constant)} set"


def compare_rankings(
    real: pd.Series,
    synthetic: pd.Series,
    metric: str,
    labels: pd.Series | None = None,
    top: int = 3,
    per_query: tuple[pd.DataFrame, pd.DataFrame] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Agreement:
    """The agreement of two sets' values of ``metric`` per trial (Series indexed by trial id,
    the same trials); ``labels`` names the trials (default: their ids). With ``per_query``
    (each set's values, queries × trial ids) also τ-b's bootstrap interval and each set's
    confidence in its pick, from ``n_resamples`` resamples (``seed``: the real set's draws,
    ``seed + 1`` the synthetic set's). ``DataError`` with fewer than two trials."""
    if set(real.index) != set(synthetic.index) or real.index.has_duplicates:
        raise ValueError("real and synthetic must hold one value per trial, of the same trials")
    if len(real) < 2:
        raise DataError(f"{metric}: {len(real)} trial(s) to compare; agreement needs two or more")
    higher = parse_metric(metric).higher_is_better
    frame = pd.DataFrame(
        {
            "label": labels.reindex(real.index) if labels is not None else real.index.to_series(),
            "real": real.astype(float),
            "synthetic": synthetic.reindex(real.index).astype(float),
        }
    )
    for name in SETS:
        frame[f"{name}_rank"] = frame[name].rank(method="min", ascending=not higher).astype(int)
    frame["change"] = frame["synthetic_rank"] - frame["real_rank"]
    frame = frame.sort_values(["real_rank", "synthetic_rank"], kind="stable")
    frame.index.name = "trial_id"
    with warnings.catch_warnings():  # a set on which every trial ties: NaN, said so in reports
        warnings.simplefilter("ignore", stats.ConstantInputWarning)
        tau = stats.kendalltau(frame["real"], frame["synthetic"])
        rho = stats.spearmanr(frame["real"], frame["synthetic"])
    concordant, discordant, tied, swapped = _pairs(frame)
    found = Agreement(
        metric=metric,
        trials=frame,
        tau=float(tau.statistic),
        tau_p=float(tau.pvalue),
        rho=float(rho.statistic),
        rho_p=float(rho.pvalue),
        concordant=concordant,
        discordant=discordant,
        tied=tied,
        swaps=swapped,
        top=top,
        higher_is_better=higher,
    )
    return found if per_query is None else _resampled(found, per_query, n_resamples, seed)


def _resampled(
    found: Agreement, per_query: tuple[pd.DataFrame, pd.DataFrame], n_resamples: int, seed: int
) -> Agreement:
    """``found`` with τ-b's bootstrap interval and each set's confidence in its pick, from
    each set's per-query values (queries × trial ids)."""
    frame = found.trials
    tables = [t.reindex(columns=frame.index) for t in per_query]
    names = {str(t): str(label) for t, label in frame["label"].items()}
    return replace(
        found,
        tau_ci=tau_interval(*tables, n_resamples=n_resamples, seed=seed),
        confidence={
            name: pick_confidence(
                table, found.metric, names, n_resamples=n_resamples, seed=seed + i
            )
            for i, (name, table) in enumerate(zip(SETS, tables, strict=True))
        },
    )


def _pairs(frame: pd.DataFrame) -> tuple[int, int, int, pd.DataFrame]:
    """Concordant, discordant and tied pairs of the trials of ``frame`` (sorted by real
    rank), and the discordant ones as swaps, largest rank changes first."""
    ids, labels_of = list(frame.index), frame["label"].tolist()
    real_ranks, synthetic_ranks = frame["real_rank"].tolist(), frame["synthetic_rank"].tolist()
    concordant = discordant = tied = 0
    swaps: list[dict[str, Any]] = []
    for a, b in itertools.combinations(range(len(ids)), 2):  # a ranks ahead of b on real
        order = (real_ranks[a] - real_ranks[b]) * (synthetic_ranks[a] - synthetic_ranks[b])
        concordant += order > 0
        tied += order == 0
        if order < 0:
            discordant += 1
            swaps.append(
                {
                    "ahead_on_real": ids[a],
                    "ahead_on_synthetic": ids[b],
                    "label_ahead_on_real": labels_of[a],
                    "label_ahead_on_synthetic": labels_of[b],
                    "real_rank_a": real_ranks[a],
                    "real_rank_b": real_ranks[b],
                    "synthetic_rank_a": synthetic_ranks[a],
                    "synthetic_rank_b": synthetic_ranks[b],
                    "moved": abs(synthetic_ranks[a] - real_ranks[a])
                    + abs(synthetic_ranks[b] - real_ranks[b]),
                }
            )
    swapped = pd.DataFrame(swaps, columns=_SWAP_COLUMNS)
    if len(swapped):
        swapped = swapped.sort_values(
            ["moved", "real_rank_a", "real_rank_b"], ascending=[False, True, True], kind="stable"
        ).reset_index(drop=True)
    return concordant, discordant, tied, swapped


def tau_interval(
    real: pd.DataFrame,
    synthetic: pd.DataFrame,
    *,
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of Kendall's τ-b between two sets' trial means:
    each set's queries (rows of ``real`` and ``synthetic``, queries × the same trial ids)
    resampled on their own, paired across trials (``significance.bootstrap_means``; ``seed``
    draws the real set's resamples, ``seed + 1`` the synthetic set's), τ-b computed per
    resample; the interval's ends are quantiles the resamples took (no interpolation).
    Resamples on which every trial ties on a set (τ-b undefined) are left out; NaN when all
    are."""
    if set(real.columns) != set(synthetic.columns) or real.columns.has_duplicates:
        raise ValueError("real and synthetic must hold the same trials (columns)")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    for name, table in zip(SETS, (real, synthetic), strict=True):
        if table.isna().to_numpy().any():
            raise ValueError(f"the {name} values contain NaN: leave out those queries")
    x = bootstrap_means(real.to_numpy(), n_resamples, seed)
    y = bootstrap_means(synthetic[real.columns].to_numpy(), n_resamples, seed + 1)
    taus = _tau_b(x, y)
    taus = taus[~np.isnan(taus)]
    if not len(taus):
        return float("nan"), float("nan")
    tail = (1 - confidence) / 2
    # τ-b takes few values over few trials: the interval's ends are values it took
    low, high = np.quantile(taus, [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)


_PAIR_BLOCK = 1 << 20  # (resample, pair) entries per block of _tau_b


def _tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's τ-b between the rows of ``x`` and ``y`` (resamples × trials), one per row:
    (concordant − discordant) / sqrt(pairs untied on x × pairs untied on y), values within
    ``TIE_RTOL`` tied; NaN where a row ties every pair."""
    first, second = np.triu_indices(x.shape[1], 1)
    rows = max(1, _PAIR_BLOCK // max(1, len(first)))
    out = []
    for start in range(0, len(x), rows):
        signs = []
        for values in (x[start : start + rows], y[start : start + rows]):
            a, b = values[:, first], values[:, second]
            signs.append(np.sign(a - b) * ~np.isclose(a, b, rtol=TIE_RTOL, atol=0.0))
        untied = np.count_nonzero(signs[0], axis=1) * np.count_nonzero(signs[1], axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out.append((signs[0] * signs[1]).sum(axis=1) / np.sqrt(untied))
    return np.concatenate(out)


_SWAP_COLUMNS = [
    "ahead_on_real",
    "ahead_on_synthetic",
    "label_ahead_on_real",
    "label_ahead_on_synthetic",
    "real_rank_a",
    "real_rank_b",
    "synthetic_rank_a",
    "synthetic_rank_b",
    "moved",
]


def _metric(store: RunStore, metric: str | None) -> str:
    """``metric`` (default: the run's first) in the spelling the run evaluated it in."""
    evaluated = store.metrics()
    if metric is None:
        return evaluated[0]
    try:
        name = parse_metric(metric).name
    except ConfigError as exc:
        raise ConfigError(f"--metric {metric!r}: {exc}") from None
    if name not in evaluated:
        skipped = store.manifest().get("skipped_metrics") or {}
        why = f" ({name} skipped: {skipped[name]})" if name in skipped else ""
        raise DataError(
            f"{store.path}: --metric {metric!r} was not evaluated{why}; the run evaluated "
            f"{', '.join(evaluated)}"
        )
    return name


def _per_query(store: RunStore, metric: str, trials: pd.Index) -> pd.DataFrame:
    """The run's values of ``metric`` as queries × ``trials``, without the queries where
    some of them has no value; ``DataError`` naming the file when no query is left."""
    values = store.per_query()
    values = values[(values["metric"] == metric) & values["trial_id"].isin(trials)]
    table = values.pivot(index="query_id", columns="trial_id", values="value")
    table = table.reindex(columns=trials).dropna()
    if table.empty:
        raise DataError(
            f"{store.path / 'per_query.parquet'}: no query has a {metric} value for every "
            "trial compared"
        )
    return table


def agreement(
    real: str | Path,
    synthetic: str | Path,
    metric: str | None = None,
    top: int = 3,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Agreement:
    """The agreement of two run directories of one sweep (one on real labels, one on
    generated labels) on ``metric`` (default: the real run's first metric), over the trials
    finished in both; the others are listed in ``left_out``. τ-b's interval and the
    confidence in each set's pick come from the runs' per-query values (``n_resamples``
    bootstrap resamples, ``seed``)."""
    stores = [RunStore(real), RunStore(synthetic)]
    name = _metric(stores[0], metric)
    _metric(stores[1], name)
    finished = []
    for store in stores:
        trials = store.trials()
        ok = trials[trials["status"] == "ok"] if not trials.empty else trials
        finished.append(ok.set_index("trial_id"))
    both = finished[0].index.intersection(finished[1].index, sort=False)
    values = [frame.loc[both, name] for frame in finished]
    labels = pd.concat([f["label"] for f in finished])
    labels = labels[~labels.index.duplicated()]
    keep = both[(values[0].notna() & values[1].notna()).to_numpy()]
    if len(keep) < 2:
        raise DataError(
            f"{stores[0].path} and {stores[1].path}: {len(keep)} trial(s) with {name} finished "
            "in both; agreement needs two or more"
        )
    tables = (_per_query(stores[0], name, keep), _per_query(stores[1], name, keep))
    found = compare_rankings(
        values[0][keep], values[1][keep], name, labels, top, tables, n_resamples, seed
    )
    manifests = [s.manifest() for s in stores]
    real_queries, synthetic_queries = (int(m["queries"]["count"]) for m in manifests)
    return replace(
        found,
        left_out=tuple(sorted(labels.drop(keep))),
        runs=(stores[0].path, stores[1].path),
        queries=(real_queries, synthetic_queries),
        documents=(ranked_text(manifests[0]["dataset"]), ranked_text(manifests[1]["dataset"])),
    )


def agreement_config(config: ExperimentConfig, dataset: str | Path) -> ExperimentConfig:
    """``config`` on ``dataset`` (a path or a bundled name; format detected, the config's
    split) without honest selection: agreement compares every trial on one split."""
    given = Path(dataset).expanduser()
    path = str(given.resolve()) if given.exists() else str(dataset)
    spec = config.dataset.model_copy(update={"path": path, "format": None, "queries": None})
    evaluation = config.evaluation.model_copy(
        update={"select_on": None, "report_on": None, "folds": None}
    )
    return config.model_copy(update={"dataset": spec, "evaluation": evaluation})


def run_agreement(
    config: str | Path | ExperimentConfig,
    real: str | Path,
    synthetic: str | Path,
    *,
    metric: str | None = None,
    out: str | Path | None = None,
    limit_queries: int | None = None,
    overwrite: bool = False,
    cache_root: str | Path | None = None,
    progress: bool = True,
    n_resamples: int = 1000,
    seed: int = 0,
) -> Agreement:
    """Run ``config``'s sweep on the labeled sets ``real`` and ``synthetic`` into
    ``<out>/real`` and ``<out>/synthetic`` (default ``out``: ``runs/agreement-<name>``;
    existing runs are resumed unless ``overwrite``) and return their ``agreement`` on
    ``metric`` (default: the config's first metric, which must be one it evaluates), with
    ``n_resamples`` bootstrap resamples (``seed``)."""
    cfg = config if isinstance(config, ExperimentConfig) else load_config(config)
    if cfg.dataset.sample is not None:
        where = f"{config}: " if isinstance(config, str | Path) else ""
        raise ConfigError(
            f"{where}dataset.sample: a sample draws each set's own documents (those its "
            "queries judge), so the two sweeps would rank different corpora; agreement runs "
            "on every document (sample: all)"
        )
    if metric is not None:
        try:
            wanted = parse_metric(metric).name
        except ConfigError as exc:
            raise ConfigError(f"--metric {metric!r}: {exc}") from None
        evaluated = [m.name for m in cfg.evaluation.metrics]
        if wanted not in evaluated:
            raise ConfigError(f"--metric {metric!r}: the config evaluates {', '.join(evaluated)}")
    for dataset in (real, synthetic):  # before the first sweep: a bad second set fails now
        dataset_format(resolve_dataset(dataset), None)
    root = claim(
        Path(out) if out is not None else Path("runs") / f"agreement-{cfg.name}",
        "--out",
        "two runs of agreement",
        earlier=lambda folder: all(entry.name in SETS for entry in folder.iterdir()),
    )
    for name, dataset in zip(SETS, (real, synthetic), strict=True):
        target = root / name
        run(
            agreement_config(cfg, dataset),
            target,
            resume=not overwrite and RunStore(target).exists(),
            overwrite=overwrite,
            limit_queries=limit_queries,
            cache_root=cache_root,
            progress=progress,
        )
    return agreement(
        root / "real",
        root / "synthetic",
        metric or cfg.evaluation.metrics[0].name,
        n_resamples=n_resamples,
        seed=seed,
    )
