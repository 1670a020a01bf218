#!/usr/bin/env bash
# NBD_FLAG_CAN_MULTI_CONN is a promise: a FLUSH on one connection makes the writes already
# answered on every connection durable. Four connections write, a fifth flushes, the
# server is killed (SIGKILL) and restarted on the same data directory: every write must
# be there. SIGKILL loses what the process held (its buffers, RocksDB memtables without a
# synced WAL), not the kernel's page cache: a power cut is the store's own tests' job.
# Needs a persistent server (dedupd or nbd_enginesrv); skips on nbd_testsrv.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nbd-lib.sh"
requires_libnbd_python
case "${NBD_TESTSRV:-}" in
*nbd_testsrv) echo "SKIP: $TEST_NAME: the fake engine does not persist" >&2; exit 77 ;;
esac

nbd_server_start
py - "$(nbd_uri default)" "$TEST_TMP/expect" write <<'PYEOF' || fail "writes on four connections"
import hashlib, random, sys
import nbd
uri, path = sys.argv[1], sys.argv[2]
hs = []
for i in range(5):
    h = nbd.NBD()
    h.connect_uri(uri)
    assert h.can_multi_conn(), "CAN_MULTI_CONN not offered"
    hs.append(h)
rnd = random.Random(7)
expect = []
for i in range(64):
    data = rnd.randbytes(65536)
    off = (i * 3 + 1) * 65536 + (i % 7) * 512   # unaligned too: read-modify-write
    hs[i % 4].pwrite(data, off)                 # answered, not yet flushed
    expect.append((off, hashlib.sha256(data).hexdigest()))
hs[4].flush()                                   # the one flush, on another connection
with open(path, "w") as f:
    for off, d in expect:
        f.write("%d %s\n" % (off, d))
PYEOF
nbd_server_kill
nbd_server_restart
py - "$(nbd_uri default)" "$TEST_TMP/expect" <<'PYEOF' || fail "writes lost after the kill"
import hashlib, sys
import nbd
uri, path = sys.argv[1], sys.argv[2]
h = nbd.NBD()
h.connect_uri(uri)
for line in open(path):
    off, d = line.split()
    got = hashlib.sha256(h.pread(65536, int(off))).hexdigest()
    assert got == d, "write at %s lost" % off
print("all 64 writes survived the kill")
PYEOF
nbd_server_stop
echo ok
