# Usage (in the guest): sh function-graph-guest.sh [DEPTH [ROUNDS [CALLBACKS]]]: each elevator callback of
# mq-deadline and smartio traced to DEPTH (default 1) during 2 s of fio on null_blk, ROUNDS rounds (default 3);
# CALLBACKS an alternation of callback names without the dd_/sio_ prefix (default all seven).
set -eu
DEPTH=${1:-1}
ROUNDS=${2:-3}
CALLBACKS=${3:-dispatch_request|insert_requests|finish_request|bio_merge|has_work|limit_depth|prepare_request}
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T
modprobe null_blk nr_devices=1 irqmode=0 memory_backed=0 || true
Q=/sys/block/nullb0/queue
modprobe mq-deadline || true
cat $Q/scheduler > $SMARTIO_OUT/scheds
echo 65536 > $T/buffer_size_kb
echo function_graph > $T/current_tracer
echo $DEPTH > $T/max_graph_depth
echo funcgraph-proc > $T/trace_options 2>/dev/null || true
for round in $(seq $ROUNDS); do
for s in mq-deadline smartio; do
  for w in randwrite randread; do
    echo none > $Q/scheduler; echo $s > $Q/scheduler
    echo > $T/set_graph_function
    for f in $(grep -E "^(sio_|dd_)($CALLBACKS)( |$)" $T/available_filter_functions | awk '{print $1}'); do echo $f >> $T/set_graph_function; done
    echo > $T/trace
    echo 1 > $T/tracing_on
    fio --name=j --filename=/dev/nullb0 --rw=$w --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs=2 --runtime=2 --time_based --group_reporting --output-format=terse > $SMARTIO_OUT/fio-$s-$w-$round.txt
    echo 0 > $T/tracing_on
    cat $T/trace > $SMARTIO_OUT/trace-$s-$w-$round.txt
  done
done
done
echo nop > $T/current_tracer
