"""The `smartio` command line: parses arguments and hands them to the library.

Each subcommand group lives in a module of this package with a `register(subparsers)` function
that adds its parser and sets `func`, the function that runs it and returns an exit code.
No measurement, device or VM logic lives here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

# numpy's OpenBLAS would start a spinning thread per core; smartio does no BLAS work.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from smartio import __version__
from smartio.errors import exit_code

# Subcommand groups, in the order `smartio --help` lists them.
COMMAND_MODULES = (
    "smartio.cli.bench",
    "smartio.cli.results",
    "smartio.cli.serve",
    "smartio.cli.testbed",
    "smartio.cli.trace",
    "smartio.cli.flashdev",
    "smartio.cli.compare",
    "smartio.cli.launch",
)


class Parser(argparse.ArgumentParser):
    """The `smartio` parser: the old spellings of commands are rewritten to the new grammar before parsing
    (smartio.cli.aliases), also when a caller (a test, a bench script) parses with it directly."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:     # subcommands' parsers never call it
        from smartio import registry
        from smartio.cli import aliases

        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_args(aliases.rewrite(argv, registry.COMPARE), namespace)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="smartio",
        description="Measure, trace and fix the read latency that writes cause on flash storage.",
        epilog="Exit codes: 0 ok, 1 run failed, 2 bad input, 3 needs root, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"smartio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()     # imports every command's module (numpy among them): half a second
    except KeyboardInterrupt:
        print("smartio: interrupted", file=sys.stderr)
        return 130
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:     # argparse refused the input (exit 2), or printed --help or --version (exit 0)
        return e.code if isinstance(e.code, int) else 2
    return exit_code(lambda: args.func(args), "smartio")


if __name__ == "__main__":
    sys.exit(main())
