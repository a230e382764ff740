#!/bin/bash
# Figure 11 1R1W and the launch headline, the module of HEAD (new) against that of an older commit's worktree in
# /tmp/wt-old (old; 6b733dd for this run), alternating. OUT=DIR to write elsewhere.
set -u
OUT=${OUT:-/tmp/ab-policy}; mkdir -p $OUT
run() {  # side tag args...
	local side=$1 tag=$2; shift 2
	local src=/work/main/src; [ $side = old ] && src=/tmp/wt-old/src
	echo "== $(date +%T) $side $tag" >> $OUT/progress
	PYTHONPATH=$src /work/main/.venv/bin/python -m smartio compare "$@" --out $OUT/$tag-$side > $OUT/$tag-$side.log 2>&1
	echo "   rc=$? $(date +%T)" >> $OUT/progress
}
for i in 1 2 3; do
	for side in new old; do
		[ $i = 2 ] && side=$([ $side = new ] && echo old || echo new)
		run $side fig11-$i slowdown --kernel 6.1 --schedulers smartio --size 256K --repeats 3
	done
done
for i in 1 2; do
	for side in new old; do
		[ $i = 2 ] && side=$([ $side = new ] && echo old || echo new)
		run $side launch-$i launch --kernel 6.1 --schedulers smartio --caches cold --modes real --backgrounds none,seq-write --repeats 3
	done
done
echo "done $(date +%T)" >> $OUT/progress
