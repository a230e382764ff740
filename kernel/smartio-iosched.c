// SPDX-License-Identifier: GPL-2.0
/*
 * SmartIO I/O scheduler for blk-mq (Linux 6.1).
 *
 * Read/write isolation for flash storage, after "SmartIO" (MobiSys'15,
 * Algorithms 6.1 and 6.2) with the quasi-asynchronous I/O boost of "QASIO"
 * (FAST'15):
 *
 *  1. I/O priority class first (RT > BE > IDLE); a request of a lower class
 *     that has waited prio_aging_ms is served anyway.
 *  2. Within a class, reads before writes; among writes, sync writes before
 *     boosted async writes before other async writes. FIFO inside a group.
 *  3. A write never waits more than write_slice_ms behind reads. When that
 *     slice expires the writes get the device for a slice of their own,
 *     write_window_ms (Algorithm 6.1: the chosen queue keeps dispatching
 *     until its time slice ends): writes go first and nothing is held for a
 *     reader, which still gets the device whenever no write is waiting.
 *     0 = one write per expired slice. Letting writes through in windows
 *     rather than one at a time pays the reader's switching cost once per
 *     window (see README, "Scheduler module").
 *  4. Per-kind dispatch limits (sequential/random x read/write) that hold only
 *     while another kind is waiting (Algorithm 6.2); 0 means no limit.
 *  5. QASIO: kprobes on the kernel's wait points (__lock_buffer,
 *     __wait_on_buffer, folio_wait_writeback) tell the scheduler which queued
 *     async write a task now waits on; that write moves above the other async
 *     writes, never above sync I/O. ext4 on 6.1 issues discards from a worker
 *     with submit_bio_wait(), which marks them REQ_SYNC, so the paper's
 *     D_discard case is already sync I/O here and needs no probe.
 *  6. Anticipation: after a read completes, writes are held for up to
 *     read_anticipation_us so that a synchronous reader's next read does not
 *     queue behind a write it could not see (the write slice still bounds
 *     the writes' wait). 3000 us: on s5-emmc in the testbed it cut a
 *     sequential reader's slowdown beside a writer from 3.5 to 1.2.
 *
 * Flush and FUA requests never reach an elevator on 6.1 (the flush machinery
 * inserts them into the hardware queue directly); should one arrive anyway it
 * goes to the head dispatch list, unreordered.
 */
#include <linux/kernel.h>
#include <linux/module.h>
#include <linux/blkdev.h>
#include <linux/blk-mq.h>
#include <linux/bio.h>
#include <linux/buffer_head.h>
#include <linux/hrtimer.h>
#include <linux/kprobes.h>
#include <linux/rbtree.h>
#include <linux/rculist.h>
#include <linux/sbitmap.h>
#include <linux/slab.h>
#include <linux/seq_file.h>

#include <trace/events/block.h>

#include "elevator.h"
#include "blk.h"
#include "blk-mq.h"
#include "blk-mq-debugfs.h"
#include "blk-mq-sched.h"
#include "blk-mq-tag.h"

/* Tunable defaults. */
static const int sio_default_write_slice_ms = 100;	/* write waits <= this behind reads, ms */
static const int sio_default_write_window_ms = 30;	/* then writes go first for this long, ms */
static const int sio_default_prio_aging_ms = 10000;	/* class waits <= this behind higher, ms */
static const int sio_default_read_anticipation_us = 3000; /* idle for next read, us; 0 = off */
static const int sio_default_qasio_boost = 1;		/* 1 = boost async writes a task awaits */
static const int sio_default_async_depth_pct = 75;	/* share of tags async I/O may hold, % */

#define SIO_NR_STREAMS		8	/* sequential streams tracked per direction */
#define SIO_SEQ_GAP_SECTORS	64	/* a forward gap this small still counts as sequential */
#define SIO_NR_HINTS		64	/* pending boost hints per queue */

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

/* Dispatch order inside a class: the lowest value goes first. */
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
 * Per-request state, kept in rq->elv.priv[0]: flag bits, then the class,
 * group and kind recorded when the request was first inserted.
 */
#define SIO_RQ_OWNED		BIT(0)	/* inserted through this scheduler */
#define SIO_RQ_QUEUED		BIT(1)	/* on a group FIFO, counted in queued[] */
#define SIO_RQ_DISPATCHED	BIT(2)	/* counted as dispatched once */
#define SIO_RQ_INFLIGHT		BIT(3)	/* owned by the driver, counted in inflight[] */
#define SIO_RQ_MERGED		BIT(4)	/* merged into another request */
#define SIO_RQ_BOOSTED		BIT(5)	/* moved up by a QASIO hint */
#define SIO_RQ_CLASS_SHIFT	8
#define SIO_RQ_GROUP_SHIFT	12
#define SIO_RQ_KIND_SHIFT	16
#define SIO_RQ_FIELD_MASK	0xfUL

struct sio_stats {
	u64 inserted;
	u64 merged;
	u64 dispatched;
	u64 boosted;
	atomic64_t completed;
};

/* A sector range some task is waiting on, reported by a kprobe. */
struct sio_hint {
	sector_t sector;
	unsigned int nr_sectors;
};

/* Requests of one I/O priority class. */
struct sio_class_queue {
	struct list_head fifo[SIO_NR_GROUPS];
	struct rb_root sort[SIO_NR_DIRS];	/* by sector, for merging and hint lookup */
};

/* Per-queue state; one instance per request_queue using smartio. */
struct sio_data {
	spinlock_t lock;			/* protects everything not atomic below */
	struct request_queue *q;
	struct list_head node;			/* on sio_queues, for the kprobes (RCU) */

	struct list_head dispatch;		/* at-head and flush requests, served first */
	struct sio_class_queue cls[SIO_NR_CLASSES];
	unsigned int queued[SIO_NR_KINDS];	/* requests waiting on a group FIFO */
	atomic_t inflight[SIO_NR_KINDS];	/* requests dispatched, not yet completed */

	sector_t stream_end[SIO_NR_DIRS][SIO_NR_STREAMS];
	unsigned int stream_next[SIO_NR_DIRS];

	u64 last_write_ns;			/* last dispatch of a write: starvation clock */
	u64 write_window_end_ns;		/* writes go first until then */
	atomic64_t last_read_done_ns;		/* last completion of a read */
	struct hrtimer antic_timer;		/* reruns the queue when anticipation ends */
	bool antic_holding;			/* writes are being held for a reader */

	spinlock_t hint_lock;			/* protects hints[]; taken from kprobes */
	struct sio_hint hints[SIO_NR_HINTS];
	unsigned int nr_hints;

	/* tunables */
	int write_slice_ms;
	int write_window_ms;
	int prio_aging_ms;
	int read_anticipation_us;
	int qasio_boost;
	int dispatch_limit[SIO_NR_KINDS];
	unsigned int async_depth;

	/* counters (debugfs) */
	struct sio_stats stats[SIO_NR_CLASSES][SIO_NR_DIRS];
	atomic64_t requeued;
	atomic64_t dropped;			/* freed without dispatch or merge: a bug */
	u64 antic_holds;
	u64 antic_hits;
	u64 antic_expired;
	u64 write_slice_expired;
	u64 write_windows;			/* write windows opened */
	u64 prio_aged;
	u64 limit_blocked;
	u64 bio_merged;				/* bios merged into queued requests */
	atomic64_t hints_received;
	atomic64_t hints_dropped;
};

static LIST_HEAD(sio_queues);
static DEFINE_MUTEX(sio_queues_mutex);

static const char *const sio_class_names[SIO_NR_CLASSES] = { "rt", "be", "idle" };
static const char *const sio_dir_names[SIO_NR_DIRS] = { "read", "write" };
static const char *const sio_kind_names[SIO_NR_KINDS] = {
	"seq_read", "seq_write", "rand_read", "rand_write",
};

/* Helpers. */

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

/* A request in @root that overlaps [start, end), or NULL. */
static struct request *sio_rb_overlap(struct rb_root *root, sector_t start,
				      sector_t end)
{
	struct rb_node *node = root->rb_node;

	while (node) {
		struct request *rq = rb_entry_rq(node);
		sector_t pos = blk_rq_pos(rq);

		if (pos + blk_rq_sectors(rq) <= start)
			node = node->rb_right;
		else if (pos >= end)
			node = node->rb_left;
		else
			return rq;
	}
	return NULL;
}

/*
 * Sequential if it starts where a tracked stream of the same direction ended
 * (or a little after), or where a queued request ends. Records the new end.
 */
static bool sio_classify_seq(struct sio_data *sd, struct request *rq)
{
	enum sio_dir dir = sio_rq_dir(rq);
	sector_t pos = blk_rq_pos(rq);
	bool seq = false;
	int i, slot = -1;

	lockdep_assert_held(&sd->lock);

	for (i = 0; i < SIO_NR_STREAMS; i++) {
		sector_t end = sd->stream_end[dir][i];

		if (end && pos >= end && pos - end <= SIO_SEQ_GAP_SECTORS) {
			seq = true;
			slot = i;
			break;
		}
	}
	if (!seq && pos &&
	    sio_rb_overlap(&sd->cls[sio_rq_class(rq)].sort[dir], pos - 1, pos))
		seq = true;
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
	return !sio_kind_is_read(kind) && sd->antic_holding;
}

/*
 * Algorithm 6.2: a kind at its limit may dispatch more only while no other
 * kind is waiting; a lone kind has no limit.
 */
static bool sio_may_dispatch(struct sio_data *sd, enum sio_kind kind)
{
	int limit = READ_ONCE(sd->dispatch_limit[kind]);

	lockdep_assert_held(&sd->lock);

	if (!limit || atomic_read(&sd->inflight[kind]) < limit)
		return true;
	return !sio_others_waiting(sd, kind);
}

/*
 * Should writes wait for a synchronous reader's next read? Yes while a read
 * is in flight or one completed less than read_anticipation_us ago. Arms the
 * timer that reruns the queue when the window closes.
 */
static bool sio_anticipate(struct sio_data *sd, u64 now)
{
	u64 window = (u64)READ_ONCE(sd->read_anticipation_us) * NSEC_PER_USEC;
	u64 done;

	lockdep_assert_held(&sd->lock);

	if (!window)
		goto release;
	if (atomic_read(&sd->inflight[SIO_SEQ_READ]) +
	    atomic_read(&sd->inflight[SIO_RAND_READ])) {
		/* The read's completion arms the timer (sio_finish_request). */
		goto hold;
	}
	done = atomic64_read(&sd->last_read_done_ns);
	if (!done || now - done >= window)
		goto release;
	hrtimer_start(&sd->antic_timer, ns_to_ktime(done + window - now),
		      HRTIMER_MODE_REL);
hold:
	if (!sd->antic_holding) {
		sd->antic_holding = true;
		sd->antic_holds++;
	}
	return true;

release:
	if (sd->antic_holding) {
		sd->antic_holding = false;
		sd->antic_expired++;
	}
	return false;
}

/*
 * Algorithm 6.1 inside one class: reads, then sync writes, boosted writes and
 * async writes, each FIFO; a write starved for write_slice_ms goes first and
 * opens a write window, during which writes go first. Returns NULL with *hold
 * set when writes are held for an anticipated read.
 */
static struct request *sio_select_in_class(struct sio_data *sd,
					   struct sio_class_queue *cq,
					   u64 now, bool *hold)
{
	u64 slice = (u64)READ_ONCE(sd->write_slice_ms) * NSEC_PER_MSEC;
	struct request *oldest_write, *rq;
	enum sio_group g;

	lockdep_assert_held(&sd->lock);

	/*
	 * The clock starts at the later of the write's arrival and the last
	 * write dispatch, so it fires only when reads (or anticipation) have
	 * kept every write off the device for a whole slice.
	 */
	oldest_write = sio_oldest(cq, SIO_G_SYNC_WRITE, SIO_G_ASYNC_WRITE);
	if (oldest_write && now < sd->write_window_end_ns) {
		sd->antic_holding = false;	/* no reader is waited for */
		if (sio_may_dispatch(sd, sio_rq_kind(oldest_write)))
			return oldest_write;
	}
	if (oldest_write &&
	    now - max(oldest_write->fifo_time, sd->last_write_ns) >= slice) {
		u64 window = (u64)READ_ONCE(sd->write_window_ms) * NSEC_PER_MSEC;

		sd->write_slice_expired++;
		if (window) {
			sd->write_window_end_ns = now + window;
			sd->write_windows++;
		}
		return oldest_write;
	}

	for (g = 0; g < SIO_NR_GROUPS; g++) {
		rq = sio_group_head(cq, g);
		if (!rq)
			continue;
		if (g != SIO_G_READ && sio_anticipate(sd, now)) {
			*hold = true;
			return NULL;
		}
		if (sio_may_dispatch(sd, sio_rq_kind(rq)))
			return rq;
		sd->limit_blocked++;
	}
	return NULL;
}

/* Pick the next request: aged lower classes first, then by class. */
static struct request *sio_select(struct sio_data *sd, u64 now)
{
	u64 aging = (u64)READ_ONCE(sd->prio_aging_ms) * NSEC_PER_MSEC;
	bool higher_waiting = false, hold = false;
	struct request *rq;
	enum sio_class c;

	lockdep_assert_held(&sd->lock);

	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		struct sio_class_queue *cq = &sd->cls[c];

		if (sio_class_empty(cq))
			continue;
		if (higher_waiting && aging) {
			rq = sio_oldest(cq, 0, SIO_NR_GROUPS - 1);
			if (now - rq->fifo_time >= aging) {
				sd->prio_aged++;
				return rq;
			}
		}
		higher_waiting = true;
	}

	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		rq = sio_select_in_class(sd, &sd->cls[c], now, &hold);
		if (rq || hold)
			return rq;
	}
	return NULL;
}

/* Move queued async writes that a task waits on into the boosted group. */
static void sio_apply_hints(struct sio_data *sd)
{
	struct sio_hint hints[SIO_NR_HINTS];
	unsigned int i, n;
	unsigned long irqflags;
	enum sio_class c;

	lockdep_assert_held(&sd->lock);

	if (!READ_ONCE(sd->nr_hints))
		return;
	spin_lock_irqsave(&sd->hint_lock, irqflags);
	n = sd->nr_hints;
	memcpy(hints, sd->hints, n * sizeof(hints[0]));
	sd->nr_hints = 0;
	spin_unlock_irqrestore(&sd->hint_lock, irqflags);

	for (i = 0; i < n; i++) {
		sector_t start = hints[i].sector;
		sector_t end = start + hints[i].nr_sectors;

		for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
			struct sio_class_queue *cq = &sd->cls[c];
			struct request *rq;

			rq = sio_rb_overlap(&cq->sort[SIO_WRITE], start, end);
			if (!rq || sio_rq_group(rq) != SIO_G_ASYNC_WRITE)
				continue;
			list_move_tail(&rq->queuelist, &cq->fifo[SIO_G_BOOSTED_WRITE]);
			sio_rq_set_field(rq, SIO_RQ_GROUP_SHIFT, SIO_G_BOOSTED_WRITE);
			sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_BOOSTED);
			sio_rq_stats(sd, rq)->boosted++;
		}
	}
}

/* Report a sector range a task waits on to the queue that serves it. */
static void sio_hint(struct block_device *bdev, sector_t sector,
		     unsigned int nr_sectors)
{
	struct request_queue *q = bdev_get_queue(bdev);
	unsigned long irqflags;
	struct sio_data *sd;

	rcu_read_lock();
	list_for_each_entry_rcu(sd, &sio_queues, node) {
		if (sd->q != q || !READ_ONCE(sd->qasio_boost))
			continue;
		atomic64_inc(&sd->hints_received);
		spin_lock_irqsave(&sd->hint_lock, irqflags);
		if (sd->nr_hints < SIO_NR_HINTS) {
			sd->hints[sd->nr_hints].sector = sector + bdev->bd_start_sect;
			sd->hints[sd->nr_hints].nr_sectors = nr_sectors;
			sd->nr_hints++;
		} else {
			atomic64_inc(&sd->hints_dropped);
		}
		spin_unlock_irqrestore(&sd->hint_lock, irqflags);
		break;
	}
	rcu_read_unlock();
}

/* kprobe on __lock_buffer() and __wait_on_buffer(): the task waits for @bh. */
static int sio_kp_buffer(struct kprobe *p, struct pt_regs *regs)
{
	struct buffer_head *bh = (void *)regs_get_kernel_argument(regs, 0);

	if (bh && bh->b_bdev && bh->b_size >= SECTOR_SIZE)
		sio_hint(bh->b_bdev, bh->b_blocknr * (bh->b_size >> SECTOR_SHIFT),
			 bh->b_size >> SECTOR_SHIFT);
	return 0;
}

/* kprobe on folio_wait_writeback(): the task waits for the folio's write. */
static int sio_kp_folio(struct kprobe *p, struct pt_regs *regs)
{
	struct folio *folio = (void *)regs_get_kernel_argument(regs, 0);
	struct buffer_head *bh;

	/* Buffers stay attached while the folio is under writeback. */
	if (!folio || !folio_test_writeback(folio))
		return 0;
	bh = folio_buffers(folio);
	if (bh && bh->b_bdev && bh->b_size >= SECTOR_SIZE)
		sio_hint(bh->b_bdev, bh->b_blocknr * (bh->b_size >> SECTOR_SHIFT),
			 folio_size(folio) >> SECTOR_SHIFT);
	return 0;
}

static struct kprobe sio_kprobes[] = {
	{ .symbol_name = "__lock_buffer", .pre_handler = sio_kp_buffer },
	{ .symbol_name = "__wait_on_buffer", .pre_handler = sio_kp_buffer },
	{ .symbol_name = "folio_wait_writeback", .pre_handler = sio_kp_folio },
};

static bool sio_kprobe_ok[ARRAY_SIZE(sio_kprobes)];

/* Timer callback (hardirq): anticipation is over, let writes go. */
static enum hrtimer_restart sio_antic_timer_fn(struct hrtimer *timer)
{
	struct sio_data *sd = container_of(timer, struct sio_data, antic_timer);

	blk_mq_run_hw_queues(sd->q, true);
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
 * returned may belong to another hardware queue.
 */
static struct request *sio_dispatch_request(struct blk_mq_hw_ctx *hctx)
{
	struct sio_data *sd = hctx->queue->elevator->elevator_data;
	u64 now = ktime_get_ns();
	struct request *rq;
	unsigned long flags;

	spin_lock(&sd->lock);
	sio_apply_hints(sd);

	rq = list_first_entry_or_null(&sd->dispatch, struct request, queuelist);
	if (rq) {
		list_del_init(&rq->queuelist);
	} else {
		rq = sio_select(sd, now);
		if (!rq) {
			/* Held by a limit or for a reader: a completion reruns us. */
			if (!sio_class_empty(&sd->cls[SIO_RT]) ||
			    !sio_class_empty(&sd->cls[SIO_BE]) ||
			    !sio_class_empty(&sd->cls[SIO_IDLE]))
				sio_mark_restart(sd->q);
			goto unlock;
		}
		sio_remove_request(sd, rq);
	}

	flags = sio_rq_flags(rq);
	if (!(flags & SIO_RQ_DISPATCHED))
		sio_rq_stats(sd, rq)->dispatched++;
	sio_rq_set_flags(rq, flags | SIO_RQ_DISPATCHED | SIO_RQ_INFLIGHT);
	atomic_inc(&sd->inflight[sio_rq_kind(rq)]);
	sio_stream_advance(sd, rq);
	if (sio_rq_dir(rq) == SIO_WRITE)
		sd->last_write_ns = now;
	rq->rq_flags |= RQF_STARTED;
unlock:
	spin_unlock(&sd->lock);
	return rq;
}

/* Called by sio_insert_requests() with the lock held. */
static void sio_insert_request(struct sio_data *sd, struct request *rq,
			       bool at_head, struct list_head *free)
{
	struct request_queue *q = sd->q;
	unsigned long flags = sio_rq_flags(rq);
	enum sio_dir dir = sio_rq_dir(rq);
	struct sio_class_queue *cq;
	enum sio_group group;
	bool seq;

	lockdep_assert_held(&sd->lock);

	if (!(flags & SIO_RQ_OWNED)) {
		/* First insertion; a requeued request keeps its identity. */
		flags = SIO_RQ_OWNED;
		flags |= (unsigned long)sio_ioprio_class(req_get_ioprio(rq)) <<
			 SIO_RQ_CLASS_SHIFT;
		sio_rq_set_flags(rq, flags);
		sio_rq_stats(sd, rq)->inserted++;
	}

	if (at_head || op_is_flush(rq->cmd_flags)) {
		if (!(flags & SIO_RQ_DISPATCHED))
			sio_rq_set_field(rq, SIO_RQ_KIND_SHIFT, dir == SIO_READ ?
					 SIO_RAND_READ : SIO_RAND_WRITE);
		list_add(&rq->queuelist, &sd->dispatch);
		return;
	}

	if (blk_mq_sched_try_insert_merge(q, rq, free))
		return;

	trace_block_rq_insert(rq);

	seq = sio_classify_seq(sd, rq);
	if (dir == SIO_READ)
		group = SIO_G_READ;
	else if (flags & SIO_RQ_BOOSTED)
		group = SIO_G_BOOSTED_WRITE;
	else if (op_is_sync(rq->cmd_flags))
		group = SIO_G_SYNC_WRITE;
	else
		group = SIO_G_ASYNC_WRITE;
	sio_rq_set_field(rq, SIO_RQ_GROUP_SHIFT, group);
	sio_rq_set_field(rq, SIO_RQ_KIND_SHIFT, dir == SIO_READ ?
			 (seq ? SIO_SEQ_READ : SIO_RAND_READ) :
			 (seq ? SIO_SEQ_WRITE : SIO_RAND_WRITE));

	cq = &sd->cls[sio_rq_class(rq)];
	elv_rb_add(&cq->sort[dir], rq);
	if (rq_mergeable(rq)) {
		elv_rqhash_add(q, rq);
		if (!q->last_merge)
			q->last_merge = rq;
	}
	rq->fifo_time = ktime_get_ns();
	list_add_tail(&rq->queuelist, &cq->fifo[group]);
	sd->queued[sio_rq_kind(rq)]++;
	sio_rq_set_flags(rq, sio_rq_flags(rq) | SIO_RQ_QUEUED);

	if (dir == SIO_READ && sd->antic_holding) {
		sd->antic_holding = false;
		sd->antic_hits++;
	}
}

/* Called by blk_mq_sched_insert_request() and blk_mq_sched_insert_requests(). */
static void sio_insert_requests(struct blk_mq_hw_ctx *hctx,
				struct list_head *list, bool at_head)
{
	struct sio_data *sd = hctx->queue->elevator->elevator_data;
	LIST_HEAD(free);

	spin_lock(&sd->lock);
	while (!list_empty(list)) {
		struct request *rq;

		rq = list_first_entry(list, struct request, queuelist);
		list_del_init(&rq->queuelist);
		sio_insert_request(sd, rq, at_head, &free);
	}
	spin_unlock(&sd->lock);
	blk_mq_free_requests(&free);
}

/* Called from blk_mq_rq_ctx_init() for requests that may be inserted. */
static void sio_prepare_request(struct request *rq)
{
	sio_rq_set_flags(rq, 0);
}

/*
 * Called from blk_mq_free_request(), possibly in interrupt context, so only
 * atomics here. Also called for requests that bypassed the scheduler
 * (passthrough) and for requests merged away.
 */
static void sio_finish_request(struct request *rq)
{
	struct sio_data *sd = rq->q->elevator->elevator_data;
	unsigned long flags = sio_rq_flags(rq);

	if (!(flags & SIO_RQ_OWNED))
		return;
	if (flags & SIO_RQ_INFLIGHT) {
		enum sio_kind kind = sio_rq_kind(rq);

		atomic_dec(&sd->inflight[kind]);
		if (sio_kind_is_read(kind)) {
			u64 window = (u64)READ_ONCE(sd->read_anticipation_us) *
				     NSEC_PER_USEC;

			atomic64_set(&sd->last_read_done_ns, ktime_get_ns());
			if (window && READ_ONCE(sd->antic_holding))
				hrtimer_start(&sd->antic_timer, ns_to_ktime(window),
					      HRTIMER_MODE_REL);
		}
	}
	if (flags & SIO_RQ_DISPATCHED)
		atomic64_inc(&sio_rq_stats(sd, rq)->completed);
	else if (!(flags & SIO_RQ_MERGED))
		atomic64_inc(&sd->dropped);
	sio_rq_set_flags(rq, 0);
}

/* Called from blk_mq_requeue_request(): the driver gave @rq back. */
static void sio_requeue_request(struct request *rq)
{
	struct sio_data *sd = rq->q->elevator->elevator_data;
	unsigned long flags = sio_rq_flags(rq);

	if (!(flags & SIO_RQ_INFLIGHT))
		return;
	atomic_dec(&sd->inflight[sio_rq_kind(rq)]);
	atomic64_inc(&sd->requeued);
	sio_rq_set_flags(rq, flags & ~SIO_RQ_INFLIGHT);
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

/* Called after @next was merged into @rq, lock held; @next will be freed. */
static void sio_requests_merged(struct request_queue *q, struct request *rq,
				struct request *next)
{
	struct sio_data *sd = q->elevator->elevator_data;
	unsigned long nflags = sio_rq_flags(next);

	lockdep_assert_held(&sd->lock);

	sio_rq_stats(sd, next)->merged++;

	/* @rq inherits the earlier FIFO position, and with it the group. */
	if ((nflags & SIO_RQ_QUEUED) && (sio_rq_flags(rq) & SIO_RQ_QUEUED) &&
	    next->fifo_time < rq->fifo_time) {
		list_move(&rq->queuelist, &next->queuelist);
		rq->fifo_time = next->fifo_time;
		sio_rq_set_field(rq, SIO_RQ_GROUP_SHIFT, sio_rq_group(next));
		sio_rq_set_flags(rq, sio_rq_flags(rq) | (nflags & SIO_RQ_BOOSTED));
	}
	sio_remove_request(sd, next);
	sio_rq_set_flags(next, sio_rq_flags(next) | SIO_RQ_MERGED);
}

/* Called by blk_mq_submit_bio() before a request is allocated. */
static bool sio_bio_merge(struct request_queue *q, struct bio *bio,
			  unsigned int nr_segs)
{
	struct sio_data *sd = q->elevator->elevator_data;
	struct request *free = NULL;
	bool ret;

	spin_lock(&sd->lock);
	ret = blk_mq_sched_try_merge(q, bio, nr_segs, &free);
	if (ret)
		sd->bio_merged++;
	spin_unlock(&sd->lock);

	if (free)
		blk_mq_free_request(free);
	return ret;
}

/* Called by blk_mq_sched_has_work(), without the lock. */
static bool sio_has_work(struct blk_mq_hw_ctx *hctx)
{
	struct sio_data *sd = hctx->queue->elevator->elevator_data;
	enum sio_class c;
	enum sio_group g;

	if (!list_empty_careful(&sd->dispatch))
		return true;
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++)
		for (g = 0; g < SIO_NR_GROUPS; g++)
			if (!list_empty_careful(&sd->cls[c].fifo[g]))
				return true;
	return false;
}

/*
 * Called by __blk_mq_alloc_request(): async requests and writes may take only
 * async_depth of the scheduler tags, so a reader always finds a tag and the
 * scheduler gets to see (and prefer) its reads.
 */
static void sio_limit_depth(blk_opf_t opf, struct blk_mq_alloc_data *data)
{
	struct sio_data *sd = data->q->elevator->elevator_data;
	struct sbitmap_queue *bt = &data->hctx->sched_tags->bitmap_tags;
	unsigned int nrr = data->q->nr_requests;

	if (op_is_sync(opf) && !op_is_write(opf))
		return;
	data->shallow_depth = ((sd->async_depth << bt->sb.shift) + nrr - 1) / nrr;
}

/* Called by blk_mq_update_nr_requests() and sio_init_hctx(). */
static void sio_depth_updated(struct blk_mq_hw_ctx *hctx)
{
	struct request_queue *q = hctx->queue;
	struct sio_data *sd = q->elevator->elevator_data;

	sd->async_depth = max(1U, q->nr_requests * sio_default_async_depth_pct / 100);
	sbitmap_queue_min_shallow_depth(&hctx->sched_tags->bitmap_tags, 1);
}

/* Called by blk_mq_init_hctx() and blk_mq_init_sched(). */
static int sio_init_hctx(struct blk_mq_hw_ctx *hctx, unsigned int hctx_idx)
{
	sio_depth_updated(hctx);
	return 0;
}

/* Called by elevator_switch() and blk_mq_init_sched() with the queue frozen. */
static int sio_init_sched(struct request_queue *q, struct elevator_type *e)
{
	struct elevator_queue *eq;
	struct sio_data *sd;
	enum sio_class c;
	enum sio_group g;

	eq = elevator_alloc(q, e);
	if (!eq)
		return -ENOMEM;
	sd = kzalloc_node(sizeof(*sd), GFP_KERNEL, q->node);
	if (!sd) {
		kobject_put(&eq->kobj);
		return -ENOMEM;
	}
	eq->elevator_data = sd;

	spin_lock_init(&sd->lock);
	spin_lock_init(&sd->hint_lock);
	sd->q = q;
	INIT_LIST_HEAD(&sd->dispatch);
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		for (g = 0; g < SIO_NR_GROUPS; g++)
			INIT_LIST_HEAD(&sd->cls[c].fifo[g]);
		sd->cls[c].sort[SIO_READ] = RB_ROOT;
		sd->cls[c].sort[SIO_WRITE] = RB_ROOT;
	}
	hrtimer_init(&sd->antic_timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL);
	sd->antic_timer.function = sio_antic_timer_fn;
	sd->write_slice_ms = sio_default_write_slice_ms;
	sd->write_window_ms = sio_default_write_window_ms;
	sd->prio_aging_ms = sio_default_prio_aging_ms;
	sd->read_anticipation_us = sio_default_read_anticipation_us;
	sd->qasio_boost = sio_default_qasio_boost;
	sd->async_depth = q->nr_requests;

	/* One queue-wide state, dispatched from any hardware queue. */
	blk_queue_flag_set(QUEUE_FLAG_SQ_SCHED, q);
	q->elevator = eq;

	mutex_lock(&sio_queues_mutex);
	list_add_rcu(&sd->node, &sio_queues);
	mutex_unlock(&sio_queues_mutex);
	return 0;
}

/*
 * Called by elevator_exit() with the queue frozen: every request has
 * completed, so the counters must balance.
 */
static void sio_exit_sched(struct elevator_queue *e)
{
	struct sio_data *sd = e->elevator_data;
	enum sio_class c;
	enum sio_dir d;

	mutex_lock(&sio_queues_mutex);
	list_del_rcu(&sd->node);
	mutex_unlock(&sio_queues_mutex);
	synchronize_rcu();	/* no kprobe handler still sees sd */
	hrtimer_cancel(&sd->antic_timer);

	WARN_ON_ONCE(!list_empty(&sd->dispatch));
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		WARN_ON_ONCE(!sio_class_empty(&sd->cls[c]));
		for (d = SIO_READ; d < SIO_NR_DIRS; d++) {
			struct sio_stats *st = &sd->stats[c][d];
			u64 completed = atomic64_read(&st->completed);

			WARN_ONCE(st->inserted != st->merged + st->dispatched ||
				  st->dispatched != completed,
				  "smartio: %s %s unbalanced: inserted %llu merged %llu dispatched %llu completed %llu\n",
				  sio_class_names[c], sio_dir_names[d],
				  st->inserted, st->merged, st->dispatched,
				  completed);
		}
	}
	WARN_ONCE(atomic64_read(&sd->dropped),
		  "smartio: %lld requests freed without dispatch\n",
		  (long long)atomic64_read(&sd->dropped));
	kfree(sd);
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
	blk_mq_run_hw_queues(sd->q, true);				\
	return count;							\
}

SIO_TUNABLE(write_slice_ms, write_slice_ms, 1, 60000);
SIO_TUNABLE(write_window_ms, write_window_ms, 0, 60000);
SIO_TUNABLE(prio_aging_ms, prio_aging_ms, 0, 600000);
SIO_TUNABLE(read_anticipation_us, read_anticipation_us, 0, 100000);
SIO_TUNABLE(qasio_boost, qasio_boost, 0, 1);
SIO_TUNABLE(dispatch_limit_seq_read, dispatch_limit[SIO_SEQ_READ], 0, 4096);
SIO_TUNABLE(dispatch_limit_seq_write, dispatch_limit[SIO_SEQ_WRITE], 0, 4096);
SIO_TUNABLE(dispatch_limit_rand_read, dispatch_limit[SIO_RAND_READ], 0, 4096);
SIO_TUNABLE(dispatch_limit_rand_write, dispatch_limit[SIO_RAND_WRITE], 0, 4096);
#undef SIO_TUNABLE

#define SIO_ATTR(name) __ATTR(name, 0644, sio_##name##_show, sio_##name##_store)

static struct elv_fs_entry sio_attrs[] = {
	SIO_ATTR(write_slice_ms),
	SIO_ATTR(write_window_ms),
	SIO_ATTR(prio_aging_ms),
	SIO_ATTR(read_anticipation_us),
	SIO_ATTR(qasio_boost),
	SIO_ATTR(dispatch_limit_seq_read),
	SIO_ATTR(dispatch_limit_seq_write),
	SIO_ATTR(dispatch_limit_rand_read),
	SIO_ATTR(dispatch_limit_rand_write),
	__ATTR_NULL
};

#undef SIO_ATTR

/* debugfs: /sys/kernel/debug/block/<dev>/sched/ */

static int sio_stats_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct sio_data *sd = q->elevator->elevator_data;
	u64 tot[4] = { 0 };
	enum sio_class c;
	enum sio_dir d;

	spin_lock(&sd->lock);
	for (c = SIO_RT; c < SIO_NR_CLASSES; c++) {
		for (d = SIO_READ; d < SIO_NR_DIRS; d++) {
			struct sio_stats *st = &sd->stats[c][d];
			u64 done = atomic64_read(&st->completed);

			seq_printf(m, "%s_%s inserted=%llu merged=%llu dispatched=%llu completed=%llu boosted=%llu\n",
				   sio_class_names[c], sio_dir_names[d],
				   st->inserted, st->merged, st->dispatched,
				   done, st->boosted);
			tot[0] += st->inserted;
			tot[1] += st->merged;
			tot[2] += st->dispatched;
			tot[3] += done;
		}
	}
	seq_printf(m, "total inserted=%llu merged=%llu dispatched=%llu completed=%llu\n",
		   tot[0], tot[1], tot[2], tot[3]);
	seq_printf(m, "events requeued=%lld dropped=%lld bio_merged=%llu write_slice_expired=%llu write_windows=%llu prio_aged=%llu limit_blocked=%llu\n",
		   (long long)atomic64_read(&sd->requeued),
		   (long long)atomic64_read(&sd->dropped), sd->bio_merged,
		   sd->write_slice_expired, sd->write_windows, sd->prio_aged,
		   sd->limit_blocked);
	seq_printf(m, "anticipation holds=%llu hits=%llu expired=%llu\n",
		   sd->antic_holds, sd->antic_hits, sd->antic_expired);
	seq_printf(m, "qasio hints=%lld hints_dropped=%lld\n",
		   (long long)atomic64_read(&sd->hints_received),
		   (long long)atomic64_read(&sd->hints_dropped));
	spin_unlock(&sd->lock);
	return 0;
}

static int sio_inflight_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct sio_data *sd = q->elevator->elevator_data;
	enum sio_kind k;

	spin_lock(&sd->lock);
	for (k = 0; k < SIO_NR_KINDS; k++)
		seq_printf(m, "%s queued=%u inflight=%d\n", sio_kind_names[k],
			   sd->queued[k], atomic_read(&sd->inflight[k]));
	spin_unlock(&sd->lock);
	return 0;
}

static int sio_kprobes_show(void *data, struct seq_file *m)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(sio_kprobes); i++)
		seq_printf(m, "%s %s\n", sio_kprobes[i].symbol_name,
			   sio_kprobe_ok[i] ? "registered" : "unavailable");
	return 0;
}

static const struct blk_mq_debugfs_attr sio_queue_debugfs_attrs[] = {
	{"stats", 0400, sio_stats_show},
	{"inflight", 0400, sio_inflight_show},
	{"kprobes", 0400, sio_kprobes_show},
	{},
};

static struct elevator_type sio_iosched = {
	.ops = {
		.depth_updated		= sio_depth_updated,
		.limit_depth		= sio_limit_depth,
		.insert_requests	= sio_insert_requests,
		.dispatch_request	= sio_dispatch_request,
		.prepare_request	= sio_prepare_request,
		.finish_request		= sio_finish_request,
		.requeue_request	= sio_requeue_request,
		.next_request		= elv_rb_latter_request,
		.former_request		= elv_rb_former_request,
		.bio_merge		= sio_bio_merge,
		.request_merge		= sio_request_merge,
		.requests_merged	= sio_requests_merged,
		.request_merged		= sio_request_merged,
		.has_work		= sio_has_work,
		.init_sched		= sio_init_sched,
		.exit_sched		= sio_exit_sched,
		.init_hctx		= sio_init_hctx,
	},
#ifdef CONFIG_BLK_DEBUG_FS
	.queue_debugfs_attrs = sio_queue_debugfs_attrs,
#endif
	.elevator_attrs = sio_attrs,
	.elevator_name = "smartio",
	.elevator_owner = THIS_MODULE,
};

static void sio_unregister_kprobes(void)
{
	int i;

	for (i = 0; i < ARRAY_SIZE(sio_kprobes); i++) {
		if (sio_kprobe_ok[i])
			unregister_kprobe(&sio_kprobes[i]);
		sio_kprobe_ok[i] = false;
	}
}

static int __init sio_init(void)
{
	int i, ret;

	/* The boost is optional: without a probe its hints simply never come. */
	for (i = 0; i < ARRAY_SIZE(sio_kprobes); i++) {
		ret = register_kprobe(&sio_kprobes[i]);
		sio_kprobe_ok[i] = !ret;
		if (ret)
			pr_warn("smartio: kprobe %s unavailable (%d), no QASIO boost from it\n",
				sio_kprobes[i].symbol_name, ret);
	}

	ret = elv_register(&sio_iosched);
	if (ret)
		goto err_kprobes;
	return 0;

err_kprobes:
	sio_unregister_kprobes();
	return ret;
}

static void __exit sio_exit(void)
{
	elv_unregister(&sio_iosched);
	sio_unregister_kprobes();
}

module_init(sio_init);
module_exit(sio_exit);

MODULE_AUTHOR("smartio");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("SmartIO I/O scheduler: read/write isolation with QASIO boost");
