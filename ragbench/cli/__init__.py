"""The ``ragbench`` command: parses arguments, calls library functions, prints results.

One module per command group declares its commands as data (``cli/spec.py``); options several
commands share are declared once (``cli/common.py``). Command modules import the library inside
their handlers, so ``ragbench --help`` loads no model library.

Exit codes: 0 success, 1 failure during work, 2 bad usage or invalid config/input (a message,
no traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ragbench.cli.cache import CACHE
from ragbench.cli.chunk import CHUNK
from ragbench.cli.collection import COMMANDS as COLLECTION_COMMANDS
from ragbench.cli.datasets import DATASETS
from ragbench.cli.evaluate import EVAL
from ragbench.cli.finetune import FINETUNE
from ragbench.cli.optimize import OPTIMIZE
from ragbench.cli.reports import COMPARE, EXPORT, REPORT
from ragbench.cli.run import RUN
from ragbench.cli.spec import Command, add_commands
from ragbench.errors import ConfigError, DataError, RagbenchError

__all__ = ["main"]

# in the order of ``ragbench --help``
_COMMANDS = (
    CHUNK,
    DATASETS,
    EVAL,
    *COLLECTION_COMMANDS,
    RUN,
    REPORT,
    COMPARE,
    CACHE,
    OPTIMIZE,
    FINETUNE,
    EXPORT,
)


def parser() -> argparse.ArgumentParser:
    """The parser of every command."""
    found = argparse.ArgumentParser(
        prog="ragbench", description="Evaluate and tune RAG retrieval on your corpus."
    )
    add_commands(found, _COMMANDS, "command")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    from ragbench.progress import quiet_libraries

    args = parser().parse_args(argv)
    quiet_libraries()  # one display speaks: ragbench's own
    try:
        return args.func(args)
    except (ConfigError, DataError) as exc:
        print(f"{_command_line(args)}: {exc}", file=sys.stderr)
        return 2
    except RagbenchError as exc:
        print(f"{_command_line(args)}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _command_line(args: argparse.Namespace) -> str:
    """The command ``args`` ran, subcommands included (``ragbench datasets validate``): what
    its messages start with."""
    words, chosen = ["ragbench"], args.command
    commands: Sequence[Command] = _COMMANDS
    while chosen is not None:
        command = next(c for c in commands if c.name == chosen)
        words.append(command.name)
        commands = command.commands
        chosen = getattr(args, command.dest, None) if command.dest else None
    return " ".join(words)
