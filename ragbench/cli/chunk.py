"""``ragbench chunk``: load a file or folder and print its chunks."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ragbench.cli.common import follow_symlinks, json_arg
from ragbench.cli.spec import Arg, Command
from ragbench.errors import DataError


def _chunk(args: argparse.Namespace) -> int:
    from ragbench.text.chunkers import build_chunker, chunk_documents
    from ragbench.text.loaders import load

    chunker = build_chunker(json_arg("--chunker", args.chunker))
    source = load(Path(args.path), follow_symlinks=args.follow_symlinks)
    started = time.perf_counter()
    docs = list(source)
    if not docs:  # a file skipped, a folder with nothing to read: said, not an empty table
        raise DataError(source.report.nothing_loaded(args.path))
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
    if source.report.problems:
        print(source.report.summary(), file=sys.stderr)
    return 0


CHUNK = Command(
    "chunk",
    help="load a file or directory and print its chunks",
    args=(
        Arg("path", path="input path", help="file or directory to load"),
        Arg(
            "--chunker",
            default='{"kind": "recursive", "size": 512, "overlap": 64}',
            help='chunker spec as JSON, e.g. \'{"kind":"recursive","size":400,"overlap":50}\'',
        ),
        Arg("--format", choices=["table", "jsonl", "summary"], default="table"),
        follow_symlinks("PATH"),
    ),
    run=_chunk,
)
