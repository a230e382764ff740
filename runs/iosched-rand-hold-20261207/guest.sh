set -eu
D=/dev/vda; Q=/sys/block/vda/queue; O=$SMARTIO_OUT
DBG=/sys/kernel/debug/block/vda/sched
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
echo none > $Q/scheduler; echo smartio > $Q/scheduler; echo 128 > $Q/nr_requests
C="--ioengine=psync --direct=1 --bs=4k --size=256k --filename=$D"
fio --name=warm --filename=$D --rw=randrw --bs=4k --size=1m --direct=1 --output=/dev/null
for r in $(seq 1 ${REPS:-8}); do
 for m in ${MODES:-rand}; do
  rr=read; ww=write; [ $m = rand ] && rr=randread && ww=randwrite
  fio --name=ra $C --rw=$rr --offset=0 --output-format=json --output=$O/$r-$m-ra.json
  cat $DBG/stats > $O/$r-$m-ra.stats
  fio --name=wa $C --rw=$ww --offset=64m --output-format=json --output=$O/$r-$m-wa.json
  cat $DBG/stats > $O/$r-$m-wa.stats
  fio --exitall $C --output-format=json --output=$O/$r-$m-rb.json --name=m-read --rw=$rr --offset=0 --startdelay=100ms --name=bg-write --rw=$ww --offset=64m --time_based --runtime=86400
  cat $DBG/stats > $O/$r-$m-rb.stats
  fio --exitall $C --output-format=json --output=$O/$r-$m-wb.json --name=m-write --rw=$ww --offset=64m --startdelay=100ms --name=bg-read --rw=$rr --offset=0 --time_based --runtime=86400
  cat $DBG/stats > $O/$r-$m-wb.stats
  echo "rep $r $m done"
 done
done
