/* The refcount journal (store/refs.c): new refcounts of existing chunks are written as one
 * `meta` entry per commit and folded into the chunk entries later. These tests prove that
 * refcounts stay exact through every path that may see the journal: a clean close (folds),
 * a kill after a sync (the journal is all there is), a fold by the commit thresholds, a
 * free of a journaled chunk, compaction moving one, a read-only open and check; and that a
 * malformed journal entry is refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "store/internal.h" /* the fold thresholds */

STORE_SUITE(refs);

static struct store *
open_st(uint64_t seg_bytes, bool read_only)
{
    struct store_options o = {
        .seg_bytes = seg_bytes, .block_cache_bytes = 8 << 20, .read_only = read_only};
    struct store *st = NULL;
    cr_assert_eq(store_open(dir, &o, &st), 0);
    return st;
}

/* Maps block `blk` of export 1 to chunk id, in a transaction of its own. */
static void
map_one(struct store *st, uint64_t blk, uint64_t id)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    cr_assert_eq(store_txn_map_set(tx, 1, blk, id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
}

/* A new chunk of content fill(seed) at block blk, with its hash entry; returns its id. */
static uint64_t
new_at(struct store *st, uint64_t blk, uint64_t seed)
{
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    uint64_t id = add(tx, seed, 4096);
    put_hash(tx, id);
    cr_assert_eq(store_txn_map_set(tx, 1, blk, id), 0);
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    return id;
}

static uint64_t
refs_of(struct store *st, uint64_t id)
{
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, id, &ci), 0, "chunk %lu", (unsigned long) id);
    return ci.refs;
}

/* The refcount written in chunk id's entry and the number of journal entries, read from
 * the database of the closed store directly. */
static void
raw_state(uint64_t id, uint64_t *entry_refs, size_t *journal)
{
    struct meta *m = open_db_of(dir, true);
    uint8_t key[META_CHUNK_KEY_LEN], val[META_CHUNK_VAL_MAX];
    meta_key_chunk_encode(key, id);
    ssize_t n = meta_get(m, META_CF_CHUNK, key, sizeof(key), val, sizeof(val));
    struct meta_chunk_rec r;
    cr_assert_gt(n, 0);
    cr_assert_eq(meta_chunk_rec_decode(val, (size_t) n, &r), 0);
    *entry_refs = r.refs;
    *journal = 0;
    struct meta_iter *it = meta_iter_new(m, META_CF_META);
    for (meta_iter_seek(it, "refs:", 5); meta_iter_valid(it); meta_iter_next(it)) {
        size_t kl;
        const void *k = meta_iter_key(it, &kl);
        if (kl < 5 || memcmp(k, "refs:", 5) != 0)
            break;
        (*journal)++;
    }
    meta_iter_free(it);
    meta_close(m);
}

static void
expect_clean_check(struct store *st)
{
    struct store_check_result r;
    cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &r), 0);
    cr_assert_eq(r.problems, 0, "check found %lu problems", (unsigned long) r.problems);
}

/* Runs fn in a child that opens the store, calls fn, syncs and exits without closing —
 * as if killed right after the sync. */
static void
in_killed_child(void (*fn)(struct store *st, void *arg), void *arg)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        struct store_options o = {.seg_bytes = 64 << 10, .block_cache_bytes = 8 << 20};
        struct store *st = NULL;
        if (store_open(dir, &o, &st) != 0)
            _exit(2);
        fn(st, arg);
        _exit(store_sync(st) == 0 ? 0 : 3);
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: status %d", status);
}

struct shared_args {
    uint64_t id;  /* the shared chunk (out) */
    unsigned n;   /* extra references, one transaction each */
    unsigned off; /* from this block on */
};

static void
share_one_chunk(struct store *st, void *arg)
{
    struct shared_args *a = arg;
    if (!a->id)
        a->id = new_at(st, 0, 1);
    for (unsigned i = 0; i < a->n; i++)
        map_one(st, a->off + 1 + i, a->id);
}

Test(refs, a_clean_close_folds_the_journal_into_the_chunk_entry)
{
    struct store *st = open_st(0, false);
    struct shared_args a = {.n = 50};
    share_one_chunk(st, &a);
    cr_assert_eq(refs_of(st, a.id), 51);
    expect_clean_check(st); /* folds too */
    map_one(st, 100, a.id);
    map_one(st, 1, 0);
    cr_assert_eq(refs_of(st, a.id), 51);
    store_close(st);
    uint64_t raw;
    size_t journal;
    raw_state(a.id, &raw, &journal);
    cr_assert_eq(raw, 51);
    cr_assert_eq(journal, 0);
}

Test(refs, a_killed_process_loses_no_journaled_refcount)
{
    struct shared_args a = {.n = 50};
    in_killed_child(share_one_chunk, &a);
    /* The id is known in the child only: the first chunk of a fresh store is id 1. */
    a.id = 1;
    uint64_t raw;
    size_t journal;
    raw_state(a.id, &raw, &journal);
    cr_assert_eq(raw, 1, "the entry still holds the refcount it was created with");
    cr_assert_eq(journal, 50, "one journal entry per commit that referenced it again");

    struct store *st = open_st(64 << 10, false);
    cr_assert_eq(refs_of(st, a.id), 51);
    expect_clean_check(st);
    expect_bytes(st, a.id, 1, 4096);
    /* Down to zero: freed, and a freed chunk's journal values do not bring it back. */
    for (unsigned i = 0; i <= 50; i++)
        map_one(st, i, 0);
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, a.id, &ci), -ENOENT);
    cr_assert_eq(store_sync(st), 0);
    store_close(st);
    st = open_st(64 << 10, false);
    cr_assert_eq(store_chunk_get(st, a.id, &ci), -ENOENT);
    expect_clean_check(st);
    store_close(st);
}

static void
free_after_journal(struct store *st, void *arg)
{
    (void) arg;
    uint64_t id = new_at(st, 0, 1);
    map_one(st, 1, id); /* journaled: 2 */
    map_one(st, 2, id); /* journaled: 3 */
    map_one(st, 0, 0);
    map_one(st, 1, 0);
    map_one(st, 2, 0); /* freed; the journal still names it */
}

Test(refs, a_chunk_freed_after_journaling_stays_freed_after_a_kill)
{
    in_killed_child(free_after_journal, NULL);
    struct store *st = open_st(64 << 10, false);
    struct store_chunk_info ci;
    cr_assert_eq(store_chunk_get(st, 1, &ci), -ENOENT);
    struct store_stats s;
    cr_assert_eq(store_stats(st, &s), 0);
    cr_assert_eq(s.chunks, 0);
    expect_clean_check(st);
    /* New chunks get new ids: nothing the journal names is ever reused. */
    uint64_t id = new_at(st, 5, 2);
    cr_assert_gt(id, 1);
    cr_assert_eq(refs_of(st, id), 1);
    store_close(st);
}

Test(refs, enough_commits_fold_the_journal_by_themselves)
{
    /* More journal entries than a commit lets accumulate: some commit must fold. */
    struct shared_args a = {.n = STORE_REFS_FOLD_KEYS + 10};
    in_killed_child(share_one_chunk, &a);
    uint64_t raw;
    size_t journal;
    raw_state(1, &raw, &journal);
    cr_assert_lt(journal, STORE_REFS_FOLD_KEYS, "%zu journal entries", journal);
    cr_assert_gt(raw, 1, "a fold wrote the refcount into the entry");
    struct store *st = open_st(64 << 10, false);
    cr_assert_eq(refs_of(st, 1), a.n + 1);
    expect_clean_check(st);
    store_close(st);
}

static void
share_many_chunks(struct store *st, void *arg)
{
    (void) arg;
    /* More chunks journaled at once than the table may remember: the commit folds. */
    struct store_txn *tx;
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (uint64_t i = 0; i < STORE_REFS_FOLD_IDS + 100; i++) {
        uint64_t id = add(tx, 1000 + i, 512);
        cr_assert_eq(store_txn_map_set(tx, 1, i, id), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
    cr_assert_eq(store_txn_begin(st, &tx), 0);
    for (uint64_t i = 0; i < STORE_REFS_FOLD_IDS + 100; i++) {
        uint64_t id;
        cr_assert_eq(store_map_get(st, 1, i, &id), 0);
        cr_assert_eq(store_txn_map_set(tx, 2, i, id), 0);
    }
    cr_assert_eq(store_txn_commit(tx, NULL, NULL), 0);
}

Test(refs, a_commit_touching_more_chunks_than_the_table_holds_writes_them_directly)
{
    in_killed_child(share_many_chunks, NULL);
    uint64_t raw;
    size_t journal;
    raw_state(1, &raw, &journal);
    cr_assert_eq(raw, 2);
    cr_assert_eq(journal, 0);
    struct store *st = open_st(64 << 10, false);
    cr_assert_eq(refs_of(st, 1), 2);
    expect_clean_check(st);
    store_close(st);
}

static void
journal_then_compact(struct store *st, void *arg)
{
    uint64_t *out = arg;
    uint64_t a = new_at(st, 0, 700);
    for (uint64_t i = 1; i < 40; i++) /* fills and seals a few segments */
        new_at(st, i, 700 + i);
    map_one(st, 100, a); /* journaled: 2 */
    for (uint64_t i = 1; i < 40; i++)
        map_one(st, i, 0); /* everything else in a's segment dies */
    struct store_chunk_info before, after;
    if (store_chunk_get(st, a, &before) != 0)
        _exit(10);
    struct store_compact_result cres;
    if (store_compact(st, true, NULL, NULL, &cres) != 0 || store_chunk_get(st, a, &after) != 0)
        _exit(11);
    if (after.seg == before.seg && after.off == before.off)
        _exit(12); /* not moved: the test would prove nothing */
    if (after.refs != 2)
        _exit(13);
    map_one(st, 101, a); /* journaled again after the move: 3 */
    *out = a;
}

Test(refs, compaction_moves_a_journaled_chunk_without_losing_its_refcount)
{
    uint64_t a = 0;
    in_killed_child(journal_then_compact, &a);
    a = 1;
    struct store *st = open_st(64 << 10, false);
    cr_assert_eq(refs_of(st, a), 3);
    expect_bytes(st, a, 700, 4096);
    expect_clean_check(st);
    /* The fold writes the refcount next to the moved location, not the old one. */
    store_close(st);
    st = open_st(64 << 10, false);
    expect_bytes(st, a, 700, 4096);
    cr_assert_eq(refs_of(st, a), 3);
    expect_clean_check(st);
    store_close(st);
}

Test(refs, a_read_only_open_applies_the_journal_without_writing)
{
    struct shared_args a = {.n = 7};
    in_killed_child(share_one_chunk, &a);
    struct store *st = open_st(64 << 10, true);
    cr_assert_eq(refs_of(st, 1), 8);
    expect_clean_check(st);
    store_close(st);
    uint64_t raw;
    size_t journal;
    raw_state(1, &raw, &journal);
    cr_assert_eq(raw, 1);
    cr_assert_eq(journal, 7);
}

Test(refs, a_malformed_journal_entry_is_refused_at_open)
{
    struct store *st = open_st(0, false);
    new_at(st, 0, 1);
    store_close(st);
    struct meta *m = open_db_of(dir, false);
    struct meta_batch *b = meta_batch_new();
    uint8_t key[13] = {'r', 'e', 'f', 's', ':', 0, 0, 0, 0, 0, 0, 0, 9};
    uint8_t val[10] = {1, 2, 3}; /* a version byte and 9 bytes: not whole pairs */
    meta_batch_put(b, META_CF_META, key, sizeof(key), val, sizeof(val));
    cr_assert_eq(meta_batch_commit(m, b, true), 0);
    meta_batch_free(b);
    meta_close(m);
    struct store_options o = {0};
    cr_assert_eq(store_open(dir, &o, &st), -EPROTO);
}
