// SPDX-License-Identifier: MIT
/*
 * libsmartio-sync: an LD_PRELOAD shim between the system's SQLite and libc's fsync()/fdatasync().
 *
 * SQLite's unix VFS calls fdatasync() when it was compiled with HAVE_FDATASYNC and fsync() otherwise
 * (os_unix.c: `#define fdatasync fsync`); Python cannot register a VFS, so this is how `smartio bench
 * sqlite --sync-call` chooses the call with the system library: every fsync()/fdatasync() the process makes is
 * counted as asked and issued as SMARTIO_SYNC_CALL says (fsync, fdatasync, or unset: as asked).
 *
 * With SMARTIO_SYNC_LOG=<file>, each call also appends one line (after it returns):
 *   <t_start_ns> <t_end_ns> <asked> <issued> <rc> <path> <n_extents> [<logical>:<physical>:<length> ...]
 * times in CLOCK_MONOTONIC ns (the clock of smartio's block traces), extents from FIEMAP of the synced file
 * in bytes (at most 64; none for directories), so that blocks of a file deleted later (SQLite's DELETE-mode
 * journal) can still be attributed. Paths are escaped: space -> \040.
 * The counters are printed to SMARTIO_SYNC_COUNTS=<file> at exit: "fsync <asked> fdatasync <asked> issued_fsync
 * <n> issued_fdatasync <n>"; smartio_sync_reset() zeroes them (the worker calls it after its untimed setup).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_EXTENTS 64

enum { AS_ASKED, AS_FSYNC, AS_FDATASYNC };

static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int mode = AS_ASKED;
static int log_fd = -1;
static unsigned long asked_fsync, asked_fdatasync, issued_fsync, issued_fdatasync;

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((constructor)) static void shim_init(void)
{
	const char *m = getenv("SMARTIO_SYNC_CALL");
	const char *log = getenv("SMARTIO_SYNC_LOG");

	real_fsync = dlsym(RTLD_NEXT, "fsync");
	real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
	if (m && !strcmp(m, "fsync"))
		mode = AS_FSYNC;
	else if (m && !strcmp(m, "fdatasync"))
		mode = AS_FDATASYNC;
	if (log && *log)
		log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

__attribute__((destructor)) static void shim_exit(void)
{
	const char *path = getenv("SMARTIO_SYNC_COUNTS");
	FILE *f;

	if (!path || !*path)
		return;
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "fsync %lu fdatasync %lu issued_fsync %lu issued_fdatasync %lu\n",
		asked_fsync, asked_fdatasync, issued_fsync, issued_fdatasync);
	fclose(f);
}

static void log_call(int fd, unsigned long long t0, unsigned long long t1, const char *asked,
		     const char *issued, int rc)
{
	char link[64], path[4096], esc[4096 * 4], line[sizeof(esc) + MAX_EXTENTS * 64 + 256];
	char buf[sizeof(struct fiemap) + MAX_EXTENTS * sizeof(struct fiemap_extent)];
	struct fiemap *fm = (struct fiemap *)buf;
	struct stat st;
	ssize_t n;
	size_t i, o = 0, len;
	unsigned int k, mapped = 0;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	path[n < 0 ? 0 : n] = 0;
	for (i = 0; path[i] && o < sizeof(esc) - 5; i++) {
		if (path[i] == ' ' || path[i] == '\n' || path[i] == '\\')
			o += sprintf(esc + o, "\\%03o", (unsigned char)path[i]);
		else
			esc[o++] = path[i];
	}
	esc[o] = 0;
	if (!fstat(fd, &st) && S_ISREG(st.st_mode)) {
		memset(buf, 0, sizeof(buf));
		fm->fm_start = 0;
		fm->fm_length = ~0ULL;
		fm->fm_extent_count = MAX_EXTENTS;
		if (!ioctl(fd, FS_IOC_FIEMAP, fm))
			mapped = fm->fm_mapped_extents;
	}
	len = snprintf(line, sizeof(line), "%llu %llu %s %s %d %s %u", t0, t1, asked, issued, rc,
		       *esc ? esc : "?", mapped);
	for (k = 0; k < mapped && len < sizeof(line) - 80; k++) {
		struct fiemap_extent *e = &fm->fm_extents[k];

		if (e->fe_flags & (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DATA_INLINE))
			continue;
		len += snprintf(line + len, sizeof(line) - len, " %llu:%llu:%llu",
				(unsigned long long)e->fe_logical, (unsigned long long)e->fe_physical,
				(unsigned long long)e->fe_length);
	}
	line[len++] = '\n';
	(void)!write(log_fd, line, len);
}

static int do_sync(int fd, int datasync)
{
	int issue_data = mode == AS_ASKED ? datasync : mode == AS_FDATASYNC;
	unsigned long long t0 = now_ns(), t1;
	int rc, saved;

	if (datasync)
		__atomic_add_fetch(&asked_fdatasync, 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(&asked_fsync, 1, __ATOMIC_RELAXED);
	if (issue_data) {
		__atomic_add_fetch(&issued_fdatasync, 1, __ATOMIC_RELAXED);
		rc = real_fdatasync(fd);
	} else {
		__atomic_add_fetch(&issued_fsync, 1, __ATOMIC_RELAXED);
		rc = real_fsync(fd);
	}
	saved = errno;
	t1 = now_ns();
	if (log_fd >= 0)
		log_call(fd, t0, t1, datasync ? "fdatasync" : "fsync", issue_data ? "fdatasync" : "fsync", rc);
	errno = saved;
	return rc;
}

/* Called by the worker (through ctypes) once its untimed setup is done, so the counts cover the timed part. */
void smartio_sync_reset(void)
{
	asked_fsync = asked_fdatasync = issued_fsync = issued_fdatasync = 0;
}

int fsync(int fd)
{
	return do_sync(fd, 0);
}

int fdatasync(int fd)
{
	return do_sync(fd, 1);
}
