"""Commands as data: each command declares its arguments as ``Arg`` specs and one builder turns
the declarations into argparse parsers, so a command module holds what it parses, not how.

An argument that names a path declares its kind (``PathKind``); each value is checked — an input
exists and is a file or a folder, an output folder is one or can be made and is writable — and
so is any value with a ``check``, after parsing and before the command's handler runs, so a bad
path is one line naming its flag rather than a traceback half-way through the work."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ragbench.errors import ConfigError, DataError, path_problem, writable_folder

Handler = Callable[[argparse.Namespace], int]

PathKind = Literal["input file", "input folder", "input path", "output folder", "output file"]
"""What a path argument names: an existing file, an existing folder, an existing file or folder,
a folder to write into (it exists, or its nearest existing parent is a folder; writable either
way), or a file to write (no folder; its folder is one to write into)."""

_INPUT = {"input file": "file", "input folder": "folder", "input path": "file or folder"}


class Arg:
    """One argument: the flags and keywords of ``ArgumentParser.add_argument``, and what its
    values must be before the command runs.

    ``path``: the kind of path it names. ``names``: a value that names no existing file and
    does not look like a path (no ``/``, not starting with ``.`` or ``~``; a URL is no path) is
    a name the command resolves itself (a dataset name, a URL), not checked as a path.
    ``check``: a function of the flag (``""`` for a positional argument) and one value that
    raises a ``ConfigError`` when the value cannot be used."""

    __slots__ = ("check", "flags", "names", "options", "path")

    def __init__(
        self,
        *flags: str,
        path: PathKind | None = None,
        names: bool = False,
        check: Callable[[str, Any], None] | None = None,
        **options: Any,
    ) -> None:
        self.flags = flags
        self.options = options
        self.path = path
        self.names = names
        self.check = check

    @property
    def flag(self) -> str:
        """The flag that names the argument in messages; ``""`` for a positional one (its
        value, a path, names it)."""
        return self.flags[0] if self.flags[0].startswith("-") else ""

    def validate(self, value: Any) -> None:
        """Check each given value (a list holds several) against the declaration."""
        for one in value if isinstance(value, list) else [value]:
            if one is None:
                continue
            if self.path is not None and not (self.names and _a_name(str(one))):
                check_path(self.path, self.flag, str(one))
            if self.check is not None:
                self.check(self.flag, one)


def _a_name(value: str) -> bool:
    """Whether ``value`` is a name rather than a path: no such file, no path's look, and
    nothing that stops a path from being looked at (``path_problem``: a name too long)."""
    if "://" in value:
        return True
    looks = "/" in value or os.sep in value or value.startswith((".", "~"))
    return not looks and not os.path.lexists(value) and path_problem(value) is None


def check_path(kind: PathKind, flag: str, value: str) -> None:
    """``DataError`` (an input) or ``ConfigError`` (an output) naming ``flag`` and the path
    unless ``value`` is a path of ``kind`` that can be looked at (no symbolic link loop, no
    dangling link, no name too long: ``path_problem``). Creates nothing."""
    path = Path(value).expanduser()
    where = f"{flag} {value}" if flag else value
    problem = path_problem(path)
    if problem is not None:
        raise (ConfigError if kind.startswith("output") else DataError)(f"{where}: {problem}")
    if kind == "output folder":
        writable_folder(path, flag or "folder")
    elif kind == "output file":
        if path.is_dir():
            raise ConfigError(f"{where}: is a folder, expected a file to write")
        writable_folder(path.parent, flag or "folder")
    elif not path.exists():
        raise DataError(f"{where}: no such {_INPUT[kind]}")
    elif kind == "input file" and path.is_dir():
        raise DataError(f"{where}: is a folder, expected a file")
    elif kind == "input folder" and not path.is_dir():
        raise DataError(f"{where}: is a file, expected a folder")


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
) -> list[tuple[str, Arg]]:
    """Declare ``args`` on ``parser``, in order (the order of ``--help``); returns each
    argument with the attribute its value is parsed into."""
    declared = []
    for arg in args:
        if isinstance(arg, Group):
            declared += add_arguments(parser.add_argument_group(arg.title), arg.args)
        else:
            declared.append((parser.add_argument(*arg.flags, **arg.options).dest, arg))
    return declared


def checked(run: Handler, declared: Sequence[tuple[str, Arg]]) -> Handler:
    """``run``, after every declared argument's values are checked (``Arg.validate``)."""

    def handler(args: argparse.Namespace) -> int:
        for dest, arg in declared:
            arg.validate(getattr(args, dest, None))
        return run(args)

    return handler


def add_commands(
    parent: argparse.ArgumentParser,
    commands: Sequence[Command],
    dest: str | None,
    inherited: Sequence[tuple[str, Arg]] = (),
    handler: Handler | None = None,
) -> None:
    """Add ``commands`` as the required subcommands of ``parent`` (their name stored in
    ``dest``), each with its arguments, handler (else ``handler``, its parent's) and own
    subcommands; a handler runs once the arguments of its command and of the commands above
    it (``inherited``) are checked."""
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
        declared = [*inherited, *add_arguments(parser, command.args)]
        run = command.run or handler
        if command.commands:
            add_commands(parser, command.commands, command.dest, declared, run)
        if run is not None:
            parser.set_defaults(func=checked(run, declared))
