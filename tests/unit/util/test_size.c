/* Tests server/util/size.c: parsing and formatting of byte counts. */
#include <criterion/criterion.h>
#include <errno.h>

#include "util/size.h"

Test(size, plain_and_suffixed)
{
    uint64_t v;
    cr_assert_eq(size_parse("4096", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(size_parse("4K", &v), 0);
    cr_assert_eq(v, 4096);
    cr_assert_eq(size_parse("16G", &v), 0);
    cr_assert_eq(v, 16ULL << 30);
    cr_assert_eq(size_parse("512MiB", &v), 0);
    cr_assert_eq(v, 512ULL << 20);
    cr_assert_eq(size_parse("1tb", &v), 0);
    cr_assert_eq(v, 1ULL << 40);
}

Test(size, rejects_garbage_and_overflow)
{
    uint64_t v = 7;
    cr_assert_eq(size_parse("", &v), -EINVAL);
    cr_assert_eq(size_parse("-1", &v), -EINVAL);
    cr_assert_eq(size_parse("12Q", &v), -EINVAL);
    cr_assert_eq(size_parse("4KX", &v), -EINVAL);
    cr_assert_eq(size_parse("99999999999999999999", &v), -ERANGE);
    cr_assert_eq(size_parse("20000000P", &v), -ERANGE);
    cr_assert_eq(v, 7, "failed parse must not touch *out");
}

Test(size, format)
{
    char b[32];
    cr_assert_str_eq(size_format(512, b, sizeof b), "512 B");
    cr_assert_str_eq(size_format(16ULL << 30, b, sizeof b), "16.0 GiB");
    cr_assert_str_eq(size_format(1536, b, sizeof b), "1.5 KiB");
}
