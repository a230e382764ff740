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


def _take(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """argv without `flag VALUE` (or `flag=VALUE`), and the value (None if absent)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == flag and i + 1 < len(argv):
            return argv[:i] + argv[i + 2:], argv[i + 1]
        if arg.startswith(flag + "="):
            return argv[:i] + argv[i + 1:], arg[len(flag) + 1:]
    return argv, None


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
        trace = [x for x in rest[1:2] if not x.startswith("-")]
        return ["bench", "launch", *(["--replay", *trace] if trace else []), *rest[1 + len(trace):]]
    if command != "compare" or not rest or rest[0] in (*experiments, *COMPARE_ACTIONS, "-h", "--help"):
        return argv
    rest, resume = _take(rest, "--resume")
    rest, experiment = _take(rest, "--experiment")
    if resume is not None:
        _notice("smartio compare --resume DIR", "smartio compare resume DIR")
        if experiment not in (None, "launch"):
            return ["compare", experiment, "--resume", resume, *rest]   # refused there, naming --resume
        return ["compare", "resume", resume, *rest]
    if experiment is not None:
        _notice(f"smartio compare --experiment {experiment}", f"smartio compare {experiment}")
        return ["compare", experiment, *rest]
    _notice("smartio compare (no experiment)", "smartio compare slowdown")
    return ["compare", "slowdown", *rest]
