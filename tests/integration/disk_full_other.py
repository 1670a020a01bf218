"""disk_full_other.py URI STATE store|fill|recover|verify: the client side of
disk-full-other.sh, where another process fills the file system the store is on.

store: 40 MiB of unique data at offset 0 in 4 MiB writes, flushed.
fill (the file system is now full): the stored blocks written again elsewhere, cycling
through 149 offsets so that no write repeats what its offset holds. They need no segment
space, only room for the index, which RocksDB takes from its preallocated log until a
memtable flush needs a new table file. At most 1500 writes; one must fail, and with
ENOSPC (not EIO), as must the trims and the flush after it.
recover (space was freed): writes must be taken again within 60 s, without a restart.
verify: what every offset last acknowledged reads back (a failed write leaves its range
unknown, so it is dropped from STATE)."""
import errno
import json
import random
import sys
import time

import nbd

MIB = 1 << 20
BLOCK = 4 * MIB
STORED = 10  # blocks written by "store"
FILL_BASE, FILL_SLOTS = 64 * MIB, 149


def data(seed, n):
    return random.Random(seed).randbytes(n)


def is_enospc(e):
    # python3-libnbd gives the errno as its name in some versions, a number in others
    return e.errno in (errno.ENOSPC, "ENOSPC")


def main():
    uri, state, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    h = nbd.NBD()
    h.connect_uri(uri)
    acked = {} if mode == "store" else {int(k): v for k, v in json.load(open(state)).items()}
    if mode == "store":
        for i in range(STORED):
            h.pwrite(data(i, BLOCK), i * BLOCK)
            acked[i * BLOCK] = i
        h.flush()
    elif mode == "fill":
        err = None
        for i in range(1500):
            off, seed = FILL_BASE + (i % FILL_SLOTS) * BLOCK, i % STORED
            try:
                h.pwrite(data(seed, BLOCK), off)
            except nbd.Error as e:
                err = e
                acked.pop(off, None)
                break
            acked[off] = seed
        if err is None:
            sys.exit("1500 writes of stored data on a full file system all succeeded: the "
                     "test did not reach RocksDB's limit (a larger memtable?)")
        if not is_enospc(err):
            sys.exit(f"a write on a full file system failed with {err.errno}, not ENOSPC: {err}")
        for what, call in (("trim", lambda: h.trim(BLOCK, FILL_BASE + FILL_SLOTS * BLOCK)),
                           ("flush", h.flush)):
            try:
                call()
            except nbd.Error as e:
                if not is_enospc(e):
                    sys.exit(f"a {what} on a full file system failed with {e.errno}: {e}")
        print(f"ENOSPC after {i} writes of stored data")
    elif mode == "recover":
        t0, off = time.time(), FILL_BASE + FILL_SLOTS * BLOCK
        while True:
            try:
                h.pwrite(data(1, BLOCK), off)
                h.flush()
                break
            except nbd.Error as e:
                if not is_enospc(e) or time.time() - t0 > 60:
                    sys.exit(f"writes not taken again {time.time() - t0:.0f} s after space "
                             f"was freed: {e}")
                time.sleep(0.5)
        acked[off] = 1
        print(f"writes taken again {time.time() - t0:.1f} s after space was freed")
    elif mode == "verify":
        bad = [off for off, seed in acked.items() if h.pread(BLOCK, off) != data(seed, BLOCK)]
        if bad:
            sys.exit(f"{len(bad)} of {len(acked)} acknowledged writes read back wrong, "
                     f"first at {bad[0]}")
        print(f"{len(acked)} acknowledged writes read back")
    json.dump(acked, open(state, "w"))
    h.shutdown()


main()
