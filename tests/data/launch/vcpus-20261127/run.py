"""Diagnostic (2026-11-27): cold python-stdlib launches, real and replayed, under none, with the guest on N vCPUs
and the kernel arguments given after the output directory: `python run.py 1 OUT`, `python run.py 2 OUT tsc=reliable`."""
import functools
import sys

import smartio.testbed.vm as vm
from smartio.cli import main

cpus, out = int(sys.argv[1]), sys.argv[2]
vm.run = functools.partial(vm.run, cpus=cpus, kernel_args=tuple(sys.argv[3:]))
sys.exit(main(["compare", "--experiment", "launch", "--schedulers", "none", "--apps", "python-stdlib",
               "--caches", "cold", "--backgrounds", "none", "--modes", "real,replay", "--repeats", "8",
               "--timeout", "3000", "--out", out]))
