/* The hash-index contract: every back-end in the name table must pass these unchanged.
 * Cases are parameterised by an int into the table (criterion runs each in a fresh
 * process, so no pointers cross). A real meta database in a temp dir backs each case. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx.h"

static const char *const backend[] = {"rocksdb", "memory"};
#define N_BACKENDS 2

#define CONTRACT_TEST(name)                                                                        \
    ParameterizedTestParameters(contract, name)                                                    \
    {                                                                                              \
        static int which[N_BACKENDS] = {0, 1};                                                     \
        return cr_make_param_array(int, which, N_BACKENDS);                                        \
    }                                                                                              \
    ParameterizedTest(int *which, contract, name)

CONTRACT_TEST(empty_lookup_is_enoent)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    uint8_t h[32];
    uint64_t id = 7;
    make_hash(h, 1);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), -ENOENT);
    cr_assert_eq(id, 7);
    fx_close(&f);
}

CONTRACT_TEST(staged_entry_is_visible_only_after_commit_and_publish)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    uint8_t h[32];
    uint64_t id = 0;
    make_hash(h, 2);
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 42), 0);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), -ENOENT, "visible before its chunk commits");
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 42);
    fx_close(&f);
}

CONTRACT_TEST(abandoned_stage_never_appears)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    uint8_t h[32];
    uint64_t id;
    make_hash(h, 3);
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 5), 0);
    /* The store transaction aborted: the caller drops its batch and resets. */
    meta_batch_clear(f.mb);
    index_batch_reset(&f.b, f.mb);
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), -ENOENT);
    fx_close(&f);
}

CONTRACT_TEST(hash_algorithms_are_kept_apart)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    uint8_t h[32];
    uint64_t id;
    make_hash(h, 4);
    /* Same leading 16 bytes: an xxh3-128 digest equal to a SHA-256 prefix. */
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 10), 0);
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 2, h, 16, &id), -ENOENT);
    cr_assert_eq(index_stage(f.ix, &f.b, 2, h, 16, 11), 0);
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 10);
    cr_assert_eq(index_lookup(f.ix, 2, h, 16, &id), 0);
    cr_assert_eq(id, 11);
    fx_close(&f);
}

CONTRACT_TEST(restaging_a_hash_replaces_its_chunk)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    uint8_t h[32];
    uint64_t id;
    make_hash(h, 5);
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 20), 0);
    fx_commit(&f);
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 21), 0);
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 21);
    fx_close(&f);
}

CONTRACT_TEST(remove_drops_only_the_entry_naming_that_chunk)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    uint8_t h[32];
    uint64_t id;
    make_hash(h, 6);
    cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 30), 0);
    fx_commit(&f);
    index_remove(f.ix, &f.b, 1, h, 32, 31); /* another chunk with that hash: not ours */
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0);
    cr_assert_eq(id, 30);
    index_remove(f.ix, &f.b, 1, h, 32, 30);
    fx_commit(&f);
    cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), -ENOENT);
    fx_close(&f);
}

CONTRACT_TEST(many_entries_round_trip_and_are_counted)
{
    struct fx f;
    fx_open(&f, backend[*which]);
    enum { N = 5000 };
    uint8_t h[32];
    cr_assert_eq(index_batch_reserve(&f.b, N), 0);
    for (uint32_t i = 0; i < N; i++) {
        make_hash(h, 1000 + i);
        cr_assert_eq(index_stage(f.ix, &f.b, 1, h, 32, 100 + i), 0);
    }
    fx_commit(&f);
    for (uint32_t i = 0; i < N; i++) {
        uint64_t id;
        make_hash(h, 1000 + i);
        cr_assert_eq(index_lookup(f.ix, 1, h, 32, &id), 0, "entry %u", i);
        cr_assert_eq(id, 100 + i);
    }
    struct index_usage u;
    index_usage(f.ix, &u);
    cr_assert_eq(u.entries, N);
    cr_assert_eq(u.evictions, 0);
    fx_close(&f);
}

Test(contract, backend_list_and_unknown_name)
{
    const char *const *names = index_backend_names();
    cr_assert_str_eq(names[0], "rocksdb", "rocksdb is the default");
    size_t n = 0;
    while (names[n])
        cr_assert(index_backend_exists(names[n++]));
    cr_assert_eq(n, N_BACKENDS, "every back-end is in this test's table");
    struct index *ix = NULL;
    cr_assert_eq(index_open("btree", NULL, NULL, &ix), -ENOENT);
    cr_assert_null(ix);
    cr_assert(!index_backend_exists("btree"));
}
