/* Tests server/util/log.c: levels, filtering, line format. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static char *
capture(void (*emit)(void))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    log_set_file(f);
    emit();
    log_set_file(NULL);
    fclose(f);
    return buf;
}

static void
emit_all_levels(void)
{
    log_err("store: seg %u: bad crc", 7u);
    log_warn("w");
    log_info("i");
    log_debug("d");
}

Test(log, default_level_drops_debug)
{
    log_set_level(LOG_LEVEL_INFO);
    char *out = capture(emit_all_levels);
    cr_assert(strstr(out, "error store: seg 7: bad crc\n") != NULL, "got: %s", out);
    cr_assert(strstr(out, "warn  w\n") != NULL);
    cr_assert(strstr(out, "info  i\n") != NULL);
    cr_assert(strstr(out, " d\n") == NULL, "debug line leaked: %s", out);
    free(out);
}

Test(log, error_level_keeps_only_errors)
{
    log_set_level(LOG_LEVEL_ERROR);
    char *out = capture(emit_all_levels);
    cr_assert(strstr(out, "bad crc") != NULL);
    cr_assert(strstr(out, "warn") == NULL);
    free(out);
}

Test(log, line_starts_with_utc_timestamp)
{
    log_set_level(LOG_LEVEL_DEBUG);
    char *out = capture(emit_all_levels);
    /* 2026-12-03T08:35:34.123Z */
    cr_assert(strlen(out) > 25);
    cr_assert_eq(out[4], '-');
    cr_assert_eq(out[10], 'T');
    cr_assert_eq(out[19], '.');
    cr_assert_eq(out[23], 'Z');
    cr_assert(strstr(out, "debug d\n") != NULL);
    free(out);
}

Test(log, overlong_message_is_cut_to_one_line)
{
    log_set_level(LOG_LEVEL_INFO);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    log_set_file(f);
    char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    log_info("%s", big);
    log_set_file(NULL);
    fclose(f);
    cr_assert(len < 1100);
    cr_assert_eq(out[len - 1], '\n');
    cr_assert_eq(strchr(out, '\n'), out + len - 1);
    free(out);
}

Test(log, level_names_parse_and_reject)
{
    enum log_level lv;
    cr_assert_eq(log_level_parse("debug", &lv), 0);
    cr_assert_eq(lv, LOG_LEVEL_DEBUG);
    cr_assert_eq(log_level_parse("loud", &lv), -EINVAL);
    cr_assert_eq(log_level_parse(NULL, &lv), -EINVAL);
}
