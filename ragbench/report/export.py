"""Export a run for other tools: ``export_ragas`` writes one trial's samples as a ragas
``EvaluationDataset`` JSONL file (``EvaluationDataset.from_jsonl`` reads it back).

One row per evaluated query, the fields of ragas' ``SingleTurnSample``:

- ``user_input``: the query;
- ``retrieved_contexts`` / ``retrieved_context_ids``: the texts and document ids of the chunks
  the trial's generator answered from (``answers.parquet``), or — for a trial without a
  generator — of its top ``evaluation.context_k`` chunks (``runs/<trial>.top.parquet``), the
  contexts the run's own context metrics read;
- ``response``: the trial's answer, when it has a generator;
- ``reference_contexts`` / ``reference_context_ids``: the query's evidence texts (its relevant
  documents' texts when the set has no spans) and its relevant document ids;
- ``reference``: the reference answer, when the set has one.

Chunk texts are whole (not the excerpts of ``top.parquet``): they come from the trial's chunk
set in the run's stage cache (chunked again when it is gone), over the run's dataset, which
must not have changed since the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ragbench.data.labeled import LabeledSet
from ragbench.errors import DataError
from ragbench.experiment.store import RunStore, write_failure
from ragbench.index.cache import StageCache
from ragbench.owned import stream, writable_file
from ragbench.report.pick import chosen_trial
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import Env, compile_plan
from ragbench.types import Chunk

__all__ = ["Exported", "export_ragas"]


@dataclass(frozen=True)
class Exported:
    """What ``export_ragas`` wrote: the file, the trial and the number of rows."""

    path: Path
    trial_id: str
    label: str
    rows: int


def _contexts(
    store: RunStore, trial_id: str, context_k: int, answers: pd.DataFrame
) -> dict[str, list[str]]:
    """Chunk ids per query: those the generator used, else the top ``context_k``."""
    if not answers.empty:
        pairs = zip(answers["query_id"], answers["chunk_ids"], strict=True)
        return {str(q): json.loads(ids) for q, ids in pairs}
    top = store.top(trial_id)
    top = top[top["rank"] <= context_k].sort_values(["query_id", "rank"])
    return {str(q): list(group["chunk_id"]) for q, group in top.groupby("query_id")}


def _references(
    query: Any, labeled: LabeledSet, relevance_level: int
) -> tuple[list[str], list[str]]:
    """Evidence texts (relevant documents' texts without spans) and relevant document ids."""
    relevant = [d for d, g in json.loads(query.qrels).items() if g >= relevance_level]
    docs = labeled.doc_index
    spans = json.loads(query.evidence)
    if spans:
        return [docs[e["doc_id"]].text[e["start"] : e["end"]] for e in spans], relevant
    return [docs[d].text for d in relevant if d in docs], relevant


def export_ragas(
    run_dir: Path | str, trial: str = "best", out: Path | str | None = None
) -> Exported:
    """Write trial ``trial`` (an id, or ``best``: the one the run's report recommends,
    ``report.pick``) of ``run_dir`` as a ragas ``EvaluationDataset`` JSONL file (default
    ``<run>/ragas/<trial id>.jsonl``; ``out`` is a new file, a stream such as
    ``/dev/stdout``, or that default: ``owned.writable_file``); see the module docstring for
    the fields. ``DataError`` naming the file when the run directory lacks what it needs or
    the dataset changed since the run (``RunStore.dataset``)."""
    store = RunStore(run_dir)
    manifest = store.manifest()
    chosen = chosen_trial(store, trial)
    own = store.path / "ragas" / f"{chosen.id}.jsonl"
    path = own if out is None else writable_file(out, "--out", own)
    labeled = store.dataset()
    cache = StageCache(Path(manifest["cache_root"]))
    plan = compile_plan(chosen.configs, 1, {"corpus": labeled.corpus_fingerprint})
    env = Env(corpus=labeled.documents, embeddings=cache.embeddings)
    chunks: dict[str, Chunk] = Execution(plan, env, cache)[plan.chunks].by_id
    answers = store.answers()
    answers = answers[answers["trial_id"] == chosen.id]
    evaluation = manifest["evaluation"]
    used = _contexts(store, chosen.id, int(evaluation.get("context_k", 5)), answers)
    said = dict(zip(answers["query_id"], answers["answer"], strict=True))
    queries = store.queries()
    rows = []
    records: Iterable[Any] = queries.itertuples(index=False)  # named tuples of its columns
    for query in records:
        ids = used.get(query.query_id, [])
        lost = [c for c in ids if c not in chunks]
        if lost:
            raise DataError(
                f"{store.path}: trial {chosen.id} used chunk {lost[0]!r}, which its chunker no "
                "longer makes; run the sweep again to export it"
            )
        references, reference_ids = _references(query, labeled, evaluation["relevance_level"])
        row: dict[str, Any] = {
            "user_input": query.text,
            "retrieved_contexts": [chunks[c].text for c in ids],
            "retrieved_context_ids": [chunks[c].doc_id for c in ids],
            "reference_contexts": references,
            "reference_context_ids": reference_ids,
        }
        if query.query_id in said:
            row["response"] = said[query.query_id]
        reference = getattr(query, "reference", None)
        if reference is not None:
            row["reference"] = reference
        rows.append(json.dumps(row) + "\n")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if stream(path) else "w", encoding="utf-8") as written:
            written.write("".join(rows))
    except OSError as exc:
        raise write_failure(path.parent, f"writing {path.name}", exc) from None
    return Exported(path, chosen.id, chosen.label, len(rows))
