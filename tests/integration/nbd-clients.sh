#!/usr/bin/env bash
# Real NBD clients against the server: nbdinfo --list/--json, nbdcopy of a few hundred MiB
# in and out over 4 connections (compared with cmp and qemu-img compare), qemu-io writes,
# reads, discards and zeroes with pattern checks, over TCP and the Unix socket.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires nbdinfo nbdcopy qemu-img qemu-io
requires_libnbd_python

nbd_server_start
URI=$(nbd_uri default)

# ---- nbdinfo ----
nbdinfo --list "$URI" >"$TEST_TMP/list" || fail "nbdinfo --list"
grep -q 'export="default"' "$TEST_TMP/list" || fail "list misses default"
grep -q 'x-dedupd:shared' "$TEST_TMP/list" || fail "list misses x-dedupd:shared"
nbdinfo --json "$URI" >"$TEST_TMP/info.json" || fail "nbdinfo --json"
py - "$TEST_TMP/info.json" <<'PYEOF' || fail "nbdinfo --json content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["protocol"] == "newstyle-fixed", d["protocol"]
assert d["structured"] is True
e = d["exports"][0]
assert e["export-size"] == 1 << 30, e["export-size"]
assert set(e["contexts"]) == {"base:allocation", "x-dedupd:shared"}, e["contexts"]
for k in ("can_flush", "can_fua", "can_trim", "can_zero", "can_fast_zero", "can_multi_conn",
          "can_cache", "can_df"):
    assert e[k] is True, k
assert e["is_read_only"] is False
assert e["block_size_minimum"] == 1
assert e["block_size_preferred"] == 4096
assert e["block_size_maximum"] == 32 << 20
PYEOF
# The empty name is the default export, over the Unix socket too.
[ "$(nbdinfo --size "nbd+unix:///?socket=$DD_SOCK")" = $((1 << 30)) ] || fail "default export by empty name"
if [ "$NBD_HAVE_RO" = 1 ]; then
    nbdinfo --json "$(nbd_uri ro)" | grep -q '"is_read_only": true' || fail "ro export not read-only"
fi
if nbdinfo "$(nbd_uri no-such-export)" >/dev/null 2>&1; then fail "unknown export accepted"; fi

# ---- nbdcopy in and out ----
MB=${NBD_COPY_MB:-256}
log "making a ${MB} MiB image with zero runs and duplicate regions"
py - "$TEST_TMP/in.img" "$MB" <<'PYEOF'
import os, random, sys
path, mb = sys.argv[1], int(sys.argv[2])
rnd = random.Random(1234)
block = 1 << 20
dup = rnd.randbytes(4 * block)
with open(path, "wb") as f:
    for i in range(mb):
        k = i % 16
        if k in (3, 4):
            f.write(bytes(block))                 # zero runs: holes on the way back
        elif k in (8, 9, 10, 11):
            f.write(dup[(k - 8) * block:(k - 7) * block])  # repeated: dedups
        else:
            f.write(rnd.randbytes(block))
PYEOF
nbdcopy --connections=4 --threads=4 "$TEST_TMP/in.img" "$URI" || fail "nbdcopy in"
nbdcopy --connections=4 --threads=4 "$URI" "$TEST_TMP/out.img" || fail "nbdcopy out"
cmp -n $((MB << 20)) "$TEST_TMP/in.img" "$TEST_TMP/out.img" || fail "nbdcopy round trip differs"
# Past the copied image the export reads as zeros.
cmp -i $((MB << 20)) -n $((8 << 20)) "$TEST_TMP/out.img" /dev/zero || fail "tail not zero"
# The export is bigger than the image: qemu-img checks that the rest reads as zeros.
qemu-img compare -q -f raw -F raw "$TEST_TMP/in.img" "$URI" || fail "qemu-img compare: $?"
rm -f "$TEST_TMP/out.img"
# Over the Unix socket, with a single connection and structured replies off on the way out.
nbdcopy "nbd+unix:///default?socket=$DD_SOCK" "$TEST_TMP/out2.img" || fail "nbdcopy unix out"
cmp -n $((MB << 20)) "$TEST_TMP/in.img" "$TEST_TMP/out2.img" || fail "unix copy differs"
rm -f "$TEST_TMP/out2.img"

# ---- qemu-io ----
QIO="$TEST_TMP/qemu-io.out"
qemu-io -f raw \
    -c 'write -P 0xa5 0 1M' -c 'read -P 0xa5 0 1M' \
    -c 'write -P 0x11 1000 5000' -c 'read -P 0x11 1000 5000' -c 'read -P 0xa5 6000 1000' \
    -c 'discard 0 64k' -c 'read -P 0 0 64k' \
    -c 'write -z 512k 256k' -c 'read -P 0 512k 256k' -c 'read -P 0xa5 768k 256k' \
    -c 'write -f -P 0x22 2M 64k' -c 'read -P 0x22 2M 64k' \
    -c 'flush' \
    "$URI" >"$QIO" 2>&1 || fail "qemu-io failed: $(tail -3 "$QIO")"
if grep -qi 'fail\|error\|verification' "$QIO"; then fail "qemu-io: $(grep -i 'fail\|error\|verification' "$QIO" | head -3)"; fi
if [ "$NBD_HAVE_RO" = 1 ]; then
    if qemu-io -f raw -c 'write 0 4k' "$(nbd_uri ro)" >"$QIO" 2>&1 && ! grep -qi 'error\|denied\|not permitted\|read-only' "$QIO"; then
        fail "write to a read-only export succeeded"
    fi
fi

nbd_alive || fail "server not answering at the end"
nbd_server_stop
echo ok
