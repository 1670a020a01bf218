#!/usr/bin/env bash
# A real kernel file system on the server: nbdfuse exposes the default export as a file,
# mkfs.btrfs formats it, mount -o loop mounts it; we write a source tree plus several
# identical large files, unmount, run btrfs check, remount and verify every checksum.
# Then the dedup shows: the x-dedupd:shared meta context reports the identical files'
# blocks as shared, and (with dedupd) `dedupd-ctl --json stats` counts them stored once.
# Needs root, /dev/fuse and loop devices; skips (77) otherwise.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires nbdfuse mkfs.btrfs btrfs mount umount fusermount3 sha256sum nbdinfo
[ "$(id -u)" -eq 0 ] || { echo "SKIP: $TEST_NAME: needs root for mount" >&2; exit 77; }
[ -c /dev/fuse ] || { echo "SKIP: $TEST_NAME: needs /dev/fuse" >&2; exit 77; }
grep -qw btrfs /proc/filesystems || modprobe btrfs 2>/dev/null ||
    { echo "SKIP: $TEST_NAME: kernel has no btrfs" >&2; exit 77; }
losetup -f >/dev/null 2>&1 || { echo "SKIP: $TEST_NAME: no free loop device" >&2; exit 77; }

nbd_server_start
FUSE_DIR="$TEST_TMP/fuse"
MNT="$TEST_TMP/mnt"
mkdir -p "$FUSE_DIR" "$MNT"
DISK="$FUSE_DIR/disk"

# Registered first, run last: whatever fails, nothing stays mounted or attached.
on_exit "fusermount3 -u '$FUSE_DIR' || umount -l '$FUSE_DIR'"
on_exit "umount '$MNT' || umount -l '$MNT'"

nbdfuse "$DISK" "$(nbd_uri default)" &
FUSE_PID=$!
on_exit "kill $FUSE_PID"
wait_until 20 test -f "$DISK" || fail "nbdfuse did not expose $DISK"
[ "$(stat -c %s "$DISK")" -eq $((1 << 30)) ] || fail "exposed file size $(stat -c %s "$DISK")"

mkfs.btrfs -q -f "$DISK" >"$TEST_TMP/mkfs.log" 2>&1 || fail "mkfs.btrfs: $(tail -3 "$TEST_TMP/mkfs.log")"
mount -o loop "$DISK" "$MNT" || fail "mount -o loop"

log "writing a source tree and identical large files"
mkdir -p "$MNT/tree"
SRC=/usr/include
cp -a "$SRC/." "$MNT/tree/" 2>/dev/null || fail "copy of $SRC"
head -c $((24 << 20)) /dev/urandom >"$TEST_TMP/big"
for i in 1 2 3 4; do cp "$TEST_TMP/big" "$MNT/big.$i"; done
(cd "$MNT" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$TEST_TMP/sums"
[ "$(wc -l <"$TEST_TMP/sums")" -gt 1000 ] || fail "tree too small: $(wc -l <"$TEST_TMP/sums") files"
umount "$MNT" || fail "umount"

btrfs check --readonly "$DISK" >"$TEST_TMP/check.log" 2>&1 || fail "btrfs check: $(tail -5 "$TEST_TMP/check.log")"

mount -o loop "$DISK" "$MNT" || fail "remount"
(cd "$MNT" && sha256sum --quiet -c "$TEST_TMP/sums") || fail "checksums differ after remount"
umount "$MNT" || fail "second umount"
fusermount3 -u "$FUSE_DIR" || fail "fusermount3 -u"
wait "$FUSE_PID" 2>/dev/null || true

# The four identical 24 MiB files hold 96 MiB of blocks shared with each other.
shared=$(nbdinfo --map=x-dedupd:shared "$(nbd_uri default)" |
         awk '$3 == 1 { s += $2 } END { print s + 0 }')
log "x-dedupd:shared reports $((shared >> 20)) MiB shared"
[ "$shared" -ge $((90 << 20)) ] || fail "only $shared bytes reported shared"

if [ -z "${NBD_TESTSRV:-}" ]; then
    ctl --json stats >"$TEST_TMP/stats.json" || fail "dedupd-ctl stats"
    py - "$TEST_TMP/stats.json" <<'PYEOF' || fail "dedup not visible in stats: $(cat "$TEST_TMP/stats.json")"
import json, sys
s = json.load(open(sys.argv[1]))
def find(d, key):
    if isinstance(d, dict):
        if key in d:
            return d[key]
        for v in d.values():
            r = find(v, key)
            if r is not None:
                return r
    return None
logical = find(s, "logical_bytes")
unique = find(s, "unique_bytes")
hits = find(s, "dedup_hits")
print("stats: logical %s unique %s hits %s" % (logical, unique, hits), file=sys.stderr)
# Three of the four 24 MiB copies are not stored again.
assert logical - unique >= 3 * (24 << 20) - (4 << 20), (logical, unique)
assert hits >= 3 * (24 << 20) // 4096 - 1024, hits
PYEOF
fi
nbd_alive || fail "server not answering"
nbd_server_stop
# nbd_enginesrv logs the engine's counters when it stops.
if line=$(grep -o 'stats logical_bytes=.*' "$TEST_TMP/dedupd.log"); then
    log "engine $line"
    logical=$(sed 's/.*logical_bytes=\([0-9]*\).*/\1/' <<<"$line")
    unique=$(sed 's/.*unique_bytes=\([0-9]*\).*/\1/' <<<"$line")
    [ $((logical - unique)) -ge $((3 * (24 << 20) - (4 << 20))) ] ||
        fail "engine stored the identical files more than once: $line"
fi
echo ok
