/* dedupd-ctl end to end against a control server with the fake engine: tables, --json,
 * exit codes (0 ok, 1 server/connection error, 2 usage) and messages naming the program. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakes/ctl_fake_engine.h"
#include "harness.h"

extern char **environ;

static struct harness h;
static char out[65536], err[8192];

static void
setup(void)
{
    struct engine *e = fake_engine_new();
    cr_assert_eq(harness_start(&h, e, fake_nbd(2), 0), 0);
}

static void
teardown(void)
{
    harness_stop(&h);
}

TestSuite(cli, .init = setup, .fini = teardown);

static void
slurp(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(path);
}

/* Runs dedupd-ctl -s SOCKET args... (NULL-terminated); returns its exit code. */
static int
ctl(const char *first, ...)
{
    char *argv[32];
    int n = 0;
    argv[n++] = DEDUPD_CTL_PATH;
    argv[n++] = "-s";
    argv[n++] = h.path;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
        argv[n++] = (char *) a;
    va_end(ap);
    argv[n] = NULL;
    char o[160], e[160];
    snprintf(o, sizeof(o), "%s/out", h.dir);
    snprintf(e, sizeof(e), "%s/err", h.dir);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, o, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, e, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    slurp(o, out, sizeof(out));
    slurp(e, err, sizeof(err));
    cr_assert(WIFEXITED(st), "dedupd-ctl died: %s", err);
    return WEXITSTATUS(st);
}

#define HAS(buf, s) cr_assert(strstr((buf), (s)), "no '%s' in:\n%s", (s), (buf))

Test(cli, status_table_and_json)
{
    cr_assert_eq(ctl("status", NULL), 0, "%s", err);
    HAS(out, "dedup:               enabled");
    HAS(out, "back-end:            rocksdb");
    HAS(out, "NBD connections:     2 (on 2 event loops)");
    HAS(out, "memory back-end at its limit:   1.4 MiB");
    cr_assert_eq(ctl("--json", "status", NULL), 0);
    HAS(out, "\"enabled\": true");
    HAS(out, "\"backend\": \"rocksdb\"");
    HAS(out, "\"memory_at_limit\": 1441792");
    HAS(out, "\"nbd_connections\": 2");
    HAS(out, "\"nbd_loops\": 2");
    cr_assert_eq(ctl("status", "--json", NULL), 0);
    HAS(out, "\"hash\": \"sha256\"");
    HAS(out, "\"sync_error\": 0");
    cr_assert_eq(ctl("status", NULL), 0);
    cr_assert_null(strstr(out, "DURABILITY"), "%s", out);
}

Test(cli, status_says_when_durability_is_lost)
{
    fake_engine_set_sync_error(-EIO);
    cr_assert_eq(ctl("status", NULL), 0, "%s", err);
    HAS(out, "DURABILITY LOST:     a segment fdatasync failed (Input/output error)");
    HAS(out, "restart dedupd");
    cr_assert_eq(ctl("--json", "status", NULL), 0);
    HAS(out, "\"sync_error\": 5");
}

Test(cli, enable_disable)
{
    cr_assert_eq(ctl("disable", NULL), 0, "%s", err);
    HAS(out, "dedup disabled");
    cr_assert_eq(ctl("--json", "status", NULL), 0);
    HAS(out, "\"enabled\": false");
    cr_assert_eq(ctl("enable", "-s", "memory", "-l", "1000", "-m", "1M", "-b", "8K", NULL), 0, "%s",
                 err);
    HAS(out, "dedup enabled: back-end memory");
    HAS(out, "limit 1000 entries / 1.0 MiB");
    cr_assert_eq(ctl("--json", "enable", "-a", "xxh3", NULL), 0, "%s", err);
    HAS(out, "\"hash\": \"xxh3\"");
    HAS(out, "\"verify\": true");
    HAS(out, "\"default_chunk_size\": 8192");
    /* usage errors never reach the server */
    cr_assert_eq(ctl("enable", "-s", "floppy", NULL), 2);
    HAS(err, "dedupd-ctl: enable: unknown back-end 'floppy'");
    cr_assert_eq(ctl("enable", "-b", "3000", NULL), 2);
    cr_assert_eq(ctl("enable", "--bogus", NULL), 2);
    /* a refusal by the server: exit 1, its message */
    cr_assert_eq(ctl("enable", "--no-verify", NULL), 1);
    HAS(err, "verify is mandatory");
}

Test(cli, export_commands)
{
    cr_assert_eq(ctl("export", "create", "vm1", "16G", "--chunk-size", "64K", "--read-only", NULL),
                 0, "%s", err);
    HAS(out, "name:         vm1");
    HAS(out, "16.0 GiB");
    cr_assert_eq(ctl("export", "create", "vm1", "1G", NULL), 1);
    HAS(err, "dedupd-ctl: export 'vm1' already exists");
    cr_assert_eq(ctl("export", "list", NULL), 0);
    HAS(out, "NAME");
    HAS(out, "vm1");
    HAS(out, "(default)");
    cr_assert_eq(ctl("--json", "export", "list", NULL), 0);
    HAS(out, "\"name\": \"vm1\"");
    HAS(out, "\"chunk_size\": 65536");
    HAS(out, "\"read_only\": true");
    cr_assert_eq(ctl("export", "set", "vm1", "dedup=off", "--json", NULL), 0, "%s", err);
    HAS(out, "\"dedup\": false");
    cr_assert_eq(ctl("export", "set", "vm1", "colour=red", NULL), 2);
    cr_assert_eq(ctl("export", "info", NULL), 0);
    HAS(out, "name:         default (default)");
    cr_assert_eq(ctl("export", "clone", "vm1", "vm2", NULL), 0, "%s", err);
    HAS(out, "clone of:");
    fake_engine_set_open_handles("vm1", 1);
    cr_assert_eq(ctl("export", "delete", "vm1", NULL), 1);
    HAS(err, "active connections");
    fake_engine_set_open_handles("vm1", 0);
    cr_assert_eq(ctl("export", "delete", "vm1", NULL), 0);
    HAS(out, "export 'vm1' deleted");
    cr_assert_eq(ctl("export", "info", "vm1", NULL), 1);
    cr_assert_eq(ctl("export", "create", "x", "lots", NULL), 2);
    cr_assert_eq(ctl("export", "create", "x", NULL), 2);
    cr_assert_eq(ctl("export", "frobnicate", NULL), 2);
    cr_assert_eq(ctl("export", "--help", NULL), 0);
    HAS(out, "export create NAME SIZE");
}

Test(cli, stats_and_watch)
{
    cr_assert_eq(ctl("stats", NULL), 0, "%s", err);
    HAS(out, "EXPORT");
    HAS(out, "default");
    HAS(out, "total");
    HAS(out, "dedup ratio 3.00");
    cr_assert_eq(ctl("--json", "stats", "default", NULL), 0);
    HAS(out, "\"dedup_ratio\": 2");
    HAS(out, "\"dead_bytes\": 4096");
    HAS(out, "\"compression_ratio\": 1");
    cr_assert_eq(ctl("stats", "--watch", "1", "--count", "2", "--json", NULL), 0);
    char *second = strstr(out, "}\n{");
    cr_assert_not_null(second, "two JSON documents expected:\n%s", out);
    cr_assert_eq(ctl("stats", "nope", NULL), 1);
    HAS(err, "no export named 'nope'");
    cr_assert_eq(ctl("stats", "--count", "2", NULL), 2);
}

Test(cli, maintenance_with_progress)
{
    fake_engine_maint(3, 10);
    cr_assert_eq(ctl("gc", "--force", NULL), 0, "%s", err);
    HAS(out, "gc: 2 segments compacted");
    HAS(err, "/3)\n"); /* plain progress lines ("gc:  33% (1/3)"): stderr is no TTY */
    HAS(err, "gc: ");
    cr_assert_eq(ctl("--json", "gc", NULL), 0);
    HAS(out, "\"bytes_reclaimed\": 4096");
    cr_assert_eq(strstr(err, "gc:"), NULL, "no progress with --json");
    cr_assert_eq(ctl("scrub", NULL), 1, "scrub with findings exits 1");
    HAS(out, "105 checksum errors");
    HAS(out, "... and 5 more");
    cr_assert_eq(ctl("check", "--repair", "--json", NULL), 0, "repaired: exit 0");
    HAS(out, "\"repaired\": 1");
    HAS(out, "refcount");
    cr_assert_eq(ctl("check", NULL), 1);
}

Test(cli, global_usage_and_connection_errors)
{
    cr_assert_eq(ctl("--help", NULL), 0);
    HAS(out, "stats");
    HAS(out, "disable");
    cr_assert_eq(ctl(NULL), 2);
    cr_assert_eq(ctl("frob", NULL), 2);
    HAS(err, "dedupd-ctl: unknown command 'frob'");
    const char *cmds[] = {"status", "stats", "enable", "disable", "export", "gc", "scrub", "check"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cr_assert_eq(ctl(cmds[i], "--help", NULL), 0, "%s --help", cmds[i]);
        HAS(out, "Usage:");
    }
    cr_assert_eq(ctl("help", "gc", NULL), 0);
    HAS(out, "Usage: dedupd-ctl gc");
    char *argv[] = {DEDUPD_CTL_PATH, "-s", "/nonexistent/ctl.sock", "status", NULL};
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    cr_assert_eq(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    int st;
    waitpid(pid, &st, 0);
    cr_assert_eq(WEXITSTATUS(st), 1, "no server: exit 1");
}
