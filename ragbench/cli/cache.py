"""``ragbench cache``: inspect or clear the cache (stage artifacts, embeddings, LLM calls)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ragbench.cli.spec import Arg, Command
from ragbench.errors import ConfigError

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "": 86400}


def _cache(args: argparse.Namespace) -> int:
    from ragbench.errors import nearest_folder
    from ragbench.index.cache import ArtifactCache

    clearing = args.cache_command == "clear"
    older = _duration(args.older_than) if clearing and args.older_than is not None else None
    if args.root is not None:  # a file is no cache root: said, never shown as "0 entries"
        nearest_folder(args.root, "--root")
        if not Path(args.root).is_dir():  # a mistyped root is no empty cache either
            raise ConfigError(f"--root {args.root}: no such folder, so no cache there")
    cache = ArtifactCache(args.root)  # without --root, RAGBENCH_CACHE (checked the same way)
    if not cache.root.is_dir():
        print(f"cache root: {cache.root}: no cache there yet (the folder does not exist)")
        return 0
    if not clearing:
        print(cache.info())
        return 0
    print(f"removed {cache.clear(older)} entries from {cache.root}")
    return 0


def _duration(text: str) -> float:
    """Seconds in ``--older-than`` (``7d``, ``12h``, ``30m``, ``45s``; a bare number is days)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ConfigError(
            "--older-than: expected a duration such as 7d, 12h, 30m or 45s (a bare number is "
            f"days), got {text!r}"
        )
    return float(match[1]) * _SECONDS[match[2]]


CACHE = Command(
    "cache",
    help="inspect or clear the stage cache",
    args=(Arg("--root", help="cache root (default: RAGBENCH_CACHE or ~/.cache/ragbench)"),),
    run=_cache,
    commands=(
        Command("info", help="entries and sizes per stage"),
        Command(
            "clear",
            help="delete cached artifacts",
            args=(Arg("--older-than", help="only entries unused for this long (e.g. 7d, 12h)"),),
        ),
    ),
    dest="cache_command",
)
