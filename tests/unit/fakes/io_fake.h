/* io_fake: an in-memory stand-in for store/io.c that behaves like a disk with a volatile
 * write cache. Every write lands in the file's current contents and is remembered as
 * unsynced; fdatasync makes the file's contents durable; fsync of a directory makes the
 * names of its files durable. io_fake_power_cut() then rebuilds every file from its durable
 * contents plus a seeded random choice, per unsynced write, of applied / dropped / torn
 * (a random prefix), and forgets files whose names were never made durable (sometimes).
 * Directories, the lock file and anything outside the fake's files go to the real system.
 * Single-threaded use only (the store tests run the store from one thread). */
#ifndef DD_TEST_IO_FAKE_H
#define DD_TEST_IO_FAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "store/io.h"

/* Installs the fake (store_io_set) with no files. */
void io_fake_install(void);
/* Restores the real ops and frees every fake file. */
void io_fake_uninstall(void);
/* While on, every operation fails with -EIO (the machine is off). */
void io_fake_fail_all(bool on);
/* The next n fdatasync calls fail with -EIO and, as Linux does after a failed write-back,
 * forget the file's unsynced writes: they stay readable but no later sync makes them
 * durable, and a power cut loses them. */
void io_fake_fail_syncs(unsigned n);
/* Loses the volatile cache as described above; returns the number of unsynced writes that
 * were dropped or torn. */
unsigned io_fake_power_cut(uint64_t seed);
/* Bytes of unsynced writes currently held. */
uint64_t io_fake_unsynced_bytes(void);
/* Bytes the store has read through the fake since it was first installed. */
uint64_t io_fake_bytes_read(void);

#endif
