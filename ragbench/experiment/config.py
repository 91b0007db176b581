"""Experiment configs: the YAML schema, validation with key paths, and sweep expansion.

A ``sweep`` names, per axis (``chunker``, ``embedder``, ``query``, ``retriever``, ``reranker``,
``postprocess``, and any axis a plugin registers — see ``ragbench.registry.axes``), a list of
component specs — the choices. Inside a spec, a list given for an option that takes one value is
an axis (``size: [256, 512]``); an option that itself takes a list (``weights``, ``separators``)
is swept with a list of lists. Nested components (``fusion: {kind: rrf, k: [10, 60]}``) expand
the same way. Expansion drops axes a trial does not use (a BM25 trial has no embedder) and
dedupes identical effective pipelines; each trial gets a stable id (hash of its effective
config) and a readable label.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import random
import re
import types
import typing
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from ragbench.data.sample import SampleSize, check_size
from ragbench.errors import ConfigError
from ragbench.evaluate.answers import needs
from ragbench.evaluate.metric_table import MAX_CUTOFF, Metric, parse_metric, parse_metrics
from ragbench.llm.client import LLMConfig, Price
from ragbench.registry import (
    Axis,
    ComponentConfig,
    ConfigModel,
    axes,
    component_field,
    components,
    format_validation_error,
)
from ragbench.telemetry import TelemetrySpec

__all__ = [
    "DatasetSpec",
    "EvaluationSpec",
    "ExperimentConfig",
    "LatencySpec",
    "SearchSpec",
    "Trial",
    "expand",
    "load_config",
    "trains_on_select",
]


class DatasetSpec(ConfigModel):
    """Where the labeled set is: a path (relative to the config file) or a bundled name, and for
    a plain folder of documents, optionally its queries file (relative to the config file too;
    default: the folder's ``queries.jsonl``).

    ``sample`` sweeps on a sample of the documents (``ragbench.data.sample``): a number of
    documents, a percentage (``"25%"``) or ``all`` (the default), drawn with ``sample_seed``;
    every document a kept query is judged on stays in it."""

    path: str
    format: Literal["beir", "spans", "chunking_evaluation", "folder"] | None = None
    split: str = "test"
    queries: str | None = None
    sample: int | str | None = None
    sample_seed: int = Field(0, ge=0)

    @field_validator("sample", mode="before")
    @classmethod
    def _sample(cls, value: Any) -> SampleSize:
        return check_size(value)


MetricField = Annotated[
    Metric,
    PlainValidator(parse_metric),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string"}),
]
"""A metric in a config: parsed once when the config is validated, written as its name."""


class EvaluationSpec(ConfigModel):
    """How rankings are scored.

    ``depth`` is the ranking depth at the evaluated level; ``chunk_depth`` is how many chunks
    are retrieved per query (default: ``depth``, or ``3 * depth`` for document-level evaluation
    of chunked corpora so that ``recall@depth`` still sees ``depth`` documents).

    Answer-level metrics (``token_f1``, ``ragas:Faithfulness``, ...) score each trial's answers
    with the chunks its generator used, or — for context metrics of trials without a generator —
    the top ``context_k`` chunks. ``llm`` is the judge LLM ragas' LLM metrics call, ``embedder``
    the embedder of the metrics that embed (default: the sentence-transformers default model).

    Honest selection: with ``select_on`` the sweep runs on that split and the best trial per
    metric is then scored once on ``report_on``; with ``folds`` instead, each query is scored by
    the trial chosen on the other folds (k-fold cross-validation over the sweep split).
    """

    level: Literal["document", "chunk", "span"] = "document"
    metrics: tuple[MetricField, ...] = Field(
        ("ndcg@10", "recall@100", "mrr@10"), validate_default=True
    )
    depth: int = Field(100, gt=0, le=MAX_CUTOFF)
    chunk_depth: int | None = Field(None, gt=0, le=MAX_CUTOFF)
    relevance_level: int = Field(1, ge=1)
    min_overlap: float = Field(0.0, ge=0, le=1)
    select_on: str | None = None
    report_on: str | None = None
    folds: int | None = Field(None, ge=2)
    fold_seed: int = 0
    context_k: int = Field(5, gt=0)
    llm: LLMConfig | None = None
    embedder: component_field("embedder") | None = None  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _selection(self) -> EvaluationSpec:
        if self.report_on is not None and self.folds is not None:
            raise ValueError("use either report_on (a second split) or folds, not both")
        return self

    @model_validator(mode="after")
    def _cutoffs_within_depth(self) -> EvaluationSpec:
        """A metric cut deeper than the ranking it scores would score a shorter ranking under
        its name (``recall@50`` of 5 documents is ``recall@5``): refused."""
        for metric in self.metrics:
            if metric.k is not None and metric.k > self.depth:
                raise ValueError(
                    f"@metrics: {metric.name} reads the top {metric.k} results, but "
                    f"evaluation.depth keeps {self.depth} (it would score "
                    f"{metric.family}@{self.depth} under its name); raise evaluation.depth to "
                    f"{metric.k} or cut {metric.family} at {self.depth} at most"
                )
        return self

    @property
    def selects(self) -> bool:
        """Whether the run ends with an honest selection (two splits or k folds)."""
        return self.report_on is not None or self.folds is not None

    @field_validator("metrics", mode="before")
    @classmethod
    def _known_metrics(cls, value: Any) -> Any:
        """The metrics parsed, repeats dropped; errors name the string and the allowed forms."""
        if isinstance(value, str) or not isinstance(value, Sequence):
            return value  # pydantic's own error: a list is expected
        if not value:
            raise ValueError("at least one metric is needed")
        try:
            return tuple(parse_metrics(value))
        except ConfigError as exc:
            raise ValueError(str(exc)) from None


class LatencySpec(ConfigModel):
    """The latency pass: ``queries`` sampled queries (0: no pass; seeded by ``seed``), each
    timed alone ``repeats`` times (the fastest counts), torch fixed at ``threads`` threads."""

    queries: int = Field(50, ge=0)
    repeats: int = Field(3, gt=0)
    threads: int | None = Field(1, gt=0)
    seed: int = 0


class SearchSpec(ConfigModel):
    """Which trials of the grid run: all (``grid``), ``n`` at random, or ``n`` chosen by TPE."""

    strategy: Literal["grid", "random", "tpe"] = "grid"
    n: int | None = Field(None, gt=0)
    seed: int = 0
    objective: str | None = None


class ExperimentConfig(ConfigModel):
    """A whole experiment file (see README, "Sweeps", and ARCHITECTURE.md)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    dataset: DatasetSpec
    evaluation: EvaluationSpec = EvaluationSpec()
    baseline: str | None = None
    sweep: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    search: SearchSpec = SearchSpec()
    latency: LatencySpec = LatencySpec()
    telemetry: TelemetrySpec | None = None
    """OpenTelemetry spans of trials and stages (``ragbench.telemetry``); off without it."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """US dollars per million input and output tokens, by model name (cost columns)."""
    base_dir: Path = Path(".")

    @field_validator("sweep", mode="before")
    @classmethod
    def _stages(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        names = [a.name for a in axes()]
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise ValueError(f"@{unknown[0]}: unknown axis; allowed: {', '.join(names)}")
        return {k: v if isinstance(v, list) else [v] for k, v in value.items()}

    @model_validator(mode="after")
    def _reports_on_another_split(self) -> ExperimentConfig:
        """Honest selection reports on queries the sweep did not select on: ``report_on``
        differs from the sweep's split (``select_on``, else ``dataset.split``)."""
        report_on = self.evaluation.report_on
        if report_on is not None and report_on == self.sweep_split:
            where = "evaluation.select_on" if self.evaluation.select_on else "dataset.split"
            raise ValueError(
                f"@evaluation.report_on: the sweep selects on split {report_on!r} ({where}) and "
                f"would report on split {report_on!r} too; set evaluation.select_on to another "
                "split than report_on"
            )
        return self

    @model_validator(mode="after")
    def _one_corpus_sampled(self) -> ExperimentConfig:
        """A sample keeps the documents its split's queries are judged on: honest selection
        on two splits would select and report on two different samples."""
        if self.dataset.sample is not None and self.evaluation.report_on is not None:
            raise ValueError(
                "@dataset.sample: a sample keeps the documents of one split's queries, and "
                "evaluation.report_on reports on another split; use evaluation.folds, or "
                "sample: all"
            )
        return self

    @model_validator(mode="after")
    def _no_training_on_reported(self) -> ExperimentConfig:
        """A model fine-tuned on ``pairs: select`` trains on the selection split: the run
        must report on another split (``evaluation.report_on``)."""
        if not trains_on_select(self):
            return self
        evaluation = self.evaluation
        if evaluation.folds is not None:
            raise ValueError(
                "@evaluation.folds: finetune.pairs: select would train one model per fold; "
                "use evaluation.select_on and report_on (two splits), or pairs: generated"
            )
        trained = evaluation.select_on or self.dataset.split
        if evaluation.report_on is None:
            where = "evaluation.select_on" if evaluation.select_on else "dataset.split"
            raise ValueError(
                f"@evaluation.report_on: finetune.pairs: select trains on split {trained!r} "
                f"({where}) and the run would report on split {trained!r} too; set "
                "evaluation.select_on to the training split and report_on to another"
            )
        return self

    @property
    def sweep_split(self) -> str:
        """The split the sweep runs on: ``evaluation.select_on``, else ``dataset.split``."""
        return self.evaluation.select_on or self.dataset.split

    def dataset_path(self) -> str:
        """The dataset path resolved against the config file's folder; a bare name that is
        not a folder there (``demo``, a downloaded BEIR set) passes through unchanged."""
        path = self.base_dir / Path(self.dataset.path).expanduser()
        if os.path.exists(path) or "/" in self.dataset.path:  # a bad path fails on loading
            return str(path)
        return self.dataset.path

    def objective(self) -> Metric:
        """The metric TPE optimises: ``search.objective`` (a metric name) or the first of
        ``evaluation.metrics``; a ``ConfigError`` unless it is one of them."""
        metrics = {m.name: m for m in self.evaluation.metrics}
        objective = self.search.objective or self.evaluation.metrics[0].name
        if objective not in metrics:
            raise ConfigError(
                f"search.objective: {objective!r} is not one of evaluation.metrics "
                f"({', '.join(metrics)})"
            )
        return metrics[objective]

    def queries_path(self) -> str | None:
        """The separate queries file resolved against the config file's folder, if any."""
        if self.dataset.queries is None:
            return None
        return str(self.base_dir / Path(self.dataset.queries).expanduser())


def trains_on_select(config: ExperimentConfig) -> bool:
    """Whether a component of the sweep is fine-tuned on the selection split's pairs."""

    def found(value: Any) -> bool:
        if isinstance(value, Mapping):
            tuning = value.get("finetune")
            choices = tuning if isinstance(tuning, list) else [tuning]
            for choice in choices:
                pairs = choice.get("pairs") if isinstance(choice, Mapping) else None
                if pairs == "select" or (isinstance(pairs, list) and "select" in pairs):
                    return True
            return any(found(v) for v in value.values())
        return isinstance(value, list) and any(found(v) for v in value)

    return found(config.sweep)


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_DIGITS = re.compile(r"\d+")
_MERGE = "tag:yaml.org,2002:merge"
MAX_YAML_NODES = 100_000
"""The most values a YAML text may hold once its aliases are expanded: more is an alias bomb
(a few lines whose aliases multiply into billions of values), refused while it is parsed."""


class _Loader(yaml.SafeLoader):
    """Safe YAML without silent losses or blow-ups: a key given twice in one mapping is an
    error naming where both are (YAML itself keeps the last one), and aliases (merge keys
    included) may expand to ``MAX_YAML_NODES`` values at most, and never into themselves."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._sizes: dict[int, int] = {}  # id of a composed node → its values, aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        """The node, counted: its size is its own and its children's, an alias counting as the
        whole node it repeats; refused past ``MAX_YAML_NODES`` before anything walks it."""
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None and id(node) not in self._sizes:
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"alias *{event.anchor} repeats a value that holds it",
                    event.start_mark,
                )
            return typing.cast(yaml.Node, super().compose_node(parent, index))
        node = typing.cast(yaml.Node, super().compose_node(parent, index))  # never None
        children = node.value if isinstance(node, yaml.SequenceNode) else []
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        size = 1 + sum(self._sizes[id(child)] for child in children)
        if size > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"its aliases expand this value to more than {MAX_YAML_NODES:,} values; "
                "write it with fewer aliases",
                node.start_mark,
            )
        self._sizes[id(node)] = size
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        marks: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE:
                continue
            key, mark = self.construct_object(key_node), key_node.start_mark
            first = marks.setdefault(key, mark)
            if first is not mark:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"key {key!r} given twice, on {_where(first, mark)}; YAML would keep only "
                    "the last",
                    mark,
                )
        return super().construct_mapping(node, deep=deep)


def _where(first: yaml.Mark, second: yaml.Mark) -> str:
    """Where two keys are: their lines, or their columns on one line."""
    if first.line != second.line:
        return f"lines {first.line + 1} and {second.line + 1}"
    return f"line {first.line + 1}, columns {first.column + 1} and {second.column + 1}"


def _load_yaml(text: str) -> Any:
    """``text`` parsed as YAML by ``_Loader``."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader, checking keys


def _yaml_error(exc: yaml.YAMLError | RecursionError) -> tuple[str, str]:
    """Where a YAML text failed (`` line N`` or "") and why, on one line."""
    if isinstance(exc, RecursionError):
        return "", "nested too deeply"
    mark = getattr(exc, "problem_mark", None)
    line = f" line {mark.line + 1}" if mark is not None else ""
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    reason = ": ".join(str(p) for p in parts if p) or str(exc)
    return line, " ".join(reason.split())


def _steps(path: str) -> list[str | int]:
    """The keys and indexes of an override's path, ``KEY ( "." KEY | "[" INT "]" )*`` with
    ``KEY`` a letter or ``_`` then letters, digits, ``_`` or ``-``; ``ValueError`` naming the
    first character that does not fit."""

    def refuse(at: int, expected: str) -> ValueError:
        found = repr(path[at]) if at < len(path) else "the end"
        return ValueError(f"expected {expected} at character {at + 1} of the path, found {found}")

    steps: list[str | int] = []
    at = 0
    while not steps or at < len(path):
        if steps and path[at] == "[":
            digits = _DIGITS.match(path, at + 1)
            end = digits.end() if digits else at + 1
            if digits is None:
                raise refuse(end, "an index (digits)")
            if path[end : end + 1] != "]":
                raise refuse(end, "']'")
            steps.append(int(digits[0]))
            at = end + 1
            continue
        if steps and path[at] != ".":
            raise refuse(at, "'.' or '['")
        start = at + 1 if steps else at
        key = _KEY.match(path, start)
        if key is None:
            raise refuse(start, "a key (a letter or _, then letters, digits, _ or -)")
        steps.append(key[0])
        at = key.end()
    return steps


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Set one ``key.path[i].option=value`` (value parsed as YAML) in a raw config mapping;
    a path the grammar of ``_steps`` does not parse, or no value, is a ``ConfigError``."""
    path, sep, raw = assignment.partition("=")
    path = path.strip()
    shown = assignment if len(assignment) <= 60 else assignment[:57] + "..."
    if not sep:
        raise ConfigError(f"--set {shown!r}: expected KEY.PATH=VALUE, e.g. evaluation.depth=50")
    try:
        steps = _steps(path)
    except ValueError as exc:
        raise ConfigError(f"--set {shown!r}: {exc} (KEY.PATH[INDEX]=VALUE)") from None
    if not raw.strip():
        raise ConfigError(f"--set {shown!r}: expected a value after '=' ('' for an empty text)")
    try:
        value = _load_yaml(raw)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"--set {shown!r}: invalid YAML value ({_yaml_error(exc)[1]})") from None
    node: Any = data
    for n, step in enumerate(steps):
        last = n == len(steps) - 1
        if isinstance(step, str):
            if not isinstance(node, dict):
                raise ConfigError(f"--set {path}: {step!r} is not inside a mapping")
            if last:
                node[step] = value
                return
            node = node.setdefault(step, {} if isinstance(steps[n + 1], str) else [])
        else:
            if not isinstance(node, list) or step >= len(node):
                raise ConfigError(f"--set {path}: no item [{step}] there")
            if last:
                node[step] = value
                return
            node = node[step]


def _blamed(line: str, where: str, overrides: Sequence[str]) -> str:
    """A validation error's ``key.path: problem`` line, blaming the last ``--set`` that gave
    the key (or a key above it) its value, else the file (``where``)."""
    key, _, problem = line.partition(": ")
    for assignment in reversed(overrides):
        path = assignment.partition("=")[0].strip()
        if key == path:
            return f"--set {assignment}: {problem}"
        if key.startswith((f"{path}.", f"{path}[")):
            return f"--set {assignment}: {line}"
    return where + line


def load_config(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
) -> ExperimentConfig:
    """Read and validate a config (a YAML file or a mapping), after ``overrides``
    (``key.path=value``); errors name the file and the key path."""
    where = ""
    if isinstance(source, Mapping):
        data, base = dict(source), Path(".")
    else:
        path = Path(source)
        where = f"{path}: "
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            byte = f"0x{exc.object[exc.start]:02x}"
            raise ConfigError(
                f"{path}: not UTF-8 text (invalid byte {byte} at offset {exc.start})"
            ) from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
        try:
            data = _load_yaml(text)
        except (yaml.YAMLError, RecursionError) as exc:
            line, reason = _yaml_error(exc)
            raise ConfigError(f"{path}:{line} invalid YAML ({reason})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        base = path.resolve().parent
    data.setdefault("base_dir", str(base))
    for assignment in overrides:
        apply_override(data, assignment)
    try:
        config = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        lines = format_validation_error("", exc).splitlines()
        raise ConfigError("\n".join(_blamed(line, where, overrides) for line in lines)) from None
    try:
        expand(config)
    except ConfigError as exc:
        lines = str(exc).splitlines()
        raise ConfigError("\n".join(_blamed(line, where, overrides) for line in lines)) from None
    return config


# ---------------------------------------------------------------- expansion

MAX_TRIALS = 100_000  # a grid past this is a typo, not an experiment: it fails before expanding


def _cap(size: int, path: str, what: str) -> None:
    """``ConfigError`` when ``size`` (counted before anything that big is built) passes the
    cap on trials."""
    if size > MAX_TRIALS:
        raise ConfigError(
            f"{path}: expands to {size:,} {what}, more than the cap of {MAX_TRIALS:,} trials; "
            "sweep fewer values"
        )


@dataclass(frozen=True, eq=False)
class Trial:
    """One effective pipeline: a component config per axis it uses, in pipeline order."""

    configs: Mapping[str, ComponentConfig]

    def __getitem__(self, axis: str) -> ComponentConfig:
        return self.configs[axis]

    def get(self, axis: str) -> ComponentConfig | None:
        """The config on ``axis``, None when the trial does not use it."""
        return self.configs.get(axis)

    def effective(self) -> dict[str, Any]:
        """The config that defines the trial (unused axes dropped)."""
        return {axis: config.model_dump(mode="json") for axis, config in self.configs.items()}

    @property
    def id(self) -> str:
        """Stable id: hash of the effective config."""
        payload = json.dumps(self.effective(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def label(self) -> str:
        """Readable name: retriever, chunker, embedder (if used), then the other steps that do
        something (``rerank:dense(candidates=30)``)."""
        parts = []
        for axis in sorted(axes(), key=lambda a: a.label):
            config = self.configs.get(axis.name)
            if config is None or (axis.prefix and config.kind == "none"):
                continue
            text = _embedder_label(config) if axis.name == "embedder" else config.label()
            parts.append(axis.prefix + text)
        return " | ".join(parts)

    def params(self) -> dict[str, Any]:
        """Flattened parameters (``retriever.k1`` → 0.9) for tables and plots."""
        flat: dict[str, Any] = {}
        for stage, values in self.effective().items():
            _flatten(stage, values, flat)
        return flat


def make_trial(picked: Mapping[str, ComponentConfig]) -> Trial:
    """The trial of one pick per axis: on-demand axes no chosen component uses are dropped,
    and optional axes at their default are left out of its identity."""
    known = {a.name: a for a in axes()}
    used: set[str] = set()
    for name, config in picked.items():
        if not known[name].on_demand:
            used |= config.axes_used()
    kept = {}
    for name, config in picked.items():
        axis = known[name]
        if axis.on_demand and name not in used:
            continue
        if axis.optional and config == _default(axis):
            continue
        kept[name] = config
    return Trial(kept)


def trial_of(spec: Mapping[str, Any], where: str = "trial") -> Trial:
    """The trial of a mapping of one component spec per axis (a trial's effective config, or
    a pipeline spec); axes it leaves out take their defaults, unknown keys and a missing
    required axis are ``ConfigError``s naming ``where``."""
    known = {a.name: a for a in axes()}
    unknown = sorted(set(spec) - set(known))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(known)}")
    picked = {}
    for name, axis in known.items():
        value = spec.get(name, axis.default)
        if value is None:
            raise ConfigError(f"{where}.{name}: required")
        picked[name] = components(name).parse(value, f"{where}.{name}")
    return make_trial(picked)


def _default(axis: Axis) -> ComponentConfig | None:
    return None if axis.default is None else components(axis.name).parse(dict(axis.default))


def _embedder_label(config: ComponentConfig) -> str:
    """The model's base name plus any other non-default option."""
    model = getattr(config, "model", None)
    if model is None:
        return config.label()
    default = type(config).model_fields["model"].default
    options = config.model_copy(update={"model": default}).label()[len(config.kind) :]
    return str(model).rsplit("/", 1)[-1] + options


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}", inner, out)
    elif isinstance(value, list):
        out[prefix] = json.dumps(value)
    else:
        out[prefix] = value


def _takes_sequence(annotation: Any) -> bool:
    """Whether a field annotation accepts a list/tuple value (then a list is not an axis)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_takes_sequence(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _takes_sequence(typing.get_args(annotation)[0])
    return origin in (list, tuple, Sequence) or annotation in (list, tuple)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (for nested option dicts such as ``tokenizer``)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _nested_family(info: Any) -> str | None:
    """The component family of a ``component_field`` (found through its validator), also
    when the field is optional."""
    candidates = [*info.metadata]
    for arg in typing.get_args(info.annotation):
        candidates += [*getattr(arg, "__metadata__", ())]
    for meta in candidates:
        family = getattr(getattr(meta, "func", None), "family", None)
        if family:
            return family
    return None


def _variants(spec: Any, family: str, path: str) -> list[dict[str, Any]]:
    """All concrete specs of one (possibly list-valued) component spec."""
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{path}: expected a component mapping with 'kind', got {spec!r}")
    kinds = spec.get("kind")
    if isinstance(kinds, list):
        return [v for k in kinds for v in _variants({**spec, "kind": k}, family, path)]
    reg = components(family)
    if not isinstance(kinds, str) or kinds not in reg.kinds():
        reg.parse(spec, path)  # raises the standard unknown-kind error
        raise KeyError(kinds)
    model = reg.config_class(kinds)
    return _expand_fields(dict(spec), model, path)


def _expand_fields(spec: dict[str, Any], model: type[BaseModel], path: str) -> list[dict]:
    axes: list[list[Any]] = []
    keys = list(spec)
    for key in keys:
        value = spec[key]
        info = model.model_fields.get(key)
        if info is None or key == "kind":
            axes.append([value])
            continue
        axes.append(_field_values(value, info, f"{path}.{key}"))
    _cap(math.prod(len(values) for values in axes), path, "combinations")
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


def _field_values(value: Any, info: Any, path: str) -> list[Any]:
    family = _nested_family(info)
    if family is not None and value is not None:
        choices = value if isinstance(value, list) else [value]
        return [v for c in choices for v in ([None] if c is None else _variants(c, family, path))]
    submodel = _model_of(info.annotation)
    if submodel is not None and isinstance(value, Mapping):
        return _expand_fields(dict(value), submodel, path)
    if isinstance(value, list):
        if _takes_sequence(info.annotation):
            nested = value and all(isinstance(v, list) for v in value)
            return list(value) if nested else [value]
        if not value:
            raise ConfigError(f"{path}: an empty list sweeps nothing")
        return list(value)
    return [value]


def _parsed(family: str, specs: list[dict[str, Any]], prefix: str) -> list[ComponentConfig]:
    variants = [
        (f"{prefix}[{i}]", variant)
        for i, spec in enumerate(specs)
        for variant in _variants(spec, family, f"{prefix}[{i}]")
    ]
    _cap(len(variants), prefix, "choices")
    return [components(family).parse(variant, path) for path, variant in variants]


def _grid_size(choices: Mapping[str, Sequence[ComponentConfig]]) -> int:
    """How many trials the product of the axes' ``choices`` makes, each without the on-demand
    axes none of its components uses (as ``make_trial`` drops them), before duplicates merge:
    counted per set of used on-demand axes, never by building the product."""
    on_demand = {a.name for a in axes() if a.on_demand and a.name in choices}
    counts: Counter[frozenset[str]] = Counter({frozenset(): 1})
    for name, configs in choices.items():
        if name in on_demand:
            continue
        uses = Counter(c.axes_used() & on_demand for c in configs)
        merged: Counter[frozenset[str]] = Counter()
        for used, n in counts.items():
            for more, m in uses.items():
                merged[used | more] += n * m
        counts = merged
    return sum(n * math.prod(len(choices[a]) for a in used) for used, n in counts.items())


def grid(config: ExperimentConfig) -> list[Trial]:
    """Every distinct effective pipeline of the sweep, in a prefix-sharing order."""
    choices: dict[str, list[ComponentConfig]] = {}
    for axis in axes():
        specs = config.sweep.get(axis.name, [dict(axis.default)] if axis.default else [])
        choices[axis.name] = _parsed(axis.name, specs, f"sweep.{axis.name}")
        if not choices[axis.name]:
            kinds = ", ".join(components(axis.name).kinds())
            raise ConfigError(f"sweep.{axis.name}: at least one is needed ({kinds})")
    _cap(_grid_size(choices), "sweep", "trials")
    trials: dict[str, Trial] = {}
    for combo in itertools.product(*choices.values()):
        trial = make_trial(dict(zip(choices, combo, strict=True)))
        trials.setdefault(trial.id, trial)
    return list(trials.values())


def expand(config: ExperimentConfig) -> list[Trial]:
    """The trials a config runs: the whole grid, or a seeded random sample of ``search.n``.

    For ``tpe`` this is the candidate grid; the runner asks optuna which to run.
    """
    trials = grid(config)
    search = config.search
    if search.strategy in {"random", "tpe"} and search.n is None:
        raise ConfigError(f"search.n: required for strategy {search.strategy!r}")
    if search.strategy == "tpe":
        config.objective()  # a ConfigError unless it names one of evaluation.metrics
    if search.strategy == "random" and search.n is not None and search.n < len(trials):
        picked = sorted(random.Random(search.seed).sample(range(len(trials)), search.n))
        trials = [trials[i] for i in picked]
    if config.baseline is not None:
        find_baseline(trials, config.baseline)
    _check_answer_metrics(config, trials)
    return trials


def _check_answer_metrics(config: ExperimentConfig, trials: Sequence[Trial]) -> None:
    """Answer metrics need answers from every trial, and LLM metrics a judge."""
    for metric in config.evaluation.metrics:
        if metric.level != "answer":
            continue
        wanted = needs(metric)
        if "llm" in wanted and config.evaluation.llm is None:
            raise ConfigError(
                f"evaluation.metrics: {metric.name} asks an LLM judge; set evaluation.llm "
                "(base_url, model, credential)"
            )
        bare = [t.label for t in trials if t.get("generator") is None]
        if "response" in wanted and bare:
            raise ConfigError(
                f"evaluation.metrics: {metric.name} scores answers, and {len(bare)} trial(s) "
                f"have no generator (e.g. {bare[0]!r}); add sweep.generator"
            )


def find_baseline(trials: Sequence[Trial], wanted: str) -> Trial:
    """The trial named by id, exact label, or (first in order) a label containing ``wanted``."""
    for match in (
        lambda t: t.id == wanted,
        lambda t: t.label == wanted,
        lambda t: wanted.lower() in t.label.lower(),
    ):
        found = [t for t in trials if match(t)]
        if found:
            return found[0]
    labels = "; ".join(t.label for t in trials[:10])
    raise ConfigError(f"baseline: no trial matches {wanted!r} (trials: {labels})")


def prefix_groups(trials: Sequence[Trial]) -> Iterator[list[Trial]]:
    """Trials grouped by shared resources (chunker, embedder), so each group's artifacts build
    once."""
    resources = [a.name for a in axes() if not a.step]
    groups: dict[tuple[str, ...], list[Trial]] = {}
    for t in trials:
        key = tuple(c.key() if (c := t.get(name)) else "" for name in resources)
        groups.setdefault(key, []).append(t)
    yield from groups.values()
