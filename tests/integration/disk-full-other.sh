#!/usr/bin/env bash
# A file system filled by another process: the data directory on a small tmpfs (256 MiB,
# a 16 MiB reserve), some data stored, then a file takes every free byte. New data is
# refused by the store's reserve check; writes of data already stored need only index
# room, which RocksDB has until a memtable flush needs a table file. Then writes, trims and
# flushes must fail with ENOSPC (not EIO, not a crash or a hang); once the file is deleted
# writes must be taken again without a restart (RocksDB retries on its own); everything
# acknowledged must read back, live and after a restart, and check must find no problem.
# A start while the file system is full must be refused with exit code 1 and a log line
# saying why, not abort.
# Needs root and permission to mount a tmpfs, and python3-libnbd; skips (77) otherwise,
# like disk-full.sh. On the CI machine it runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires_libnbd_python
small_fs 256M
STATE="$TEST_TMP/acked.json"
CLIENT="$(dirname "$0")/disk_full_other.py"
client() { timeout 240 "$NBD_PY" "$CLIENT" "$(nbd_uri)" "$STATE" "$@"; }

printf '[store]\nreserve_space = 16M\n' >"$TEST_TMP/dedupd.ini"
dd_start -c "$TEST_TMP/dedupd.ini" --default-export-size 1G
client store || fail "storing the first data"
# Another process takes every free byte (dd stops at ENOSPC).
dd if=/dev/zero of="$FS/filler" bs=1M >/dev/null 2>&1 || true
[ "$(stat -f -c %a "$FS")" -eq 0 ] || fail "the filler left free blocks"
client fill || fail "writes on the full file system"
kill -0 "$DD_PID" 2>/dev/null || fail "dedupd exited on the full file system"
grep -q "No space left on device" "$TEST_TMP/dedupd.log" ||
    fail "no log line names the full file system"
rm -f "$FS/filler"
client recover || fail "writes after the space came back"
client verify || fail "read back on the live server"
dd_stop
# A start on a file system filled to the last byte: refused with a clear error (RocksDB
# would abort the process on the first log line it cannot write).
dd if=/dev/zero of="$FS/filler" bs=1M >/dev/null 2>&1 || true
dd if=/dev/zero of="$FS/filler2" bs=4k >/dev/null 2>&1 || true
rc=0
timeout 60 "$DEDUPD_BIN" -d "$DD_DIR" -l "127.0.0.1:$(free_port)" -c "$TEST_TMP/dedupd.ini" \
    >>"$TEST_TMP/dedupd.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "a start on the full file system exited with $rc, not 1"
grep -q "free some space and start again" "$TEST_TMP/dedupd.log" ||
    fail "no log line says why the start was refused"
rm -f "$FS/filler" "$FS/filler2"
dd_start -c "$TEST_TMP/dedupd.ini"
client verify || fail "read back after a restart"
OUT="$TEST_TMP/check.json"
ctl --json check >"$OUT" || fail "check: $(cat "$OUT")"
"$NBD_PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["problems"] != 0)' "$OUT" ||
    fail "check after the full file system: $(cat "$OUT")"
dd_stop
log "ok"
