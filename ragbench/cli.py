"""The ``ragbench`` command: parses arguments, calls library functions, prints results.

Exit codes: 0 success, 1 failure during work, 2 bad usage or invalid config/input (a message,
no traceback).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ragbench.errors import ConfigError, DataError, RagbenchError

__all__ = ["main"]

Command = Callable[[argparse.Namespace], int]


def _json_arg(flag: str, value: str) -> dict:
    try:
        spec = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(spec, dict):
        raise ConfigError(f"{flag}: expected a JSON object like '{{\"kind\": ...}}'")
    return spec


def _cmd_chunk(args: argparse.Namespace) -> int:
    from ragbench.text.chunkers import build_chunker, chunk_documents
    from ragbench.text.loaders import load

    chunker = build_chunker(_json_arg("--chunker", args.chunker))
    source = load(Path(args.path))
    started = time.perf_counter()
    docs = list(source)
    chunks = chunk_documents(chunker, docs)
    elapsed = time.perf_counter() - started
    out = sys.stdout
    if args.format == "jsonl":
        for c in chunks:
            row = {
                "doc_id": c.doc_id,
                "id": c.id,
                "index": c.index,
                "start": c.start,
                "end": c.end,
                "text": c.text,
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif args.format == "table":
        out.write(f"{'id':<48} {'start':>8} {'end':>8} {'chars':>6}  text\n")
        for c in chunks:
            preview = c.text[:60].replace("\n", " ")
            out.write(f"{c.id:<48} {c.start:>8} {c.end:>8} {len(c.text):>6}  {preview}\n")
    else:
        sizes = [len(c.text) for c in chunks]
        out.write(f"chunker     {chunker.config.label()}\n")
        out.write(f"documents   {len(docs)}\n")
        out.write(f"chunks      {len(chunks)}\n")
        if sizes:
            out.write(
                f"chunk chars min {min(sizes)} / median {statistics.median(sizes):.0f} / "
                f"mean {statistics.fmean(sizes):.0f} / max {max(sizes)}\n"
            )
        out.write(f"time        {elapsed:.2f} s\n")
    for problem in source.report.problems:
        print(f"skipped {problem.path}: {problem.reason}", file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragbench", description="Evaluate and tune RAG retrieval on your corpus."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    chunk = sub.add_parser("chunk", help="load a file or directory and print its chunks")
    chunk.add_argument("path", help="file or directory to load")
    chunk.add_argument(
        "--chunker",
        default='{"kind": "recursive", "size": 512, "overlap": 64}',
        help='chunker spec as JSON, e.g. \'{"kind":"recursive","size":400,"overlap":50}\'',
    )
    chunk.add_argument("--format", choices=["table", "jsonl", "summary"], default="table")
    chunk.set_defaults(func=_cmd_chunk)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, DataError) as exc:
        print(f"ragbench {args.command}: {exc}", file=sys.stderr)
        return 2
    except RagbenchError as exc:
        print(f"ragbench {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
