"""Running a compiled plan: the values of its stages, computed on demand through the stage
cache, each a telemetry span, with per-query latency, LLM usage, counters and traces."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from ragbench import progress, telemetry
from ragbench.index.cache import StageCache
from ragbench.retrieve.artifacts import Queries, QueryUsage
from ragbench.retrieve.graph import SOURCES, Env, Plan, Stage
from ragbench.retrieve.timed import cpu_wait
from ragbench.types import Ranking


def describe(span: telemetry.Span, stage: Stage, value: Any, queries: int) -> None:
    """A stage's sizes on its span — rows of per-query values and vectors, items of chunk
    sets and indexes, the queries a query-time stage ran for — and the LLM tokens it spent."""
    seconds = getattr(value, "seconds", None)
    if seconds is not None:
        span.set(rows=len(seconds))
    elif isinstance(value, np.ndarray):
        span.set(rows=value.shape[0])
    elif hasattr(value, "__len__"):
        span.set(items=len(value))
    if not stage.index:
        span.set(queries=queries)
    usage = getattr(value, "usage", None)
    if isinstance(usage, QueryUsage):
        span.tokens(usage.model, usage.prompt_tokens.sum(), usage.completion_tokens.sum())


class Execution:
    """The values of a plan's stages, computed on demand (inputs only when needed).

    With a ``cache`` every stage goes through it (a cached artifact is loaded, not computed);
    ``provided`` values stand in for stages (a pipeline's live indexes). Each stage computed or
    loaded here is a telemetry span named after it (``ragbench.telemetry``); the one other
    place a stage runs is ``retrieve/live.py``'s ``LiveExecution``, which updates a deployed
    plan's index-time values as documents come and go.
    """

    def __init__(
        self,
        plan: Plan,
        env: Env,
        cache: StageCache | None = None,
        provided: Mapping[str, Any] | None = None,
    ) -> None:
        self.plan, self.env, self.cache = plan, env, cache
        self._values: dict[str, Any] = dict(provided or {})
        self.waited: dict[str, float] = {}
        """Seconds each stage computed here spent runnable but waiting for a CPU (its inputs'
        time excluded): what other processes cost it (``latency(less_waits=True)``)."""
        self.cpu: dict[str, float] = {}
        """CPU seconds of the process while each stage computed here ran (inputs excluded)."""

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name in SOURCES:
            return self.env.source(name)
        stage = self.plan.stages[name]
        computed: list[float] = []

        def compute() -> Any:
            inputs = [self[i] for i in stage.inputs]
            queued, cpu, started = cpu_wait(), time.process_time(), time.perf_counter()
            with progress.doing(name):
                value = stage.compute(self.env, *inputs)
            computed.append(time.perf_counter() - started)  # its own time, inputs excluded
            self.cpu[name] = time.process_time() - cpu
            self.waited[name] = cpu_wait() - queued
            return value

        with telemetry.span(name, key=stage.key, area=stage.area) as span:
            if self.cache is None:
                value = compute()
            else:
                value = self.cache.get(
                    stage.area,
                    stage.key,
                    compute,
                    stage.codec.save,
                    stage.codec.load,
                    lambda: computed[0],
                )
                span.set(cache_hit=not computed)
            if span.recording:
                describe(span, stage, value, len(self.env.queries))
        self._values[name] = value
        return value

    @property
    def output(self) -> Ranking:
        """The plan's final ranking."""
        return self[self.plan.output].ranking

    def latency(self, less_waits: bool = False) -> dict[str, np.ndarray]:
        """Seconds per query of every timed stage, by latency name, in plan order (each such
        stage is loaded or computed; see ``stage_latency``)."""
        return self.plan.by_latency_name(self.stage_latency(less_waits))

    def stage_latency(self, less_waits: bool = False) -> dict[str, np.ndarray]:
        """Seconds per query of every timed stage, by stage name, in plan order (each such
        stage is loaded or computed); a stage that ran once per text of a multi-text query
        counts the sum of its texts. ``less_waits`` takes out of each stage the time it waited
        for a CPU, shared evenly over the queries (exact for the one-query executions of the
        latency pass), but never the CPU time it used."""
        owner = self._owner()
        found = {}
        for name, stage in self.plan.stages.items():
            if stage.latency is None:
                continue
            seconds = np.asarray(self[name].seconds, dtype=np.float64)
            n = len(self.env.queries)
            if owner is not None and len(seconds) == len(owner) != n:
                seconds = np.bincount(owner, weights=seconds, minlength=n).astype(np.float64)
            if less_waits and n:  # never below the CPU time the stage itself used
                floor = np.minimum(seconds, self.cpu.get(name, 0.0) / n)
                seconds = np.maximum(seconds - self.waited.get(name, 0.0) / n, floor)
            found[name] = seconds
        return found

    def _owner(self) -> np.ndarray | None:
        value = self[self.plan.queries]
        return np.asarray(value.owner) if isinstance(value, Queries) else None

    def usage(self) -> dict[str, QueryUsage]:
        """LLM tokens per query of every stage that spent some, by latency name (or stage
        name), in plan order (each such stage is loaded or computed)."""
        found = {}
        for name, stage in self.plan.stages.items():
            if stage.latency is not None:
                value = self[name]
                if getattr(value, "usage", None) is not None:
                    found[stage.latency] = value.usage
        return found

    def counters(self) -> dict[str, np.ndarray]:
        """Per-query counters of the plan's timed stages (``<stage>.<counter>``: rounds and LLM
        calls of an agentic loop, ...)."""
        found = {}
        for name, stage in self.plan.stages.items():
            if stage.latency is not None:
                for counter, values in (getattr(self[name], "counters", None) or {}).items():
                    found[f"{stage.latency}.{counter}"] = np.asarray(values)
        return found

    def traces(self) -> dict[str, list[Any]]:
        """Per-query JSON traces of the plan's timed stages that keep one."""
        found = {}
        for name, stage in self.plan.stages.items():
            if stage.latency is not None:
                traces = getattr(self[name], "traces", None)
                if traces is not None:
                    found[stage.latency] = traces
        return found

    def build_seconds(self) -> float:
        """Build time recorded with the plan's index-time artifacts (cached runs only)."""
        if self.cache is None:
            return 0.0
        cache = self.cache
        return sum(cache.recorded_seconds(s.area, s.key) for s in self.plan.index_stages())
