"""Counts that describe a labeled set: sizes, judgements per grade, spans, query types,
reference answers, queries judged at some levels only."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ragbench.data.labeled import LEVELS, LabeledSet

__all__ = ["DatasetSummary", "summarize"]


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    """What ``ragbench datasets info`` shows; ``mean_span_chars`` is None without spans;
    ``restricted`` counts the queries judged at some levels only, by those levels."""

    name: str
    split: str
    documents: int
    characters: int
    queries: int
    judgements: dict[int, int]
    spans: int
    mean_span_chars: float | None
    query_types: dict[str, int]
    answers: int
    fingerprint: str
    restricted: dict[str, int]


def summarize(data: LabeledSet) -> DatasetSummary:
    """Counts of ``data``: judgements by grade (ascending), query types by frequency."""
    grades = Counter(g for judged in data.qrels.values() for g in judged.values())
    lengths = [e.length for spans in data.evidence.values() for e in spans]
    types = Counter(str(q.metadata["type"]) for q in data.queries if "type" in q.metadata)
    restricted = Counter(
        " and ".join(level for level in LEVELS if level in at) for at in data.levels.values()
    )
    return DatasetSummary(
        name=data.name,
        split=data.split,
        documents=len(data.documents),
        characters=sum(len(d.text) for d in data.documents),
        queries=len(data.queries),
        judgements=dict(sorted(grades.items())),
        spans=len(lengths),
        mean_span_chars=sum(lengths) / len(lengths) if lengths else None,
        query_types=dict(types.most_common()),
        answers=len(data.answers),
        fingerprint=data.fingerprint,
        restricted=dict(restricted.most_common()),
    )
