"""nbd_badinput.py HOST PORT SERVER_PID MAX_CONN: hostile and broken clients against a running
server, run by nbd-badinput.sh: garbage handshakes, truncated options and requests, huge
lengths, abrupt disconnects with requests in flight, hundreds of connections opened and
dropped, the connection limit, and a client that writes without reading its replies
(server memory must stay bounded). After each round the server must still serve a good
client correctly."""
import os
import random
import socket
import struct
import sys
import threading
import time

import nbd

HOST, PORT, PID, MAX_CONN = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
URI = "nbd://%s:%d/default" % (HOST, PORT)
IHAVEOPT = 0x49484156454F5054
REQ_MAGIC = 0x25609513
rnd = random.Random(99)
MARK = rnd.randbytes(1 << 20)


def check(cond, msg):
    if not cond:
        print("FAIL:", msg, file=sys.stderr)
        sys.exit(1)


def conn(timeout=10):
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    return s


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return b


def greet(s, flags=3):
    g = recv_exact(s, 18)
    check(g[:8] == b"NBDMAGIC", "greeting magic")
    s.sendall(struct.pack(">I", flags))


def opt(s, o, data=b""):
    s.sendall(struct.pack(">QII", IHAVEOPT, o, len(data)) + data)


def go(s, name=b"default"):
    greet(s)
    opt(s, 7, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
    while True:
        magic, o, t, ln = struct.unpack(">QIII", recv_exact(s, 20))
        recv_exact(s, ln)
        if t == 1:
            return
        check(t == 3, "GO reply %x" % t)


def req(s, typ, off, ln, flags=0, cookie=1, payload=b""):
    s.sendall(struct.pack(">IHHQQI", REQ_MAGIC, flags, typ, cookie, off, ln) + payload)


def closed_soon(s, secs=10):
    s.settimeout(secs)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def healthy(what):
    # Closed sockets free their connection slots only when the server has read their EOF;
    # under load a new connection can arrive first and be refused at max_connections, so
    # retry for a bounded time rather than race the server's bookkeeping.
    deadline = time.monotonic() + 10
    while True:
        h = nbd.NBD()
        try:
            h.connect_uri(URI)
            break
        except nbd.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    got = h.pread(len(MARK), 64 << 20)
    h.shutdown()
    check(got == MARK, "data intact after %s" % what)


# Known data to verify after every round.
h = nbd.NBD()
h.connect_uri(URI)
h.pwrite(MARK, 64 << 20)
h.flush()
h.shutdown()

# ---- garbage handshakes ----
for i in range(50):
    s = conn()
    try:
        if i % 5 == 0:
            s.sendall(rnd.randbytes(rnd.randrange(1, 300)))
        elif i % 5 == 1:
            greet(s, flags=0xFFFFFFFF)
        elif i % 5 == 2:
            greet(s)
            s.sendall(rnd.randbytes(16))          # bad option magic
        elif i % 5 == 3:
            greet(s)
            opt(s, rnd.randrange(0, 1 << 32), rnd.randbytes(rnd.randrange(0, 100)))
        else:
            greet(s)
            s.sendall(struct.pack(">QII", IHAVEOPT, 7, 50) + b"abc")  # truncated option
    except (EOFError, ConnectionError):
        pass
    s.close()
healthy("garbage handshakes")

# Options claiming 4 GiB of data: the server skips what arrives, the client leaves.
s = conn()
greet(s)
s.sendall(struct.pack(">QII", IHAVEOPT, 6, 0xFFFFFFFF) + bytes(100000))
s.close()
s = conn()
greet(s)
s.sendall(struct.pack(">QII", IHAVEOPT, 1, 0xFFFFFFFF))  # EXPORT_NAME: cannot be skipped
check(closed_soon(s), "huge EXPORT_NAME must disconnect")
s.close()
healthy("huge options")

# ---- transmission: huge lengths, truncated requests ----
s = conn()
go(s)
req(s, 0, 0, 0xFFFFFFFF, cookie=7)  # huge READ: an error reply, not a disconnect
magic, err, ck = struct.unpack(">IIQ", recv_exact(s, 16))
check(magic == 0x67446698 and err == 22 and ck == 7, "huge read: EINVAL (%d)" % err)
req(s, 1, 0, 0xFFFFFFFF)  # huge WRITE: disconnect
check(closed_soon(s), "huge write must disconnect")
s.close()
for cut in (3, 27, 28 + 100):
    s = conn()
    go(s)
    frame = struct.pack(">IHHQQI", REQ_MAGIC, 0, 1, 9, 0, 1 << 20) + bytes(1 << 20)
    s.sendall(frame[:cut])
    s.close()
healthy("truncated requests")

# ---- abrupt disconnects with requests in flight ----
for i in range(30):
    s = conn()
    go(s)
    for j in range(16):
        req(s, 0, j << 20, 1 << 20, cookie=j)
    req(s, 1, 200 << 20, 65536, payload=bytes(65536))
    s.close()
healthy("abrupt disconnects")

# ---- hundreds of connections opened and dropped ----
socks = []
for i in range(300):
    try:
        socks.append(conn())
    except OSError:
        break
for i, s in enumerate(socks):
    if i % 3 == 0:
        try:
            go(s)
        except (EOFError, ConnectionError, socket.timeout):
            pass
for s in socks:
    s.close()
healthy("300 connections dropped")

# ---- the connection limit ----
time.sleep(0.5)
held = []
for i in range(MAX_CONN):
    s = conn()
    greet(s)
    held.append(s)
extra = conn()
check(closed_soon(extra, 5), "connection over max_connections not refused")
extra.close()
for s in held:
    s.close()
time.sleep(0.5)
healthy("connection limit")

# ---- a reader that does not read its replies: memory stays bounded ----
def rss_kib():
    with open("/proc/%d/status" % PID) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


N = 2048  # 1 MiB reads: 2 GiB of replies asked for at once
base = rss_kib()
s = conn(timeout=30)
go(s)
for i in range(N):
    req(s, 0, (i % 256) << 20, 1 << 20, cookie=i)
time.sleep(2)
grown = rss_kib() - base
print("2 GiB of reads queued, replies unread: server RSS grew %d MiB" % (grown >> 10))
check(grown < (512 << 10), "server memory grew by %d MiB" % (grown >> 10))
seen = set()
for i in range(N):
    magic, err, ck = struct.unpack(">IIQ", recv_exact(s, 16))
    check(magic == 0x67446698 and err == 0, "read reply %d: error %d" % (i, err))
    recv_exact(s, 1 << 20)
    seen.add(ck)
check(len(seen) == N, "every read answered once")
s.close()
healthy("slow reader")
print("ok")
