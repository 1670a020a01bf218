/* Tests server/meta/keys.c: key order, round trips, malformed values rejected. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "meta/keys.h"

Test(keys, map_keys_sort_by_export_then_chunk_index)
{
    uint8_t a[META_MAP_KEY_LEN], b[META_MAP_KEY_LEN], c[META_MAP_KEY_LEN];
    meta_key_map_encode(a, 1, 255);
    meta_key_map_encode(b, 1, 256);
    meta_key_map_encode(c, 2, 0);
    cr_assert_lt(memcmp(a, b, sizeof(a)), 0);
    cr_assert_lt(memcmp(b, c, sizeof(b)), 0);
    uint32_t e;
    uint64_t i;
    cr_assert_eq(meta_key_map_decode(b, sizeof(b), &e, &i), 0);
    cr_assert_eq(e, 1);
    cr_assert_eq(i, 256);
    cr_assert_eq(meta_key_map_decode(b, sizeof(b) - 1, &e, &i), -EBADMSG);
}

Test(keys, chunk_export_and_id_round_trip)
{
    uint8_t k[16];
    uint32_t s;
    uint64_t id;
    meta_key_chunk_encode(k, UINT64_MAX - 1);
    cr_assert_eq(meta_key_chunk_decode(k, META_CHUNK_KEY_LEN, &id), 0);
    cr_assert_eq(id, UINT64_MAX - 1);
    meta_key_export_encode(k, 0xdeadbeef);
    cr_assert_eq(meta_key_export_decode(k, 4, &s), 0);
    cr_assert_eq(s, 0xdeadbeef);
    meta_val_id_encode(k, 42);
    cr_assert_eq(meta_val_id_decode(k, 8, &id), 0);
    cr_assert_eq(id, 42);
    cr_assert_eq(meta_val_id_decode(k, 7, &id), -EBADMSG);
}

Test(keys, hash_key_is_alg_then_hash)
{
    uint8_t k[META_HASH_KEY_MAX], h[32];
    memset(h, 0xab, sizeof(h));
    cr_assert_eq(meta_key_hash_encode(k, 2, h, 16), 17);
    cr_assert_eq(k[0], 2);
    cr_assert_eq(memcmp(k + 1, h, 16), 0);
}

Test(keys, chunk_rec_round_trip_and_every_truncation_rejected)
{
    struct meta_chunk_rec r = {.seg = 3,
                               .off = 1ULL << 40,
                               .raw_len = 4096,
                               .stored_len = 4096,
                               .codec = 0,
                               .hash_alg = 1,
                               .hash_len = 32,
                               .refs = 123456789};
    for (int i = 0; i < 32; i++)
        r.hash[i] = (uint8_t) i;
    uint8_t v[META_CHUNK_VAL_MAX];
    size_t n = meta_chunk_rec_encode(v, &r);
    cr_assert_leq(n, META_CHUNK_VAL_MAX);
    struct meta_chunk_rec d;
    cr_assert_eq(meta_chunk_rec_decode(v, n, &d), 0);
    cr_assert(d.seg == r.seg && d.off == r.off && d.raw_len == r.raw_len &&
              d.stored_len == r.stored_len && d.refs == r.refs && d.hash_len == 32);
    cr_assert_eq(memcmp(d.hash, r.hash, 32), 0);
    for (size_t cut = 0; cut < n; cut++)
        cr_assert_eq(meta_chunk_rec_decode(v, cut, &d), -EBADMSG, "cut %zu", cut);
    v[0] = 9; /* a newer value version is refused, not misread */
    cr_assert_eq(meta_chunk_rec_decode(v, n, &d), -EBADMSG);
}

Test(keys, chunk_rec_owner_flag_and_version_1_values)
{
    struct meta_chunk_rec r = {.seg = 1,
                               .off = 64,
                               .raw_len = 4096,
                               .stored_len = 4096,
                               .hash_alg = 1,
                               .hash_len = 32,
                               .refs = 2,
                               .owns_hash = true};
    uint8_t v[META_CHUNK_VAL_MAX];
    size_t n = meta_chunk_rec_encode(v, &r);
    struct meta_chunk_rec d;
    cr_assert_eq(meta_chunk_rec_decode(v, n, &d), 0);
    cr_assert(d.owns_hash);
    /* Version 1 (data format 1): the same fields without the flags byte. */
    uint8_t v1[META_CHUNK_VAL_MAX];
    memcpy(v1, v, 32);
    v1[0] = 1;
    memcpy(v1 + 32, v + 33, 32);
    cr_assert_eq(meta_chunk_rec_decode(v1, n - 1, &d), 0);
    cr_assert(!d.owns_hash && d.refs == 2 && d.off == 64 && d.hash_len == 32);
    cr_assert_eq(memcmp(d.hash, r.hash, 32), 0);
    cr_assert_eq(meta_chunk_rec_decode(v1, n, &d), -EBADMSG, "a version-1 value has no flags");
    v[32] |= 0x80; /* a flag this version does not know */
    cr_assert_eq(meta_chunk_rec_decode(v, n, &d), -EBADMSG);
}

Test(keys, export_rec_round_trip_and_bad_input)
{
    struct meta_export_rec r = {.size = 1ULL << 34,
                                .chunk_size = 4096,
                                .dedup = true,
                                .read_only = false,
                                .parent_id = 9,
                                .created_sec = 1700000000};
    strcpy(r.name, "disk-one");
    uint8_t v[META_EXPORT_VAL_MAX];
    size_t n = meta_export_rec_encode(v, &r);
    struct meta_export_rec d;
    cr_assert_eq(meta_export_rec_decode(v, n, &d), 0);
    cr_assert_str_eq(d.name, "disk-one");
    cr_assert(d.size == r.size && d.chunk_size == 4096 && d.dedup && !d.read_only &&
              d.parent_id == 9 && d.created_sec == r.created_sec);
    for (size_t cut = 0; cut < n; cut++)
        cr_assert_eq(meta_export_rec_decode(v, cut, &d), -EBADMSG, "cut %zu", cut);
    v[13] = 0x80; /* unknown flag bit */
    cr_assert_eq(meta_export_rec_decode(v, n, &d), -EBADMSG);
}
