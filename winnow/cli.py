"""The `winnow` command line: a thin shell over the library.

Each subpackage contributes its commands through a light `commands` module exposing
`COMMANDS = {name: (help, add_arguments, run)}`; heavy imports happen inside `run`.

Conventions every command keeps: `-o -` writes to standard output (the summary then goes to
standard error), an output file appears only when its job succeeded (`Output`), and a missing
optional dependency is one line naming the extra that installs it.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
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


# Top-level modules of the optional dependencies -> the extra that installs them.
EXTRAS = {
    "pyarrow": "parquet",
    "tokenizers": "transformer",
    "torch": "train",
    "sklearn": "train",
    "datasets": "train",
    "onnx": "train",
    "matplotlib": "train",
    "fastapi": "serve",
    "uvicorn": "serve",
    "ray": "ray",
    "anthropic": "llm",
    "openai": "llm",
}

STDOUT = "-"


class Output:
    """A file a command writes that appears only if the command gets to `commit()`.

        with Output(args.output) as out:
            write_table(table, out.path)     # a temporary file
            out.commit()                     # renamed to args.output, or copied to stdout for '-'

    Leaving the block without `commit()` (an error, nothing to write) leaves nothing behind,
    and an existing file of the same name untouched.
    """

    def __init__(self, destination: str | Path):
        self.destination = str(destination)
        self.to_stdout = self.destination == STDOUT
        dest = Path(self.destination).expanduser()
        if not self.to_stdout and dest.is_dir():  # a rename would put the file inside it
            raise IsADirectoryError(errno.EISDIR, "is a folder; give a file name", str(dest))
        self._dir: str | None = None
        if self.to_stdout or not dest.parent.is_dir():  # a folder to create only on success
            self._dir = tempfile.mkdtemp(prefix="winnow-out-")
            self.path = Path(self._dir) / "output"
        else:  # beside the destination, so that commit is an atomic rename
            self.path = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")

    def __enter__(self) -> Output:
        return self

    def commit(self) -> None:
        if self.to_stdout:
            sys.stdout.flush()
            with open(self.path, "rb") as fh:
                shutil.copyfileobj(fh, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            dest = Path(self.destination).expanduser()
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(self.path, dest)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        else:
            self.path.unlink(missing_ok=True)


# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and
# isolates: printed raw, a transcript's ANSI sequences restyle, move or clear the user's
# terminal, and an override reorders what is shown.
_UNPRINTABLE = {
    c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
} | {c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def printable(text: str) -> str:
    """`text` safe to print on a terminal: its control characters shown as escapes (`\\x1b`),
    never sent as they are. For what people read; files keep the text as it is."""
    return text.translate(_UNPRINTABLE)


def reject_stdout(value: str | None, why: str) -> str | None:
    """The one-line error for `-o -` where the output cannot be a stream, else None."""
    return f"-o - (standard output) is not possible here: {why}" if value == STDOUT else None


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


def share(text: str) -> float:
    """argparse type: a number in (0, 1]."""
    value = _number(text, float, 0.0, False, "a number in (0, 1]")
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


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
    way round), or a file where a folder must be (missing folders are made on success)."""
    if str(path) == STDOUT:
        return
    p = Path(path).expanduser()
    if p.exists() and p.is_dir() != folder:
        raise CommandError(f"{path}: is a {'file' if folder else 'folder'}")
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
    except ModuleNotFoundError as e:
        extra = EXTRAS.get((e.name or "").split(".")[0])
        if extra is None:
            raise
        print(
            f"winnow {args.command}: needs {e.name}, which the base install leaves out: "
            f"pip install 'winnow[{extra}]'",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a path that cannot be read or written: one line, no traceback
        # mkdir of an output's folder where a file of that name is
        why = "is a file, not a folder" if isinstance(e, FileExistsError) else e.strerror or e
        where = f": {e.filename}" if e.filename else ""
        print(f"winnow {args.command}: {why}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
