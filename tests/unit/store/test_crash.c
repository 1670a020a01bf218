/* Crash test: a child process writes and syncs in a loop and is killed with SIGKILL at a
 * seeded random moment; the parent reopens the store and checks that every block synced
 * before the kill reads back bit-exact (blocks written after may hold any value written
 * since), that check reports no problem and scrub no error. Repeated over several rounds,
 * each starting from what the previous kill left. The child also compacts now and then.
 * It reports each block write over a pipe before committing it and each completed sync
 * after it returns. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "workload.h"

#define ROUNDS 10

STORE_SUITE(crash);

struct msg {
    uint32_t kind; /* 'W' write intent, 'S' sync completed */
    uint32_t blk;
    uint64_t seed;
};

static void
send_msg(int fd, uint32_t kind, uint32_t blk, uint64_t seed)
{
    struct msg m = {kind, blk, seed};
    if (write(fd, &m, sizeof(m)) != sizeof(m))
        _exit(3);
}

static void
child_note(void *arg, unsigned blk, uint64_t seed)
{
    send_msg(*(int *) arg, 'W', blk, seed);
}

static void __attribute__((noreturn)) child(int fd, uint64_t rng, uint64_t next_seed)
{
    struct store_options o = {.seg_bytes = 128 << 10};
    struct store *st = NULL;
    if (store_open(dir, &o, &st) != 0)
        _exit(2);
    for (int t = 0; t < 20000; t++) {
        if (wl_txn(st, &rng, &next_seed, child_note, &fd) != 0)
            _exit(4);
        if (wl_rand(&rng) % 4 == 0) {
            if (store_sync(st) != 0)
                _exit(5);
            send_msg(fd, 'S', 0, 0);
        }
        /* Compaction now and then, so kills also land in the middle of moving records
         * and deleting segments. */
        if (wl_rand(&rng) % 16 == 0 && store_compact(st, true, NULL, NULL, NULL) != 0)
            _exit(6);
    }
    store_close(st);
    _exit(0);
}

static unsigned syncs_total, writes_total;

static void
apply(struct wl_model *m, const struct msg *msg)
{
    if (msg->kind == 'S') {
        wl_note_sync(m);
        syncs_total++;
    } else if (msg->kind == 'W' && msg->blk < WL_BLOCKS) {
        wl_note_write(m, msg->blk, msg->seed);
        writes_total++;
    }
}

static struct msg buf[256];
static size_t have; /* bytes of a partial message carried over between drains */

static unsigned
drain(int fd, struct wl_model *m, int timeout_ms, unsigned until_syncs)
{
    unsigned n = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long spent = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
        if ((timeout_ms >= 0 && spent >= timeout_ms) || (until_syncs && syncs_total >= until_syncs))
            return n;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = timeout_ms < 0 ? 5000 : (int) (timeout_ms - spent);
        if (poll(&p, 1, left) <= 0)
            return n;
        ssize_t r = read(fd, (char *) buf + have, sizeof(buf) - have);
        if (r <= 0)
            return n;
        have += (size_t) r;
        size_t whole = have / sizeof(struct msg);
        for (size_t i = 0; i < whole; i++, n++)
            apply(m, &buf[i]);
        memmove(buf, (char *) buf + whole * sizeof(struct msg), have % sizeof(struct msg));
        have %= sizeof(struct msg);
    }
}

Test(crash, sigkill_at_random_moments_loses_nothing_synced)
{
    struct wl_model model = {0};
    uint64_t rng = 0x5eed;
    for (int round = 0; round < ROUNDS; round++) {
        int p[2];
        cr_assert_eq(pipe(p), 0);
        have = 0;
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0) {
            close(p[0]);
            child(p[1], rng + (uint64_t) round * 977, (uint64_t) (round + 1) * 1000000);
        }
        close(p[1]);
        /* Odd rounds: kill 10..300 ms (seeded) after the start, which may land in open or
         * recovery. Even rounds: wait (at most 10 s) until the child has completed a sync,
         * then kill it 0..200 ms later, so every run has synced data to lose. */
        if (round % 2 == 0)
            drain(p[0], &model, 10000, syncs_total + 1);
        int run_ms = round % 2 ? 10 + (int) (wl_rand(&rng) % 290) : (int) (wl_rand(&rng) % 200);
        drain(p[0], &model, run_ms, 0);
        kill(pid, SIGKILL);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0),
                  "round %d: child failed with status %d", round, status);
        drain(p[0], &model, -1, 0);
        close(p[0]);

        struct store *st = NULL;
        cr_assert_eq(store_open(dir, NULL, &st), 0, "round %d: reopen failed", round);
        uint64_t now[WL_BLOCKS];
        wl_verify(st, &model, false, now);
        for (unsigned i = 0; i < WL_BLOCKS; i++) {
            model.b[i].synced = now[i];
            model.b[i].npost = 0;
            model.b[i].overflow = false;
        }
        struct store_check_result cr;
        cr_assert_eq(store_check(st, false, NULL, NULL, NULL, &cr), 0);
        cr_assert_eq(cr.problems, 0, "round %d: check found problems", round);
        struct store_scrub_result sr;
        cr_assert_eq(store_scrub(st, NULL, NULL, NULL, &sr), 0);
        cr_assert_eq(sr.crc_errors + sr.hash_errors + sr.io_errors, 0);
        store_close(st);
    }
    /* The test proves something only if syncs completed before kills. */
    cr_assert_geq(syncs_total, ROUNDS / 2, "only %u syncs completed", syncs_total);
    cr_log_info("crash: %u block writes, %u syncs over %d kills", writes_total, syncs_total,
                ROUNDS);
}
