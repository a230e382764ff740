"""The files around a launch as the host has them: real paths (symlinks resolved, each execve expanded into what the
kernel maps), sizes, the symbolic links met on the way, and the entries of the directories looked up.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

from smartio.launch.trace.executables import exec_chain
from smartio.launch.trace.strace import RawOp

SKIP_PREFIXES = ("/proc/", "/sys/", "/dev/")


def symlinks_along(paths: set[str]) -> dict[str, str]:
    """Every symbolic link met while resolving these absolute paths (`/lib` -> `usr/lib`, a venv's `bin/python`),
    link -> target as the link holds it: an installed copy of a launch (`smartio bench launch --app`) needs them
    to find its files by the names the program asks for."""
    links: dict[str, str] = {}

    def walk(path: str, depth: int) -> None:
        parts = [x for x in path.split("/") if x]
        cur = "/"
        for i, comp in enumerate(parts):
            cur = os.path.join(cur, comp)
            if depth < 40 and os.path.islink(cur):
                try:
                    target = os.readlink(cur)
                except OSError:
                    return
                links[cur] = target
                rest = "/".join(parts[i + 1:])
                walk(os.path.normpath(os.path.join(os.path.dirname(cur), target, rest)), depth + 1)
                return

    for p in sorted(paths):
        walk(os.path.normpath(p), 0)
    return links


def file_sizes(raws: list[RawOp]) -> dict[str, int]:
    """Regular files that still exist, by real path, with their sizes (at least as far as the trace reached)."""
    sizes: dict[str, int] = {}
    for r in raws:
        if r.path is None or r.path in sizes or r.path.startswith(SKIP_PREFIXES) or r.path.endswith(" (deleted)") \
                or r.op == "lookup":
            continue
        try:
            st = os.stat(r.path)
        except OSError:
            continue
        if os.path.isfile(r.path):
            sizes[r.path] = st.st_size
    for r in raws:
        if r.path in sizes and r.op in ("read", "write"):
            sizes[r.path] = max(sizes[r.path], r.offset + r.size)
    return sizes


def _real_lookup(path: str) -> str:
    """A path that did not resolve, with its deepest existing ancestor's symlinks resolved: where replay's layout
    (which has no symlinks) makes the same lookup fail in the same directory."""
    head, rest = path, ""
    while head != "/" and not os.path.exists(head):
        head, tail = os.path.split(head)
        rest = os.path.join(tail, rest) if rest else tail
    return os.path.normpath(os.path.join(os.path.realpath(head), rest)) if rest else os.path.realpath(head)


def directory_sizes(paths: set[str]) -> dict[str, int]:
    """Entries of every existing directory on these paths (theirs and their ancestors'): a cold lookup in a
    directory of thousands of entries reads more blocks than one in a directory of three."""
    dirs: dict[str, int] = {}
    for p in paths:
        d = os.path.dirname(p)
        while d and d not in dirs:
            if os.path.isdir(d) and not d.startswith(SKIP_PREFIXES):
                try:
                    dirs[d] = sum(1 for _ in os.scandir(d))
                except OSError:
                    pass
            if d == "/":
                break
            d = os.path.dirname(d)
    return dirs


def resolve_paths(raws: list[RawOp], asked: set[str]) -> list[RawOp]:
    """Real paths (symlinks resolved), and each execve expanded into the files the kernel maps for it."""
    out: list[RawOp] = []
    for r in raws:
        path = r.path
        if path is None:
            continue
        if r.op == "lookup":
            if not path.startswith(SKIP_PREFIXES):
                out.append(dataclasses.replace(r, path=_real_lookup(path)))
            continue
        if r.op == "exec":
            for p in exec_chain(os.path.realpath(path), asked):
                out.append(dataclasses.replace(r, path=p))
                r = dataclasses.replace(r, dur=0.0)      # the execve's time once, with its first file
        else:
            out.append(dataclasses.replace(r, path=os.path.realpath(path)))
    return out


def executable_of(name: str, cwd: str) -> str:
    """The absolute path a command name runs: from PATH, or relative to `cwd` when it holds a slash."""
    if os.sep in name:
        return os.path.normpath(os.path.join(cwd, name))
    return os.path.abspath(shutil.which(name) or name)
