"""Commands as data: each command declares its arguments as ``Arg`` specs and one builder turns
the declarations into argparse parsers, so a command module holds what it parses, not how."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Handler = Callable[[argparse.Namespace], int]


class Arg:
    """One argument: the flags and keywords of ``ArgumentParser.add_argument``."""

    __slots__ = ("flags", "options")

    def __init__(self, *flags: str, **options: Any) -> None:
        self.flags = flags
        self.options = options


@dataclass(frozen=True)
class Group:
    """Arguments shown under their own title in ``--help`` (an argparse argument group)."""

    title: str
    args: Sequence[Arg]


@dataclass(frozen=True)
class Command:
    """A command: its help, its arguments, and the handler that runs it or its subcommands
    (chosen under ``dest``; a handler given here also serves subcommands without their own)."""

    name: str
    help: str
    args: Sequence[Arg | Group] = ()
    run: Handler | None = None
    description: str | None = None
    raw_description: bool = False  # keep the description's own line breaks
    commands: Sequence[Command] = ()
    dest: str | None = None

    def arguments(self) -> Iterator[Arg]:
        """Every argument of the command, those of its groups included, in order."""
        for arg in self.args:
            yield from arg.args if isinstance(arg, Group) else (arg,)


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, args: Sequence[Arg | Group]
) -> None:
    """Declare ``args`` on ``parser``, in order (the order of ``--help``)."""
    for arg in args:
        if isinstance(arg, Group):
            add_arguments(parser.add_argument_group(arg.title), arg.args)
        else:
            parser.add_argument(*arg.flags, **arg.options)


def add_commands(
    parent: argparse.ArgumentParser, commands: Sequence[Command], dest: str | None
) -> None:
    """Add ``commands`` as the required subcommands of ``parent`` (their name stored in
    ``dest``), each with its arguments, handler and own subcommands."""
    sub = parent.add_subparsers(dest=dest, required=True)
    for command in commands:
        parser = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            formatter_class=(
                argparse.RawDescriptionHelpFormatter
                if command.raw_description
                else argparse.HelpFormatter
            ),
        )
        add_arguments(parser, command.args)
        if command.commands:
            add_commands(parser, command.commands, command.dest)
        if command.run is not None:
            parser.set_defaults(func=command.run)
