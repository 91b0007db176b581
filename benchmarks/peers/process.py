"""Run a command in a subprocess and measure it: wall time and the peak resident memory of its
whole process tree (the command and every descendant), sampled from ``/proc``.

Sampling every ``interval`` seconds can miss a peak shorter than that; the largest single
process's high-water mark (``ru_maxrss`` of the waited children) is recorded beside it as a
lower bound that misses nothing.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Measured:
    """What one command cost."""

    returncode: int
    wall_s: float
    peak_tree_mb: float  # largest sampled sum of the tree's resident sets
    peak_process_mb: float  # largest single process's resident high-water mark
    log: Path


def _children() -> dict[int, list[int]]:
    """Parent pid → child pids, for every process visible in ``/proc``."""
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def tree_rss_mb(root: int) -> float:
    """Resident memory of ``root`` and all its descendants now, in MB."""
    tree, todo, total = _children(), [root], 0
    while todo:
        pid = todo.pop()
        total += _rss_bytes(pid)
        todo.extend(tree.get(pid, ()))
    return total / 2**20


def measure(
    command: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    interval: float = 0.25,
) -> Measured:
    """Run ``command`` (its output to ``log``), sampling its tree's memory until it exits."""
    log.parent.mkdir(parents=True, exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak = 0.0
    with open(log, "w", encoding="utf-8") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env or os.environ),
            cwd=cwd,
        )
        while proc.poll() is None:
            peak = max(peak, tree_rss_mb(proc.pid))
            time.sleep(interval)
        wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB on Linux
    single = after / 1024 if after > before else float("nan")
    return Measured(
        proc.returncode, wall, max(peak, single if single == single else 0.0), single, log
    )
