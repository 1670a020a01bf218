/* dedupd-ctl's JSON writer: structure, escaping, invalid UTF-8, numbers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* Runs fn on a memory stream and returns the text (caller frees). */
static char *
capture(void (*fn)(struct json *j))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    struct json j;
    json_init(&j, f);
    fn(&j);
    fclose(f);
    return buf;
}

static void
nested(struct json *j)
{
    json_obj_begin(j, NULL);
    json_str(j, "name", "vm1");
    json_u64(j, "size", 18446744073709551615ULL);
    json_bool(j, "dedup", true);
    json_arr_begin(j, "list");
    json_u64(j, NULL, 1);
    json_obj_begin(j, NULL);
    json_obj_end(j);
    json_arr_end(j);
    json_arr_begin(j, "empty");
    json_arr_end(j);
    json_i64(j, "neg", -5);
    json_obj_end(j);
}

Test(json, nested_structure_is_well_formed)
{
    char *s = capture(nested);
    const char *want = "{\n"
                       "  \"name\": \"vm1\",\n"
                       "  \"size\": 18446744073709551615,\n"
                       "  \"dedup\": true,\n"
                       "  \"list\": [\n"
                       "    1,\n"
                       "    {}\n"
                       "  ],\n"
                       "  \"empty\": [],\n"
                       "  \"neg\": -5\n"
                       "}\n";
    cr_assert_str_eq(s, want);
    free(s);
}

static char *
escaped(const char *in)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    json_write_string(f, in);
    fclose(f);
    return buf;
}

Test(json, strings_are_escaped)
{
    char *s = escaped("a\"b\\c\n\t\x01\x7f/");
    cr_assert_str_eq(s, "\"a\\\"b\\\\c\\n\\t\\u0001\\u007f/\"");
    free(s);
}

Test(json, valid_utf8_passes_and_invalid_becomes_replacement)
{
    char *s = escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    cr_assert_str_eq(s, "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    free(s);
    /* lone continuation, truncated sequence, overlong '/', surrogate, beyond U+10FFFF */
    s = escaped("\x80|\xc3|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80");
    cr_assert_str_eq(s, "\"\\ufffd|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|"
                        "\\ufffd\\ufffd\\ufffd\\ufffd\"");
    free(s);
}

static void
doubles(struct json *j)
{
    json_arr_begin(j, NULL);
    json_double(j, NULL, 2.5);
    json_double(j, NULL, NAN);
    json_double(j, NULL, INFINITY);
    json_double(j, NULL, 1.0);
    json_arr_end(j);
}

Test(json, doubles_are_finite_numbers)
{
    char *s = capture(doubles);
    cr_assert_str_eq(s, "[\n  2.5,\n  0,\n  0,\n  1\n]\n");
    free(s);
}

Test(json, null_string_is_empty)
{
    char *s = escaped(NULL);
    cr_assert_str_eq(s, "\"\"");
    free(s);
}
