/* SPDX-License-Identifier: GPL-2.0-only
 *
 * flashdev: an nbdkit filter that makes the plugin below it (memory) behave like a phone's flash device in time.
 *
 * The device is an eMMC 5.0 without a command queue (Samsung Galaxy S5, seed 000), seen as four parts. All times
 * are microseconds of the real device, multiplied by the profile's time scale by the caller:
 *
 *   - Classes. Every request is classified by direction and pattern: sequential when it continues an
 *     established recent stream of its direction (FD_STREAMS stream ends are remembered; a stream is
 *     established once it has been continued, so random I/O over a small region does not look sequential).
 *   - Front end, cmd_us[class]: the host's and the card's per-command work (the phone's I/O stack, command,
 *     data transfer). Front ends overlap each other and the flash: the host prepares the next request while the
 *     card executes the current one. With the guest's queue depth of 2 this is where Figure 7's speedups come
 *     from: a second outstanding request hides the first one's front end behind the flash time.
 *   - Write buffer, write_cache_pages 4 KiB slots. A write completes to the host once its front end is done and it
 *     has a place in the buffer; the flash programs it afterwards. A random write takes nand_page_slots slots (it
 *     fills a whole NAND page buffer on its own), a sequential write one. FUA writes and writes larger than the
 *     buffer complete when programmed.
 *   - One flash die, page_us[class] per 4 KiB page (a request's first page; the rest of it at its direction's
 *     sequential page_us: fd_pages_ns). Reads go before programming: a read suspends the program under
 *     way (which resumes afterwards, suspend_us later), unless the buffer is full when the read is ready. Then the
 *     firmware must make room first: the read waits until everything buffered at that moment is programmed, and
 *     the program that follows that read costs switch_us[class] more (the firmware closed the open block to serve
 *     the read and reopens it). A suspended program resumes without it, and back-to-back programs never pay it, so a
 *     writer alone never does.
 *
 * Why this shape (the numbers are in flashdev/profiles.toml and src/smartio/flashdev/model.py):
 *   - A read that waits for the full buffer and then for the program after-switch is what makes a reader beside a
 *     writer slow (Figure 4b: 6.15 seq, 3.18 rand) while the writer keeps most of its speed (1.13, 1.6): the writer
 *     refills the buffer while the read waits, so it gets more turns than the reader, which a device that simply
 *     alternated could not give (its slowdown ratio would be the alone-latency ratio, 2.6).
 *   - The same reads going first, suspending programs, are what lets a read-first scheduler that keeps the buffer
 *     from filling (releases writes no faster than the die programs them between reads, and briefly holds reads
 *     after a write) reach Figure 11a's SmartIO point (1.72 / 1.51 seq): the writer's front ends overlap the reads,
 *     and no switch is paid.
 *   - Flushes wait until the buffer is empty, then take flush_us of the die. Trims take trim_us, no die time.
 *
 * The model is a discrete-event simulation in virtual time, advanced lazily: each request thread, under fd_lock,
 * processes every event that is due, sleeps to the next one, and once its own completion is known sleeps to it,
 * all with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), so wake-up latency never accumulates. With flash-log=FILE every
 * request is logged (arrival, die start, die finish, completion deadline and the actual return time, ns since
 * the filter loaded) as ground truth for tests and for src/smartio/flashdev/model.py.
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
#define FD_MAX_CACHE	4096	/* write buffer slots */
#define FD_STREAMS	8	/* stream ends remembered per direction for sequential detection */
#define FD_NEVER	INT64_MAX

enum fd_class { FD_SEQ_READ, FD_SEQ_WRITE, FD_RAND_READ, FD_RAND_WRITE, FD_NCLASS };
static const char *const fd_class_name[FD_NCLASS] = { "seq_read", "seq_write", "rand_read", "rand_write" };

/* Configuration, in ns once parsed. */
static int64_t fd_cmd_ns[FD_NCLASS];	/* front-end time per request */
static int64_t fd_page_ns[FD_NCLASS];	/* die time per 4 KiB page */
static int64_t fd_switch_ns[FD_NCLASS];	/* extra die time of a program that follows a read */
static int64_t fd_suspend_ns;		/* added to a program each time a read suspends it */
static int fd_write_cache;		/* write buffer slots (4 KiB); 0 = write-through */
static int fd_nand_page_slots = 1;	/* slots a random write takes */
static int64_t fd_flush_ns;		/* die time of a flush, after the buffer drained */
static int64_t fd_trim_ns;		/* time of a trim (no die time) */
static const char *fd_log_path;

enum fd_kind { FD_READ, FD_WRITE, FD_FLUSH };

/* One request. Allocated by its nbdkit thread; a buffered write outlives the thread's call (the host has its
 * completion before the die programs it), so whoever finishes last, the thread or the program, logs and frees it.
 */
struct fd_req {
  uint64_t seqno;
  const char *op;		/* for the log */
  uint64_t offset;
  uint32_t count;
  int64_t returned;		/* when the thread returned to nbdkit; -1 until then */
  enum fd_kind kind;
  int cls;			/* enum fd_class, or -1 for flush/trim */
  int64_t pages, slots;		/* 4 KiB pages; buffer slots it takes */
  bool through;			/* write that completes when programmed */
  int64_t arrival, ready;	/* ready = arrival + front end */
  int64_t start, finish;	/* first and last die time (reads, programs, flush) */
  int64_t complete;		/* when the host sees it done; FD_NEVER until known */
  int64_t remaining;		/* programs: die time still needed */
  bool started;			/* programs: has had die time (switch cost paid or not due) */
  int barrier;			/* reads: buffered programs that must finish first */
  bool waited;			/* reads: found the buffer full */
  struct fd_req *next;		/* in whichever list holds it */
};

/* Device state, under fd_lock. Lists are FIFO, linked through fd_req.next. */
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t fd_vnow;			/* virtual time processed so far */
static struct fd_req *fd_front;		/* in their front end, by ready time */
static struct fd_req *fd_reads;		/* ready reads waiting for the die */
static struct fd_req *fd_writes;	/* ready writes waiting for buffer room */
static struct fd_req *fd_buffer;	/* programs not yet finished, in order */
static struct fd_req *fd_flushes;	/* flushes waiting for the buffer to drain */
static int64_t fd_buffer_used;		/* slots held by fd_buffer */
static struct fd_req *fd_die_op;	/* on the die, or NULL */
static int64_t fd_die_end;		/* when fd_die_op's current stint ends */
static int64_t fd_die_began;		/* when that stint began */
static bool fd_after_wait;		/* the die's last op was a read that found the buffer full */
static uint64_t fd_stream_end[2][FD_STREAMS];	/* [0] reads, [1] writes */
static bool fd_stream_established[2][FD_STREAMS];
static int fd_stream_next[2];
static uint64_t fd_seqno;

static FILE *fd_log;
static int64_t fd_t0;

static int64_t
fd_now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec
fd_ts (int64_t t)
{
  return (struct timespec) { .tv_sec = t / 1000000000, .tv_nsec = t % 1000000000 };
}

/* Sleep until the absolute CLOCK_MONOTONIC time t (ns); EINTR resumes the same deadline. */
static void
fd_sleep_until (int64_t t)
{
  struct timespec ts = fd_ts (t);

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
fd_parse_range (const char *key, const char *value, int *out, int lo, int hi)
{
  if (nbdkit_parse_int (key, value, out) == -1)
    return -1;
  if (*out < lo || *out > hi) {
    nbdkit_error ("%s=%s: must be %d..%d", key, value, lo, hi);
    return -1;
  }
  return 0;
}

static int
fd_config (nbdkit_next_config *next, nbdkit_backend *nxdata, const char *key, const char *value)
{
  if (strcmp (key, "flash-cmd-us") == 0)
    return fd_parse_four (key, value, fd_cmd_ns);
  if (strcmp (key, "flash-page-us") == 0)
    return fd_parse_four (key, value, fd_page_ns);
  if (strcmp (key, "flash-switch-us") == 0)
    return fd_parse_four (key, value, fd_switch_ns);
  if (strcmp (key, "flash-suspend-us") == 0)
    return fd_parse_us (key, value, &fd_suspend_ns);
  if (strcmp (key, "flash-flush-us") == 0)
    return fd_parse_us (key, value, &fd_flush_ns);
  if (strcmp (key, "flash-trim-us") == 0)
    return fd_parse_us (key, value, &fd_trim_ns);
  if (strcmp (key, "flash-write-cache") == 0)
    return fd_parse_range (key, value, &fd_write_cache, 0, FD_MAX_CACHE);
  if (strcmp (key, "flash-nand-page-slots") == 0)
    return fd_parse_range (key, value, &fd_nand_page_slots, 1, FD_MAX_CACHE);
  if (strcmp (key, "flash-log") == 0) {
    fd_log_path = value;
    return 0;
  }
  return next (nxdata, key, value);
}

#define fd_config_help \
  "flash-cmd-us=SR,SW,RR,RW    front-end time per request (us) for seq/rand read/write\n" \
  "flash-page-us=SR,SW,RR,RW   die time per 4 KiB page (us)\n" \
  "flash-switch-us=SR,SW,RR,RW extra die time of a program that follows a read (us; read entries unused)\n" \
  "flash-suspend-us=US         added to a program each time a read suspends it\n" \
  "flash-write-cache=N         write buffer in 4 KiB slots, 0 = write-through (default 0)\n" \
  "flash-nand-page-slots=N     slots a random write takes (default 1)\n" \
  "flash-flush-us=US           die time of a flush after the buffer drained\n" \
  "flash-trim-us=US            time of a trim\n" \
  "flash-log=FILE              log every request's timing (CSV)"

static int
fd_get_ready (int thread_model)
{
  int i;

  fd_t0 = fd_vnow = fd_now ();
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

/* Die time of a request's pages: its class's for the first, the sequential class's of its direction for the rest.
 * A request is one command over contiguous sectors, which the card reads or programs in a pipeline however the
 * request began; the profile's per-page times were measured with 4 KiB requests, where the class's time is all
 * there is. Charging a 128 KiB request that opens a stream 32 random pages made one merged read cost 2.5 times a
 * stream's, and a run's time depend on whether its first reads merged. */
static int64_t
fd_pages_ns (int cls, int64_t pages)
{
  int seq = cls == FD_SEQ_WRITE || cls == FD_RAND_WRITE ? FD_SEQ_WRITE : FD_SEQ_READ;

  return fd_page_ns[cls] + (pages - 1) * fd_page_ns[seq];
}

static void
fd_append (struct fd_req **list, struct fd_req *r)
{
  r->next = NULL;
  while (*list)
    list = &(*list)->next;
  *list = r;
}

static struct fd_req *
fd_pop (struct fd_req **list)
{
  struct fd_req *r = *list;

  *list = r->next;
  r->next = NULL;
  return r;
}

/* Writes r's log line. Caller holds fd_lock. */
static void
fd_log_req (const struct fd_req *r)
{
  if (!fd_log)
    return;
  fprintf (fd_log, "%" PRIu64 ",%s,%s,%" PRIu64 ",%" PRIu32 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64
           ",%" PRId64 "\n", r->seqno, r->op, r->cls >= 0 ? fd_class_name[r->cls] : "-", r->offset, r->count,
           r->arrival - fd_t0, r->start - fd_t0, r->finish - fd_t0, r->complete - fd_t0, r->returned - fd_t0);
  fflush (fd_log);
}

/* Puts r on the die from fd_vnow for its (remaining) time. Caller holds fd_lock. */
static void
fd_die_run (struct fd_req *r)
{
  int64_t d;

  if (r->kind == FD_READ)
    d = fd_pages_ns (r->cls, r->pages);
  else if (r->kind == FD_FLUSH)
    d = fd_flush_ns;
  else {
    d = r->remaining;
    if (!r->started) {
      if (fd_after_wait)
        d += fd_switch_ns[r->cls];
      r->start = fd_vnow;
      r->started = true;
    }
  }
  if (r->kind != FD_WRITE)
    r->start = fd_vnow;
  fd_die_op = r;
  fd_die_began = fd_vnow;
  fd_die_end = fd_vnow + d;
}

/* The die is idle at fd_vnow: a read that need not wait goes first, then a flush whose buffer drained, then the
 * oldest buffered program. Caller holds fd_lock.
 */
static void
fd_die_pick (void)
{
  if (fd_die_op)
    return;
  if (fd_reads && fd_reads->barrier == 0)
    fd_die_run (fd_pop (&fd_reads));
  else if (fd_flushes && !fd_buffer)
    fd_die_run (fd_pop (&fd_flushes));
  else if (fd_buffer)
    fd_die_run (fd_buffer);
}

/* A read that need not wait suspends the program on the die. Caller holds fd_lock. */
static void
fd_die_preempt (void)
{
  struct fd_req *p = fd_die_op;

  if (!p || p->kind != FD_WRITE || !fd_reads || fd_reads->barrier != 0)
    return;
  p->remaining = fd_die_end - fd_vnow + fd_suspend_ns;
  fd_die_op = NULL;
  fd_die_pick ();
}

/* Writes waiting for room take it in order. Caller holds fd_lock. */
static void
fd_buffer_admit (void)
{
  while (fd_writes && fd_buffer_used + fd_writes->slots <= fd_write_cache) {
    struct fd_req *w = fd_pop (&fd_writes);

    w->remaining = fd_pages_ns (w->cls, w->pages);
    w->started = false;
    fd_buffer_used += w->slots;
    fd_append (&fd_buffer, w);
    if (!w->through)
      w->complete = fd_vnow;
  }
}

static void
fd_ready (struct fd_req *r)
{
  if (r->kind == FD_WRITE) {
    fd_append (&fd_writes, r);
    fd_buffer_admit ();
  }
  else if (r->kind == FD_READ) {
    r->barrier = 0;
    if (fd_buffer && fd_buffer_used >= fd_write_cache) {
      struct fd_req *p;

      for (p = fd_buffer; p; p = p->next)
        r->barrier++;
    }
    r->waited = r->barrier > 0;
    fd_append (&fd_reads, r);
  }
  else
    fd_append (&fd_flushes, r);
  fd_die_pick ();
  fd_die_preempt ();
}

static void
fd_die_done (void)
{
  struct fd_req *r = fd_die_op, *q;

  fd_die_op = NULL;
  r->finish = fd_vnow;
  fd_after_wait = r->kind == FD_READ && r->waited;
  if (r->kind == FD_WRITE) {
    fd_pop (&fd_buffer);
    fd_buffer_used -= r->slots;
    if (r->through)
      r->complete = fd_vnow;
    for (q = fd_reads; q; q = q->next)
      if (q->barrier > 0)
        q->barrier--;
    if (r->returned >= 0) {
      fd_log_req (r);
      free (r);
    }
    fd_buffer_admit ();
  }
  else
    r->complete = fd_vnow;
  fd_die_pick ();
}

/* Processes every event up to time `until`, in time order. Caller holds fd_lock. */
static void
fd_advance (int64_t until)
{
  for (;;) {
    int64_t t = fd_die_op ? fd_die_end : FD_NEVER;

    if (fd_front && fd_front->ready < t)
      t = fd_front->ready;
    if (t > until)
      break;
    fd_vnow = fd_max (fd_vnow, t);
    if (fd_die_op && fd_die_end == t)
      fd_die_done ();
    else
      fd_ready (fd_pop (&fd_front));
  }
  fd_vnow = fd_max (fd_vnow, until);
}

/* The next time the model changes, or FD_NEVER. Caller holds fd_lock. */
static int64_t
fd_next_event (void)
{
  int64_t t = fd_die_op ? fd_die_end : FD_NEVER;

  if (fd_front && fd_front->ready < t)
    t = fd_front->ready;
  return t;
}

/* Runs a request through the model and returns once the host may see it done. */
static void
fd_submit (struct fd_req *r)
{
  struct fd_req **p;

  r->arrival = fd_now ();
  r->complete = FD_NEVER;
  r->start = r->finish = -1;
  pthread_mutex_lock (&fd_lock);
  fd_advance (r->arrival);
  r->seqno = fd_seqno++;
  r->ready = fd_max (r->arrival + (r->cls >= 0 ? fd_cmd_ns[r->cls] : 0), fd_vnow);
  for (p = &fd_front; *p && (*p)->ready <= r->ready; p = &(*p)->next)
    ;
  r->next = *p;
  *p = r;
  /* Every thread waiting here sleeps until the model's next event as it stands, then processes what is due. An
   * event added later is either the arriving request's own (its thread is awake) or lies after the event being
   * processed, which every sleeper wakes for; so each event is processed on time by some thread. Sleeps are
   * clock_nanosleep to absolute times: timed condition waits overslept by milliseconds here.
   */
  while (r->complete == FD_NEVER) {
    int64_t t = fd_next_event ();

    if (t <= fd_now ()) {
      fd_advance (t);
      continue;
    }
    pthread_mutex_unlock (&fd_lock);
    fd_sleep_until (t == FD_NEVER ? fd_now () + 1000000 : t);
    pthread_mutex_lock (&fd_lock);
  }
  pthread_mutex_unlock (&fd_lock);
  fd_sleep_until (r->complete);
}

/* Classifies a read or write and sizes it. */
static void
fd_rw_init (struct fd_req *r, bool fua)
{
  bool write = r->kind == FD_WRITE, seq;

  r->pages = (r->count + FD_PAGE - 1) / FD_PAGE;
  if (r->pages < 1)
    r->pages = 1;
  pthread_mutex_lock (&fd_lock);
  seq = fd_is_sequential (write, r->offset, r->offset + r->count);
  pthread_mutex_unlock (&fd_lock);
  r->cls = write ? (seq ? FD_SEQ_WRITE : FD_RAND_WRITE) : (seq ? FD_SEQ_READ : FD_RAND_READ);
  if (write) {
    r->slots = seq ? r->pages : fd_max (r->pages, fd_nand_page_slots);
    r->through = fua || r->slots > fd_write_cache;
    if (r->slots > fd_write_cache)
      r->slots = fd_write_cache;	/* write-through: it holds the whole buffer while it programs */
  }
}

/* A write still waiting to be programmed is released by fd_die_done. Caller holds fd_lock. */
static bool
fd_in_model (const struct fd_req *r)
{
  return r->kind == FD_WRITE && r->finish < 0;
}

/* The thread is done with r: log and free it unless its program is still to come. */
static void
fd_release (struct fd_req *r)
{
  int64_t returned = fd_now ();

  pthread_mutex_lock (&fd_lock);
  r->returned = returned;
  if (!fd_in_model (r)) {
    fd_log_req (r);
    free (r);
  }
  pthread_mutex_unlock (&fd_lock);
}

static struct fd_req *
fd_new_req (enum fd_kind kind, const char *op, uint64_t offset, uint32_t count, int *err)
{
  struct fd_req *r = calloc (1, sizeof *r);

  if (!r) {
    *err = ENOMEM;
    nbdkit_error ("flashdev: out of memory");
    return NULL;
  }
  r->kind = kind;
  r->op = op;
  r->offset = offset;
  r->count = count;
  r->cls = -1;
  r->returned = -1;
  return r;
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

/* Runs one read, write or flush through the model; `io` is the plugin call, made first. */
#define FD_RUN(kind, op, offset, count, fua, io) \
  do { \
    struct fd_req *q = fd_new_req ((kind), (op), (offset), (count), err); \
    int r; \
    \
    if (!q) \
      return -1; \
    if ((kind) != FD_FLUSH) \
      fd_rw_init (q, (fua)); \
    r = (io); \
    fd_submit (q); \
    fd_release (q); \
    return r; \
  } while (0)

static int
fd_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count, uint64_t offset, uint32_t flags,
          int *err)
{
  FD_RUN (FD_READ, "read", offset, count, false, next->pread (next, buf, count, offset, flags, err));
}

/* A write or zero for the plugin below, with a flush after it where FUA must be emulated. */
static int
fd_write_through_plugin (nbdkit_next *next, const void *buf, uint32_t count, uint64_t offset, uint32_t flags,
                         int *err)
{
  bool flush_after;
  uint32_t f = fd_next_flags (flags, &flush_after);
  int r = buf ? next->pwrite (next, buf, count, offset, f, err) : next->zero (next, count, offset, f, err);

  if (r == 0 && flush_after)
    r = next->flush (next, 0, err);
  return r;
}

static int
fd_pwrite (nbdkit_next *next, void *handle, const void *buf, uint32_t count, uint64_t offset,
           uint32_t flags, int *err)
{
  bool fua = flags & NBDKIT_FLAG_FUA;

  FD_RUN (FD_WRITE, fua ? "write_fua" : "write", offset, count, fua,
          fd_write_through_plugin (next, buf, count, offset, flags, err));
}

static int
fd_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  /* Zeroing is programming like a write. */
  FD_RUN (FD_WRITE, "zero", offset, count, flags & NBDKIT_FLAG_FUA,
          fd_write_through_plugin (next, NULL, count, offset, flags, err));
}

static int
fd_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  FD_RUN (FD_FLUSH, "flush", 0, 0, false, next->flush (next, flags, err));
}

static int
fd_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset, uint32_t flags, int *err)
{
  /* A trim only updates the mapping table: trim_us, no die time, no queueing. */
  struct fd_req *q = fd_new_req (FD_FLUSH, "trim", offset, count, err);
  bool flush_after;
  int r;

  if (!q)
    return -1;
  q->arrival = fd_now ();
  pthread_mutex_lock (&fd_lock);
  q->seqno = fd_seqno++;
  pthread_mutex_unlock (&fd_lock);
  q->start = q->finish = q->complete = q->arrival + fd_trim_ns;
  r = next->trim (next, count, offset, fd_next_flags (flags, &flush_after), err);
  if (r == 0 && flush_after)
    r = next->flush (next, 0, err);
  fd_sleep_until (q->complete);
  fd_release (q);
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
