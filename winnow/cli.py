"""The `winnow` command line: a thin shell over the library.

Each subpackage contributes its commands through a light `commands` module exposing
`COMMANDS = {name: (help, add_arguments, run)}`; heavy imports happen inside `run`.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

COMMAND_MODULES = (
    "winnow.data.commands",
    "winnow.data.label_commands",
    "winnow.training.commands",
    "winnow.serving.commands",
    "winnow.serving.proxy_cli",
    "winnow.runtime.commands",
    "winnow.batch.commands",
    "winnow.batch.cib.commands",
)


class CommandError(Exception):
    """A bad option value or input file: one line `winnow COMMAND: message`, exit 1."""


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line and exit 1, as every other bad value (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{self.prog}: {message} (see {self.prog} --help)")


def _number(text: str, kind: type, low: float, inclusive: bool, what: str) -> Any:
    try:
        value = kind(text)
        ok = math.isfinite(value) and (value >= low if inclusive else value > low)
    except (ValueError, OverflowError):  # not a number, or an int past float's range
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type: a whole number > 0."""
    return _number(text, int, 0, False, "a whole number > 0")


def non_negative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _number(text, int, 0, True, "a whole number >= 0")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _number(text, float, 0.0, False, "a number > 0")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _number(text, float, 0.0, True, "a number >= 0")


def port(text: str) -> int:
    """argparse type: a TCP port, 0 (any free one) to 65535."""
    value = _number(text, int, 0, True, "a port 0..65535")
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port 0..65535, got {text!r}")
    return value


def check_inputs(paths: Iterable[str | Path]) -> None:
    """CommandError naming the first input file or folder that does not exist."""
    for p in paths:
        if not Path(p).expanduser().exists():
            raise CommandError(f"{p}: no such file or folder")


def check_output(path: str | Path, folder: bool = False) -> None:
    """CommandError when `path` cannot be written: a folder where a file goes (or the other
    way round), a file's folder missing, or a file where a folder must be (a folder's missing
    parents are made when it is written)."""
    p = Path(path).expanduser()
    if p.exists() and p.is_dir() != folder:
        raise CommandError(f"{path}: is a {'file' if folder else 'folder'}")
    if not folder and not p.parent.is_dir():
        raise CommandError(f"{path}: no folder {p.parent}")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise CommandError(f"{path}: {parent} is a file, not a folder")


def build_parser() -> argparse.ArgumentParser:
    from winnow import __version__

    parser = _Parser(prog="winnow", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"winnow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for modname in COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name == modname:
                continue
            raise
        for name, (help_, add_arguments, run) in mod.COMMANDS.items():
            p = sub.add_parser(name, help=help_, description=help_)
            add_arguments(p)
            p.set_defaults(_run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except CommandError as e:
        print(e, file=sys.stderr)
        return 1
    if not getattr(args, "_run", None):
        parser.print_help()
        return 1
    try:
        return int(args._run(args) or 0)
    except CommandError as e:
        print(f"winnow {args.command}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        print(f"winnow {args.command}: {e.strerror or e}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
