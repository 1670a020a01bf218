#!/usr/bin/env bash
# A full disk: the data directory on a small tmpfs (256 MiB, a 96 MiB reserve), unique
# data written until the server refuses it. The refusal must be ENOSPC (not EIO, not a hang
# or a crash); writes needing no new space and a flush must still succeed; every
# acknowledged write must read back, live and after a clean stop and restart (new data
# stops at a reserve of free space so that RocksDB's log keeps room for the index entries
# of what was acknowledged); check must find no problem; after a trim of everything and a
# gc the export must take writes again.
# Needs root and permission to mount a tmpfs (a container without CAP_SYS_ADMIN has
# neither), and python3-libnbd; skips (77) otherwise. On the CI machine it runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires_libnbd_python
small_fs 256M
STATE="$TEST_TMP/acked.json"
CLIENT="$(dirname "$0")/disk_full.py"

# The reserve from the configuration file (the default is 64 MiB).
printf '[store]\nreserve_space = 96M\n' >"$TEST_TMP/dedupd.ini"
dd_start -c "$TEST_TMP/dedupd.ini" --default-export-size 1G
timeout 240 "$NBD_PY" "$CLIENT" "$(nbd_uri)" "$STATE" write || fail "writing until the disk is full"
kill -0 "$DD_PID" 2>/dev/null || fail "dedupd exited on a full disk"
grep -q "free space is down to the reserve of 96 MiB" "$TEST_TMP/dedupd.log" ||
    fail "no log line for the refusal at the configured reserve"
# dedupd-ctl status tells the operator why writes fail, and how much room is left.
refused() { # refused true|false: what status --json says of new data
    local st="$TEST_TMP/status.json"
    ctl --json status >"$st" || fail "status: $(cat "$st")"
    "$NBD_PY" - "$st" "$1" <<'EOF' || fail "status: $(cat "$st")"
import json, sys
d, want = json.load(open(sys.argv[1])), sys.argv[2] == "true"
ok = d["new_data_refused"] == want and d["reserve_bytes"] == 96 << 20
ok = ok and (not want or d["free_bytes"] < (96 << 20) + (1 << 20))  # refused near the reserve
sys.exit(not ok)
EOF
}
refused true
ctl status | grep -q "NEW DATA REFUSED" || fail "the status table does not say new data is refused"
timeout 120 "$NBD_PY" "$CLIENT" "$(nbd_uri)" "$STATE" verify || fail "read back on the live server"

dd_stop
dd_start -c "$TEST_TMP/dedupd.ini"
timeout 120 "$NBD_PY" "$CLIENT" "$(nbd_uri)" "$STATE" verify || fail "read back after a restart"
OUT="$TEST_TMP/check.json"
ctl --json check >"$OUT" || fail "check: $(cat "$OUT")"
"$NBD_PY" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["problems"] != 0)' "$OUT" ||
    fail "check after the full disk: $(cat "$OUT")"

# Space comes back: everything trimmed, then compacted away; the export takes writes again.
TRIM='import nbd, sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); h.trim(h.get_size(), 0); h.flush()'
"$NBD_PY" -c "$TRIM" "$(nbd_uri)" || fail "trim of the whole export"
ctl gc --force >/dev/null 2>&1 || fail "gc after the trim"
timeout 60 "$NBD_PY" "$CLIENT" "$(nbd_uri)" "$STATE" refill || fail "a write after space was freed"
refused false
dd_stop
log "ok"
