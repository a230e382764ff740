set -eu
# 1R1W as StoreBench runs it, two schedulers alternating repeat by repeat (each repeat from a fresh switch).
D=/dev/vda; Q=/sys/block/vda/queue; O=$SMARTIO_OUT
C="--ioengine=psync --direct=1 --bs=4k --size=256k --filename=$D"
fio --name=warm --filename=$D --rw=randrw --bs=4k --size=1m --direct=1 --output=/dev/null
set -- $SCHEDS
for r in $(seq 1 ${REPS:-8}); do
 if [ $((r % 2)) = 1 ]; then order="$1 $2"; else order="$2 $1"; fi
 for s in $order; do
  echo none > $Q/scheduler; echo $s > $Q/scheduler; echo 128 > $Q/nr_requests
  for m in seq rand; do
   rr=read; ww=write; [ $m = rand ] && rr=randread && ww=randwrite
   fio --name=ra $C --rw=$rr --offset=0 --output-format=json --output=$O/$s-$r-$m-ra.json
   fio --name=wa $C --rw=$ww --offset=64m --output-format=json --output=$O/$s-$r-$m-wa.json
   fio --exitall $C --output-format=json --output=$O/$s-$r-$m-rb.json --name=m-read --rw=$rr --offset=0 --startdelay=100ms --name=bg-write --rw=$ww --offset=64m --time_based --runtime=86400
   fio --exitall $C --output-format=json --output=$O/$s-$r-$m-wb.json --name=m-write --rw=$ww --offset=64m --startdelay=100ms --name=bg-read --rw=$rr --offset=0 --time_based --runtime=86400
  done
  echo "rep $r $s done"
 done
done
