/* Tests server/util/hash.c against published test vectors. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/hash.h"

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
