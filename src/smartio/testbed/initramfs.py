"""The testbed guest's initramfs: busybox, the few kernel modules needed to reach the shares, and PID 1.

The guest has no root disk. PID 1 (INIT_SCRIPT below) loads virtio, virtiofs and overlayfs from the initramfs,
mounts the host's `/` read-only over virtiofs with a tmpfs overlay on top (so the guest sees the host's tools,
Python and venv at the same paths, and its writes stay in guest RAM), mounts the repository and the run's artifact
directory writable, loads the user's modules, runs the command in a chroot with its output on the second serial
port (/dev/ttyS1), and prints a marker line with the exit code before powering off:

    VMTEST_INIT=1 <nonce>             the kernel booted and started PID 1
    VMTEST_START=1 <nonce>            PID 1's setup is done and the command starts (the host's boot deadline)
    VMTEST_RC=<n> <nonce>             the command ran; n is its exit code
    VMTEST_SETUP_FAILED=<why> <nonce> the guest could not get that far

The nonce (kernel parameter smartio.nonce) keeps a command that prints such a line from faking the result.
The archive is written here in the cpio "newc" format without any external tool, so it is deterministic.
"""

from __future__ import annotations

import dataclasses
import gzip
import lzma
import shutil
import stat
import subprocess
from pathlib import Path

from smartio.errors import MissingToolError, SmartioError

# Modules PID 1 loads before it can mount anything: PCI transport, disks, the virtiofs shares, the overlay.
BOOT_MODULES = ("virtio_pci", "virtio_blk", "virtiofs", "overlay")

# Mount points inside the guest (documented in docs/guide/testbed.md; the command sees $SMARTIO_OUT).
GUEST_OUT = "/smartio/out"
GUEST_ARTIFACTS = "/smartio-artifacts"  # only visible to PID 1, outside the command's root
COMMAND_TTY = "/dev/ttyS1"

INIT_SCRIPT = r"""#!/bin/busybox sh
# PID 1 of the smartio testbed guest; written by smartio/testbed/initramfs.py.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

nonce=none
mode=run
for t in $(cat /proc/cmdline); do
	case "$t" in
	smartio.nonce=*) nonce=${t#*=} ;;
	smartio.mode=*) mode=${t#*=} ;;
	esac
done
tty=@COMMAND_TTY@
marker() { printf '\nVMTEST_%s=%s %s\n' "$1" "$2" "$nonce" >"$tty"; }
[ "$mode" = shell ] || marker INIT 1
die() {
	echo "smartio-init: $*" >/dev/console
	marker SETUP_FAILED "$*"
	poweroff -f
	sleep 10
}

# Module parameters on the kernel command line (virtio_blk.queue_depth=1) reach insmod here, as modprobe would.
while read -r ko; do
	m=${ko%.ko}
	args=
	for t in $(cat /proc/cmdline); do
		case "$t" in "$m".*) args="$args ${t#"$m".}" ;; esac
	done
	err=$(insmod "/modules/$ko" $args 2>&1) || die "insmod $ko failed: ${err##*: }"
done </modules/order

art=@GUEST_ARTIFACTS@
mkdir -p /host /rw /newroot "$art"
mount -t virtiofs artifacts "$art" || die "cannot mount the artifacts share"
. "$art/guest.env" || die "cannot read guest.env"
# Where the kernel's text is (KASLR), and once per kernel its text symbols (Debian ships no System.map): the host
# names the vCPUs' addresses with them (smartio.testbed.vcpus).
sed -n '/ _text$/{s/ .*//p;q}' /proc/kallsyms >"$art/kernel-text.part" &&
	mv "$art/kernel-text.part" "$art/kernel-text"
if [ -n "$SMARTIO_KSYMS" ]; then
	sed -n '/^[0-9a-f]* [tTwW] [^ 	]*$/p' /proc/kallsyms >"$art/kallsyms.part" &&
		mv "$art/kallsyms.part" "$art/kallsyms"
fi
mount -t virtiofs -o ro root /host || die "cannot mount the host root share"
mount -t tmpfs -o mode=0755 rw /rw && mkdir /rw/upper /rw/work
mount -t overlay -o lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
	die "cannot mount the overlay root"
r=/newroot
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts devpts $r/dev/pts
mount -t tmpfs shm $r/dev/shm
mount -t debugfs debugfs $r/sys/kernel/debug
mount -t tracefs tracefs $r/sys/kernel/tracing
if [ -n "$SMARTIO_REPO" ]; then
	mount -t virtiofs repo "$r$SMARTIO_REPO" || die "cannot mount the repository share at $SMARTIO_REPO"
fi
mkdir -p $r@GUEST_OUT@ && mount --bind "$art/out" $r@GUEST_OUT@ || die "cannot bind the out directory"
# modprobe in the guest (kyber, bfq, ...) finds the cached image's modules under the usual path.
kmod="$r/lib/modules/$SMARTIO_KERNEL"
mkdir -p "$kmod" && mount --bind "$r$SMARTIO_KERNEL_MODULES" "$kmod" ||
	die "cannot bind the kernel modules"
while read -r ko; do
	[ -n "$ko" ] || continue
	err=$(insmod "$r$ko" 2>&1) || die "insmod $ko failed: ${err##*: }"
	echo "smartio-init: loaded $ko" >/dev/console
done <"$art/modules"
cp "$art/command.sh" $r/smartio/command.sh
# The emulated phone's largest request (its profile's max_request_kb): the block layer splits bios as the phone's does.
if [ -n "$SMARTIO_MAX_REQUEST_KB" ]; then
	for d in $SMARTIO_DISKS; do
		echo "$SMARTIO_MAX_REQUEST_KB" >"/sys/block/${d#/dev/}/queue/max_sectors_kb" ||
			die "cannot set ${d#/dev/}'s max_sectors_kb to $SMARTIO_MAX_REQUEST_KB"
	done
fi

# Shortly before the host's timeout, list what is still running, with kernel stacks, on the console: a run that
# hangs then says where (blocked in the kernel, or waiting in user space) instead of only that it timed out.
dump_tasks() {
	echo "smartio-init: the command is still running $1; its tasks, and all tasks blocked in the kernel (D):"
	for p in /proc/[0-9]*; do
		state=$(sed -n 's/^State:[[:space:]]*//p' "$p/status" 2>/dev/null)
		cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
		case "$state" in D*) ;; *) [ -n "$cmd" ] && [ "${p#/proc/}" != 1 ] || continue ;; esac
		echo "--- pid ${p#/proc/} [$state] wchan=$(cat "$p/wchan" 2>/dev/null) ${cmd:-[$(cat "$p/comm")]}"
		sed 's/^/    /' "$p/stack" 2>/dev/null
	done
	echo "smartio-init: end of the task list"
}
watchdog=
if [ -n "$SMARTIO_DUMP_AT" ]; then		# not set for a shell
	(
		now=$(date +%s)
		[ "$SMARTIO_DUMP_AT" -gt "$now" ] && sleep $((SMARTIO_DUMP_AT - now))
		dump_tasks "near the host's timeout" >/dev/console 2>&1
	) &
	watchdog=$!
fi

if [ "$mode" = shell ]; then
	stty -F "$tty" sane rows "${SMARTIO_ROWS:-24}" cols "${SMARTIO_COLS:-80}"
	setsid -c env -i sh -c ". $art/guest.env && exec chroot $r /bin/sh /smartio/command.sh" <"$tty" >"$tty" 2>&1
else
	marker START 1
	# Raw: the host gets the command's bytes exactly, without \r added to every newline.
	stty -F "$tty" raw -echo
	env -i sh -c ". $art/guest.env && exec chroot $r /bin/sh /smartio/command.sh" </dev/null >"$tty" 2>&1
fi
rc=$?
[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
dmesg >"$art/dmesg"
echo "$rc" >"$art/exit-code"
sync
marker RC $rc
poweroff -f
sleep 10
"""


@dataclasses.dataclass(frozen=True)
class Entry:
    """One member of the archive: a directory, a regular file, a symlink or a character device."""

    name: str          # path inside the archive, no leading slash
    mode: int          # st_mode with the file type bits
    data: bytes = b""  # file contents, or the symlink's target
    rdev: tuple[int, int] = (0, 0)


def write_newc(entries: list[Entry], dest: Path) -> Path:
    """Write entries as an uncompressed cpio newc archive, the format the kernel unpacks as initramfs."""
    out = bytearray()

    def member(ino: int, name: str, mode: int, data: bytes, rdev: tuple[int, int]) -> None:
        nameb = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(nameb), 0)
        out.extend(b"070701" + "".join(f"{v:08X}" for v in fields).encode() + nameb)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    for ino, e in enumerate(entries, start=1):
        member(ino, e.name, e.mode, e.data, e.rdev)
    member(0, "TRAILER!!!", 0, b"", (0, 0))
    dest.write_bytes(bytes(out))
    return dest


# How Debian compresses an image's modules (6.12 and later: .ko.xz); busybox's insmod loads only a plain .ko, so the
# initramfs holds them decompressed.
COMPRESSED = (".ko.xz", ".ko.zst", ".ko.gz")


def module_name(path: str | Path) -> str:
    """A module's name from its file (kernel/fs/fuse/virtiofs.ko, .../null_blk.ko.xz): - and _ alike, as the kernel
    treats them."""
    name = Path(path).name
    for suffix in (*COMPRESSED, ".ko"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
            break
    return name.replace("-", "_")


def module_bytes(ko: Path) -> bytes:
    """The plain ELF module of a .ko, .ko.xz, .ko.zst or .ko.gz file."""
    data = ko.read_bytes()
    if ko.name.endswith(".ko.xz"):
        return lzma.decompress(data)
    if ko.name.endswith(".ko.gz"):
        return gzip.decompress(data)
    if ko.name.endswith(".ko.zst"):
        zstd = shutil.which("zstd")
        if zstd is None:
            raise MissingToolError("zstd", f"install Debian's zstd (to decompress {ko.name})")
        p = subprocess.run([zstd, "-dcq"], input=data, capture_output=True)
        if p.returncode != 0:
            raise SmartioError(f"zstd cannot decompress {ko}: {p.stderr.decode(errors='replace').strip()}")
        return p.stdout
    return data


def initramfs_name(ko: Path) -> str:
    """A module's file name in the initramfs: always a plain .ko (decompressed: module_bytes)."""
    for suffix in COMPRESSED:
        if ko.name.endswith(suffix):
            return ko.name[:-len(suffix)] + ".ko"
    return ko.name


def module_order(modules_dir: Path, wanted: tuple[str, ...] = BOOT_MODULES) -> list[Path]:
    """The .ko files needed for `wanted`, dependencies first, from the image's modules.dep.

    Modules built into the kernel (modules.builtin) need no file and are left out.
    """
    norm = module_name
    deps: dict[str, tuple[str, list[str]]] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[norm(path)] = (path, rest.split())
    builtin_file = modules_dir / "modules.builtin"
    builtin = {norm(p) for p in builtin_file.read_text().split()} if builtin_file.exists() else set()

    order: list[str] = []

    def visit(name: str) -> None:
        if name in builtin:
            return
        if name not in deps:
            raise SmartioError(f"kernel module {name} is neither in {modules_dir}/modules.dep nor built in")
        path, requires = deps[name]
        for dep in requires:
            visit(norm(dep))
        if path not in order:
            order.append(path)

    for name in wanted:
        visit(norm(name))
    return [modules_dir / p for p in order]


def find_busybox() -> Path:
    path = shutil.which("busybox")
    if path is None:
        raise MissingToolError("busybox", "install Debian's busybox-static (scripts/install-deps --vm)")
    return Path(path)


def has_interpreter(elf: bytes) -> bool:
    """True if the ELF64 binary names a dynamic loader (a PT_INTERP program header)."""
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    phentsize = int.from_bytes(elf[0x36:0x38], "little")
    phnum = int.from_bytes(elf[0x38:0x3A], "little")
    return any(int.from_bytes(elf[phoff + i * phentsize:phoff + i * phentsize + 4], "little") == 3
               for i in range(phnum))


def entries(modules_dir: Path, busybox: Path | None = None, wanted: tuple[str, ...] = BOOT_MODULES) -> list[Entry]:
    """Everything the guest's initramfs holds, in archive order."""
    busybox = busybox or find_busybox()
    bb = busybox.read_bytes()
    if has_interpreter(bb):
        # A dynamically linked busybox would need its libraries in the initramfs too.
        raise MissingToolError("busybox-static", f"{busybox} is dynamically linked; install Debian's busybox-static")
    kos = module_order(modules_dir, wanted)
    script = (INIT_SCRIPT.replace("@COMMAND_TTY@", COMMAND_TTY).replace("@GUEST_ARTIFACTS@", GUEST_ARTIFACTS)
              .replace("@GUEST_OUT@", GUEST_OUT))
    d = stat.S_IFDIR | 0o755
    out = [Entry(name, d) for name in ("bin", "dev", "proc", "sys", "modules")]
    out += [
        Entry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)),  # the kernel opens it for PID 1's stdio
        Entry("bin/busybox", stat.S_IFREG | 0o755, bb),
        Entry("init", stat.S_IFREG | 0o755, script.encode()),
        Entry("modules/order", stat.S_IFREG | 0o644, "".join(f"{initramfs_name(k)}\n" for k in kos).encode()),
    ]
    out += [Entry(f"modules/{initramfs_name(k)}", stat.S_IFREG | 0o644, module_bytes(k)) for k in kos]
    return out


def build(modules_dir: Path, dest: Path, busybox: Path | None = None,
          wanted: tuple[str, ...] = BOOT_MODULES) -> Path:
    """Write the initramfs for the kernel whose modules are in modules_dir to dest."""
    return write_newc(entries(modules_dir, busybox, wanted), dest)
