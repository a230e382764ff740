"""The `smartio` command line: parses arguments and hands them to the library.

Each subcommand group lives in a module of this package with a `register(subparsers)` function
that adds its parser and sets `func`, the function that runs it and returns an exit code.
No measurement, device or VM logic lives here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

# numpy's OpenBLAS would start a spinning thread per core; smartio does no BLAS work.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from smartio import __version__
from smartio.errors import SmartioError

# Subcommand groups, in the order `smartio --help` lists them.
COMMAND_MODULES = (
    "smartio.cli.bench",
    "smartio.cli.results",
    "smartio.cli.testbed",
    "smartio.cli.trace",
    "smartio.cli.flashdev",
    "smartio.cli.compare",
    "smartio.cli.sqlite",
    "smartio.cli.launch",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
    args = parser.parse_args(argv)
    try:
        rc = int(args.func(args) or 0)
        sys.stdout.flush()      # a closed pipe shows here, not in the interpreter's flush at exit
        return rc
    except SmartioError as e:
        print(f"smartio: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("smartio: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`| head`). Say nothing, as a program killed by SIGPIPE would, and point stdout at
        # /dev/null so the interpreter's last flush of what is still buffered cannot fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):   # stdout is not a file (pytest's capture)
            pass
        return 128 + int(signal.SIGPIPE)


if __name__ == "__main__":
    sys.exit(main())
