"""The `winnow` command line: a thin shell over the library.

Each subpackage contributes its commands through a light `commands` module exposing
`COMMANDS = {name: (help, add_arguments, run)}`; heavy imports happen inside `run`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = (
    "winnow.data.commands",
    "winnow.data.label_commands",
    "winnow.training.commands",
    "winnow.serving.commands",
    "winnow.runtime.commands",
    "winnow.batch.commands",
    "winnow.batch.cib.commands",
)


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
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as e:
        print(f"winnow {args.command}: {e.strerror or e}: {e.filename}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
