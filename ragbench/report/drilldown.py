"""Per-query drill-down: where two trials differ most, with the query, its gold evidence and
reference answer, and each trial's answer and top chunks, read from the run directory."""

from __future__ import annotations

import json
from collections.abc import Hashable
from pathlib import Path

import pandas as pd

from ragbench.errors import ConfigError, DataError
from ragbench.experiment.store import RunStore

__all__ = ["drilldown"]


def _top(
    run_dir: Path, trial_id: str, per_query: int, query_ids: pd.Index
) -> dict[Hashable, list[dict]]:
    """The first ``per_query`` chunks the trial retrieved for each of ``query_ids`` (only those
    are grouped: a run's top lists hold every query)."""
    path = run_dir / "runs" / f"{trial_id}.top.parquet"
    if not path.is_file():
        return {}
    top = RunStore(run_dir).top(trial_id)
    top = top[(top["rank"] <= per_query) & top["query_id"].isin(query_ids)]
    return {
        qid: group.sort_values("rank")[["rank", "chunk_id", "score", "text"]].to_dict("records")
        for qid, group in top.groupby("query_id")
    }


def drilldown(
    run_dir: Path | str, trial_a: str, trial_b: str, metric: str, n: int = 10, chunks: int = 3
) -> pd.DataFrame:
    """The ``n`` queries with the largest |b − a| on ``metric`` (among those where both trials
    have a value).

    Columns: query_id, query, delta (b − a), a, b, gold (judged documents, evidence
    excerpts and the reference answer, None when the set has none), top_a, top_b (each
    trial's first ``chunks`` chunks: rank, id, score, text), answer_a, answer_b (each trial's
    answer from ``answers.parquet``, None for a trial without a generator).
    Raises ``ConfigError`` when the run did not evaluate ``metric`` and ``DataError`` when a
    trial has no values of it.
    """
    store = RunStore(run_dir)
    per_query = store.per_query()
    evaluated = sorted(set(per_query["metric"]))
    if evaluated and metric not in evaluated:
        raise ConfigError(f"metric {metric!r}: the run {run_dir} evaluated {', '.join(evaluated)}")
    values = per_query[per_query["metric"] == metric].pivot(
        index="query_id", columns="trial_id", values="value"
    )
    missing = [t for t in (trial_a, trial_b) if t not in values.columns]
    if missing:
        raise DataError(
            f"{store.path / 'per_query.parquet'}: no {metric!r} values for trial(s) "
            f"{', '.join(missing)}"
        )
    frame = pd.DataFrame({"a": values[trial_a], "b": values[trial_b]}).dropna()
    frame["delta"] = frame["b"] - frame["a"]
    frame = frame[frame["delta"] != 0]
    frame = frame.reindex(frame["delta"].abs().sort_values(ascending=False).index).head(n)
    queries = store.queries().set_index("query_id")
    top_a = _top(Path(run_dir), trial_a, chunks, frame.index)
    top_b = _top(Path(run_dir), trial_b, chunks, frame.index)
    answers = store.answers().set_index(["trial_id", "query_id"])["answer"].to_dict()
    rows = []
    for qid, a, b, delta in zip(frame.index, frame["a"], frame["b"], frame["delta"], strict=True):
        query = queries.loc[qid]
        rows.append(
            {
                "query_id": qid,
                "query": query["text"],
                "delta": delta,
                "a": a,
                "b": b,
                "gold": {
                    "qrels": json.loads(query["qrels"]),
                    "evidence": json.loads(query["evidence"]),
                    "reference": query.get("reference"),
                },
                "top_a": top_a.get(qid, []),
                "top_b": top_b.get(qid, []),
                "answer_a": answers.get((trial_a, qid)),
                "answer_b": answers.get((trial_b, qid)),
            }
        )
    return pd.DataFrame(rows)
