// SPDX-License-Identifier: GPL-2.0
/*
 * SmartIO I/O scheduler for blk-mq (Linux 6.1, 6.12 and newer; x86-64, arm64).
 *
 * Read/write isolation for flash storage, after "SmartIO" (MobiSys'15,
 * Algorithms 6.1 and 6.2) with the quasi-asynchronous I/O boost of "QASIO"
 * (FAST'15). Each rule below names the sysfs tunables (iosched/) that
 * govern it, with unit and default; what the rules measure is recorded in
 * docs/results/.
 *
 *  1. Priority: I/O priority class first (RT > BE > IDLE), so that a
 *     lower class gets only what a higher one leaves; a request of a lower
 *     class that has waited prio_aging_ms is served anyway, so that it
 *     cannot starve. prio_aging_ms: ms, default 10000.
 *  2. Groups: within a class, reads before writes; among writes, boosted
 *     writes (5: a task waits on them) before sync writes before other
 *     async writes; FIFO inside a group. A request that carries a sync bio
 *     counts as sync, because 6.1 merges sync and async writes into one
 *     request and a task waits on its sync part. No tunable.
 *  3. Write slice: a write never waits more than write_slice_ms behind
 *     reads, so that a reader that never pauses cannot starve the writes
 *     (Algorithm 6.1). A random write waits write_slice_rand_ms instead, if
 *     set; a write request larger than write_slice_kb waits that slice per
 *     write_slice_kb of its size at the time, merges included
 *     (sio_slice_ns()). When the slice expires the writes get the device
 *     for a slice of their own, write_window_ms (the chosen queue keeps
 *     dispatching until its time slice ends): writes go first and nothing
 *     is held for a reader, which still gets the device whenever no write
 *     is waiting; with no window, one write goes per expired slice. A
 *     window pays the reader's switching cost once per window, but under a
 *     continuous reader it fixes the writes' share of the device at
 *     window / (slice + window). write_slice_ms: ms, default 100;
 *     write_slice_rand_ms: ms, default 0 (= write_slice_ms);
 *     write_slice_kb: KiB, default 0 (one slice per request, whatever its
 *     size); write_window_ms: ms, default 0 (no window).
 *  4. Dispatch limits: per kind (sequential/random x read/write), a limit
 *     on the requests of that kind in the device that holds only while
 *     another kind is waiting (Algorithm 6.2), so that one kind cannot
 *     fill the device ahead of another. dispatch_limit_seq_read,
 *     dispatch_limit_seq_write, dispatch_limit_rand_read,
 *     dispatch_limit_rand_write: requests, default 0 (no limit).
 *  5. QASIO: kprobes on the kernel's wait points tell the scheduler which
 *     write a task now waits on (D_meta: __lock_buffer and __wait_on_buffer
 *     on a buffer under write; D_sync and D_data: folio_wait_writeback from
 *     an integrity sync, or from anywhere else). A queued write there is
 *     boosted: it goes right after the class's reads, nothing holds it
 *     (6, 7, 10), and its write slice (3) still bounds its wait behind
 *     reads; a write not queued yet (still in a plug) is caught when it is
 *     inserted. A sync write another task submitted is boosted too:
 *     jbd2's commit blocks and other metadata are sync writes, and a task
 *     that waits on one (a launch reading an inode while its buffer is
 *     written) is blocked by a write it did not choose; held for a reader
 *     it would wait up to an anticipation window or a write slice each
 *     time. A task's wait on its own sync write (fsync, jbd2's commit)
 *     boosts nothing: that write is served as any sync write. ext4 on 6.1
 *     issues discards from a worker with submit_bio_wait(), which marks
 *     them REQ_SYNC, so the paper's D_discard case is sync I/O here. The
 *     kprobes are registered once, at module load (sio_init()), and
 *     unregistered at its unload, never in init_sched(): that runs with the
 *     queue frozen, and register_kprobe() allocates, so reclaim waiting on
 *     writeback to that queue would deadlock.
 *     qasio_boost: 0/1, default 1 (boost at all); qasio_meta, qasio_data,
 *     qasio_sync: 0/1, default 1 each (act on that dependency type).
 *  6. Anticipation: after a read completes, writes are held for up to
 *     read_anticipation_us so that a synchronous reader's next read does not
 *     queue behind a write it could not see (the write slice still bounds
 *     the writes' wait). Only writes are held: reads of a lower class still
 *     go, and so do boosted writes, which a task is blocked on.
 *     read_anticipation_us: us, default 3000; 0 = off.
 *  7. Write pacing: while a reader is active (a read queued or in flight,
 *     or completed less than read_anticipation_us or a pace ago), reads
 *     still go first, but a write may go even with reads in flight once
 *     write_pace_us has passed since the last write was dispatched
 *     (write_pace_rand_us after a random write, if set: it fills more of
 *     the buffer and takes longer to program), so that the device's write
 *     buffer never fills and its reads overtake programming. After a write
 *     completes, queued reads are held for read_hold_us (each read at most
 *     that long from its arrival, so reads cannot starve), so that the die
 *     programs that write undisturbed. A writer alone is not paced; boosted
 *     writes never are, and the write slice still bounds the wait. The
 *     rule comes from the device model's read-first optimum
 *     (src/smartio/flashdev/model.py, Policy "read_first"), from which the
 *     profiler sets the pace to 1.5 x the sequential write latency alone
 *     (write_pace_rand_us 1.75 x the random one) and the hold to 0.9 x the
 *     program time. Pacing is for one reader: while two or more tasks read
 *     (each seen inserting or completing a read less than
 *     read_anticipation_us or a pace ago), writes beside them go by their
 *     slice only, as in the model's 4R4W optimum, because paced writes
 *     would otherwise slip into every moment when no read happens to be
 *     queued, which with several readers depends on their round trips, not
 *     on the device. write_pace_us: us, default 0 (off, then 6 applies, or
 *     the learned pace of 13); write_pace_rand_us: us, default 0 (=
 *     write_pace_us); read_hold_us: us, default 0 (off). With
 *     write_pace_us at 0 the other two are not read.
 *  8. Write merges beside a reader: while a reader is active, a write
 *     request grows by merging to at most write_merge_max_kb; with no
 *     reader, writes merge as usual. The pace (7) counts requests and is
 *     sized with the profiler's 4 KiB writes, so a merged write would bring
 *     that many more pages into the device's buffer per pace; and a device
 *     without a command queue (eMMC) cannot even start a read until the
 *     write command before it ends, which for a write larger than its
 *     buffer is when all of it is programmed. The limit cannot split a
 *     large bio, and merges in a task's plug never ask the scheduler.
 *     write_merge_max_kb: KiB, default 0 (no limit).
 *  9. A reader's own writes: a write queued by the task that read last,
 *     while no other task reads, or by either of two reading tasks that
 *     both queue writes too, is held neither by 6, 7 nor 10, and its
 *     completion holds no read. Anticipation, pace and hold keep the device
 *     free for another task's next read; a task that queues its reads and
 *     writes together (fio's mixed workload at queue depth 128, Figure 12)
 *     ordered them itself, and is served best by read-first alone; where
 *     every task reading writes too, no task only reads for a hold to
 *     serve. The write slice (3) still bounds its writes' wait. Tasks are
 *     told apart by pid, i.e. by thread. No tunable of its own.
 * 10. One write at a time beside a recent reader: while a read is queued
 *     or in flight, or one completed less than single_write_ms ago, a
 *     write waits while another write is in the device (of any task),
 *     unless it is the reader's own (9), boosted (5), its slice expired or
 *     a write window is open (3), or it is served by priority aging (1).
 *     Anticipation (6) covers a reader's next read only for
 *     read_anticipation_us; a program's start-up thinks longer between its
 *     reads, and in those gaps a writer with requests to spare (256 KiB
 *     direct writes, writeback) fills the device queue. A device without a
 *     command queue cannot start a read before the write command ahead of
 *     it ends, and a write larger than its buffer ends when programmed: a
 *     read that arrives then waits for every write in the queue; one at a
 *     time, it waits for the rest of one. single_write_ms: ms, default 100;
 *     0 = off.
 * 11. Start-up, after BFQ's weight raising of an application that starts:
 *     a thread group that reads into the page cache for the first time, or
 *     after not reading for startup_ms, starts up, unless another start-up
 *     is on. Direct reads neither begin a start-up nor count as its task
 *     reading: an application loads its code and data through the page
 *     cache, while a direct reader (a database, a benchmark such as
 *     StoreBench's) keeps a cache of its own, and however new, it is the
 *     reader the write pace (7, 13) shares the device with. For
 *     startup_ms from then, while it reads (it is the last task to read and
 *     reads are queued or in flight, or it inserted or completed a read
 *     less than sio_reader_window_ns() ago), a write waits startup_ms
 *     behind reads where its slice (3) is shorter. Writes still go whenever
 *     no read waits and anticipation (6) lets them, one at a time (10);
 *     boosted writes (5) right after the class's reads, as when no slice
 *     has expired. A slice is meant for a reader that never pauses; each
 *     one that expires in a start-up puts a whole write ahead of the
 *     application's next read, and a start-up is short. Writers beside
 *     start-ups that follow one another still get a write per startup_ms.
 *     Tasks are told apart by thread group; SIO_NR_STARTERS of them are
 *     remembered, and one forgotten counts as new. A change of startup_ms
 *     applies to the start-up that is on. While a start-up is on,
 *     anticipation (6), if on, waits startup_anticipation_us where that is
 *     longer than read_anticipation_us, and the start-up's task counts as
 *     reading as long (BFQ idles slice_idle for a raised queue), because a
 *     launch's reads are closed-loop and every gap longer than the window
 *     puts a write in the device, which the next read then waits out.
 *     Paced writes (7, 13) wait for that anticipation as well as their
 *     pace. startup_ms: ms, default 1000; 0 = off. startup_anticipation_us: us,
 *     default 10000; 0 = read_anticipation_us.
 * 12. Holds only where writes slow reads: anticipation (6), pacing and the
 *     read hold (7), one write at a time (10) and a start-up's hold (11)
 *     keep writes off the device for a read, which pays only on a device
 *     where a read beside a write takes longer than alone (an eMMC serving
 *     one command at a time). From its completions the scheduler keeps,
 *     per read kind, the mean service time of reads alone, and how many
 *     reads with a write in flight took twice that; the holds stop when, for
 *     every kind with 16 of each since the last change, under a quarter of
 *     the reads beside writes did, and start again when, for some kind, most
 *     of 32 did.
 *     They apply from the switch to smartio until then. Slices (3),
 *     classes (1), boosting (5) and the dispatch limits (4) always apply.
 *     adaptive: 0 or 1, default 0 (the holds always apply).
 * 13. Learned pacing: while write_pace_us is 0, pacing (7) applies once
 *     the scheduler has seen 16 sequential writes alone (dispatched with
 *     nothing in flight, nothing dispatched before they completed), with
 *     the pace and hold `smartio profile --apply` would set from their mean
 *     service time: pace 1.5 x it (1.75 x a random write's after a random
 *     write, once 16 of those were seen; 3.5 x the sequential one before),
 *     read hold 0.7 x it. Only plain
 *     writes of at most 16 KiB count (not discards, FUA writes or merged
 *     writeback); random is as the pace tells it (not continuing the last
 *     write). Before that, anticipation (6) applies. The mean follows the
 *     device (1/8 per write). The profiler's tunables, once written, take
 *     over. Requests that bypass the scheduler (flushes) are not seen.
 *     In a start-up (11) a paced write waits for anticipation as well.
 *     auto_pace: 0 or 1, default 1 (0: anticipation, 6, applies).
 *
 * Decisions are a small state machine (sio_class_step(): reading,
 * anticipating, write window) over a side-effect free picker (sio_pick()).
 *
 * Locking: sd->lock protects all per-queue state and is taken in task
 * context only, with interrupts on, as mq-deadline takes its own: no
 * interrupt, softirq or timer takes it. A completion or a requeue, which
 * the driver reports from its interrupt, takes no lock (as mq-deadline's and
 * kyber's take none): it leaves a record (struct sio_done) on a lock-free
 * list, and the next dispatch applies the records before it decides
 * (sio_done_apply()), as do a hint and a debugfs read.
 * A timer or a completion that may end a hold reruns the queue without the
 * lock (sio_kick()). The kprobe handlers take the lock where the kernel runs
 * them in the waiting task's context (kprobes on ftrace, as Debian's x86
 * kernels have them), where the probed function may sleep, so no other lock
 * is held. Where a probe fires from int3 instead (no KPROBES_ON_FTRACE), the
 * kernel treats the handler as an NMI: no lock may be taken there and no
 * queue may be run. Such a handler only computes the range and leaves it in
 * a per-CPU buffer; an irq_work hands it to a work item on that CPU, which
 * applies it (sio_hint()).
 *
 * Flush and FUA requests never reach an elevator on 6.1 (the flush machinery
 * inserts them into the hardware queue directly); should one arrive anyway it
 * goes to the head dispatch list, unreordered. From 6.5 a write with FUA or
 * PREFLUSH is the scheduler's (RQF_USE_SCHED): it is sorted, grouped and
 * held like any write of its class, as mq-deadline does, and only what the
 * flush machinery hands back at the head goes to the head dispatch list.
 * What differs between kernels is in sio-compat.h, keyed by feature.
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/blkdev.h>
#include <linux/blk-mq.h>
#include <linux/bio.h>
#include <linux/buffer_head.h>
#include <linux/hrtimer.h>
#include <linux/magic.h>
#include <linux/irq_work.h>
#include <linux/kallsyms.h>
#include <linux/kprobes.h>
#include <linux/llist.h>
#include <linux/sched/mm.h>
#include <linux/pagemap.h>
#include <linux/percpu.h>
#include <linux/rbtree.h>
#include <linux/rculist.h>
#include <linux/sbitmap.h>
#include <linux/slab.h>
#include <linux/seq_file.h>
#include <linux/vmalloc.h>

#include <trace/events/block.h>

#include "elevator.h"
#include "blk.h"
#include "blk-mq.h"
#include "blk-mq-debugfs.h"
#include "blk-mq-sched.h"
#include "sio-compat.h"
#include "sio-callers.h"
#if SIO_HAVE_BLK_MQ_TAG_H
#include "blk-mq-tag.h"
#endif

/* Tunable defaults. */
static const int sio_default_write_slice_ms = 100;	/* write waits <= this behind reads, ms */
static const int sio_default_write_slice_kb;	/* ... per this much of its size, KiB; 0 = per write */
static const int sio_default_write_window_ms;	/* then writes go first for this long, ms; 0 = one write */
static const int sio_default_prio_aging_ms = 10000;	/* class waits <= this behind higher, ms */
static const int sio_default_read_anticipation_us = 3000; /* idle for next read, us; 0 = off */
static const int sio_default_write_pace_us;	/* writes spaced by a reader, us; 0 = off */
static const int sio_default_read_hold_us;	/* reads wait after a write, us; 0 = off */
static const int sio_default_write_merge_max_kb;	/* write merges beside a reader; 0 = no limit */
static const int sio_default_single_write_ms = 100;	/* one write at a time this long after a read, ms; 0 = off */
static const int sio_default_startup_ms = 1000;	/* first cached reads: writes wait this long, ms; 0 = off */
static const int sio_default_startup_anticipation_us = 10000; /* anticipation in a start-up, us; 0 = as others */
static const int sio_default_qasio_boost = 1;		/* 1 = boost writes a task awaits (5) */
static const int sio_default_adaptive;	/* 1 = holds only where writes slow reads (12) */
static const int sio_default_auto_pace = 1;	/* 1 = pace by the writes' service time alone (13) */
static const int sio_default_qasio_dep = 1;		/* per dependency type: 1 = act on it */
static const int sio_default_async_depth_pct = 75;	/* async I/O's share of 2 x device depth, % */
static const int sio_read_reserve_div = 16;	/* 1/16 of the tags (at least 1) only reads may take */

#define SIO_NR_STREAMS		8	/* sequential streams tracked per direction */
#define SIO_SEQ_GAP_SECTORS	64	/* a forward gap this small still counts as sequential */
#define SIO_NR_HINTS		16	/* awaited ranges not queued yet, kept for retry */
#define SIO_HINT_TTL_NS		(500 * NSEC_PER_MSEC) /* how long such a range is retried */
#define SIO_NR_WRITES_OUT	64	/* dispatched writes remembered for the hint lookup */
#define SIO_NR_CALLERS		64	/* folio wait call sites remembered as sync or not */
#define SIO_NR_NMI_HINTS	8	/* per CPU: hints from int3 kprobes awaiting their work */
#define SIO_NR_STARTERS		16	/* thread groups remembered for telling a start-up (11) */

enum sio_class {
	SIO_RT,
	SIO_BE,
	SIO_IDLE,
	SIO_NR_CLASSES,
};

enum sio_dir {
	SIO_READ,
	SIO_WRITE,
	SIO_NR_DIRS,
};

/*
 * A class's FIFOs; sio_urgency[] gives their dispatch order. The writes are
 * the range SIO_G_SYNC_WRITE..SIO_G_ASYNC_WRITE (sio_oldest()).
 */
enum sio_group {
	SIO_G_READ,
	SIO_G_SYNC_WRITE,
	SIO_G_BOOSTED_WRITE,
	SIO_G_ASYNC_WRITE,
	SIO_NR_GROUPS,
};

/* The Concurrency Profiler's four kinds, each with its dispatch limit. */
enum sio_kind {
	SIO_SEQ_READ,
	SIO_SEQ_WRITE,
	SIO_RAND_READ,
	SIO_RAND_WRITE,
	SIO_NR_KINDS,
};

/*
 * Queue-wide phase of Algorithm 6.1. Transitions happen only in
 * sio_class_step() (and a read's arrival or completion for ANTICIPATE):
 *   READ -> ANTICIPATE	a write could go but a reader is active
 *   ANTICIPATE -> READ	a read arrived (hit) or the reader stayed away
 *   READ/ANTICIPATE -> WINDOW	a write starved for its slice (sio_slice_ns)
 *   WINDOW -> READ	write_window_ms is over
 */
enum sio_phase {
	SIO_PH_READ,		/* reads first, writes when no read waits */
	SIO_PH_ANTICIPATE,	/* writes held for a reader's next read */
	SIO_PH_WINDOW,		/* writes first until write_window_end_ns */
};

/* What sio_pick() may take from a class. */
enum sio_pick_mode {
	SIO_PICK_READ,		/* the oldest read */
	SIO_PICK_BOOSTED,	/* the oldest boosted write */
	SIO_PICK_WRITES,	/* boosted, sync, async writes, in that order */
	SIO_PICK_WINDOW,	/* a boosted write, else the oldest write */
};

/* QASIO dependency types (seed 001, section 3). */
enum sio_dep {
	SIO_DEP_META,		/* a task locks a buffer under write */
	SIO_DEP_DATA,		/* a task waits for a folio's writeback outside a sync */
	SIO_DEP_SYNC,		/* fsync & co. wait for a folio's writeback */
	SIO_NR_DEPS,
};

/*
 * Per-request state, kept in rq->elv.priv[0]: flag bits, then the class,
 * group and kind recorded when the request was first inserted, and the
 * request's slot in writes_out[] + 1 while it is a dispatched write, else 0.
 * The upper 32 bits hold the pid of the task that queued it.
 * rq->elv.priv[1] holds the thread group (upper 32 bits) and pid (lower) of
 * the task that allocated it (sio_prepare_request(), in the submitter's
 * context).
 */
#define SIO_RQ_OWNED		BIT(0)	/* inserted through this scheduler */
#define SIO_RQ_QUEUED		BIT(1)	/* on a group FIFO, counted in queued[] */
#define SIO_RQ_DISPATCHED	BIT(2)	/* counted as dispatched once */
#define SIO_RQ_INFLIGHT		BIT(3)	/* owned by the driver, counted in inflight[] */
#define SIO_RQ_MERGED		BIT(4)	/* merged into another request */
#define SIO_RQ_BOOSTED		BIT(5)	/* moved up by a QASIO hint */
#define SIO_RQ_HELD		BIT(6)	/* kept back by write pacing or a read hold */
#define SIO_RQ_CONTIG		BIT(7)	/* starts exactly where a stream ended (the device's sequential) */
#define SIO_RQ_BESIDE_WRITE	BIT(20)	/* a read dispatched while a write was in flight (12) */
#define SIO_RQ_CACHED		BIT(21)	/* a read into the page cache (11) */
#define SIO_RQ_RAND_WRITE	BIT(22)	/* a write dispatched not continuing the last one (its pace, its hold) */
#define SIO_RQ_DUE_HELD		BIT(23)	/* a read held for a random write due (13), counted */
#define SIO_RQ_CLASS_SHIFT	8
#define SIO_RQ_GROUP_SHIFT	12
#define SIO_RQ_KIND_SHIFT	16
#define SIO_RQ_OUT_SHIFT	24
#define SIO_RQ_OUT_MASK		0x7fUL	/* > SIO_NR_WRITES_OUT */
#define SIO_RQ_PID_SHIFT	32	/* the pid that queued it (9); 64-bit only */
#define SIO_RQ_FIELD_MASK	0xfUL

/* Every request ends either merged (never dispatched) or completed. */
struct sio_stats {
	u64 inserted;
	u64 merged;
	u64 dispatched;
	u64 completed;
	u64 boosted;
};

/*
 * Per dependency type: detected = found_queued + found_dispatched +
 * not_found + the ranges still pending in hints[].
 */
struct sio_dep_stats {
	u64 detected;		/* waits on a range of a smartio device */
	u64 found_queued;	/* a queued write held the range (now or on retry) */
	u64 found_dispatched;	/* the write was already on the device */
	u64 not_found;		/* no write of ours came for it in time */
	u64 boosted;		/* queued writes boosted for it */
};

/* A sector range some task waits on that no queued write held yet. */
struct sio_hint {
	sector_t start, end;	/* end == 0: free slot */
	u64 expires_ns;
	enum sio_dep dep;
	pid_t waiter;
};

/*
 * The QASIO log (debugfs qasio_log): what became of each wait and of each
 * boosted write, so a user can see why a boost did or did not help.
 */
#define SIO_NR_QLOG		1024
struct sio_qlog {
	u64 t_ns;
	sector_t start, end;
	pid_t pid;	/* the waiting task; for d and c, the write's submitter */
	u8 dep;
	char what;	/* Q found queued, D dispatched, P parked, R found on retry,
			 * X never found, d boosted write dispatched, c completed */
};

/* A hint from a kprobe that ran as an NMI, for sio_nmi_apply_fn() to apply. */
struct sio_nmi_hint {
	struct request_queue *q;	/* compared with live queues only */
	sector_t start, end;
	enum sio_dep dep;
	const void *owner;		/* a key, never dereferenced */
	pid_t waiter;
};

/* Per CPU; written only by kprobe handlers, which never nest on a CPU. */
struct sio_nmi_buf {
	struct irq_work work;
	struct work_struct apply;	/* queued by the irq_work on its CPU */
	unsigned int n;
	struct sio_nmi_hint h[SIO_NR_NMI_HINTS];
};

/*
 * A completion or a requeue, for the next dispatch to apply
 * (sio_done_apply()): what sio_finish_request() and sio_requeue_request()
 * would have done under the lock, from what they read of the request. One
 * of each per scheduler tag, in the hardware queue's table (sched_data): a
 * tag's next request is dispatched, which applies the record, before it can
 * complete or be requeued and reuse it.
 */
struct sio_done {
	struct llist_node node;
	struct request *rq;		/* identity only (alone_rq): never dereferenced */
	unsigned long flags;		/* sio_rq_flags() then */
	unsigned long who;		/* rq->elv.priv[1] then: pid and thread group */
	u64 done_ns;			/* completion time; 0: not in flight */
	u64 dispatched_ns;		/* rq->fifo_time then */
	sector_t pos;			/* blk_rq_pos() then */
	u8 dir;
	bool read_op;			/* REQ_OP_READ, not zone management */
	bool requeue;
	bool heap;			/* kmalloc'ed: the tag had no record (sio_done_fit()) */
};

struct sio_done_tab {
	unsigned int nr;		/* scheduler tags */
	struct sio_done rec[];		/* 2 per tag: its completion, its requeue */
};

/* A dispatched write, for telling "already on the device" from "not found". */
struct sio_write_out {
	sector_t start, end;	/* end == 0: free slot */
};

/* A task seen reading: at a read's insertion and at its completion. */
struct sio_reader {
	pid_t pid;
	u64 seen_ns;				/* 0: none yet */
	u64 wrote_ns;				/* its last write queued while a reader (9); 0: none */
};

/* A thread group seen reading, for telling a start-up (11). */
struct sio_starter {
	pid_t tgid;
	u64 seen_ns;				/* 0: free slot */
};

/* Requests of one I/O priority class. */
struct sio_class_queue {
	struct list_head fifo[SIO_NR_GROUPS];
	struct rb_root sort[SIO_NR_DIRS];	/* by sector, for merging and hint lookup */
};

/* Per-queue state; one instance per request_queue using smartio. */
struct sio_data {
	spinlock_t lock;			/* task context only; protects all below */
	struct request_queue *q;
	struct list_head node;			/* on sio_queues, for the kprobes (RCU) */
	struct llist_head done;			/* completions and requeues to apply, no lock */
	unsigned int nr_hints;			/* ranges parked in hints[] */
	atomic_t kicks;				/* sio_kick()s: a hold may have ended */
	atomic_long_t done_lost;		/* records that found no memory: a bug if any */

	struct list_head dispatch;		/* at-head and flush requests, served first */
	struct sio_class_queue cls[SIO_NR_CLASSES];
	unsigned int queued[SIO_NR_KINDS];	/* requests waiting on a group FIFO */
	unsigned int inflight[SIO_NR_KINDS];	/* requests dispatched, not yet completed */

	sector_t stream_end[SIO_NR_DIRS][SIO_NR_STREAMS];
	unsigned int stream_next[SIO_NR_DIRS];

	enum sio_phase phase;
	u64 last_write_ns;			/* last dispatch of a write: starvation clock */
	bool last_write_rand;			/* ... and was it a random one (its pace) */
	pid_t last_write_pid;			/* ... and the task that queued it (9) */
	sector_t last_write_end;		/* ... and where it ended */
	u64 write_window_end_ns;		/* WINDOW until then */
	u64 last_read_done_ns;			/* last completion of a read */
	u64 last_write_done_ns;			/* last completion of a write: read hold */
	pid_t last_write_done_pid;		/* ... and the task that queued it (9) */
	bool last_write_done_rand;		/* ... and was it a random one (the hold, 13) */
	struct sio_reader readers[2];		/* the last reader seen, the last other one */
	struct sio_starter starters[SIO_NR_STARTERS];
	pid_t startup_tgid;			/* the thread group starting up (11) ... */
	u64 startup_begin_ns;			/* ... since then (0: none yet) ... */
	u64 startup_seen_ns;			/* ... last seen reading then */
	bool startup_reading;			/* ... and the last to read */
	/*
	 * Reruns the queue when the earliest hold ends: anticipation, a pace,
	 * a read hold, a slice. One timer at the earliest end: a later hold
	 * that ends first moves it, and one that ends later is found again by
	 * the dispatch the timer starts.
	 */
	struct hrtimer timer;
	/*
	 * Everything queued is held and a timer or a completion will rerun
	 * the queue: has_work says no, so blk-mq does not rerun it every
	 * BLK_MQ_BUDGET_DELAY (3 ms) while it waits. Set by a dispatch that
	 * found nothing to send (sio_hold_all()); cleared by whatever may end a
	 * hold: under the lock by an insert or a merge, by sio_kick() without
	 * it (completion, requeue, timer, hint, tunable).
	 */
	bool all_held;
	/*
	 * While a dispatch finds nothing to send: the earliest time a hold it
	 * met ends by itself (a slice, the pace, a reader's window, aging),
	 * for the timer; 0 = none.
	 */
	u64 next_check_ns;
	/*
	 * The clock of the dispatch under way, read once under the lock: the
	 * picker's rules (10) judge by it instead of reading the clock per
	 * candidate, which costs an exit to the hypervisor on some clock
	 * sources.
	 */
	u64 dispatch_ns;
	/*
	 * What the device does to a read beside a write (12), per read kind
	 * (seq, rand), since the holds last changed: the mean service time
	 * (dispatch to completion, ns, over the last SIO_LAT_WEIGHT or so) of
	 * reads alone and how many were seen; how many reads beside a write
	 * were seen and how many of them took SIO_LAT_SLOW times that mean.
	 */
	u64 read_alone_ns[2];
	u32 read_alone_n[2], read_beside_n[2], read_beside_slow[2];
	bool interference;			/* reads beside writes are slower: the holds apply */
	u64 interference_on, interference_off;	/* ... times it turned on and off */
	/*
	 * The mean service time (ns, dispatch to completion, over the last
	 * SIO_LAT_WEIGHT or so) of writes alone, per kind (seq, rand: as the
	 * pace tells them apart), and how many were seen (13); and the write
	 * in flight alone, if one is: dispatched with nothing in flight, and
	 * nothing dispatched since. Kept here, not in the request: on 6.1 a
	 * completion sent to another CPU overwrites rq->fifo_time.
	 */
	u64 write_alone_ns[2];
	u32 write_alone_n[2];
	struct request *alone_rq;
	u64 alone_ns;				/* ... its dispatch */
	bool alone_rand;			/* ... and whether it was random */

	struct sio_hint hints[SIO_NR_HINTS];
	struct sio_qlog *qlog;			/* SIO_NR_QLOG entries; NULL without debugfs */
	unsigned int qlog_next;			/* entries ever logged */
	struct sio_write_out writes_out[SIO_NR_WRITES_OUT];

	/* tunables */
	int write_slice_ms;
	int write_slice_kb;
	int write_slice_rand_ms;
	int write_window_ms;
	int prio_aging_ms;
	int read_anticipation_us;
	int write_pace_us;
	int write_pace_rand_us;
	int read_hold_us;
	int write_merge_max_kb;
	int single_write_ms;
	int startup_ms;
	int startup_anticipation_us;
	int qasio_boost;
	int adaptive;
	int auto_pace;
	int qasio_dep[SIO_NR_DEPS];
	int dispatch_limit[SIO_NR_KINDS];
	unsigned int async_depth;	/* scheduler tags async requests may hold */
	unsigned int sync_write_depth;	/* ... and sync writes */

	/* counters (debugfs) */
	struct sio_stats stats[SIO_NR_CLASSES][SIO_NR_DIRS];
	struct sio_dep_stats dep_stats[SIO_NR_DEPS];
	u64 requeued;
	u64 requeue_merged;			/* requeued requests merged away */
	u64 dropped;				/* freed without dispatch or merge: a bug */
	u64 antic_holds;
	u64 antic_hits;
	u64 antic_expired;
	u64 antic_lower_reads;			/* lower-class reads sent during a hold */
	u64 paced_writes;			/* writes sent at their pace beside a reader */
	u64 pace_delayed;			/* ... of which had waited for it */
	u64 unpaced_writes;			/* writes sent by sio_pace() with no reader */
	u64 own_writes;				/* a reader's own writes, sent unheld (9) */
	u64 held_reads;				/* reads sent after a read hold kept them */
	u64 due_held_reads;			/* ... reads held for a random write due (13) */
	u64 reader_held_writes;			/* writes kept for several readers, not by their pace first */
	u64 owner_boosted;			/* boosted as a waiting task's file's writes */
	u64 write_slice_expired;
	u64 write_windows;			/* write windows opened */
	u64 prio_aged;
	u64 limit_blocked;
	u64 bio_merged;				/* bios merged into queued requests */
	u64 write_merges_refused;		/* write merges refused beside a reader */
	u64 single_write_holds;			/* decisions in which rule 10 alone kept a write back */
	bool single_write_held;			/* ... this one (scratch of sio_dispatch_request) */
	u64 startups;				/* start-ups begun (11) */
	u64 startup_holds;			/* decisions in which a start-up kept a starved write back */
	bool startup_held;			/* ... this one (scratch of sio_dispatch_request) */
	u64 sync_promoted;			/* async requests made sync by a sync bio */
	u64 discard_async;			/* discards inserted without REQ_SYNC */
};

static LIST_HEAD(sio_queues);
static DEFINE_MUTEX(sio_queues_mutex);		/* sio_queues writers, kprobe (un)registration */
static DEFINE_PER_CPU(struct sio_nmi_buf, sio_nmi_bufs);
static atomic_long_t sio_nmi_deferred;		/* hints handed to the irq_work and work */
static atomic_long_t sio_nmi_dropped;		/* ... lost: the CPU's buffer was full */

static const char *const sio_class_names[SIO_NR_CLASSES] = { "rt", "be", "idle" };
static const char *const sio_dir_names[SIO_NR_DIRS] = { "read", "write" };
static const char *const sio_kind_names[SIO_NR_KINDS] = {
	"seq_read", "seq_write", "rand_read", "rand_write",
};

static const char *const sio_group_names[SIO_NR_GROUPS] = {
	"read", "sync_write", "boosted_write", "async_write",
};

static const char *const sio_dep_names[SIO_NR_DEPS] = { "meta", "data", "sync" };

/* Helpers. */

/* Time from @t to @now; 0 if another CPU stored a @t later than our @now. */
static u64 sio_since(u64 now, u64 t)
{
	return now > t ? now - t : 0;
}

static unsigned long sio_rq_flags(struct request *rq)
{
	return (unsigned long)rq->elv.priv[0];
}

static void sio_rq_set_flags(struct request *rq, unsigned long flags)
{
	rq->elv.priv[0] = (void *)flags;
}

static unsigned int sio_rq_field(struct request *rq, int shift)
{
	return (sio_rq_flags(rq) >> shift) & SIO_RQ_FIELD_MASK;
}

static void sio_rq_set_field(struct request *rq, int shift, unsigned int val)
{
	unsigned long flags = sio_rq_flags(rq);

	flags &= ~(SIO_RQ_FIELD_MASK << shift);
	flags |= (unsigned long)val << shift;
	sio_rq_set_flags(rq, flags);
}

static enum sio_class sio_rq_class(struct request *rq)
{
	return sio_rq_field(rq, SIO_RQ_CLASS_SHIFT);
}

static enum sio_group sio_rq_group(struct request *rq)
{
	return sio_rq_field(rq, SIO_RQ_GROUP_SHIFT);
}

static pid_t sio_rq_pid(struct request *rq)
{
	return (pid_t)(u32)(sio_rq_flags(rq) >> SIO_RQ_PID_SHIFT);
}

/*
 * The task that allocated @rq and its thread group, as sio_prepare_request()
 * left them in priv[1].
 */
static pid_t sio_alloc_pid(struct request *rq)
{
	return (pid_t)(u32)(unsigned long)rq->elv.priv[1];
}

static pid_t sio_alloc_tgid(struct request *rq)
{
	return (pid_t)(u32)((unsigned long)rq->elv.priv[1] >> 32);
}

static enum sio_kind sio_rq_kind(struct request *rq)
{
	return sio_rq_field(rq, SIO_RQ_KIND_SHIFT);
}

static enum sio_dir sio_rq_dir(struct request *rq)
{
	return rq_data_dir(rq) == WRITE ? SIO_WRITE : SIO_READ;
}

static enum sio_class sio_ioprio_class(unsigned short ioprio)
{
	switch (IOPRIO_PRIO_CLASS(ioprio)) {
	case IOPRIO_CLASS_RT:
		return SIO_RT;
	case IOPRIO_CLASS_IDLE:
		return SIO_IDLE;
	default:
		return SIO_BE;
	}
}

static bool sio_kind_is_read(enum sio_kind kind)
{
	return kind == SIO_SEQ_READ || kind == SIO_RAND_READ;
}

/* Does any bio of @rq ask for sync (plug and elevator merges mix them)? */
static bool sio_rq_has_sync_bio(struct request *rq)
{
	struct bio *bio;

	if (op_is_sync(rq->cmd_flags))
		return true;
	__rq_for_each_bio(bio, rq)
		if (op_is_sync(bio->bi_opf))
			return true;
	return false;
}

/* The group a request belongs to, from its direction, boost and bios. */
static enum sio_group sio_rq_pick_group(struct request *rq)
{
	if (sio_rq_dir(rq) == SIO_READ)
		return SIO_G_READ;
	if (sio_rq_flags(rq) & SIO_RQ_BOOSTED)	/* a requeued one a task awaits */
		return SIO_G_BOOSTED_WRITE;
	if (sio_rq_has_sync_bio(rq))
		return SIO_G_SYNC_WRITE;
	return SIO_G_ASYNC_WRITE;
}

/*
 * The groups, the most urgent first: reads, then boosted writes (a task
 * waits on them, and sio_class_step() sends them before anything is held),
 * sync writes, async writes. sio_pick() takes writes in this order, and a
 * merge keeps the more urgent group (sio_group_rank()).
 */
static const enum sio_group sio_urgency[SIO_NR_GROUPS] = {
	SIO_G_READ, SIO_G_BOOSTED_WRITE, SIO_G_SYNC_WRITE, SIO_G_ASYNC_WRITE,
};

/* Where @g stands in sio_urgency[], 0 the most urgent. */
static int sio_group_rank(enum sio_group g)
{
	int i;

	for (i = 0; i < SIO_NR_GROUPS - 1; i++)
		if (sio_urgency[i] == g)
			break;
	return i;
}

/* The first request in @root (by start) that overlaps [start, end), or NULL. */
static struct request *sio_rb_first_overlap(struct rb_root *root,
					    sector_t start, sector_t end)
{
	struct rb_node *node = root->rb_node;
	struct request *first = NULL;

	while (node) {
		struct request *rq = rb_entry_rq(node);

		if (blk_rq_pos(rq) + blk_rq_sectors(rq) <= start) {
			node = node->rb_right;
		} else {
			if (blk_rq_pos(rq) < end)
				first = rq;
			node = node->rb_left;
		}
	}
	return first;
}

/*
 * Sequential if it starts where a tracked stream of the same direction ended
 * (or a little after), or where a queued request ends. Records the new end.
 */
static bool sio_classify_seq(struct sio_data *sd, struct request *rq)
{
	enum sio_dir dir = sio_rq_dir(rq);
	sector_t pos = blk_rq_pos(rq);
	bool seq = false, contig = false;
	int i, slot = -1;

	lockdep_assert_held(&sd->lock);

	for (i = 0; i < SIO_NR_STREAMS; i++) {
		sector_t end = sd->stream_end[dir][i];

		if (end && pos >= end && pos - end <= SIO_SEQ_GAP_SECTORS) {
			seq = true;
			contig = pos == end;
			slot = i;
			break;
		}
	}
	if (!seq && pos &&
	    sio_rb_first_overlap(&sd->cls[sio_rq_class(rq)].sort[dir], pos - 1, pos))
		seq = contig = true;
	sio_rq_set_flags(rq, contig ? sio_rq_flags(rq) | SIO_RQ_CONTIG :
			 sio_rq_flags(rq) & ~SIO_RQ_CONTIG);
	if (slot < 0) {
		slot = sd->stream_next[dir];
		sd->stream_next[dir] = (slot + 1) % SIO_NR_STREAMS;
	}
	sd->stream_end[dir][slot] = blk_rq_pos(rq) + blk_rq_sectors(rq);
	return seq;
}

/* Follow a stream forward when a (possibly merged, so larger) request leaves. */
static void sio_stream_advance(struct sio_data *sd, struct request *rq)
{
	enum sio_dir dir = sio_rq_dir(rq);
	sector_t pos = blk_rq_pos(rq), end = pos + blk_rq_sectors(rq);
	int i;

	lockdep_assert_held(&sd->lock);

	for (i = 0; i < SIO_NR_STREAMS; i++) {
		sector_t s = sd->stream_end[dir][i];

		if (s >= pos && s < end) {
			sd->stream_end[dir][i] = end;
			return;
		}
	}
}

static struct sio_stats *sio_rq_stats(struct sio_data *sd, struct request *rq)
{
	return &sd->stats[sio_rq_class(rq)][sio_rq_dir(rq)];
}

/* Take a request off its FIFO, sort tree and merge hash. */
static void sio_remove_request(struct sio_data *sd, struct request *rq)
{
	struct request_queue *q = sd->q;
	unsigned long flags = sio_rq_flags(rq);

	lockdep_assert_held(&sd->lock);

	list_del_init(&rq->queuelist);
	if (!RB_EMPTY_NODE(&rq->rb_node))
		elv_rb_del(&sd->cls[sio_rq_class(rq)].sort[sio_rq_dir(rq)], rq);
	elv_rqhash_del(q, rq);
	if (q->last_merge == rq)
		q->last_merge = NULL;
	if (flags & SIO_RQ_QUEUED) {
		sd->queued[sio_rq_kind(rq)]--;
		sio_rq_set_flags(rq, flags & ~SIO_RQ_QUEUED);
	}
}

/* Move a queued request to the tail of another group's FIFO. */
static void sio_move_to_group(struct sio_data *sd, struct request *rq,
			      enum sio_group group)
{
	lockdep_assert_held(&sd->lock);

	list_move_tail(&rq->queuelist, &sd->cls[sio_rq_class(rq)].fifo[group]);
	sio_rq_set_field(rq, SIO_RQ_GROUP_SHIFT, group);
}

static struct request *sio_group_head(struct sio_class_queue *cq,
				      enum sio_group g)
{
	return list_first_entry_or_null(&cq->fifo[g], struct request, queuelist);
}

static bool sio_class_empty(struct sio_class_queue *cq)
{
	enum sio_group g;

	for (g = 0; g < SIO_NR_GROUPS; g++)
		if (!list_empty(&cq->fifo[g]))
			return false;
	return true;
}

static bool sio_all_empty(struct sio_data *sd)
{
	enum sio_kind k;

	lockdep_assert_held(&sd->lock);

	for (k = 0; k < SIO_NR_KINDS; k++)	/* every request on a FIFO is counted */
		if (sd->queued[k])
			return false;
	return true;
}

/* The oldest request of a class among the given groups. */
static struct request *sio_oldest(struct sio_class_queue *cq,
				  enum sio_group first, enum sio_group last)
{
	struct request *best = NULL, *rq;
	enum sio_group g;

	for (g = first; g <= last; g++) {
		rq = sio_group_head(cq, g);
		if (rq && (!best || rq->fifo_time < best->fifo_time))
			best = rq;
	}
	return best;
}

/* Is a request of another kind waiting, or a reader being anticipated? */
static bool sio_others_waiting(struct sio_data *sd, enum sio_kind kind)
{
	enum sio_kind k;

	lockdep_assert_held(&sd->lock);

	for (k = 0; k < SIO_NR_KINDS; k++)
		if (k != kind && sd->queued[k])
			return true;
	return !sio_kind_is_read(kind) && sd->phase == SIO_PH_ANTICIPATE;
}

static bool sio_single_write_held(struct sio_data *sd, struct request *rq);

/*
 * Algorithm 6.2: a kind at its limit may dispatch more only while no other
 * kind is waiting; a lone kind has no limit.
 */
static bool sio_may_dispatch(struct sio_data *sd, struct request *rq)
{
	enum sio_kind kind = sio_rq_kind(rq);
	int limit = READ_ONCE(sd->dispatch_limit[kind]);

	lockdep_assert_held(&sd->lock);

	if (!limit || sd->inflight[kind] < limit)
		return true;
	return !sio_others_waiting(sd, kind);
}

/*
 * The picker: which request of @cq @mode allows, honouring the dispatch
 * limits. No side effects: *limited counts the
 * requests a limit kept back, for the caller to account.
 */
static struct request *sio_pick(struct sio_data *sd, struct sio_class_queue *cq,
				enum sio_pick_mode mode, unsigned int *limited)
{
	struct request *rq;
	enum sio_group g;
	unsigned int i;

	lockdep_assert_held(&sd->lock);

	switch (mode) {
	case SIO_PICK_READ:
	case SIO_PICK_BOOSTED:
		rq = sio_group_head(cq, mode == SIO_PICK_READ ? SIO_G_READ :
				    SIO_G_BOOSTED_WRITE);
		break;
	case SIO_PICK_WRITES:
		/*
		 * One write at a time beside a recent reader (10): not a limit
		 * of Algorithm 6.2, so not counted in *limited. Windows,
		 * boosted and starved writes never come this way held.
		 */
		for (i = 1; i < SIO_NR_GROUPS; i++) {	/* the writes */
			g = sio_urgency[i];
			rq = sio_group_head(cq, g);
			if (!rq)
				continue;
			if (sio_single_write_held(sd, rq)) {
				sd->single_write_held = true;
				continue;
			}
			if (sio_may_dispatch(sd, rq))
				return rq;
			(*limited)++;
		}
		return NULL;
	case SIO_PICK_WINDOW:
	default:
		rq = sio_group_head(cq, SIO_G_BOOSTED_WRITE);
		if (!rq || !sio_may_dispatch(sd, rq))
			rq = sio_oldest(cq, SIO_G_SYNC_WRITE, SIO_G_ASYNC_WRITE);
		break;
	}
	if (rq && !sio_may_dispatch(sd, rq)) {
		(*limited)++;
		return NULL;
	}
	return rq;
}

static void sio_set_phase(struct sio_data *sd, enum sio_phase phase)
{
	lockdep_assert_held(&sd->lock);

	sd->phase = phase;
}

/*
 * READ <-> ANTICIPATE, when a write could go now: hold it while a read is in
 * flight or one completed less than read_anticipation_us ago. The timer is
 * armed here or, while a read is in flight, by its completion; both under
 * sd->lock, so no completion slips between the check and the arming.
 */
static u64 sio_antic_window_ns(struct sio_data *sd, u64 now);

/*
 * Do the holds apply (12)? Anticipation, pacing and the read hold, one
 * write at a time beside a reader, a start-up's hold: each keeps the device
 * free of writes for a read, which pays only where a write slows a read
 * (an eMMC that serves one command at a time, a UFS device busy programming).
 * With adaptive set they stop when under a quarter of the reads beside a
 * write take SIO_LAT_SLOW times the mean of reads alone, and apply again
 * when most do (without the holds, nearly every read beside a write on an
 * eMMC waits for it): the holds bring a reader to about 1.7
 * times its time alone (Figure 11's SmartIO point), so where writes do not
 * double a read they buy the reader little and cost the writer much.
 * Counted, not averaged, so that a stall of the host weighs one read, not
 * the mean. After a change the counts start
 * again, so that the holds' own effect on the samples (fewer reads beside
 * writes) cannot flip them back and forth. The slices, the classes,
 * boosting and the dispatch limits always apply.
 */
#define SIO_LAT_WEIGHT		8	/* the mean's weight: 1/8 per sample */
#define SIO_LAT_MIN_SAMPLES	16	/* of each, per kind, since the last change */
#define SIO_LAT_SLOW		2	/* a read beside a write this many times the mean alone is slowed */

/* One more sample @ns in the running mean @avg of @n samples (1/SIO_LAT_WEIGHT each; 12, 13). */
static void sio_mean_add(u64 *avg, u32 *n, u64 ns)
{
	*avg = *n ? *avg - div_u64(*avg, SIO_LAT_WEIGHT) + div_u64(ns, SIO_LAT_WEIGHT) : ns;
	if (*n < U32_MAX)
		(*n)++;
}

static bool sio_holds(struct sio_data *sd)
{
	return !READ_ONCE(sd->adaptive) || sd->interference;
}

/* A read of @kind took @ns, @beside a write or alone: learn, and decide. */
static void sio_read_learn(struct sio_data *sd, enum sio_kind kind, bool beside, u64 ns)
{
	int k = kind == SIO_RAND_READ, i;
	bool seen = false, slowed = false, unslowed = true;

	lockdep_assert_held(&sd->lock);

	if (!beside) {
		sio_mean_add(&sd->read_alone_ns[k], &sd->read_alone_n[k], ns);
		return;
	}
	if (!sd->read_alone_n[k] || sd->read_beside_n[k] == U32_MAX)
		return;
	sd->read_beside_n[k]++;
	sd->read_beside_slow[k] += ns > SIO_LAT_SLOW * sd->read_alone_ns[k];
	for (i = 0; i < 2; i++) {
		u64 n = sd->read_beside_n[i], slow = sd->read_beside_slow[i];

		if (sd->read_alone_n[i] < SIO_LAT_MIN_SAMPLES || n < SIO_LAT_MIN_SAMPLES)
			continue;
		seen = true;
		/* most, of twice the samples: a burst of a few slow reads is not a device */
		slowed |= n >= 2 * SIO_LAT_MIN_SAMPLES && 2 * slow > n;
		unslowed &= 4 * slow < n;	/* under a quarter */
	}
	if (!seen || (sd->interference ? !unslowed : !slowed))
		return;
	sd->interference = !sd->interference;
	if (sd->interference)
		sd->interference_on++;
	else
		sd->interference_off++;
	memset(sd->read_alone_n, 0, sizeof(sd->read_alone_n));
	memset(sd->read_beside_n, 0, sizeof(sd->read_beside_n));
	memset(sd->read_beside_slow, 0, sizeof(sd->read_beside_slow));
}

/* Rerun the queue at @when (ns, monotonic) unless the timer fires earlier. */
static void sio_rerun_at(struct sio_data *sd, u64 when)
{
	lockdep_assert_held(&sd->lock);

	if (hrtimer_is_queued(&sd->timer) &&
	    ktime_to_ns(hrtimer_get_expires(&sd->timer)) <= when)
		return;
	hrtimer_start(&sd->timer, ns_to_ktime(when), HRTIMER_MODE_ABS);
}

static bool sio_anticipate(struct sio_data *sd, u64 now)
{
	u64 window = sio_antic_window_ns(sd, now);
	u64 idle;

	lockdep_assert_held(&sd->lock);

	if (!window)
		goto release;
	if (!sd->inflight[SIO_SEQ_READ] && !sd->inflight[SIO_RAND_READ]) {
		if (!sd->last_read_done_ns)
			goto release;
		idle = sio_since(now, sd->last_read_done_ns);
		if (idle >= window)
			goto release;
		sio_rerun_at(sd, sd->last_read_done_ns + window);
	}
	if (sd->phase != SIO_PH_ANTICIPATE) {
		sio_set_phase(sd, SIO_PH_ANTICIPATE);
		sd->antic_holds++;
	}
	return true;

release:
	if (sd->phase == SIO_PH_ANTICIPATE) {
		sio_set_phase(sd, SIO_PH_READ);
		sd->antic_expired++;
	}
	return false;
}

/* A hold met by this dispatch ends by itself at @when (ns, monotonic). */
static void sio_note_check(struct sio_data *sd, u64 when)
{
	lockdep_assert_held(&sd->lock);

	if (!sd->next_check_ns || when < sd->next_check_ns)
		sd->next_check_ns = when;
}

/* Something may end a hold: let has_work see the queue again. Lock held. */
static void sio_unhold(struct sio_data *sd)
{
	lockdep_assert_held(&sd->lock);
	WRITE_ONCE(sd->all_held, false);
}

/*
 * A hold may have ended: rerun the queue, without the lock (completions,
 * requeues, timers, hints, tunables). A dispatch deciding "all held" at the
 * same time sees the count move (sio_hold_all()), or this sees its all_held.
 */
static void sio_kick(struct sio_data *sd)
{
	atomic_inc(&sd->kicks);
	smp_mb__after_atomic();
	WRITE_ONCE(sd->all_held, false);
	blk_mq_run_hw_queues(sd->q, true);
}

/*
 * A dispatch found everything held and a timer or a completion coming:
 * has_work may say no. Unless a kick came since @kicks (the dispatch's
 * start), or a completion left a record since it applied them: then it
 * returns true, for the dispatch to apply them and decide again.
 */
static bool sio_hold_all(struct sio_data *sd, int kicks)
{
	lockdep_assert_held(&sd->lock);

	WRITE_ONCE(sd->all_held, true);
	smp_mb();	/* pairs with sio_kick()'s and with llist_add()'s in sio_done_push() */
	if (atomic_read(&sd->kicks) != kicks) {
		WRITE_ONCE(sd->all_held, false);	/* the kick reruns the queue */
		return false;
	}
	if (!llist_empty(&sd->done)) {
		WRITE_ONCE(sd->all_held, false);
		return true;
	}
	return false;
}

/*
 * Will a timer or a completion rerun the queue? A completion does when a
 * request is in flight (sio_mark_restart()); otherwise only a queued timer.
 * A hold that neither ends is left to blk-mq's periodic rerun.
 */
static bool sio_rerun_coming(struct sio_data *sd)
{
	enum sio_kind k;

	lockdep_assert_held(&sd->lock);

	if (hrtimer_is_queued(&sd->timer))
		return true;
	for (k = 0; k < SIO_NR_KINDS; k++)
		if (sd->inflight[k])
			return true;
	return false;
}

/*
 * Learned pacing (13): with auto_pace on and write_pace_us 0, the pace and
 * the read hold come from the mean service time of a write alone, once
 * SIO_LAT_MIN_SAMPLES sequential or random ones were seen: what `smartio
 * profile --apply` derives from its concurrency run
 * (src/smartio/flashdev/model.py, pacing()), learned from the completions
 * instead. The hold is 0.9 x the page program time, which a write alone does
 * not show by itself; it is taken as SIO_HOLD_PCT of the write's latency, the
 * program's share on s5-emmc's sequential and random writes (147 of 190 us,
 * 314 of 410).
 */
#define SIO_PACE_PCT		150	/* pace after a sequential write, % of its latency alone */
#define SIO_PACE_RAND_PCT	175	/* ... after a random one, % of a random write's */
#define SIO_HOLD_PCT		70	/* the read hold, % of the sequential write latency alone */
#define SIO_HOLD_RAND_PCT	80	/* ... after a random write, % of its latency: all its program */

/* A write's mean service time alone, ns, of kind @k (0 seq, 1 rand); 0 before enough were seen. */
static u64 sio_write_alone_ns(struct sio_data *sd, int k)
{
	return sd->write_alone_n[k] >= SIO_LAT_MIN_SAMPLES ? sd->write_alone_ns[k] : 0;
}

/*
 * A write's service time alone of kind @k (0 seq, 1 rand), ns, for the pace
 * and the hold: its mean once enough were seen, else the other kind's, a
 * random write taken to cost an eMMC twice a sequential one (sio_slice_ns()),
 * so that a writer that only writes at random (a database) or only in
 * sequence is paced by what it shows; 0 before either kind was seen enough.
 */
static u64 sio_write_cost_ns(struct sio_data *sd, int k)
{
	u64 ns = sio_write_alone_ns(sd, k);

	if (ns)
		return ns;
	ns = sio_write_alone_ns(sd, !k);
	return k ? ns * 2 : ns / 2;
}

/* The learned pace after a write of kind @k (0 seq, 1 rand), ns (13); 0 before enough were seen. */
static u64 sio_learned_pace_ns(struct sio_data *sd, int k)
{
	return div_u64(sio_write_cost_ns(sd, k) * (k ? SIO_PACE_RAND_PCT : SIO_PACE_PCT), 100);
}

/* Are writes paced (7): write_pace_us set, or learned (13)? */
static bool sio_pacing(struct sio_data *sd)
{
	if (READ_ONCE(sd->write_pace_us))
		return true;
	return READ_ONCE(sd->auto_pace) && sio_write_cost_ns(sd, 0);
}

/* Is the pace learned (13), not written (write_pace_us)? */
static bool sio_pace_learned(struct sio_data *sd)
{
	return !READ_ONCE(sd->write_pace_us) && sio_pacing(sd);
}

/* The pace after the last write dispatched, ns (write_pace_rand_us after a random one, if set). */
static u64 sio_pace_ns(struct sio_data *sd)
{
	int pace = READ_ONCE(sd->write_pace_us), pace_rand = READ_ONCE(sd->write_pace_rand_us);

	if (pace)
		return (u64)(sd->last_write_rand && pace_rand ? pace_rand : pace) * NSEC_PER_USEC;
	if (!sio_pacing(sd))
		return 0;
	return sio_learned_pace_ns(sd, sd->last_write_rand);
}

/*
 * The read hold after a write of kind @k (0 seq, 1 rand) completed, ns (7);
 * 0 = none. Learned (13), it covers the program of a random write: that one
 * fills an eMMC's write buffer (a read-modify-write of a whole NAND page), so
 * a read that comes before its program is done waits for all of it anyway
 * and makes the device pay a switch besides (s5-emmc, switch_us). Beside a
 * sequential write the buffer keeps room, a read suspends the program, and
 * the hold is 0.9 x the program (SIO_HOLD_PCT).
 */
static u64 sio_read_hold_kind_ns(struct sio_data *sd, int k)
{
	if (READ_ONCE(sd->write_pace_us))
		return (u64)READ_ONCE(sd->read_hold_us) * NSEC_PER_USEC;
	if (!sio_pacing(sd))
		return 0;
	return div_u64(sio_write_cost_ns(sd, k) * (k ? SIO_HOLD_RAND_PCT : SIO_HOLD_PCT), 100);
}

/* The read hold after the last write completed, ns (7). */
static u64 sio_read_hold_ns(struct sio_data *sd)
{
	return sio_read_hold_kind_ns(sd, sd->last_write_done_rand);
}

/*
 * @rq is dispatched at @now: is it a write alone (13)? Only plain writes of
 * at most SIO_ALONE_MAX_BYTES count, the size the pace is for (the
 * profiler's 4 KiB requests, rule 8); not discards, write-zeroes or FUA
 * writes, whose service time is not a write's, nor merged writeback. Any
 * other dispatch ends the one alone. Requests that bypass the scheduler
 * (flushes, passthrough) are not seen.
 */
#define SIO_ALONE_MAX_BYTES	(16 << 10)

static void sio_alone_dispatched(struct sio_data *sd, struct request *rq, u64 now)
{
	int k;

	lockdep_assert_held(&sd->lock);

	sd->alone_rq = NULL;
	for (k = 0; k < SIO_NR_KINDS; k++)
		if (sd->inflight[k])
			return;
	if (req_op(rq) != REQ_OP_WRITE || (rq->cmd_flags & (REQ_FUA | REQ_PREFLUSH)) ||
	    blk_rq_bytes(rq) > SIO_ALONE_MAX_BYTES)
		return;
	sd->alone_rq = rq;
	sd->alone_ns = now;
	/* random as the pace tells: not continuing the last write exactly */
	sd->alone_rand = blk_rq_pos(rq) != sd->last_write_end;
}

/* A write in flight? */
static bool sio_writes_inflight(struct sio_data *sd)
{
	lockdep_assert_held(&sd->lock);

	return sd->inflight[SIO_SEQ_WRITE] || sd->inflight[SIO_RAND_WRITE];
}

/* A read queued or in flight? */
static bool sio_reads_outstanding(struct sio_data *sd)
{
	lockdep_assert_held(&sd->lock);

	return sd->queued[SIO_SEQ_READ] || sd->queued[SIO_RAND_READ] ||
	       sd->inflight[SIO_SEQ_READ] || sd->inflight[SIO_RAND_READ];
}

/*
 * How long a task still counts as a reader after its last read, ns: the
 * anticipation window or the pace, whichever is longer. A synchronous
 * reader's next read can come later than the anticipation window (a TCG
 * guest's round trip between two reads often takes 3-5 ms); judged at the
 * pace's own time scale, a reader between two reads still counts, and a
 * writer alone is paced for at most one pace after the last read.
 */
static u64 sio_reader_window_ns(struct sio_data *sd)
{
	return max_t(u64, (u64)READ_ONCE(sd->read_anticipation_us) * NSEC_PER_USEC,
		     sio_pace_ns(sd));
}

/* Has a start-up begun less than @startup ns ago (11)? */
static bool sio_startup_within(struct sio_data *sd, u64 now, u64 startup)
{
	return sd->startup_begin_ns &&
	       sio_since(now, sd->startup_begin_ns) < startup;
}

/*
 * How long after it was last seen a start-up's task still counts as reading,
 * ns: sio_reader_window_ns(), or startup_anticipation_us where that is longer
 * and anticipation is on.
 */
static u64 sio_startup_window_ns(struct sio_data *sd)
{
	u64 window = sio_reader_window_ns(sd);

	if (!READ_ONCE(sd->read_anticipation_us))
		return window;
	return max_t(u64, window,
		     (u64)READ_ONCE(sd->startup_anticipation_us) * NSEC_PER_USEC);
}

/*
 * Is a start-up on (11): within its startup_ms, its task reading (the last
 * to read, with reads queued or in flight, or seen less than
 * sio_startup_window_ns() ago)?
 */
static bool sio_startup_on(struct sio_data *sd, u64 now)
{
	u64 startup = (u64)READ_ONCE(sd->startup_ms) * NSEC_PER_MSEC;

	lockdep_assert_held(&sd->lock);

	if (!startup || !sio_startup_within(sd, now, startup))
		return false;
	return (sd->startup_reading && sio_reads_outstanding(sd)) ||
	       sio_since(now, sd->startup_seen_ns) < sio_startup_window_ns(sd);
}

/*
 * The anticipation window (6), ns: read_anticipation_us, or while a start-up
 * is on (11) startup_anticipation_us where that is longer. 0: no anticipation.
 */
static u64 sio_antic_window_ns(struct sio_data *sd, u64 now)
{
	u64 window = (u64)READ_ONCE(sd->read_anticipation_us) * NSEC_PER_USEC;
	u64 startup = (u64)READ_ONCE(sd->startup_anticipation_us) * NSEC_PER_USEC;

	if (!sio_holds(sd))
		return 0;
	if (window && startup > window && sio_startup_on(sd, now))
		return startup;
	return window;
}

/*
 * Thread group @tgid reads (11): a start-up begins if it is new or read
 * last startup_ms or more ago, and no other start-up is on. A group not
 * remembered takes the slot seen longest ago.
 */
static void sio_starter_seen(struct sio_data *sd, pid_t tgid, bool cached, u64 now)
{
	u64 startup = (u64)READ_ONCE(sd->startup_ms) * NSEC_PER_MSEC;
	struct sio_starter *st = &sd->starters[0];
	bool starts;
	int i;

	lockdep_assert_held(&sd->lock);

	if (!cached) {
		/* A direct read is no start-up's, nor its task reading. */
		sd->startup_reading = false;
		return;
	}
	if (!startup)
		return;
	for (i = 0; i < SIO_NR_STARTERS; i++) {
		if (sd->starters[i].seen_ns && sd->starters[i].tgid == tgid) {
			st = &sd->starters[i];
			break;
		}
		if (sd->starters[i].seen_ns < st->seen_ns)
			st = &sd->starters[i];
	}
	starts = st->tgid != tgid || !st->seen_ns ||
		 sio_since(now, st->seen_ns) >= startup;
	st->tgid = tgid;
	st->seen_ns = now;
	if (tgid == sd->startup_tgid && sio_startup_within(sd, now, startup)) {
		sd->startup_seen_ns = now;
	} else if (starts && !sio_startup_on(sd, now)) {
		sd->startup_tgid = tgid;
		sd->startup_begin_ns = now;
		sd->startup_seen_ns = now;
		sd->startups++;
	}
	sd->startup_reading = tgid == sd->startup_tgid;
}

/*
 * Called under the lock when task @pid of thread group @tgid inserts a read
 * or one of its reads completes; @cached: a read into the page cache.
 */
static void sio_reader_seen(struct sio_data *sd, pid_t pid, pid_t tgid, bool cached, u64 now)
{
	lockdep_assert_held(&sd->lock);

	if (sd->readers[0].pid != pid) {
		struct sio_reader last = sd->readers[0];

		if (sd->readers[1].pid == pid && sd->readers[1].seen_ns)
			sd->readers[0] = sd->readers[1];
		else
			sd->readers[0].wrote_ns = 0;
		sd->readers[1] = last;
	}
	sd->readers[0].pid = pid;
	sd->readers[0].seen_ns = now;
	sio_starter_seen(sd, tgid, cached, now);
}

/* Task @pid queues a write: if it is one of the readers, it writes too (9). */
static void sio_writer_seen(struct sio_data *sd, pid_t pid, u64 now)
{
	int i;

	lockdep_assert_held(&sd->lock);

	for (i = 0; i < ARRAY_SIZE(sd->readers); i++)
		if (sd->readers[i].seen_ns && sd->readers[i].pid == pid)
			sd->readers[i].wrote_ns = now;
}

/*
 * When a second task stops counting as a reader: the last reader other than
 * the latest was seen less than sio_reader_window_ns() ago. Returns 0 when
 * fewer than two tasks read.
 */
static u64 sio_several_readers_end(struct sio_data *sd, u64 now)
{
	u64 end = sd->readers[1].seen_ns + sio_reader_window_ns(sd);

	lockdep_assert_held(&sd->lock);

	if (!sd->readers[1].seen_ns)	/* sio_reader_seen(): never the latest's pid */
		return 0;
	return now < end ? end : 0;
}

/*
 * Is @pid a reader's own (9): the task that read last, with no other task
 * reading, or one of two tasks reading that both write too? Holding the
 * write of a task that reads and writes holds a reader, and when every
 * task reading writes there is no reader that the hold would serve (two
 * fio jobs of a 70/30 mix, each job's writes held for the other's reads,
 * would hold both).
 */
static bool sio_own_task(struct sio_data *sd, pid_t pid, u64 now)
{
	u64 window;
	int i;

	lockdep_assert_held(&sd->lock);

	if (!sd->readers[0].seen_ns)
		return false;
	if (!sio_several_readers_end(sd, now))
		return pid == sd->readers[0].pid;
	window = sio_reader_window_ns(sd);
	for (i = 0; i < ARRAY_SIZE(sd->readers); i++)
		if (!sd->readers[i].wrote_ns || sio_since(now, sd->readers[i].wrote_ns) >= window)
			return false;
	return pid == sd->readers[0].pid || pid == sd->readers[1].pid;
}

/* A read queued or in flight, or one completed less than @window ns ago? */
static bool sio_read_within(struct sio_data *sd, u64 now, u64 window)
{
	lockdep_assert_held(&sd->lock);

	if (sio_reads_outstanding(sd))
		return true;
	return sd->last_read_done_ns &&
	       sio_since(now, sd->last_read_done_ns) < window;
}

/* A read queued or in flight, or one completed less than sio_reader_window_ns() ago? */
static bool sio_reader_active(struct sio_data *sd, u64 now)
{
	return sio_read_within(sd, now, sio_reader_window_ns(sd));
}

/*
 * Must write @rq wait for the write in the device (10)? Only beside a recent
 * reader, and never a reader's own, a boosted write, in a write window or
 * (sio_starved_write(), dispatched past the limits) one whose slice
 * expired: a window is the writes' time, nothing is held for a reader. The
 * completion of the write in flight reruns the queue (sio_mark_restart()).
 */
static bool sio_single_write_held(struct sio_data *sd, struct request *rq)
{
	u64 recent = (u64)READ_ONCE(sd->single_write_ms) * NSEC_PER_MSEC;
	u64 now = sd->dispatch_ns;

	lockdep_assert_held(&sd->lock);

	if (!recent || !sio_holds(sd) || sio_rq_dir(rq) != SIO_WRITE || sd->phase == SIO_PH_WINDOW ||
	    (sio_rq_flags(rq) & SIO_RQ_BOOSTED) ||
	    !sio_writes_inflight(sd))
		return false;
	return sio_read_within(sd, now, recent) &&
	       !sio_own_task(sd, sio_rq_pid(rq), now);
}

/*
 * May write request @rq grow by @bytes through a merge (8)? Callers ask
 * only about a partner the block layer would merge (adjacent, same op), so
 * refusals count real merges. Merges run under the lock: in sio_bio_merge()
 * (bio merges and the request merges after them) and sio_insert_request().
 */
static bool sio_write_merge_ok(struct sio_data *sd, struct request *rq,
			       unsigned int bytes)
{
	u64 max = (u64)READ_ONCE(sd->write_merge_max_kb) << 10;

	lockdep_assert_held(&sd->lock);

	if (!max || req_op(rq) != REQ_OP_WRITE ||
	    (u64)blk_rq_bytes(rq) + bytes <= max ||
	    !sio_reader_active(sd, ktime_get_ns()))
		return true;
	sd->write_merges_refused++;
	return false;
}

/* May request @front take in @back, which starts where it ends (8)? */
static bool sio_requests_merge_ok(struct sio_data *sd, struct request *front,
				  struct request *back)
{
	return req_op(front) != req_op(back) ||
	       sio_write_merge_ok(sd, front, blk_rq_bytes(back));
}

/*
 * An insert merge appends @rq to a queued request that ends where @rq starts
 * (elv_attempt_insert_merge()); with such a write queued, may it (8)? Only a
 * write of @rq's own class can take it: requests of different I/O priorities
 * never merge, so an adjacent write of another class must not decide.
 */
static bool sio_insert_merge_ok(struct sio_data *sd, struct request *rq)
{
	sector_t pos = blk_rq_pos(rq);
	struct request *prev;

	/* No limit (the default): no need to find the partner, a tree walk per write. */
	if (!READ_ONCE(sd->write_merge_max_kb) || req_op(rq) != REQ_OP_WRITE ||
	    !rq_mergeable(rq) || !pos)
		return true;
	prev = sio_rb_first_overlap(&sd->cls[sio_rq_class(rq)].sort[SIO_WRITE],
				    pos - 1, pos);
	if (prev && req_op(prev) == REQ_OP_WRITE &&
	    blk_rq_pos(prev) + blk_rq_sectors(prev) == pos)
		return sio_requests_merge_ok(sd, prev, rq);
	return true;
}

/*
 * The end of the hold a random write in flight puts on read @rq (13), or 0.
 * A read that reaches the die after that write took its place in the write
 * buffer waits for its whole program (sio_read_hold_kind_ns()); it reaches
 * the die about a third of its service time alone after its dispatch (its
 * command's front end: 66 of 187 us for s5-emmc's random read). So a read
 * queued when the write is due (its learned service time alone after its
 * dispatch) in less than that is held as if the write had completed then.
 * The read's time alone is rule 12's mean of its kind (or of the other kind),
 * which outlives the sample counts rule 12 restarts. Learned pacing only: the
 * profiler's read_hold_us counts from completions.
 */
static u64 sio_write_due_hold_end(struct sio_data *sd, struct request *rq, u64 now)
{
	int k = sio_rq_kind(rq) == SIO_RAND_READ;
	u64 read = sd->read_alone_ns[k] ?: sd->read_alone_ns[!k];
	u64 due;

	lockdep_assert_held(&sd->lock);

	if (!sio_pace_learned(sd) || !sd->last_write_rand || !read ||
	    sd->last_write_done_ns >= sd->last_write_ns ||
	    !sio_writes_inflight(sd) ||
	    sio_own_task(sd, sd->last_write_pid, now))
		return 0;
	due = sd->last_write_ns + sio_write_cost_ns(sd, 1);
	if (rq->fifo_time + div_u64(read, 3) < due)
		return 0;
	if (!(sio_rq_flags(rq) & SIO_RQ_DUE_HELD)) {
		sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_DUE_HELD);
		sd->due_held_reads++;
	}
	return due + sio_read_hold_kind_ns(sd, 1);
}

/*
 * When the read hold ends, or 0 if no queued read is held: with pacing on,
 * reads wait the hold (sio_read_hold_ns()) after a write completed, so the
 * device programs it undisturbed, but no read waits for holds longer than
 * that from its arrival.
 */
static u64 sio_read_hold_end(struct sio_data *sd, u64 now)
{
	struct request *first = NULL;
	enum sio_class c;
	u64 end = 0, hold;

	lockdep_assert_held(&sd->lock);

	if (!sd->queued[SIO_SEQ_READ] && !sd->queued[SIO_RAND_READ])	/* no read to hold */
		return 0;
	hold = sio_read_hold_ns(sd);
	if (!hold || !sio_holds(sd))
		return 0;
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		struct request *rq = sio_group_head(&sd->cls[c], SIO_G_READ);

		if (rq && (!first || rq->fifo_time < first->fifo_time))
			first = rq;
	}
	if (!first)
		return 0;
	if (sd->last_write_done_ns && !sio_own_task(sd, sd->last_write_done_pid, now))
		end = min(sd->last_write_done_ns, first->fifo_time) + hold;
	end = max(end, sio_write_due_hold_end(sd, first, now));
	return now < end ? end : 0;
}

/*
 * Must paced write @rq wait for a start-up's next read (11)? While a
 * start-up is on, anticipation holds it for the start-up's anticipation
 * window, as it holds an unpaced write, so that pacing does not put a write
 * in every gap of a launch's closed-loop reads. Never a reader's own write;
 * the write's slice still bounds the wait (sio_starved_write(), at least
 * startup_ms in a start-up).
 */
static bool sio_startup_anticipated(struct sio_data *sd, struct request *rq, u64 now)
{
	lockdep_assert_held(&sd->lock);

	return sio_startup_on(sd, now) && !(rq && sio_own_task(sd, sio_rq_pid(rq), now)) &&
	       sio_anticipate(sd, now);
}

/*
 * Write pacing, in place of anticipation when write_pace_us is set or a
 * pace was learned (13): beside an active reader a write goes once the pace
 * (sio_pace_ns()) has passed since the last write was dispatched, reads in
 * flight or held or not (the device model's read-first policy; holding it
 * for held reads too turned its 1R1W seq 1.70/1.50 into 1.50/1.70). A
 * writer alone goes at full speed. In a start-up (11) anticipation holds
 * the write as well (sio_startup_anticipated()). Returns the write to send,
 * or NULL with *hold set.
 */
static struct request *sio_pace(struct sio_data *sd, struct sio_class_queue *cq,
				u64 now, bool *hold, unsigned int *limited)
{
	u64 end = sd->last_write_ns + sio_pace_ns(sd);
	unsigned int picked_limited = 0;
	unsigned long flags;
	struct request *rq;
	u64 several;

	lockdep_assert_held(&sd->lock);

	/* Picked while anticipating, which counts as others waiting (4): again after. */
	rq = sio_pick(sd, cq, SIO_PICK_WRITES, &picked_limited);
	if (sio_startup_anticipated(sd, rq, now)) {
		*limited += picked_limited;
		*hold = true;
		return NULL;
	}
	if (sd->phase == SIO_PH_ANTICIPATE) {
		sio_set_phase(sd, SIO_PH_READ);
		sd->antic_expired++;	/* holds = hits + expired */
		rq = sio_pick(sd, cq, SIO_PICK_WRITES, limited);
	} else {
		*limited += picked_limited;
	}
	if (!rq)
		return NULL;
	if (!sio_reader_active(sd, now)) {
		sd->unpaced_writes++;
		return rq;
	}
	if (sio_own_task(sd, sio_rq_pid(rq), now)) {
		sd->own_writes++;
		return rq;
	}
	flags = sio_rq_flags(rq);
	several = sio_several_readers_end(sd, now);
	if (several) {
		/* Several readers: the write goes by its slice (7). */
		if (!(flags & SIO_RQ_HELD))
			sd->reader_held_writes++;
		sio_rq_set_flags(rq, flags | SIO_RQ_HELD);
		if (!sio_reads_outstanding(sd))
			sio_rerun_at(sd, several);
		*hold = true;
		return NULL;
	}
	if (now >= end) {
		sd->paced_writes++;
		if (flags & SIO_RQ_HELD)
			sd->pace_delayed++;
		return rq;
	}
	sio_rq_set_flags(rq, flags | SIO_RQ_HELD);
	sio_rerun_at(sd, end);
	/* The reader may stop counting as one first: the write goes unpaced then. */
	if (!sio_reads_outstanding(sd) && sd->last_read_done_ns)
		sio_note_check(sd, sd->last_read_done_ns + sio_reader_window_ns(sd));
	*hold = true;
	return NULL;
}

/*
 * How long @rq may wait behind reads: write_slice_rand_ms for a random write
 * (one that does not continue a stream exactly, as the device tells
 * sequential writes), if set, else write_slice_ms. A random write costs the
 * device about twice a sequential one; with a slice of the same number of
 * its own write times, readers keep the same share of the device (the model's
 * 4R4W optimum, smartio.flashdev.model).
 *
 * A request larger than write_slice_kb waits that slice per write_slice_kb
 * it carries (0 = per request, whatever its size): beside readers that never
 * pause, writers get one request per slice if it is no larger than
 * write_slice_kb, else write_slice_kb per slice on average, instead of one
 * request of any size. Discards and zeroing writes wait one slice: their
 * size is a range, not data the device must program. A 128 KiB write
 * keeps an eMMC from reads for several 4 KiB writes' time, and one is what
 * goes when a slice expires in the middle of an application's start-up.
 */
static u64 sio_slice_ns(struct sio_data *sd, struct request *rq)
{
	int slice_rand = READ_ONCE(sd->write_slice_rand_ms);
	u64 per_kb = (u64)READ_ONCE(sd->write_slice_kb) << 10;
	u64 bytes = blk_rq_bytes(rq);
	u64 slice_us;

	if (slice_rand && !(sio_rq_flags(rq) & SIO_RQ_CONTIG))
		slice_us = (u64)slice_rand * USEC_PER_MSEC;
	else
		slice_us = (u64)READ_ONCE(sd->write_slice_ms) * USEC_PER_MSEC;
	/* <= 6e7 us x 4 GiB: no overflow */
	if (per_kb && bytes > per_kb && req_op(rq) == REQ_OP_WRITE)
		slice_us = div64_u64(slice_us * bytes, per_kb);
	return slice_us * NSEC_PER_USEC;
}

/*
 * How long write @rq has waited behind reads: since the later of its arrival
 * and the last write dispatch.
 */
static u64 sio_write_waited_ns(struct sio_data *sd, struct request *rq, u64 now)
{
	return sio_since(now, max(rq->fifo_time, sd->last_write_ns));
}

/* When @rq's slice ends, if no write is dispatched before. */
static u64 sio_slice_end(struct sio_data *sd, struct request *rq)
{
	return max(rq->fifo_time, sd->last_write_ns) + sio_slice_ns(sd, rq);
}

/*
 * A write whose slice has expired: a boosted one first, then of the sync and
 * async group heads the older (a small sync write behind a large async one
 * has the shorter slice), or NULL. In a start-up a slice is at least
 * startup_ms (11), except a boosted write's.
 */
static struct request *sio_starved_write(struct sio_data *sd,
					 struct sio_class_queue *cq, u64 now)
{
	struct request *boosted = sio_group_head(cq, SIO_G_BOOSTED_WRITE);
	struct request *a = sio_group_head(cq, SIO_G_SYNC_WRITE);
	struct request *b = sio_group_head(cq, SIO_G_ASYNC_WRITE);
	u64 startup = (u64)READ_ONCE(sd->startup_ms) * NSEC_PER_MSEC;
	struct request *rq = NULL;
	u64 end, end_a;

	/*
	 * A boosted write's slice bounds it as any write's does: reads go
	 * before the boosted group, and a task waits on it (5), so without this
	 * a reader that keeps its FIFO full would keep that task in D state.
	 * Nothing holds it for a start-up either. A slice is at least 1 ms:
	 * it is over when now reaches its end.
	 */
	if (boosted) {
		end = sio_slice_end(sd, boosted);
		if (now >= end)
			return boosted;
		sio_note_check(sd, end);
	}
	if (a && b && b->fifo_time < a->fifo_time)
		swap(a, b);
	end_a = a ? sio_slice_end(sd, a) : 0;
	if (a && now >= end_a) {
		rq = a;
	} else if (b) {
		end = sio_slice_end(sd, b);
		if (now >= end)
			rq = b;
		else
			sio_note_check(sd, end);
	}
	if (!rq && a)
		sio_note_check(sd, end_a);
	/* The later head has waited no longer: a start-up holds it too (11). */
	if (rq && sio_holds(sd) && sio_startup_on(sd, now) &&
	    sio_write_waited_ns(sd, rq, now) < startup) {
		sd->startup_held = true;
		return NULL;
	}
	return rq;
}

/*
 * The phase state machine, evaluated for one class; all transitions of
 * Algorithm 6.1 happen here. The clock of a write's slice starts at the later
 * of its arrival and the last write dispatch, so it fires only when reads (or
 * anticipation) kept every write off the device for a whole slice. Returns
 * NULL with *hold set when writes are held for an anticipated read or for
 * their pace. With @reads_held no read of the class goes (sio_read_hold_end).
 */
static struct request *sio_class_step(struct sio_data *sd,
				      struct sio_class_queue *cq, u64 now,
				      bool reads_held, bool *hold)
{
	u64 window = (u64)READ_ONCE(sd->write_window_ms) * NSEC_PER_MSEC;
	struct request *starved, *rq = NULL;
	unsigned int limited = 0, picked_limited = 0;
	enum sio_phase phase;

	lockdep_assert_held(&sd->lock);

	if (sd->phase == SIO_PH_WINDOW && now >= sd->write_window_end_ns)
		sio_set_phase(sd, SIO_PH_READ);

	if (!sio_group_head(cq, SIO_G_SYNC_WRITE) &&
	    !sio_group_head(cq, SIO_G_BOOSTED_WRITE) &&
	    !sio_group_head(cq, SIO_G_ASYNC_WRITE)) {
		if (!reads_held)
			rq = sio_pick(sd, cq, SIO_PICK_READ, &limited);
		goto out;
	}
	if (sd->phase == SIO_PH_WINDOW) {
		rq = sio_pick(sd, cq, SIO_PICK_WINDOW, &limited);
		if (rq)
			goto out;
	}
	starved = sio_starved_write(sd, cq, now);
	if (starved) {
		sd->write_slice_expired++;
		if (window) {
			sio_set_phase(sd, SIO_PH_WINDOW);
			sd->write_window_end_ns = now + window;
			sd->write_windows++;
		}
		/* Past the dispatch limits; a boosted write first. */
		rq = sio_group_head(cq, SIO_G_BOOSTED_WRITE) ?: starved;
		goto out;
	}
	if (!reads_held) {
		rq = sio_pick(sd, cq, SIO_PICK_READ, &limited);
		if (rq)
			goto out;
	}
	if (sd->phase != SIO_PH_WINDOW) {
		/* A task is blocked on a boosted write: never hold it. */
		rq = sio_pick(sd, cq, SIO_PICK_BOOSTED, &limited);
		if (rq)
			goto out;
		if (sio_pacing(sd) && sio_holds(sd)) {
			rq = sio_pace(sd, cq, now, hold, &limited);
			goto out;
		}
		rq = sio_pick(sd, cq, SIO_PICK_WRITES, &picked_limited);
		if (rq && sio_own_task(sd, sio_rq_pid(rq), now)) {
			if (sd->phase == SIO_PH_ANTICIPATE) {
				sio_set_phase(sd, SIO_PH_READ);
				sd->antic_expired++;	/* holds = hits + expired */
			}
			sd->own_writes++;
			limited += picked_limited;
			goto out;
		}
		phase = sd->phase;
		if (sio_anticipate(sd, now)) {
			*hold = true;
			rq = NULL;
			goto out;
		}
		/* The pick stands unless anticipation ended, which lifts its limits (4). */
		if (sd->phase == phase) {
			limited += picked_limited;
			goto out;
		}
	}
	rq = sio_pick(sd, cq, SIO_PICK_WRITES, &limited);
out:
	sd->limit_blocked += limited;
	return rq;
}

/*
 * Pick the next request: aged lower classes first, then class by class.
 * While a class holds its writes for its reader, lower classes may still
 * send reads (the device is idle for writes only). A read hold holds the
 * reads of every class; the queue is rerun when it ends.
 */
static struct request *sio_select(struct sio_data *sd, u64 now)
{
	u64 aging = (u64)READ_ONCE(sd->prio_aging_ms) * NSEC_PER_MSEC;
	u64 hold_end = sio_read_hold_end(sd, now);
	bool higher_waiting = false, hold = false;
	unsigned int limited = 0;
	struct request *rq = NULL;	/* every FIFO may be empty: has_work looked without the lock */
	enum sio_class c;

	lockdep_assert_held(&sd->lock);

	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		struct sio_class_queue *cq = &sd->cls[c];

		if (sio_class_empty(cq))
			continue;
		if (higher_waiting && aging) {
			rq = sio_oldest(cq, 0, SIO_NR_GROUPS - 1);
			if (sio_since(now, rq->fifo_time) >= aging) {
				sd->prio_aged++;
				return rq;
			}
			sio_note_check(sd, rq->fifo_time + aging);
			rq = NULL;
		}
		higher_waiting = true;
	}

	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		struct sio_class_queue *cq = &sd->cls[c];

		if (sio_class_empty(cq))
			continue;
		if (!hold) {
			rq = sio_class_step(sd, cq, now, hold_end != 0, &hold);
		} else if (!hold_end) {
			rq = sio_pick(sd, cq, SIO_PICK_READ, &limited);
			if (rq)
				sd->antic_lower_reads++;
		}
		if (rq)
			break;
	}
	sd->limit_blocked += limited;
	if (hold_end) {
		for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
			struct request *held = sio_group_head(&sd->cls[c], SIO_G_READ);

			if (held)
				sio_rq_set_flags(held, sio_rq_flags(held) | SIO_RQ_HELD);
		}
		sio_rerun_at(sd, hold_end);
	}
	return rq;
}

/* QASIO. */

static void sio_qlog_add(struct sio_data *sd, char what, sector_t start,
			 sector_t end, enum sio_dep dep, pid_t pid, u64 now)
{
	lockdep_assert_held(&sd->lock);

	if (sd->qlog)
		sd->qlog[sd->qlog_next++ % SIO_NR_QLOG] =
			(struct sio_qlog){ now, start, end, pid, dep, what };
}

static void sio_rq_set_out(struct request *rq, unsigned long slot)
{
	sio_rq_set_flags(rq, (sio_rq_flags(rq) &
			      ~(SIO_RQ_OUT_MASK << SIO_RQ_OUT_SHIFT)) |
			     slot << SIO_RQ_OUT_SHIFT);
}

/*
 * The owner of a queued write: the mapping of the folio of its first page (a
 * page under writeback, pinned by the bio), as a key only: the page where the
 * bio's iterator starts (a split or cloned bio starts inside its vector), and
 * its folio's mapping, since a large folio's tail pages carry none. A file's writeback goes out
 * in several requests, and ext4 ends the writeback of all their pages
 * together (one io_end), so a task waiting on one page waits for all. Read
 * when a hint asks (sio_boost_owner()), not at each insertion: the struct
 * page is a cache miss on every write, and hints are rare.
 */
static void *sio_owner(struct request *rq)
{
	struct bio *bio = rq->bio;

	if (!bio || !bio_has_data(bio) || !bio->bi_io_vec)
		return NULL;
	return READ_ONCE(page_folio(bio_page(bio))->mapping);
}

/*
 * Is read @rq one for the page cache (11): an application loading its code
 * and data by faults and readahead? Told by what it is not: a direct read
 * fills a task's own memory (pinned user pages from 6.5; anonymous, shmem
 * or hugetlb folios), as a database or a benchmark does, which keeps a cache
 * of its own and is no start-up, however new the task; a swap-in's folio is
 * swap-backed too. Everything else is the kernel reading for a file: a
 * file's folio, or its own pages where a file system decompresses (EROFS,
 * squashfs) or buffers metadata, or dm-verity its hashes. A slab page's
 * mapping field holds slab data, so it is tested first.
 */
static bool sio_read_cached(struct request *rq)
{
	struct bio *bio = rq->bio;
	struct folio *folio;

	if (!bio || !bio_has_data(bio) || !bio->bi_io_vec)
		return false;
#if SIO_HAVE_BIO_PAGE_PINNED
	if (bio_flagged(bio, BIO_PAGE_PINNED))
		return false;
#endif
	folio = page_folio(bio_page(bio));
	if (folio_test_slab(folio))
		return true;
	return !folio_test_anon(folio) && !folio_test_swapbacked(folio) && !folio_test_hugetlb(folio);
}

/* Remember a dispatched write until it completes (slot in the flags). */
static void sio_write_out_add(struct sio_data *sd, struct request *rq)
{
	int i;

	lockdep_assert_held(&sd->lock);

	sio_rq_set_out(rq, 0);
	for (i = 0; i < SIO_NR_WRITES_OUT; i++) {
		struct sio_write_out *w = &sd->writes_out[i];

		if (!w->end) {
			w->start = blk_rq_pos(rq);
			w->end = w->start + max(blk_rq_sectors(rq), 1U);
			sio_rq_set_out(rq, i + 1);
			return;
		}
	}
}

/* @slot: sio_rq_out() of a write that left the device (0: it had none). */
static void sio_write_out_free(struct sio_data *sd, unsigned long slot)
{
	lockdep_assert_held(&sd->lock);

	if (slot)
		sd->writes_out[slot - 1].end = 0;
}

static bool sio_write_out_find(struct sio_data *sd, sector_t start, sector_t end)
{
	int i;

	lockdep_assert_held(&sd->lock);

	for (i = 0; i < SIO_NR_WRITES_OUT; i++) {
		struct sio_write_out *w = &sd->writes_out[i];

		if (w->end && w->start < end && start < w->end)
			return true;
	}
	return false;
}

/* Completions and requeues, applied under the lock. */

static unsigned int sio_flags_field(unsigned long flags, int shift)
{
	return (flags >> shift) & SIO_RQ_FIELD_MASK;
}

/* What sio_finish_request() or sio_requeue_request() left in @d. */
static void sio_done_one(struct sio_data *sd, const struct sio_done *d)
{
	unsigned long flags = d->flags;
	enum sio_kind kind = sio_flags_field(flags, SIO_RQ_KIND_SHIFT);
	unsigned long slot = (flags >> SIO_RQ_OUT_SHIFT) & SIO_RQ_OUT_MASK;
	pid_t pid = (pid_t)(u32)(flags >> SIO_RQ_PID_SHIFT);
	u64 done = d->done_ns;

	lockdep_assert_held(&sd->lock);

	if (d->requeue) {
		sd->inflight[kind]--;
		if (d->rq == sd->alone_rq)
			sd->alone_rq = NULL;
		sio_write_out_free(sd, slot);
		sd->requeued++;
		return;
	}
	if (flags & SIO_RQ_INFLIGHT) {
		sd->inflight[kind]--;
		if (flags & SIO_RQ_BOOSTED) {
			/*
			 * A completed request has no sectors left: its range
			 * is the one its dispatch remembered, if a slot was
			 * free then.
			 */
			sector_t start = d->pos, end = d->pos;

			if (slot) {
				start = sd->writes_out[slot - 1].start;
				end = sd->writes_out[slot - 1].end;
			}
			sio_qlog_add(sd, 'c', start, end, SIO_NR_DEPS, pid, done);
		}
		sio_write_out_free(sd, slot);
		if (!sio_kind_is_read(kind)) {
			/* records of two CPUs may come in either order */
			sd->last_write_done_ns = max(sd->last_write_done_ns, done);
			sd->last_write_done_pid = pid;
			sd->last_write_done_rand = flags & SIO_RQ_RAND_WRITE;
			if (d->rq == sd->alone_rq) {
				sd->alone_rq = NULL;
				if (done >= sd->alone_ns && done - sd->alone_ns < 60 * NSEC_PER_SEC)
					sio_mean_add(&sd->write_alone_ns[sd->alone_rand],
						     &sd->write_alone_n[sd->alone_rand],
						     done - sd->alone_ns);
			}
		} else {
			u64 window;

			sd->last_read_done_ns = max(sd->last_read_done_ns, done);
			/*
			 * Beside a write: one in flight at its dispatch, or
			 * dispatched before it completed. On 6.1 fifo_time
			 * shares a union with the csd of a completion sent to
			 * another CPU (rq_affinity): NULL or a pointer then,
			 * never a time before `done` by less than a minute.
			 */
			if (d->dispatched_ns && d->dispatched_ns <= done &&
			    done - d->dispatched_ns < 60 * NSEC_PER_SEC)
				sio_read_learn(sd, kind, (flags & SIO_RQ_BESIDE_WRITE) ||
					       (sd->last_write_ns > d->dispatched_ns &&
						sd->last_write_ns < done),
					       done - d->dispatched_ns);
			if (d->read_op)
				sio_reader_seen(sd, (pid_t)(u32)d->who, (pid_t)(u32)(d->who >> 32),
						flags & SIO_RQ_CACHED, sd->last_read_done_ns);
			window = sio_antic_window_ns(sd, sd->last_read_done_ns);
			if (window && sd->phase == SIO_PH_ANTICIPATE)
				sio_rerun_at(sd, sd->last_read_done_ns + window);
		}
	}
	if (flags & SIO_RQ_DISPATCHED)
		sd->stats[sio_flags_field(flags, SIO_RQ_CLASS_SHIFT)][d->dir].completed++;
	else if (!(flags & SIO_RQ_MERGED))
		sd->dropped++;
}

/* Apply the records left since the lock was last taken, oldest first. */
static void sio_done_apply(struct sio_data *sd)
{
	struct sio_done *d, *next;

	lockdep_assert_held(&sd->lock);

	if (llist_empty(&sd->done))	/* a read, where llist_del_all() is an atomic exchange */
		return;
	llist_for_each_entry_safe(d, next, llist_reverse_order(llist_del_all(&sd->done)), node) {
		sio_done_one(sd, d);
		if (d->heap)
			kfree(d);
	}
}

/*
 * Leave what @rq's completion or requeue tells for the next holder of the
 * lock (any context, no lock). @flags: sio_rq_flags(@rq) as it was.
 */
static void sio_done_push(struct sio_data *sd, struct request *rq,
			  unsigned long flags, bool requeue)
{
	struct sio_done_tab *t = rq->mq_hctx->sched_data;
	unsigned int tag = rq->internal_tag;
	bool inflight = flags & SIO_RQ_INFLIGHT;
	struct sio_done *d;

	if (t && tag < t->nr) {
		d = &t->rec[2 * tag + requeue];
		d->heap = false;
	} else {
		d = kmalloc(sizeof(*d), GFP_ATOMIC | __GFP_NOWARN);
		if (!d) {
			atomic_long_inc(&sd->done_lost);
			return;
		}
		d->heap = true;
	}
	/* the device's time, not the wait for the next holder of the lock (12) */
	d->done_ns = inflight && !requeue ? ktime_get_ns() : 0;
	d->rq = rq;
	d->flags = flags;
	d->who = (unsigned long)rq->elv.priv[1];
	d->dispatched_ns = rq->fifo_time;
	d->pos = blk_rq_pos(rq);
	d->dir = sio_rq_dir(rq);
	d->read_op = req_op(rq) == REQ_OP_READ;
	d->requeue = requeue;
	llist_add(&d->node, &sd->done);		/* a full barrier: see sio_hold_all() */
	/*
	 * A hold counted on this completion: rerun the queue here, not
	 * through SCHED_RESTART, which any request's free on the hctx (a
	 * flush, a passthrough, a merged-away one) may have used up.
	 */
	if (inflight && READ_ONCE(sd->all_held))
		sio_kick(sd);
}

/*
 * Called with the queue frozen (init, nr_requests changed): a record for
 * each scheduler tag of each hardware queue. The old table's records are
 * applied before it goes. Where memory is short, the tags beyond the table
 * get theirs from sio_done_push()'s kmalloc.
 */
static void sio_done_fit(struct sio_data *sd)
{
	struct blk_mq_hw_ctx *hctx;
	unsigned long i;

	queue_for_each_hw_ctx(sd->q, hctx, i) {
		struct sio_done_tab *t = hctx->sched_data, *n;
		unsigned int nr = hctx->sched_tags ? hctx->sched_tags->nr_tags : 0;
		unsigned int noio;

		if (!nr || (t && t->nr >= nr))
			continue;
		noio = memalloc_noio_save();	/* frozen: reclaim must not wait on this queue */
		n = kvzalloc_node(struct_size(n, rec, 2 * (size_t)nr), GFP_KERNEL | __GFP_NOWARN,
				  hctx->numa_node);
		memalloc_noio_restore(noio);
		if (!n)
			continue;
		n->nr = nr;
		spin_lock(&sd->lock);
		sio_done_apply(sd);
		hctx->sched_data = n;
		spin_unlock(&sd->lock);
		kvfree(t);
	}
}

/* Move queued write @rq to the boosted group, for dependency @dep. */
static void sio_boost_rq(struct sio_data *sd, struct request *rq,
			 enum sio_dep dep)
{
	lockdep_assert_held(&sd->lock);

	sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_BOOSTED);
	sio_move_to_group(sd, rq, SIO_G_BOOSTED_WRITE);
	sio_rq_stats(sd, rq)->boosted++;
	sd->dep_stats[dep].boosted++;
}

/*
 * Boost the queued writes overlapping [start, end) for task @waiter waiting
 * on them: async ones, and sync ones another task submitted (a task that
 * waits on its own sync write, fsync or jbd2, chose to write, and its write
 * is served as any sync write). Returns whether any queued write held the
 * range.
 */
static bool sio_boost_range(struct sio_data *sd, sector_t start, sector_t end,
			    enum sio_dep dep, pid_t waiter)
{
	bool found = false;
	enum sio_class c;

	lockdep_assert_held(&sd->lock);

	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		struct request *rq;

		rq = sio_rb_first_overlap(&sd->cls[c].sort[SIO_WRITE], start, end);
		for (; rq && blk_rq_pos(rq) < end; rq = elv_rb_latter_request(sd->q, rq)) {
			found = true;
			if (!(sio_rq_flags(rq) & SIO_RQ_QUEUED) ||
			    sio_rq_group(rq) == SIO_G_BOOSTED_WRITE ||
			    (sio_rq_group(rq) == SIO_G_SYNC_WRITE &&
			     sio_rq_pid(rq) == waiter))
				continue;
			sio_boost_rq(sd, rq, dep);
		}
	}
	return found;
}

/*
 * Boost every queued async write of @owner (a waiting task's file): the rest
 * of the file's writeback ends only with them. Returns whether any was queued.
 */
static bool sio_boost_owner(struct sio_data *sd, const void *owner,
			    enum sio_dep dep)
{
	struct request *rq, *next;
	bool found = false;
	enum sio_class c;

	lockdep_assert_held(&sd->lock);

	if (!owner)
		return false;
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		list_for_each_entry_safe(rq, next, &sd->cls[c].fifo[SIO_G_ASYNC_WRITE],
					 queuelist) {
			if (sio_owner(rq) != owner)
				continue;
			found = true;
			sio_boost_rq(sd, rq, dep);
			sd->owner_boosted++;
		}
	}
	return found;
}

/* Drop pending hints whose time is up: nothing of ours came for them. */
static void sio_hints_expire(struct sio_data *sd, u64 now)
{
	int i;

	lockdep_assert_held(&sd->lock);

	for (i = 0; i < SIO_NR_HINTS; i++) {
		struct sio_hint *h = &sd->hints[i];

		if (h->end && now >= h->expires_ns) {
			sd->dep_stats[h->dep].not_found++;
			sio_qlog_add(sd, 'X', h->start, h->end, h->dep, h->waiter, now);
			h->end = 0;
			sd->nr_hints--;
		}
	}
}

/* Keep a range no write held yet, to retry it when writes are inserted. */
static void sio_hint_park(struct sio_data *sd, sector_t start, sector_t end,
			  enum sio_dep dep, pid_t waiter, u64 now)
{
	struct sio_hint *slot = NULL;
	int i;

	lockdep_assert_held(&sd->lock);

	sio_hints_expire(sd, now);
	for (i = 0; i < SIO_NR_HINTS; i++) {
		struct sio_hint *h = &sd->hints[i];

		if (!h->end)
			slot = h;
		else if (!slot || (slot->end && h->expires_ns < slot->expires_ns))
			slot = h;
	}
	if (slot->end) {	/* full: the oldest range gives way */
		sd->dep_stats[slot->dep].not_found++;
		sio_qlog_add(sd, 'X', slot->start, slot->end, slot->dep,
			     slot->waiter, now);
	} else {
		sd->nr_hints++;
	}
	slot->start = start;
	slot->end = end;
	slot->dep = dep;
	slot->waiter = waiter;
	slot->expires_ns = now + SIO_HINT_TTL_NS;
}

/* A write of [start, end) was queued or grew: does a waiting task want it? */
static void sio_hints_retry(struct sio_data *sd, sector_t start, sector_t end,
			    u64 now)
{
	int i;

	lockdep_assert_held(&sd->lock);

	/* Every write's insert comes here: no scan with nothing parked. */
	for (i = 0; sd->nr_hints && i < SIO_NR_HINTS; i++) {
		struct sio_hint *h = &sd->hints[i];

		if (!h->end || h->start >= end || start >= h->end)
			continue;
		if (now >= h->expires_ns) {
			sd->dep_stats[h->dep].not_found++;
			sio_qlog_add(sd, 'X', h->start, h->end, h->dep, h->waiter, now);
		} else if (sio_boost_range(sd, h->start, h->end, h->dep, h->waiter)) {
			sd->dep_stats[h->dep].found_queued++;
			sio_qlog_add(sd, 'R', h->start, h->end, h->dep,
				     h->waiter, now);
		} else {
			continue;
		}
		h->end = 0;
		sd->nr_hints--;
	}
}

/*
 * A task waits on [start, end) of @sd's device (a kprobe, task context,
 * preemption off): boost the write that holds it, or keep the range for a
 * retry. Returns whether a write was boosted, so that the caller
 * reruns the queue.
 */
static bool sio_hint_one(struct sio_data *sd, sector_t start, sector_t end,
			 enum sio_dep dep, const void *owner, pid_t waiter)
{
	struct sio_dep_stats *st = &sd->dep_stats[dep];
	u64 now, boosted;
	int i;

	spin_lock(&sd->lock);
	sio_done_apply(sd);	/* a write that completed is no longer "dispatched" */
	now = ktime_get_ns();
	boosted = st->boosted;
	for (i = 0; i < SIO_NR_HINTS; i++) {
		struct sio_hint *h = &sd->hints[i];

		/* The same wait again (a wait loop): still one detection. */
		if (h->end == end && h->start == start && h->dep == dep &&
		    now < h->expires_ns) {
			h->expires_ns = now + SIO_HINT_TTL_NS;
			goto unlock;
		}
	}
	st->detected++;
	sio_boost_owner(sd, owner, dep);
	if (sio_boost_range(sd, start, end, dep, waiter)) {
		st->found_queued++;
		sio_qlog_add(sd, 'Q', start, end, dep, waiter, now);
	} else if (sio_write_out_find(sd, start, end)) {
		st->found_dispatched++;
		sio_qlog_add(sd, 'D', start, end, dep, waiter, now);
	} else {
		sio_hint_park(sd, start, end, dep, waiter, now);
		sio_qlog_add(sd, 'P', start, end, dep, waiter, now);
	}
unlock:
	boosted = st->boosted - boosted;
	spin_unlock(&sd->lock);
	return boosted;
}

/* Report [start, end) of @q to the smartio queue that serves it, if any. */
static void sio_hint_queue(struct request_queue *q, sector_t start,
			   sector_t end, enum sio_dep dep, const void *owner,
			   pid_t waiter)
{
	struct sio_data *sd;

	rcu_read_lock();
	list_for_each_entry_rcu(sd, &sio_queues, node) {
		if (sd->q != q)
			continue;
		if (READ_ONCE(sd->qasio_boost) && READ_ONCE(sd->qasio_dep[dep]) &&
		    sio_hint_one(sd, start, end, dep, owner, waiter))
			sio_kick(sd);
		break;
	}
	rcu_read_unlock();
}

/* irq_work (hardirq), which may not take the lock: hand over to a work item on this CPU. */
static void sio_nmi_work_fn(struct irq_work *work)
{
	struct sio_nmi_buf *buf = container_of(work, struct sio_nmi_buf, work);

	queue_work_on(smp_processor_id(), system_highpri_wq, &buf->apply);
}

/*
 * Apply the hints int3 kprobes left on this CPU (a bound workqueue runs it
 * there). A handler fills the buffer with interrupts off, so with them off
 * here none runs on this CPU while it is emptied.
 */
static void sio_nmi_apply_fn(struct work_struct *work)
{
	struct sio_nmi_buf *buf = container_of(work, struct sio_nmi_buf, apply);
	struct sio_nmi_hint h[SIO_NR_NMI_HINTS];
	unsigned long irqflags;
	unsigned int i, n;

	local_irq_save(irqflags);
	n = READ_ONCE(buf->n);
	memcpy(h, buf->h, n * sizeof(*h));
	WRITE_ONCE(buf->n, 0);
	local_irq_restore(irqflags);
	for (i = 0; i < n; i++)
		sio_hint_queue(h[i].q, h[i].start, h[i].end, h[i].dep, h[i].owner, h[i].waiter);
}

/* Report a sector range a task waits on (from a kprobe handler). */
static void sio_hint(struct block_device *bdev, sector_t sector,
		     sector_t nr_sectors, enum sio_dep dep, const void *owner)
{
	struct request_queue *q = bdev_get_queue(bdev);
	sector_t start = sector + bdev->bd_start_sect;
	struct sio_nmi_buf *buf;
	unsigned int n;

	if (!in_nmi()) {
		sio_hint_queue(q, start, start + nr_sectors, dep, owner,
			       current->pid);
		return;
	}
	/*
	 * An int3 kprobe: interrupts are off until the handler returns, and
	 * sio_nmi_apply_fn() empties the buffer with them off too, on this
	 * CPU, so neither interrupts the other (the probed functions sleep;
	 * hardirq code never calls them).
	 */
	buf = this_cpu_ptr(&sio_nmi_bufs);
	n = READ_ONCE(buf->n);
	if (n == SIO_NR_NMI_HINTS) {
		atomic_long_inc(&sio_nmi_dropped);
		return;
	}
	buf->h[n] = (struct sio_nmi_hint){ q, start, start + nr_sectors, dep, owner,
					   current->pid };
	WRITE_ONCE(buf->n, n + 1);
	atomic_long_inc(&sio_nmi_deferred);
	irq_work_queue(&buf->work);
}

/* kprobe on __lock_buffer() and __wait_on_buffer(): the task waits for @bh. */
static int sio_kp_buffer(struct kprobe *p, struct pt_regs *regs)
{
	struct buffer_head *bh = (void *)regs_get_kernel_argument(regs, 0);
	unsigned int spb;

	/* Only a write: a locked buffer that is mapped and already up to date. */
	if (!bh || !bh->b_bdev || bh->b_size < SECTOR_SIZE ||
	    !buffer_mapped(bh) || !buffer_uptodate(bh))
		return 0;
	spb = bh->b_size >> SECTOR_SHIFT;
	sio_hint(bh->b_bdev, bh->b_blocknr * spb, spb, SIO_DEP_META, NULL);
	return 0;
}

static DEFINE_PER_CPU(char [KSYM_SYMBOL_LEN], sio_symbuf);
static unsigned long sio_callers[SIO_NR_CALLERS];	/* return address | dep << 63 */

/* D_sync or D_data, from the return address of folio_wait_writeback(). */
static enum sio_dep sio_folio_dep(unsigned long ret)
{
	unsigned long *slot = &sio_callers[hash_long(ret, ilog2(SIO_NR_CALLERS))];
	unsigned long cached = READ_ONCE(*slot);
	enum sio_dep dep = SIO_DEP_DATA;
	char *name;

	/* Kernel text addresses have bit 63 set; it carries the answer here. */
	if ((cached | BIT(63)) == (ret | BIT(63)) && cached)
		return cached & BIT(63) ? SIO_DEP_DATA : SIO_DEP_SYNC;
	name = *this_cpu_ptr(&sio_symbuf);
	sprint_symbol_no_offset(name, ret);
	if (sio_sync_caller(name))
		dep = SIO_DEP_SYNC;
	WRITE_ONCE(*slot, dep == SIO_DEP_DATA ? ret | BIT(63) : ret & ~BIT(63));
	return dep;
}

/*
 * kprobe on folio_wait_writeback(): the task waits for the folio's write.
 * The sectors come from the folio's buffers under write (buffer_async_write,
 * mapped), read under mapping->private_lock: try_to_free_buffers() detaches
 * buffers only under that lock, so none is freed while we look. The caller
 * holds a reference on the folio; its mapping, embedded in an RCU-freed
 * inode, stays valid while we are in this (preemption-off) handler.
 */
static int sio_kp_folio(struct kprobe *p, struct pt_regs *regs)
{
	struct folio *folio = (void *)regs_get_kernel_argument(regs, 0);
	unsigned long ret = sio_entry_return_address(regs);
	struct buffer_head *head, *bh;
	struct address_space *mapping;
	struct block_device *bdev = NULL;
	sector_t start = 0, end = 0;
	unsigned long magic;
	enum sio_dep dep;

	if (!folio || !folio_test_writeback(folio))
		return 0;
	mapping = folio_mapping(folio);
	/*
	 * Only where folio->private is a buffer_head list: ext2/3/4 and the
	 * block device's own mapping (jbd2's buffers). f2fs keeps flag bits
	 * there (0x21 was dereferenced in the testbed), others their own data.
	 */
	if (!mapping || !mapping->host)
		return 0;
	magic = mapping->host->i_sb->s_magic;
	if (magic != EXT4_SUPER_MAGIC && magic != BDEVFS_MAGIC)
		return 0;
	if (!spin_trylock(sio_mapping_lock(mapping)))
		return 0;
	head = folio_buffers(folio);
	if (!folio_test_writeback(folio) || folio_mapping(folio) != mapping || !head)
		goto unlock;
	bh = head;
	do {
		unsigned int spb = bh->b_size >> SECTOR_SHIFT;
		sector_t s = bh->b_blocknr * spb;

		if (!buffer_async_write(bh) || !buffer_mapped(bh) || !spb ||
		    !bh->b_bdev)
			continue;
		if (bdev && (bh->b_bdev != bdev || s != end)) {
			/* Not contiguous: report the first run only. */
			break;
		}
		if (!bdev) {
			bdev = bh->b_bdev;
			start = s;
		}
		end = s + spb;
	} while ((bh = bh->b_this_page) != head);
unlock:
	spin_unlock(sio_mapping_lock(mapping));
	if (!bdev)
		return 0;
	dep = sio_folio_dep(ret);
	sio_hint(bdev, start, end - start, dep, mapping);
	return 0;
}

static const struct kprobe sio_kprobe_tmpl[] = {
	{ .symbol_name = "__lock_buffer", .pre_handler = sio_kp_buffer },
	{ .symbol_name = "__wait_on_buffer", .pre_handler = sio_kp_buffer },
	{ .symbol_name = "folio_wait_writeback", .pre_handler = sio_kp_folio },
};

#define SIO_NR_KPROBES ARRAY_SIZE(sio_kprobe_tmpl)

static struct kprobe sio_kprobes[SIO_NR_KPROBES];
static int sio_kprobe_err[SIO_NR_KPROBES];	/* 0 = registered, else why not */
static bool sio_kprobes_live;

/*
 * Register the probes, from sio_init() (sio_queues_mutex held). Without a
 * probe its hints simply never come.
 */
static void sio_kprobes_get(void)
{
	int i;

	lockdep_assert_held(&sio_queues_mutex);

	if (sio_kprobes_live)
		return;
	for (i = 0; i < SIO_NR_KPROBES; i++) {
		sio_kprobes[i] = sio_kprobe_tmpl[i];
		sio_kprobe_err[i] = register_kprobe(&sio_kprobes[i]);
		if (sio_kprobe_err[i])
			pr_warn("smartio: kprobe %s unavailable (%d), no QASIO boost from it\n",
				sio_kprobe_tmpl[i].symbol_name, sio_kprobe_err[i]);
	}
	sio_kprobes_live = true;
}

/*
 * Unregister them, from sio_exit() (sio_queues_mutex held), when no queue
 * uses smartio any more. unregister_kprobe() waits for running handlers
 * (synchronize_rcu).
 */
static void sio_kprobes_put(void)
{
	int i;

	lockdep_assert_held(&sio_queues_mutex);

	if (!sio_kprobes_live)
		return;
	for (i = 0; i < SIO_NR_KPROBES; i++)
		if (!sio_kprobe_err[i])
			unregister_kprobe(&sio_kprobes[i]);
	sio_kprobes_live = false;
}

/* Timer callback (hardirq): a hold is over (anticipation, a pace, a read hold, a slice). */
static enum hrtimer_restart sio_timer_fn(struct hrtimer *timer)
{
	struct sio_data *sd = container_of(timer, struct sio_data, timer);

	sio_kick(sd);
	return HRTIMER_NORESTART;
}

static void sio_mark_restart(struct request_queue *q)
{
	struct blk_mq_hw_ctx *hctx;
	unsigned long i;

	queue_for_each_hw_ctx(q, hctx, i)
		blk_mq_sched_mark_restart_hctx(hctx);
}

/* Elevator operations. */

/*
 * Called by blk_mq_run_hw_queue() -> __blk_mq_do_dispatch_sched(), without
 * the lock. The state is queue-wide (QUEUE_FLAG_SQ_SCHED), so the request
 * returned may belong to another hardware queue. The clock is read under
 * the lock, so no time stored by another CPU is later than `now`.
 */
static struct request *sio_dispatch_request(struct blk_mq_hw_ctx *hctx)
{
	struct sio_data *sd = hctx->queue->elevator->elevator_data;
	unsigned long flags;
	struct request *rq;
	int kicks;
	u64 now;

	spin_lock(&sd->lock);
again:
	sio_done_apply(sd);
	kicks = atomic_read(&sd->kicks);
	now = ktime_get_ns();
	sd->dispatch_ns = now;

	rq = list_first_entry_or_null(&sd->dispatch, struct request, queuelist);
	if (rq) {
		list_del_init(&rq->queuelist);
	} else {
		sd->single_write_held = false;
		sd->startup_held = false;
		sd->next_check_ns = 0;
		rq = sio_select(sd, now);
		/* Rule 10 held a write back and anticipation did not. */
		if (sd->single_write_held && (!rq || sio_rq_dir(rq) == SIO_READ) &&
		    sd->phase != SIO_PH_ANTICIPATE)
			sd->single_write_holds++;
		/* A start-up held a starved write back, and no write went. */
		if (sd->startup_held && (!rq || sio_rq_dir(rq) == SIO_READ))
			sd->startup_holds++;
		if (!rq) {
			/* Held by a limit or for a reader: a completion reruns us. */
			if (!sio_all_empty(sd)) {
				sio_mark_restart(sd->q);
				/*
				 * A start-up's hold ends with the start-up, a
				 * time not computed here: left to blk-mq.
				 */
				if (sd->next_check_ns > now)
					sio_rerun_at(sd, sd->next_check_ns);
				if (!sd->startup_held &&
				    (!sd->next_check_ns || sd->next_check_ns > now) &&
				    sio_rerun_coming(sd) && sio_hold_all(sd, kicks))
					goto again;
			}
			goto unlock;
		}
		sio_remove_request(sd, rq);
	}
	/* Something went: another CPU's "all held" is out of date. */
	WRITE_ONCE(sd->all_held, false);

	flags = sio_rq_flags(rq);
	if (!(flags & SIO_RQ_DISPATCHED))
		sio_rq_stats(sd, rq)->dispatched++;
	if ((flags & SIO_RQ_HELD) && sio_rq_dir(rq) == SIO_READ)
		sd->held_reads++;
	flags &= ~SIO_RQ_HELD;
	if (flags & SIO_RQ_BOOSTED)
		sio_qlog_add(sd, 'd', blk_rq_pos(rq), blk_rq_pos(rq) + blk_rq_sectors(rq),
			     SIO_NR_DEPS, sio_rq_pid(rq), now);
	/* Dispatched: fifo_time is free until an insert (12). */
	rq->fifo_time = now;
	flags &= ~(SIO_RQ_BESIDE_WRITE | SIO_RQ_RAND_WRITE);
	if (sio_rq_dir(rq) == SIO_READ && sio_writes_inflight(sd))
		flags |= SIO_RQ_BESIDE_WRITE;
	sio_alone_dispatched(sd, rq, rq->fifo_time);
	sio_rq_set_flags(rq, flags | SIO_RQ_DISPATCHED | SIO_RQ_INFLIGHT);
	sd->inflight[sio_rq_kind(rq)]++;
	sio_stream_advance(sd, rq);
	if (sio_rq_dir(rq) == SIO_WRITE) {
		sd->last_write_ns = now;
		/*
		 * For the pace, a write is random unless it continues the last
		 * one exactly, as the device sees it (flashdev, an eMMC's
		 * next-LBA detection): the stream table's 32 KiB gap takes
		 * random writes over a small region for sequential ones.
		 */
		sd->last_write_rand = blk_rq_pos(rq) != sd->last_write_end;
		sd->last_write_end = blk_rq_pos(rq) + blk_rq_sectors(rq);
		sd->last_write_pid = sio_rq_pid(rq);
		if (sd->last_write_rand)
			sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_RAND_WRITE);
		sio_write_out_add(sd, rq);
	}
	rq->rq_flags |= RQF_STARTED;
unlock:
	spin_unlock(&sd->lock);
	return rq;
}

/* Called by sio_insert_requests() with the lock held. */
static void sio_insert_request(struct sio_data *sd, struct request *rq,
			       bool at_head, struct list_head *free, u64 now)
{
	struct request_queue *q = sd->q;
	unsigned long flags = sio_rq_flags(rq);
	enum sio_dir dir = sio_rq_dir(rq);
	sector_t start = blk_rq_pos(rq), end = start + blk_rq_sectors(rq);
	struct sio_class_queue *cq;
	enum sio_group group;
	bool seq;

	lockdep_assert_held(&sd->lock);

	if (!(flags & SIO_RQ_OWNED)) {
		/* First insertion; a requeued request keeps its identity. */
		flags = SIO_RQ_OWNED;
		flags |= (unsigned long)sio_ioprio_class(req_get_ioprio(rq)) <<
			 SIO_RQ_CLASS_SHIFT;
		/* priv[1]: pid and thread group, from sio_prepare_request() */
		flags |= (unsigned long)sio_alloc_pid(rq) << SIO_RQ_PID_SHIFT;
		sio_rq_set_flags(rq, flags);
		sio_rq_stats(sd, rq)->inserted++;
		if (req_op(rq) == REQ_OP_DISCARD && !op_is_sync(rq->cmd_flags))
			sd->discard_async++;
	}

	if (at_head || (!SIO_HAVE_FLUSH_DATA_VIA_ELV && op_is_flush(rq->cmd_flags))) {
		trace_block_rq_insert(rq);
		if (!(flags & SIO_RQ_DISPATCHED))
			sio_rq_set_field(rq, SIO_RQ_KIND_SHIFT, dir == SIO_READ ?
					 SIO_RAND_READ : SIO_RAND_WRITE);
		list_add(&rq->queuelist, &sd->dispatch);
		return;
	}

	/* Known before a merge, which hands the group on (sio_requests_merged). */
	group = sio_rq_pick_group(rq);
	if (group == SIO_G_SYNC_WRITE && !op_is_sync(rq->cmd_flags))
		sd->sync_promoted++;
	sio_rq_set_field(rq, SIO_RQ_GROUP_SHIFT, group);

	if (sio_insert_merge_ok(sd, rq) &&
	    blk_mq_sched_try_insert_merge(q, rq, free)) {
		/* A merge that skipped sio_requests_merged() (multi-range discard). */
		if (!(sio_rq_flags(rq) & SIO_RQ_MERGED)) {
			sio_rq_stats(sd, rq)->merged++;
			sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_MERGED);
		}
		if (dir == SIO_WRITE)
			sio_hints_retry(sd, start, end, now);
		return;
	}

	trace_block_rq_insert(rq);

	seq = sio_classify_seq(sd, rq);
	sio_rq_set_field(rq, SIO_RQ_KIND_SHIFT, dir == SIO_READ ?
			 (seq ? SIO_SEQ_READ : SIO_RAND_READ) :
			 (seq ? SIO_SEQ_WRITE : SIO_RAND_WRITE));

	cq = &sd->cls[sio_rq_class(rq)];
	elv_rb_add(&cq->sort[dir], rq);
	/* Multi-range discards merge without telling the elevator: keep them out. */
	if (rq_mergeable(rq) && !blk_discard_mergable(rq)) {
		elv_rqhash_add(q, rq);
		if (!q->last_merge)
			q->last_merge = rq;
	}
	rq->fifo_time = now;
	if (dir == SIO_WRITE) {
		sio_writer_seen(sd, sio_rq_pid(rq), now);
	} else if (req_op(rq) == REQ_OP_READ) {	/* not zone management */
		bool cached = sio_read_cached(rq);

		if (cached)
			sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_CACHED);
		sio_reader_seen(sd, sio_alloc_pid(rq), sio_alloc_tgid(rq), cached, now);
	}
	list_add_tail(&rq->queuelist, &cq->fifo[group]);
	sd->queued[sio_rq_kind(rq)]++;
	sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_QUEUED);

	if (dir == SIO_READ && sd->phase == SIO_PH_ANTICIPATE) {
		sio_set_phase(sd, SIO_PH_READ);
		sd->antic_hits++;
	}
	if (dir == SIO_WRITE)
		sio_hints_retry(sd, start, end, now);
}

/* Called by blk_mq_sched_insert_request() and blk_mq_sched_insert_requests(). */
static void sio_insert_requests(struct blk_mq_hw_ctx *hctx,
				struct list_head *list, sio_insert_t flags)
{
	bool at_head = SIO_INSERT_AT_HEAD(flags);
	struct sio_data *sd = hctx->queue->elevator->elevator_data;
	LIST_HEAD(free);
	u64 now;

	spin_lock(&sd->lock);
	now = ktime_get_ns();	/* once for the batch, under the lock (sio_since()) */
	sio_unhold(sd);
	while (!list_empty(list)) {
		struct request *rq;

		rq = list_first_entry(list, struct request, queuelist);
		list_del_init(&rq->queuelist);
		sio_insert_request(sd, rq, at_head, &free, now);
	}
	spin_unlock(&sd->lock);
	blk_mq_free_requests(&free);
}

/* Called from blk_mq_rq_ctx_init() for requests that may be inserted. */
static void sio_prepare_request(struct request *rq)
{
	sio_rq_set_flags(rq, 0);
	rq->elv.priv[1] = (void *)((unsigned long)(u32)current->tgid << 32 |
				   (u32)current->pid);
}

/*
 * Called from blk_mq_free_request(), in any context (completion interrupt or
 * softirq), without the lock, which it does not take: what it tells is
 * applied by the next holder (sio_done_push()). Also called for requests
 * that bypassed the scheduler (passthrough) and for requests merged away. A
 * request is counted completed if it was dispatched, even when it was
 * requeued and its bios then finished inside another request
 * (sio_requests_merged).
 */
static void sio_finish_request(struct request *rq)
{
	unsigned long flags = sio_rq_flags(rq);

	if (!(flags & SIO_RQ_OWNED))
		return;
	sio_rq_set_flags(rq, 0);
	/* Merged away: counted when it merged, nothing to apply. */
	if ((flags & (SIO_RQ_MERGED | SIO_RQ_DISPATCHED)) == SIO_RQ_MERGED)
		return;
	sio_done_push(rq->q->elevator->elevator_data, rq, flags, false);
}

/*
 * Called from blk_mq_requeue_request(), in any context, without the lock:
 * the driver gave @rq back. On 6.1 it comes back through the requeue list,
 * at the head. Its write slot goes with the record.
 */
static void sio_requeue_request(struct request *rq)
{
	unsigned long flags = sio_rq_flags(rq);

	if (!(flags & SIO_RQ_INFLIGHT))
		return;
	sio_rq_set_flags(rq, flags & ~(SIO_RQ_INFLIGHT | SIO_RQ_OUT_MASK << SIO_RQ_OUT_SHIFT));
	sio_done_push(rq->q->elevator->elevator_data, rq, flags, true);
}

/* Called by elv_bio_merge_ok() and blk_mq_sched_try_merge(), lock held. */
static bool sio_allow_merge(struct request_queue *q, struct request *rq,
			    struct bio *bio)
{
	/* elv_merge() asks about q->last_merge before it checks adjacency. */
	if (blk_rq_pos(rq) + blk_rq_sectors(rq) != bio->bi_iter.bi_sector &&
	    blk_rq_pos(rq) != bio_end_sector(bio))
		return true;
	return sio_write_merge_ok(q->elevator->elevator_data, rq,
				  bio->bi_iter.bi_size);
}

/* The merge partners after a bio merge (attempt_merge()), lock held. */
static struct request *sio_next_request(struct request_queue *q,
					struct request *rq)
{
	struct request *next = elv_rb_latter_request(q, rq);

	return next && sio_requests_merge_ok(q->elevator->elevator_data, rq, next) ?
	       next : NULL;
}

static struct request *sio_former_request(struct request_queue *q,
					  struct request *rq)
{
	struct request *prev = elv_rb_former_request(q, rq);

	return prev && sio_requests_merge_ok(q->elevator->elevator_data, prev, rq) ?
	       prev : NULL;
}

/* Called by the bio merge code (blk_mq_sched_try_merge) with the lock held. */
static int sio_request_merge(struct request_queue *q, struct request **rq,
			     struct bio *bio)
{
	struct sio_data *sd = q->elevator->elevator_data;
	enum sio_class c = sio_ioprio_class(bio->bi_ioprio);
	struct request *__rq;

	lockdep_assert_held(&sd->lock);

	__rq = elv_rb_find(&sd->cls[c].sort[bio_data_dir(bio) == WRITE],
			   bio_end_sector(bio));
	if (__rq && elv_bio_merge_ok(__rq, bio)) {
		*rq = __rq;
		if (blk_discard_mergable(__rq))
			return ELEVATOR_DISCARD_MERGE;
		return ELEVATOR_FRONT_MERGE;
	}
	return ELEVATOR_NO_MERGE;
}

/* Called after a bio was merged into @rq, lock held: keep the tree sorted. */
static void sio_request_merged(struct request_queue *q, struct request *rq,
			       enum elv_merge type)
{
	struct sio_data *sd = q->elevator->elevator_data;
	struct rb_root *root = &sd->cls[sio_rq_class(rq)].sort[sio_rq_dir(rq)];

	lockdep_assert_held(&sd->lock);

	if (type == ELEVATOR_FRONT_MERGE) {
		elv_rb_del(root, rq);
		elv_rb_add(root, rq);
	}
}

/*
 * Called by attempt_merge() (under sio_bio_merge() or sio_insert_request(),
 * lock held) after @next was merged into @rq; @next will be freed. @rq takes
 * the more urgent group of the two (6.1 merges sync and async writes) and
 * the earlier FIFO position within it.
 */
static void sio_requests_merged(struct request_queue *q, struct request *rq,
				struct request *next)
{
	struct sio_data *sd = q->elevator->elevator_data;
	unsigned long nflags = sio_rq_flags(next), rflags = sio_rq_flags(rq);
	enum sio_group rg = sio_rq_group(rq), ng = sio_rq_group(next);

	lockdep_assert_held(&sd->lock);

	/* A requeued request was dispatched: it ends as completed, not merged. */
	if (nflags & SIO_RQ_DISPATCHED)
		sd->requeue_merged++;
	else
		sio_rq_stats(sd, next)->merged++;

	if (rflags & SIO_RQ_QUEUED) {
		if (sio_group_rank(ng) < sio_group_rank(rg) ||
		    (ng == rg && (nflags & SIO_RQ_QUEUED) &&
		     next->fifo_time < rq->fifo_time)) {
			if (ng == SIO_G_SYNC_WRITE && rg == SIO_G_ASYNC_WRITE)
				sd->sync_promoted++;
			if (nflags & SIO_RQ_QUEUED)
				list_move(&rq->queuelist, &next->queuelist);
			else
				sio_move_to_group(sd, rq, ng);
			sio_rq_set_field(rq, SIO_RQ_GROUP_SHIFT, ng);
		}
		if (nflags & SIO_RQ_QUEUED)
			rq->fifo_time = min(rq->fifo_time, next->fifo_time);
		sio_rq_set_flags(rq, sio_rq_flags(rq) | (nflags & SIO_RQ_BOOSTED));
	}
	sio_remove_request(sd, next);
	sio_rq_set_flags(next, sio_rq_flags(next) | SIO_RQ_MERGED);
}

/*
 * Called by blk_mq_submit_bio() before a request is allocated, without the
 * lock. A sync bio merged into a queued async write makes it sync; a write
 * bio may be what a waiting task's pending hint was for.
 */
static bool sio_bio_merge(struct request_queue *q, struct bio *bio,
			  unsigned int nr_segs)
{
	struct sio_data *sd = q->elevator->elevator_data;
	sector_t start = bio->bi_iter.bi_sector, end = bio_end_sector(bio);
	bool sync = op_is_sync(bio->bi_opf), write = op_is_write(bio_op(bio));
	enum sio_class c = sio_ioprio_class(bio->bi_ioprio);
	struct request *free = NULL, *rq;
	bool ret, kick;

	spin_lock(&sd->lock);
	ret = blk_mq_sched_try_merge(q, bio, nr_segs, &free);
	if (ret) {
		sd->bio_merged++;
		rq = write ? sio_rb_first_overlap(&sd->cls[c].sort[SIO_WRITE],
						  start, end) : NULL;
		if (rq && sync && (sio_rq_flags(rq) & SIO_RQ_QUEUED) &&
		    sio_rq_group(rq) == SIO_G_ASYNC_WRITE) {
			sio_move_to_group(sd, rq, SIO_G_SYNC_WRITE);
			sd->sync_promoted++;
		}
		if (rq)
			sio_hints_retry(sd, start, end, ktime_get_ns());
	}
	/* A merge may end a hold: a boost, a sync promotion, a larger slice. */
	kick = ret && sd->all_held;
	if (kick)
		sio_unhold(sd);
	spin_unlock(&sd->lock);

	if (free)
		blk_mq_free_request(free);
	if (kick)
		blk_mq_run_hw_queues(q, true);
	return ret;
}

/* Called by blk_mq_sched_has_work(), without the lock. */
static bool sio_has_work(struct blk_mq_hw_ctx *hctx)
{
	struct sio_data *sd = hctx->queue->elevator->elevator_data;
	enum sio_kind k;

	if (!list_empty_careful(&sd->dispatch))
		return true;
	if (READ_ONCE(sd->all_held))
		return false;
	/* The FIFOs' counts, not the twelve FIFOs: blk-mq asks before every dispatch. */
	for (k = 0; k < SIO_NR_KINDS; k++)
		if (READ_ONCE(sd->queued[k]))
			return true;
	return false;
}

/*
 * Called by __blk_mq_alloc_request(): a request the scheduler has not got
 * yet is out of its reach, so each kind keeps tags of its own. Async
 * requests may hold async_depth of the scheduler tags; sync writes more, so
 * that a journal commit or an fsync never waits for a tag behind background
 * writeback (the legacy block layer kept separate sync and async pools);
 * reads the rest, so a reader always finds a tag.
 */
/*
 * Does the kernel read shallow_depth as a share of the whole bitmap (mainline
 * 6.17, "lib/sbitmap: convert shallow_depth from one word to the whole
 * sbitmap", backported to Debian's 6.12.43) or of each word (before)? No
 * symbol tells: sio_init() asks an sbitmap of two 64-bit words.
 */
static bool sio_shallow_whole;

static int sio_probe_shallow(void)
{
	struct sbitmap_queue sbq;
	int n = 0;

	if (sbitmap_queue_init_node(&sbq, 128, 6, false, GFP_KERNEL, NUMA_NO_NODE))
		return -ENOMEM;
	sbitmap_queue_min_shallow_depth(&sbq, 2);
	while (n < 128 && sbitmap_queue_get_shallow(&sbq, 2) >= 0)
		n++;
	sbitmap_queue_free(&sbq);
	sio_shallow_whole = n == 2;	/* per word: 2 from each of the 2 words */
	return 0;
}

static void sio_limit_depth(blk_opf_t opf, struct blk_mq_alloc_data *data)
{
	struct sio_data *sd = data->q->elevator->elevator_data;
	struct sbitmap_queue *bt;
	unsigned int nrr, depth;

	if (op_is_sync(opf) && !op_is_write(opf))
		return;
	depth = op_is_sync(opf) ? sd->sync_write_depth : sd->async_depth;
	/* Whole-bitmap since 6.17 (Debian's 6.12 from 6.12.43), else per word. */
	if (sio_shallow_whole) {
		data->shallow_depth = depth;
		return;
	}
	/*
	 * Some 6.1.y sublevels (6.1.44) call limit_depth() before they set
	 * data->hctx: without its tag map no per-word share can be computed,
	 * and this allocation goes unlimited.
	 */
	if (!data->hctx)
		return;
	bt = &data->hctx->sched_tags->bitmap_tags;
	nrr = bt->sb.depth;
	data->shallow_depth = ((depth << bt->sb.shift) + nrr - 1) / nrr;
}

/*
 * Called by blk_mq_update_nr_requests() and sio_init_hctx(). The depth is the
 * tag map's: 6.1 calls this before it stores the new q->nr_requests, so the
 * shares computed from that (as mq-deadline does) were the old size's: after
 * `echo 128 > nr_requests` on a 4-tag queue writes kept 3 tags (issue 12).
 */
static void sio_update_depths(struct request_queue *q, unsigned int nrr)
{
	struct sio_data *sd = q->elevator->elevator_data;
	unsigned int writes = nrr - max(1U, nrr / sio_read_reserve_div);

	/*
	 * Async: 75 % of the tags blk-mq gives a queue of this device by default
	 * (2 x its depth), below the sync writes' share. Raising nr_requests
	 * makes room for sync I/O, not for more queued writeback: every queued
	 * async write is a wait for whoever needs it next (a commit, fsync) and
	 * counts against the dirty limit. M1 (issue 12), fsync() max: 11.8-13.4 s
	 * with 3 async tags, 27-35 s in 2 of 3 runs with 96.
	 */
	unsigned int dflt = 2 * q->tag_set->queue_depth;

	sd->sync_write_depth = max(1U, writes);
	sd->async_depth = max(1U, min(min(nrr, dflt) * sio_default_async_depth_pct / 100,
				      writes - (writes > 1)));
}

#if SIO_HAVE_DEPTH_UPDATED_Q
/*
 * Called by blk_mq_update_nr_requests() once per queue, after the tags were
 * resized and q->nr_requests set, and by sio_init_sched().
 */
static void sio_depth_updated(struct request_queue *q)
{
	struct blk_mq_hw_ctx *hctx;
	unsigned int nrr = 0;
	unsigned long i;

	queue_for_each_hw_ctx(q, hctx, i) {
		nrr = hctx->sched_tags->bitmap_tags.sb.depth;
		break;
	}
	sio_update_depths(q, nrr ?: q->nr_requests);
	blk_mq_set_min_shallow_depth(q, 1);
	sio_done_fit(q->elevator->elevator_data);
}

/* The core calls depth_updated() at init no more. */
static void sio_init_depths(struct request_queue *q)
{
	sio_depth_updated(q);
}
#else
static void sio_depth_updated(struct blk_mq_hw_ctx *hctx)
{
	sio_update_depths(hctx->queue, hctx->sched_tags->bitmap_tags.sb.depth);
	sbitmap_queue_min_shallow_depth(&hctx->sched_tags->bitmap_tags, 1);
	sio_done_fit(hctx->queue->elevator->elevator_data);
}

/* Called by blk_mq_init_hctx() and blk_mq_init_sched(). */
static int sio_init_hctx(struct blk_mq_hw_ctx *hctx, unsigned int hctx_idx)
{
	sio_depth_updated(hctx);
	return 0;
}

/* init_hctx() sets each hardware queue's depths. */
static void sio_init_depths(struct request_queue *q)
{
}
#endif

/*
 * Called by sio_init_sched() with the queue frozen: the scheduler's state of
 * @q in @eq. 3-4 KiB: kmalloc's 4 KiB cache may need an order-1 slab (its
 * minimum order under SLUB debugging), and kvzalloc falls back to vmalloc
 * only above a page, so the fallback is ours: a fragmented phone must not
 * make the switch fail. The QASIO log (32 KiB) only with debugfs, which
 * alone reads it.
 */
static int sio_init_queue(struct request_queue *q, struct elevator_queue *eq)
{
	struct sio_data *sd;
	enum sio_class c;
	enum sio_group g;
	int i;

	sd = kvzalloc_node(sizeof(*sd), GFP_KERNEL | __GFP_NOWARN, q->node);
	if (!sd)
		sd = vzalloc_node(sizeof(*sd), q->node);
	if (!sd)
		return -ENOMEM;
	if (IS_ENABLED(CONFIG_BLK_DEBUG_FS)) {
		sd->qlog = kvcalloc(SIO_NR_QLOG, sizeof(*sd->qlog), GFP_KERNEL);
		if (!sd->qlog) {
			kvfree(sd);
			return -ENOMEM;
		}
	}
	eq->elevator_data = sd;

	spin_lock_init(&sd->lock);
	init_llist_head(&sd->done);
	sd->q = q;
	INIT_LIST_HEAD(&sd->dispatch);
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		for (g = 0; g < SIO_NR_GROUPS; g++)
			INIT_LIST_HEAD(&sd->cls[c].fifo[g]);
		sd->cls[c].sort[SIO_READ] = RB_ROOT;
		sd->cls[c].sort[SIO_WRITE] = RB_ROOT;
	}
	sio_hrtimer_setup(&sd->timer, sio_timer_fn, CLOCK_MONOTONIC, HRTIMER_MODE_ABS);
	sd->phase = SIO_PH_READ;
	sd->write_slice_ms = sio_default_write_slice_ms;
	sd->write_slice_kb = sio_default_write_slice_kb;
	sd->write_slice_rand_ms = 0;
	sd->write_window_ms = sio_default_write_window_ms;
	sd->prio_aging_ms = sio_default_prio_aging_ms;
	sd->read_anticipation_us = sio_default_read_anticipation_us;
	sd->write_pace_us = sio_default_write_pace_us;
	sd->read_hold_us = sio_default_read_hold_us;
	sd->write_merge_max_kb = sio_default_write_merge_max_kb;
	sd->single_write_ms = sio_default_single_write_ms;
	sd->startup_ms = sio_default_startup_ms;
	sd->startup_anticipation_us = sio_default_startup_anticipation_us;
	sd->qasio_boost = sio_default_qasio_boost;
	sd->adaptive = sio_default_adaptive;
	sd->auto_pace = sio_default_auto_pace;
	sd->interference = true;	/* until the device shows otherwise: a phone's eMMC or UFS does */
	for (i = 0; i < SIO_NR_DEPS; i++)
		sd->qasio_dep[i] = sio_default_qasio_dep;
	sd->async_depth = q->nr_requests;
	sd->sync_write_depth = q->nr_requests;

	/* One queue-wide state, dispatched from any hardware queue. */
	blk_queue_flag_set(QUEUE_FLAG_SQ_SCHED, q);
	q->elevator = eq;
	sio_init_depths(q);
	sio_done_fit(sd);

	mutex_lock(&sio_queues_mutex);
	list_add_rcu(&sd->node, &sio_queues);
	mutex_unlock(&sio_queues_mutex);
	return 0;
}

/*
 * Called by elevator_switch() and blk_mq_init_sched() with the queue frozen.
 * From 6.17 the core allocates @eq, and puts it if this fails.
 */
#if SIO_HAVE_INIT_SCHED_EQ
static int sio_init_sched(struct request_queue *q, struct elevator_queue *eq)
{
	return sio_init_queue(q, eq);
}
#else
static int sio_init_sched(struct request_queue *q, struct elevator_type *e)
{
	struct elevator_queue *eq = elevator_alloc(q, e);
	int ret;

	if (!eq)
		return -ENOMEM;
	ret = sio_init_queue(q, eq);
	if (ret)
		kobject_put(&eq->kobj);
	return ret;
}
#endif

/*
 * Called by elevator_exit() with the queue frozen: every request has
 * completed, so the counters must balance.
 */
static void sio_exit_sched(struct elevator_queue *e)
{
	struct sio_data *sd = e->elevator_data;
	u64 dispatched[SIO_NR_DIRS] = { 0 };
	struct blk_mq_hw_ctx *hctx;
	enum sio_class c;
	enum sio_dir d;
	unsigned long i;

	mutex_lock(&sio_queues_mutex);
	list_del_rcu(&sd->node);
	mutex_unlock(&sio_queues_mutex);
	synchronize_rcu();	/* no kprobe handler or hint work still sees sd */
	hrtimer_cancel(&sd->timer);
	spin_lock(&sd->lock);
	sio_done_apply(sd);
	spin_unlock(&sd->lock);
	queue_for_each_hw_ctx(sd->q, hctx, i) {
		kvfree(hctx->sched_data);
		hctx->sched_data = NULL;
	}

	WARN_ON_ONCE(!list_empty(&sd->dispatch));
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		WARN_ON_ONCE(!sio_class_empty(&sd->cls[c]));
		for (d = SIO_READ; d < SIO_NR_DIRS; d++) {
			struct sio_stats *st = &sd->stats[c][d];

			WARN_ONCE(st->inserted != st->merged + st->dispatched ||
				  st->dispatched != st->completed,
				  "smartio: %s %s unbalanced: inserted %llu merged %llu dispatched %llu completed %llu\n",
				  sio_class_names[c], sio_dir_names[d],
				  st->inserted, st->merged, st->dispatched,
				  st->completed);
			dispatched[d] += st->dispatched;
		}
	}
	/* Pacing counts each write it sends once, the read hold each read. */
	WARN_ONCE(sd->pace_delayed > sd->paced_writes ||
		  sd->paced_writes + sd->unpaced_writes + sd->own_writes >
		  dispatched[SIO_WRITE] ||
		  sd->held_reads > dispatched[SIO_READ] ||
		  sd->due_held_reads > dispatched[SIO_READ],
		  "smartio: pacing unbalanced: paced %llu delayed %llu unpaced %llu own %llu of %llu writes, held %llu (%llu for a write due) of %llu reads\n",
		  sd->paced_writes, sd->pace_delayed, sd->unpaced_writes,
		  sd->own_writes, dispatched[SIO_WRITE], sd->held_reads,
		  sd->due_held_reads, dispatched[SIO_READ]);
	WARN_ONCE(sd->dropped, "smartio: %llu requests freed without dispatch\n",
		  sd->dropped);
	WARN_ONCE(atomic_long_read(&sd->done_lost),
		  "smartio: %ld completions lost: no memory for their records\n",
		  atomic_long_read(&sd->done_lost));
	kvfree(sd->qlog);
	kvfree(sd);
}

/* sysfs attributes: /sys/block/<dev>/queue/iosched/ */

/*
 * Each tunable: show prints the value, store parses it with kstrtoint,
 * returns the parse error and clamps to [min, max].
 */
#define SIO_TUNABLE(name, field, min, max)				\
static ssize_t sio_##name##_show(struct elevator_queue *e, char *page)	\
{									\
	struct sio_data *sd = e->elevator_data;				\
									\
	return sysfs_emit(page, "%d\n", READ_ONCE(sd->field));		\
}									\
									\
static ssize_t sio_##name##_store(struct elevator_queue *e,		\
				  const char *page, size_t count)	\
{									\
	struct sio_data *sd = e->elevator_data;				\
	int val, ret;							\
									\
	ret = kstrtoint(page, 0, &val);					\
	if (ret)							\
		return ret;						\
	WRITE_ONCE(sd->field, clamp(val, min, max));			\
	sio_kick(sd);							\
	return count;							\
}

SIO_TUNABLE(write_slice_ms, write_slice_ms, 1, 60000);
SIO_TUNABLE(write_slice_kb, write_slice_kb, 0, 65536);
SIO_TUNABLE(write_slice_rand_ms, write_slice_rand_ms, 0, 60000);
SIO_TUNABLE(write_window_ms, write_window_ms, 0, 60000);
SIO_TUNABLE(prio_aging_ms, prio_aging_ms, 1, 600000);	/* 0 would starve lower classes */
SIO_TUNABLE(read_anticipation_us, read_anticipation_us, 0, 100000);
SIO_TUNABLE(write_pace_us, write_pace_us, 0, 1000000);
SIO_TUNABLE(write_pace_rand_us, write_pace_rand_us, 0, 1000000);
SIO_TUNABLE(read_hold_us, read_hold_us, 0, 100000);
SIO_TUNABLE(write_merge_max_kb, write_merge_max_kb, 0, 65536);
SIO_TUNABLE(single_write_ms, single_write_ms, 0, 60000);
SIO_TUNABLE(startup_ms, startup_ms, 0, 600000);
SIO_TUNABLE(startup_anticipation_us, startup_anticipation_us, 0, 1000000);
SIO_TUNABLE(qasio_boost, qasio_boost, 0, 1);
SIO_TUNABLE(adaptive, adaptive, 0, 1);
SIO_TUNABLE(auto_pace, auto_pace, 0, 1);
SIO_TUNABLE(qasio_meta, qasio_dep[SIO_DEP_META], 0, 1);
SIO_TUNABLE(qasio_data, qasio_dep[SIO_DEP_DATA], 0, 1);
SIO_TUNABLE(qasio_sync, qasio_dep[SIO_DEP_SYNC], 0, 1);
SIO_TUNABLE(dispatch_limit_seq_read, dispatch_limit[SIO_SEQ_READ], 0, 4096);
SIO_TUNABLE(dispatch_limit_seq_write, dispatch_limit[SIO_SEQ_WRITE], 0, 4096);
SIO_TUNABLE(dispatch_limit_rand_read, dispatch_limit[SIO_RAND_READ], 0, 4096);
SIO_TUNABLE(dispatch_limit_rand_write, dispatch_limit[SIO_RAND_WRITE], 0, 4096);
#undef SIO_TUNABLE

/*
 * async_depth: scheduler tags async requests may hold, 1 to sync_write_depth
 * (as mq-deadline's); reset to its default when nr_requests changes.
 */
static ssize_t sio_async_depth_show(struct elevator_queue *e, char *page)
{
	struct sio_data *sd = e->elevator_data;

	return sysfs_emit(page, "%u\n", READ_ONCE(sd->async_depth));
}

static ssize_t sio_async_depth_store(struct elevator_queue *e,
				     const char *page, size_t count)
{
	struct sio_data *sd = e->elevator_data;
	unsigned int val;
	int ret;

	ret = kstrtouint(page, 0, &val);
	if (ret)
		return ret;
	WRITE_ONCE(sd->async_depth, clamp(val, 1U, READ_ONCE(sd->sync_write_depth)));
	return count;
}

#define SIO_ATTR(name) __ATTR(name, 0644, sio_##name##_show, sio_##name##_store)

static struct elv_fs_entry sio_attrs[] = {
	SIO_ATTR(write_slice_ms),
	SIO_ATTR(write_slice_kb),
	SIO_ATTR(write_slice_rand_ms),
	SIO_ATTR(write_window_ms),
	SIO_ATTR(prio_aging_ms),
	SIO_ATTR(read_anticipation_us),
	SIO_ATTR(write_pace_us),
	SIO_ATTR(write_pace_rand_us),
	SIO_ATTR(read_hold_us),
	SIO_ATTR(write_merge_max_kb),
	SIO_ATTR(single_write_ms),
	SIO_ATTR(startup_ms),
	SIO_ATTR(startup_anticipation_us),
	SIO_ATTR(qasio_boost),
	SIO_ATTR(adaptive),
	SIO_ATTR(auto_pace),
	SIO_ATTR(qasio_meta),
	SIO_ATTR(qasio_data),
	SIO_ATTR(qasio_sync),
	SIO_ATTR(dispatch_limit_seq_read),
	SIO_ATTR(dispatch_limit_seq_write),
	SIO_ATTR(dispatch_limit_rand_read),
	SIO_ATTR(dispatch_limit_rand_write),
	SIO_ATTR(async_depth),
	__ATTR_NULL
};

#undef SIO_ATTR

/* debugfs: /sys/kernel/debug/block/<dev>/sched/ */

#ifdef CONFIG_BLK_DEBUG_FS
static const char *const sio_phase_names[] = { "read", "anticipate", "window" };

static int sio_stats_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct sio_data *sd = q->elevator->elevator_data;
	u64 tot[4] = { 0 };
	enum sio_class c;
	enum sio_dir d;
	int i, pending;
	bool learned;

	spin_lock(&sd->lock);
	sio_done_apply(sd);
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		for (d = SIO_READ; d < SIO_NR_DIRS; d++) {
			struct sio_stats *st = &sd->stats[c][d];

			seq_printf(m, "%s_%s inserted=%llu merged=%llu dispatched=%llu completed=%llu boosted=%llu\n",
				   sio_class_names[c], sio_dir_names[d],
				   st->inserted, st->merged, st->dispatched,
				   st->completed, st->boosted);
			tot[0] += st->inserted;
			tot[1] += st->merged;
			tot[2] += st->dispatched;
			tot[3] += st->completed;
		}
	}
	seq_printf(m, "total inserted=%llu merged=%llu dispatched=%llu completed=%llu\n",
		   tot[0], tot[1], tot[2], tot[3]);
	seq_printf(m, "events requeued=%llu requeue_merged=%llu dropped=%llu bio_merged=%llu sync_promoted=%llu write_slice_expired=%llu write_windows=%llu prio_aged=%llu limit_blocked=%llu write_merges_refused=%llu\n",
		   sd->requeued, sd->requeue_merged, sd->dropped, sd->bio_merged,
		   sd->sync_promoted, sd->write_slice_expired, sd->write_windows,
		   sd->prio_aged, sd->limit_blocked, sd->write_merges_refused);
	seq_printf(m, "anticipation holds=%llu hits=%llu expired=%llu lower_class_reads=%llu\n",
		   sd->antic_holds, sd->antic_hits, sd->antic_expired,
		   sd->antic_lower_reads);
	seq_printf(m, "pacing paced_writes=%llu delayed=%llu unpaced_writes=%llu held_reads=%llu reader_held_writes=%llu own_writes=%llu due_held_reads=%llu\n",
		   sd->paced_writes, sd->pace_delayed, sd->unpaced_writes,
		   sd->held_reads, sd->reader_held_writes, sd->own_writes,
		   sd->due_held_reads);
	seq_printf(m, "single_write holds=%llu\n", sd->single_write_holds);
	seq_printf(m, "startup startups=%llu holds=%llu\n", sd->startups,
		   sd->startup_holds);
	seq_printf(m, "adaptive interference=%d turned_on=%llu turned_off=%llu seq_read_alone_us=%llu seq_read_alone_n=%u seq_read_beside_n=%u seq_read_beside_slow=%u rand_read_alone_us=%llu rand_read_alone_n=%u rand_read_beside_n=%u rand_read_beside_slow=%u\n",
		   sd->interference, sd->interference_on, sd->interference_off,
		   div_u64(sd->read_alone_ns[0], NSEC_PER_USEC), sd->read_alone_n[0],
		   sd->read_beside_n[0], sd->read_beside_slow[0],
		   div_u64(sd->read_alone_ns[1], NSEC_PER_USEC), sd->read_alone_n[1],
		   sd->read_beside_n[1], sd->read_beside_slow[1]);
	learned = sio_pace_learned(sd);
	seq_printf(m, "auto_pace learned=%d seq_write_alone_us=%llu seq_write_alone_n=%u rand_write_alone_us=%llu rand_write_alone_n=%u pace_us=%llu pace_rand_us=%llu read_hold_us=%llu\n",
		   learned,
		   div_u64(sd->write_alone_ns[0], NSEC_PER_USEC), sd->write_alone_n[0],
		   div_u64(sd->write_alone_ns[1], NSEC_PER_USEC), sd->write_alone_n[1],
		   learned ? div_u64(sio_learned_pace_ns(sd, 0), NSEC_PER_USEC) : 0,
		   learned ? div_u64(sio_learned_pace_ns(sd, 1), NSEC_PER_USEC) : 0,
		   div_u64(sio_read_hold_ns(sd), NSEC_PER_USEC));
	for (i = 0; i < SIO_NR_DEPS; i++) {
		struct sio_dep_stats *st = &sd->dep_stats[i];
		int j;

		pending = 0;
		for (j = 0; j < SIO_NR_HINTS; j++)
			pending += sd->hints[j].end && sd->hints[j].dep == i;
		seq_printf(m, "qasio_%s detected=%llu found_queued=%llu found_dispatched=%llu not_found=%llu pending=%d boosted=%llu\n",
			   sio_dep_names[i], st->detected, st->found_queued,
			   st->found_dispatched, st->not_found, pending,
			   st->boosted);
	}
	seq_printf(m, "qasio_discard async_inserted=%llu\n", sd->discard_async);
	seq_printf(m, "qasio_file boosted_with_file=%llu\n", sd->owner_boosted);
	seq_printf(m, "depth nr_requests=%lu async=%u sync_write=%u\n",
		   (unsigned long)sd->q->nr_requests, sd->async_depth, sd->sync_write_depth);
	spin_unlock(&sd->lock);
	return 0;
}

static int sio_inflight_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct sio_data *sd = q->elevator->elevator_data;
	enum sio_kind k;

	spin_lock(&sd->lock);
	sio_done_apply(sd);
	for (k = 0; k < SIO_NR_KINDS; k++)
		seq_printf(m, "%s queued=%u inflight=%u\n", sio_kind_names[k],
			   sd->queued[k], sd->inflight[k]);
	spin_unlock(&sd->lock);
	return 0;
}

static int sio_phase_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct sio_data *sd = q->elevator->elevator_data;

	spin_lock(&sd->lock);
	sio_done_apply(sd);
	seq_printf(m, "%s\n", sio_phase_names[sd->phase]);
	spin_unlock(&sd->lock);
	return 0;
}

static int sio_kprobes_show(void *data, struct seq_file *m)
{
	int i;

	mutex_lock(&sio_queues_mutex);
	for (i = 0; i < SIO_NR_KPROBES; i++) {
		if (!sio_kprobes_live)
			seq_printf(m, "%s off\n", sio_kprobe_tmpl[i].symbol_name);
		else if (sio_kprobe_err[i])
			seq_printf(m, "%s unavailable %d\n",
				   sio_kprobe_tmpl[i].symbol_name, sio_kprobe_err[i]);
		else
			seq_printf(m, "%s registered%s\n",
				   sio_kprobe_tmpl[i].symbol_name,
				   kprobe_ftrace(&sio_kprobes[i]) ? " ftrace" : " int3");
	}
	mutex_unlock(&sio_queues_mutex);
	seq_printf(m, "nmi_hints deferred=%ld dropped=%ld\n",
		   atomic_long_read(&sio_nmi_deferred),
		   atomic_long_read(&sio_nmi_dropped));
	return 0;
}

/* One line per queued request, as mq-deadline's *_fifo_list files. */
static int sio_rq_show(struct seq_file *m, void *v)
{
	struct request *rq = list_entry(v, struct request, queuelist);
	unsigned long flags = sio_rq_flags(rq);

	seq_printf(m, "%p sector=%llu sectors=%u op=%s%s%s kind=%s group=%s%s\n",
		   rq, (unsigned long long)blk_rq_pos(rq), blk_rq_sectors(rq),
		   sio_dir_names[sio_rq_dir(rq)],
		   op_is_sync(rq->cmd_flags) ? " sync" : "",
		   flags & SIO_RQ_DISPATCHED ? " requeued" : "",
		   sio_kind_names[sio_rq_kind(rq)],
		   sio_group_names[sio_rq_group(rq)],
		   flags & SIO_RQ_BOOSTED ? " boosted" : "");
	return 0;
}

#define SIO_DEBUGFS_LIST(name, listexpr)				\
static void *sio_##name##_start(struct seq_file *m, loff_t *pos)	\
	__acquires(&sd->lock)						\
{									\
	struct request_queue *q = m->private;				\
	struct sio_data *sd = q->elevator->elevator_data;		\
									\
	spin_lock(&sd->lock);						\
	return seq_list_start(&(listexpr), *pos);			\
}									\
									\
static void *sio_##name##_next(struct seq_file *m, void *v, loff_t *pos) \
{									\
	struct request_queue *q = m->private;				\
	struct sio_data *sd = q->elevator->elevator_data;		\
									\
	return seq_list_next(v, &(listexpr), pos);			\
}									\
									\
static void sio_##name##_stop(struct seq_file *m, void *v)		\
	__releases(&sd->lock)						\
{									\
	struct request_queue *q = m->private;				\
	struct sio_data *sd = q->elevator->elevator_data;		\
									\
	spin_unlock(&sd->lock);						\
}									\
									\
static const struct seq_operations sio_##name##_seq_ops = {		\
	.start	= sio_##name##_start,					\
	.next	= sio_##name##_next,					\
	.stop	= sio_##name##_stop,					\
	.show	= sio_rq_show,						\
}

#define SIO_DEBUGFS_FIFO(c, g, name) \
	SIO_DEBUGFS_LIST(name, sd->cls[c].fifo[g])

SIO_DEBUGFS_LIST(dispatch, sd->dispatch);
SIO_DEBUGFS_FIFO(SIO_RT, SIO_G_READ, rt_read);
SIO_DEBUGFS_FIFO(SIO_RT, SIO_G_SYNC_WRITE, rt_sync_write);
SIO_DEBUGFS_FIFO(SIO_RT, SIO_G_BOOSTED_WRITE, rt_boosted_write);
SIO_DEBUGFS_FIFO(SIO_RT, SIO_G_ASYNC_WRITE, rt_async_write);
SIO_DEBUGFS_FIFO(SIO_BE, SIO_G_READ, be_read);
SIO_DEBUGFS_FIFO(SIO_BE, SIO_G_SYNC_WRITE, be_sync_write);
SIO_DEBUGFS_FIFO(SIO_BE, SIO_G_BOOSTED_WRITE, be_boosted_write);
SIO_DEBUGFS_FIFO(SIO_BE, SIO_G_ASYNC_WRITE, be_async_write);
SIO_DEBUGFS_FIFO(SIO_IDLE, SIO_G_READ, idle_read);
SIO_DEBUGFS_FIFO(SIO_IDLE, SIO_G_SYNC_WRITE, idle_sync_write);
SIO_DEBUGFS_FIFO(SIO_IDLE, SIO_G_BOOSTED_WRITE, idle_boosted_write);
SIO_DEBUGFS_FIFO(SIO_IDLE, SIO_G_ASYNC_WRITE, idle_async_write);
#undef SIO_DEBUGFS_FIFO
#undef SIO_DEBUGFS_LIST

/*
 * The QASIO log, oldest first: "<ms> <what> <dep> <start>+<sectors> <pid>",
 * pid the waiting task (for d and c, the write's submitter). what:
 * Q a wait found its write queued and boosted it, D found it dispatched,
 * P found nothing (kept for retry), R found it on a retry, X never found;
 * d a boosted write was dispatched, c it completed (dep "-").
 */
static int sio_qlog_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct sio_data *sd = q->elevator->elevator_data;
	unsigned int i, n, first;
	struct sio_qlog *copy;

	copy = kvmalloc_array(SIO_NR_QLOG, sizeof(*copy), GFP_KERNEL);
	if (!copy)
		return -ENOMEM;
	spin_lock(&sd->lock);
	sio_done_apply(sd);
	n = min_t(unsigned int, sd->qlog_next, SIO_NR_QLOG);
	first = sd->qlog_next - n;
	for (i = 0; i < n; i++)
		copy[i] = sd->qlog[(first + i) % SIO_NR_QLOG];
	spin_unlock(&sd->lock);
	for (i = 0; i < n; i++)
		seq_printf(m, "%llu.%03llu %c %s %llu+%llu %d\n",
			   copy[i].t_ns / NSEC_PER_MSEC,
			   (copy[i].t_ns / NSEC_PER_USEC) % 1000, copy[i].what,
			   copy[i].dep < SIO_NR_DEPS ? sio_dep_names[copy[i].dep] : "-",
			   (unsigned long long)copy[i].start,
			   (unsigned long long)(copy[i].end - copy[i].start),
			   copy[i].pid);
	kvfree(copy);
	return 0;
}

#define SIO_FIFO_ATTR(name) {#name "_fifo_list", 0400, .seq_ops = &sio_##name##_seq_ops}

static const struct blk_mq_debugfs_attr sio_queue_debugfs_attrs[] = {
	{"stats", 0400, sio_stats_show},
	{"inflight", 0400, sio_inflight_show},
	{"phase", 0400, sio_phase_show},
	{"kprobes", 0400, sio_kprobes_show},
	{"qasio_log", 0400, sio_qlog_show},
	{"dispatch", 0400, .seq_ops = &sio_dispatch_seq_ops},
	SIO_FIFO_ATTR(rt_read),
	SIO_FIFO_ATTR(rt_sync_write),
	SIO_FIFO_ATTR(rt_boosted_write),
	SIO_FIFO_ATTR(rt_async_write),
	SIO_FIFO_ATTR(be_read),
	SIO_FIFO_ATTR(be_sync_write),
	SIO_FIFO_ATTR(be_boosted_write),
	SIO_FIFO_ATTR(be_async_write),
	SIO_FIFO_ATTR(idle_read),
	SIO_FIFO_ATTR(idle_sync_write),
	SIO_FIFO_ATTR(idle_boosted_write),
	SIO_FIFO_ATTR(idle_async_write),
	{},
};

#undef SIO_FIFO_ATTR
#endif /* CONFIG_BLK_DEBUG_FS */

static struct elevator_type sio_iosched = {
	.ops = {
		.depth_updated		= sio_depth_updated,
		.limit_depth		= sio_limit_depth,
		.insert_requests	= sio_insert_requests,
		.dispatch_request	= sio_dispatch_request,
		.prepare_request	= sio_prepare_request,
		.finish_request		= sio_finish_request,
		.requeue_request	= sio_requeue_request,
		.next_request		= sio_next_request,
		.former_request		= sio_former_request,
		.allow_merge		= sio_allow_merge,
		.bio_merge		= sio_bio_merge,
		.request_merge		= sio_request_merge,
		.requests_merged	= sio_requests_merged,
		.request_merged		= sio_request_merged,
		.has_work		= sio_has_work,
		.init_sched		= sio_init_sched,
		.exit_sched		= sio_exit_sched,
#if !SIO_HAVE_DEPTH_UPDATED_Q
		.init_hctx		= sio_init_hctx,
#endif
	},
#ifdef CONFIG_BLK_DEBUG_FS
	.queue_debugfs_attrs = sio_queue_debugfs_attrs,
#endif
	.elevator_attrs = sio_attrs,
	.elevator_name = "smartio",
	.elevator_owner = THIS_MODULE,
};

/*
 * The probes are registered once, here, and unregistered at exit: never in
 * init_sched() or exit_sched(), which run with the queue frozen, since
 * register_kprobe() allocates with GFP_KERNEL and takes text_mutex and
 * cpus_read_lock (stop_machine on arm64), and reclaim waiting on writeback to
 * that very queue would deadlock. With no queue on smartio their handlers
 * find none in sio_queues and do nothing.
 */
/* Wait for the hints of int3 kprobes under way: their irq_work, then their work. */
static void sio_nmi_sync(void)
{
	int cpu;

	for_each_possible_cpu(cpu)
		irq_work_sync(&per_cpu_ptr(&sio_nmi_bufs, cpu)->work);
	for_each_possible_cpu(cpu)
		flush_work(&per_cpu_ptr(&sio_nmi_bufs, cpu)->apply);
}

static int __init sio_init(void)
{
	int cpu, ret;

	BUILD_BUG_ON(BITS_PER_LONG < 64);	/* SIO_RQ_PID_SHIFT */
	if (sio_probe_shallow())
		return -ENOMEM;
	for_each_possible_cpu(cpu) {
		init_irq_work(&per_cpu_ptr(&sio_nmi_bufs, cpu)->work,
			      sio_nmi_work_fn);
		INIT_WORK(&per_cpu_ptr(&sio_nmi_bufs, cpu)->apply, sio_nmi_apply_fn);
	}
	mutex_lock(&sio_queues_mutex);
	sio_kprobes_get();
	mutex_unlock(&sio_queues_mutex);
	ret = elv_register(&sio_iosched);
	if (ret) {
		mutex_lock(&sio_queues_mutex);
		sio_kprobes_put();
		mutex_unlock(&sio_queues_mutex);
		sio_nmi_sync();
	}
	return ret;
}

static void __exit sio_exit(void)
{
	elv_unregister(&sio_iosched);
	mutex_lock(&sio_queues_mutex);
	WARN_ON_ONCE(!list_empty(&sio_queues));
	sio_kprobes_put();
	mutex_unlock(&sio_queues_mutex);
	/* The probes are gone: no irq_work is queued any more; let any finish. */
	sio_nmi_sync();
}

module_init(sio_init);
module_exit(sio_exit);

MODULE_AUTHOR("smartio");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("SmartIO I/O scheduler: read/write isolation with QASIO boost");
