"""The latency pass: how long one query takes, measured apart from the quality pass.

Quality is computed over every query as fast as the stages allow; latency is measured on a fixed
sample of queries, one query at a time through the trial's query-time stages (its indexes
loaded, nothing cached), after a warm-up, ``repeats`` times — each query's time per stage is the
**minimum over the repeats**, the time it takes when nothing else gets in the way.

Every thread pool a model can run on has a fixed size during the pass (``threads``; with 1, the
work is on the measuring thread), whether the model was loaded before the pass or by its
warm-up — the first trial of a process that uses a model loads it there: torch's intra-op
threads (process-wide, for the ops after the call, so they are fixed before the pass and again
after the warm-up) and its inter-op threads (settable once per process, before any inter-op
work: fixed at the first pass and left so; eager models do not use them), ONNX Runtime's
sessions (a session keeps the threads it was created with: inside the pass the ONNX encoder
runs a session of ``threads`` threads, ``ragbench.index.onnx.pinned_threads``), and the BLAS and
OpenMP libraries' pools (threadpoolctl, when it is installed; without it they keep their
default, which only environment variables read when the library loads could change — before
numpy's import, long before a pass). What the pass ran with is recorded per trial
(``LatencyReport.threads``, e.g. ``torch=1, torch-interop=1, onnxruntime=1, blas=1, openmp=1``:
the backends loaded by the end of the pass). The quality pass keeps every core: its vectors are
those of an unpinned run.

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
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ragbench.index import onnx as onnx_backend
from ragbench.retrieve.execution import Execution
from ragbench.retrieve.graph import Env, Plan, Stage
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

FORMAT = 5
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
    threads: str
    """The thread pools the pass ran with, ``torch=1, onnxruntime=1, blas=1, ...``."""
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


class _Pinned:
    """The thread pools of the loaded backends fixed to ``threads`` (None: left as they are);
    ``pin`` fixes those loaded since its last call, ``restore`` gives back their counts (torch's
    inter-op threads excepted: torch cannot change them again)."""

    def __init__(self, threads: int | None) -> None:
        self.threads = threads
        self._torch: int | None = None  # torch's intra-op threads before the pass
        self._limits: list[Any] = []  # threadpoolctl's limiters, each restored in turn

    def pin(self) -> None:
        """Fix torch's threads (once it is loaded) and the loaded BLAS and OpenMP pools."""
        if self.threads is None:
            return
        torch = sys.modules.get("torch")
        if torch is not None and self._torch is None:
            self._torch = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            if torch.get_num_interop_threads() != self.threads:
                with suppress(RuntimeError):  # inter-op work started, or set once already
                    torch.set_num_interop_threads(self.threads)
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return
        self._limits.append(threadpool_limits(limits=self.threads))

    def record(self) -> str:
        """What the loaded backends run with now, ``torch=1, torch-interop=1, blas=1, ...``."""
        found = []
        torch = sys.modules.get("torch")
        if torch is not None:
            found.append(f"torch={torch.get_num_threads()}")
            found.append(f"torch-interop={torch.get_num_interop_threads()}")
        if "onnxruntime" in sys.modules:
            found.append(f"onnxruntime={onnx_backend.intra_op_threads()}")
        try:
            from threadpoolctl import threadpool_info
        except ImportError:
            return ", ".join([*found, "blas=default (no threadpoolctl)"])
        pools: dict[str, int] = {}
        for pool in threadpool_info():
            api = str(pool["user_api"])
            pools[api] = max(pools.get(api, 0), int(pool["num_threads"]))
        return ", ".join(found + [f"{api}={n}" for api, n in sorted(pools.items())])

    def restore(self) -> None:
        """The pools' counts from before the first ``pin``."""
        for limits in reversed(self._limits):
            limits.restore_original_limits()
        torch = sys.modules.get("torch")
        if torch is not None and self._torch is not None:
            torch.set_num_threads(self._torch)


@contextmanager
def _pinned(threads: int | None) -> Iterator[_Pinned]:
    """Every backend's threads fixed to ``threads`` for the block: those loaded now, ONNX
    Runtime's sessions, and — by calling ``pin`` again — those loaded in the block."""
    pinned = _Pinned(threads)
    with onnx_backend.pinned_threads(threads) if threads is not None else nullcontext():
        try:
            pinned.pin()
            yield pinned
        finally:
            pinned.restore()


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
    tally = _Tally()
    with _pinned(threads) as pinned:
        first = next((i for i, k in enumerate(known) if len(k) < len(timed)), None)
        if first is not None:
            _one(plan, env, inputs[first], queries[first])  # loads models and warms caches
            pinned.pin()  # what loading the models brought in
        start, started = cpu_times(), time.perf_counter()
        for _ in range(repeats):
            for i, text in enumerate(queries):
                if len(known[i]) == len(timed):
                    continue
                execution, seconds = _kept_run(plan, env, inputs[i], text, retries, tally)
                for name in timed.keys() - known[i].keys():
                    value = (float(seconds[name][0]), execution.cpu.get(name, 0.0))
                    best[i][name] = min(best[i].get(name, value), value)
                last[i] = execution
        contention = other_cpu_share(start, cpu_times(), time.perf_counter() - started)
        used = pinned.record()
    _share(shared, timed, query_ids, best, last, known)
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
        interrupted=tally.interrupted / tally.runs if tally.runs else 0.0,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine(),
        waited=tally.wait / tally.wall if tally.wall > 0 else 0.0,
    )


@dataclass
class _Tally:
    """A pass's runs so far: all, those another thread interrupted, and the wall seconds of
    the runs kept and the part of them spent waiting for a CPU."""

    runs: int = 0
    interrupted: int = 0
    wall: float = 0.0
    wait: float = 0.0


def _kept_run(
    plan: Plan, env: Env, provided: Mapping[str, Any], text: str, retries: int, tally: _Tally
) -> tuple[Execution, dict[str, np.ndarray]]:
    """One query run again while another thread interrupts it, up to ``retries`` more times:
    the run kept and its stages' seconds less their waits for a CPU, counted in ``tally``."""
    for attempt in range(retries + 1):
        switches, queued = _preempted(), cpu_wait()
        began = time.perf_counter()
        execution = _one(plan, env, provided, text)
        wall = time.perf_counter() - began
        wait = min(wall, cpu_wait() - queued)
        seconds = execution.stage_latency(less_waits=True)
        tally.runs += 1
        clean = _preempted() == switches
        tally.interrupted += 0 if clean else 1
        if clean or attempt == retries:
            break
    tally.wall, tally.wait = tally.wall + wall, tally.wait + wait
    return execution, seconds


def _share(
    shared: Shared,
    timed: Mapping[str, Stage],
    query_ids: Sequence[str],
    best: list[dict[str, tuple[float, float]]],
    last: list[Execution | None],
    known: list[dict[str, Measured]],
) -> None:
    """Add the stages measured on each query to ``shared`` (with the value of the query's last
    kept run) and the reused ones to ``best``."""
    for i, qid in enumerate(query_ids):
        ran = last[i]
        if ran is not None:
            for name, (fastest, cpu) in best[i].items():
                shared[(timed[name].key, qid)] = Measured(fastest, cpu, ran[name])
        best[i] |= {n: (m.seconds, m.cpu) for n, m in known[i].items()}


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
