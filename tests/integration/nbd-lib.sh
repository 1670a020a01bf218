# nbd-lib.sh: sourced by the nbd-*.sh scripts after lib.sh.
#   nbd_server_start [ARGS...]  start the server under test with a 1 GiB "default" export
#                               and a 16 MiB read-only "ro" export; sets
#                               DD_PORT, DD_SOCK, DD_PID and NBD_HAVE_RO (1 or 0)
#   nbd_server_stop             SIGTERM, bounded wait, exit code 0 required
#   nbd_server_kill             SIGKILL (a crash)
#   nbd_server_restart [ARGS]   start again on the same data directory
#   py FILE ARGS...             run a Python script with the system python3 (python3-libnbd)
#   run_nbdsh ARGS...           nbdsh with that python3
# The server under test is dedupd, or — when NBD_TESTSRV names it — nbd_testsrv (the NBD
# module on the in-memory fake engine) or nbd_enginesrv (on the real engine, in DD_DIR).

NBD_PY=/usr/bin/python3
NBD_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

py() { "$NBD_PY" "$@"; }
# nbdsh runs "python3" from PATH; the system one has the nbd module.
run_nbdsh() { PATH="/usr/bin:$PATH" nbdsh "$@"; }

requires_libnbd_python() {
    "$NBD_PY" -c 'import nbd' 2>/dev/null || { echo "SKIP: $TEST_NAME: needs python3-libnbd" >&2; exit 77; }
}

nbd_server_start() {
    NBD_HAVE_RO=0
    _nbd_launch "$@"
    if [ -z "${NBD_TESTSRV:-}" ]; then
        ctl export create ro 16M --read-only >/dev/null || fail "dedupd-ctl export create ro"
    fi
    NBD_HAVE_RO=1
}

# Starts the same server again on the same data directory (after nbd_server_kill).
nbd_server_restart() { _nbd_launch "$@"; }

nbd_server_kill() { dd_kill; }

_nbd_launch() {
    # A killed server leaves its socket files: remove them so that the waits below see
    # the new server's, not the old ones.
    rm -f "$TEST_TMP/nbd.sock" "$DD_DIR/ctl.sock"
    if [ -n "${NBD_TESTSRV:-}" ]; then
        DD_PORT=$(free_port)
        DD_SOCK="$TEST_TMP/nbd.sock"
        mkdir -p "$DD_DIR"
        "$NBD_TESTSRV" -d "$DD_DIR" -l "127.0.0.1:$DD_PORT" -l "unix:$DD_SOCK" -e default:1G \
            -e ro:16M:4K:ro --log-level "${DD_LOG_LEVEL:-info}" "$@" \
            >>"$TEST_TMP/dedupd.log" 2>&1 &
        DD_PID=$!
        on_exit "kill -9 $DD_PID"
        wait_until 20 test -S "$DD_SOCK" || fail "nbd_testsrv did not start listening"
    else
        dd_start --default-export-size 1G "$@"
    fi
}

nbd_server_stop() { dd_stop; }

# The server must still answer: a cheap liveness and correctness probe.
nbd_alive() {
    nbdinfo --size "$(nbd_uri default)" >/dev/null 2>&1
}
