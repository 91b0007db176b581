"""``ragbench run`` with its embedding timed: the ragbench side of the AutoRAG comparison.

``python -m benchmarks.peers.timed_ragbench [--profile FILE] TIMINGS -- RUN-ARGS...`` runs
``ragbench run RUN-ARGS`` in this process, exactly as the command line does, and records the
seconds spent inside the model's encode loop (torch: the embedder's batched
``SentenceTransformer.encode`` calls; ONNX: ``OnnxEncoder.encode``) — the same boundary the
AutoRAG driver times — to TIMINGS as JSON. ``--profile`` also writes cProfile statistics.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import json  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from typing import Any  # noqa: E402


class EncodeTimer:
    """Seconds and texts inside the wrapped encode methods."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.texts = 0
        self.calls = 0

    def wrap(self, cls: type, name: str, texts_at: int) -> None:
        """Time ``cls.name``; its ``texts_at``-th positional argument holds the texts."""
        original: Callable[..., Any] = getattr(cls, name)
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timer.seconds += time.perf_counter() - started
                timer.texts += len(args[texts_at]) if len(args) > texts_at else 0
                timer.calls += 1

        setattr(cls, name, timed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers.timed_ragbench")
    parser.add_argument("timings")
    parser.add_argument("--profile", default=None)
    parser.add_argument("run", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    from ragbench.cli import main as ragbench_main
    from ragbench.index.embedders import SentenceTransformerEmbedder
    from ragbench.index.onnx import OnnxEncoder

    timer = EncodeTimer()
    timer.wrap(SentenceTransformerEmbedder, "_encode", 2)  # (self, model, texts, ...)
    timer.wrap(OnnxEncoder, "encode", 1)  # (self, texts, ...)
    run = [a for a in args.run if a != "--"]
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    code = ragbench_main(["run", *run])
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    found = {
        "embed_s": timer.seconds,
        "embedded_texts": timer.texts,
        "encode_calls": timer.calls,
        "inside_s": time.perf_counter() - STARTED,
        "returncode": code,
    }
    with open(args.timings, "w", encoding="utf-8") as f:
        json.dump(found, f)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
