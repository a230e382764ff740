/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Which callers of folio_wait_writeback() wait for an integrity sync (fsync,
 * sync_file_range WAIT, WB_SYNC_ALL writeback): their waits are D_sync, any
 * other is D_data. Plain C on purpose: the host's tests compile this file as
 * it is (tests/test_module_source.py) and feed it the names kallsyms gives.
 */
#ifndef SIO_CALLERS_H
#define SIO_CALLERS_H

static const char *const sio_sync_callers[] = {
	"__filemap_fdatawait_range",	/* fsync, fdatasync, sync_file_range */
	"wait_on_page_writeback",	/* ... on 6.1 it mostly comes from there */
	"write_cache_pages",		/* WB_SYNC_ALL writeback */
	"mpage_prepare_extent_to_map",	/* ext4's WB_SYNC_ALL writeback */
	"writeback_iter",		/* 6.10+: write_cache_pages() and filesystems' */
	"writeback_get_folio",		/* ... WB_SYNC_ALL waits, if not inlined */
	"folio_prepare_writeback",
};

/*
 * @name is what sprint_symbol_no_offset() wrote; it is cut, in place, to the
 * function's own name: without the " [ext4]" kallsyms appends when the caller
 * is in a module, nor the suffixes of the compiler's clones and of LTO's
 * promoted statics (".isra.0", ".constprop.0", ".llvm.123", ".lto_priv.0").
 * A caller inlined into another function is known by that function's name.
 */
static inline bool sio_sync_caller(char *name)
{
	unsigned int i;

	name[strcspn(name, " .")] = '\0';
	for (i = 0; i < sizeof(sio_sync_callers) / sizeof(sio_sync_callers[0]); i++)
		if (!strcmp(name, sio_sync_callers[i]))
			return true;
	return false;
}

#endif /* SIO_CALLERS_H */
