/* tmpdir: private temporary directories for tests, removed recursively afterwards. */
#ifndef DD_TEST_TMPDIR_H
#define DD_TEST_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int
tmpdir_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void) sb;
    (void) flag;
    (void) ftw;
    return remove(path);
}

/* Fills buf (>= 64 bytes) with a new empty directory's path; returns buf or NULL. */
static inline char *
tmpdir_new(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/dedupd-test-XXXXXX");
    return mkdtemp(buf);
}

static inline void
tmpdir_rm(const char *path)
{
    nftw(path, tmpdir_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
