"""Build the bisection's side-by-side modules for 6.1 (each loads beside smartio under its own elevator name):
smartio-nopol (sio_select() takes the first request of the most urgent group, no policy), smartio-norec (that, and
finish_request leaves no record), sio-bare-ins (that, and an insertion without the stream table, the writer
and owner bookkeeping and the hint retry), sio-bare (that, and a dispatch without the stream advance, the
write slots and the write-alone sample, and no limit_depth), and dd-mod (6.1's own block/mq-deadline.c built out
of tree, as a module instead of built in).
Usage, from the repository: python3 runs/iosched-cost-bisect-20261207/variants.py OUTDIR [SOURCE]; the run's
variants are of abb9336's module: git show abb9336:kernel/smartio-iosched.c > /tmp/abb9336.c, SOURCE /tmp/abb9336.c
(the default, kernel/smartio-iosched.c, has changed since)."""
import os
import subprocess
import sys
from pathlib import Path

K = Path.home() / ".cache/smartio/kernel/6.1.0-57-6.1.192-3"
HEADERS = K / "headers/usr/src/linux-headers-6.1.0-57-cloud-amd64"
DD_SOURCE = Path(str(K) + "-debug") / "src/linux-source-6.1/block/mq-deadline.c"   # make -C kernel debug unpacks it

NOPOL = """	lockdep_assert_held(&sd->lock);
#ifdef SIO_NOPOL
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		int i;

		if (sio_class_empty(&sd->cls[c]))
			continue;
		for (i = 0; i < SIO_NR_GROUPS; i++) {
			rq = sio_group_head(&sd->cls[c], sio_urgency[i]);
			if (rq)
				return rq;
		}
	}
	return NULL;
#endif
"""
SELECT_AT = ("	lockdep_assert_held(&sd->lock);\n\n	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {\n"
             "		struct sio_class_queue *cq = &sd->cls[c];\n\n		if (sio_class_empty(cq))\n			continue;\n"
             "		if (higher_waiting && aging) {")
# Each (text, guarded by): the bookkeeping the two bare variants leave out.
BARE = (("	seq = sio_classify_seq(sd, rq);\n", "SIO_BARE_INS", "	seq = false;\n"),
        ("		sio_writer_seen(sd, sio_rq_pid(rq), now);\n		rq->elv.priv[1] = sio_owner(rq);\n",
         "SIO_BARE_INS", ""),
        ("	if (dir == SIO_WRITE)\n		sio_hints_retry(sd, start, end, now);\n}\n", "SIO_BARE_INS", "}\n"),
        ("	sio_alone_dispatched(sd, rq, rq->fifo_time);\n", "SIO_BARE_DISP", ""),
        ("	sio_stream_advance(sd, rq);\n", "SIO_BARE_DISP", ""),
        ("		sio_write_out_add(sd, rq);\n", "SIO_BARE_DISP", ""),
        ("	if (op_is_sync(opf) && !op_is_write(opf))\n", "SIO_BARE_DISP", "	return;\n"))
FINISH_AT = "	if (!(flags & SIO_RQ_OWNED))\n		return;\n	sio_rq_set_flags(rq, 0);\n"


def build(d: Path, name: str, source: str, defs: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.c").write_text(source)
    for h in ("sio-callers.h", "sio-compat.h"):
        (d / h).write_text(Path("kernel", h).read_text())
    (d / "Kbuild").write_text(f"obj-m := {name}.o\nccflags-y += -I$(SIO_BLOCK_INC) {defs}\n")
    subprocess.run(["make", "-C", str(HEADERS), f"M={d.resolve()}", f"SIO_BLOCK_INC={K}/private-headers/block",
                    "modules"], check=True, stdout=subprocess.DEVNULL)
    print(d / f"{name}.ko")


def main() -> None:
    out = Path(sys.argv[1])
    src = Path(sys.argv[2] if len(sys.argv) > 2 else "kernel/smartio-iosched.c").read_text()
    assert src.count(SELECT_AT) == 1 and src.count(FINISH_AT) == 1, "kernel/smartio-iosched.c changed: adapt"
    src = src.replace(SELECT_AT, NOPOL + SELECT_AT.split("\n", 1)[1])
    src = src.replace(FINISH_AT, FINISH_AT + "#ifdef SIO_NOREC\n	return;\n#endif\n")
    # Without records nothing completes in the counts: the exit's balance checks (WARN_ONCE) would fail the guest.
    src = src.replace('#include "sio-callers.h"\n', '#include "sio-callers.h"\n#ifdef SIO_NOREC\n#undef WARN_ONCE\n'
                      '#define WARN_ONCE(cond, ...) ((void)(cond))\n#endif\n', 1)
    for text, guard, instead in BARE:
        assert src.count(text) == 1, text
        src = src.replace(text, f"#ifdef {guard}\n{instead}#else\n{text}#endif\n" if instead.strip() != "}" else
                          f"#ifndef {guard}\n{text[:-2]}#endif\n}}\n")
    norec = "-DSIO_NOPOL -DSIO_NOREC"
    for name, defs in (("smartio-nopol", "-DSIO_NOPOL"), ("smartio-norec", norec),
                       ("sio-bare-ins", f"{norec} -DSIO_BARE_INS"),
                       ("sio-bare", f"{norec} -DSIO_BARE_INS -DSIO_BARE_DISP")):
        build(out / name, name, src.replace('.elevator_name = "smartio"', f'.elevator_name = "{name}"'), defs)
    dd = DD_SOURCE.read_text().replace('.elevator_name = "mq-deadline"', '.elevator_name = "dd-mod"')
    build(out / "dd-mod", "dd-mod", dd.replace('\t.elevator_alias = "deadline",\n', ""), "")


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C")
    main()
