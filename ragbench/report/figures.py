"""Which plots a report draws, and their PNGs cached by the content they draw.

A plot is a ``Plot``: a function of ``ragbench.report.plots`` and the data it is called with.
Its PNG is kept in the stage cache (area ``plots``) under a key made of the function's name,
its arguments' content, the source of the drawing code (``plots.py`` and the report modules it
draws with), the retriever kinds' colour slots and matplotlib's version; a plot that does not
apply to a run (``DataError``) is kept as that verdict. A warm rerun of a sweep therefore
writes its report without importing matplotlib or drawing anything. The run-varying columns of
the trials table (``VARYING``: this process's wall time and memory) are never passed to a
plot, so they do not change its key.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd

from ragbench.errors import DataError
from ragbench.index.cache import ArtifactCache, default_cache_root
from ragbench.registry import components

__all__ = ["VARYING", "Plot", "images", "run_cache"]

log = logging.getLogger(__name__)

VARYING = ("seconds", "peak_rss_mb")
"""Columns of the trials table that differ between two runs of the same sweep."""

_AREA = "plots"
_DRAWING = ("ragbench.report.plots", "ragbench.report.tables", "ragbench.report.grids")
_PNG = "plot.png"
_SKIP = "skip.txt"  # the DataError message of a plot that does not apply


@dataclass(frozen=True, eq=False)
class Plot:
    """One figure of a report: ``function`` of ``ragbench.report.plots`` called with ``args``
    and ``kwargs`` (compared by ``key``, never by its frames)."""

    name: str
    function: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def draw(self) -> Any:
        """The matplotlib Figure (``DataError`` when the plot does not apply)."""
        from ragbench.report import plots

        return getattr(plots, self.function)(*self.args, **self.kwargs)

    def key(self) -> str:
        """What the PNG depends on: the function, its arguments' content and the drawing
        code's version."""
        version = [self.function, _drawing(), _colours()]
        digest = hashlib.sha256(json.dumps(version).encode())
        for value in (*self.args, dict(sorted(self.kwargs.items()))):
            _feed(digest, value)
        return digest.hexdigest()[:32]


def images(wanted: Sequence[Plot], store: ArtifactCache) -> dict[str, bytes]:
    """PNG bytes of every plot of ``wanted`` that applies (name → bytes), each drawn once and
    then read from ``store``; an unwritable cache only costs the drawing."""
    out = {}
    for plot in wanted:
        try:
            found = _cached(plot, store)
        except OSError as exc:
            log.info("plot cache unavailable (%s); drawing %s", exc, plot.name)
            found = _render(plot)
        if isinstance(found, bytes):
            out[plot.name] = found
        else:
            log.info("skipping plot %s: %s", plot.name, found)
    return out


def run_cache(recorded: object) -> ArtifactCache:
    """The stage cache a run recorded in its manifest (its plots are kept beside its
    artifacts), or the default one when that folder is not on this machine."""
    if isinstance(recorded, str) and recorded and Path(recorded).is_dir():
        return ArtifactCache(recorded)
    return ArtifactCache(default_cache_root())


def _cached(plot: Plot, store: ArtifactCache) -> bytes | str:
    """The plot's PNG, or why it does not apply, from ``store`` (drawn and kept on a miss)."""

    def build(folder: Path) -> None:
        found = _render(plot)
        if isinstance(found, bytes):
            (folder / _PNG).write_bytes(found)
        else:
            (folder / _SKIP).write_text(found, encoding="utf-8")

    folder, _ = store.get_or_build(_AREA, plot.key(), build)
    png = folder / _PNG
    return png.read_bytes() if png.exists() else (folder / _SKIP).read_text(encoding="utf-8")


def _render(plot: Plot) -> bytes | str:
    """The plot drawn to PNG, or the reason it does not apply."""
    from ragbench.report import plots

    try:
        figure = plot.draw()
    except DataError as exc:
        return str(exc)
    return plots.png(figure)


@cache
def _drawing() -> tuple[str, str]:
    """The digest of the drawing code's sources (``_DRAWING``) and matplotlib's version."""
    digest = hashlib.sha256()
    for module in _DRAWING:
        spec = importlib.util.find_spec(module)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        digest.update(origin.read_bytes() if origin is not None and origin.is_file() else b"")
    return digest.hexdigest(), importlib.metadata.version("matplotlib")


def _colours() -> dict[str, int | None]:
    """The palette slot each registered retriever kind declares (plugins may add kinds)."""
    retrievers = components("retriever")
    return {kind: retrievers.config_class(kind).colour for kind in retrievers.kinds()}


def _feed(digest: Any, value: object) -> None:
    """Add ``value``'s content to ``digest``: a frame by its columns, dtypes and values, any
    other argument by its JSON form."""
    if isinstance(value, pd.DataFrame):
        shape = [list(map(str, value.columns)), list(map(str, value.dtypes))]
        digest.update(json.dumps(shape).encode())
        try:
            digest.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
        except TypeError:  # unhashable cells (lists)
            digest.update(value.to_csv().encode())
    else:
        digest.update(json.dumps(value, sort_keys=True, default=repr).encode())
