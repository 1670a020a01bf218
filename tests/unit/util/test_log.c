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

/* A call site's budget: LOG_LIMIT_BURST lines per window, the rest counted and reported by
 * the next line let through — in the same window never, in the next one first. */
Test(log, limited_lines_keep_a_budget_and_count_what_they_drop)
{
    struct log_limit l = {0};
    uint32_t dropped = 99;
    uint64_t t = 5000;
    for (int i = 0; i < LOG_LIMIT_BURST; i++) {
        cr_assert(log_limit_pass(&l, t + (uint64_t) i, &dropped), "line %d", i);
        cr_assert_eq(dropped, 0);
    }
    for (int i = 0; i < 25; i++)
        cr_assert_not(log_limit_pass(&l, t + 100, &dropped), "line %d over the budget", i);
    cr_assert_not(log_limit_pass(&l, t + LOG_LIMIT_WINDOW_MS - 1, &dropped), "same window");
    cr_assert(log_limit_pass(&l, t + LOG_LIMIT_WINDOW_MS, &dropped), "a new window");
    cr_assert_eq(dropped, 26);
    cr_assert(log_limit_pass(&l, t + LOG_LIMIT_WINDOW_MS + 1, &dropped));
    cr_assert_eq(dropped, 0, "reported once");
    /* The very first call, at time 0, opens a window too. */
    struct log_limit z = {0};
    cr_assert(log_limit_pass(&z, 0, &dropped));
}

static void
emit_flood(void)
{
    for (int i = 0; i < 3 * LOG_LIMIT_BURST; i++)
        log_err_limited("engine: chunk %d: commit failed", i);
}

/* The macro: one budget per call site, whatever the arguments. */
Test(log, a_flood_from_one_call_site_is_cut_to_its_budget)
{
    log_set_level(LOG_LEVEL_INFO);
    char *out = capture(emit_flood);
    int lines = 0;
    for (const char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    cr_assert_eq(lines, LOG_LIMIT_BURST, "got: %s", out);
    cr_assert(strstr(out, "chunk 9: commit failed\n") != NULL, "got: %s", out);
    cr_assert(strstr(out, "chunk 10:") == NULL, "got: %s", out);
    free(out);
}

static struct log_limit after_drops = {.window = 1, .lines = LOG_LIMIT_BURST, .dropped = 5};

static void
emit_after_drops(void)
{
    log_write_limited(&after_drops, LOG_LEVEL_WARN, "nbd: conn %d: write failed", 3);
}

/* The first line of a new window says how many were dropped before it. */
Test(log, the_next_line_let_through_reports_the_drops)
{
    log_set_level(LOG_LEVEL_INFO);
    char *out = capture(emit_after_drops);
    cr_assert(strstr(out, "warn  nbd: conn 3: write failed [5 more like this not logged before "
                          "it]\n") != NULL,
              "got: %s", out);
    free(out);
}
