set -eu
O="$SMARTIO_OUT"
modprobe null_blk nr_devices=1 irqmode=0 memory_backed=0
Q=/sys/block/nullb0/queue
echo 0 > /proc/sys/kernel/kptr_restrict || true
echo -1 > /proc/sys/kernel/perf_event_paranoid || true
echo smartio > $Q/scheduler
cat /sys/module/smartio_iosched/sections/.text > $O/text-addr
perf record -q -a -e cpu-clock -F 4999 -o /tmp/p.data -- \
  fio --name=j --filename=/dev/nullb0 --rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs=2 \
    --runtime=6 --time_based --group_reporting --output-format=terse > $O/fio.txt
perf report -i /tmp/p.data --no-children --sort sym -n --stdio --percent-limit 0 > $O/report.txt 2>/dev/null
perf script -i /tmp/p.data -F ip,sym 2>/dev/null | grep -E "sio_|native_queued" > $O/ips.txt || true
echo none > $Q/scheduler
