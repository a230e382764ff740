"""The old spellings of commands, kept for one release: each is rewritten to the new grammar with a notice on
stderr, so scripts written against them go on working while their authors learn the new one.

    smartio sqlite ...                     ->  smartio bench sqlite ...
    smartio launch run ...                 ->  smartio bench launch ...
    smartio launch replay TRACE ...        ->  smartio bench launch --replay TRACE ...
    smartio compare --experiment X ...     ->  smartio compare X ...
    smartio compare --resume DIR ...       ->  smartio compare resume DIR ...
    smartio compare ... (no experiment)    ->  smartio compare slowdown ...
"""

from __future__ import annotations

import sys

COMPARE_ACTIONS = ("analyze", "resume")


def _notice(old: str, new: str) -> None:
    print(f"smartio: `{old}` is now `{new}`; the old spelling goes in the next release", file=sys.stderr)


def _take(argv: list[str], *spellings: str) -> tuple[list[str], str | None]:
    """argv without `FLAG VALUE` (or `FLAG=VALUE`) for any of the flag's spellings (its abbreviations, which argparse
    took before), and the value (None if absent)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in spellings:
            if eq:
                return argv[:i] + argv[i + 1:], value
            if i + 1 < len(argv):
                return argv[:i] + argv[i + 2:], argv[i + 1]
    return argv, None


def _abbreviations(flag: str, shortest: int) -> tuple[str, ...]:
    return tuple(flag[:n] for n in range(shortest, len(flag) + 1))


EXPERIMENT = _abbreviations("--experiment", 3)     # `--e`: no other option of the old `compare` began so
RESUME = _abbreviations("--resume", 5)             # `--res`: `--re` was also --repeats and --replay-repeats
# The old `launch replay` options that take a value: TRACE is the first argument that is neither one of them, nor
# their value, nor a flag.
REPLAY_VALUED = ("--target", "--background", "--repeats", "--background-size", "--background-warmup", "--json",
                 "--db")
# The old `compare --resume DIR` took these and ignored them (the run's own are used); `compare resume` has none.
RESUME_IGNORED = ("--profile", "--nr-requests", "--time-scale")


def _replay_trace(args: list[str]) -> int | None:
    """The index of the old `launch replay`'s TRACE in its arguments, or None."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return None
        if arg in REPLAY_VALUED:
            i += 2
            continue
        if not arg.startswith("-"):
            return i
        i += 1
    return None


def rewrite(argv: list[str], experiments: tuple[str, ...]) -> list[str]:
    """argv in the new grammar; `experiments` are the names `smartio compare` takes."""
    if not argv:
        return argv
    command, rest = argv[0], argv[1:]
    if command == "sqlite":
        _notice("smartio sqlite", "smartio bench sqlite")
        return ["bench", "sqlite", *rest]
    if command == "launch" and rest[:1] == ["run"]:
        _notice("smartio launch run", "smartio bench launch")
        return ["bench", "launch", *rest[1:]]
    if command == "launch" and rest[:1] == ["replay"]:
        _notice("smartio launch replay TRACE", "smartio bench launch --replay TRACE")
        args = rest[1:]
        i = _replay_trace(args)
        if i is None:
            return ["bench", "launch", *args]      # refused there: neither a trace nor a command
        return ["bench", "launch", "--replay", args[i], *args[:i], *args[i + 1:]]
    if command != "compare" or rest[:1] and rest[0] in (*experiments, *COMPARE_ACTIONS, "-h", "--help"):
        return argv
    rest, resume = _take(rest, *RESUME)
    rest, experiment = _take(rest, *EXPERIMENT)
    if resume is not None:
        _notice("smartio compare --resume DIR", "smartio compare resume DIR")
        if experiment not in (None, "launch"):
            return ["compare", experiment, "--resume", resume, *rest]   # refused there, naming --resume
        for flag in RESUME_IGNORED:
            rest, value = _take(rest, flag)
            if value is not None:
                print(f"smartio: `{flag} {value}` ignored: a resumed run keeps its own", file=sys.stderr)
        return ["compare", "resume", resume, *rest]
    if experiment is not None:
        _notice(f"smartio compare --experiment {experiment}", f"smartio compare {experiment}")
        return ["compare", experiment, *rest]
    _notice("smartio compare (no experiment)", "smartio compare slowdown")
    return ["compare", "slowdown", *rest]
