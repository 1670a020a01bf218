/* Tests server/config/config.c: defaults, INI file, command-line precedence, errors. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "dedupd/limits.h"

#define ARGV(...) ((char *[]){"dedupd", __VA_ARGS__, NULL})
#define ARGC(v)   ((int) (sizeof(v) / sizeof(v[0])) - 1)

static FILE *devnull;
static void
setup(void)
{
    devnull = fopen("/dev/null", "w");
}
static void
teardown(void)
{
    fclose(devnull);
}
TestSuite(config, .init = setup, .fini = teardown);

static char *
write_ini(const char *text)
{
    char *path = strdup("/tmp/dedupd-config-XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    close(fd);
    return path;
}

Test(config, defaults)
{
    struct config c;
    char *argv[] = {"dedupd", NULL};
    cr_assert_eq(config_load(&c, 1, argv, devnull), 0);
    cr_assert_str_eq(c.data_dir, DEDUPD_DEFAULT_DATA_DIR);
    cr_assert_eq(c.n_listen, 1);
    cr_assert_str_eq(c.listen[0], "127.0.0.1:10809");
    cr_assert_str_eq(c.control_path, DEDUPD_DEFAULT_DATA_DIR "/ctl.sock");
    cr_assert_str_eq(c.default_export, "default");
    cr_assert_eq(c.default_export_size, 16ULL << 30);
    cr_assert(c.background_compaction);
    cr_assert_eq(c.nbd_loops, 0, "one loop per CPU unless set");
    config_free(&c);
}

Test(config, file_then_command_line_wins)
{
    char *path = write_ini("[server]\n"
                           "data_dir = /srv/a\n"
                           "listen = 127.0.0.1:1\n"
                           "listen = unix:/tmp/x.sock\n"
                           "log_level = debug\n"
                           "[store]\n"
                           "segment_size = 64M\n"
                           "compact_live_ratio = 0.25\n"
                           "reserve_space = 256M\n"
                           "[export]\n"
                           "default_size = 1G\n"
                           "[nbd]\n"
                           "loops = 3\n");
    char *argv[] = {"dedupd", "-c", path, "-d", "/srv/b", "--segment-size", "32M", NULL};
    struct config c;
    cr_assert_eq(config_load(&c, 7, argv, devnull), 0);
    cr_assert_str_eq(c.data_dir, "/srv/b");
    cr_assert_eq(c.n_listen, 2);
    cr_assert_str_eq(c.listen[1], "unix:/tmp/x.sock");
    cr_assert_str_eq(c.log_level, "debug");
    cr_assert_eq(c.seg_bytes, 32ULL << 20);
    cr_assert_float_eq(c.compact_live_ratio, 0.25, 1e-9);
    cr_assert_eq(c.reserve_bytes, 256ULL << 20);
    cr_assert_eq(c.default_export_size, 1ULL << 30);
    cr_assert_eq(c.nbd_loops, 3);
    cr_assert_str_eq(c.control_path, "/srv/b/ctl.sock", "control socket follows the data dir");
    config_free(&c);
    unlink(path);
    free(path);
}

Test(config, command_line_listen_replaces_file_list)
{
    char *path = write_ini("[server]\nlisten = 127.0.0.1:1\n");
    char *argv[] = {"dedupd", "-c", path, "-l", "unix:/tmp/a", "-l", "127.0.0.1:2", NULL};
    struct config c;
    cr_assert_eq(config_load(&c, 7, argv, devnull), 0);
    cr_assert_eq(c.n_listen, 2);
    cr_assert_str_eq(c.listen[0], "unix:/tmp/a");
    cr_assert_str_eq(c.listen[1], "127.0.0.1:2");
    config_free(&c);
    unlink(path);
    free(path);
}

Test(config, usage_errors_are_einval)
{
    struct config c;
    char *a1[] = {"dedupd", "--bogus", NULL};
    cr_assert_eq(config_load(&c, 2, a1, devnull), -EINVAL);
    char *a2[] = {"dedupd", "--log-level", "loud", NULL};
    cr_assert_eq(config_load(&c, 3, a2, devnull), -EINVAL);
    char *a3[] = {"dedupd", "--default-export-size", "0", NULL};
    cr_assert_eq(config_load(&c, 3, a3, devnull), -EINVAL);
    char *a4[] = {"dedupd", "extra", NULL};
    cr_assert_eq(config_load(&c, 2, a4, devnull), -EINVAL);
    char *a5[] = {"dedupd", "-d", NULL};
    cr_assert_eq(config_load(&c, 2, a5, devnull), -EINVAL);
    char *a6[] = {"dedupd", "--loops", "0", NULL};
    cr_assert_eq(config_load(&c, 3, a6, devnull), -EINVAL);
    char *a7[] = {"dedupd", "--loops", "2", NULL};
    cr_assert_eq(config_load(&c, 3, a7, devnull), 0);
    cr_assert_eq(c.nbd_loops, 2);
    config_free(&c);
}

Test(config, bad_file_values_and_unknown_keys)
{
    struct config c;
    char *p1 = write_ini("[store]\nsegment_size = lots\n");
    char *a1[] = {"dedupd", "-c", p1, NULL};
    cr_assert_eq(config_load(&c, 3, a1, devnull), -EINVAL);
    char *p2 = write_ini("[server]\ncolour = blue\n");
    char *a2[] = {"dedupd", "-c", p2, NULL};
    cr_assert_eq(config_load(&c, 3, a2, devnull), -EINVAL);
    char *a3[] = {"dedupd", "-c", "/nonexistent/dedupd.ini", NULL};
    cr_assert_eq(config_load(&c, 3, a3, devnull), -EIO);
    const char *bad_loops[] = {"[nbd]\nloops = 0\n", "[nbd]\nloops = 65\n", "[nbd]\nloops = two\n"};
    for (size_t i = 0; i < sizeof(bad_loops) / sizeof(bad_loops[0]); i++) {
        char *p = write_ini(bad_loops[i]);
        char *a[] = {"dedupd", "-c", p, NULL};
        cr_assert_eq(config_load(&c, 3, a, devnull), -EINVAL, "%s", bad_loops[i]);
        unlink(p);
        free(p);
    }
    unlink(p1);
    unlink(p2);
    free(p1);
    free(p2);
}

Test(config, help_and_version_flags)
{
    struct config c;
    char *a1[] = {"dedupd", "--help", NULL};
    cr_assert_eq(config_load(&c, 2, a1, devnull), 0);
    cr_assert(c.show_help);
    config_free(&c);
    char *a2[] = {"dedupd", "-V", NULL};
    cr_assert_eq(config_load(&c, 2, a2, devnull), 0);
    cr_assert(c.show_version);
    config_free(&c);
}
