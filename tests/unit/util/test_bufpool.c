/* Tests server/util/bufpool.c: reuse last in, first out per size, the idle cap, sizes
 * that are not pooled, trim. Leaks show under LeakSanitizer/valgrind (every path frees). */
#include <criterion/criterion.h>
#include <string.h>

#include "util/bufpool.h"

Test(bufpool, reuses_the_last_buffer_put_back)
{
    struct bufpool *p = bufpool_new(1 << 20);
    cr_assert_not_null(p);
    void *a = bufpool_get(p, 256 << 10);
    void *b = bufpool_get(p, 256 << 10);
    cr_assert(a && b && a != b);
    memset(a, 0xa5, 256 << 10); /* the whole length is usable */
    bufpool_put(p, a, 256 << 10);
    bufpool_put(p, b, 256 << 10);
    struct bufpool_stats st;
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.idle_bytes, 512u << 10);
    cr_assert_eq(bufpool_get(p, 256 << 10), b, "last in, first out");
    cr_assert_eq(bufpool_get(p, 256 << 10), a);
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.hits, 2);
    cr_assert_eq(st.misses, 2);
    cr_assert_eq(st.idle_bytes, 0);
    bufpool_put(p, a, 256 << 10);
    bufpool_put(p, b, 256 << 10);
    bufpool_destroy(p);
}

Test(bufpool, sizes_share_a_power_of_two_class)
{
    struct bufpool *p = bufpool_new(1 << 20);
    void *a = bufpool_get(p, 5000);
    memset(a, 1, 8192); /* rounded up to 8 KiB: all of it is ours */
    bufpool_put(p, a, 5000);
    void *b = bufpool_get(p, 8192);
    cr_assert_eq(b, a, "5000 and 8192 bytes are one class");
    void *c = bufpool_get(p, 8193);
    cr_assert_neq(c, a);
    bufpool_put(p, b, 8192);
    bufpool_put(p, c, 8193);
    struct bufpool_stats st;
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.idle_bytes, 8192 + 16384);
    bufpool_destroy(p);
}

Test(bufpool, small_and_huge_sizes_are_not_kept)
{
    struct bufpool *p = bufpool_new(64 << 20);
    void *s = bufpool_get(p, 512);
    void *h = bufpool_get(p, BUFPOOL_MAX + 1);
    cr_assert(s && h);
    bufpool_put(p, s, 512);
    bufpool_put(p, h, BUFPOOL_MAX + 1);
    bufpool_put(p, NULL, 4096); /* ignored */
    struct bufpool_stats st;
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.idle_bytes, 0);
    cr_assert_eq(st.hits + st.misses, 0, "not pooled: not counted");
    void *m = bufpool_get(p, BUFPOOL_MAX); /* the largest pooled size */
    bufpool_put(p, m, BUFPOOL_MAX);
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.idle_bytes, BUFPOOL_MAX);
    bufpool_destroy(p);
}

Test(bufpool, idle_bytes_never_pass_the_cap)
{
    struct bufpool *p = bufpool_new(3 * 65536);
    void *v[5];
    for (int i = 0; i < 5; i++)
        v[i] = bufpool_get(p, 65536);
    for (int i = 0; i < 5; i++)
        bufpool_put(p, v[i], 65536); /* the last two are freed */
    struct bufpool_stats st;
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.idle_bytes, 3 * 65536);
    cr_assert_eq(bufpool_get(p, 65536), v[2]);
    bufpool_put(p, v[2], 65536);
    bufpool_trim(p);
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.idle_bytes, 0);
    void *again = bufpool_get(p, 65536); /* after a trim: a fresh malloc, not a stale one */
    bufpool_get_stats(p, &st);
    cr_assert_eq(st.misses, 6);
    bufpool_put(p, again, 65536);
    bufpool_destroy(p);
}
