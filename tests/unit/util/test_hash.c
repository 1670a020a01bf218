/* Tests server/util/hash.c against published test vectors, and sha256x2.c against
 * OpenSSL's SHA-256. */
#include <criterion/criterion.h>
#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/sha256x2.h"

static void
hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

Test(hash, sha256_of_abc_matches_fips_vector)
{
    uint8_t h[DEDUPD_HASH_MAX_LEN];
    char s[65];
    cr_assert_eq(hash_compute(DEDUPD_HASH_SHA256, "abc", 3, h), 32);
    hex(h, 32, s);
    cr_assert_str_eq(s, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(hash, xxh3_128_is_16_bytes_and_input_sensitive)
{
    uint8_t a[DEDUPD_HASH_MAX_LEN], b[DEDUPD_HASH_MAX_LEN];
    cr_assert_eq(hash_compute(DEDUPD_HASH_XXH3_128, "abc", 3, a), 16);
    cr_assert_eq(hash_compute(DEDUPD_HASH_XXH3_128, "abd", 3, b), 16);
    cr_assert_neq(memcmp(a, b, 16), 0);
    cr_assert_eq(hash_compute(DEDUPD_HASH_XXH3_128, "abc", 3, b), 16);
    cr_assert_eq(memcmp(a, b, 16), 0);
}

Test(hash, names_and_verify_policy)
{
    enum dedupd_hash_alg a;
    cr_assert_eq(hash_parse("xxh3-128", &a), 0);
    cr_assert_eq(a, DEDUPD_HASH_XXH3_128);
    cr_assert(hash_needs_verify(a));
    cr_assert_eq(hash_parse("sha256", &a), 0);
    cr_assert(!hash_needs_verify(a));
    cr_assert_eq(hash_parse("md5", &a), -EINVAL);
    uint8_t h[DEDUPD_HASH_MAX_LEN];
    cr_assert_eq(hash_compute(DEDUPD_HASH_NONE, "x", 1, h), -EINVAL);
    cr_assert_eq(hash_len(DEDUPD_HASH_NONE), 0);
}

/* Deterministic bytes, different per seed. */
static void
fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t) x;
    }
}

/* sha256x2(a, b) against OpenSSL's SHA256 of each, for messages of length len. */
static void
expect_x2_matches_openssl(const uint8_t *a, const uint8_t *b, size_t len)
{
    uint8_t da[32], db[32], wa[32], wb[32];
    sha256x2(a, b, len, da, db);
    SHA256(a, len, wa);
    SHA256(b, len, wb);
    cr_assert_eq(memcmp(da, wa, 32), 0, "lane a differs at length %zu", len);
    cr_assert_eq(memcmp(db, wb, 32), 0, "lane b differs at length %zu", len);
}

/* Every length from 0 to four blocks and a half (each padding case: the tail's 0x80 and
 * length in the last block or spilling into one more), chunk sizes, and lanes that differ
 * in one byte. */
Test(hash, sha256x2_matches_openssl_for_every_padding_case_and_chunk_size)
{
    if (!sha256x2_available())
        cr_skip_test("this CPU has no SHA extensions: hash_compute2 uses OpenSSL alone");
    static uint8_t a[65536], b[65536];
    fill(a, sizeof(a), 1);
    fill(b, sizeof(b), 2);
    for (size_t len = 0; len <= 300; len++)
        expect_x2_matches_openssl(a, b, len);
    const size_t sizes[] = {4096, 8192, 16384, 32768, 65536, 4095, 4097, 65535};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        expect_x2_matches_openssl(a, b, sizes[i]);
    memcpy(b, a, 4096);
    b[4095] ^= 1;
    expect_x2_matches_openssl(a, b, 4096);
    expect_x2_matches_openssl(a, a, 4096); /* the same buffer in both lanes */
    for (int i = 0; i < 200; i++) {
        size_t len = (size_t) rand() % sizeof(a);
        fill(a, len, (uint64_t) i * 2 + 10);
        fill(b, len, (uint64_t) i * 2 + 11);
        expect_x2_matches_openssl(a, b, len);
    }
}

/* hash_compute2 is two hash_compute calls, whichever way it computes them. */
Test(hash, hash_compute2_equals_two_single_hashes)
{
    uint8_t a[4096], b[4096];
    fill(a, sizeof(a), 3);
    fill(b, sizeof(b), 4);
    const enum dedupd_hash_alg algs[] = {DEDUPD_HASH_SHA256, DEDUPD_HASH_XXH3_128};
    for (int k = 0; k < 2; k++) {
        uint8_t pa[DEDUPD_HASH_MAX_LEN], pb[DEDUPD_HASH_MAX_LEN];
        uint8_t sa[DEDUPD_HASH_MAX_LEN], sb[DEDUPD_HASH_MAX_LEN];
        int n = hash_compute2(algs[k], a, b, sizeof(a), pa, pb);
        cr_assert_eq(n, (int) hash_len(algs[k]));
        cr_assert_eq(hash_compute(algs[k], a, sizeof(a), sa), n);
        cr_assert_eq(hash_compute(algs[k], b, sizeof(b), sb), n);
        cr_assert_eq(memcmp(pa, sa, (size_t) n), 0);
        cr_assert_eq(memcmp(pb, sb, (size_t) n), 0);
    }
    uint8_t h1[DEDUPD_HASH_MAX_LEN], h2[DEDUPD_HASH_MAX_LEN];
    cr_assert_eq(hash_compute2(DEDUPD_HASH_NONE, a, b, 1, h1, h2), -EINVAL);
}
