#!/usr/bin/env python3
"""What smaller packs cost, with and without a zstd dictionary: a question
for the format, answered with the zstd CLI before any code is written.

    python3 benches/pack_sizes.py [DIR] > /tmp/packs.md

Packs DIR's regular files as `znippy compress` does (byte order of paths;
files up to 512 KiB, or half the pack size when that is smaller, are
concatenated into packs closed before they pass the pack size; larger files
are cut into pieces of the pack size), writes each pack as a file, and
compresses every pack on its own with `zstd -3`, for pack sizes 2 MiB,
1 MiB, 512 KiB and 256 KiB: once plain, once with a 112 KiB dictionary that
`zstd --train` made from every fourth file under 64 KiB (at most 5,000). It
prints the sum of the compressed packs, which is what an archive's blob
region would hold (without znippy's dedupe). Then, for the first twelve
2 MiB packs, what each costs cut in two or four: the signal a per-archive
choice of pack size would have to read from the start of the data. DIR
defaults to the cargo registry's source cache. Knob: BENCH_DIR (default
/tmp/znippy-packs), removed at the end.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(os.environ.get("BENCH_DIR", "/tmp/znippy-packs"))
SIZES = [2 << 20, 1 << 20, 512 << 10, 256 << 10]


def default_dir():
    registry = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "registry" / "src"
    return next(registry.iterdir())


def write_packs(files, out, pack):
    threshold = min(512 << 10, pack // 2)
    out.mkdir(parents=True)
    n, buf = 0, bytearray()

    def flush():
        nonlocal n, buf
        if buf:
            (out / f"{n:06}").write_bytes(buf)
            n, buf = n + 1, bytearray()

    for f in files:
        data = f.read_bytes()
        if len(data) > threshold:
            flush()
            for i in range(0, len(data), pack):
                buf = bytearray(data[i:i + pack])
                flush()
        else:
            if len(buf) + len(data) > pack:
                flush()
            buf += data
    flush()
    return n


def compressed(packs, out, dictionary=None):
    out.mkdir()
    args = ["zstd", "-3", "-q", "-f", "--output-dir-flat", str(out)]
    if dictionary:
        args += ["-D", str(dictionary)]
    subprocess.run(args + sorted(str(p) for p in packs.iterdir()), check=True)
    return sum(p.stat().st_size for p in out.iterdir())


def zstd_size(data):
    return len(subprocess.run(["zstd", "-3", "-q", "-c"], input=data, check=True,
                              capture_output=True).stdout)


def parts(data, k):
    """`data` cut into `k` pieces of (nearly) equal size."""
    step = -(-len(data) // k)
    return [data[i:i + step] for i in range(0, len(data), step)]


def window_costs(packs):
    """(whole, halves / whole, quarters / whole) of the first 12 full packs."""
    rows = []
    for p in sorted(packs.iterdir()):
        data = p.read_bytes()
        if len(data) < SIZES[0] * 3 // 4:
            continue
        whole = zstd_size(data)
        cut = [sum(zstd_size(part) for part in parts(data, k)) for k in (2, 4)]
        rows.append((whole, cut[0] / whole, cut[1] / whole))
        if len(rows) == 12:
            break
    return rows


def main():
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else default_dir()
    shutil.rmtree(BENCH_DIR, ignore_errors=True)
    BENCH_DIR.mkdir(parents=True)
    try:
        files = sorted(p for p in src.rglob("*") if p.is_file() and not p.is_symlink())
        raw = sum(f.stat().st_size for f in files)
        small = [f for f in files if f.stat().st_size < 64 << 10][::4][:5000]
        dictionary = BENCH_DIR / "dict"
        start = time.perf_counter()
        subprocess.run(["zstd", "--train", "--maxdict=112640", "-q", "-o", str(dictionary)]
                       + [str(f) for f in small], check=True)
        trained = time.perf_counter() - start
        rows = []
        for pack in SIZES:
            packs = BENCH_DIR / f"packs-{pack}"
            n = write_packs(files, packs, pack)
            plain = compressed(packs, BENCH_DIR / f"plain-{pack}")
            with_dict = compressed(packs, BENCH_DIR / f"dict-{pack}", dictionary)
            rows.append((pack, n, plain, with_dict))
            if pack == SIZES[0]:
                windows = window_costs(packs)
            shutil.rmtree(packs)
    finally:
        shutil.rmtree(BENCH_DIR, ignore_errors=True)

    print(f"`{src}`: {len(files)} files, {raw / 1e6:.1f} MB. Dictionary: 112 KiB from "
          f"{len(small)} files, trained in {trained:.1f} s.\n")
    print("| pack size | packs | zstd -3, MB | vs 2 MiB | with the dictionary, MB | vs 2 MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    base = rows[0][2]
    for pack, n, plain, with_dict in rows:
        print(f"| {pack >> 10} KiB | {n} | {plain / 1e6:.2f} | {plain / base:.3f}x | "
              f"{with_dict / 1e6:.2f} | {with_dict / base:.3f}x |")

    print("\nThe first full 2 MiB packs, each compressed whole and cut in two or four:\n")
    print("| pack | zstd -3, bytes | in two | in four |")
    print("|---:|---:|---:|---:|")
    for i, (whole, two, four) in enumerate(windows):
        print(f"| {i} | {whole} | {two:.3f}x | {four:.3f}x |")


if __name__ == "__main__":
    main()
