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
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import TracebackType

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


def reject_stdout(value: str | None, why: str) -> str | None:
    """The one-line error for `-o -` where the output cannot be a stream, else None."""
    return f"-o - (standard output) is not possible here: {why}" if value == STDOUT else None


def build_parser() -> argparse.ArgumentParser:
    from winnow import __version__

    parser = argparse.ArgumentParser(prog="winnow", description=__doc__.splitlines()[0])
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
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 1
    try:
        return int(args._run(args) or 0)
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
