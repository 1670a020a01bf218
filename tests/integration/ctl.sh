#!/usr/bin/env bash
# dedupd-ctl against a running dedupd: every command, its JSON fields and exit codes;
# enable/disable survive a restart; malformed, old-version and oversized requests get an
# error and leave the server serving. Writes through NBD (libnbd's Python module) when
# available so that stats, gc, scrub and check see real data; without it those parts check
# shapes only.
. "$(dirname "$0")/lib.sh"
requires /usr/bin/python3

PY=/usr/bin/python3

# jget FILE EXPR: evaluate a Python expression on the JSON document `j` read from FILE.
jget() { "$PY" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
# expect_rc WANT CMD...: run CMD, fail unless it exits WANT; stdout in $OUT, stderr in $ERR.
OUT="$TEST_TMP/out"
ERR="$TEST_TMP/err"
expect_rc() {
    local want=$1; shift
    local rc=0
    "$@" >"$OUT" 2>"$ERR" || rc=$?
    [ "$rc" -eq "$want" ] || { cat "$OUT" "$ERR" >&2; fail "'$*' exited $rc, want $want"; }
}

# raw_frame HEX_BODY | LEN_OVERRIDE: send one frame to the control socket and print the
# server's reply as "status=N closed=0|1" (N = -1 when no reply came).
raw_frame() {
    "$PY" - "$DD_CTL" "$@" <<'EOF'
import socket, struct, sys
path, body = sys.argv[1], bytes.fromhex(sys.argv[2])
length = int(sys.argv[3]) if len(sys.argv) > 3 else len(body)
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(path)
s.sendall(struct.pack(">I", length) + body)
def read(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            return None
        b += c
    return b
status = -1
hdr = read(4)
if hdr:
    msg = read(struct.unpack(">I", hdr)[0]) or b""
    # Response.status is field 1 (varint): absent means 0.
    status, i = 0, 0
    while i < len(msg):
        key = msg[i]; i += 1
        if key == 0x08:
            v, shift = 0, 0
            while True:
                c = msg[i]; i += 1
                v |= (c & 0x7f) << shift; shift += 7
                if not c & 0x80:
                    break
            status = v
            break
        else:
            break
# Closed? A short wait for EOF.
s.settimeout(2)
try:
    closed = int(s.recv(1) == b"")
except socket.timeout:
    closed = 0
print(f"status={status} closed={closed}")
EOF
}

# A killed server leaves its socket files, so wait for an answer, not for the file.
dd_start_ready() {
    dd_start "$@"
    wait_until 20 ctl status || fail "dedupd control socket does not answer"
}

dd_start_ready

# ---- usage and connection errors ----
expect_rc 2 "$DEDUPD_CTL_BIN" -s "$DD_CTL" frobnicate
grep -q "^dedupd-ctl: unknown command" "$ERR" || fail "unknown command message"
expect_rc 2 ctl enable --storage-backend floppy
expect_rc 2 ctl export create onlyname
expect_rc 1 "$DEDUPD_CTL_BIN" -s "$TEST_TMP/nope.sock" status
grep -q "cannot connect" "$ERR" || fail "connection error message"
for c in status stats enable disable export gc scrub check; do
    expect_rc 0 ctl "$c" --help
    grep -q "^Usage: dedupd-ctl $c" "$OUT" || fail "$c --help"
done

# ---- status ----
expect_rc 0 ctl status
grep -q "^dedup: *enabled" "$OUT" || fail "status table: $(cat "$OUT")"
expect_rc 0 ctl --json status
cp "$OUT" "$TEST_TMP/status.json"
for k in enabled backend hash verify default_chunk_size limit_nr limit_mem index_entries \
    index_bytes memory_at_limit rocksdb_index_estimate unique_chunks exports nbd_connections \
    nbd_loops uptime_sec version protocol sync_error filter_bytes filter_building_bytes \
    filter_builds filter_skips; do
    [ "$(jget "$TEST_TMP/status.json" "'$k' in j")" = True ] || fail "status JSON lacks $k"
done
[ "$(jget "$TEST_TMP/status.json" "j['enabled']")" = True ] || fail "dedup on by default"
[ "$(jget "$TEST_TMP/status.json" "j['memory_at_limit'] > 0")" = True ] || fail "memory estimate"
[ "$(jget "$TEST_TMP/status.json" "j['sync_error']")" = 0 ] || fail "a healthy store reports no sync error"
# Default connection loops: one per CPU, at most 4 (nproc and libuv both follow the affinity).
want_loops=$(nproc); [ "$want_loops" -gt 4 ] && want_loops=4
[ "$(jget "$TEST_TMP/status.json" "j['nbd_loops']")" = "$want_loops" ] ||
    fail "status: nbd_loops $(jget "$TEST_TMP/status.json" "j['nbd_loops']"), want $want_loops"

# The rocksdb back-end's in-memory filter of its hashes, built in the background at start
# (at once for an empty store).
n=0
while :; do
    expect_rc 0 ctl --json status
    [ "$(jget "$OUT" "j['filter_bytes'] > 0 and j['filter_builds'] == 1")" = True ] && break
    n=$((n + 1))
    [ $n -lt 100 ] || fail "no hash filter 10 s after start: $(cat "$OUT")"
    sleep 0.1
done
expect_rc 0 ctl status
grep -q "^  in-memory filter: .*built 1 time," "$OUT" || fail "status table, filter: $(cat "$OUT")"

# ---- enable / disable, persisted across a restart ----
expect_rc 0 ctl --json disable
[ "$(jget "$OUT" "j['enabled']")" = False ] || fail "disable"
dd_stop
dd_start_ready
expect_rc 0 ctl --json status
[ "$(jget "$OUT" "j['enabled']")" = False ] || fail "disable did not survive a restart"
expect_rc 0 ctl --json enable -s memory -l 1000 -b 8K
[ "$(jget "$OUT" "(j['enabled'], j['backend'], j['limit_nr'], j['default_chunk_size'])")" \
    = "(True, 'memory', 1000, 8192)" ] || fail "enable -s memory: $(cat "$OUT")"
dd_stop
dd_start_ready
expect_rc 0 ctl --json status
[ "$(jget "$OUT" "(j['enabled'], j['backend'], j['limit_nr'])")" = "(True, 'memory', 1000)" ] ||
    fail "enable settings did not survive a restart: $(cat "$OUT")"
expect_rc 0 ctl --json enable -s rocksdb -b 4K
[ "$(jget "$OUT" "j['backend']")" = rocksdb ] || fail "back to rocksdb"
expect_rc 1 ctl enable -a xxh3 --no-verify
grep -q "verify" "$ERR" || fail "xxh3 without verify must be refused"

# ---- exports ----
expect_rc 0 ctl --json export create vm1 64M --chunk-size 64K
[ "$(jget "$OUT" "(j['name'], j['size'], j['chunk_size'], j['dedup'])")" \
    = "('vm1', 67108864, 65536, True)" ] || fail "export create: $(cat "$OUT")"
expect_rc 1 ctl export create vm1 1G
grep -q "already exists" "$ERR" || fail "duplicate export message"
expect_rc 0 ctl --json export list
[ "$(jget "$OUT" "sorted(x['name'] for x in j['exports'])")" = "['default', 'vm1']" ] ||
    fail "export list: $(cat "$OUT")"
expect_rc 0 ctl export list
grep -q "^vm1 " "$OUT" || fail "export list table"
expect_rc 0 ctl --json export set vm1 dedup=off
[ "$(jget "$OUT" "j['dedup']")" = False ] || fail "export set dedup=off"
expect_rc 0 ctl --json export info vm1
[ "$(jget "$OUT" "j['dedup']")" = False ] || fail "export info after set"
expect_rc 0 ctl export set vm1 dedup=on
rc=0
ctl --json export clone vm1 vm1-copy >"$OUT" 2>"$ERR" || rc=$?
if [ "$rc" -eq 0 ]; then
    [ "$(jget "$OUT" "j['parent_id'] > 0")" = True ] || fail "clone has a parent"
    expect_rc 0 ctl export delete vm1-copy
elif ! grep -qi "not supported" "$ERR"; then
    fail "export clone failed: $(cat "$ERR")"
fi

# nbd_py URI CODE: run Python CODE with `h` connected to URI (libnbd; /usr/bin/python3 has
# the Debian module even when another python3 comes first in PATH, so no nbdsh).
nbd_py() {
    "$PY" -c 'import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
exec(sys.argv[2])
h.shutdown()' "$@"
}

# ---- data through NBD, when a client is available ----
have_nbd=0
if "$PY" -c 'import nbd' 2>/dev/null; then
    have_nbd=1
    # The same 64 KiB written twice to vm1 and once to default: one unique copy.
    nbd_py "$(nbd_unix_uri vm1)" '
buf = bytes(range(256)) * 256
h.pwrite(buf, 0)
h.pwrite(buf, 65536)
h.pwrite(bytes(65536), 131072)
h.flush()' || fail "NBD write to vm1"
    nbd_py "$(nbd_unix_uri default)" '
h.pwrite(bytes(range(256)) * 256, 0)
h.flush()' || fail "NBD write to default"
fi

# ---- stats ----
expect_rc 0 ctl stats
grep -q "^total " "$OUT" || fail "stats table: $(cat "$OUT")"
expect_rc 0 ctl --json stats
cp "$OUT" "$TEST_TMP/stats.json"
for k in exports total chunks chunks_shared segments live_bytes dead_bytes disk_bytes \
    compression_ratio; do
    [ "$(jget "$TEST_TMP/stats.json" "'$k' in j")" = True ] || fail "stats JSON lacks $k"
done
for k in logical_bytes zero_bytes unique_bytes dedup_ratio dedup_hits dedup_misses \
    verify_mismatches; do
    [ "$(jget "$TEST_TMP/stats.json" "'$k' in j['total']")" = True ] || fail "stats total lacks $k"
done
if [ "$have_nbd" = 1 ]; then
    # 4 x 64 KiB of the same non-zero bytes was written: logical >= 4x unique of it.
    [ "$(jget "$TEST_TMP/stats.json" "j['total']['logical_bytes'] >= 3 * 65536")" = True ] ||
        fail "logical bytes after writes: $(cat "$TEST_TMP/stats.json")"
    [ "$(jget "$TEST_TMP/stats.json" "j['total']['dedup_ratio'] >= 2")" = True ] ||
        fail "dedup ratio after identical writes: $(cat "$TEST_TMP/stats.json")"
fi
expect_rc 0 ctl --json stats vm1
[ "$(jget "$OUT" "[x['name'] for x in j['exports']]")" = "['vm1']" ] || fail "stats vm1"
expect_rc 1 ctl stats no-such-export
expect_rc 0 ctl --json stats --watch 1 --count 2
[ "$(grep -c '^}$' "$OUT")" -eq 2 ] || fail "stats --watch --count 2 printed $(grep -c '^}$' "$OUT") documents"

# ---- delete: refused while connected ----
if [ "$have_nbd" = 1 ]; then
    nbd_py "$(nbd_unix_uri vm1)" 'import time; time.sleep(4)' &
    holder=$!
    on_exit "kill $holder"
    wait_until 5 bash -c "'$DEDUPD_CTL_BIN' -s '$DD_CTL' --json export info vm1 | grep -q '\"connections\": [1-9]'" ||
        fail "the NBD connection never showed in export info"
    expect_rc 1 ctl export delete vm1
    grep -q "active connections" "$ERR" || fail "busy delete message: $(cat "$ERR")"
    wait "$holder" || true
fi
expect_rc 0 ctl export delete vm1
expect_rc 1 ctl export info vm1
grep -q "no export named 'vm1'" "$ERR" || fail "deleted export still there"
if [ "$have_nbd" = 1 ]; then
    # Gone for new NBD connections too, without a restart.
    ! nbd_py "$(nbd_unix_uri vm1)" 'pass' 2>/dev/null || fail "NBD still serves a deleted export"
fi

# ---- maintenance ----
expect_rc 0 ctl --json gc --force
for k in segments_compacted bytes_moved bytes_reclaimed disk_bytes_before disk_bytes_after; do
    [ "$(jget "$OUT" "'$k' in j")" = True ] || fail "gc JSON lacks $k"
done
expect_rc 0 ctl gc
grep -q "^gc: " "$OUT" || fail "gc summary"
expect_rc 0 ctl --json scrub
[ "$(jget "$OUT" "(j['crc_errors'], j['hash_errors'], j['io_errors'])")" = "(0, 0, 0)" ] ||
    fail "scrub of a healthy store: $(cat "$OUT")"
expect_rc 0 ctl --json check
[ "$(jget "$OUT" "j['problems']")" = 0 ] || fail "check of a healthy store: $(cat "$OUT")"
# Hash entries of freed chunks (vm1's, deleted above) are counted apart, not as problems.
[ "$(jget "$OUT" "j['hash_stale'] <= j['hash_entries']")" = True ] ||
    fail "check JSON: $(cat "$OUT")"
expect_rc 0 ctl check --repair
grep -q "ok" "$OUT" || fail "check summary"
grep -q "of freed chunks, dropped)" "$OUT" || fail "check --repair summary: $(cat "$OUT")"
expect_rc 0 ctl --json check
[ "$(jget "$OUT" "(j['hash_stale'], j['problems'])")" = "(0, 0)" ] ||
    fail "stale hash entries left after --repair: $(cat "$OUT")"

# ---- hostile requests leave the server serving ----
r=$(raw_frame "52ff01aa")                     # truncated protobuf
[ "${r%% *}" = "status=74" ] || fail "malformed request: $r (want EBADMSG 74)"
r=$(raw_frame "08635200")                     # version 99
[ "${r%% *}" = "status=93" ] || fail "old/new client: $r (want EPROTONOSUPPORT 93)"
r=$(raw_frame "" $((64 << 20)))               # 64 MiB announced, nothing sent
[ "$r" = "status=90 closed=1" ] || fail "oversized request: $r (want EMSGSIZE 90 and close)"
r=$(raw_frame "0801" )                        # no command
[ "${r%% *}" = "status=95" ] || fail "no command: $r (want EOPNOTSUPP 95)"
expect_rc 0 ctl status
expect_rc 0 ctl export list

# ---- the socket file: private, replaced when stale, removed at a clean stop ----
[ "$(stat -c %a "$DD_CTL")" = 600 ] || fail "control socket mode $(stat -c %a "$DD_CTL")"
dd_kill
[ -S "$DD_CTL" ] || fail "a killed server should leave its socket file (test premise)"
dd_start_ready
expect_rc 0 ctl --json status
[ "$(jget "$OUT" "j['backend']")" = rocksdb ] || fail "settings after a crash"

dd_stop
[ ! -e "$DD_CTL" ] || fail "control socket left behind after a clean stop"
echo "ok"
