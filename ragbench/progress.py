"""What this process is working on, for the one progress display of a long command.

Long work reports itself here — the trial that runs (``doing``), the stage it computes, and
the items of a step that counts them (``counting``: texts embedded, pairs scored) — and a
display that ``listen`` installed shows it (``ragbench run``'s trial bar names the stage
actually running, with the texts done and the time left). Nothing is shown when no one
listens; the libraries' own bars are silenced (``quiet_libraries``), so one display speaks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Activity", "counting", "doing", "listen", "quiet_libraries"]


@dataclass
class Activity:
    """The work under way: what (outermost first: trial, stage, step), and for a counted step
    its items done out of ``total`` since ``started``."""

    what: list[str] = field(default_factory=list)
    done: int = 0
    total: int = 0
    unit: str = ""
    started: float = 0.0
    base: int = 0
    note: str = ""

    def line(self) -> str:
        """One line: ``trial · stage · embedding 1,200/5,000 texts, 2:10 left`` (a step's
        note, such as a training loss, after its count; the time left from the items done
        since the step started, ``base`` being those done before)."""
        text = " · ".join(self.what)
        if self.total:
            text += f" {self.done:,}/{self.total:,} {self.unit}"
            text += f" ({self.note})" if self.note else ""
            elapsed = time.perf_counter() - self.started
            if self.done > self.base and elapsed > 1:
                left = elapsed * (self.total - self.done) / (self.done - self.base)
                text += f", {int(left // 60)}:{int(left % 60):02d} left"
        return text


_lock = threading.Lock()
_now = Activity()
_listener: Callable[[Activity], None] | None = None
_muted = 0  # inside work shown whole: nested work is not reported


def _tell() -> None:
    if _listener is not None:
        _listener(_now)


@contextmanager
def listen(show: Callable[[Activity], None]) -> Iterator[None]:
    """Send every change of the activity to ``show`` in the block (with library bars quiet)."""
    global _listener
    quiet_libraries()
    with _lock:
        previous, _listener = _listener, show
    try:
        yield
    finally:
        with _lock:
            _listener = previous


@contextmanager
def doing(what: str, *, whole: bool = False) -> Iterator[None]:
    """Name a piece of work (a trial, a stage) for the block; nested blocks add to the name,
    unless the work is shown ``whole`` (its many small parts, such as the latency pass's
    repeated stages, unnamed)."""
    global _muted
    if _muted:
        yield
        return
    with _lock:
        _now.what.append(what)
        _muted += whole
        _tell()
    try:
        yield
    finally:
        with _lock:
            _muted -= whole
            if _now.what and _now.what[-1] == what:
                _now.what.pop()
            _now.total = _now.done = _now.base = 0
            _now.note = ""
            _tell()


@contextmanager
def counting(what: str, total: int, unit: str, done: int = 0) -> Iterator[Callable[..., None]]:
    """A step of ``total`` items named ``what`` for the block, ``done`` of them before it
    started (a resumed run); call the yielded function with the items each part finished, and
    optionally a note to show beside the count."""
    if _muted:
        yield lambda items, note="": None
        return
    with doing(what):
        with _lock:
            _now.total, _now.done, _now.base, _now.unit, _now.note = total, done, done, unit, ""
            _now.started = time.perf_counter()
            _tell()

        def advance(items: int, note: str = "") -> None:
            with _lock:
                _now.done = min(_now.total, _now.done + items)
                _now.note = note or _now.note
                _tell()

        yield advance


def quiet_libraries() -> None:
    """Silence the progress bars and weight-loading chatter of the model libraries (Hugging
    Face hub and transformers): through their settings for a later import, directly where
    they are loaded already."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    hub = sys.modules.get("huggingface_hub")
    if hub is not None:
        hub.utils.disable_progress_bars()
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
