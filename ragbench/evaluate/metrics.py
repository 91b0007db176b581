"""Ranking metrics with trec_eval's exact semantics, vectorised over queries, and the metric
table that names every metric.

The metric table holds one ``MetricSpec`` per metric family: canonical name, aliases, cutoff
rule, level, direction, a one-line doc and the kernel computing per-query values. Parsing, error
messages, ``evaluate`` / ``evaluate_run`` and ``ragbench.evaluate.labels.evaluate_chunks`` all
read the table, so ``register_metric`` is all a new metric needs. Metric strings are
case-insensitive; canonical names are lowercase. The rank metrics registered here: ``ndcg@k``,
``recall@k``, ``precision@k`` (``p@k``), ``mrr`` / ``mrr@k``, ``map`` / ``map@k``,
``hit_rate@k`` (``success@k``), ``r_precision``. The span metrics ``span_recall@k``,
``span_precision@k``, ``span_iou@k`` and ``recall@Ntok`` need chunk offsets and span evidence:
they register in ``ragbench.evaluate.labels``, which the table imports when a lookup misses.
Answer metrics (level ``answer``: ``exact_match``, ``token_f1``, ``rouge_l``,
``answer_supported``) score generated answers and register in ``ragbench.evaluate.answers``, as
does the namespace ``ragas:<Name>`` (``register_namespace``: metrics another library defines,
resolved on first use, spelled as that library spells them). Both compute through
``evaluate_answers`` only.

trec_eval semantics: each query's results are ordered by score descending, then document id
descending (byte order), whatever order they come in; a repeated id keeps its first occurrence.
A document is relevant when its grade is >= ``relevance_level`` (trec_eval ``-l``, >= 1). nDCG
uses the grades themselves as gains (grades <= 0 gain nothing) whatever the relevance level, as
trec_eval's ``ndcg_cut`` does. A query with judgements but no results scores 0 everywhere, and
so does a query without relevant judgements. Which queries to score is the caller's choice
(``query_ids``); ``evaluate_run`` defaults to those with a relevant judgement
(``relevant_query_ids``), since the others can only score 0. trec_eval itself scores every query
present in both qrels and run, or every qrels query with ``-c``.

How: document ids become an Arrow string array; one stable Arrow sort by (query, score desc,
id desc) gives every result its rank; a hash lookup (``index_in``) plus a binary search over
integer (query, document) keys finds the judged ones (``RankedHits``). Every rank kernel is then
a few array operations over the retrieved *judged* documents only, so cost grows with the run
size once, not with the number of metrics.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, TypeVar, get_args

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ragbench.data.labeled import Qrels
from ragbench.errors import ConfigError
from ragbench.types import Ranking

__all__ = [
    "MAX_CUTOFF",
    "TIE_RTOL",
    "Cutoff",
    "Judgements",
    "Metric",
    "MetricLevel",
    "MetricNamespace",
    "MetricSpec",
    "Need",
    "RankKernel",
    "RankedHits",
    "allowed_forms",
    "best_first",
    "best_index",
    "best_indices",
    "evaluate",
    "evaluate_run",
    "higher_is_better",
    "mean",
    "metric_table",
    "parse_metric",
    "parse_metrics",
    "register_metric",
    "register_namespace",
    "relevant_query_ids",
    "unregister_metric",
]

Cutoff = Literal["required", "optional", "none", "budget"]
MetricLevel = Literal["rank", "span", "answer"]
Need = Literal["response", "reference", "reference_contexts", "reference_ids", "llm", "embeddings"]

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")
_WORD = re.compile(r"[a-z_][a-z0-9_]*")
_NAME = re.compile(r"[a-z_][a-z0-9_]*(?::[A-Za-z][A-Za-z0-9_]*)?")  # family or <namespace>:<Name>
_PATTERN = re.compile(r"(?P<name>[a-z_][a-z0-9_]*)(?:@(?P<k>\d+)(?P<tok>tok)?)?")
MAX_CUTOFF = 100_000
"""The largest cutoff @K or token budget @Ntok of a metric, and depth of an evaluation: every
ranking is an array that deep."""
_FORMS = {"required": "{}@K", "optional": "{0}, {0}@K", "none": "{}", "budget": "{}@Ntok"}
# modules registering built-in metrics that cannot live here, imported when a lookup misses
# (popped from the end: span metrics, then answer metrics and the ragas namespace)
_BUILTIN_MODULES = ["ragbench.evaluate.answers", "ragbench.evaluate.labels"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One row of the metric table: a metric family, how metric strings spell it, how to compute
    it and which way is better.

    ``name``: canonical family name, lowercase. Metric strings write ``written_as`` (default
    ``name``; ``token_recall`` is written ``recall@Ntok``) or one of ``aliases``, then the
    cutoff. ``cutoff``: ``required`` (``name@K``), ``optional`` (``name`` or ``name@K``),
    ``none`` (``name``) or ``budget`` (``name@Ntok``, a token budget; span level only).
    ``level``: ``rank`` metrics score a ranking of documents or chunks (by the evaluation level)
    against graded qrels, ``kernel(hits, judged, k, n)`` (``RankKernel``); ``span`` metrics score
    the characters of the retrieved chunks against span evidence at every evaluation level,
    ``kernel(coverage)`` (``ragbench.evaluate.labels.SpanKernel``); ``answer`` metrics score
    generated answers, ``kernel(samples, judges)`` (``ragbench.evaluate.answers.AnswerKernel``),
    take no cutoff and declare in ``needs`` what a sample or the caller must provide (``Need``:
    an answer, a reference answer, reference contexts or ids, an LLM judge, embeddings). Kernels
    return one float per query. ``higher_is_better``: the direction used to pick best trials.
    ``doc``: one line.
    """

    name: str
    kernel: Callable[..., np.ndarray]
    doc: str
    cutoff: Cutoff = "required"
    level: MetricLevel = "rank"
    higher_is_better: bool = True
    aliases: tuple[str, ...] = ()
    written_as: str = ""
    needs: frozenset[Need] = frozenset()

    def __post_init__(self) -> None:
        bad = [s for s in (self.name, *self.spellings) if not _NAME.fullmatch(s)]
        if bad:
            raise ValueError(
                f"metric {self.name!r}: names must be lowercase [a-z_][a-z0-9_]* (or "
                f"<namespace>:<Name>), got {bad}"
            )
        if self.cutoff not in get_args(Cutoff) or self.level not in get_args(MetricLevel):
            raise ValueError(
                f"metric {self.name!r}: cutoff must be one of {get_args(Cutoff)} and level one "
                f"of {get_args(MetricLevel)}, got {self.cutoff!r} and {self.level!r}"
            )
        if self.cutoff == "budget" and self.level != "span":
            raise ValueError(f"metric {self.name!r}: a token budget needs level 'span'")
        if self.level == "answer" and self.cutoff != "none":
            raise ValueError(f"metric {self.name!r}: answer metrics take no cutoff ('none')")
        unknown = sorted(self.needs - set(get_args(Need)))
        if unknown or (self.needs and self.level != "answer"):
            raise ValueError(
                f"metric {self.name!r}: needs are for answer metrics and within "
                f"{get_args(Need)}, got {sorted(self.needs)}"
            )
        if not self.doc.strip() or "\n" in self.doc:
            raise ValueError(f"metric {self.name!r}: doc must be one non-empty line")

    @property
    def spellings(self) -> tuple[str, ...]:
        """What metric strings may write before ``@``: the canonical spelling first."""
        return (self.written_as or self.name, *self.aliases)

    @property
    def forms(self) -> str:
        """The metric strings this family accepts, e.g. ``precision@K (p@K)``."""
        main, *others = (_FORMS[self.cutoff].format(s) for s in self.spellings)
        return f"{main} ({', '.join(others)})" if others else main


@dataclass(frozen=True, slots=True)
class MetricNamespace:
    """Metric families another library defines, written ``<prefix>:<Name>``
    (``ragas:Faithfulness``) and resolved on first use rather than listed in the table.

    ``names``: the accepted Names, spelled as the library spells them (metric strings may use
    any case; the canonical name keeps the library's). ``spec(Name)``: the family's row (level
    ``answer``, named ``<prefix>:<Name>``), built once when a metric of it is first looked up.
    """

    prefix: str
    names: tuple[str, ...]
    spec: Callable[[str], MetricSpec]

    @property
    def forms(self) -> str:
        """How metric strings write the namespace's metrics, e.g. ``ragas:<Name>``."""
        return f"{self.prefix}:<Name>"


_TABLE: dict[str, MetricSpec] = {}
_SPELLINGS: dict[tuple[str, bool], MetricSpec] = {}  # (spelling, with a token budget) → spec
_NAMESPACES: dict[str, MetricNamespace] = {}
_RESOLVED: dict[str, MetricSpec] = {}  # "<prefix>:<Name>" → the spec its namespace built


def _load_builtins() -> None:
    """Import the modules registering the built-in metrics kept elsewhere, each once (popped
    first, so a module registering metrics while it is being imported does not recurse)."""
    while _BUILTIN_MODULES:
        importlib.import_module(_BUILTIN_MODULES.pop())


def _lookup(table: Mapping[_Key, _Value], key: _Key) -> _Value | None:
    """``table[key]``, loading the built-in metrics defined elsewhere when it is missing."""
    if key not in table:
        _load_builtins()
    return table.get(key)


def _add(spec: MetricSpec) -> MetricSpec:
    """Put ``spec`` in the table unless its name or a spelling is taken (no lazy loading: the
    built-ins of this module register this way while it is imported)."""
    if ":" in spec.name or any(":" in s for s in spec.spellings):
        raise ValueError(
            f"metric {spec.name!r}: names with ':' belong to a namespace (register_namespace)"
        )
    keys = [(s, spec.cutoff == "budget") for s in spec.spellings]
    taken = [f"{s!r} (by {_SPELLINGS[s, b].name!r})" for s, b in keys if (s, b) in _SPELLINGS]
    if spec.name in _TABLE or taken:
        raise ValueError(
            f"metric {spec.name!r}: the name or a spelling is already registered: "
            + (", ".join(taken) or repr(spec.name))
        )
    _TABLE[spec.name] = spec
    _SPELLINGS.update(dict.fromkeys(keys, spec))
    return spec


def register_metric(spec: MetricSpec) -> MetricSpec:
    """Add a metric family to the table; it then parses, shows in error messages and computes
    through ``evaluate`` / ``evaluate_chunks``. Raises ``ValueError`` when its name or one of
    its spellings is taken. Returns ``spec``."""
    _load_builtins()
    return _add(spec)


def register_namespace(namespace: MetricNamespace) -> MetricNamespace:
    """Accept the metric strings ``<prefix>:<Name>`` of ``namespace`` (each computes through
    the spec the namespace builds for it). Raises ``ValueError`` when the prefix is taken or
    not lowercase [a-z_][a-z0-9_]*, or a Name is not an identifier. Returns ``namespace``."""
    _load_builtins()
    bad = [n for n in namespace.names if not _NAME.fullmatch(f"{namespace.prefix}:{n}")]
    if not _WORD.fullmatch(namespace.prefix) or bad or namespace.prefix in _NAMESPACES:
        raise ValueError(
            f"metric namespace {namespace.prefix!r}: the prefix must be new and lowercase "
            f"[a-z_][a-z0-9_]* and the names identifiers (bad: {bad})"
        )
    _NAMESPACES[namespace.prefix] = namespace
    return namespace


def unregister_metric(name: str) -> MetricSpec:
    """Remove the metric family ``name`` from the table (e.g. after a test); returns its spec.
    Raises ``KeyError`` when no such family is registered."""
    _load_builtins()
    spec = _TABLE.pop(name)
    for s in spec.spellings:
        del _SPELLINGS[s, spec.cutoff == "budget"]
    return spec


def metric_table() -> Mapping[str, MetricSpec]:
    """The metric table, family name → spec, in registration order (read-only, live)."""
    _load_builtins()
    return MappingProxyType(_TABLE)


def allowed_forms() -> str:
    """Every metric string form the table and the namespaces accept, as error messages list
    them: rank, span, then answer metrics, each level in registration order."""
    levels = get_args(MetricLevel)
    families = sorted(metric_table().values(), key=lambda spec: levels.index(spec.level))
    namespaces = [space.forms for space in _NAMESPACES.values()]
    forms = ", ".join([*(spec.forms for spec in families), *namespaces])
    return f"{forms} (K and N positive integers)"


def _family(name: str) -> MetricSpec | None:
    """The spec of family ``name``: a row of the table, or ``<prefix>:<Name>`` built by its
    namespace (once)."""
    prefix, colon, member = name.partition(":")
    if not colon:
        return _lookup(_TABLE, name)
    if name not in _RESOLVED:
        space = _lookup(_NAMESPACES, prefix)
        if space is None or member not in space.names:
            return None
        _RESOLVED[name] = space.spec(member)
    return _RESOLVED[name]


@dataclass(frozen=True, slots=True)
class Metric:
    """A parsed metric: canonical ``name``, ``family``, rank cutoff ``k`` or token ``budget``.

    ``k`` is None for metrics over the whole ranking (``mrr``, ``map``, ``r_precision``). The
    family's row of the metric table (``spec``) gives its level and direction.
    """

    name: str
    family: str
    k: int | None = None
    budget: int | None = None

    @property
    def spec(self) -> MetricSpec:
        """The metric table row of the family."""
        spec = _family(self.family)
        if spec is None:
            raise ConfigError(f"metric {self.name!r}: no metric family {self.family!r}")
        return spec

    @property
    def level(self) -> MetricLevel:
        """``rank`` (a ranking against qrels), ``span`` (chunk offsets against evidence) or
        ``answer`` (a generated answer, see ``ragbench.evaluate.answers``)."""
        return self.spec.level

    @property
    def is_span(self) -> bool:
        """Whether the metric needs chunk offsets and span evidence (see ``labels``)."""
        return self.level == "span"

    @property
    def higher_is_better(self) -> bool:
        """Whether a higher value is better (False: the best trial has the lowest value)."""
        return self.spec.higher_is_better

    def __str__(self) -> str:
        return self.name


def parse_metric(spec: str | Metric) -> Metric:
    """Parse a metric string such as ``nDCG@10``, ``p@5``, ``recall@2000tok``, ``token_f1`` or
    ``ragas:Faithfulness``.

    Raises ``ConfigError`` naming the string and listing the allowed forms.
    """
    if isinstance(spec, Metric):
        return spec
    if ":" in str(spec):
        return _parse_namespaced(str(spec))
    match = _PATTERN.fullmatch(str(spec).strip().lower())
    budget = bool(match and match["tok"])
    found = _lookup(_SPELLINGS, (match["name"], budget)) if match else None
    if match is None or (found is None and (match["name"], not budget) not in _SPELLINGS):
        raise ConfigError(f"unknown metric {spec!r}; allowed forms: {allowed_forms()}")
    digits = match["k"]
    short = digits is not None and len(digits.lstrip("0")) <= 6  # int() of 5,000 digits fails
    k = None if digits is None else int(digits) if short else MAX_CUTOFF + 1
    if k is not None and not 1 <= k <= MAX_CUTOFF:
        raise ConfigError(
            f"metric {spec!r}: the cutoff must be from 1 to {MAX_CUTOFF:,}; "
            f"allowed: {allowed_forms()}"
        )
    if found is None and budget:
        budgeted = ", ".join(s for s, with_budget in _SPELLINGS if with_budget)
        raise ConfigError(
            f"metric {spec!r}: a token budget is only allowed on {budgeted}; "
            f"allowed forms: {allowed_forms()}"
        )
    if found is None:
        raise ConfigError(
            f"metric {spec!r} needs a token budget @Ntok; allowed forms: {allowed_forms()}"
        )
    if k is None and found.cutoff == "required":
        raise ConfigError(f"metric {spec!r} needs a cutoff @K; allowed forms: {allowed_forms()}")
    if k is not None and found.cutoff == "none":
        raise ConfigError(f"metric {spec!r} takes no cutoff; allowed forms: {allowed_forms()}")
    written = found.spellings[0]
    if budget:
        return Metric(f"{written}@{k}tok", found.name, budget=k)
    return Metric(written if k is None else f"{written}@{k}", found.name, k=k)


def _parse_namespaced(spec: str) -> Metric:
    """Parse ``<prefix>:<Name>`` (any case) to the namespace's spelling of Name."""
    prefix, _, member = spec.strip().partition(":")
    space = _lookup(_NAMESPACES, prefix.strip().lower())
    if space is None:
        raise ConfigError(f"unknown metric {spec!r}; allowed forms: {allowed_forms()}")
    if "@" in member:
        raise ConfigError(f"metric {spec!r} takes no cutoff; allowed forms: {allowed_forms()}")
    found = {n.lower(): n for n in space.names}.get(member.strip().lower())
    if found is None:
        raise ConfigError(
            f"unknown metric {spec!r}; allowed forms: {space.forms} with Name one of "
            f"{', '.join(space.names)}"
        )
    name = f"{space.prefix}:{found}"
    return Metric(name, name)


def higher_is_better(name: str) -> bool:
    """Whether a higher value of metric ``name`` (any accepted spelling) is better."""
    return parse_metric(name).higher_is_better


def best_index(values: pd.Series, metric: str) -> Any:
    """The index label of the best of ``values`` of ``metric``: the highest, or the lowest when
    lower is better (the metric's direction in the metric table).

    Typed ``Any``: a label is whatever the index holds (a trial id, a row number), and
    pandas-stubs' ``.loc`` does not accept the ``Hashable`` its ``idxmax`` is typed to return."""
    return values.idxmax() if higher_is_better(metric) else values.idxmin()


TIE_RTOL = 1e-9  # values this close (relative) are tied: means of one set may differ in rounding


def best_indices(values: pd.Series, metric: str) -> list[Any]:
    """Every index label whose value ties the best of ``values`` of ``metric`` (within
    ``TIE_RTOL``), in their order in ``values``; NaN values never are. A tie is not a pick:
    callers report all of them."""
    found = values.dropna().astype(float)
    if found.empty:
        return []
    top = found.max() if higher_is_better(metric) else found.min()
    return list(found.index[np.isclose(found, top, rtol=TIE_RTOL, atol=0.0)])


def best_first(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """``frame`` sorted by its ``metric`` column, best first (by the metric's direction)."""
    return frame.sort_values(metric, ascending=not higher_is_better(metric))


def parse_metrics(specs: Sequence[str | Metric]) -> list[Metric]:
    """Parse several metrics, dropping repeats (same canonical name) and keeping order."""
    parsed = {m.name: m for m in map(parse_metric, specs)}
    return list(parsed.values())


def relevant_query_ids(qrels: Qrels, relevance_level: int = 1) -> list[str]:
    """Query ids (in qrels order) with at least one judgement of grade >= ``relevance_level``."""
    return [q for q, judged in qrels.items() if any(g >= relevance_level for g in judged.values())]


def mean(values: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Mean over queries of each metric's per-query values (NaN for no queries)."""
    return {name: float(v.mean()) if len(v) else float("nan") for name, v in values.items()}


def evaluate(
    qrels: Qrels,
    ranking: Ranking,
    query_ids: Sequence[str],
    metrics: Sequence[str | Metric],
    relevance_level: int = 1,
) -> dict[str, np.ndarray]:
    """Per-query values of ranking metrics; row ``i`` of ``ranking`` is ``query_ids[i]``.

    Ids in the ranking are document ids (padding ``""`` is skipped). Returns canonical metric
    name → float array aligned with ``query_ids``, so ``pandas.DataFrame(result,
    index=query_ids)`` is the per-query table. Every query in ``query_ids`` is scored, those
    without relevant judgements as 0 (``relevant_query_ids`` lists the others).
    """
    parsed = _rank_metrics(metrics)
    ids, scores = np.asarray(ranking.ids), np.asarray(ranking.scores, dtype=np.float64)
    if ids.ndim != 2 or ids.shape != scores.shape or ids.shape[0] != len(query_ids):
        raise ValueError(
            f"ranking ids {ids.shape} and scores {scores.shape} must both be "
            f"(len(query_ids)={len(query_ids)}, depth)"
        )
    present = ids != ""
    rows = np.repeat(np.arange(len(ids)), present.sum(axis=1))
    entries = _Entries(rows, _strings(ids[present]), scores[present])
    entries = entries.take(_first_occurrences(entries))
    return _evaluate_entries(qrels, entries, query_ids, parsed, relevance_level)


def evaluate_run(
    qrels: Qrels,
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str | Metric],
    relevance_level: int = 1,
    query_ids: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-query metrics of a TREC-style run (query id → doc id → score) as a DataFrame.

    Rows are ``query_ids``, by default the queries of ``qrels`` with a relevant judgement
    (``list(qrels)`` is trec_eval ``-c``); a query missing from the run scores 0. Columns are the
    canonical metric names; ``frame.mean()`` gives the averages.
    """
    parsed = _rank_metrics(metrics)
    if query_ids is None:
        query_ids = relevant_query_ids(qrels, relevance_level)
    results = [run.get(q) or {} for q in query_ids]
    counts = np.fromiter(map(len, results), dtype=np.int64, count=len(results))
    total = int(counts.sum())
    entries = _Entries(
        rows=np.repeat(np.arange(len(results)), counts),
        ids=_strings(list(chain.from_iterable(results))),
        scores=np.fromiter(
            chain.from_iterable(r.values() for r in results), dtype=np.float64, count=total
        ),
    )
    values = _evaluate_entries(qrels, entries, query_ids, parsed, relevance_level)
    return pd.DataFrame(values, index=pd.Index(list(query_ids), name="query_id"))


def _ranking_metrics(metrics: Sequence[str | Metric]) -> list[Metric]:
    """Parse metrics that score a ranking (rank or span level); an answer metric is a
    ``ConfigError`` pointing to ``evaluate_answers``."""
    parsed = parse_metrics(metrics)
    for m in parsed:
        if m.level == "answer":
            raise ConfigError(
                f"metric {m.name!r} scores generated answers, not a ranking; use "
                "ragbench.evaluate.answers.evaluate_answers"
            )
    return parsed


def _rank_metrics(metrics: Sequence[str | Metric]) -> list[Metric]:
    parsed = _ranking_metrics(metrics)
    for m in parsed:
        if m.level != "rank":
            raise ConfigError(
                f"metric {m.name!r} needs chunk offsets and span evidence; "
                "use ragbench.evaluate.labels.evaluate_chunks"
            )
    return parsed


def _strings(values: Sequence[str] | np.ndarray) -> pa.Array:
    return pa.array(values, type=pa.string())


class _Entries(NamedTuple):
    """Flat run entries: query row, document id, score."""

    rows: np.ndarray
    ids: pa.Array
    scores: np.ndarray

    def take(self, index: np.ndarray | None) -> _Entries:
        if index is None:
            return self
        return _Entries(self.rows[index], self.ids.take(pa.array(index)), self.scores[index])


def _first_occurrences(entries: _Entries) -> np.ndarray | None:
    """Indices of the first occurrence of each (query, id), or None when there are no repeats.

    A stable sort by (query, id) puts repeats next to each other, earliest first.
    """
    if len(entries.rows) < 2:
        return None
    table = pa.table({"row": entries.rows, "id": entries.ids})
    order = pc.sort_indices(table, sort_keys=[("row", "ascending"), ("id", "ascending")])
    rows, ids = entries.rows[order.to_numpy()], entries.ids.take(order)
    repeat = (rows[1:] == rows[:-1]) & pc.equal(ids[1:], ids[:-1]).to_numpy(zero_copy_only=False)
    if not repeat.any():
        return None
    keep = np.ones(len(rows), dtype=bool)
    keep[order.to_numpy()[1:][repeat]] = False
    return np.flatnonzero(keep)


@dataclass(frozen=True, eq=False)
class Judgements:
    """The qrels of the evaluated queries, as a rank kernel sees them (query ``i`` is row ``i``).

    Every judgement, sorted by its integer key ``row * len(docs) + index of the document in
    docs``: ``rows``, ``keys``, ``grades``. Per query: ``num_rel``, the number of judged
    documents with grade >= the relevance level (floats). ``ideal_gains(depth)``: the best
    gains for ideal DCG.
    """

    docs: pa.Array
    rows: np.ndarray
    keys: np.ndarray
    grades: np.ndarray
    num_rel: np.ndarray

    @cached_property
    def _best_first(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Judgements by (query, gain descending): row, position within the query, gain."""
        gains = np.maximum(self.grades, 0)
        order = np.lexsort((-gains, self.rows))
        rows = self.rows[order]
        return rows, np.arange(len(rows)) - np.searchsorted(rows, rows), gains[order]

    def ideal_gains(self, depth: int) -> np.ndarray:
        """Each query's ``depth`` best gains (grades, <= 0 gaining nothing), descending, as a
        zero-padded ``(n_queries, depth)`` matrix."""
        rows, position, gains = self._best_first
        top = position < depth
        ideal = np.zeros((len(self.num_rel), depth), dtype=np.float64)
        ideal[rows[top], position[top]] = gains[top]
        return ideal


def _judgements(qrels: Qrels, query_ids: Sequence[str], relevance_level: int) -> Judgements:
    judgements = [qrels.get(q) or {} for q in query_ids]
    counts = np.fromiter(map(len, judgements), dtype=np.int64, count=len(judgements))
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(judgements)), counts)
    grades = np.fromiter(
        chain.from_iterable(j.values() for j in judgements), dtype=np.int64, count=total
    )
    encoded = _strings(list(chain.from_iterable(judgements))).dictionary_encode()
    docs = encoded.dictionary
    keys = rows * len(docs) + encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(keys, kind="stable")
    num_rel = np.bincount(rows, weights=grades >= relevance_level, minlength=len(judgements))
    return Judgements(docs, rows[order], keys[order], grades[order], num_rel)


class RankedHits(NamedTuple):
    """The retrieved documents that are judged, as a rank kernel sees a ranking.

    One entry per retrieved judged document, in (query, rank) order: ``rows`` (query index),
    ``ranks`` (0-based position among the query's results in trec_eval order, unjudged
    documents included), ``grades`` and ``relevant`` (grade >= the relevance level).
    """

    rows: np.ndarray
    ranks: np.ndarray
    grades: np.ndarray
    relevant: np.ndarray

    def within(self, k: int | None) -> RankedHits:
        """The hits ranked in the top ``k`` (all of them when ``k`` is None)."""
        if k is None:
            return self
        keep = self.ranks < k
        return RankedHits(*(a[keep] for a in self))

    def relevant_only(self) -> RankedHits:
        """The relevant hits."""
        return RankedHits(*(a[self.relevant] for a in self))


RankKernel = Callable[[RankedHits, Judgements, int | None, int], np.ndarray]
"""``kernel(hits, judged, k, n)``: per-query values (float array of length ``n``, the number of
queries) of a rank metric at cutoff ``k`` (None without one)."""


def _hits(entries: _Entries, judged: Judgements, relevance_level: int, n: int) -> RankedHits:
    """Rank entries like trec_eval (score desc, id desc) and keep the judged ones."""
    table = pa.table({"row": entries.rows, "score": entries.scores, "id": entries.ids})
    order = pc.sort_indices(
        table,
        sort_keys=[("row", "ascending"), ("score", "descending"), ("id", "descending")],
    )
    order = order.to_numpy()
    rows = entries.rows[order]
    doc = pc.index_in(entries.ids, value_set=judged.docs).fill_null(-1)
    doc = doc.to_numpy(zero_copy_only=False).astype(np.int64)[order]
    candidates = np.flatnonzero(doc >= 0)
    keys = rows[candidates] * len(judged.docs) + doc[candidates]
    at = np.minimum(np.searchsorted(judged.keys, keys), len(judged.keys) - 1)
    match = judged.keys[at] == keys
    found, grades = candidates[match], judged.grades[at[match]]
    relevant = grades >= relevance_level
    row_start = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))[:-1]])
    ranks = found - row_start[rows[found]]
    return RankedHits(rows[found], ranks, grades, relevant)


def _evaluate_entries(
    qrels: Qrels,
    entries: _Entries,
    query_ids: Sequence[str],
    metrics: Sequence[Metric],
    relevance_level: int,
) -> dict[str, np.ndarray]:
    if relevance_level < 1:
        raise ValueError(f"relevance_level must be >= 1, got {relevance_level}")
    if np.isnan(entries.scores).any():
        raise ValueError("ranking scores contain NaN; trec_eval ordering is undefined for them")
    judged = _judgements(qrels, query_ids, relevance_level)
    n = len(query_ids)
    hits = _hits(entries, judged, relevance_level, n)
    return {m.name: m.spec.kernel(hits, judged, m.k, n) for m in metrics}


def _count(rows: np.ndarray, n: int, weights: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(rows, weights=weights, minlength=n).astype(np.float64)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    out = np.zeros_like(numerator, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def _first_per_row(rows: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal rows (rows are sorted)."""
    return np.concatenate([[True], rows[1:] != rows[:-1]]) if len(rows) else rows.astype(bool)


def _precision(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """P@k = |relevant in top k| / k (k even when fewer results), trec_eval ``P_k``."""
    assert k is not None  # precision's cutoff is required (its cutoff rule in the metric table)
    cutoff = int(k)
    return _count(hits.within(cutoff).relevant_only().rows, n) / cutoff


def _recall(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """recall@k = |relevant in top k| / |relevant judged|, trec_eval ``recall_k``."""
    return _ratio(_count(hits.within(k).relevant_only().rows, n), judged.num_rel)


def _hit_rate(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """hit_rate@k = 1 if any relevant document is in the top k else 0, trec_eval ``success_k``."""
    return (_count(hits.within(k).relevant_only().rows, n) > 0).astype(np.float64)


def _mrr(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """mrr@k = 1 / rank of the first relevant document within the top k (0 if none),
    trec_eval ``recip_rank`` on the run cut at k."""
    rel = hits.within(k).relevant_only()
    first = _first_per_row(rel.rows)
    out = np.zeros(n, dtype=np.float64)
    out[rel.rows[first]] = 1.0 / (rel.ranks[first] + 1)
    return out


def _map(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """AP@k = Σ over relevant documents at rank r <= k of precision@r, / |relevant judged|,
    trec_eval ``map_cut_k`` (``map`` without k)."""
    rel = hits.within(k).relevant_only()
    first = _first_per_row(rel.rows)
    group_start = np.flatnonzero(first)[np.cumsum(first) - 1]
    seen = np.arange(len(rel.rows)) - group_start + 1
    return _ratio(_count(rel.rows, n, seen / (rel.ranks + 1)), judged.num_rel)


def _r_precision(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """R-precision = |relevant in top R| / R with R = |relevant judged|, trec_eval ``Rprec``."""
    rel = hits.relevant_only()
    inside = rel.ranks < judged.num_rel[rel.rows]
    return _ratio(_count(rel.rows[inside], n), judged.num_rel)


def _ndcg(hits: RankedHits, judged: Judgements, k: int | None, n: int) -> np.ndarray:
    """nDCG@k = DCG@k / ideal DCG@k with DCG@k = Σ_{r<=k} gain_r / log2(r + 1), gain = grade
    (<= 0 gains nothing) and the ideal over all the query's judged grades, trec_eval
    ``ndcg_cut_k``."""
    assert k is not None  # nDCG's cutoff is required (its cutoff rule in the metric table)
    cutoff = int(k)
    top = hits.within(cutoff)
    dcg = _count(top.rows, n, np.maximum(top.grades, 0) / np.log2(top.ranks + 2.0))
    idcg = judged.ideal_gains(cutoff) @ (1.0 / np.log2(np.arange(cutoff) + 2.0))
    return _ratio(dcg, idcg)


for _spec in (
    MetricSpec("ndcg", _ndcg, "Normalised discounted cumulative gain of the top k."),
    MetricSpec("recall", _recall, "Share of the relevant documents that are in the top k."),
    MetricSpec("precision", _precision, "Share of the top k that is relevant.", aliases=("p",)),
    MetricSpec("mrr", _mrr, "1 / rank of the first relevant result.", cutoff="optional"),
    MetricSpec("map", _map, "Average precision over the relevant documents.", cutoff="optional"),
    MetricSpec(
        "hit_rate", _hit_rate, "1 when the top k holds a relevant document.", aliases=("success",)
    ),
    MetricSpec("r_precision", _r_precision, "Precision at R = |relevant|.", cutoff="none"),
):
    _add(_spec)
