/* SPDX-License-Identifier: GPL-2.0-only
 *
 * flashdev: an nbdkit filter that makes the plugin below it (memory) behave like a phone's flash device in time.
 *
 * The model (all times in microseconds, already multiplied by the profile's time scale by the caller):
 *
 *   - Every request is classified by direction (read / write) and pattern: sequential when it continues a
 *     stream of the same direction, random otherwise. A small table remembers the ends of the last FD_STREAMS
 *     streams, so that interleaved sequential streams all stay sequential. A stream is established once it has
 *     been continued: the request that continues a brand-new entry is still random. Without that, a random
 *     workload over a small region would often land by chance on one of the remembered ends and look cheap.
 *   - A request first spends cmd_us[class] in the front end (command decode, transfer, host-side stack). Front
 *     ends of different requests overlap: this is what lets a second outstanding request hide part of the
 *     first one's time, and it is the source of the concurrency speedup of a device without a command queue.
 *   - Then it needs the media: page_us[class] per 4 KiB page on one of `units` parallel units. The media is
 *     first come, first served in arrival order: the schedule of each request is fixed when it arrives, so a
 *     read that arrives behind writes waits for them.
 *   - Writes go through a write cache of `write_cache` 4 KiB pages: a write completes to the host as soon as its
 *     front end is done and its pages fit in the cache; the media programs it afterwards, and its pages are
 *     freed when that programming ends. Writes larger than the cache, FUA writes, and all writes when
 *     write_cache=0 complete when programmed. A flush waits until every accepted write is programmed, then
 *     costs flush_us on all units.
 *
 * The data itself is read and written by the plugin immediately; the filter then sleeps to the request's
 * completion deadline with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), so oversleep does not accumulate.
 * With flash-log=FILE every request is logged (arrival, media start, media finish, completion deadline and the
 * actual return time, ns since the filter loaded) as ground truth for tests and calibration.
 */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-filter.h>

#define FD_PAGE		4096
#define FD_MAX_UNITS	64	/* parallel units */
#define FD_MAX_CACHE	4096	/* write cache pages */
#define FD_STREAMS	8	/* stream ends remembered per direction for sequential detection */

enum fd_class { FD_SEQ_READ, FD_SEQ_WRITE, FD_RAND_READ, FD_RAND_WRITE, FD_NCLASS };
static const char *const fd_class_name[FD_NCLASS] = { "seq_read", "seq_write", "rand_read", "rand_write" };

/* Configuration, in ns once parsed. */
static int64_t fd_cmd_ns[FD_NCLASS];	/* front-end time per request */
static int64_t fd_page_ns[FD_NCLASS];	/* media time per 4 KiB page */
static int fd_units = 1;		/* parallel media units */
static int fd_write_cache;		/* write cache size in 4 KiB pages; 0 = write-through */
static int64_t fd_flush_ns;		/* media time of a flush, after the cache drained */
static int64_t fd_trim_ns;		/* front-end time of a trim (no media time) */
static const char *fd_log_path;

/* Device state, under fd_lock. */
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t fd_unit_free[FD_MAX_UNITS];	/* when each unit becomes free */
struct fd_cached { int64_t done; int64_t pages; };	/* a write in the cache: programmed at .done */
static struct fd_cached fd_cache[FD_MAX_CACHE];
static int fd_ncached;
static int64_t fd_last_program_end;		/* latest programming end of any accepted write */
static uint64_t fd_stream_end[2][FD_STREAMS];	/* [0] reads, [1] writes */
static bool fd_stream_established[2][FD_STREAMS];	/* continued at least once */
static int fd_stream_next[2];
static uint64_t fd_seqno;

static pthread_mutex_t fd_log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *fd_log;
static int64_t fd_t0;

static int64_t
fd_now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Sleep until the absolute CLOCK_MONOTONIC time t (ns); EINTR resumes the same deadline. */
static void
fd_sleep_until (int64_t t)
{
  struct timespec ts = { .tv_sec = t / 1000000000, .tv_nsec = t % 1000000000 };

  while (clock_nanosleep (CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
    ;
}

static int64_t
fd_max (int64_t a, int64_t b)
{
  return a > b ? a : b;
}

/* Parses "a,b,c,d" (microseconds, >= 0) into four ns values. */
static int
fd_parse_four (const char *key, const char *value, int64_t out[FD_NCLASS])
{
  const char *p = value;
  char *end;
  int i;

  for (i = 0; i < FD_NCLASS; i++) {
    double us = strtod (p, &end);

    if (end == p || !isfinite (us) || us < 0 || us > 1e9) {
      nbdkit_error ("%s=%s: expected four non-negative microsecond values "
                    "(seq_read,seq_write,rand_read,rand_write)", key, value);
      return -1;
    }
    out[i] = (int64_t) llround (us * 1000.0);
    if (i < FD_NCLASS - 1) {
      if (*end != ',') {
        nbdkit_error ("%s=%s: expected four comma-separated values", key, value);
        return -1;
      }
      p = end + 1;
    }
  }
  if (*end != '\0') {
    nbdkit_error ("%s=%s: trailing characters", key, value);
    return -1;
  }
  return 0;
}

static int
fd_parse_us (const char *key, const char *value, int64_t *out)
{
  char *end;
  double us = strtod (value, &end);

  if (end == value || *end != '\0' || !isfinite (us) || us < 0 || us > 1e9) {
    nbdkit_error ("%s=%s: expected a non-negative number of microseconds", key, value);
    return -1;
  }
  *out = (int64_t) llround (us * 1000.0);
  return 0;
}

static int
fd_config (nbdkit_next_config *next, nbdkit_backend *nxdata, const char *key, const char *value)
{
  if (strcmp (key, "flash-cmd-us") == 0)
    return fd_parse_four (key, value, fd_cmd_ns);
  if (strcmp (key, "flash-page-us") == 0)
    return fd_parse_four (key, value, fd_page_ns);
  if (strcmp (key, "flash-flush-us") == 0)
    return fd_parse_us (key, value, &fd_flush_ns);
  if (strcmp (key, "flash-trim-us") == 0)
    return fd_parse_us (key, value, &fd_trim_ns);
  if (strcmp (key, "flash-units") == 0) {
    if (nbdkit_parse_int (key, value, &fd_units) == -1)
      return -1;
    if (fd_units < 1 || fd_units > FD_MAX_UNITS) {
      nbdkit_error ("flash-units=%s: must be 1..%d", value, FD_MAX_UNITS);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "flash-write-cache") == 0) {
    if (nbdkit_parse_int (key, value, &fd_write_cache) == -1)
      return -1;
    if (fd_write_cache < 0 || fd_write_cache > FD_MAX_CACHE) {
      nbdkit_error ("flash-write-cache=%s: must be 0..%d pages", value, FD_MAX_CACHE);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "flash-log") == 0) {
    fd_log_path = value;
    return 0;
  }
  return next (nxdata, key, value);
}

#define fd_config_help \
  "flash-cmd-us=SR,SW,RR,RW  front-end time per request (us) for seq/rand read/write\n" \
  "flash-page-us=SR,SW,RR,RW media time per 4 KiB page (us)\n" \
  "flash-units=N             parallel media units (default 1)\n" \
  "flash-write-cache=N       write cache size in 4 KiB pages, 0 = write-through (default 0)\n" \
  "flash-flush-us=US         media time of a flush after the cache drained\n" \
  "flash-trim-us=US          time of a trim\n" \
  "flash-log=FILE            log every request's timing (CSV)"

static int
fd_get_ready (int thread_model)
{
  int i;

  fd_t0 = fd_now ();
  for (i = 0; i < FD_MAX_UNITS; i++)
    fd_unit_free[i] = 0;
  for (i = 0; i < 2; i++)
    memset (fd_stream_end[i], 0xff, sizeof fd_stream_end[i]);	/* no stream yet */
  if (fd_log_path) {
    fd_log = fopen (fd_log_path, "w");
    if (!fd_log) {
      nbdkit_error ("flash-log=%s: %m", fd_log_path);
      return -1;
    }
    fprintf (fd_log, "seq,op,class,offset,bytes,arrival_ns,start_ns,finish_ns,complete_ns,returned_ns\n");
    fflush (fd_log);
  }
  return 0;
}

static void
fd_unload (void)
{
  if (fd_log)
    fclose (fd_log);
}

/* Sequential if offset continues an established recent stream of this direction. Caller holds fd_lock. */
static bool
fd_is_sequential (int dir, uint64_t offset, uint64_t end)
{
  int i;

  for (i = 0; i < FD_STREAMS; i++) {
    if (fd_stream_end[dir][i] == offset) {
      bool established = fd_stream_established[dir][i];

      fd_stream_end[dir][i] = end;
      fd_stream_established[dir][i] = true;
      return established;
    }
  }
  fd_stream_end[dir][fd_stream_next[dir]] = end;
  fd_stream_established[dir][fd_stream_next[dir]] = false;
  fd_stream_next[dir] = (fd_stream_next[dir] + 1) % FD_STREAMS;
  return false;
}

/* The unit that becomes free first. Caller holds fd_lock. */
static int
fd_first_free_unit (void)
{
  int i, best = 0;

  for (i = 1; i < fd_units; i++)
    if (fd_unit_free[i] < fd_unit_free[best])
      best = i;
  return best;
}

/* The earliest time >= ready at which `pages` more pages fit in the write cache; forgets the writes programmed
 * by then. Caller holds fd_lock and has checked pages <= fd_write_cache.
 */
static int64_t
fd_cache_accept (int64_t ready, int64_t pages)
{
  int64_t t = ready;
  int i, n;

  for (;;) {
    int64_t used = 0, next = INT64_MAX;

    for (i = 0; i < fd_ncached; i++) {
      if (fd_cache[i].done > t) {
        used += fd_cache[i].pages;
        if (fd_cache[i].done < next)
          next = fd_cache[i].done;
      }
    }
    if (used + pages <= fd_write_cache)
      break;
    t = next;	/* wait for the next write to be programmed */
  }
  for (i = n = 0; i < fd_ncached; i++)
    if (fd_cache[i].done > t)
      fd_cache[n++] = fd_cache[i];
  fd_ncached = n;
  return t;
}

struct fd_plan {
  uint64_t seqno;
  int cls;		/* enum fd_class, or -1 for flush/trim */
  int64_t arrival, start, finish, complete;
};

/* Fixes the schedule of a read or write arriving now. FCFS: the media slot is reserved here, in arrival
 * order, so later arrivals queue behind it whatever their class.
 */
static struct fd_plan
fd_plan_rw (bool write, uint64_t offset, uint32_t count, bool fua)
{
  struct fd_plan p;
  int64_t pages = (count + FD_PAGE - 1) / FD_PAGE, ready, accept = 0;
  bool cached;
  int u;

  if (pages < 1)
    pages = 1;
  p.arrival = fd_now ();
  pthread_mutex_lock (&fd_lock);
  p.seqno = fd_seqno++;
  if (fd_is_sequential (write, offset, offset + count))
    p.cls = write ? FD_SEQ_WRITE : FD_SEQ_READ;
  else
    p.cls = write ? FD_RAND_WRITE : FD_RAND_READ;
  ready = p.arrival + fd_cmd_ns[p.cls];
  cached = write && !fua && pages <= fd_write_cache;
  if (cached)
    ready = accept = fd_cache_accept (ready, pages);
  u = fd_first_free_unit ();
  p.start = fd_max (ready, fd_unit_free[u]);
  p.finish = p.start + pages * fd_page_ns[p.cls];
  fd_unit_free[u] = p.finish;
  if (cached)
    fd_cache[fd_ncached++] = (struct fd_cached) { .done = p.finish, .pages = pages };
  if (write)
    fd_last_program_end = fd_max (fd_last_program_end, p.finish);
  pthread_mutex_unlock (&fd_lock);
  p.complete = cached ? accept : p.finish;
  return p;
}

/* A flush: every accepted write must be programmed, then flush_ns on all units. */
static struct fd_plan
fd_plan_flush (void)
{
  struct fd_plan p;
  int i;

  p.arrival = fd_now ();
  p.cls = -1;
  pthread_mutex_lock (&fd_lock);
  p.seqno = fd_seqno++;
  p.start = fd_max (p.arrival, fd_last_program_end);
  for (i = 0; i < fd_units; i++)
    p.start = fd_max (p.start, fd_unit_free[i]);
  p.finish = p.start + fd_flush_ns;
  for (i = 0; i < fd_units; i++)
    fd_unit_free[i] = p.finish;
  pthread_mutex_unlock (&fd_lock);
  p.complete = p.finish;
  return p;
}

static void
fd_finish (const struct fd_plan *p, const char *op, uint64_t offset, uint32_t count)
{
  int64_t returned;

  fd_sleep_until (p->complete);
  if (!fd_log)
    return;
  returned = fd_now ();
  pthread_mutex_lock (&fd_log_lock);
  fprintf (fd_log, "%" PRIu64 ",%s,%s,%" PRIu64 ",%" PRIu32 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
           ",%" PRId64 "\n", p->seqno, op, p->cls >= 0 ? fd_class_name[p->cls] : "-", offset, count,
           p->arrival - fd_t0, p->start - fd_t0, p->finish - fd_t0, p->complete - fd_t0, returned - fd_t0);
  fflush (fd_log);
  pthread_mutex_unlock (&fd_log_lock);
}

/* How the plugin below handles FUA; it is the same plugin for every connection. */
static int fd_next_fua = NBDKIT_FUA_NONE;

static int
fd_can_fua (nbdkit_next *next, void *handle)
{
  /* Ask the plugin, which also lets nbdkit accept the FUA flag on our calls to it. We then claim native FUA,
   * so that the flag reaches the model instead of nbdkit emulating it with a flush.
   */
  int r = next->can_fua (next);

  if (r == -1)
    return -1;
  fd_next_fua = r;
  return NBDKIT_FUA_NATIVE;
}

/* Flags for the plugin below: FUA is passed on only if it handles FUA; otherwise a flush follows the write. */
static uint32_t
fd_next_flags (uint32_t flags, bool *flush_after)
{
  *flush_after = (flags & NBDKIT_FLAG_FUA) && fd_next_fua == NBDKIT_FUA_NONE;
  return *flush_after ? flags & ~NBDKIT_FLAG_FUA : flags;
}

static int
fd_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count, uint64_t offset, uint32_t flags,
          int *err)
{
  struct fd_plan p = fd_plan_rw (false, offset, count, false);
  int r = next->pread (next, buf, count, offset, flags, err);

  fd_finish (&p, "read", offset, count);
  return r;
}

static int
fd_pwrite (nbdkit_next *next, void *handle, const void *buf, uint32_t count, uint64_t offset,
           uint32_t flags, int *err)
{
  struct fd_plan p = fd_plan_rw (true, offset, count, flags & NBDKIT_FLAG_FUA);
  bool flush_after;
  int r = next->pwrite (next, buf, count, offset, fd_next_flags (flags, &flush_after), err);

  if (r == 0 && flush_after)
    r = next->flush (next, 0, err);

  fd_finish (&p, (flags & NBDKIT_FLAG_FUA) ? "write_fua" : "write", offset, count);
  return r;
}

static int
fd_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  /* Zeroing is programming like a write. */
  struct fd_plan p = fd_plan_rw (true, offset, count, flags & NBDKIT_FLAG_FUA);
  bool flush_after;
  int r = next->zero (next, count, offset, fd_next_flags (flags, &flush_after), err);

  if (r == 0 && flush_after)
    r = next->flush (next, 0, err);

  fd_finish (&p, "zero", offset, count);
  return r;
}

static int
fd_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  struct fd_plan p = fd_plan_flush ();
  int r = next->flush (next, flags, err);

  fd_finish (&p, "flush", 0, 0);
  return r;
}

static int
fd_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  /* A trim only updates the mapping table: front-end time, no media time, no queueing. */
  struct fd_plan p;
  int r;

  p.arrival = fd_now ();
  p.cls = -1;
  pthread_mutex_lock (&fd_lock);
  p.seqno = fd_seqno++;
  pthread_mutex_unlock (&fd_lock);
  p.start = p.finish = p.complete = p.arrival + fd_trim_ns;
  {
    bool flush_after;

    r = next->trim (next, count, offset, fd_next_flags (flags, &flush_after), err);
    if (r == 0 && flush_after)
      r = next->flush (next, 0, err);
  }
  fd_finish (&p, "trim", offset, count);
  return r;
}



static int
fd_can_multi_conn (nbdkit_next *next, void *handle)
{
  /* One device: connections share its state, but a flush on one connection covers all writes. */
  return 1;
}

static struct nbdkit_filter filter = {
  .name = "flashdev",
  .longname = "smartio flash device timing model",
  .config = fd_config,
  .config_help = fd_config_help,
  .get_ready = fd_get_ready,
  .unload = fd_unload,
  .can_fua = fd_can_fua,
  .can_multi_conn = fd_can_multi_conn,
  .pread = fd_pread,
  .pwrite = fd_pwrite,
  .zero = fd_zero,
  .flush = fd_flush,
  .trim = fd_trim,
};

NBDKIT_REGISTER_FILTER (filter)
