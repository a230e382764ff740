// SPDX-License-Identifier: GPL-2.0
/*
 * The loops of the trace analysis that run once per event or per block, in C because the traces
 * worth analysing have millions of events (bench/trace-throughput holds us to 10x blkparse + btt).
 * Loaded with ctypes by smartio/trace/native.py, which compiles this file on first use.
 *
 * 1. sio_read_blktrace: checks every record of a recording's per-CPU blktrace files and merges
 *    their events by time.
 * 2. sio_match: follows every bio and request through the time-ordered trace, as btt does, and on
 *    the way measures how long I/O was outstanding.
 * 3. sio_locality: accesses per 4 KiB block for reads, writes and both.
 * 4. sio_kind_figures: counts and latencies per kind of request (read, write, flush, ...).
 * 5. sio_between_flushes: requests, bytes and time between successive flushes.
 * 6. sio_by_pid: read and write requests and bytes per process.
 * Python keeps the figures that need a sort (percentiles) and everything that is not per event.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct rec {			/* struct blk_io_trace without payload, host byte order */
	uint32_t magic, sequence;
	uint64_t time, sector;
	uint32_t bytes, action, pid, device, cpu;
	uint16_t error, pdu_len;
};

#define REC_MAGIC 0x65617407u	/* blktrace magic | version 7 */
enum { A_QUEUE = 1, A_BACKMERGE, A_FRONTMERGE, A_GETRQ, A_REQUEUE = 6, A_ISSUE, A_COMPLETE, A_INSERT = 12,
       A_DRV_DATA = 17 };
enum { TC_READ = 1 << 0, TC_WRITE = 1 << 1, TC_FLUSH = 1 << 2, TC_SYNC = 1 << 3, TC_NOTIFY = 1 << 10,
       TC_META = 1 << 12, TC_DISCARD = 1 << 13, TC_FUA = 1 << 15 };
#define NO_SECTOR UINT64_MAX

/* Request kinds, as analyze.py names them (READ, WRITE, FLUSH, DISCARD, OTHER). */
enum { K_READ, K_WRITE, K_FLUSH, K_DISCARD, K_OTHER };

static int kind_of(uint32_t tc, uint32_t bytes)
{
	if (tc & TC_DISCARD)
		return K_DISCARD;
	if (bytes)
		return tc & TC_WRITE ? K_WRITE : K_READ;
	return tc & TC_FLUSH ? K_FLUSH : K_OTHER;
}

/* ---- 1. reading blktrace files -------------------------------------------------------------- */

enum { SCAN_OK, SCAN_TRUNCATED, SCAN_MAGIC, SCAN_ACTION, SCAN_PAYLOAD, SCAN_NO_MERGE };
#define MAX_PARTS 256	/* files merged at once (CPUs of one recording) */

static void swap_rec(struct rec *r)
{
	r->magic = __builtin_bswap32(r->magic);
	r->sequence = __builtin_bswap32(r->sequence);
	r->time = __builtin_bswap64(r->time);
	r->sector = __builtin_bswap64(r->sector);
	r->bytes = __builtin_bswap32(r->bytes);
	r->action = __builtin_bswap32(r->action);
	r->pid = __builtin_bswap32(r->pid);
	r->device = __builtin_bswap32(r->device);
	r->cpu = __builtin_bswap32(r->cpu);
	r->error = __builtin_bswap16(r->error);
	r->pdu_len = __builtin_bswap16(r->pdu_len);
}

/* One blktrace file being read. */
struct part {
	const uint8_t *buf;
	int64_t len, off;	/* off: where the next record starts */
	int swap;		/* the other byte order */
	int64_t *notes, nnotes;	/* offsets of its notes, counted beyond room */
	int64_t room;
	int64_t nevents;
	int has_head;		/* head_*: its next event */
	int64_t head_off;
	uint64_t head_time;
	int head_payload;
	uint64_t last;		/* time of its previous event */
	int in_order;
};

static uint16_t load16(const uint8_t *p, int swap)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));	/* payloads leave records unaligned */
	return swap ? __builtin_bswap16(v) : v;
}

static uint32_t load32(const uint8_t *p, int swap)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return swap ? __builtin_bswap32(v) : v;
}

static uint64_t load64(const uint8_t *p, int swap)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return swap ? __builtin_bswap64(v) : v;
}

/*
 * Finds p's next event (p->head_*), noting the notes before it. Returns a SCAN_* code; after an
 * error, p->off is where the bad record starts.
 */
static int part_next(struct part *p)
{
	int rc = SCAN_OK;

	p->has_head = 0;
	while (p->off < p->len) {
		const uint8_t *r = p->buf + p->off;
		uint32_t action, code;
		uint16_t pdu_len;

		if (p->len - p->off < (int64_t)sizeof(struct rec)) {
			rc = SCAN_TRUNCATED;
			break;
		}
		action = load32(r + offsetof(struct rec, action), p->swap);
		pdu_len = load16(r + offsetof(struct rec, pdu_len), p->swap);
		code = action & 0xffff;
		if (load32(r, p->swap) != REC_MAGIC) {
			rc = SCAN_MAGIC;
			break;
		}
		if (!(action >> 16 & TC_NOTIFY) && (code == 0 || code > A_DRV_DATA)) {
			rc = SCAN_ACTION;
			break;
		}
		if (pdu_len > p->len - p->off - (int64_t)sizeof(struct rec)) {
			rc = SCAN_PAYLOAD;
			break;
		}
		if (action >> 16 & TC_NOTIFY) {
			if (p->nnotes < p->room)
				p->notes[p->nnotes] = p->off;
			p->nnotes++;
			p->off += sizeof(struct rec) + pdu_len;
			continue;
		}
		p->head_time = load64(r + offsetof(struct rec, time), p->swap);
		if (p->head_time < p->last)
			p->in_order = 0;
		p->last = p->head_time;
		p->head_off = p->off;
		p->head_payload = pdu_len != 0;
		p->has_head = 1;
		p->nevents++;
		p->off += sizeof(struct rec) + pdu_len;
		break;
	}
	return rc;
}

/*
 * Reads the k blktrace files bufs[j][0..lens[j]) (swaps[j]: in the other byte order), checking
 * every record, and merges their events by time into out (ties keep the order of the files), so
 * that each record is read once. The offsets of each file's notes go to notes[j] (room for
 * notes_room each), their number to nnotes[j] (if more than notes_room, call again with more
 * room), its number of events to nevents[j]. Returns SCAN_OK with *nout events, or the first
 * SCAN_* error met, in file *bad_part at byte *bad_off; SCAN_NO_MERGE if k > 1 and a file is not in
 * time order, or k > MAX_PARTS (the caller then reads the files one by one and sorts).
 *
 * With out NULL and k = 1 it only checks, and says whether the events lie back to back in host
 * byte order from byte *run_off on, without payloads or notes between them (*in_place): then they
 * can be used where they are, with no copy. *in_order says whether they are in time order.
 */
int sio_read_blktrace(const uint8_t *const *bufs, const int64_t *lens, const int *swaps, int k,
		      struct rec *out, int64_t *nout, int64_t *const *notes, int64_t notes_room,
		      int64_t *nnotes, int64_t *nevents,
		      int *bad_part, int64_t *bad_off, int64_t *run_off, int *in_place, int *in_order)
{
	struct part parts[MAX_PARTS];
	int64_t n = 0, end_of_run = -1;
	struct part *p = NULL;
	int j, rc = SCAN_OK;

	*nout = 0;
	if (k < 1 || k > MAX_PARTS)
		return SCAN_NO_MERGE;
	*in_place = k == 1 && !swaps[0];
	*run_off = 0;
	for (j = 0; j < k; j++)
		parts[j] = (struct part){ .buf = bufs[j], .len = lens[j], .swap = swaps[j], .notes = notes[j],
					  .room = notes_room, .in_order = 1 };
	for (j = 0; j < k && !rc; j++) {
		p = &parts[j];
		rc = part_next(p);
	}
	for (;;) {
		uint64_t before = UINT64_MAX, upto = UINT64_MAX;	/* heads of the files ahead of / after p */

		if (rc)
			break;
		p = NULL;
		for (j = 0; j < k; j++)
			if (parts[j].has_head && (!p || parts[j].head_time < p->head_time))
				p = &parts[j];
		if (!p)
			break;
		for (j = 0; j < k; j++) {
			if (&parts[j] == p || !parts[j].has_head)
				continue;
			if (&parts[j] < p && parts[j].head_time < before)
				before = parts[j].head_time;
			if (&parts[j] > p && parts[j].head_time < upto)
				upto = parts[j].head_time;
		}
		/* Take p's events for as long as it stays first (CPUs trace in bursts); a file earlier
		 * in the list wins a tie. */
		do {
			if (out) {
				memcpy(&out[n], p->buf + p->head_off, sizeof(*out));
				if (p->swap)
					swap_rec(&out[n]);
				out[n].pdu_len = 0;	/* payloads (remap, unplug, SCSI cdb) are not needed */
			} else {	/* only checking one file: are its events one plain run? */
				if (n == 0)
					*run_off = p->head_off;
				if (p->head_payload || (n && p->head_off != end_of_run))
					*in_place = 0;
				end_of_run = p->off;
			}
			n++;
			rc = part_next(p);
			if (!rc && k > 1 && !p->in_order)
				rc = SCAN_NO_MERGE;
		} while (!rc && p->has_head && p->head_time < before && p->head_time <= upto);
	}
	*nout = n;
	*in_order = 1;
	for (j = 0; j < k; j++) {
		nnotes[j] = parts[j].nnotes;
		nevents[j] = parts[j].nevents;
		*in_order &= parts[j].in_order;
	}
	if (rc) {
		*bad_part = p - parts;
		*bad_off = p->off;
	}
	return rc;
}

/* ---- hash map from (device, sector) to an int64 --------------------------------------------- */

/* Open addressing with linear probing and backward-shift deletion (no tombstones). */
struct map {
	uint64_t *key;
	uint32_t *dev;
	int64_t *val;		/* -1 = empty slot */
	size_t mask, used;
};

static size_t hash(uint32_t dev, uint64_t key)
{
	uint64_t h = (key ^ ((uint64_t)dev << 40)) * 0x9E3779B97F4A7C15ull;

	return (size_t)(h >> 17);
}

static int map_init(struct map *m, size_t cap)
{
	m->mask = cap - 1;
	m->used = 0;
	m->key = malloc(cap * sizeof(*m->key));
	m->dev = malloc(cap * sizeof(*m->dev));
	m->val = malloc(cap * sizeof(*m->val));
	if (!m->key || !m->dev || !m->val)
		return -1;
	memset(m->val, 0xff, cap * sizeof(*m->val));
	return 0;
}

static void map_free(struct map *m)
{
	free(m->key);
	free(m->dev);
	free(m->val);
}

static size_t map_find(const struct map *m, uint32_t dev, uint64_t key)
{
	size_t i = hash(dev, key) & m->mask;

	while (m->val[i] >= 0 && (m->key[i] != key || m->dev[i] != dev))
		i = (i + 1) & m->mask;
	return i;
}

static int64_t map_get(const struct map *m, uint32_t dev, uint64_t key)
{
	return m->val[map_find(m, dev, key)];
}

static int map_put(struct map *m, uint32_t dev, uint64_t key, int64_t val);

static int map_grow(struct map *m)
{
	struct map old = *m;
	size_t i;

	if (map_init(m, (old.mask + 1) * 2))
		return -1;
	for (i = 0; i <= old.mask; i++)
		if (old.val[i] >= 0)
			map_put(m, old.dev[i], old.key[i], old.val[i]);
	map_free(&old);
	return 0;
}

static int map_put(struct map *m, uint32_t dev, uint64_t key, int64_t val)
{
	size_t i = map_find(m, dev, key);

	if (m->val[i] < 0) {
		if ((m->used + 1) * 2 > m->mask + 1) {
			if (map_grow(m))
				return -1;
			i = map_find(m, dev, key);
		}
		m->used++;
		m->key[i] = key;
		m->dev[i] = dev;
	}
	m->val[i] = val;
	return 0;
}

static int64_t map_pop(struct map *m, uint32_t dev, uint64_t key)
{
	size_t i = map_find(m, dev, key), j = i, k;
	int64_t val = m->val[i];

	if (val < 0)
		return -1;
	m->val[i] = -1;
	m->used--;
	/* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
	for (;;) {
		j = (j + 1) & m->mask;
		if (m->val[j] < 0)
			break;
		k = hash(m->dev[j], m->key[j]) & m->mask;
		if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
			m->key[i] = m->key[j];
			m->dev[i] = m->dev[j];
			m->val[i] = m->val[j];
			m->val[j] = -1;
			i = j;
		}
	}
	return val;
}

/* ---- union of intervals that arrive in order of their ends ---------------------------------- */

/*
 * Every interval we measure ends at a completion. Taken from the last completion backwards (ends
 * never increasing), an interval either reaches the stretch being built (its end is at or after
 * the stretch's start) or lies wholly before it, and then so do all that follow: the stretch is
 * final. So the union needs no sort and no memory, in one backward pass.
 */
struct sweep {
	int64_t start, end;	/* the stretch being built, if any */
	int64_t total;		/* ns covered by the finished stretches */
	int open;
};

static void sweep_add(struct sweep *w, int64_t start, int64_t end)
{
	if (w->open && end >= w->start) {
		if (start < w->start)
			w->start = start;
		return;
	}
	if (w->open)
		w->total += w->end - w->start;
	*w = (struct sweep){ start, end, w->total, 1 };
}

static int64_t sweep_total(const struct sweep *w)
{
	return w->total + (w->open ? w->end - w->start : 0);
}

/* ---- 2. matching bios to requests ----------------------------------------------------------- */

/*
 * A request being followed; its bios form a singly linked list through next_bio[].
 *
 * How bios find their request, as btt does it: a G (get request) takes the bio queued at its sector; back and
 * front merges (M, F) add the bio at the request's end or start. A trace without G events (tracefs text with
 * only block_bio_queue, block_rq_insert, block_rq_issue and block_rq_complete) creates the request at its I or
 * D instead and gathers the bios queued in its sector range, in order from its start (gather()).
 *
 * Zero-size requests (flushes) have no sector to key them by: they are followed first in, first out per device
 * (the kernel keeps one flush in flight per hardware queue), so two flushes in flight are never mixed up.
 *
 * A request completes at its last C: partial completions (several C, each for a part, the sector advancing)
 * count once. A write with a preflush, or with FUA on a device without FUA, goes through the kernel's flush
 * sequence (block/blk-flush.c): its data completes (a C with its bytes), a post-flush may follow, and only then
 * does the request end, with a final C of 0 bytes at its sector. Such a write is measured to that final
 * completion (Q2C and D2C), which is when its submitter's I/O is done; btt stops at the data completion.
 */
struct req {
	uint64_t start, end;		/* sectors; after the D, end is the end of what was issued */
	uint64_t key;			/* zero-size: its sector as traced (to find its final completion) */
	int64_t first_bio, last_bio;	/* indices into bios[], -1 if none */
	int64_t issue;			/* event index of the last D, -1 if none */
	int64_t done;			/* bytes of its partial completions so far */
	int64_t park_time, park_bytes;	/* data completed, waiting for the final completion */
	uint32_t qtc;			/* categories it was queued with (from its G or first bio) */
	uint32_t park_tc;
	int32_t nbios;
	int32_t open;			/* still accepts merges (not yet issued) */
};

/* The bios, one per Q in order, as columns (numpy arrays on the Python side). */
struct bio_cols {
	int64_t *time;
	int64_t *q2c;		/* ns, -1 if its completion was not seen */
	uint32_t *tc, *bytes, *pid;
	uint8_t *kind;
};

/* The completed requests, one per request in order of completion, as columns. */
struct req_cols {
	int64_t *time;
	int64_t *issue;		/* time of the matching D, -1 if not seen */
	uint64_t *sector;
	int64_t *bytes;
	uint32_t *tc, *pid;	/* pid: who queued its first bio (else who issued it) */
	int32_t *nbios;		/* bios seen queued into it */
	uint8_t *kind;
};

/* Classes of bios for the outstanding time by class (seed 004's "impact of storage I/O latency"). */
enum { C_READ, C_META_READ, C_SYNC_WRITE, C_ASYNC_WRITE, C_FLUSH, NCLASS };

#define MAX_DEVICES 64

struct summary {
	int64_t counts[32];		/* events per action code */
	int64_t busy_ns;		/* union of issue..completion of the completed requests */
	int64_t outstanding_ns;		/* union of queue..completion of their bios (issue.. without bios) */
	int64_t class_ns[NCLASS];	/* union of queue..completion of the bios of each class */
	int64_t ndevices;		/* > MAX_DEVICES: too many to list here */
	uint32_t devices[MAX_DEVICES];	/* sorted */
};

static int bio_class(uint32_t tc, int kind)
{
	int meta = !!(tc & TC_META), sync = !!(tc & (TC_SYNC | TC_FUA | TC_FLUSH));

	switch (kind) {
	case K_READ:
		return meta ? C_META_READ : C_READ;
	case K_WRITE:
		return sync ? C_SYNC_WRITE : C_ASYNC_WRITE;
	case K_FLUSH:
		return C_FLUSH;
	default:
		return -1;
	}
}

static void note_device(struct summary *s, uint32_t dev)
{
	int64_t i, n = s->ndevices < MAX_DEVICES ? s->ndevices : MAX_DEVICES;

	for (i = 0; i < n && s->devices[i] < dev; i++)
		;
	if (i < n && s->devices[i] == dev)
		return;
	if (s->ndevices++ >= MAX_DEVICES)
		return;
	memmove(&s->devices[i + 1], &s->devices[i], (n - i) * sizeof(*s->devices));
	s->devices[i] = dev;
}

/*
 * The requests being followed. Slots of completed (or merged) requests are reused, so the pool
 * stays as small as the number of requests in flight, and in the cache.
 */
struct req_pool {
	struct req *r;
	int64_t n, cap;
	int64_t *free, nfree;	/* slots to reuse (room for cap) */
};

static int64_t pool_get(struct req_pool *p, struct req init)
{
	if (p->nfree) {
		int64_t i = p->free[--p->nfree];

		p->r[i] = init;
		return i;
	}
	if (p->n == p->cap) {
		int64_t cap = p->cap ? 2 * p->cap : 1024;
		struct req *r = realloc(p->r, cap * sizeof(*r));
		int64_t *f = r ? realloc(p->free, cap * sizeof(*f)) : NULL;

		if (r)
			p->r = r;
		if (!f)
			return -1;
		p->free = f;
		p->cap = cap;
	}
	p->r[p->n] = init;
	return p->n++;
}

static void pool_put(struct req_pool *p, int64_t i)
{
	p->free[p->nfree++] = i;
}

/* A queue of (device, value), taken first in, first out per device; few entries (flushes in flight). */
struct fifo {
	uint32_t *dev;
	int64_t *val;		/* -1: taken */
	uint64_t *aux;		/* carried with the value (a bio's sector) */
	int64_t head, n, cap;
};

static int fifo_push(struct fifo *f, uint32_t dev, int64_t val, uint64_t aux)
{
	if (f->n == f->cap) {
		if (f->head) {	/* room at the front: close the gap */
			memmove(f->dev, f->dev + f->head, (f->n - f->head) * sizeof(*f->dev));
			memmove(f->val, f->val + f->head, (f->n - f->head) * sizeof(*f->val));
			memmove(f->aux, f->aux + f->head, (f->n - f->head) * sizeof(*f->aux));
			f->n -= f->head;
			f->head = 0;
		} else {
			int64_t cap = f->cap ? 2 * f->cap : 64;
			uint32_t *d = realloc(f->dev, cap * sizeof(*d));
			int64_t *v = d ? realloc(f->val, cap * sizeof(*v)) : NULL;
			uint64_t *a = v ? realloc(f->aux, cap * sizeof(*a)) : NULL;

			if (d)
				f->dev = d;
			if (v)
				f->val = v;
			if (!a)
				return -1;
			f->aux = a;
			f->cap = cap;
		}
	}
	f->dev[f->n] = dev;
	f->aux[f->n] = aux;
	f->val[f->n++] = val;
	return 0;
}

/* The oldest value of dev, taken out (its aux in *aux, if asked); -1 if none. */
static int64_t fifo_pop(struct fifo *f, uint32_t dev, uint64_t *aux)
{
	int64_t i, v;

	for (i = f->head; i < f->n; i++)
		if (f->val[i] >= 0 && f->dev[i] == dev)
			break;
	if (i == f->n)
		return -1;
	v = f->val[i];
	if (aux)
		*aux = f->aux[i];
	f->val[i] = -1;
	while (f->head < f->n && f->val[f->head] < 0)
		f->head++;
	if (f->head == f->n)
		f->head = f->n = 0;
	return v;
}

static void fifo_free(struct fifo *f)
{
	free(f->dev);
	free(f->val);
	free(f->aux);
}

/* Everything sio_match keeps while it goes through the events. */
struct matcher {
	const struct rec *ev;
	const struct bio_cols *bio;
	const struct req_cols *out;
	struct req_pool pool;
	struct map pending;	/* (dev, sector) -> bio queued and not yet in a request */
	struct map by_start, by_end;	/* (dev, sector) -> request starting / ending there */
	struct map parked;	/* (dev, sector of its last C) -> request waiting for its final completion */
	struct fifo zbios;	/* zero-size bios not yet in a request */
	struct fifo zopen;	/* zero-size requests not yet issued */
	struct fifo zissued;	/* zero-size requests issued, not completed */
	int64_t *next_bio, *first_bio;	/* per bio: the next of its request; per completed request: its first */
	int64_t nc;		/* completed requests so far */
	int64_t last_time;	/* completion time of the last one */
	int unsorted;		/* a completion was recorded out of time order */
};

static void add_bio(struct matcher *m, struct req *r, int64_t q)
{
	if (r->last_bio >= 0)
		m->next_bio[r->last_bio] = q;
	else
		r->first_bio = q;
	r->last_bio = q;
	m->next_bio[q] = -1;
	if (!r->nbios++)
		r->qtc = m->bio->tc[q];
}

/*
 * Request r of dev covers [from, to) too: take the bios queued there, and open requests starting there (a
 * request merge not traced), in order of their sectors, as far as they follow on one another. Returns -1 when
 * out of memory, else 0.
 */
static int gather(struct matcher *m, int64_t r, uint32_t dev, uint64_t from, uint64_t to)
{
	struct req *reqs = m->pool.r;
	uint64_t cur = from;
	int64_t q, r2;

	while (cur < to) {
		q = map_pop(&m->pending, dev, cur);
		if (q >= 0) {
			add_bio(m, &reqs[r], q);
			if (!m->bio->bytes[q])
				break;
			cur += m->bio->bytes[q] / 512;
			continue;
		}
		r2 = map_get(&m->by_start, dev, cur);
		if (r2 < 0 || r2 == r || !reqs[r2].open || reqs[r2].end <= cur)
			break;
		map_pop(&m->by_start, dev, cur);
		map_pop(&m->by_end, dev, reqs[r2].end);
		if (reqs[r2].first_bio >= 0) {
			if (reqs[r].last_bio >= 0)
				m->next_bio[reqs[r].last_bio] = reqs[r2].first_bio;
			else
				reqs[r].first_bio = reqs[r2].first_bio;
			reqs[r].last_bio = reqs[r2].last_bio;
			if (!reqs[r].nbios)
				reqs[r].qtc = reqs[r2].qtc;
		}
		reqs[r].nbios += reqs[r2].nbios;
		cur = reqs[r2].end;
		pool_put(&m->pool, r2);
	}
	return 0;
}

/* A new open request of dev at [s, end) for event e, with the bios queued there (trace without G). */
static int64_t new_request(struct matcher *m, uint32_t dev, uint64_t s, uint64_t end)
{
	int64_t r = pool_get(&m->pool, (struct req){ .start = s, .end = end, .first_bio = -1, .last_bio = -1,
						      .issue = -1, .open = 1 });

	if (r < 0 || map_put(&m->by_start, dev, s, r) || map_put(&m->by_end, dev, end, r) ||
	    gather(m, r, dev, s, end))
		return -1;
	return r;
}

/* Whether r goes through the kernel's flush sequence, so that a final completion of 0 bytes ends it. */
static int has_final_completion(const struct matcher *m, const struct req *r)
{
	uint32_t dtc = r->issue >= 0 ? m->ev[r->issue].action >> 16 : 0;

	if (!r->nbios && !(r->qtc & (TC_FLUSH | TC_FUA)))
		return 0;
	return (r->qtc & TC_FLUSH) || ((r->qtc & TC_FUA) && r->issue >= 0 && !(dtc & TC_FUA));
}

/* Records request r (pool slot, or -1 for a completion without a request) as completed. */
static void emit(struct matcher *m, int64_t r, int64_t time, uint64_t sector, int64_t bytes, uint32_t tc,
		 uint32_t pid)
{
	const struct req_cols *out = m->out;
	const struct bio_cols *bio = m->bio;
	int64_t nc = m->nc++, q;

	out->time[nc] = time;
	out->issue[nc] = -1;
	out->sector[nc] = sector;
	out->bytes[nc] = bytes;
	out->tc[nc] = tc;
	out->pid[nc] = pid;
	out->nbios[nc] = 0;
	out->kind[nc] = kind_of(tc, (uint32_t)(bytes > 0xffffffffLL ? 0xffffffffu : bytes));
	m->first_bio[nc] = -1;
	if (time < m->last_time)
		m->unsorted = 1;
	else
		m->last_time = time;
	if (r < 0)
		return;
	{
		struct req *rq = &m->pool.r[r];

		out->nbios[nc] = rq->nbios;
		out->pid[nc] = 0;
		if (rq->issue >= 0) {
			out->issue[nc] = (int64_t)m->ev[rq->issue].time;
			out->pid[nc] = m->ev[rq->issue].pid;
		}
		if (rq->first_bio >= 0)
			out->pid[nc] = bio->pid[rq->first_bio];
		for (q = rq->first_bio; q >= 0; q = m->next_bio[q])
			bio->q2c[q] = time - bio->time[q];
		m->first_bio[nc] = rq->first_bio;	/* its bios, for the time shares */
		pool_put(&m->pool, r);
	}
}

/* Request r's data are complete at event e: it ends now, or waits for its final completion (parked). */
static int data_done(struct matcher *m, int64_t r, const struct rec *e, uint64_t sector, int64_t bytes)
{
	struct req *rq = &m->pool.r[r];
	int64_t old;

	if (!has_final_completion(m, rq)) {
		emit(m, r, (int64_t)e->time, sector, bytes, e->action >> 16, e->pid);
		return 0;
	}
	rq->park_time = (int64_t)e->time;
	rq->park_bytes = bytes;
	rq->park_tc = e->action >> 16;
	rq->start = sector;
	old = map_get(&m->parked, e->device, rq->key);
	if (old >= 0)	/* one already waiting there never got its final completion */
		emit(m, old, m->pool.r[old].park_time, m->pool.r[old].start, m->pool.r[old].park_bytes,
		     m->pool.r[old].park_tc, 0);
	return map_put(&m->parked, e->device, rq->key, r);
}

static int cmp_time_index(const void *a, const void *b)
{
	const int64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Puts the completed requests in order of completion time (stable), if a deferred one broke the order. */
static int sort_completions(struct matcher *m)
{
	const struct req_cols *out = m->out;
	int64_t nc = m->nc, i, *pairs = malloc((nc ? nc : 1) * 2 * sizeof(*pairs));
	void *tmp = malloc((nc ? nc : 1) * 8);

	if (!pairs || !tmp) {
		free(pairs);
		free(tmp);
		return -1;
	}
	for (i = 0; i < nc; i++) {
		pairs[2 * i] = out->time[i];
		pairs[2 * i + 1] = i;
	}
	qsort(pairs, nc, 2 * sizeof(*pairs), cmp_time_index);
#define PERMUTE(col, type) do {							\
		type *t = tmp;							\
		for (i = 0; i < nc; i++)					\
			t[i] = (col)[pairs[2 * i + 1]];				\
		memcpy((col), t, nc * sizeof(type));				\
	} while (0)
	PERMUTE(out->time, int64_t);
	PERMUTE(out->issue, int64_t);
	PERMUTE(out->sector, uint64_t);
	PERMUTE(out->bytes, int64_t);
	PERMUTE(out->tc, uint32_t);
	PERMUTE(out->pid, uint32_t);
	PERMUTE(out->nbios, int32_t);
	PERMUTE(out->kind, uint8_t);
	PERMUTE(m->first_bio, int64_t);
#undef PERMUTE
	free(pairs);
	free(tmp);
	return 0;
}

/*
 * ev: n records sorted by time. Fills the columns of bio (one per Q, in order) and of out (one per
 * completed request, in order of completion), all sized n by the caller, their counts in *nbio and
 * *nreq, and *sum. Returns 0; -1 when out of memory; -2 - i when event i is earlier than event i - 1.
 */
int sio_match(const struct rec *ev, int64_t n, const struct bio_cols *bio, int64_t *nbio,
	      const struct req_cols *out, int64_t *nreq, struct summary *sum)
{
	struct matcher m = { .ev = ev, .bio = bio, .out = out };
	struct sweep busy = { 0 }, outstanding = { 0 }, by_class[NCLASS] = { { 0 } };
	struct req *reqs;	/* m.pool.r, which pool_get may move */
	int64_t i, nb = 0, q, nc;
	uint32_t last_dev = 0;
	int rc = -1, c;

	memset(sum, 0, sizeof(*sum));
	m.next_bio = malloc((n ? n : 1) * sizeof(*m.next_bio));
	m.first_bio = malloc((n ? n : 1) * sizeof(*m.first_bio));	/* per completed request */
	if (!m.next_bio || !m.first_bio || map_init(&m.pending, 1024) || map_init(&m.by_start, 1024) ||
	    map_init(&m.by_end, 1024) || map_init(&m.parked, 64))
		goto out;

	for (i = 0; i < n; i++) {
		const struct rec *e = &ev[i];
		uint32_t act = e->action & 0xffff, dev = e->device, tc = e->action >> 16;
		uint64_t s = e->sector;
		uint64_t end = e->sector + e->bytes / 512;
		int64_t r, r2;

		reqs = m.pool.r;
		if (i + 32 < n)	/* the events stream from memory; ask for them early */
			__builtin_prefetch(&ev[i + 32]);
		if (i && e->time < ev[i - 1].time) {
			rc = -2 - (int)i;
			goto out;
		}
		sum->counts[act & 31]++;
		if (!i || dev != last_dev)
			note_device(sum, dev);
		last_dev = dev;

		if (!e->bytes) {	/* zero-size: flushes, and the final completions of flush sequences */
			switch (act) {
			case A_QUEUE:
				bio->time[nb] = (int64_t)e->time;
				bio->q2c[nb] = -1;
				bio->tc[nb] = tc;
				bio->bytes[nb] = 0;
				bio->pid[nb] = e->pid;
				bio->kind[nb] = kind_of(tc, 0);
				m.next_bio[nb] = -1;
				if (fifo_push(&m.zbios, dev, nb++, s))
					goto out;
				break;
			case A_GETRQ:
				r = pool_get(&m.pool, (struct req){ .start = s, .end = s, .key = s, .first_bio = -1,
								     .last_bio = -1, .issue = -1, .qtc = tc, .open = 1 });
				if (r < 0)
					goto out;
				q = fifo_pop(&m.zbios, dev, NULL);
				if (q >= 0)
					add_bio(&m, &m.pool.r[r], q);
				if (fifo_push(&m.zopen, dev, r, 0))
					goto out;
				break;
			case A_ISSUE:
				r = fifo_pop(&m.zopen, dev, NULL);
				if (r < 0) {	/* no G: the oldest zero-size bio, if any, is its */
					uint64_t at = s;

					q = fifo_pop(&m.zbios, dev, &at);
					r = pool_get(&m.pool, (struct req){ .start = at, .end = at, .key = at, .first_bio = -1,
									     .last_bio = -1, .issue = -1 });
					if (r < 0)
						goto out;
					if (q >= 0)
						add_bio(&m, &m.pool.r[r], q);
				}
				m.pool.r[r].open = 0;
				m.pool.r[r].issue = i;
				if (fifo_push(&m.zissued, dev, r, 0))
					goto out;
				break;
			case A_COMPLETE:
				r = -1;
				if (!(tc & TC_FLUSH)) {	/* the final completion of a flush sequence? */
					r = map_pop(&m.parked, dev, s);
					if (r >= 0) {
						struct req *rq = &m.pool.r[r];

						emit(&m, r, (int64_t)e->time, rq->start, rq->park_bytes, rq->park_tc, 0);
						break;
					}
				}
				r = fifo_pop(&m.zissued, dev, NULL);
				if (r < 0 && !(tc & TC_FLUSH)) {	/* a flush request that was never issued here */
					r = fifo_pop(&m.zopen, dev, NULL);
					if (r < 0 && (q = fifo_pop(&m.zbios, dev, NULL)) >= 0) {
						r = pool_get(&m.pool, (struct req){ .start = s, .first_bio = -1,
										     .last_bio = -1, .issue = -1 });
						if (r < 0)
							goto out;
						add_bio(&m, &m.pool.r[r], q);
					}
					if (r >= 0) {
						emit(&m, r, (int64_t)e->time, s, 0, m.pool.r[r].qtc, e->pid);
						break;
					}
				}
				if (r < 0) {
					emit(&m, -1, (int64_t)e->time, s, 0, tc, e->pid);
					break;
				}
				if (data_done(&m, r, e, m.pool.r[r].start, 0))
					goto out;
				break;
			default:
				break;
			}
			continue;
		}

		switch (act) {
		case A_QUEUE:
			bio->time[nb] = (int64_t)e->time;
			bio->q2c[nb] = -1;
			bio->tc[nb] = tc;
			bio->bytes[nb] = e->bytes;
			bio->pid[nb] = e->pid;
			bio->kind[nb] = kind_of(tc, e->bytes);
			m.next_bio[nb] = -1;
			if (map_put(&m.pending, dev, s, nb++))
				goto out;
			break;
		case A_GETRQ:
			/* A new request; a previous one still keyed here was lost (e.g. trace started late). */
			map_pop(&m.by_start, dev, s);
			q = map_pop(&m.pending, dev, s);
			r = pool_get(&m.pool, (struct req){ .start = s, .end = end, .first_bio = -1, .last_bio = -1,
							     .issue = -1, .qtc = tc, .open = 1 });
			if (r < 0)
				goto out;
			if (q >= 0)
				add_bio(&m, &m.pool.r[r], q);
			if (map_put(&m.by_start, dev, s, r) || map_put(&m.by_end, dev, end, r))
				goto out;
			break;
		case A_BACKMERGE:
			r = map_pop(&m.by_end, dev, e->sector);
			r2 = map_get(&m.by_start, dev, e->sector);
			if (r < 0)
				break;	/* no request to merge into (no G): gathered at its I or D */
			if (r2 >= 0 && r2 != r && reqs[r2].open) {
				/* Request merge: r2 (starting where r ends) joins r. */
				map_pop(&m.by_start, dev, e->sector);
				map_pop(&m.by_end, dev, reqs[r2].end);
				if (reqs[r2].first_bio >= 0) {
					if (reqs[r].last_bio >= 0)
						m.next_bio[reqs[r].last_bio] = reqs[r2].first_bio;
					else
						reqs[r].first_bio = reqs[r2].first_bio;
					reqs[r].last_bio = reqs[r2].last_bio;
					if (!reqs[r].nbios)
						reqs[r].qtc = reqs[r2].qtc;
				}
				reqs[r].nbios += reqs[r2].nbios;
				reqs[r].end = reqs[r2].end;
				pool_put(&m.pool, r2);
			} else {
				q = map_pop(&m.pending, dev, e->sector);
				if (q >= 0)
					add_bio(&m, &reqs[r], q);
				reqs[r].end = end;
			}
			if (map_put(&m.by_end, dev, reqs[r].end, r))
				goto out;
			break;
		case A_FRONTMERGE:
			r = map_pop(&m.by_start, dev, end);
			if (r < 0)
				break;
			q = map_pop(&m.pending, dev, e->sector);
			if (q >= 0) {
				m.next_bio[q] = reqs[r].first_bio;
				reqs[r].first_bio = q;
				if (reqs[r].last_bio < 0)
					reqs[r].last_bio = q;
				if (!reqs[r].nbios++)
					reqs[r].qtc = tc;
			}
			reqs[r].start = e->sector;
			if (map_put(&m.by_start, dev, e->sector, r))
				goto out;
			break;
		case A_INSERT:
		case A_ISSUE:
			r = map_get(&m.by_start, dev, s);
			if (r < 0) {	/* not seen starting: no G in the trace, or it began later */
				r = new_request(&m, dev, s, end);
				if (r < 0)
					goto out;
				reqs = m.pool.r;
			} else if (reqs[r].open && end > reqs[r].end) {
				/* bios merged in without M events */
				map_pop(&m.by_end, dev, reqs[r].end);
				if (gather(&m, r, dev, reqs[r].end, end))
					goto out;
				reqs[r].end = end;
				if (map_put(&m.by_end, dev, end, r))
					goto out;
			}
			if (act == A_INSERT)
				break;
			if (reqs[r].open)
				map_pop(&m.by_end, dev, reqs[r].end);
			reqs[r].open = 0;
			reqs[r].end = end;	/* what was issued: completions count up to it */
			reqs[r].issue = i;	/* after a requeue, the last issue counts */
			break;
		case A_COMPLETE:
			r = map_pop(&m.by_start, dev, s);
			if (r < 0) {	/* never seen issued: still a completed request */
				emit(&m, -1, (int64_t)e->time, s, e->bytes, tc, e->pid);
				break;
			}
			if (reqs[r].open)
				map_pop(&m.by_end, dev, reqs[r].end);
			if (reqs[r].issue >= 0 && end < reqs[r].end) {
				/* a partial completion: the request goes on from where it ended */
				reqs[r].done += e->bytes;
				if (map_put(&m.by_start, dev, end, r))
					goto out;
				break;
			}
			reqs[r].key = s;	/* the final completion comes at the last part's sector */
			if (data_done(&m, r, e, reqs[r].start, reqs[r].done + e->bytes))
				goto out;
			break;
		default:
			break;
		}
	}
	/* Requests still waiting for a final completion when the trace ended: their data completion ends them. */
	for (q = 0; q <= (int64_t)m.parked.mask; q++) {
		int64_t r = m.parked.val[q];

		if (r >= 0)
			emit(&m, r, m.pool.r[r].park_time, m.pool.r[r].start, m.pool.r[r].park_bytes,
			     m.pool.r[r].park_tc, 0);
	}
	if (m.unsorted && sort_completions(&m))
		goto out;
	*nbio = nb;
	*nreq = nc = m.nc;

	/* Time shares, from the last completion backwards (see struct sweep). */
	for (i = nc - 1; i >= 0; i--) {
		int64_t end = out->time[i];

		if (out->issue[i] >= 0) {
			sweep_add(&busy, out->issue[i], end);
			/* Bios cover a request from queue to completion; one without bios (a flush the
			 * kernel made, or a trace without Q events) counts from issue. */
			if (out->nbios[i] == 0)
				sweep_add(&outstanding, out->issue[i], end);
		}
		for (q = m.first_bio[i]; q >= 0; q = m.next_bio[q]) {
			sweep_add(&outstanding, bio->time[q], end);
			c = bio_class(bio->tc[q], bio->kind[q]);
			if (c >= 0)
				sweep_add(&by_class[c], bio->time[q], end);
		}
	}
	sum->busy_ns = sweep_total(&busy);
	sum->outstanding_ns = sweep_total(&outstanding);
	for (c = 0; c < NCLASS; c++)
		sum->class_ns[c] = sweep_total(&by_class[c]);
	rc = 0;
out:
	map_free(&m.pending);
	map_free(&m.by_start);
	map_free(&m.by_end);
	map_free(&m.parked);
	fifo_free(&m.zbios);
	fifo_free(&m.zopen);
	fifo_free(&m.zissued);
	free(m.first_bio);
	free(m.pool.r);
	free(m.pool.free);
	free(m.next_bio);
	return rc;
}

/* ---- 3. locality ---------------------------------------------------------------------------- */

#define BLOCK_SECTORS 8	/* 4 KiB blocks */

/* One view (reads, writes, or both) of the accesses per block. */
struct locality {
	int64_t blocks, accesses, once, max;
	int64_t ntop, nhist;
};

struct top_entry {
	int64_t count;
	uint64_t block;
};

/* Whether a ranks before b: more accesses first, then the lower block. */
static int ranks_before(const struct top_entry *a, const struct top_entry *b)
{
	return a->count > b->count || (a->count == b->count && a->block < b->block);
}

/* A heap of the best top_n entries so far, its root the worst of them. */
static void heap_sift(struct top_entry *h, int64_t n, int64_t i)
{
	for (;;) {
		int64_t l = 2 * i + 1, r = l + 1, w = i;
		struct top_entry t;

		if (l < n && ranks_before(&h[w], &h[l]))
			w = l;
		if (r < n && ranks_before(&h[w], &h[r]))
			w = r;
		if (w == i)
			return;
		t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

static int cmp_rank(const void *a, const void *b)
{
	return ranks_before(a, b) ? -1 : ranks_before(b, a);
}

/* Accesses of one block; key = block + 1, and 0 marks an empty slot (fresh pages are zero). */
struct block_count {
	uint64_t key;
	uint32_t n[2];		/* reads, writes */
};

struct block_table {
	struct block_count *slot;
	size_t size;		/* bytes mapped */
	uint64_t mask, used;
	int shift;
};

static int table_init(struct block_table *t, int bits)
{
	t->size = sizeof(*t->slot) << bits;
	/* Straight from the kernel, zeroed, in huge pages where it offers them: a few faults instead of
	 * one per 4 KiB page, and no pass to mark the slots empty. */
	t->slot = mmap(NULL, t->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t->slot == MAP_FAILED) {
		t->slot = NULL;
		return -1;
	}
	madvise(t->slot, t->size, MADV_HUGEPAGE);
	t->mask = (1ull << bits) - 1;
	t->used = 0;
	t->shift = 64 - bits;
	return 0;
}

static void table_free(struct block_table *t)
{
	if (t->slot)
		munmap(t->slot, t->size);
}

/* The counts of block, a new zeroed entry if absent; NULL when out of memory. */
static uint32_t *table_counts(struct block_table *t, uint64_t block)
{
	uint64_t i = (block * 0x9E3779B97F4A7C15ull) >> t->shift;

	for (;; i = (i + 1) & t->mask) {
		struct block_count *s = &t->slot[i];

		if (s->key == block + 1)
			return s->n;
		if (s->key)
			continue;
		if (10 * (t->used + 1) > 7 * (t->mask + 1)) {	/* keep it at most 70 % full */
			struct block_table old = *t;
			uint64_t j;

			if (table_init(t, 64 - old.shift + 1)) {
				*t = old;
				return NULL;
			}
			for (j = 0; j <= old.mask; j++)
				if (old.slot[j].key)
					memcpy(table_counts(t, old.slot[j].key - 1), old.slot[j].n, sizeof(s->n));
			table_free(&old);
			return table_counts(t, block);
		}
		t->used++;
		s->key = block + 1;
		return s->n;
	}
}

/*
 * Requests 0..n-1 (columns sector, bytes, kind): those of kind read or write count, each touching
 * every 4 KiB block it overlaps. For view v (0 reads, 1 writes, 2 both): loc[v]; the top_n most
 * accessed blocks in top[v * top_n ...] (ranked by accesses, then block); and the histogram of
 * accesses per block, ascending pairs (accesses, blocks) in hist[v * 2 * hist_room ...], of which
 * loc[v].nhist (if more than hist_room, call again with more room).
 * Returns 0, or -1 when out of memory.
 */
int sio_locality(const uint64_t *sector, const int64_t *bytes, const uint8_t *kind, int64_t n, int64_t top_n,
		 int64_t hist_room, struct locality *loc, struct top_entry *top, int64_t *hist)
{
	struct block_table t = { 0 };
	int64_t *by_count[3] = { NULL, NULL, NULL }, max[3] = { 0, 0, 0 }, accesses = 0, i;
	int v, bits = 10, rc = -1;

	memset(loc, 0, 3 * sizeof(*loc));
	/* Sized for half the accesses touching a new block: it rarely has to grow, and stays small. */
	for (i = 0; i < n; i++)
		if (kind[i] == K_READ || kind[i] == K_WRITE)
			accesses += (sector[i] + (bytes[i] / 512 ? bytes[i] / 512 : 1) - 1) / BLOCK_SECTORS -
				    sector[i] / BLOCK_SECTORS + 1;
	while (bits < 40 && (1ll << bits) * 7 / 10 < accesses / 2)
		bits++;
	if (table_init(&t, bits))
		goto out;
	for (i = 0; i < n; i++) {
		uint64_t b, sectors = bytes[i] / 512 ? bytes[i] / 512 : 1;
		int w = kind[i] == K_WRITE;

		if (kind[i] != K_READ && !w)
			continue;
		for (b = sector[i] / BLOCK_SECTORS; b <= (sector[i] + sectors - 1) / BLOCK_SECTORS; b++) {
			uint32_t *c = table_counts(&t, b);

			if (!c)
				goto out;
			if (++c[w] > max[w])
				max[w] = c[w];
			if (c[0] + c[1] > max[2])
				max[2] = c[0] + c[1];
		}
	}

	for (v = 0; v < 3; v++) {
		by_count[v] = calloc(max[v] + 1, sizeof(int64_t));
		if (!by_count[v])
			goto out;
	}
	for (i = 0; i <= (int64_t)t.mask; i++) {
		const struct block_count *s = &t.slot[i];

		if (!s->key)
			continue;
		for (v = 0; v < 3; v++) {
			int64_t c = v < 2 ? s->n[v] : (int64_t)s->n[0] + s->n[1];
			struct locality *l = &loc[v];
			struct top_entry *h = top + v * top_n, e = { c, s->key - 1 };

			if (!c)
				continue;
			l->blocks++;
			l->accesses += c;
			l->once += c == 1;
			if (c > l->max)
				l->max = c;
			by_count[v][c]++;
			if (l->ntop < top_n) {
				h[l->ntop++] = e;
				if (l->ntop == top_n)
					for (int64_t k = top_n / 2; k >= 0; k--)
						heap_sift(h, top_n, k);
			} else if (ranks_before(&e, &h[0])) {
				h[0] = e;
				heap_sift(h, top_n, 0);
			}
		}
	}
	for (v = 0; v < 3; v++) {
		struct locality *l = &loc[v];
		int64_t *hv = hist + v * 2 * hist_room, c;

		qsort(top + v * top_n, l->ntop, sizeof(*top), cmp_rank);
		for (c = 1; c <= l->max; c++)
			if (by_count[v][c]) {
				if (l->nhist < hist_room) {
					hv[2 * l->nhist] = c;
					hv[2 * l->nhist + 1] = by_count[v][c];
				}
				l->nhist++;
			}
	}
	rc = 0;
out:
	table_free(&t);
	for (v = 0; v < 3; v++)
		free(by_count[v]);
	return rc;
}

/* ---- 4. figures per kind ---------------------------------------------------------------------- */

struct kind_counts {
	int64_t requests[5], bytes[5];	/* completed requests of each kind (K_*) */
	int64_t sync[5], meta[5];	/* sync: op_is_sync(), every read and writes with sync/FUA/preflush */
	int64_t bios[5];		/* bios queued */
	int64_t nd2c[5], nq2c[5];	/* lengths of the d2c and q2c arrays */
	int64_t no_issue;		/* completed requests (not K_OTHER) whose issue was not seen */
	int64_t no_completion;		/* bios whose completion was not seen */
};

/*
 * The values behind the per-kind figures, gathered in one pass over the requests and one over the
 * bios, so that numpy only has to sort them: for kind k < nk, sizes[k] (bytes of each completed
 * request), d2c[k] (ns, requests whose issue was seen) and q2c[k] (ns, bios whose completion was
 * seen), in trace order; sizes and d2c with room for n, q2c for nbio. Counts in *c.
 */
void sio_kind_figures(const struct req_cols *r, int64_t n, const struct bio_cols *b, int64_t nbio, int nk,
		      int64_t *const *sizes, int64_t *const *d2c, int64_t *const *q2c, struct kind_counts *c)
{
	int64_t i;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < n; i++) {
		int k = r->kind[i];

		c->requests[k]++;
		c->bytes[k] += r->bytes[i];
		c->sync[k] += k == K_READ || (r->tc[i] & (TC_SYNC | TC_FUA | TC_FLUSH));
		c->meta[k] += !!(r->tc[i] & TC_META);
		if (r->issue[i] < 0) {
			c->no_issue += k != K_OTHER;
		} else if (k < nk) {
			d2c[k][c->nd2c[k]++] = r->time[i] - r->issue[i];
		}
		if (k < nk)
			sizes[k][c->requests[k] - 1] = r->bytes[i];
	}
	for (i = 0; i < nbio; i++) {
		int k = b->kind[i];

		c->bios[k]++;
		if (b->q2c[i] < 0)
			c->no_completion++;
		else if (k < nk)
			q2c[k][c->nq2c[k]++] = b->q2c[i];
	}
}

/* ---- 5. between flushes --------------------------------------------------------------------- */

/*
 * Completed requests 0..n-1 (columns time, bytes, kind; in time order): for each pair of successive
 * flush completions k, k + 1, the read and write requests completed after flush k and up to flush
 * k + 1 (at the same ns counts as before it), their bytes, and the time between the two flushes.
 * Returns the number of pairs (flushes - 1, or 0).
 */
int64_t sio_between_flushes(const int64_t *time, const int64_t *bytes, const uint8_t *kind, int64_t n,
			    int64_t *count, int64_t *nbytes, int64_t *gap)
{
	int64_t i, j = 0, k = -1, ndata = 0, dbytes = 0, last_n = 0, last_bytes = 0, last_time = 0;

	for (i = 0; i < n; i++) {
		if (kind[i] != K_FLUSH)
			continue;
		for (; j < n && time[j] <= time[i]; j++)
			if (kind[j] == K_READ || kind[j] == K_WRITE) {
				ndata++;
				dbytes += bytes[j];
			}
		if (k >= 0) {
			count[k] = ndata - last_n;
			nbytes[k] = dbytes - last_bytes;
			gap[k] = time[i] - last_time;
		}
		k++;
		last_n = ndata;
		last_bytes = dbytes;
		last_time = time[i];
	}
	return k > 0 ? k : 0;
}

/* ---- 6. requests per process ---------------------------------------------------------------- */

/*
 * Requests 0..n-1 (columns pid, bytes, kind): for each pid with read or write requests, in order of
 * first appearance, pids[i], its reads[i], writes[i] and bytes[i] (all with room for n).
 * Returns how many pids, or -1 when out of memory.
 */
int64_t sio_by_pid(const uint32_t *pid, const int64_t *nbytes, const uint8_t *kind, int64_t n,
		   uint32_t *pids, int64_t *reads, int64_t *writes, int64_t *bytes)
{
	struct map index = { 0 };	/* pid -> i */
	int64_t i, k = 0;

	if (map_init(&index, 64))
		return -1;
	for (i = 0; i < n; i++) {
		int64_t j;

		if (kind[i] != K_READ && kind[i] != K_WRITE)
			continue;
		j = map_get(&index, 0, pid[i]);
		if (j < 0) {
			j = k++;
			if (map_put(&index, 0, pid[i], j)) {
				k = -1;
				break;
			}
			pids[j] = pid[i];
			reads[j] = writes[j] = bytes[j] = 0;
		}
		if (kind[i] == K_WRITE)
			writes[j]++;
		else
			reads[j]++;
		bytes[j] += nbytes[i];
	}
	map_free(&index);
	return k;
}

/* ---- 7. streaming readers: Perfetto protobuf and tracefs text ------------------------------- */

/*
 * Both readers are fed the file in pieces (Python reads and decompresses them) and append to one
 * struct sio_out, which owns growing arrays (realloc: the kernel moves big blocks by remapping them,
 * so growing never copies nor doubles the memory in use). Events are the same records as everywhere
 * else (struct rec); a Perfetto trace also gives UFS commands, sync calls and ftrace statistics.
 */

struct comm_rec {		/* the first command name seen for a pid */
	uint32_t pid;
	int32_t pad;
	int64_t at;		/* index of the event it came with, so that readers can merge tables */
	char name[24];
};

struct ufs_rec {		/* ufshcd_command */
	uint64_t time, lba;
	int32_t transfer_len;
	uint32_t tag, opcode, pid, cpu;
	uint16_t dev;		/* index into sio_out.ufs_dev */
	uint8_t kind;		/* UFS_SEND, UFS_COMPLETE */
	uint8_t pad;
};

struct sync_rec {		/* ext4_sync_file_enter/exit, f2fs_sync_file_enter/exit */
	uint64_t time, ino;
	uint32_t pid, dev;
	int32_t ret;
	uint8_t fs, phase, datasync, need_cp;	/* fs: SYNC_EXT4, SYNC_F2FS; phase: 0 enter, 1 exit */
};

struct stat_rec {		/* one CPU of an ftrace_stats packet */
	int64_t phase, cpu, overrun, commit_overrun, dropped_events;
};

enum { UFS_SEND, UFS_COMPLETE };
enum { SYNC_EXT4, SYNC_F2FS };
#define UFS_DEVS 32
#define MARK_IO_EVENT 1	/* rec.sequence of block_io_start/done, kept only without block_rq_issue/complete */

struct sio_out {
	struct rec *ev;
	int64_t nev, capev;
	struct comm_rec *comm;
	int64_t ncomm, capcomm;
	struct ufs_rec *ufs;
	int64_t nufs, capufs;
	struct sync_rec *sync;
	int64_t nsync, capsync;
	struct stat_rec *stats;
	int64_t nstats, capstats;
	int64_t lost_bundles;	/* Perfetto bundles flagged lost_events */
	int64_t packets, bundles, other_events, ufs_other;
	int64_t rq_dc, io_events;	/* block_rq_issue/complete seen; block_io_start/done seen */
	int64_t lines, skipped_lines;	/* tracefs text */
	uint32_t clocks;		/* bit per FtraceEventBundle.ftrace_clock value seen */
	int32_t primary_clock;		/* ClockSnapshot.primary_trace_clock, -1 if none */
	int32_t in_order;
	int32_t nufs_dev;
	uint64_t last_time;
	char ufs_dev[UFS_DEVS][32];
	struct map seen;		/* pids with a command name */
};

static int grow(void **p, int64_t *cap, int64_t need, size_t size)
{
	int64_t c = *cap ? *cap : 1024;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c += c / 2 + 1024;
	q = realloc(*p, c * size);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

struct sio_out *sio_out_new(void)
{
	struct sio_out *o = calloc(1, sizeof(*o));

	if (!o || map_init(&o->seen, 1024)) {
		free(o);
		return NULL;
	}
	o->primary_clock = -1;
	o->in_order = 1;
	return o;
}

void sio_out_free(struct sio_out *o)
{
	if (!o)
		return;
	free(o->ev);
	free(o->comm);
	free(o->ufs);
	free(o->sync);
	free(o->stats);
	map_free(&o->seen);
	free(o);
}

/* Hands the events over: the caller frees them with sio_free. */
struct rec *sio_out_take_events(struct sio_out *o)
{
	struct rec *e = o->ev;

	o->ev = NULL;
	o->nev = o->capev = 0;
	return e;
}

void sio_free(void *p)
{
	free(p);
}

static struct rec *out_event(struct sio_out *o)
{
	if (grow((void **)&o->ev, &o->capev, o->nev + 1, sizeof(*o->ev)))
		return NULL;
	return &o->ev[o->nev++];
}

static void note_time(struct sio_out *o, uint64_t t)
{
	if (t < o->last_time)
		o->in_order = 0;
	o->last_time = t;
}

/* An event from the caller (a line the C reader left to Python). Returns 0, or -1 when out of memory. */
int sio_out_push(struct sio_out *o, const struct rec *r)
{
	struct rec *e = out_event(o);

	if (!e)
		return -1;
	*e = *r;
	note_time(o, r->time);
	return 0;
}

/* Records pid's command name if it has none yet. Returns 0, or -1 when out of memory. */
static int out_comm(struct sio_out *o, uint32_t pid, const uint8_t *name, int64_t len)
{
	struct comm_rec *c;

	if (!pid || !len || map_get(&o->seen, 0, pid) >= 0)
		return 0;
	if (map_put(&o->seen, 0, pid, 1) || grow((void **)&o->comm, &o->capcomm, o->ncomm + 1, sizeof(*o->comm)))
		return -1;
	c = &o->comm[o->ncomm++];
	memset(c, 0, sizeof(*c));
	c->pid = pid;
	c->at = o->nev;
	if (len > (int64_t)sizeof(c->name) - 1)
		len = sizeof(c->name) - 1;
	memcpy(c->name, name, len);
	return 0;
}

/* Categories from the kernel's rwbs string (events.py's rwbs_to_categories, which says why). */
static uint32_t rwbs_categories(const uint8_t *s, int64_t n)
{
	uint32_t tc = 0;
	int64_t i = 0;

	if (n && s[0] == 'F') {
		tc |= TC_FLUSH;
		i = 1;
	}
	if (i < n) {
		uint8_t op = s[i];

		if (op == 'W') {
			tc |= TC_WRITE;
		} else if (op == 'R') {
			tc |= TC_READ;
		} else if (op == 'D') {
			tc |= TC_WRITE | TC_DISCARD;
			if (i + 1 < n && s[i + 1] == 'E')
				i++;
		} else if (op != 'N' && op != 'E') {
			i--;
		}
		i++;
	}
	for (; i < n; i++)
		switch (s[i]) {
		case 'F':
			tc |= TC_FUA;
			break;
		case 'A':
			tc |= 1 << 11;	/* TC_AHEAD */
			break;
		case 'S':
			tc |= TC_SYNC;
			break;
		case 'M':
			tc |= TC_META;
			break;
		default:
			break;
		}
	return tc;
}

/* The category the kernel adds for each action (events.py's ACTION_CATEGORY). */
static uint32_t action_category(int act)
{
	switch (act) {
	case A_REQUEUE:
		return 1 << 5;
	case A_ISSUE:
		return 1 << 6;
	case A_COMPLETE:
		return 1 << 7;
	default:
		return 1 << 4;	/* queue, merges, get request, insert */
	}
}

/* -- protobuf wire format -- */

enum { PF_OK, PF_BLOB, PF_NOMEM = -1, PF_BAD = -2, PF_TRUNCATED = -3, PF_RANGE = -4 };

struct pb {
	const uint8_t *p, *end;
};

static int pb_varint(struct pb *b, uint64_t *v)
{
	uint64_t x = 0;
	int shift;

	for (shift = 0; shift < 64 && b->p < b->end; shift += 7) {
		uint8_t c = *b->p++;

		x |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return b->p >= b->end ? PF_TRUNCATED : PF_BAD;
}

/*
 * The next field of the message in b: its number, wire type, and value (varints and fixed) or
 * bytes (length-delimited). Returns 1 for a field, 0 at the end, or a PF_* error.
 */
static int pb_next(struct pb *b, uint32_t *field, int *wire, uint64_t *v, struct pb *sub)
{
	uint64_t tag, len;
	int rc;

	if (b->p >= b->end)
		return 0;
	rc = pb_varint(b, &tag);
	if (rc)
		return rc;
	*field = (uint32_t)(tag >> 3);
	*wire = tag & 7;
	switch (*wire) {
	case 0:
		rc = pb_varint(b, v);
		return rc ? rc : 1;
	case 1:
		if (b->end - b->p < 8)
			return PF_TRUNCATED;
		memcpy(v, b->p, 8);
		b->p += 8;
		return 1;
	case 5: {
		uint32_t x;

		if (b->end - b->p < 4)
			return PF_TRUNCATED;
		memcpy(&x, b->p, 4);
		*v = x;
		b->p += 4;
		return 1;
	}
	case 2:
		rc = pb_varint(b, &len);
		if (rc)
			return rc;
		if (len > (uint64_t)(b->end - b->p))
			return PF_TRUNCATED;
		sub->p = b->p;
		sub->end = b->p + len;
		b->p += len;
		return 1;
	default:
		return PF_BAD;	/* groups (3, 4) are not in Perfetto's protos; 6, 7 do not exist */
	}
}

/* FtraceEvent payload fields, per event: where rwbs, comm and the error are. */
struct block_fields {
	int act;
	uint32_t rwbs, comm, err1, err2;
};

static const struct block_fields *block_event(uint32_t field)
{
	static const struct block_fields issue = { A_ISSUE, 5, 6, 0, 0 }, complete = { A_COMPLETE, 5, 0, 7, 4 },
		insert = { A_INSERT, 5, 6, 0, 0 }, queue = { A_QUEUE, 4, 5, 0, 0 }, getrq = { A_GETRQ, 4, 5, 0, 0 },
		back = { A_BACKMERGE, 4, 5, 0, 0 }, front = { A_FRONTMERGE, 4, 5, 0, 0 },
		requeue = { A_REQUEUE, 5, 0, 4, 0 }, io_start = { A_ISSUE, 6, 7, 0, 0 },
		io_done = { A_COMPLETE, 6, 7, 0, 0 };

	switch (field) {	/* FtraceEvent's field numbers (protos/perfetto/trace/ftrace/ftrace_event.proto) */
	case 45:
		return &issue;
	case 125:
		return &complete;
	case 126:
		return &insert;
	case 119:
		return &queue;
	case 122:
		return &getrq;
	case 115:
		return &back;
	case 118:
		return &front;
	case 129:
		return &requeue;
	case 546:
		return &io_start;
	case 547:
		return &io_done;
	default:
		return NULL;
	}
}

static int pf_block(struct sio_out *o, uint32_t field, struct pb payload, uint64_t ts, uint32_t pid,
		    uint32_t cpu)
{
	const struct block_fields *f = block_event(field);
	uint64_t v, dev = 0, sector = 0, nsect = 0, err = 0;
	const uint8_t *rwbs = NULL, *comm = NULL;
	int64_t nrwbs = 0, ncomm = 0;
	struct pb sub;
	uint32_t fn;
	int wire, rc;
	struct rec *e;

	while ((rc = pb_next(&payload, &fn, &wire, &v, &sub)) == 1) {
		if (wire == 2) {
			if (fn == f->rwbs) {
				rwbs = sub.p;
				nrwbs = sub.end - sub.p;
			} else if (fn == f->comm) {
				comm = sub.p;
				ncomm = sub.end - sub.p;
			}
			continue;
		}
		if (fn == 1)
			dev = v;
		else if (fn == 2)
			sector = v;
		else if (fn == 3)
			nsect = v;
		else if (fn && (fn == f->err1 || fn == f->err2) && v)
			err = v;
	}
	if (rc)
		return rc;
	if (dev > UINT32_MAX || nsect > UINT32_MAX / 512)
		return PF_RANGE;
	e = out_event(o);
	if (!e)
		return PF_NOMEM;
	{
		int32_t se = (int32_t)err;	/* int32 in the proto, a varint of its 64-bit sign extension */

		*e = (struct rec){ .magic = REC_MAGIC, .time = ts, .sector = sector, .bytes = (uint32_t)nsect * 512,
				   .action = f->act | (rwbs_categories(rwbs, nrwbs) | action_category(f->act)) << 16,
				   .pid = pid, .device = (uint32_t)dev, .cpu = cpu,
				   .error = (uint16_t)((se < 0 ? -(int64_t)se : se) & 0xffff) };
	}
	if (field == 546 || field == 547) {
		e->sequence = MARK_IO_EVENT;
		o->io_events++;
	} else if (field == 45 || field == 125) {
		o->rq_dc++;
	}
	note_time(o, ts);
	return out_comm(o, pid, comm, ncomm) ? PF_NOMEM : 0;
}

static int str_is(const uint8_t *s, int64_t n, const char *lit)
{
	return n == (int64_t)strlen(lit) && !memcmp(s, lit, n);
}

static int pf_ufs(struct sio_out *o, struct pb payload, uint64_t ts, uint32_t pid, uint32_t cpu)
{
	uint64_t v, lba = 0, opcode = 0, tag = 0, str_t = 0, len = 0;
	const uint8_t *dev = NULL, *str = NULL;
	int64_t ndev = 0, nstr = -1;
	struct pb sub;
	uint32_t fn;
	int wire, rc, kind, d;
	struct ufs_rec *u;

	while ((rc = pb_next(&payload, &fn, &wire, &v, &sub)) == 1) {
		if (wire == 2) {
			if (fn == 1) {
				dev = sub.p;
				ndev = sub.end - sub.p;
			} else if (fn == 6) {
				str = sub.p;
				nstr = sub.end - sub.p;
			}
			continue;
		}
		switch (fn) {
		case 4:
			lba = v;
			break;
		case 5:
			opcode = v;
			break;
		case 7:
			tag = v;
			break;
		case 8:
			len = v;
			break;
		case 10:
			str_t = v;
			break;
		default:
			break;
		}
	}
	if (rc)
		return rc;
	/* Older kernels name the step ("send", "complete"), newer ones give enum ufs_trace_str_t. */
	if (nstr >= 0)
		kind = str_is(str, nstr, "send") || str_is(str, nstr, "send_req") ? UFS_SEND :
		       str_is(str, nstr, "complete") || str_is(str, nstr, "complete_rsp") ||
		       str_is(str, nstr, "dev_complete") ? UFS_COMPLETE : -1;
	else
		kind = str_t == 0 ? UFS_SEND : str_t <= 2 ? UFS_COMPLETE : -1;
	if (kind < 0) {
		o->ufs_other++;
		return 0;
	}
	if (ndev > 31)
		ndev = 31;
	for (d = 0; d < o->nufs_dev; d++)
		if ((int64_t)strlen(o->ufs_dev[d]) == ndev && !memcmp(o->ufs_dev[d], dev, ndev))
			break;
	if (d == o->nufs_dev) {
		if (d == UFS_DEVS)
			d--;	/* more host controllers than any phone has: the last slot takes the rest */
		else
			o->nufs_dev++;
		memset(o->ufs_dev[d], 0, sizeof(o->ufs_dev[d]));
		memcpy(o->ufs_dev[d], dev, ndev);
	}
	if (grow((void **)&o->ufs, &o->capufs, o->nufs + 1, sizeof(*o->ufs)))
		return PF_NOMEM;
	u = &o->ufs[o->nufs++];
	*u = (struct ufs_rec){ .time = ts, .lba = lba, .transfer_len = (int32_t)len, .tag = (uint32_t)tag,
			       .opcode = (uint32_t)opcode, .pid = pid, .cpu = cpu, .dev = (uint16_t)d, .kind = kind };
	return 0;
}

static int pf_sync(struct sio_out *o, uint32_t field, struct pb payload, uint64_t ts, uint32_t pid)
{
	int f2fs = field == 255 || field == 256, exit = field == 44 || field == 256;
	uint64_t v, dev = 0, ino = 0;
	struct sync_rec *s;
	struct pb sub;
	uint32_t fn;
	int wire, rc;
	int32_t ret = 0;
	uint8_t datasync = 0, need_cp = 0;

	while ((rc = pb_next(&payload, &fn, &wire, &v, &sub)) == 1) {
		if (wire == 2)
			continue;
		if (fn == 1)
			dev = v;
		else if (fn == 2)
			ino = v;
		else if (!f2fs && !exit && fn == 4)
			datasync = !!v;
		else if (!f2fs && exit && fn == 3)
			ret = (int32_t)v;
		else if (f2fs && exit && fn == 3)
			need_cp = !!v;
		else if (f2fs && exit && fn == 4)
			datasync = !!v;
		else if (f2fs && exit && fn == 5)
			ret = (int32_t)v;
	}
	if (rc)
		return rc;
	if (grow((void **)&o->sync, &o->capsync, o->nsync + 1, sizeof(*o->sync)))
		return PF_NOMEM;
	s = &o->sync[o->nsync++];
	*s = (struct sync_rec){ .time = ts, .ino = ino, .pid = pid, .dev = (uint32_t)dev, .ret = ret,
				.fs = f2fs ? SYNC_F2FS : SYNC_EXT4, .phase = exit, .datasync = datasync,
				.need_cp = need_cp };
	return 0;
}

static int pf_event(struct sio_out *o, struct pb ev, uint32_t cpu)
{
	uint64_t v, ts = 0, pid = 0;
	uint32_t fn, which = 0;
	struct pb sub, payload = { 0 };
	int wire, rc;

	while ((rc = pb_next(&ev, &fn, &wire, &v, &sub)) == 1) {
		if (fn == 1 && wire == 0)
			ts = v;
		else if (fn == 2 && wire == 0)
			pid = v;
		else if (wire == 2 && fn > 2) {
			which = fn;
			payload = sub;
		}
	}
	if (rc)
		return rc;
	if (block_event(which))
		return pf_block(o, which, payload, ts, (uint32_t)pid, cpu);
	if (which == 406)
		return pf_ufs(o, payload, ts, (uint32_t)pid, cpu);
	if (which == 43 || which == 44 || which == 255 || which == 256)
		return pf_sync(o, which, payload, ts, (uint32_t)pid);
	o->other_events++;
	return 0;
}

static int pf_bundle(struct sio_out *o, struct pb b)
{
	struct pb scan = b, sub;
	uint64_t v, cpu = 0, clock = 0;
	uint32_t fn;
	int wire, rc;

	o->bundles++;
	/* The CPU and clock first: a writer may put them after the events. */
	while ((rc = pb_next(&scan, &fn, &wire, &v, &sub)) == 1) {
		if (fn == 1 && wire == 0)
			cpu = v;
		else if (fn == 3 && wire == 0 && v)
			o->lost_bundles++;
		else if (fn == 5 && wire == 0)
			clock = v;
	}
	if (rc)
		return rc;
	o->clocks |= 1u << (clock < 31 ? clock : 31);
	while ((rc = pb_next(&b, &fn, &wire, &v, &sub)) == 1)
		if (fn == 2 && wire == 2) {
			rc = pf_event(o, sub, (uint32_t)cpu);
			if (rc)
				return rc;
		}
	return rc;
}

static int pf_stats(struct sio_out *o, struct pb s)
{
	uint64_t v, phase = 0;
	struct pb sub, cpus[256];
	uint32_t fn;
	int wire, rc, n = 0, i;

	while ((rc = pb_next(&s, &fn, &wire, &v, &sub)) == 1) {
		if (fn == 1 && wire == 0)
			phase = v;
		else if (fn == 2 && wire == 2 && n < 256)
			cpus[n++] = sub;
	}
	if (rc)
		return rc;
	for (i = 0; i < n; i++) {
		struct stat_rec *r;

		if (grow((void **)&o->stats, &o->capstats, o->nstats + 1, sizeof(*o->stats)))
			return PF_NOMEM;
		r = &o->stats[o->nstats++];
		*r = (struct stat_rec){ .phase = (int64_t)phase };
		while ((rc = pb_next(&cpus[i], &fn, &wire, &v, &sub)) == 1) {
			if (wire != 0)
				continue;
			if (fn == 1)
				r->cpu = (int64_t)v;
			else if (fn == 3)
				r->overrun = (int64_t)v;
			else if (fn == 4)
				r->commit_overrun = (int64_t)v;
			else if (fn == 8)
				r->dropped_events = (int64_t)v;
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* ProcessTree: thread names (and processes' first cmdline word) for pids without a name yet. */
static int pf_process_tree(struct sio_out *o, struct pb t)
{
	struct pb sub, f;
	uint64_t v, w;
	uint32_t fn, gn;
	int wire, wire2, rc;

	while ((rc = pb_next(&t, &fn, &wire, &v, &sub)) == 1) {
		uint64_t id = 0;
		const uint8_t *name = NULL;
		int64_t nname = 0;

		if (wire != 2 || (fn != 1 && fn != 2))
			continue;
		while ((rc = pb_next(&sub, &gn, &wire2, &w, &f)) == 1) {
			if (gn == 1 && wire2 == 0)
				id = w;
			else if ((fn == 2 ? gn == 2 : gn == 3) && wire2 == 2 && !name) {
				name = f.p;
				nname = f.end - f.p;
			}
		}
		if (rc)
			return rc;
		if (fn == 1 && name) {	/* a cmdline: its last path component, as the kernel's comm */
			const uint8_t *slash = name;
			int64_t i;

			for (i = 0; i < nname; i++)
				if (name[i] == '/')
					slash = name + i + 1;
			nname -= slash - name;
			name = slash;
			if (nname > 15)
				nname = 15;
		}
		if (name && id <= UINT32_MAX && out_comm(o, (uint32_t)id, name, nname))
			return PF_NOMEM;
	}
	return rc;
}

static int pf_packet(struct sio_out *o, struct pb p, const uint8_t **blob, int64_t *nblob)
{
	struct pb sub;
	uint64_t v;
	uint32_t fn;
	int wire, rc;

	o->packets++;
	while ((rc = pb_next(&p, &fn, &wire, &v, &sub)) == 1) {
		if (wire != 2) {
			continue;
		}
		switch (fn) {	/* TracePacket's field numbers (protos/perfetto/trace/trace_packet.proto) */
		case 1:
			rc = pf_bundle(o, sub);
			break;
		case 2:
			rc = pf_process_tree(o, sub);
			break;
		case 6: {	/* ClockSnapshot */
			struct pb c = sub, f;
			uint32_t gn;
			int w2;
			uint64_t x;

			while ((rc = pb_next(&c, &gn, &w2, &x, &f)) == 1)
				if (gn == 2 && w2 == 0)
					o->primary_clock = (int32_t)x;
			break;
		}
		case 34:
			rc = pf_stats(o, sub);
			break;
		case 50:
			*blob = sub.p;
			*nblob = sub.end - sub.p;
			break;
		default:
			break;
		}
		if (rc)
			return rc;
	}
	return rc;
}

/*
 * Reads the packets of a Perfetto trace (message Trace: repeated TracePacket packet = 1) in
 * buf[0..len). Without final, a packet cut at the end of buf is left for the next call: *consumed
 * says where it starts. A packet holding compressed_packets stops the reading with PF_BLOB: the
 * blob is buf[*blob_off..+*blob_len), the caller inflates it, reads it with this function (it is a
 * Trace too), and goes on from *consumed. Returns PF_OK, PF_BLOB or a PF_* error at byte *err_off.
 */
int sio_pf_parse(struct sio_out *o, const uint8_t *buf, int64_t len, int final, int64_t *consumed,
		 int64_t *blob_off, int64_t *blob_len, int64_t *err_off)
{
	struct pb b = { buf, buf + len }, sub;
	const uint8_t *start;
	uint32_t fn;
	int wire, rc;
	uint64_t v;

	*consumed = 0;
	for (;;) {
		const uint8_t *blob = NULL;
		int64_t nblob = 0;

		start = b.p;
		rc = pb_next(&b, &fn, &wire, &v, &sub);
		if (rc == 0)
			break;
		if (rc == PF_TRUNCATED && !final)
			return PF_OK;	/* the rest of this packet comes with the next piece */
		if (rc < 0) {
			*err_off = start - buf;
			return rc;
		}
		if (fn == 1 && wire == 2) {
			rc = pf_packet(o, sub, &blob, &nblob);
			if (rc < 0) {
				*err_off = start - buf;
				return rc;
			}
		}
		*consumed = b.p - buf;
		if (blob) {
			*blob_off = blob - buf;
			*blob_len = nblob;
			return PF_BLOB;
		}
	}
	*consumed = b.p - buf;
	return PF_OK;
}

/*
 * After reading: block_io_start/done stand for issue and completion only in traces without
 * block_rq_issue/complete (otherwise they would count each request twice). Drops them or keeps
 * them, in place. Returns the number of events.
 */
int64_t sio_out_settle_io_events(struct sio_out *o)
{
	int64_t i, k = 0;

	if (!o->io_events)
		return o->nev;
	for (i = 0; i < o->nev; i++) {
		if (o->ev[i].sequence == MARK_IO_EVENT) {
			if (o->rq_dc)
				continue;
			o->ev[i].sequence = 0;
		}
		o->ev[k++] = o->ev[i];
	}
	o->nev = k;
	return k;
}

/*
 * Puts n records in the order of perm (a permutation of 0..n-1) in place, following its cycles;
 * perm is used up (its entries become -1).
 */
void sio_permute(struct rec *ev, int64_t *perm, int64_t n)
{
	int64_t i;

	for (i = 0; i < n; i++) {
		int64_t j, k;
		struct rec t;

		if (perm[i] < 0 || perm[i] == i) {
			perm[i] = -1;
			continue;
		}
		t = ev[i];
		j = i;
		while ((k = perm[j]) != i) {
			ev[j] = ev[k];
			perm[j] = -1;
			j = k;
		}
		ev[j] = t;
		perm[j] = -1;
	}
}

/* -- tracefs text -- */

static int is_ws(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

static int is_digit(uint8_t c)
{
	return c >= '0' && c <= '9';
}

/* Digits at *p, advancing *p; -1 if none, or if the value does not fit 64 bits. */
static int read_uint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	const uint8_t *s = *p;
	uint64_t x = 0;
	int over = 0;

	while (*p < end && is_digit(**p)) {
		uint64_t d = **p - '0';

		if (x > (UINT64_MAX - d) / 10)
			over = 1;
		x = x * 10 + d;
		(*p)++;
	}
	if (*p == s || over || *p - s > 40)	/* formats.py's _MAX_DIGITS */
		return -1;
	*v = x;
	return 0;
}

static const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end)
{
	while (p < end && is_ws(*p))
		p++;
	return p;
}

/* The block tracepoints (tracefs.py's TRACEPOINTS; block_rq_merge is reported as a back merge). */
static int tracepoint_action(const uint8_t *s, int64_t n)
{
	static const struct {
		const char *name;
		int act;
	} tp[] = { { "block_bio_queue", A_QUEUE }, { "block_bio_backmerge", A_BACKMERGE },
		   { "block_bio_frontmerge", A_FRONTMERGE }, { "block_getrq", A_GETRQ },
		   { "block_rq_insert", A_INSERT }, { "block_rq_issue", A_ISSUE },
		   { "block_rq_complete", A_COMPLETE }, { "block_rq_requeue", A_REQUEUE },
		   { "block_rq_merge", A_BACKMERGE } };
	size_t i;

	if (n < 6 || memcmp(s, "block_", 6))
		return 0;
	for (i = 0; i < sizeof(tp) / sizeof(tp[0]); i++)
		if (str_is(s, n, tp[i].name))
			return tp[i].act;
	return 0;
}

enum { LINE_EVENT, LINE_SKIPPED, LINE_PYTHON, LINE_NOMEM };

/*
 * One line (without its end) in the grammar of formats.py's _TF_EVENT and _TF_BODY. Anything this
 * does not recognise with certainty (headers, LOST lines, odd names, non-ASCII, numbers that may not
 * fit, malformed bodies) is LINE_PYTHON: the Python reader, which also writes the error messages,
 * takes that line.
 */
static int text_line(struct sio_out *o, const uint8_t *p, const uint8_t *end)
{
	const uint8_t *q, *comm, *comm_end, *t, *name, *tail, *tail_end, *rwbs;
	uint64_t pid, cpu, sec, frac = 0, maj, min, a, sector, nsect, err = 0;
	int64_t nfrac, i;
	int act;
	struct rec *e;

	{	/* ASCII only (Python decodes the rest), 8 bytes at a time */
		uint64_t high = 0, w;

		for (q = p; q + 8 <= end; q += 8) {
			memcpy(&w, q, 8);
			high |= w;
		}
		for (; q < end; q++)
			high |= *q;
		if (high & 0x8080808080808080ull)
			return LINE_PYTHON;
	}
	p = skip_ws(p, end);
	/* "COMM-PID [(TGID)] [CPU]": the first "[digits]" with "-digits" before it, as the lazy match finds. */
	for (q = p; q < end; q++) {
		const uint8_t *r, *d;

		q = memchr(q, '[', end - q);
		if (!q) {
			q = end;
			break;
		}
		if (q == p || !is_ws(q[-1]))
			continue;
		for (r = q + 1; r < end && is_digit(*r); r++)
			;
		if (r == q + 1 || r >= end || *r != ']')
			continue;
		d = q - 1;
		while (d > p && is_ws(*d))
			d--;
		if (*d == ')') {	/* "(TGID)" or "(-----)" */
			const uint8_t *o2 = d - 1;

			while (o2 > p && *o2 != '(')
				o2--;
			if (*o2 != '(' || o2 == p || !is_ws(o2[-1]))
				continue;
			{	/* only digits or only dashes inside, after spaces */
				const uint8_t *c = skip_ws(o2 + 1, d);

				if (c == d || !(is_digit(*c) || *c == '-'))
					continue;
				for (r = c; r < d && (is_digit(*c) ? is_digit(*r) : *r == '-'); r++)
					;
				if (r != d)
					continue;
			}
			d = o2 - 1;
			while (d > p && is_ws(*d))
				d--;
		}
		if (!is_digit(*d))
			continue;
		while (d > p && is_digit(d[-1]))
			d--;
		if (d == p || d[-1] != '-')
			continue;
		comm = p;
		comm_end = d - 1;
		t = d;
		if (read_uint(&t, end, &pid) || pid > UINT32_MAX || !is_ws(*t))
			return LINE_PYTHON;
		t = q + 1;
		if (read_uint(&t, end, &cpu) || cpu > UINT32_MAX)
			return LINE_PYTHON;
		q = t + 1;	/* after ']' */
		break;
	}
	if (q >= end || !is_ws(*q))
		return LINE_PYTHON;
	q = skip_ws(q, end);
	/* An optional flags column ("d.h1."), then "SECONDS.FRACTION:". */
	for (i = 0; i < 2; i++) {
		const uint8_t *s = q;

		while (q < end && is_digit(*q))
			q++;
		if (q > s && q < end && *q == '.') {
			const uint8_t *f = q + 1;

			while (f < end && is_digit(*f))
				f++;
			if (f > q + 1 && f < end && *f == ':') {
				t = s;
				if (read_uint(&t, end, &sec))
					return LINE_PYTHON;
				nfrac = f - (q + 1);
				for (t = q + 1; t < f && t < q + 1 + 9; t++)
					frac = frac * 10 + (*t - '0');
				for (; t < q + 1 + 9; t++)
					frac *= 10;
				q = f + 1;
				break;
			}
		}
		if (i)
			return LINE_PYTHON;
		q = s;
		while (q < end && !is_ws(*q))
			q++;
		if (q - s > 8 || q == s || q >= end)
			return LINE_PYTHON;
		q = skip_ws(q, end);
	}
	(void)nfrac;
	if (sec > (UINT64_MAX - frac) / 1000000000u)
		return LINE_PYTHON;
	if (q >= end || !is_ws(*q))
		return LINE_PYTHON;
	q = skip_ws(q, end);
	name = q;
	while (q < end && (is_digit(*q) || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_'))
		q++;
	if (q == name || q >= end || *q != ':')
		return LINE_PYTHON;
	act = tracepoint_action(name, q - name);
	if (!act) {
		o->skipped_lines++;
		return LINE_SKIPPED;	/* another event: the event line matched, the body does not matter */
	}
	q = skip_ws(q + 1, end);
	/* "MAJ,MIN RWBS [BYTES] [(CMD)] SECTOR + NSECT [IOPRIO] [TAIL]" */
	if (read_uint(&q, end, &maj) || q >= end || *q != ',')
		return LINE_PYTHON;
	q++;
	if (read_uint(&q, end, &min) || q >= end || !is_ws(*q))
		return LINE_PYTHON;
	q = skip_ws(q, end);
	rwbs = q;
	while (q < end && *q >= 'A' && *q <= 'Z')
		q++;
	if (q == rwbs || q >= end || !is_ws(*q))
		return LINE_PYTHON;
	{
		const uint8_t *rwbs_end = q;

		q = skip_ws(q, end);
		if (q < end && is_digit(*q)) {
			if (read_uint(&q, end, &a) || q >= end || !is_ws(*q))
				return LINE_PYTHON;
			q = skip_ws(q, end);
			if (q < end && *q == '+') {
				sector = a;	/* no bytes, no command: a bio event */
				goto plus;
			}
		}
		if (q < end && *q == '(') {
			while (q < end && *q != ')')
				q++;
			if (q >= end || q + 1 >= end || !is_ws(q[1]))
				return LINE_PYTHON;
			q = skip_ws(q + 1, end);
		}
		if (read_uint(&q, end, &sector) || q >= end || !is_ws(*q))
			return LINE_PYTHON;
		q = skip_ws(q, end);
plus:
		if (q >= end || *q != '+' || q + 1 >= end || !is_ws(q[1]))
			return LINE_PYTHON;
		q = skip_ws(q + 1, end);
		if (read_uint(&q, end, &nsect) || q >= end || (!is_ws(*q) && *q != '['))
			return LINE_PYTHON;
		q = skip_ws(q, end);
		if (q < end && *q != '[') {	/* the I/O priority of kernels after 6.1 */
			while (q < end && !is_ws(*q) && *q != '[')
				q++;
			q = skip_ws(q, end);
		}
		if (q >= end || *q != '[')
			return LINE_PYTHON;
		tail = ++q;
		while (q < end && *q != ']')
			q++;
		if (q >= end)
			return LINE_PYTHON;
		tail_end = q;
		if (skip_ws(q + 1, end) != end)
			return LINE_PYTHON;
		if (maj >= 1u << (32 - 20) || min >= 1u << 20 || nsect > UINT32_MAX / 512)
			return LINE_PYTHON;
		if (act == A_COMPLETE || act == A_REQUEUE) {
			const uint8_t *d = tail;

			if (d < tail_end && *d == '-')
				d++;
			if (d < tail_end && d[0] == '-')
				return LINE_PYTHON;	/* "--5": left to Python */
			for (t = d; t < tail_end && is_digit(*t); t++)
				;
			if (t == tail_end && d < tail_end) {
				t = d;
				if (read_uint(&t, tail_end, &err))
					return LINE_PYTHON;
			}
		}
		while (comm_end > comm && is_ws(comm_end[-1]))
			comm_end--;
		if (comm_end - comm > 23)
			return LINE_PYTHON;
		e = out_event(o);
		if (!e)
			return LINE_NOMEM;
		*e = (struct rec){ .magic = REC_MAGIC, .time = sec * 1000000000u + frac, .sector = sector,
				   .bytes = (uint32_t)nsect * 512,
				   .action = act | (rwbs_categories(rwbs, rwbs_end - rwbs) | action_category(act)) << 16,
				   .pid = (uint32_t)pid, .device = (uint32_t)(maj << 20 | min), .cpu = (uint32_t)cpu,
				   .error = (uint16_t)(err & 0xffff) };
		note_time(o, e->time);
		if (pid > 0 && !str_is(comm, comm_end - comm, "<...>") &&
		    out_comm(o, (uint32_t)pid, comm, comm_end - comm))
			return LINE_NOMEM;
	}
	return LINE_EVENT;
}

/*
 * Reads the lines of buf[0..len) (without final, only those ended by a newline). Returns 0 when
 * done, *consumed where the unread rest starts; 1 when a line is left to Python (it starts at
 * *consumed; call again after it); -1 when out of memory. o->lines counts the lines read.
 */
int sio_text_parse(struct sio_out *o, const uint8_t *buf, int64_t len, int final, int64_t *consumed)
{
	const uint8_t *p = buf, *end = buf + len;

	for (;;) {
		const uint8_t *nl = memchr(p, '\n', end - p), *le;
		int rc;

		if (!nl && (!final || p == end))
			break;
		le = nl ? nl : end;
		while (le > p && (le[-1] == '\r'))
			le--;
		rc = text_line(o, p, le);
		if (rc == LINE_NOMEM)
			return -1;
		if (rc == LINE_PYTHON) {
			*consumed = p - buf;
			return 1;
		}
		o->lines++;
		p = nl ? nl + 1 : end;
	}
	*consumed = p - buf;
	return 0;
}

/* The counters of o, for Python: see native.py's OUT_INFO for the order. */
void sio_out_info(const struct sio_out *o, int64_t *info)
{
	int64_t v[] = { o->nev, o->ncomm, o->nufs, o->nsync, o->nstats, o->lost_bundles, o->packets, o->bundles,
			o->other_events, o->ufs_other, o->rq_dc, o->io_events, o->lines, o->skipped_lines, o->clocks,
			o->primary_clock, o->in_order, o->nufs_dev };

	memcpy(info, v, sizeof(v));
}

/* One of o's arrays: 0 events, 1 command names, 2 UFS commands, 3 sync calls, 4 ftrace stats, 5 UFS hosts. */
const void *sio_out_array(const struct sio_out *o, int which)
{
	switch (which) {
	case 0:
		return o->ev;
	case 1:
		return o->comm;
	case 2:
		return o->ufs;
	case 3:
		return o->sync;
	case 4:
		return o->stats;
	default:
		return o->ufs_dev;
	}
}
