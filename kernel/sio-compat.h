/* SPDX-License-Identifier: GPL-2.0 */
/*
 * smartio-iosched: one source for Debian's 6.1 (bookworm), 6.12 (trixie) and
 * the newest sid kernel (7.2). Each switch is named for the feature it keys
 * on. The version thresholds are mainline's; where Debian's stable kernels
 * carry a backport that changes behaviour without changing an API (the
 * sbitmap shallow depth), the module probes at run time instead.
 */
#ifndef SIO_COMPAT_H
#define SIO_COMPAT_H

#include <linux/version.h>
#include <linux/hrtimer.h>
#include <linux/ptrace.h>

/* 6.5: insert_requests() takes blk_insert_t flags (BLK_MQ_INSERT_AT_HEAD) for bool at_head. */
#define SIO_HAVE_BLK_INSERT_T		(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0))
/*
 * 6.5: RQF_ELV became RQF_USE_SCHED and is set for every request but
 * REQ_OP_FLUSH: PREFLUSH/FUA data writes now get limit_depth, prepare,
 * insert (the flush state machine's data at the head), finish.
 */
#define SIO_HAVE_FLUSH_DATA_VIA_ELV	(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0))
/* 6.5: a bio whose pages direct I/O pinned from user memory says so. */
#define SIO_HAVE_BIO_PAGE_PINNED	(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 5, 0))
/* 6.8: address_space.private_lock renamed i_private_lock. */
#define SIO_HAVE_I_PRIVATE_LOCK		(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0))
/* 6.13: hrtimer_setup() sets the callback; hrtimer_init() is gone by 7.x. */
#define SIO_HAVE_HRTIMER_SETUP		(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0))
/*
 * 6.17: ->depth_updated(struct request_queue *) once per queue, after
 * q->nr_requests is set; blk_mq_set_min_shallow_depth(). Before: per hctx.
 */
#define SIO_HAVE_DEPTH_UPDATED_Q	(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 17, 0))
/*
 * 6.16/6.17 (seen in 7.2, not in 6.12): the core allocates the
 * elevator_queue (elevator_alloc() no longer exported, 3 arguments) and
 * passes it: ->init_sched(q, eq); on failure the core puts eq.
 */
#define SIO_HAVE_INIT_SCHED_EQ		(LINUX_VERSION_CODE >= KERNEL_VERSION(6, 17, 0))

/* block/blk-mq-tag.h was folded into block/blk-mq.h (gone by 6.12). */
#if __has_include("blk-mq-tag.h")
#define SIO_HAVE_BLK_MQ_TAG_H		1
#else
#define SIO_HAVE_BLK_MQ_TAG_H		0
#endif

#if SIO_HAVE_BLK_INSERT_T
typedef blk_insert_t sio_insert_t;
#define SIO_INSERT_AT_HEAD(f)		(!!((f) & BLK_MQ_INSERT_AT_HEAD))
#else
typedef bool sio_insert_t;
#define SIO_INSERT_AT_HEAD(f)		(f)
#endif

#if SIO_HAVE_I_PRIVATE_LOCK
#define sio_mapping_lock(m)		(&(m)->i_private_lock)
#else
#define sio_mapping_lock(m)		(&(m)->private_lock)
#endif

static inline void sio_hrtimer_setup(struct hrtimer *t,
				     enum hrtimer_restart (*fn)(struct hrtimer *),
				     clockid_t clock, enum hrtimer_mode mode)
{
#if SIO_HAVE_HRTIMER_SETUP
	hrtimer_setup(t, fn, clock, mode);
#else
	hrtimer_init(t, clock, mode);
	t->function = fn;
#endif
}

/*
 * The return address of a function, read by a kprobe on its first
 * instruction: x86's call pushed it where the stack pointer is; arm64's
 * bl left it in the link register (x30), which the prologue has not yet
 * saved.
 */
static inline unsigned long sio_entry_return_address(struct pt_regs *regs)
{
#if defined(CONFIG_ARM64)
	return procedure_link_pointer(regs);
#elif defined(CONFIG_X86)
	return *(unsigned long *)kernel_stack_pointer(regs);
#else
#error "smartio-iosched reads a probed function's return address on x86 and arm64 only"
#endif
}

#endif /* SIO_COMPAT_H */
