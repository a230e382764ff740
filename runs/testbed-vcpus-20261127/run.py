"""Diagnostic (2026-11-27): cold python-stdlib launches, real and replayed, under none, with the guest on N vCPUs
and the kernel arguments given after the output directory: `python run.py 1 OUT`, `python run.py 2 OUT tsc=reliable`.
cpus1/, cpus2/ and cpus2-tsc/ were measured before the testbed booted with init_on_alloc=0 by default: to measure
them again, add init_on_alloc=1. cpus1-init-on-alloc-0/ and cpus2-init-on-alloc-0/ were `python run.py N OUT
init_on_alloc=0` (today's default). The runs were made through a patched vm.run, before `smartio compare` took
--cpus and --kernel-arg, which this script now passes."""
import sys

from smartio.cli import main

cpus, out = sys.argv[1], sys.argv[2]
sys.exit(main(["compare", "--experiment", "launch", "--schedulers", "none", "--apps", "python-stdlib",
               "--caches", "cold", "--backgrounds", "none", "--modes", "real,replay", "--repeats", "8",
               "--timeout", "3000", "--out", out, "--cpus", cpus, *[f"--kernel-arg={a}" for a in sys.argv[3:]]]))
