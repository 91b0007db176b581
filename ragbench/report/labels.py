"""Trial labels for people: what differs between the trials of a run, and what they share said
once.

A sweep's labels repeat whatever its trials have in common (``dense | recursive(size=500) |
all-MiniLM-L6-v2(max_seq_length=256, ...)`` fourteen times over). ``trial_labels`` takes the
part of each axis of a trial (its component's label, ``Trial.label`` of that axis alone) and
leaves out of every label the part of an axis that is the same in every trial using the axis,
unless that would make two trials' labels alike; those parts are said once
(``TrialLabels.shared``). A run directory without recorded configs, or with a kind this process
does not know, falls back to the ``" | "`` parts every label shares. The full label stays the
trial's name everywhere else (``Report.label``, matching ``--baseline``, the config section).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from ragbench.errors import ConfigError
from ragbench.experiment.config import Trial, trial_of
from ragbench.registry import ComponentConfig

__all__ = ["Shared", "TrialLabels", "trial_labels"]


@dataclass(frozen=True)
class Shared:
    """A part left out of the labels: ``part`` (a component's label) on ``axis`` (empty when
    only the labels' text is known), the same in the ``using`` trials of ``of`` that have it."""

    axis: str
    part: str
    using: int
    of: int

    def text(self, code: Callable[[str], str] = str) -> str:
        """``embedder all-MiniLM-L6-v2 (in every trial that has one: 6 of 14)``, without the
        count when every trial has it; ``code`` formats the part (a Markdown code span)."""
        name = f"{self.axis} {code(self.part)}" if self.axis else code(self.part)
        if self.using == self.of:
            return name
        return f"{name} (in every trial that has one: {self.using} of {self.of})"


@dataclass(frozen=True)
class TrialLabels:
    """Per trial id the label without the shared parts (``short``), the whole label
    (``full``), and the parts said once (``shared``)."""

    short: Mapping[str, str]
    full: Mapping[str, str]
    shared: tuple[Shared, ...] = ()

    def __call__(self, trial_id: str) -> str:
        return self.short.get(trial_id, self.full.get(trial_id, trial_id))


def trial_labels(trials: pd.DataFrame) -> TrialLabels:
    """The labels of ``trials`` (columns ``trial_id``, ``label`` and, when recorded,
    ``config``: each trial's effective config as JSON) without what every trial shares."""
    pairs = zip(trials["trial_id"], trials["label"], strict=True)
    full = {str(t): str(label) for t, label in pairs}
    if len(full) < 2:
        return TrialLabels(dict(full), full)
    parts = _axis_parts(trials)
    if parts is None:
        return _by_text(full)
    configs, texts = parts
    dropped: set[str] = set()
    shared = []
    for axis in dict.fromkeys(a for found in texts.values() for a in found):
        values = {found[axis] for found in texts.values() if axis in found}
        if len(values) != 1:
            continue
        short = _shorten(configs, dropped | {axis})
        if len(set(short.values())) < len(short):  # two trials would read alike
            continue
        dropped.add(axis)
        using = sum(axis in found for found in texts.values())
        shared.append(Shared(axis, values.pop(), using, len(full)))
    return TrialLabels(_shorten(configs, dropped), full, tuple(shared))


def _axis_parts(
    trials: pd.DataFrame,
) -> tuple[dict[str, Mapping[str, ComponentConfig]], dict[str, dict[str, str]]] | None:
    """Per trial id its components by axis and each axis's label part; None when a trial has
    no recorded config or one this process cannot read."""
    if "config" not in trials.columns:
        return None
    configs: dict[str, Mapping[str, ComponentConfig]] = {}
    texts: dict[str, dict[str, str]] = {}
    for trial_id, config in zip(trials["trial_id"], trials["config"], strict=True):
        if not isinstance(config, str):
            return None
        try:
            trial = trial_of(json.loads(config))
        except (ConfigError, ValueError):  # a kind not installed here, a damaged record
            return None
        configs[str(trial_id)] = trial.configs
        found = {axis: Trial({axis: c}).label for axis, c in trial.configs.items()}
        texts[str(trial_id)] = {axis: text for axis, text in found.items() if text}
    return configs, texts


def _shorten(
    configs: Mapping[str, Mapping[str, ComponentConfig]], dropped: set[str]
) -> dict[str, str]:
    """Each trial's label without the parts of the ``dropped`` axes (never empty: a trial
    left with no part keeps its whole label)."""
    out = {}
    for trial_id, by_axis in configs.items():
        kept = Trial({a: c for a, c in by_axis.items() if a not in dropped}).label
        out[trial_id] = kept or Trial(by_axis).label
    return out


def _by_text(full: Mapping[str, str]) -> TrialLabels:
    """Labels without the ``" | "`` parts every one of them has."""
    split = {t: label.split(" | ") for t, label in full.items()}
    common = set.intersection(*(set(p) for p in split.values()))
    short = {
        t: " | ".join(p for p in parts if p not in common) or full[t] for t, parts in split.items()
    }
    if len(set(short.values())) < len(short):
        return TrialLabels(dict(full), full)
    first = next(iter(split.values()))
    shared = tuple(Shared("", p, len(full), len(full)) for p in first if p in common)
    return TrialLabels(short, full, shared)
