"""One registry per component family: ``kind`` string → (pydantic config class, factory),
and the sweep axes: the families a trial picks one component of, in pipeline order.

Configs name components by ``kind``; ``Registry.parse`` validates a spec (a dict from YAML/JSON
or a config object) and turns pydantic errors into a :class:`ConfigError` whose message names the
key path and what is allowed. Built-in kinds are registered by importing the family's modules
lazily; third parties add kinds — and whole new axes — through the ``ragbench.components``
entry-point group (each entry point is imported, and registers on import). See ARCHITECTURE.md.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Annotated, Any, ClassVar, Generic, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import ErrorDetails

from ragbench.errors import ConfigError

__all__ = [
    "MAX_INT",
    "Axis",
    "ComponentConfig",
    "ConfigModel",
    "Registry",
    "axes",
    "component_field",
    "components",
    "described",
    "format_validation_error",
    "redundancy",
    "register_axis",
    "validation_problem",
]

T = TypeVar("T")
C = TypeVar("C", bound="ComponentConfig")

ENTRY_POINT_GROUP = "ragbench.components"

# Modules that register each family's built-in kinds when imported.
_BUILTIN_MODULES: dict[str, tuple[str, ...]] = {
    "chunker": ("ragbench.text.chunkers",),
    "embedder": ("ragbench.index.embedders",),
    "dense": ("ragbench.index.dense", "ragbench.index.lancedb_store"),
    "sparse": ("ragbench.index.sparse",),
    "fusion": ("ragbench.retrieve.fusion",),
    "reranker": ("ragbench.retrieve.rerank",),
    "retriever": ("ragbench.retrieve.retriever", "ragbench.retrieve.agentic"),
    "query": ("ragbench.retrieve.query",),
    "postprocess": ("ragbench.retrieve.postprocess",),
    "generator": ("ragbench.retrieve.generate",),
}


MAX_INT = 2**63 - 1
"""The largest integer a config option may hold: options end up in int64 columns and arrays."""


class ConfigModel(BaseModel):
    """Base of every config model: frozen, unknown keys rejected, and numbers taken as written —
    a boolean is never a number (``size: true`` is not 1), a float must be finite (``.inf``,
    ``.nan``) and an integer within ``MAX_INT``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if not _numeric(cls, info.field_name or ""):
            return value
        for leaf in _leaves(value):
            if isinstance(leaf, bool):
                raise ValueError(f"expected a number, got {str(leaf).lower()} (a boolean)")
            if isinstance(leaf, int) and abs(leaf) > MAX_INT:
                raise ValueError(f"expected an integer of at most {MAX_INT:,} (int64), got {leaf}")
        return value


@cache
def _numeric(model: type[BaseModel], name: str) -> bool:
    """Whether the field ``name`` of ``model`` holds numbers (int or float, also inside tuples
    and optional) and no boolean."""
    field = model.model_fields.get(name)
    found: set[Any] = set()
    stack = [field.annotation] if field is not None else []
    while stack:
        current = stack.pop()
        origin = typing.get_origin(current)
        if origin is typing.Literal:
            continue
        if origin is typing.Annotated:
            stack.append(typing.get_args(current)[0])
        elif origin is not None or isinstance(current, types.UnionType):
            stack.extend(typing.get_args(current))
        else:
            found.add(current)
    return bool(found & {int, float}) and not found & {bool, Any}


def _leaves(value: Any) -> list[Any]:
    """``value`` itself, or the items of a list, tuple or mapping (nested)."""
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


class ComponentConfig(ConfigModel):
    """Base of every component config: frozen, unknown keys rejected, numbers checked
    (``ConfigModel``), hashable into cache keys — and what its kind declares to the rest of
    the package (``uses``, ``colour``, ``score_scale``, ``parts``, ``ranks_by``,
    ``redundancy``), which the runner, the report, the pipeline and the service read instead
    of naming kinds."""

    kind: str
    uses: ClassVar[frozenset[str]] = frozenset()
    """Axes this component reads from its trial (a dense retriever uses the trial's
    ``embedder``); an on-demand axis is part of a trial only when a chosen component uses it."""

    colour: ClassVar[int | None] = None
    """The slot of the tab10 palette plots draw this kind in (None: one picked from its name)."""

    def score_scale(self) -> str | None:
        """What the scores this component gives mean (a retriever's, a reranker's, a store's, a
        fusion's), as the search service explains them; None: no scores of its own."""
        return None

    def parts(self) -> dict[str, ComponentConfig]:
        """Components of this family that run alone over this one's indexes, by kind (a hybrid
        retriever's BM25 and dense sides): a deployed pipeline offers them as retrievers."""
        return {}

    def ranks_by(self, trial: Mapping[str, ComponentConfig]) -> ComponentConfig | None:
        """The embedder whose vectors alone order this step's hits in ``trial`` (components by
        axis): a dense retriever ranks by the trial's; None for any other ranking."""
        return None

    def redundancy(self, trial: Mapping[str, ComponentConfig]) -> str | None:
        """Why ``trial`` (components by axis) with this component cannot rank differently from
        the same trial without it, or None (see ``redundancy``)."""
        return None

    def axes_used(self) -> frozenset[str]:
        """``uses`` of this component and of every component nested in its options."""
        found = set(self.uses)
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, ComponentConfig):
                found |= value.axes_used()
        return frozenset(found)

    def key(self) -> str:
        """Stable hash of the full config (defaults included), for cache keys and trial ids."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def label(self) -> str:
        """Short readable form: kind plus the options that differ from their defaults (but
        those a class lists in ``unlabelled``, such as an endpoint's URL)."""
        parts = []
        hidden: frozenset[str] = getattr(type(self), "unlabelled", frozenset())
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name == "kind" or name in hidden:
                continue
            if value == info.get_default(call_default_factory=True):
                continue
            parts.append(f"{name}={_short(value)}")
        return f"{self.kind}({', '.join(parts)})" if parts else self.kind


def redundancy(trial: Mapping[str, ComponentConfig]) -> str | None:
    """Why a trial (its components by axis) cannot rank differently from another trial of its
    sweep, as the first of its components that knows says (``ComponentConfig.redundancy``),
    or None; the dry run and the report flag such trials."""
    return next((why for c in trial.values() if (why := c.redundancy(trial)) is not None), None)


def _short(value: Any) -> str:
    if isinstance(value, ComponentConfig):
        return value.label()
    if isinstance(value, BaseModel):
        hidden: frozenset[str] = getattr(type(value), "unlabelled", frozenset())
        shown = value.model_dump(exclude_defaults=True, exclude=set(hidden))
        return "(" + ",".join(f"{k}={v}" for k, v in shown.items()) + ")"
    if isinstance(value, tuple | list):
        return "[" + ",".join(_short(v) for v in value) + "]"
    return str(value)


def _format_loc(prefix: str, loc: tuple[Any, ...]) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "<root>"


def format_validation_error(prefix: str, error: ValidationError) -> str:
    """Render a pydantic error as ``key.path: what is wrong (got value)`` lines, in the words of
    YAML and JSON (``validation_problem``); the members of a union a value fits none of are one
    line (``Input should be 'english' or 'none' or a list (got 5)``)."""
    found: dict[tuple[Any, ...], tuple[list[str], str]] = {}
    items = error.errors()
    locs = [_key_path(i["loc"]) for i in items]
    for item, loc in zip(items, locs, strict=True):
        if any(len(other) > len(loc) and other[: len(loc)] == loc for other in locs):
            continue  # a parent's summary of a child error already reported in detail
        msg, got = validation_problem(item)
        if msg.startswith("@"):  # a nested component error already carrying its own key path
            sub, _, msg = msg[1:].partition(": ")
            loc = (*loc, *(p for p in sub.split(".") if p))
        said, _ = found.setdefault(loc, ([], got))
        if msg not in said:
            said.append(msg)
    lines = []
    for loc, (said, got) in found.items():
        if len(said) > 1 and all(m.startswith(_SHOULD) for m in said):
            said = [_SHOULD + " or ".join(m.removeprefix(_SHOULD) for m in said)]
        lines.append(
            f"{_format_loc(prefix, loc)}: {'; or '.join(said)}{f' (got {got})' if got else ''}"
        )
    return "\n".join(lines)


_SHOULD = "Input should be "
# what pydantic puts in an error's key path besides keys: a validator, a union's member
_NOT_A_KEY = re.compile(r"function-.*|[a-z][\w-]*\[.*\]|str|int|float|bool|bytes|none")


def _key_path(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """The keys and indexes of a pydantic error's ``loc``, without its validators and the
    members of a union it names (``tuple[str, ...]``)."""
    return tuple(p for p in loc if not (isinstance(p, str) and _NOT_A_KEY.fullmatch(p)))


# pydantic's words for Python's types, and those of YAML and JSON
_TYPE_WORDS = (
    (
        re.compile(r"a valid dictionary(?: or (?:instance of \w+|object to extract fields from))?"),
        "a mapping of keys to values",
    ),
    (re.compile(r"a valid (?:tuple|list|set|frozenset)\b"), "a list"),
    (re.compile(r"^(?:Tuple|Set|Frozenset|Frozen set) should"), "List should"),
    (re.compile(r"^Dictionary should"), "Mapping should"),
    (re.compile(r"^Input should be None$"), "Input should be null"),
)


def validation_problem(item: ErrorDetails) -> tuple[str, str]:
    """What pydantic's error ``item`` says is wrong, in the words of YAML and JSON rather than
    Python's (a mapping, a list, null), and the value it got as ``described`` ("" when the
    message says it all); a date, a number or true/false where text is expected gets the hint
    to quote it."""
    msg = str(item["msg"]).removeprefix("Value error, ")
    for pattern, words in _TYPE_WORDS:
        msg = pattern.sub(words, msg)
    kind = item["type"]
    if kind == "extra_forbidden":
        return "unknown key", ""
    if kind in {"value_error", "missing"} or "input" not in item:
        return msg, ""
    value = item["input"]
    got = described(value)
    if kind == "string_type" and isinstance(value, int | float | datetime.date):
        got += "; quote it to make it text"
    return msg, got


def described(value: Any, limit: int = 80) -> str:
    """``value``, read from YAML or JSON, as those write it (``null``, ``true``, ``"text"``,
    ``[1, 2]``), saying what it is where the reader might take it for something else: a date,
    binary data, a list, a mapping; at most about ``limit`` characters."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, datetime.datetime):
        return f"the date and time {value.isoformat(sep=' ')}"
    if isinstance(value, datetime.date):
        return f"the date {value.isoformat()}"
    if isinstance(value, bytes | bytearray):
        return f"binary data ({len(value)} bytes)"
    what = ""
    if isinstance(value, Mapping):
        what = "a mapping "
    elif isinstance(value, list | tuple | set | frozenset):
        what, value = "a list ", list(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):  # keys JSON cannot hold, a circular value
        text = repr(value)
    return what + (text if len(text) <= limit else text[: limit - 3] + "...")


def _jsonable(value: Any) -> Any:
    """A value JSON has no form for, as JSON can write it: a config as its mapping, a date or
    binary data in words."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime.date | bytes | bytearray):
        return described(value)
    return repr(value)


class Registry(Generic[T]):
    """Kinds of one component family, each with a config class and a factory."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._kinds: dict[str, tuple[type[ComponentConfig], Callable[[Any], T]]] = {}
        self._loaded = False

    def register(self, config_cls: type[C]) -> Callable[[Callable[[C], T]], Callable[[C], T]]:
        """Decorator: register ``factory(config) -> component`` for ``config_cls``'s kind."""
        kind_field = config_cls.model_fields.get("kind")
        kind = kind_field.default if kind_field is not None else None
        if not isinstance(kind, str):
            raise TypeError(f"{config_cls.__name__} must declare `kind: Literal[...] = '<kind>'`")

        def decorate(factory: Callable[[C], T]) -> Callable[[C], T]:
            self._kinds[kind] = (config_cls, factory)
            return factory

        return decorate

    def register_config(self, config_cls: type[ComponentConfig]) -> None:
        """Register a kind whose config is all there is: it plans its stages itself and
        builds no separate component (``build`` returns the config)."""
        # in such a family the components are the configs themselves
        self.register(config_cls)(cast("Callable[[ComponentConfig], T]", _identity))

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for module in _BUILTIN_MODULES.get(self.family, ()):
            importlib.import_module(module)
        load_plugins()

    def kinds(self) -> list[str]:
        """Registered kind names, sorted."""
        self._load()
        return sorted(self._kinds)

    def config_class(self, kind: str) -> type[ComponentConfig]:
        """The config class registered for ``kind``."""
        self._load()
        return self._kinds[kind][0]

    def factory(self, kind: str) -> Callable[[Any], T]:
        """The factory registered for ``kind`` (for dense stores: the class, with ``load``)."""
        self._load()
        return self._kinds[kind][1]

    def parse(
        self, spec: Mapping[str, Any] | ComponentConfig | str, path: str = ""
    ) -> ComponentConfig:
        """Validate ``spec`` into its kind's config; errors name ``path`` and the bad key."""
        self._load()
        where = path or self.family
        if isinstance(spec, ComponentConfig):
            if spec.kind not in self._kinds:
                raise ConfigError(f"{where}.kind: unknown {self.family} kind {spec.kind!r}")
            return spec
        if isinstance(spec, str):
            spec = {"kind": spec}
        if not isinstance(spec, Mapping):
            raise ConfigError(
                f"{where}: expected a mapping with a 'kind' key, got {described(spec)}"
            )
        kind = spec.get("kind")
        if kind not in self._kinds:
            allowed = ", ".join(self.kinds())
            shown = "missing" if kind is None else f"unknown {self.family} kind {kind!r}"
            raise ConfigError(f"{where}.kind: {shown}; allowed: {allowed}")
        config_cls = self._kinds[kind][0]
        try:
            return config_cls.model_validate(dict(spec))
        except ValidationError as exc:
            raise ConfigError(format_validation_error(where, exc)) from None

    def build(self, spec: Mapping[str, Any] | ComponentConfig | str, path: str = "") -> T:
        """Parse ``spec`` and construct the component."""
        config = self.parse(spec, path)
        return self._kinds[config.kind][1](config)


def _identity(config: ComponentConfig) -> ComponentConfig:
    return config


_REGISTRIES: dict[str, Registry[Any]] = {}
_PLUGINS: set[str] = set()


def components(family: str) -> Registry[Any]:
    """The registry of ``family`` (created on first use)."""
    if family not in _REGISTRIES:
        _REGISTRIES[family] = Registry(family)
    return _REGISTRIES[family]


@cache
def load_plugins() -> None:
    """Import every ``ragbench.components`` entry point (each registers its kinds and axes on
    import), once per process: scanning the installed distributions takes tens of
    milliseconds, and a plugin installed later is seen by the next process."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.value not in _PLUGINS:
            _PLUGINS.add(ep.value)
            ep.load()


# ---------------------------------------------------------------- sweep axes


@dataclass(frozen=True)
class Axis:
    """A family a trial picks one component of: a key under ``sweep:`` and a step of the
    pipeline.

    ``order`` places it in the pipeline; ``default`` is the spec a sweep that does not name the
    axis gets (None: the sweep must name it). A ``step`` axis's configs plan query-time stages
    (see ``ragbench.retrieve.graph``); the others (chunker, embedder) are resources steps ask
    for. An ``on_demand`` axis is in a trial only when a chosen component ``uses`` it. An
    ``optional`` axis at its ``none`` kind is left out of the trial's identity, so adding an
    axis never changes existing trial ids. ``label`` orders the trial label's parts; a
    ``prefix`` marks a part in the label (``rerank:dense``), and such parts are omitted at the
    ``none`` kind.
    """

    name: str
    order: float
    default: Mapping[str, Any] | None = None
    step: bool = True
    on_demand: bool = False
    optional: bool = False
    label: float = 0.0
    prefix: str = ""


_AXES: dict[str, Axis] = {}


def register_axis(axis: Axis) -> Axis:
    """Add (or replace) a sweep axis; its family's kinds register with ``components``."""
    _AXES[axis.name] = axis
    return axis


def axes() -> list[Axis]:
    """Every sweep axis (plugins loaded), in pipeline order."""
    load_plugins()
    return sorted(_AXES.values(), key=lambda a: a.order)


for _axis in (
    Axis("chunker", 0, {"kind": "none"}, step=False, label=1),
    Axis("embedder", 1, {"kind": "sentence-transformers"}, step=False, on_demand=True, label=2),
    Axis("query", 2, {"kind": "none"}, optional=True, label=3, prefix="query:"),
    Axis("retriever", 3, None, label=0),
    Axis("reranker", 4, {"kind": "none"}, label=4, prefix="rerank:"),
    Axis("postprocess", 5, {"kind": "none"}, optional=True, label=5, prefix="post:"),
    Axis("generator", 10, {"kind": "none"}, optional=True, label=10, prefix="gen:"),
):
    register_axis(_axis)


def _nested(family: str) -> Callable[[Any], ComponentConfig]:
    def validate(value: Any) -> ComponentConfig:
        try:
            return components(family).parse(value, path="")
        except ConfigError as exc:
            first = str(exc).splitlines()[0]
            sub, _, msg = first.partition(": ")
            sub = sub.removeprefix(family).lstrip(".")
            raise ValueError(f"@{sub}: {msg}") from None

    validate.family = family  # type: ignore[attr-defined]  # lets sweeps find nested families
    return validate


def component_field(family: str) -> Any:
    """Type of a config field that holds a nested component spec of another family."""
    return Annotated[SerializeAsAny[ComponentConfig], BeforeValidator(_nested(family))]
