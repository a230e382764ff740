set -eu
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T
modprobe null_blk nr_devices=1 irqmode=0 memory_backed=0 || true
Q=/sys/block/nullb0/queue
modprobe mq-deadline || true
echo 65536 > $T/buffer_size_kb
echo function_graph > $T/current_tracer
echo 2 > $T/max_graph_depth
for s in mq-deadline smartio; do
  for w in randwrite randread; do
    echo none > $Q/scheduler; echo $s > $Q/scheduler
    echo > $T/set_graph_function
    for f in $(grep -E "^(sio_(dispatch_request|insert_requests|finish_request|bio_merge)|dd_(dispatch_request|insert_requests|finish_request|bio_merge))( |$)" $T/available_filter_functions | awk '{print $1}'); do echo $f >> $T/set_graph_function; done
    echo > $T/trace
    echo 1 > $T/tracing_on
    fio --name=j --filename=/dev/nullb0 --rw=$w --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs=2 --runtime=2 --time_based --group_reporting --output-format=terse > $SMARTIO_OUT/fio-$s-$w.txt
    echo 0 > $T/tracing_on
    cat $T/trace > $SMARTIO_OUT/trace-$s-$w.txt
  done
done
echo nop > $T/current_tracer
