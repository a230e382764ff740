set -eu
D=/dev/vda; Q=/sys/block/vda/queue; O=$SMARTIO_OUT
DBG=/sys/kernel/debug/block/vda/sched
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
T=/sys/kernel/tracing; mountpoint -q $T || mount -t tracefs none $T
echo none > $Q/scheduler; echo smartio > $Q/scheduler; echo 128 > $Q/nr_requests
C="--ioengine=psync --direct=1 --bs=4k --size=256k --filename=$D"
fio --name=warm --filename=$D --rw=randrw --bs=4k --size=1m --direct=1 --output=/dev/null
echo 65536 > $T/buffer_size_kb
for e in block_rq_insert block_rq_issue block_rq_complete; do echo 1 > $T/events/block/$e/enable; done
for r in $(seq 1 ${REPS:-6}); do
 for m in seq rand; do
  rr=read; ww=write; [ $m = rand ] && rr=randread && ww=randwrite
  fio --name=ra $C --rw=$rr --offset=0 --output=/dev/null
  fio --name=wa $C --rw=$ww --offset=64m --output=/dev/null
  cat $DBG/stats > $O/$r-$m-pre.stats
  [ $m = rand ] && { echo > $T/trace; echo 1 > $T/tracing_on; }
  fio --exitall $C --output-format=json --output=$O/$r-$m-rb.json --name=m-read --rw=$rr --offset=0 --startdelay=100ms --name=bg-write --rw=$ww --offset=64m --time_based --runtime=86400
  [ $m = rand ] && { echo 0 > $T/tracing_on; cat $T/trace > $O/$r-$m-rb.trace; }
  cat $DBG/stats > $O/$r-$m-rb.stats
  fio --exitall $C --output=/dev/null --name=m-write --rw=$ww --offset=64m --startdelay=100ms --name=bg-read --rw=$rr --offset=0 --time_based --runtime=86400
  echo "rep $r $m done"
 done
done
