// SPDX-License-Identifier: GPL-2.0
/*
 * Follows every bio and request through a time-ordered block trace in one pass, as btt does:
 * a queued bio (Q) either starts a request (G) or is merged into one (M at its end, F at its start);
 * a request is issued (D) and completed (C). For each Q we return its Q2C latency; for each C, its
 * issue time, the number of bios it carried and who submitted it.
 *
 * Why C: this is inherently sequential (a request's identity is its current start sector, which
 * front merges change) and the traces worth analysing have millions of events; it also writes
 * compact per-bio and per-request tables so numpy never gathers from the big event array. Loaded with ctypes
 * by smartio/trace/match.py, which compiles it on first use.
 *
 * Requests are keyed by (device, start sector) and, while they can still grow, by (device, end sector).
 * Requests without data (flushes) carry no meaningful sector, so they share one key per device.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct rec {			/* struct blk_io_trace without payload, host byte order */
	uint32_t magic, sequence;
	uint64_t time, sector;
	uint32_t bytes, action, pid, device, cpu;
	uint16_t error, pdu_len;
};

enum { A_QUEUE = 1, A_BACKMERGE, A_FRONTMERGE, A_GETRQ, A_REQUEUE = 6, A_ISSUE, A_COMPLETE, A_INSERT = 12 };
#define NO_SECTOR UINT64_MAX

/* Open-addressing hash map from (device, sector) to an int64 value, with backward-shift deletion. */
struct map {
	uint64_t *sect;
	uint32_t *dev;
	int64_t *val;		/* -1 = empty slot */
	size_t mask, used;
};

static size_t hash(uint32_t dev, uint64_t sector)
{
	uint64_t h = (sector ^ ((uint64_t)dev << 40)) * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 17);
}

static int map_init(struct map *m, size_t cap)
{
	m->mask = cap - 1;
	m->used = 0;
	m->sect = malloc(cap * sizeof(*m->sect));
	m->dev = malloc(cap * sizeof(*m->dev));
	m->val = malloc(cap * sizeof(*m->val));
	if (!m->sect || !m->dev || !m->val)
		return -1;
	memset(m->val, 0xff, cap * sizeof(*m->val));
	return 0;
}

static void map_free(struct map *m)
{
	free(m->sect);
	free(m->dev);
	free(m->val);
}

static size_t map_find(const struct map *m, uint32_t dev, uint64_t sector)
{
	size_t i = hash(dev, sector) & m->mask;

	while (m->val[i] >= 0 && (m->sect[i] != sector || m->dev[i] != dev))
		i = (i + 1) & m->mask;
	return i;
}

static int64_t map_get(const struct map *m, uint32_t dev, uint64_t sector)
{
	return m->val[map_find(m, dev, sector)];
}

static int map_put(struct map *m, uint32_t dev, uint64_t sector, int64_t val);

static int map_grow(struct map *m)
{
	struct map old = *m;
	size_t i;

	if (map_init(m, (old.mask + 1) * 2))
		return -1;
	for (i = 0; i <= old.mask; i++)
		if (old.val[i] >= 0)
			map_put(m, old.dev[i], old.sect[i], old.val[i]);
	map_free(&old);
	return 0;
}

static int map_put(struct map *m, uint32_t dev, uint64_t sector, int64_t val)
{
	size_t i = map_find(m, dev, sector);

	if (m->val[i] < 0) {
		if ((m->used + 1) * 2 > m->mask + 1) {
			if (map_grow(m))
				return -1;
			i = map_find(m, dev, sector);
		}
		m->used++;
		m->sect[i] = sector;
		m->dev[i] = dev;
	}
	m->val[i] = val;
	return 0;
}

static int64_t map_pop(struct map *m, uint32_t dev, uint64_t sector)
{
	size_t i = map_find(m, dev, sector), j = i, k;
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
		k = hash(m->dev[j], m->sect[j]) & m->mask;
		if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
			m->sect[i] = m->sect[j];
			m->dev[i] = m->dev[j];
			m->val[i] = m->val[j];
			m->val[j] = -1;
			i = j;
		}
	}
	return val;
}

/* A request being followed; its bios form a singly linked list through next_bio[]. */
struct req {
	uint64_t start, end;
	int64_t first_bio, last_bio;	/* indices into bios[], -1 if none */
	int64_t issue;			/* event index of the last D, -1 if none */
	int32_t nbios;
	int32_t open;		/* still accepts merges (not yet issued) */
};

struct bio_out {			/* one per Q */
	uint64_t time;
	int64_t q2c;		/* ns, -1 if its completion was not seen */
	uint32_t tc, bytes, pid, pad;
};

struct req_out {			/* one per C */
	uint64_t time;
	int64_t issue;		/* time of the matching D, -1 if not seen */
	uint64_t sector;
	uint32_t bytes, tc, pid;	/* pid: who queued its first bio (else who issued it) */
	int32_t nbios;
};

/*
 * ev: n records sorted by time. Fills bios[] (one per Q, in order) and reqs[] (one per C), both
 * sized n by the caller, their counts in *nbio and *nreq, and counts[action] for actions 0..31.
 * Returns 0; -1 when out of memory; -2 - i when event i is earlier than event i - 1.
 */
int sio_match(const struct rec *ev, int64_t n, struct bio_out *bios, int64_t *nbio,
	      struct req_out *out, int64_t *nreq, int64_t *counts)
{
	struct map pending = { 0 }, by_start = { 0 }, by_end = { 0 };
	struct req *reqs = NULL;
	int64_t *next_bio = NULL, nreqs = 0, cap = 1024, i, nb = 0, nc = 0;
	int rc = -1;

	next_bio = malloc((n ? n : 1) * sizeof(*next_bio));
	reqs = malloc(cap * sizeof(*reqs));
	if (!next_bio || !reqs || map_init(&pending, 1024) || map_init(&by_start, 1024) ||
	    map_init(&by_end, 1024))
		goto out;
	memset(counts, 0, 32 * sizeof(*counts));

	for (i = 0; i < n; i++) {
		const struct rec *e = &ev[i];
		uint32_t act = e->action & 0xffff, dev = e->device;
		uint64_t s = e->bytes ? e->sector : NO_SECTOR;
		uint64_t end = e->bytes ? e->sector + e->bytes / 512 : NO_SECTOR;
		int64_t q, r, r2;

		if (i && e->time < ev[i - 1].time) {
			rc = -2 - (int)i;
			goto out;
		}
		counts[act & 31]++;
		switch (act) {
		case A_QUEUE:
			bios[nb] = (struct bio_out){ e->time, -1, e->action >> 16, e->bytes, e->pid, 0 };
			next_bio[nb] = -1;
			if (map_put(&pending, dev, s, nb++))
				goto out;
			break;
		case A_GETRQ:
			/* A new request; a previous one still keyed here was lost (e.g. trace started late). */
			map_pop(&by_start, dev, s);
			if (nreqs == cap) {
				struct req *bigger = realloc(reqs, 2 * cap * sizeof(*reqs));

				if (!bigger)
					goto out;
				reqs = bigger;
				cap *= 2;
			}
			q = map_pop(&pending, dev, s);
			reqs[nreqs] = (struct req){ s, end, q, q, -1, q >= 0, 1 };
			if (map_put(&by_start, dev, s, nreqs) || (end != NO_SECTOR && map_put(&by_end, dev, end, nreqs)))
				goto out;
			nreqs++;
			break;
		case A_BACKMERGE:
			r = map_pop(&by_end, dev, e->sector);
			r2 = map_get(&by_start, dev, e->sector);
			if (r < 0)
				break;
			if (r2 >= 0 && r2 != r && reqs[r2].open) {
				/* Request merge: r2 (starting where r ends) joins r. */
				map_pop(&by_start, dev, e->sector);
				map_pop(&by_end, dev, reqs[r2].end);
				if (reqs[r2].first_bio >= 0) {
					if (reqs[r].last_bio >= 0)
						next_bio[reqs[r].last_bio] = reqs[r2].first_bio;
					else
						reqs[r].first_bio = reqs[r2].first_bio;
					reqs[r].last_bio = reqs[r2].last_bio;
				}
				reqs[r].nbios += reqs[r2].nbios;
				reqs[r].end = reqs[r2].end;
			} else {
				q = map_pop(&pending, dev, e->sector);
				if (q >= 0) {
					if (reqs[r].last_bio >= 0)
						next_bio[reqs[r].last_bio] = q;
					else
						reqs[r].first_bio = q;
					reqs[r].last_bio = q;
					reqs[r].nbios++;
				}
				reqs[r].end = e->sector + e->bytes / 512;
			}
			if (map_put(&by_end, dev, reqs[r].end, r))
				goto out;
			break;
		case A_FRONTMERGE:
			r = map_pop(&by_start, dev, e->sector + e->bytes / 512);
			if (r < 0)
				break;
			q = map_pop(&pending, dev, e->sector);
			if (q >= 0) {
				next_bio[q] = reqs[r].first_bio;
				reqs[r].first_bio = q;
				if (reqs[r].last_bio < 0)
					reqs[r].last_bio = q;
				reqs[r].nbios++;
			}
			reqs[r].start = e->sector;
			if (map_put(&by_start, dev, e->sector, r))
				goto out;
			break;
		case A_ISSUE:
			r = map_get(&by_start, dev, s);
			if (r < 0) {	/* a request we did not see start: a flush, or the trace began later */
				if (nreqs == cap) {
					struct req *bigger = realloc(reqs, 2 * cap * sizeof(*reqs));

					if (!bigger)
						goto out;
					reqs = bigger;
					cap *= 2;
				}
				reqs[nreqs] = (struct req){ s, end, -1, -1, -1, 0, 0 };
				r = nreqs++;
				if (map_put(&by_start, dev, s, r))
					goto out;
			}
			if (reqs[r].open && reqs[r].end != NO_SECTOR)
				map_pop(&by_end, dev, reqs[r].end);
			reqs[r].open = 0;
			reqs[r].issue = i;	/* after a requeue, the last issue counts */
			break;
		case A_COMPLETE:
			r = map_pop(&by_start, dev, s);
			if (r < 0) {	/* never seen issued: still a completed request */
				out[nc++] = (struct req_out){ e->time, -1, e->sector, e->bytes, e->action >> 16,
							      e->pid, 0 };
				break;
			}
			if (reqs[r].open && reqs[r].end != NO_SECTOR)
				map_pop(&by_end, dev, reqs[r].end);
			out[nc] = (struct req_out){ e->time, -1, e->sector, e->bytes, e->action >> 16, 0,
						    reqs[r].nbios };
			if (reqs[r].issue >= 0) {
				out[nc].issue = (int64_t)ev[reqs[r].issue].time;
				out[nc].pid = ev[reqs[r].issue].pid;
			}
			if (reqs[r].first_bio >= 0)
				out[nc].pid = bios[reqs[r].first_bio].pid;
			for (q = reqs[r].first_bio; q >= 0; q = next_bio[q])
				bios[q].q2c = (int64_t)(e->time - bios[q].time);
			nc++;
			break;
		default:
			break;
		}
	}
	*nbio = nb;
	*nreq = nc;
	rc = 0;
out:
	map_free(&pending);
	map_free(&by_start);
	map_free(&by_end);
	free(reqs);
	free(next_bio);
	return rc;
}

/*
 * Merges k arrays of records, each sorted by time, into out (ties keep the order of the parts):
 * the per-CPU files of a blktrace recording. k is small (one per CPU), so a linear scan of the heads
 * is cheaper than a heap.
 */
void sio_merge(const struct rec *const *parts, const int64_t *lens, int k, struct rec *out)
{
	int64_t pos[256] = { 0 };
	int64_t total = 0, i;
	int j;

	for (j = 0; j < k; j++)
		total += lens[j];
	for (i = 0; i < total; i++) {
		int best = -1;

		for (j = 0; j < k; j++)
			if (pos[j] < lens[j] &&
			    (best < 0 || parts[j][pos[j]].time < parts[best][pos[best]].time))
				best = j;
		out[i] = parts[best][pos[best]++];
	}
}
