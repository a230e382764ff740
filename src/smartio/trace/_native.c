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
