set -eu
modprobe null_blk nr_devices=1 irqmode=0 || true
modprobe mq-deadline || true
Q=/sys/block/nullb0/queue
for r in 1 2 3 4; do for nj in 1 2; do for s in mq-deadline smartio; do
echo none > $Q/scheduler; echo $s > $Q/scheduler
fio --name=j --filename=/dev/nullb0 --rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth=32 --numjobs=$nj --runtime=3 --time_based --group_reporting --output-format=terse | awk -F';' -v s=$s -v nj=$nj '{print nj, s, $49}'
done; done; done
