"""One registry per component family: ``kind`` string → (pydantic config class, factory).

Configs name components by ``kind``; ``Registry.parse`` validates a spec (a dict from YAML/JSON
or a config object) and turns pydantic errors into a :class:`ConfigError` whose message names the
key path and what is allowed. Built-in kinds are registered by importing the family's modules
lazily; third parties add kinds through the ``ragbench.components`` entry-point group (each entry
point is imported, and registers its kinds on import).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, SerializeAsAny, ValidationError

from ragbench.errors import ConfigError

__all__ = [
    "ComponentConfig",
    "Registry",
    "component_field",
    "format_validation_error",
    "registry",
]

T = TypeVar("T")
C = TypeVar("C", bound="ComponentConfig")

ENTRY_POINT_GROUP = "ragbench.components"

# Modules that register each family's built-in kinds when imported.
_BUILTIN_MODULES: dict[str, tuple[str, ...]] = {
    "chunker": ("ragbench.text.chunkers",),
    "embedder": ("ragbench.index.embedders",),
    "dense": ("ragbench.index.dense",),
    "sparse": ("ragbench.index.sparse",),
    "fusion": ("ragbench.retrieve.fusion",),
    "reranker": ("ragbench.retrieve.rerank",),
    "retriever": ("ragbench.retrieve.retriever",),
}


class ComponentConfig(BaseModel):
    """Base of every component config: frozen, unknown keys rejected, hashable into cache keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str

    def key(self) -> str:
        """Stable hash of the full config (defaults included), for cache keys and trial ids."""
        payload = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def label(self) -> str:
        """Short readable form: kind plus the options that differ from their defaults."""
        parts = []
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if name == "kind" or value == info.get_default(call_default_factory=True):
                continue
            parts.append(f"{name}={_short(value)}")
        return f"{self.kind}({', '.join(parts)})" if parts else self.kind


def _short(value: Any) -> str:
    if isinstance(value, ComponentConfig):
        return value.label()
    if isinstance(value, BaseModel):
        return (
            "("
            + ",".join(f"{k}={v}" for k, v in value.model_dump(exclude_defaults=True).items())
            + ")"
        )
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
    """Render a pydantic error as ``key.path: what is wrong (got value)`` lines."""
    lines = []
    items = error.errors()
    locs = [tuple(i["loc"]) for i in items]
    for item in items:
        own = tuple(item["loc"])
        if any(len(other) > len(own) and other[: len(own)] == own for other in locs):
            continue  # a parent's summary of a child error already reported in detail
        loc = tuple(
            p for p in item["loc"] if not (isinstance(p, str) and p.startswith("function-"))
        )
        msg = str(item["msg"]).removeprefix("Value error, ")
        if msg.startswith("@"):  # a nested component error already carrying its own key path
            sub, _, msg = msg[1:].partition(": ")
            loc = (*loc, *(p for p in sub.split(".") if p))
        got = ""
        if item["type"] not in {"value_error", "missing", "extra_forbidden"} and "input" in item:
            got = f" (got {item['input']!r})"
        if item["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{_format_loc(prefix, loc)}: {msg}{got}")
    return "\n".join(lines)


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

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for module in _BUILTIN_MODULES.get(self.family, ()):
            importlib.import_module(module)
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            ep.load()

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
                f"{where}: expected a mapping with a 'kind' key, got {type(spec).__name__}"
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


_REGISTRIES: dict[str, Registry[Any]] = {}


def registry(family: str) -> Registry[Any]:
    """The registry of ``family`` (created on first use)."""
    if family not in _REGISTRIES:
        _REGISTRIES[family] = Registry(family)
    return _REGISTRIES[family]


def _nested(family: str) -> Callable[[Any], ComponentConfig]:
    def validate(value: Any) -> ComponentConfig:
        try:
            return registry(family).parse(value, path="")
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
