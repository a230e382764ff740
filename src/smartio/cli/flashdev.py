"""`smartio flashdev`: run the emulated flash device on its own (`serve`) and list its profiles (`profiles`)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from smartio.errors import SmartioError, UsageError
from smartio.flashdev import FlashServer, all_profiles, load_profile
from smartio.signals import sigterm_as_interrupt
from smartio.units import parse_size


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("flashdev", help="emulated phone flash device (nbdkit + timing model)",
                              description="Emulated phone flash storage: an NBD export whose timing follows a "
                                          "device model (flashdev/profiles.toml).")
    sub = p.add_subparsers(dest="flashdev_command", metavar="ACTION", required=True)

    s = sub.add_parser("serve", help="serve one emulated device over NBD until interrupted",
                       description="Serve an emulated flash device over NBD (memory backing; data is lost on "
                                   "exit). fio's nbd engine and QEMU can use it.")
    s.add_argument("--profile", required=True, help="device profile (see `smartio flashdev profiles`)")
    s.add_argument("--size", default="256M", help="device size, e.g. 256M, 1G (default 256M)")
    where = s.add_mutually_exclusive_group()
    where.add_argument("--socket", type=Path, help="unix socket path (default: in a temporary directory)")
    where.add_argument("--port", type=int, help="TCP port on 127.0.0.1 instead of a unix socket")
    s.add_argument("--log", type=Path, help="write every request's arrival/start/finish times to this CSV file")
    s.add_argument("--time-scale", type=float, help="override the profile's time scale (1 = real device speed)")
    s.add_argument("--guest-overhead-us", type=float,
                   help="real microseconds the client's own I/O path adds per request, taken off the device's "
                        "front end (default: the profile's value, measured for the QEMU testbed; 0 for fio on "
                        "the host)")
    s.set_defaults(func=serve)

    ls = sub.add_parser("profiles", help="list the device profiles")
    ls.set_defaults(func=profiles)


def serve(args: argparse.Namespace) -> int:
    profile = load_profile(args.profile)
    size = parse_size("--size", args.size)
    if size < 1 << 20 or size % 4096:
        raise UsageError("--size", args.size, "must be at least 1M and a multiple of 4K")
    if args.port is not None and not 1 <= args.port <= 65535:
        raise UsageError("--port", args.port, "must be between 1 and 65535")
    if args.log is not None and not args.log.parent.is_dir():
        raise UsageError("--log", args.log, "its directory does not exist")
    if args.socket is not None and not args.socket.parent.is_dir():
        raise UsageError("--socket", args.socket, "its directory does not exist")
    # SIGTERM stops the server as Ctrl-C does, so nbdkit is always waited for.
    with sigterm_as_interrupt(), tempfile.TemporaryDirectory(prefix="smartio-flashdev.") as tmp:
        server = FlashServer(profile, size, Path(tmp), args.log, port=args.port, socket=args.socket,
                             time_scale=args.time_scale, guest_overhead_us=args.guest_overhead_us)
        with server:
            scale = args.time_scale or profile.time_scale
            print(f"serving {profile.name} ({size >> 20} MiB, time scale {scale:g}, guest queue depth "
                  f"{profile.queue_depth}, requests up to {profile.max_request_kb} KiB: the client's max_sectors_kb) "
                  f"at {server.uri}", flush=True)
            print("Ctrl-C stops it; the data is lost.", file=sys.stderr, flush=True)
            try:
                rc = server.wait()
            except KeyboardInterrupt:
                return 0
        raise SmartioError(f"nbdkit serving {profile.name} exited unexpectedly with status {rc}")


def profiles(args: argparse.Namespace) -> int:
    rows = all_profiles().values()
    print(f"{'name':<12} {'qd':>3} {'maxKiB':>6} {'cache':>5} {'scale':>6}  alone 4K latency ms (seq r/w, rand r/w)")
    for p in rows:
        lat = " ".join(f"{p.alone_latency_us(c) / 1000:.3f}" for c in ("seq_read", "seq_write", "rand_read",
                                                                        "rand_write"))
        print(f"{p.name:<12} {p.queue_depth:>3} {p.max_request_kb:>6} {p.write_cache_pages:>5} "
              f"{p.time_scale:>6g}  {lat}")
        print(f"{'':<12} {p.description}")
    return 0
