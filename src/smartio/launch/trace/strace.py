"""Parsing strace's output (-ff -ttt -T -y: one file per process, absolute times, durations, paths of fds) into
operations on paths (`RawOp`), before files get ids.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

SYSCALLS = ("execve", "open", "openat", "close", "read", "pread64", "readv", "preadv", "preadv2", "write", "writev",
            "pwrite64", "pwritev", "pwritev2", "lseek", "mmap", "fsync", "fdatasync", "newfstatat", "stat", "lstat",
            "statx", "access", "faccessat", "faccessat2", "dup", "dup2", "dup3", "fcntl")


PATH_CALLS = ("open", "openat", "newfstatat", "stat", "lstat", "statx", "access", "faccessat", "faccessat2")


_LINE = re.compile(r"^(\d+\.\d+) (\w+)\((.*)\) += (-?\d+|0x[0-9a-f]+)(<.*?>)?(?: [A-Z].*?)? <(\d+\.\d+)>$")


_EXIT = re.compile(r"^(\d+\.\d+) \+\+\+ (?:exited with|killed by) ")


_FD = re.compile(r"^(-?\d+|AT_FDCWD)<(.*)>$")


_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


@dataclasses.dataclass
class RawOp:
    """An operation on a path, before files get ids."""

    t: float
    dur: float
    pid: int
    op: str
    path: str | None
    offset: int = 0
    size: int = 0
    asked: str | None = None          # open, stat, exec: the path as the program gave it (made absolute)


def _fd(arg: str) -> tuple[int, str | None]:
    m = _FD.match(arg.strip())
    if not m:
        try:
            return int(arg.strip()), None
        except ValueError:
            return -1, None
    path = m.group(2)
    return -100 if m.group(1) == "AT_FDCWD" else int(m.group(1)), path if path.startswith("/") else None


def _int(text: str) -> int:
    return int(text.strip(), 0)


def _args(text: str) -> list[str]:
    """Top-level comma-separated arguments (commas inside {}, [], "" or <> do not split)."""
    out, depth, cur, quote = [], 0, [], False
    prev = ""
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == '"' and prev != "\\":
                quote = False
        elif ch == '"':
            quote = True
            cur.append(ch)
        elif ch in "{[<(":
            depth += 1
            cur.append(ch)
        elif ch in "}]>)":
            depth -= 1
            cur.append(ch)
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        prev = ch
    if cur:
        out.append("".join(cur).strip())
    return out


def _string(arg: str) -> str | None:
    m = _STR.search(arg)
    return m.group(1).encode().decode("unicode_escape") if m else None


def _asked(name: str, a: list[str]) -> str | None:
    """The absolute, normalised path a path call names (relative ones joined to their directory fd's path)."""
    if not a:
        return None
    at = name in ("openat", "newfstatat", "statx", "faccessat", "faccessat2")
    p = _string(a[1] if at and len(a) > 1 else a[0])
    if not p:
        return None
    if not p.startswith("/"):
        base = _fd(a[0])[1] if at else None
        if base is None:
            return None
        p = os.path.join(base, p)
    return os.path.normpath(p)


def parse_strace(files: list[Path]) -> tuple[list[RawOp], float | None, float | None]:
    """Operations of all processes, in the order they started, and the launch's first and last times (the first
    execve, the last exit)."""
    raws: list[RawOp] = []
    first: float | None = None
    last: float | None = None
    pos: dict[tuple[int, str], int] = {}
    lines: list[tuple[float, int, str]] = []
    for f in files:
        pid = int(f.name.rsplit(".", 1)[1])
        for line in f.read_text(errors="replace").splitlines():
            ts = line.split(" ", 1)[0]
            try:
                lines.append((float(ts), pid, line))
            except ValueError:
                continue
    lines.sort(key=lambda x: x[0])
    for t, pid, line in lines:
        if _EXIT.match(line):
            last = t if last is None else max(last, t)
            continue
        m = _LINE.match(line)
        if not m:
            continue
        _, name, argtext, ret_s, ret_path, dur_s = m.groups()
        ret, dur = _int(ret_s), float(dur_s)
        a = _args(argtext)
        if ret < 0:
            if name in PATH_CALLS:
                p = _asked(name, a)
                if p is not None:
                    raws.append(RawOp(t, dur, pid, "lookup", p, asked=p))
            continue
        if name in ("access", "faccessat", "faccessat2"):
            p = _asked(name, a)
            if p is not None:
                raws.append(RawOp(t, dur, pid, "stat", p, asked=p))
            continue
        if name == "execve":
            path = _string(a[0]) if a else None
            if path is not None:
                first = t if first is None else first
                raws.append(RawOp(t, dur, pid, "exec", path, asked=path if path.startswith("/") else None))
            continue
        if name in ("open", "openat"):
            new = _fd(f"{ret}{ret_path or ''}")[1]
            if new is not None:
                pos[(ret, new)] = 0
                asked = _string(a[1] if name == "openat" else a[0]) if a else None
                if asked and not asked.startswith("/"):
                    base = _fd(a[0])[1] if name == "openat" else None
                    asked = os.path.join(base, asked) if base else None
                raws.append(RawOp(t, dur, pid, "open", new, asked=asked))
            continue
        if name in ("newfstatat", "stat", "lstat", "statx"):
            p = _string(a[1] if name in ("newfstatat", "statx") else a[0]) if a else None
            if not p:                               # fstat of an open fd (AT_EMPTY_PATH): no lookup, no I/O
                continue
            if not p.startswith("/"):
                base = _fd(a[0])[1] if name in ("newfstatat", "statx") else None
                if base is None:
                    continue
                p = os.path.join(base, p)
            raws.append(RawOp(t, dur, pid, "stat", os.path.normpath(p), asked=p))
            continue
        if not a:
            continue
        fd, path = _fd(a[-2] if name == "mmap" else a[0])
        if path is None:
            continue
        key = (fd, path)
        if name in ("dup", "dup2", "dup3", "fcntl"):
            if name != "fcntl" or "F_DUPFD" in (a[1] if len(a) > 1 else ""):
                pos[(ret, path)] = pos.get(key, 0)
        elif name == "lseek":
            pos[key] = ret
        elif name == "close":
            pos.pop(key, None)
            raws.append(RawOp(t, dur, pid, "close", path))
        elif name in ("read", "readv", "write", "writev"):
            if ret > 0:
                off = pos.get(key, 0)
                raws.append(RawOp(t, dur, pid, "read" if name.startswith("read") else "write", path, off, ret))
                pos[key] = off + ret
        elif name in ("pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2") and len(a) > 3:
            off = _int(a[3])
            if off == -1:                           # preadv2/pwritev2 at the file position
                off = pos.get(key, 0)
                pos[key] = off + max(ret, 0)
            if ret > 0:
                raws.append(RawOp(t, dur, pid, "read" if name.startswith("pread") else "write", path, off, ret))
        elif name == "mmap":
            raws.append(RawOp(t, dur, pid, "mmap", path, _int(a[-1]), _int(a[1])))
        elif name in ("fsync", "fdatasync"):
            raws.append(RawOp(t, dur, pid, name, path))
    return raws, first, last
