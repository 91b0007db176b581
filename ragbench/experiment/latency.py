"""The latency pass: how long one query takes, measured apart from the quality pass.

Quality is computed over every query as fast as the stages allow; latency is measured on a fixed
sample of queries, one query at a time through the trial's query-time stages (its indexes
loaded, nothing cached), after a warm-up, ``repeats`` times — each query's time per stage is the
**minimum over the repeats**, the time it takes when nothing else gets in the way. A repeat
during which the scheduler took the CPU away from the measuring thread (an involuntary context
switch: another process ran) does not count and is run again, up to ``retries`` times per
query, so a busy machine slows the pass down rather than the figures. Torch runs with a fixed
number of threads during the pass (recorded; with 1, its work is on the measuring thread). The
pass records the CPU time of each query, the share of repeats that were interrupted and the
share of the machine other processes used meanwhile (``contention``), so a report can flag
figures measured on a busy machine. The result is cached like any artifact, with the date and
machine it was measured on; ``--remeasure-latency`` measures again.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import resource
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragbench.retrieve.graph import Env, Execution, Plan

__all__ = [
    "CONTENTION",
    "FORMAT",
    "LatencyReport",
    "cpu_times",
    "machine",
    "measure",
    "other_cpu_share",
]

FORMAT = 2
"""Version of the measurement (part of its cache key): a new way of measuring measures again."""

CONTENTION = 0.2
"""Share of the machine other processes may use before a measurement counts as contended."""


@dataclass(frozen=True)
class LatencyReport:
    """Seconds per sampled query (minimum over repeats) per stage, their sum, CPU seconds per
    query, and how, when and where they were measured."""

    query_ids: list[str]
    stages: dict[str, list[float]]
    total: list[float]
    cpu: list[float]
    repeats: int
    threads: int | None
    contention: float | None
    interrupted: float
    """Share of the timed repeats the scheduler interrupted (run again, not counted)."""
    measured_at: str
    machine: str

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (the cached artifact)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyReport:
        """The report of :meth:`as_dict`."""
        return cls(**data)

    @property
    def contended(self) -> bool:
        """Whether other processes used more than ``CONTENTION`` of the machine meanwhile."""
        return self.contention is not None and self.contention > CONTENTION


def cpu_times() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its waited-for
    children), or None where /proc/stat is missing. Two samples give the share of the machine
    other processes used in between (see ``other_cpu_share``)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields[:8]]
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    own = sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )
    return busy, own


def other_cpu_share(
    start: tuple[float, float] | None, end: tuple[float, float] | None, seconds: float
) -> float | None:
    """Share of all cores' time between two ``cpu_times`` samples used by other processes."""
    if start is None or end is None or seconds <= 0:
        return None
    other = (end[0] - start[0]) - (end[1] - start[1])
    return max(0.0, other / (seconds * (os.cpu_count() or 1)))


def machine() -> str:
    """This machine: host name, CPU model and core count."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} | {model} | {os.cpu_count()} cores"


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[int | None]:
    """Torch's intra-op threads fixed to ``threads`` for the block (when torch is loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield None
        return
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield int(torch.get_num_threads())
    finally:
        torch.set_num_threads(previous)


def measure(
    plan: Plan,
    env: Env,
    provided: Mapping[str, Any],
    query_ids: Sequence[str],
    queries: Sequence[str],
    repeats: int = 3,
    threads: int | None = 1,
    retries: int = 10,
) -> LatencyReport:
    """Time ``plan``'s query-time stages on each query alone (indexes ``provided``), after one
    warm-up query, ``repeats`` uninterrupted times (an interrupted repeat is run again, up to
    ``retries`` more times per query); per query and stage the fastest repeat counts."""
    best: list[dict[str, float]] = [{} for _ in queries]
    cpu = np.full(len(queries), np.inf)
    runs = interrupted = 0
    with _torch_threads(threads) as used:
        if queries:
            _one(plan, env, provided, queries[0])  # loads models and warms caches
        start, started = cpu_times(), time.perf_counter()
        for _ in range(repeats):
            for i, text in enumerate(queries):
                for attempt in range(retries + 1):
                    switches = _preempted()
                    before = time.process_time()
                    seconds = _one(plan, env, provided, text)
                    spent = time.process_time() - before
                    runs += 1
                    clean = _preempted() == switches
                    interrupted += 0 if clean else 1
                    if clean or attempt == retries or not best[i]:
                        cpu[i] = min(cpu[i], spent)
                        for stage, value in seconds.items():
                            best[i][stage] = min(best[i].get(stage, np.inf), value)
                    if clean:
                        break
        contention = other_cpu_share(start, cpu_times(), time.perf_counter() - started)
    stages = {s: [b[s] for b in best] for s in (best[0] if best else {})}
    total = [float(sum(b.values())) for b in best]
    return LatencyReport(
        query_ids=list(query_ids),
        stages=stages,
        total=total,
        cpu=[float(c) for c in cpu],
        repeats=repeats,
        threads=used,
        contention=contention,
        interrupted=interrupted / runs if runs else 0.0,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine(),
    )


def _preempted() -> int:
    """Involuntary context switches of the calling thread so far (Linux; 0 elsewhere)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return resource.getrusage(who).ru_nivcsw if who is not None else 0


def _one(plan: Plan, env: Env, provided: Mapping[str, Any], text: str) -> dict[str, float]:
    """Seconds per timed stage for one query."""
    live = dataclasses.replace(env, queries=[text], warm_up=False)
    latency = Execution(plan, live, provided=provided).latency()
    return {stage: float(seconds[0]) for stage, seconds in latency.items()}
