#!/usr/bin/python3
"""bench/report.py: turn the harness's raw results into the tables of docs/benchmarks.md, the
gnuplot data files bench/out/*.dat and the plots docs/img/*.png.

Reads (from --out, default bench/out): results.tsv, machine.txt and notes.txt (bench/run.sh),
scale.tsv and memflat.tsv (bench/scale.sh), whichever exist. Writes only between the
<!-- bench:NAME:begin --> and <!-- bench:NAME:end --> markers of the document, so the
hand-written method text around them survives a rerun. Invents nothing: a cell without a
measurement says so.
"""
import argparse
import os
import statistics
import subprocess
import sys
from collections import defaultdict

SERVERS = ["nbdkit-file", "qemu-nbd", "nbd-server", "dedupd-rocksdb", "dedupd-memory", "dedupd-xxh3v"]
# Not a peer: `nbdkit null` (does no work) for the zeros workload, the client and protocol
# floor; shown next to the WRITE_ZEROES target, kept out of the tables.
CLIENT_FLOOR = "nbdkit-null"
WORKLOADS = ["unique", "dup", "vm", "zero"]
WL_TITLE = {
    "unique": "unique random",
    "dup": "fully duplicate",
    "vm": "VM image (ext4 of .debs)",
    "zero": "zeros",
}
BASE = "nbdkit-file"
DEFAULT = "dedupd-rocksdb"
MEM_LIMIT_MIB = 512


def read_kv(path):
    kv = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition(" ")
                if k:
                    kv[k] = v
    return kv


def read_tsv(path):
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) == len(header):
                rows.append(dict(zip(header, parts)))
    return rows


class Results:
    def __init__(self, rows):
        self.vals = defaultdict(list)  # (workload, server, metric) -> [float]
        self.status = defaultdict(list)  # (workload, server) -> [str]
        self.servers = []
        self.workloads = []
        for r in rows:
            w, s, m, v = r["workload"], r["server"], r["metric"], r["value"]
            if s not in self.servers and s != CLIENT_FLOOR:
                self.servers.append(s)
            if w not in self.workloads:
                self.workloads.append(w)
            if m == "status":
                self.status[(w, s)].append(v)
                continue
            try:
                self.vals[(w, s, m)].append(float(v))
            except ValueError:
                pass
        self.servers.sort(key=lambda s: SERVERS.index(s) if s in SERVERS else len(SERVERS))

    def stat(self, w, s, m):
        """(median, min, max, n) or None."""
        v = self.vals.get((w, s, m))
        if not v:
            return None
        return statistics.median(v), min(v), max(v), len(v)

    def ratio(self, w, s, m):
        a, b = self.stat(w, s, m), self.stat(w, BASE, m)
        if not a or not b or b[0] <= 0:
            return None
        return a[0] / b[0]


def fmt_num(x):
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_bytes(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return f"{b / (1 << shift):.1f} {unit}"
    return f"{b:.0f} B"


def cell(res, w, s, m, unit=""):
    st = res.stat(w, s, m)
    bad = res.status.get((w, s))
    if not st:
        return f"failed ({', '.join(sorted(set(bad)))})" if bad else "–"
    med, lo, hi, n = st
    r = res.ratio(w, s, m)
    txt = f"{fmt_num(med)}{unit} ({fmt_num(lo)}–{fmt_num(hi)})"
    if r is not None and s != BASE:
        txt = f"**{r:.2f}×** " + txt
    if bad:
        txt += f" ⚠ {', '.join(sorted(set(bad)))}"
    return txt


def machine_lines(mach):
    mem = int(mach.get("mem_total_kib", "0") or 0) >> 20
    return [
        f"- Date (UTC): {mach.get('date', '?')}; commit {mach.get('dedupd_commit', '?')}",
        f"- CPU: {mach.get('cpu', '?')} at {mach.get('cpu_mhz', '?')} MHz (flags: "
        f"{mach.get('cpu_flags', '?').strip()}), `nproc` = {mach.get('nproc', '?')}; "
        f"RAM {mem} GiB; kernel {mach.get('kernel', '?')}",
        f"- Size per workload: {fmt_bytes(int(mach.get('size', '0')))}; repetitions: "
        f"{mach.get('reps', '?')}; random I/O: {mach.get('rand_time', '?')} s per direction",
        f"- Peers: {mach.get('nbdkit', '?')}; {mach.get('qemu_nbd', '?')}; nbd-server "
        f"{mach.get('nbd_server', '?')}; client {mach.get('nbdcopy', '?')}, {mach.get('fio', '?')}",
        "- Page cache: written back before every timed phase"
        + ("; dropped before every timed sequential write (source read back in)"
           if mach.get("page_cache_drop") == "1" else " (not dropped)"),
        f"- dedupd: {mach.get('dedupd', 'none')}"
        + (f", binary `{mach['dedupd_bin']}`" if "dedupd_bin" in mach else "")
        + (f", built from {mach['dedupd_source']}" if "dedupd_source" in mach else ""),
    ]


def results_section(res, mach, notes, img_rel):
    size = int(mach.get("size", "0") or 0)
    reps = int(mach.get("reps", "0") or 0)
    out = []
    if size < (2 << 30) or reps < 3 or mach.get("quick") == "1":
        out += [
            "> **Quick development run, not the real results.** Sizes or repetitions are below",
            "> those of the issue (2 GiB, ≥ 3 repetitions); numbers this small are dominated by",
            "> start-up and caches. The lead reruns `bench/run.sh` on a quiet machine.",
            "",
        ]
    out += machine_lines(mach) + [""]
    out += [
        "Cells: **ratio to nbdkit file** (medians, same run) · median MiB/s (min–max over the",
        "repetitions). A dash means not measured.",
        "",
    ]
    servers = res.servers
    for phase, metric in (("Sequential write", "write_mibs"), ("Sequential read", "read_mibs")):
        out += [f"### {phase} (nbdcopy, 4 connections, 4 threads), MiB/s", ""]
        out.append("| workload | " + " | ".join(servers) + " |")
        out.append("|---|" + "---|" * len(servers))
        for w in WORKLOADS:
            if w not in res.workloads:
                continue
            out.append(f"| {WL_TITLE[w]} | " + " | ".join(cell(res, w, s, metric) for s in servers) + " |")
        out.append("")
    if "rand" in res.workloads:
        out += ["### Random 4 KiB, queue depth 16 (fio nbd engine), IOPS", ""]
        out.append("| direction | " + " | ".join(servers) + " |")
        out.append("|---|" + "---|" * len(servers))
        for d in ("randwrite", "randread"):
            out.append(f"| {d} | " + " | ".join(cell(res, "rand", s, d + "_iops") for s in servers) + " |")
        out.append("")
    dd = [s for s in servers if s.startswith("dedupd-")]
    if dd:
        out += [
            "### dedupd resources after each workload",
            "",
            "Peak resident memory (VmHWM) and resident memory (VmRSS) after the write, allocated",
            "bytes of the data directory (`du`: segments, RocksDB and its WAL), and from",
            "`dedupd-ctl --json stats`: logical bytes, bytes stored in segments and the dedup",
            "ratio (logical / unique bytes). Medians over the repetitions.",
            "",
            "| server | workload | VmHWM | VmRSS | data dir (du) | logical | stored | dedup ratio |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for s in dd:
            for w in WORKLOADS + ["rand"]:
                p = "post_rand" if w == "rand" else "post_write"
                hwm = res.stat(w, s, p + "_hwm_kib")
                if not hwm:
                    continue
                rss = res.stat(w, s, p + "_rss_kib")
                du = res.stat(w, s, p + "_store_du_bytes")
                logical = res.stat(w, s, p + "_logical_bytes")
                stored = res.stat(w, s, p + "_disk_bytes")
                ratio = res.stat(w, s, p + "_dedup_ratio")

                def b(st):
                    return fmt_bytes(st[0]) if st else "–"

                out.append(
                    f"| {s} | {WL_TITLE.get(w, 'random 4 KiB')} | {fmt_bytes(hwm[0] * 1024)} | "
                    f"{fmt_bytes(rss[0] * 1024) if rss else '–'} | {b(du)} | {b(logical)} | {b(stored)} | "
                    f"{f'{ratio[0]:.2f}' if ratio else '–'} |"
                )
        out.append("")
    out += ["### Disk use of every server after the write (allocated bytes, median)", ""]
    out.append("| workload | " + " | ".join(servers) + " |")
    out.append("|---|" + "---|" * len(servers))
    for w in WORKLOADS + ["rand"]:
        if w not in res.workloads:
            continue
        cells = []
        for s in servers:
            st = res.stat(w, s, "post_write_du_bytes")
            cells.append(fmt_bytes(st[0]) if st else "–")
        out.append(f"| {WL_TITLE.get(w, 'random 4 KiB')} | " + " | ".join(cells) + " |")
    out.append("")
    out += [
        f"![sequential write]({img_rel}/seq_write.png)",
        f"![sequential read]({img_rel}/seq_read.png)",
    ]
    if "rand" in res.workloads:
        out.append(f"![random 4 KiB]({img_rel}/rand.png)")
    out.append("")
    if notes:
        out += ["### Notes from the run", ""] + [f"- {n}" for n in notes] + [""]
    return out


def verdict(value, target, higher=True):
    if value is None:
        return "not measured"
    ok = value >= target if higher else value < target
    return "**met**" if ok else "**missed**"


def targets_section(res, mach, scale, memflat):
    rows = []

    def ratio_row(label, w, s, m, target):
        r = res.ratio(w, s, m) if res else None
        rows.append((label, f"≥ {target}×", f"{r:.2f}×" if r is not None else "–", verdict(r, target)))

    ratio_row("unique sequential write", "unique", DEFAULT, "write_mibs", 0.6)
    ratio_row("duplicate sequential write, SHA-256", "dup", DEFAULT, "write_mibs", 0.65)
    ratio_row("duplicate sequential write, xxh3-128 + verify", "dup", "dedupd-xxh3v", "write_mibs", 1.0)
    ratio_row("WRITE_ZEROES (zeros workload)", "zero", DEFAULT, "write_mibs", 2.0)
    floor = res.ratio("zero", CLIENT_FLOOR, "write_mibs") if res else None
    if floor is not None:
        label, wanted, measured, v = rows[-1]
        rows[-1] = (label, wanted, f"{measured} (`nbdkit null`, which does nothing: {floor:.2f}×)", v)
    for w in WORKLOADS:
        ratio_row(f"sequential read, {WL_TITLE[w]}", w, DEFAULT, "read_mibs", 0.8)
    ratio_row("random 4 KiB read", "rand", DEFAULT, "randread_iops", 0.7)
    ratio_row("random 4 KiB write", "rand", DEFAULT, "randwrite_iops", 0.5)
    hwm = None
    if res:
        peaks = [max(v) for (w, s, m), v in res.vals.items() if s == DEFAULT and m.endswith("_hwm_kib")]
        hwm = max(peaks) / 1024 if peaks else None
    rows.append(
        (
            "resident memory (rocksdb), this run",
            f"< {MEM_LIMIT_MIB} MiB",
            f"{hwm:.0f} MiB peak" if hwm is not None else "–",
            verdict(hwm, MEM_LIMIT_MIB, higher=False),
        )
    )
    if memflat:
        peak = max(float(r["hwm_kib"]) for r in memflat) / 1024
        top = max(float(r["gib"]) for r in memflat)
        rows.append(
            (
                f"resident memory (rocksdb), up to {top:g} GiB written",
                f"< {MEM_LIMIT_MIB} MiB throughout",
                f"{peak:.0f} MiB peak; VmRSS {float(memflat[0]['rss_kib']) / 1024:.0f} → "
                f"{float(memflat[-1]['rss_kib']) / 1024:.0f} MiB (see the curve)",
                verdict(peak, MEM_LIMIT_MIB, higher=False),
            )
        )
    else:
        rows.append(("resident memory flat from 1 to 20 GiB", f"< {MEM_LIMIT_MIB} MiB", "–", "not measured"))
    sr = scale_ratio(scale)
    rows.append(
        (
            "write throughput with many chunks indexed vs empty store",
            "≥ 0.8×",
            f"{sr[0]:.2f}× ({sr[1]} chunks)" if sr else "–",
            verdict(sr[0] if sr else None, 0.8),
        )
    )
    out = ["| target | wanted | measured | verdict |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    size = int(mach.get("size", "0") or 0)
    reps = int(mach.get("reps", "0") or 0)
    if res and (size < (2 << 30) or reps < 3):
        out += ["", "Verdicts above come from a quick development run and do not settle the issue."]
    return out + [""]


def scale_ratio(scale):
    """(median full/empty throughput ratio, chunks) from scale.tsv rows."""
    if not scale:
        return None
    empty = [float(r["mibs"]) for r in scale if r["store"] == "empty"]
    full = [float(r["mibs"]) for r in scale if r["store"] == "full"]
    if not empty or not full:
        return None
    chunks = max(int(float(r["chunks"])) for r in scale)
    return statistics.median(full) / statistics.median(empty), chunks


def scale_section(scale, memflat, mach_scale, img_rel):
    out = []
    if not scale and not memflat:
        return ["Not run yet: `bench/scale.sh` (see above).", ""]
    if mach_scale:
        out += [f"- {k}: {v}" for k, v in mach_scale.items()] + [""]
    if scale:
        out += ["| store | repetition | chunks indexed | write MiB/s |", "|---|---|---|---|"]
        for r in scale:
            out.append(f"| {r['store']} | {r['rep']} | {int(float(r['chunks']))} | {float(r['mibs']):.1f} |")
        sr = scale_ratio(scale)
        if sr:
            out += ["", f"Median full / empty: **{sr[0]:.2f}×**."]
        out.append("")
    if memflat:
        out += ["| logical GiB written | VmRSS | VmHWM | on disk |", "|---|---|---|---|"]
        for r in memflat:
            out.append(
                f"| {float(r['gib']):g} | {fmt_bytes(float(r['rss_kib']) * 1024)} | "
                f"{fmt_bytes(float(r['hwm_kib']) * 1024)} | {fmt_bytes(float(r['du_bytes']))} |"
            )
        out += ["", f"![memory while writing]({img_rel}/memflat.png)", ""]
    return out


def write_dat_and_plots(res, memflat, outdir, imgdir):
    os.makedirs(imgdir, exist_ok=True)
    scripts = []
    servers = res.servers if res else []
    if res:
        for phase, metric in (("seq_write", "write_mibs"), ("seq_read", "read_mibs")):
            path = os.path.join(outdir, f"{phase}.dat")
            wls = [w for w in WORKLOADS if w in res.workloads]
            servers = [s for s in res.servers if any(res.stat(w, s, metric) for w in wls)]
            with open(path, "w") as f:
                f.write("# workload " + " ".join(f"{s} {s}_min {s}_max" for s in servers) + "\n")
                for w in wls:
                    cols = []
                    for s in servers:
                        st = res.stat(w, s, metric)
                        cols += [fmt_num(st[0]), fmt_num(st[1]), fmt_num(st[2])] if st else ["0", "0", "0"]
                    f.write(f"{w} " + " ".join(cols) + "\n")
            if wls and servers:
                title = "Sequential write" if phase == "seq_write" else "Sequential read"
                scripts.append(histogram(path, os.path.join(imgdir, f"{phase}.png"),
                                         f"{title} (nbdcopy -C 4 -T 4), median and min–max", "MiB/s", servers))
        if "rand" in res.workloads:
            path = os.path.join(outdir, "rand.dat")
            servers = [s for s in res.servers if res.stat("rand", s, "randwrite_iops") or res.stat("rand", s, "randread_iops")]
            with open(path, "w") as f:
                f.write("# direction " + " ".join(f"{s} {s}_min {s}_max" for s in servers) + "\n")
                for d in ("randwrite", "randread"):
                    cols = []
                    for s in servers:
                        st = res.stat("rand", s, d + "_iops")
                        cols += [f"{st[0]:.0f}", f"{st[1]:.0f}", f"{st[2]:.0f}"] if st else ["0", "0", "0"]
                    f.write(f"{d} " + " ".join(cols) + "\n")
            scripts.append(histogram(path, os.path.join(imgdir, "rand.png"),
                                     "Random 4 KiB at QD16 (fio nbd), median and min–max", "IOPS", servers))
    if memflat:
        path = os.path.join(outdir, "memflat.dat")
        with open(path, "w") as f:
            f.write("# gib rss_mib hwm_mib\n")
            for r in memflat:
                f.write(f"{r['gib']} {float(r['rss_kib']) / 1024:.1f} {float(r['hwm_kib']) / 1024:.1f}\n")
        scripts.append(
            f"""set terminal pngcairo size 800,450
set output '{os.path.join(imgdir, "memflat.png")}'
set title 'dedupd (rocksdb) resident memory while writing unique data'
set xlabel 'logical GiB written'
set ylabel 'MiB'
set yrange [0:*]
set key bottom right
set grid ytics
plot '{path}' using 1:2 with linespoints title 'VmRSS', '' using 1:3 with linespoints title 'VmHWM', {MEM_LIMIT_MIB} with lines dashtype 2 title 'target limit'
"""
        )
    for s in scripts:
        p = subprocess.run(["gnuplot"], input=s, text=True, capture_output=True)
        if p.returncode != 0:
            print(f"report.py: gnuplot failed: {p.stderr.strip()}", file=sys.stderr)


def histogram(dat, png, title, ylabel, servers):
    plots = []
    for i, s in enumerate(servers):
        c = 2 + 3 * i
        plots.append(f"'{dat}' using {c}:{c + 1}:{c + 2}{':xtic(1)' if i == 0 else ''} title '{s}'")
    return f"""set terminal pngcairo size 1000,450
set output '{png}'
set title '{title}'
set ylabel '{ylabel} (log scale)'
set style data histogram
set style histogram errorbars gap 2 lw 1
set style fill solid 0.8 border -1
set logscale y
set yrange [1:*]
set key outside right top
set grid ytics
plot {", ".join(plots)}
"""


def replace_section(doc, name, lines):
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    body = "\n".join([begin, "<!-- generated by bench/report.py; edit around, not inside -->", ""] + lines + [end])
    if begin in doc and end in doc:
        pre = doc[: doc.index(begin)]
        post = doc[doc.index(end) + len(end):]
        return pre + body + post
    return doc.rstrip("\n") + "\n\n" + body + "\n"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(root, "bench", "out"))
    ap.add_argument("--doc", default=os.path.join(root, "docs", "benchmarks.md"))
    ap.add_argument("--img", default=os.path.join(root, "docs", "img"))
    a = ap.parse_args()

    rows = read_tsv(os.path.join(a.out, "results.tsv"))
    res = Results(rows) if rows else None
    mach = read_kv(os.path.join(a.out, "machine.txt"))
    notes = []
    if os.path.exists(os.path.join(a.out, "notes.txt")):
        notes = [n.strip() for n in open(os.path.join(a.out, "notes.txt")) if n.strip()]
    scale = read_tsv(os.path.join(a.out, "scale.tsv"))
    memflat = read_tsv(os.path.join(a.out, "memflat.tsv"))
    mach_scale = read_kv(os.path.join(a.out, "scale-machine.txt"))
    img_rel = os.path.relpath(a.img, os.path.dirname(a.doc))

    doc = open(a.doc).read() if os.path.exists(a.doc) else "# Benchmarks\n"
    if res:
        doc = replace_section(doc, "results", results_section(res, mach, notes, img_rel))
    if not mach_scale.get("server", "dedupd-rocksdb").startswith("dedupd-"):
        # a harness test of scale.sh against a peer: shown, never counted as dedupd's
        mach_scale["note"] = "harness test against a peer server, not dedupd: not a result"
        doc = replace_section(doc, "targets", targets_section(res, mach, [], []))
    else:
        doc = replace_section(doc, "targets", targets_section(res, mach, scale, memflat))
    doc = replace_section(doc, "scale", scale_section(scale, memflat, mach_scale, img_rel))
    write_dat_and_plots(res, memflat, a.out, a.img)
    with open(a.doc, "w") as f:
        f.write(doc)
    print(f"report.py: wrote {a.doc} and plots in {a.img}", file=sys.stderr)


if __name__ == "__main__":
    main()
