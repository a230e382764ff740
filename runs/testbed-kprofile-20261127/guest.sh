#!/bin/sh
# Diagnostic (2026-11-27): where a cold python-stdlib launch spends its kernel time, against a warm one and against
# its replay. Run on the host from the repository, as root:
#   smartio testbed run --cpus 1 --profile s5-emmc --artifacts OUT -- sh tests/data/launch/kprofile-20261127/guest.sh
# perf samples every CPU (cpu-clock, the only clock TCG's guest has) while `smartio launch` runs; the reports keep
# the launched program's samples (comm python3; the replayer's comm is smartio) by kernel symbol.
set -eu
S="$(pwd)/.venv/bin/smartio"
O="$SMARTIO_OUT"
mkfs.ext4 -q -F /dev/vda
mkdir -p /mnt/flash
mount -o noatime /dev/vda /mnt/flash
"$S" launch record --app python-stdlib -o "$O/python-stdlib.launch"
profile() {   # NAME COMM ARGS...: perf over one `smartio launch` command, then its report by symbol
    name=$1 comm=$2; shift 2
    perf record -q -a -g -e cpu-clock -F 499 -o "$O/$name.data" -- "$S" launch "$@" --repeats 4 \
        --json "$O/$name.json" --target /mnt/flash
    perf report -i "$O/$name.data" --comms "$comm" --no-children --sort dso,sym -g none -n --stdio \
        --percent-limit 0.3 > "$O/$name.txt" 2>/dev/null
    perf report -i "$O/$name.data" --no-children --sort comm,dso -n --stdio > "$O/$name-by-comm.txt" 2>/dev/null
}
profile cold-real python3 run --app "$O/python-stdlib.launch" --cold
profile warm-real python3 run --app "$O/python-stdlib.launch" --warm
profile cold-replay smartio replay "$O/python-stdlib.launch" --cold
umount /mnt/flash
