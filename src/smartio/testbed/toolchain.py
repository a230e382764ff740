"""A Debian suite's compilers in a chroot, to build the module against that suite's kernel headers.

6.12's and the newest kernel's headers ask for the compiler Debian built them with (gcc-14 in trixie, gcc-16 in sid:
their .kernelvariables name it) and their host tools (objtool, modpost) are linked against a newer glibc than Debian
12's (objtool needs GLIBC_2.38). So the module is built for them in a `debootstrap --variant=minbase` chroot of the
suite, kept in the cache:

    <cache>/toolchain/<suite>/root/                 the chroot
    <cache>/toolchain/<suite>/.complete-base        stamp: debootstrap finished
    <cache>/toolchain/<suite>/.complete-<gcc-N>     stamp: the packages of that compiler are in the chroot
    <cache>/toolchain/<suite>/debootstrap.log       what debootstrap and apt printed

A build runs in a private mount namespace (unshare --mount): /proc (7.2's objtool reads it) and the directories the
build needs are bind-mounted there, at the same paths, so they vanish with the build on every exit path (an error,
Ctrl-C, or a kill), and nothing stays mounted on the host. Root is required (debootstrap, mount, chroot).
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from smartio.errors import MissingToolError, NeedsRootError, SmartioError
from smartio.progress import Progress
from smartio.testbed.debian import MIRROR
from smartio.testbed.kernelrelease import cache_root

# What a module build needs besides the compilers (libelf1t64: objtool's and resolve_btfids' library; dwarves:
# pahole, for the modules' BTF).
BASE_PACKAGES = ("make", "libc6-dev", "binutils", "binutils-aarch64-linux-gnu", "libelf1t64", "dwarves", "perl",
                 "python3", "bc", "kmod")


def packages(gcc: int) -> list[str]:
    return [*BASE_PACKAGES, f"gcc-{gcc}", f"gcc-{gcc}-aarch64-linux-gnu"]


def gcc_major(build_dir: Path) -> int:
    """The major version of the gcc that built the kernel of these headers (CONFIG_GCC_VERSION=140200 -> 14)."""
    m = re.search(r"^CONFIG_GCC_VERSION=(\d+)$", (build_dir / ".config").read_text(), re.M)
    if not m:
        raise SmartioError(f"{build_dir}/.config names no CONFIG_GCC_VERSION")
    return int(m.group(1)) // 10000


def suite_dir(suite: str) -> Path:
    return cache_root() / "toolchain" / suite


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise NeedsRootError(f"{what} (debootstrap, mount and chroot of a build chroot)")


def _mounted_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mounts") as f:
        return [m for m in (line.split()[1] for line in f) if m.startswith(prefix)]


def _run_logged(cmd: list[str], log: Path, label: str) -> None:
    """Run cmd with its output in log, and its current step (debootstrap's "I: ...", apt's "Get:") shown by
    smartio.progress: in place on a terminal, a line at most every 15 s elsewhere."""
    start = last = time.monotonic()
    steps = 0
    with open(log, "a") as out, Progress(None) as progress:
        progress.begin(label)
        out.write(f"$ {shlex.join(cmd)}\n")
        out.flush()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert p.stdout is not None
        try:
            for line in p.stdout:
                out.write(line)
                if not re.match(r"(I: |Get:|Unpacking |Setting up )", line):
                    continue
                steps += 1
                now = time.monotonic()
                if progress.terminal or now - last >= 15:
                    progress.status(f"smartio: {label}: {now - start:4.0f} s, step {steps}: {line.strip()[:80]}")
                    last = now
        finally:
            rc = p.wait()     # after a Ctrl-C the child has the signal too; wait for it to go
        progress.end()
    if rc != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
        raise SmartioError(f"{label} failed ({rc}); the end of {log}:\n{tail}")
    print(f"smartio: {label}: done in {time.monotonic() - start:.0f} s", file=sys.stderr)


def ensure(suite: str, gcc: int) -> Path:
    """The chroot of `suite` with gcc-<gcc> (native and aarch64) in it, made on first use; its root directory. Two
    builds at once wait for each other here (a lock in the suite's directory)."""
    require_root(f"a build chroot of {suite}")
    d = suite_dir(suite)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure(suite, gcc, d)


def _ensure(suite: str, gcc: int, d: Path) -> Path:
    root = d / "root"
    log = d / "debootstrap.log"
    if not (d / ".complete-base").exists():
        if shutil.which("debootstrap") is None:
            raise MissingToolError("debootstrap", "run scripts/install-deps, or apt-get install debootstrap")
        if root.exists():      # an interrupted debootstrap: start again, unless something is mounted in it
            if mounted := _mounted_under(root):
                raise SmartioError(f"{root} has mounts ({', '.join(mounted)}); unmount them, then run again")
            shutil.rmtree(root)
        d.mkdir(parents=True, exist_ok=True)
        print(f"smartio: making the {suite} build chroot in {root} (debootstrap, a few minutes; log: {log})",
              file=sys.stderr)
        _run_logged(["debootstrap", "--variant=minbase", f"--include={','.join(packages(gcc))}", suite, str(root),
                       f"{MIRROR}debian"], log, f"debootstrap {suite}")
        (d / ".complete-base").touch()
        (d / f".complete-gcc-{gcc}").touch()
    if not (d / f".complete-gcc-{gcc}").exists():    # the suite moved on to another compiler: add it
        shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        run(suite, ["sh", "-c", "apt-get -q update && apt-get -q install -y --no-install-recommends "
                    + " ".join(packages(gcc))], [], log=log, env=env, label=f"apt-get install gcc-{gcc} in {suite}")
        (d / f".complete-gcc-{gcc}").touch()
    return root


def run(suite: str, cmd: list[str], binds: list[Path], log: Path, env: dict[str, str] | None = None,
        cwd: Path | None = None, label: str | None = None) -> int:
    """cmd in the chroot of `suite` (made by ensure()), with /proc and `binds` mounted at their own paths, in a mount
    namespace of its own: the mounts go when cmd does. Output goes to log (and progress to stderr when labelled).
    Returns cmd's exit status (raises for a labelled step that fails)."""
    require_root(f"a build in the {suite} chroot")
    root = suite_dir(suite) / "root"
    if not (root / "bin").exists():
        raise SmartioError(f"no {suite} build chroot in {root}")
    if shutil.which("unshare") is None:
        raise MissingToolError("unshare", "install util-linux")
    kept: list[Path] = []
    for b in sorted({p.resolve() for p in binds}, key=lambda p: len(p.parts)):
        if not any(b.is_relative_to(k) for k in kept):     # a directory inside one already bound comes with it
            kept.append(b)
    script = ["set -e", f"mount -t proc proc {shlex.quote(str(root / 'proc'))}"]
    for b in kept:
        inside = shlex.quote(str(root / b.relative_to("/")))
        script += [f"mkdir -p {inside}", f"mount --bind {shlex.quote(str(b))} {inside}"]
    inner = shlex.join(cmd) if cwd is None else f"cd {shlex.quote(str(cwd))} && {shlex.join(cmd)}"
    script.append(f"exec chroot {shlex.quote(str(root))} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "
                  f"HOME=/root LANG=C.UTF-8 {' '.join(f'{k}={shlex.quote(v)}' for k, v in (env or {}).items())} "
                  f"sh -c {shlex.quote(inner)}")
    full = ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script)]
    if label:
        _run_logged(full, log, label)
        return 0
    with open(log, "a") as out:
        return subprocess.run(full, stdout=out, stderr=subprocess.STDOUT).returncode
