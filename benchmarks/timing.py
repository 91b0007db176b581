"""Wall-clock timing shared by the benchmark modules."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def best_time(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """Fastest of ``repeat`` (>= 1) calls of ``fn``, and the last call's result."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result
