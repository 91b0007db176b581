"""The latency pass: how long one query takes, measured apart from the quality pass.

Quality is computed over every query as fast as the stages allow; latency is measured on a fixed
sample of queries, one query at a time through the trial's query-time stages (its indexes
loaded, nothing cached), after a warm-up, ``repeats`` times — each query's time per stage is the
**minimum over the repeats**, the time it takes when nothing else gets in the way. Torch and the
BLAS libraries run with a fixed number of threads during the pass (recorded; with 1, the work is
on the measuring thread).

Other processes get in the way by taking the CPU from the measuring thread. Two defences: a
repeat during which the scheduler preempted the thread (an involuntary context switch) is run
again, up to ``retries`` times; and every repeat's time is corrected by the time the thread
spent runnable but waiting for a CPU (``/proc/thread-self/schedstat``, Linux): each stage's time
less the wait during its own computation (``Execution.latency(less_waits=True)``). On a machine
so busy that no repeat runs uninterrupted, the figures are then still those of the work itself
rather than of the queue. The pass records the CPU time of each query, the share of repeats that
were interrupted, the time the correction removed and the share of the machine other processes
used meanwhile (``contention``), so a report can flag figures measured on a busy machine. The
result is cached like any artifact, with the date and machine it was measured on; ``--remeasure-
latency`` measures again.

Trials of a sweep share query-time stages: every dense trial embeds the query with the same
model, every hybrid of a chunking runs the same dense search. A stage is identified by its key
(its config and its inputs' keys), so a measurement made for one trial holds for every trial
that plans the same stage: within a run, each distinct stage is measured once per sampled query
(``Shared``), and the trials after that reuse its figures and its value (the stages after it
read the value, exactly as if it had just been computed).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import resource
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragbench.retrieve.graph import Env, Execution, Plan
from ragbench.retrieve.timed import cpu_wait

__all__ = [
    "CONTENTION",
    "FORMAT",
    "LatencyReport",
    "Measured",
    "Shared",
    "cpu_times",
    "machine",
    "measure",
    "other_cpu_share",
]

FORMAT = 4
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
    """Share of the timed repeats the scheduler interrupted (run again)."""
    measured_at: str
    machine: str
    waited: float = 0.0
    """Share of the kept repeats' wall time spent waiting for a CPU (removed from the figures)."""

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
def _threads(threads: int | None) -> Iterator[int | None]:
    """Torch's intra-op threads and the BLAS libraries' threads fixed to ``threads`` for the
    block (torch when it is loaded); yields torch's thread count (None without torch)."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None and threads is not None:
        torch.set_num_threads(threads)
    try:
        with threadpool_limits(limits=threads):
            yield int(torch.get_num_threads()) if torch is not None else None
    finally:
        if torch is not None and previous is not None:
            torch.set_num_threads(previous)


@dataclass(frozen=True)
class Measured:
    """One query-time stage measured on one query: its fastest repeat's seconds (less its wait
    for a CPU), that repeat's CPU seconds, and the stage's value for the query (what the stages
    after it read)."""

    seconds: float
    cpu: float
    value: Any


Shared = MutableMapping[tuple[str, str], Measured]
"""Measurements by (stage key, query id), shared by the trials of a run: a stage that several
trials plan (the same query embedding, the same BM25 search) is measured once."""


def measure(
    plan: Plan,
    env: Env,
    provided: Mapping[str, Any],
    query_ids: Sequence[str],
    queries: Sequence[str],
    repeats: int = 3,
    threads: int | None = 1,
    retries: int = 3,
    shared: Shared | None = None,
) -> LatencyReport:
    """Time ``plan``'s query-time stages on each query alone (indexes ``provided``), after one
    warm-up query, ``repeats`` times (an interrupted repeat is run again, up to ``retries`` more
    times per query, and every repeat's time is corrected by its wait for a CPU); per query and
    stage the fastest repeat counts. Stages ``shared`` already holds for a query are not run
    again: their measurement and value are reused; those measured here are added to it."""
    shared = {} if shared is None else shared
    timed = {n: s for n, s in plan.stages.items() if s.latency is not None}
    known = [
        {n: shared[(s.key, qid)] for n, s in timed.items() if (s.key, qid) in shared}
        for qid in query_ids
    ]
    inputs = [{**provided, **{n: m.value for n, m in k.items()}} for k in known]
    best: list[dict[str, tuple[float, float]]] = [{} for _ in queries]
    last: list[Execution | None] = [None for _ in queries]
    runs = interrupted = 0
    kept_wall = kept_wait = 0.0
    with _threads(threads) as used:
        if queries and len(known[0]) < len(timed):
            _one(plan, env, inputs[0], queries[0])  # loads models and warms caches
        start, started = cpu_times(), time.perf_counter()
        for _ in range(repeats):
            for i, text in enumerate(queries):
                if len(known[i]) == len(timed):
                    continue
                for attempt in range(retries + 1):
                    switches, queued = _preempted(), cpu_wait()
                    began = time.perf_counter()
                    execution = _one(plan, env, inputs[i], text)
                    wall = time.perf_counter() - began
                    wait = min(wall, cpu_wait() - queued)
                    seconds = execution.stage_latency(less_waits=True)
                    runs += 1
                    clean = _preempted() == switches
                    interrupted += 0 if clean else 1
                    if clean or attempt == retries:
                        kept_wall, kept_wait = kept_wall + wall, kept_wait + wait
                        for name in timed.keys() - known[i].keys():
                            value = (float(seconds[name][0]), execution.cpu.get(name, 0.0))
                            best[i][name] = min(best[i].get(name, value), value)
                        last[i] = execution
                        break
        contention = other_cpu_share(start, cpu_times(), time.perf_counter() - started)
    for i, qid in enumerate(query_ids):
        ran = last[i]
        if ran is not None:
            for name, (fastest, cpu) in best[i].items():
                shared[(timed[name].key, qid)] = Measured(fastest, cpu, ran[name])
        best[i] |= {n: (m.seconds, m.cpu) for n, m in known[i].items()}
    per_stage = {name: np.array([b[name][0] for b in best]) for name in timed}
    stages = {s: v.tolist() for s, v in plan.by_latency_name(per_stage).items()}
    return LatencyReport(
        query_ids=list(query_ids),
        stages=stages,
        total=[float(sum(s for s, _ in b.values())) for b in best],
        cpu=[float(sum(c for _, c in b.values())) for b in best],
        repeats=repeats,
        threads=used,
        contention=contention,
        interrupted=interrupted / runs if runs else 0.0,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine(),
        waited=kept_wait / kept_wall if kept_wall > 0 else 0.0,
    )


def _preempted() -> int:
    """Involuntary context switches of the calling thread so far (Linux; 0 elsewhere)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return resource.getrusage(who).ru_nivcsw if who is not None else 0


def _one(plan: Plan, env: Env, provided: Mapping[str, Any], text: str) -> Execution:
    """The plan run on one query, its timed stages computed (those not ``provided``)."""
    live = dataclasses.replace(env, queries=[text], warm_up=False)
    execution = Execution(plan, live, provided=provided)
    for name, stage in plan.stages.items():
        if stage.latency is not None:
            execution[name]
    return execution
