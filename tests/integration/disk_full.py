"""disk_full.py URI STATE write|verify|refill: the client side of disk-full.sh.

write: unique data (4 KiB and 256 KiB writes, interleaved) from offset 0 until the server
refuses one; the error must be ENOSPC and must come before the export's end; then writes
that need no new space must still succeed (data already stored, at the refused offset;
zeros after it), and a flush; every acknowledged write goes to STATE (offset, length,
seed; seed -1: zeros).
verify: every acknowledged write in STATE reads back bit-exact.
refill: after space was freed, a 256 KiB write at offset 0 must succeed again."""
import errno
import json
import random
import sys

import nbd


def data(seed, n):
    return bytes(n) if seed == -1 else random.Random(seed).randbytes(n)


def main():
    uri, state, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    h = nbd.NBD()
    h.connect_uri(uri)
    size = h.get_size()
    if mode == "write":
        acked, off, rnd, err = [], 0, random.Random(11), None
        while off < size:
            n = min(4096 if len(acked) % 3 else 256 << 10, size - off)
            seed = rnd.getrandbits(48)
            try:
                h.pwrite(data(seed, n), off)
            except nbd.Error as e:
                err = e.errno
                break
            acked.append((off, n, seed))
            off += n
        # python3-libnbd gives the errno as its name in some versions, a number in others
        if err not in (errno.ENOSPC, "ENOSPC"):
            sys.exit(f"expected ENOSPC before the end of the export, got {err} at {off}")
        dup_off, dup_n, dup_seed = acked[0]  # a 256 KiB write: every chunk already stored
        h.pwrite(data(dup_seed, dup_n), off)
        acked.append((off, dup_n, dup_seed))
        h.zero(1 << 20, off + dup_n)
        acked.append((off + dup_n, 1 << 20, -1))
        h.flush()  # the index kept its room: what was acknowledged can be made durable
        json.dump(acked, open(state, "w"))
        print(f"{len(acked)} writes ({off >> 20} MiB) acknowledged before ENOSPC")
    elif mode == "verify":
        acked = json.load(open(state))
        bad = [off for off, n, seed in acked if h.pread(n, off) != data(seed, n)]
        if bad:
            sys.exit(f"{len(bad)} of {len(acked)} acknowledged writes read back wrong, "
                     f"first at {bad[0]}")
        print(f"{len(acked)} acknowledged writes read back")
    elif mode == "refill":
        h.pwrite(data(5, 256 << 10), 0)
        h.flush()
        if h.pread(256 << 10, 0) != data(5, 256 << 10):
            sys.exit("the write after freeing space did not read back")
    h.shutdown()


main()
