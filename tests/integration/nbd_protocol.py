"""nbd_protocol.py URI UNIX_SOCKET HAVE_RO: protocol checks through libnbd (python3-libnbd),
run by nbd-nbdsh.sh. Options (LIST, INFO, GO, meta contexts), structured replies (holes),
block status of base:allocation and x-dedupd:shared, FUA, zeroes, trim, cache, simple
replies, out-of-range and read-only errors with libnbd's client-side checks turned off.
Exits non-zero with a message on the first failed check."""
import errno
import random
import sys

import nbd

URI, SOCK, HAVE_RO = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
MiB = 1 << 20
SHARED, ZERO = 1, 2  # x-dedupd:shared status bits (docs/nbd.md)


def check(cond, msg):
    if not cond:
        print("FAIL:", msg, file=sys.stderr)
        sys.exit(1)


def expect_error(fn, err, what):
    try:
        fn()
    except nbd.Error as e:
        check(e.errnum == err, "%s: errno %s, want %s (%s)" % (what, e.errnum, err, e))
        return
    check(False, "%s: succeeded" % what)


def handle(export="default", structured=True, contexts=(), opt_mode=False):
    h = nbd.NBD()
    h.set_export_name(export)
    h.set_request_structured_replies(structured)
    for c in contexts:
        h.add_meta_context(c)
    if opt_mode:
        h.set_opt_mode(True)
    h.connect_unix(SOCK)
    return h


# ---- options ----
h = handle(opt_mode=True)
names = []
h.opt_list(lambda name, desc: names.append(name))
check("default" in names, "opt_list: %r" % names)
check(not HAVE_RO or "ro" in names, "opt_list misses ro: %r" % names)
ctx = []
h.opt_list_meta_context(lambda name: ctx.append(name))
check(sorted(ctx) == ["base:allocation", "x-dedupd:shared"], "contexts %r" % ctx)
h.set_full_info(True)
h.set_export_name("")
h.opt_info()
check(h.get_size() == 1 << 30, "opt_info size")
check(h.get_canonical_export_name() == "default", "canonical name %r" % h.get_canonical_export_name())
check("dedupd" in (h.get_export_description() or ""), "description")
check(h.get_block_size(nbd.SIZE_MINIMUM) == 1, "min block size")
check(h.get_block_size(nbd.SIZE_PREFERRED) == 4096, "preferred block size")
check(h.get_block_size(nbd.SIZE_MAXIMUM) == 32 * MiB, "max block size")
h.set_export_name("no-such-export")
try:
    h.opt_info()
    check(False, "opt_info of a missing export succeeded")
except nbd.Error:
    pass
h.set_export_name("default")
h.opt_go()
check(h.get_structured_replies_negotiated(), "structured replies")
check(h.can_multi_conn() and h.can_flush() and h.can_fua() and h.can_trim() and h.can_zero()
      and h.can_fast_zero() and h.can_cache() and h.can_df(), "transmission flags")
check(not h.is_read_only(), "default is writable")
h.shutdown()

# ---- structured replies: data, holes, DF ----
h = handle(contexts=("base:allocation", "x-dedupd:shared"))
check(h.can_meta_context("base:allocation"), "base:allocation negotiated")
check(h.can_meta_context("x-dedupd:shared"), "x-dedupd:shared negotiated")
rnd = random.Random(5)
a = rnd.randbytes(64 * 1024)  # no two 4 KiB chunks alike
b = rnd.randbytes(64 * 1024)
h.pwrite(a, 0)
h.pwrite(b, 64 * 1024, nbd.CMD_FLAG_FUA)
h.pwrite(a, 256 * 1024)          # same bytes as [0, 64K): shared
check(h.pread(64 * 1024, 256 * 1024) == a, "read back")
chunks = []
h.pread_structured(512 * 1024, 0,
                   lambda buf, off, st, err: chunks.append((off, len(buf), st)) or 0)
holes = [c for c in chunks if c[2] == nbd.READ_HOLE]
data = [c for c in chunks if c[2] == nbd.READ_DATA]
check(sum(c[1] for c in chunks) == 512 * 1024, "structured read covers the request")
check((128 * 1024, 128 * 1024, nbd.READ_HOLE) in holes, "hole [128K,256K): %r" % chunks)
check(sum(c[1] for c in data) == 192 * 1024, "data chunks: %r" % chunks)
chunks = []
h.pread_structured(512 * 1024, 0,
                   lambda buf, off, st, err: chunks.append((off, len(buf), st)) or 0,
                   nbd.CMD_FLAG_DF)
check(len(chunks) == 1 and chunks[0][2] == nbd.READ_DATA, "DF: one data chunk %r" % chunks)

# ---- block status, both contexts ----
seen = {}


def extent_cb(meta, off, entries, err):
    seen[meta] = list(zip(entries[0::2], entries[1::2]))
    return 0


h.block_status(512 * 1024, 0, extent_cb)
base = seen["base:allocation"]
ours = seen["x-dedupd:shared"]
check(base[0] == (128 * 1024, 0), "base: data first %r" % base)
check(base[1] == (128 * 1024, nbd.STATE_HOLE | nbd.STATE_ZERO), "base: hole %r" % base)
check(ours[0] == (64 * 1024, SHARED), "ours: shared first %r" % ours)
check(ours[1] == (64 * 1024, 0), "ours: unique second %r" % ours)
check(ours[2] == (128 * 1024, ZERO), "ours: zero third %r" % ours)
check(ours[3] == (64 * 1024, SHARED), "ours: shared copy %r" % ours)
seen.clear()
h.block_status(512 * 1024, 0, extent_cb, nbd.CMD_FLAG_REQ_ONE)
check(len(seen["base:allocation"]) == 1 and len(seen["x-dedupd:shared"]) == 1, "REQ_ONE %r" % seen)

# ---- zeroes, trim, cache, flush ----
h.zero(64 * 1024, 0, nbd.CMD_FLAG_NO_HOLE | nbd.CMD_FLAG_FAST_ZERO)
check(h.pread(64 * 1024, 0) == bytes(64 * 1024), "zeroed")
h.zero(1000, 64 * 1024 + 10)
check(h.pread(1000, 64 * 1024 + 10) == bytes(1000), "unaligned zero")
check(h.pread(10, 64 * 1024) == b[:10], "bytes before the unaligned zero kept")
h.trim(64 * 1024, 256 * 1024, nbd.CMD_FLAG_FUA)
check(h.pread(64 * 1024, 256 * 1024) == bytes(64 * 1024), "trimmed reads as zeros")
h.cache(MiB, 0)
h.flush()

# ---- errors past the end, with libnbd's own checks off ----
h.pwrite(b"sync", 8 * MiB)
h.set_strict_mode(0)
size = h.get_size()
expect_error(lambda: h.pread(4096, size - 100), errno.EINVAL, "read past the end")
expect_error(lambda: h.pwrite(b"x" * 4096, size - 100), errno.ENOSPC, "write past the end")
expect_error(lambda: h.trim(4096, size), errno.EINVAL, "trim past the end")
expect_error(lambda: h.zero(4096, size), errno.ENOSPC, "zero past the end")
expect_error(lambda: h.block_status(4096, size, extent_cb), errno.EINVAL, "status past the end")
expect_error(lambda: h.pread(33 * MiB, 0), errno.EINVAL, "read over the maximum payload")
check(h.pread(4, 8 * MiB) == b"sync", "still in sync after errors")
h.shutdown()

# ---- simple replies (no structured replies) ----
h = handle(structured=False)
check(not h.get_structured_replies_negotiated(), "structured off")
check(not h.can_df(), "no DF without structured replies")
check(h.pread(4, 8 * MiB) == b"sync", "simple read")
h.set_strict_mode(0)
expect_error(lambda: h.pread(4096, h.get_size()), errno.EINVAL, "simple read past the end")
check(h.pread(4, 8 * MiB) == b"sync", "simple replies in sync after an error")
h.shutdown()

# ---- read-only export ----
if HAVE_RO:
    h = handle("ro")
    check(h.is_read_only(), "ro is read-only")
    check(not h.can_trim() and not h.can_zero(), "no trim/zero on ro")
    h.set_strict_mode(0)
    expect_error(lambda: h.pwrite(b"x" * 512, 0), errno.EPERM, "write to ro")
    check(h.pread(512, 0) == bytes(512), "ro reads")
    h.shutdown()

# ---- many commands in flight on one connection ----
h = handle()
bufs = [nbd.Buffer(4096) for _ in range(64)]
cookies = [h.aio_pread(bufs[i], i * 4096) for i in range(64)]
pending = set(cookies)
while pending:
    h.poll(-1)
    pending = {c for c in pending if not h.aio_command_completed(c)}
for i in (0, 63):
    check(bytes(bufs[i].to_bytearray()) == h.pread(4096, i * 4096), "aio read %d" % i)
h.shutdown()

# ---- reads racing writes on two connections, checked against a model ----
# Small reads are answered on the server's event loop when everything they need is cached,
# else by a worker; writes in flight to other ranges must never disturb either path, and a
# read after a completed write must see it (also at sub-chunk offsets and across chunks).
BASE, SPAN = 8 << 20, 64 * 4096
model = bytearray(SPAN)
w, r = handle(), handle()
w.zero(SPAN, BASE) if w.can_zero() else w.pwrite(bytes(SPAN), BASE)
mrnd = random.Random(11)


def wait_all(hs_cookies):
    for hh, cs in hs_cookies:
        pending = set(cs)
        while pending:
            hh.poll(-1)
            pending = {c for c in pending if not hh.aio_command_completed(c)}


for rnd_i in range(150):
    writes, touched = [], set()
    for _ in range(6):  # in flight together: on disjoint chunks, so any order gives one result
        off = mrnd.randrange(0, SPAN - 8192)
        ln = mrnd.choice((512, 4096, 5000, 8192))
        blocks = set(range(off // 4096, (off + ln - 1) // 4096 + 1))
        if touched & blocks:
            continue
        writes.append((off, mrnd.randbytes(ln)))
        touched |= blocks
    reads = []
    for _ in range(10):
        off = mrnd.randrange(0, SPAN - 9000)
        ln = mrnd.choice((512, 4096, 4097, 9000))
        if touched & set(range(off // 4096, (off + ln - 1) // 4096 + 1)):
            continue
        reads.append((off, nbd.Buffer(ln)))
    wc = [w.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(d)), BASE + o) for o, d in writes]
    rc = [r.aio_pread(b, BASE + o) for o, b in reads]
    wait_all([(w, wc), (r, rc)])
    for o, b in reads:
        got = bytes(b.to_bytearray())
        check(got == bytes(model[o:o + len(got)]), "round %d: read %d+%d" % (rnd_i, o, len(got)))
    for o, d in writes:
        model[o:o + len(d)] = d
    o = mrnd.randrange(0, SPAN - 8192)
    check(r.pread(8192, BASE + o) == bytes(model[o:o + 8192]), "round %d: read after" % rnd_i)
check(r.pread(SPAN, BASE) == bytes(model), "whole span matches the model")
w.shutdown()
r.shutdown()
print("ok")
