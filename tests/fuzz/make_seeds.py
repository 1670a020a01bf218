#!/usr/bin/env python3
"""make_seeds.py: writes the seed corpora of the NBD fuzz targets (corpus/fuzz_nbd_*),
valid sessions that reach every option and command, plus a few near misses.
Run from tests/fuzz/; the output is committed, this script documents how it was made."""
import os
import struct

IHAVEOPT = 0x49484156454F5054
REQ = 0x25609513
FLAGS = struct.pack(">I", 3)  # FIXED_NEWSTYLE | NO_ZEROES


def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data


def name(n):
    return struct.pack(">I", len(n)) + n


def info(n, reqs=()):
    return name(n) + struct.pack(">H", len(reqs)) + b"".join(struct.pack(">H", r) for r in reqs)


def meta(n, queries):
    return name(n) + struct.pack(">I", len(queries)) + b"".join(name(q) for q in queries)


def req(typ, off, ln, flags=0, cookie=1, payload=b""):
    return struct.pack(">IHHQQI", REQ, flags, typ, cookie, off, ln) + payload


READ, WRITE, DISC, FLUSH, TRIM, CACHE, ZEROES, STATUS = 0, 1, 2, 3, 4, 5, 6, 7
FUA, NO_HOLE, DF, REQ_ONE, FAST_ZERO = 1, 2, 4, 8, 16
data = bytes(range(256)) * 16
GO_DEFAULT = opt(7, info(b""))
SR = opt(8)
META = opt(10, meta(b"", [b"base:allocation", b"x-dedupd:shared"]))
rw = (req(WRITE, 0, 4096, payload=data) + req(READ, 0, 8192, cookie=2)
      + req(FLUSH, 0, 0, cookie=3) + req(DISC, 0, 0))

handshake = {
    "list_abort": FLAGS + opt(3) + opt(2),
    "info_go": FLAGS + opt(6, info(b"default", (1, 2, 3))) + GO_DEFAULT + rw,
    "export_name": FLAGS + opt(1, b"default") + rw,
    "export_name_zeroes": struct.pack(">I", 1) + opt(1, b"") + rw,
    "meta_structured": (FLAGS + SR + opt(9, meta(b"", [])) + opt(9, meta(b"", [b"x-dedupd:"]))
                        + META + GO_DEFAULT + req(STATUS, 0, 65536)
                        + req(READ, 0, 65536, cookie=4) + req(TRIM, 0, 4096, cookie=5)
                        + req(ZEROES, 4096, 100, NO_HOLE, cookie=6) + req(DISC, 0, 0)),
    "odd_options": (FLAGS + opt(99, b"abc") + opt(5) + opt(11) + opt(3, b"x")
                    + opt(8, b"y") + opt(10, meta(b"", [b"base:allocation"])) + opt(6, b"ab")
                    + opt(7, info(b"nope")) + opt(2)),
    "ro_export": FLAGS + SR + opt(7, info(b"ro")) + req(WRITE, 0, 16, payload=data[:16]) + req(DISC, 0, 0),
}
transmit = {
    "read_write": rw,
    "block_status": (req(WRITE, 8192, 4096, payload=data) + req(WRITE, 16384, 4096, payload=data)
                     + req(STATUS, 0, 1 << 20) + req(STATUS, 0, 1 << 20, REQ_ONE)
                     + req(STATUS, (1 << 20) - 10, 100)),
    "flags": (req(WRITE, 100, 4000, FUA, payload=data[:4000]) + req(READ, 0, 8192, DF)
              + req(ZEROES, 0, 8192, NO_HOLE | FAST_ZERO | FUA) + req(CACHE, 0, 1 << 20)
              + req(TRIM, 0, 65536, FUA) + req(READ, 0, 4096, 1 << 9)),
    "errors": (req(READ, 1 << 20, 1) + req(READ, 0, 33 << 20) + req(42, 0, 0)
               + req(WRITE, (1 << 20) - 2, 4, payload=b"abcd") + req(STATUS, 0, 0)),
    "big_write_truncated": req(WRITE, 0, 1 << 20, payload=data),
}

for target, seeds in (("fuzz_nbd_handshake", handshake), ("fuzz_nbd_transmit", transmit)):
    d = os.path.join("corpus", target)
    os.makedirs(d, exist_ok=True)
    for n, b in seeds.items():
        with open(os.path.join(d, n), "wb") as f:
            f.write(b)
