set -eu
O="$SMARTIO_OUT"
modprobe null_blk nr_devices=1 irqmode=0 memory_backed=0
modprobe mq-deadline || true
Q=/sys/block/nullb0/queue
echo 0 > /proc/sys/kernel/kptr_restrict || true
echo -1 > /proc/sys/kernel/perf_event_paranoid || true
for round in 1 2 3; do
for s in mq-deadline smartio smartio-old; do
  for w in randwrite randread; do
    echo none > $Q/scheduler; echo $s > $Q/scheduler
    perf record -q -a -e cpu-clock -F 999 -o /tmp/p.data -- \
      fio --name=j --filename=/dev/nullb0 --rw=$w --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs=2 \
        --runtime=4 --time_based --group_reporting --output-format=terse > $O/fio-$s-$w-$round.txt
    perf report -i /tmp/p.data --no-children --sort sym -n --stdio --percent-limit 0 > $O/$s-$w-$round.txt 2>/dev/null
  done
done
done
echo none > $Q/scheduler
