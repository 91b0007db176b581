"""The metric table: one ``MetricSpec`` row per metric family, the parsed ``Metric`` objects
metric strings become, and a metric's direction (which trial is best).

A row holds the family's canonical name, aliases, cutoff rule, level, direction, a one-line doc
and the kernel computing per-query values. Parsing, error messages, ``evaluate`` /
``evaluate_run`` (``ragbench.evaluate.metrics``) and ``ragbench.evaluate.labels.evaluate_chunks``
all read the table, so ``register_metric`` is all a new metric needs. Metric strings are
case-insensitive; canonical names are lowercase. The rank metrics (``ndcg@k``, ``recall@k``,
``precision@k`` / ``p@k``, ``mrr`` / ``mrr@k``, ``map`` / ``map@k``, ``hit_rate@k`` /
``success@k``, ``r_precision``) register in ``ragbench.evaluate.metrics``. The span metrics
``span_recall@k``, ``span_precision@k``, ``span_iou@k`` and ``recall@Ntok`` need chunk offsets
and span evidence: they register in ``ragbench.evaluate.labels``. Answer metrics (level
``answer``: ``exact_match``, ``token_f1``, ``rouge_l``, ``answer_supported``) score generated
answers and register in ``ragbench.evaluate.answers``, as does the namespace ``ragas:<Name>``
(``register_namespace``: metrics another library defines, resolved on first use, spelled as
that library spells them). The table imports those modules when a lookup misses.

A metric string is parsed once, where it enters (a config when it is validated, a report's or
a command's argument): from there on the ``Metric`` object travels, and its string form
(``str(metric)``, its canonical ``name``) is what results files and reports write.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, TypeVar, get_args

import numpy as np
import pandas as pd

from ragbench.errors import ConfigError

__all__ = [
    "MAX_CUTOFF",
    "TIE_RTOL",
    "Cutoff",
    "Metric",
    "MetricLevel",
    "MetricNamespace",
    "MetricSpec",
    "Need",
    "allowed_forms",
    "best_first",
    "best_index",
    "best_indices",
    "higher_is_better",
    "metric_table",
    "parse_metric",
    "parse_metrics",
    "register_metric",
    "register_namespace",
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
# modules registering the built-in metrics, imported when a lookup misses (popped from the end:
# rank metrics, span metrics, then answer metrics and the ragas namespace)
_BUILTIN_MODULES = [
    "ragbench.evaluate.answers",
    "ragbench.evaluate.labels",
    "ragbench.evaluate.metrics",
]


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
    family's row of the metric table (``spec``) gives its level and direction. What configs,
    evaluation, selection, TPE and significance carry (``parse_metric`` makes one, once, where
    a metric string enters); ``str(metric)`` is the name results files and reports write.
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


def higher_is_better(metric: str | Metric) -> bool:
    """Whether a higher value of ``metric`` is better (a name, any accepted spelling, is parsed:
    reports pass the names a run directory holds)."""
    return parse_metric(metric).higher_is_better


def best_index(values: pd.Series, metric: str | Metric) -> Any:
    """The index label of the best of ``values`` of ``metric``: the highest, or the lowest when
    lower is better (the metric's direction in the metric table).

    Typed ``Any``: a label is whatever the index holds (a trial id, a row number), and
    pandas-stubs' ``.loc`` does not accept the ``Hashable`` its ``idxmax`` is typed to return."""
    return values.idxmax() if higher_is_better(metric) else values.idxmin()


TIE_RTOL = 1e-9  # values this close (relative) are tied: means of one set may differ in rounding


def best_indices(values: pd.Series, metric: str | Metric) -> list[Any]:
    """Every index label whose value ties the best of ``values`` of ``metric`` (within
    ``TIE_RTOL``), in their order in ``values``; NaN values never are. A tie is not a pick:
    callers report all of them."""
    found = values.dropna().astype(float)
    if found.empty:
        return []
    top = found.max() if higher_is_better(metric) else found.min()
    return list(found.index[np.isclose(found, top, rtol=TIE_RTOL, atol=0.0)])


def best_first(frame: pd.DataFrame, metric: str | Metric) -> pd.DataFrame:
    """``frame`` sorted by its ``metric`` column, best first (by the metric's direction)."""
    return frame.sort_values(str(metric), ascending=not higher_is_better(metric))


def parse_metrics(specs: Sequence[str | Metric]) -> list[Metric]:
    """Parse several metrics, dropping repeats (same canonical name) and keeping order."""
    parsed = {m.name: m for m in map(parse_metric, specs)}
    return list(parsed.values())


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


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0."""
    out = np.zeros_like(numerator, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out
