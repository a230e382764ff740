"""Executables: a script's interpreter and an ELF's dynamic loader, which the kernel maps at execve.
"""

from __future__ import annotations

import os


def exec_chain(path: str, asked: set[str] | None = None) -> list[str]:
    """The files the kernel maps when it executes `path`: the interpreter of a `#!` script (and its loader), the
    dynamic loader of an ELF executable (PT_INTERP), then the file itself. The interpreters' names as the files
    give them (`/lib64/ld-linux-x86-64.so.2`, before symlinks are resolved) are added to `asked`."""
    asked = set() if asked is None else asked
    chain: list[str] = []
    for _ in range(4):                   # the kernel allows a few levels of interpreters too
        try:
            with open(path, "rb") as f:
                head = f.read(4096)
        except OSError:
            break
        chain.insert(0, path)
        if head.startswith(b"#!"):
            words = head[2:].split(b"\n", 1)[0].split()
            if not words:
                break
            asked.add(words[0].decode(errors="replace"))
            path = os.path.realpath(words[0].decode(errors="replace"))
            continue
        interp = _elf_interp(path, head)
        if interp:
            asked.add(interp)
            chain.insert(0, os.path.realpath(interp))
        break
    return chain


def _elf_interp(path: str, head: bytes) -> str | None:
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:      # 64-bit little-endian only
        return None
    phoff = int.from_bytes(head[32:40], "little")
    phentsize = int.from_bytes(head[54:56], "little")
    phnum = int.from_bytes(head[56:58], "little")
    try:
        with open(path, "rb") as f:
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            for i in range(phnum):
                ph = table[i * phentsize:(i + 1) * phentsize]
                if int.from_bytes(ph[0:4], "little") == 3:           # PT_INTERP
                    off, size = int.from_bytes(ph[8:16], "little"), int.from_bytes(ph[32:40], "little")
                    f.seek(off)
                    return f.read(size).rstrip(b"\0").decode(errors="replace")
    except OSError:
        return None
    return None
