/* Tests server/util/threadname.c: the name the kernel reports for the calling thread. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/threadname.h"

struct named {
    const char *suffix;
    char comm[64];
};

/* What /proc says the calling thread is called, without the trailing newline. */
static void
read_own_comm(char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/thread-self/comm", "r");
    if (!f)
        return;
    if (fgets(out, (int) cap, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

static void *
name_and_read(void *arg)
{
    struct named *n = arg;
    threadname_set("%s", n->suffix);
    read_own_comm(n->comm, sizeof(n->comm));
    return NULL;
}

static void
check(const char *suffix, const char *want)
{
    struct named n = {.suffix = suffix};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, name_and_read, &n), 0);
    pthread_join(t, NULL);
    cr_assert_str_eq(n.comm, want);
}

Test(threadname, prefixed)
{
    check("loop3", "dedupd-loop3");
}

/* The kernel keeps 15 bytes; a longer name must be cut, not refused (pthread_setname_np
 * fails with ERANGE and leaves the old name). */
Test(threadname, long_names_are_cut)
{
    check("compact-and-more", "dedupd-compact-");
}

/* Criterion runs each test in its own process, so renaming this thread touches no other. */
Test(threadname, formatted)
{
    threadname_set("w%u", 42u);
    char comm[64];
    read_own_comm(comm, sizeof(comm));
    cr_assert_str_eq(comm, "dedupd-w42");
}
