#!/usr/bin/env python3
"""What the web console costs on a large archive: the requests its views
make, timed against a release `znippy serve` holding 300,000 files.

    cargo build --release -p znippy
    python3 benches/console.py > /tmp/console.md    # BENCH_FILES=300000

The archive is 300 directories of 1,000 files each (about 40 bytes each),
uploaded as one tar stream. Each request is the one a view of the console
sends (docs/console.md), repeated; the table gives the median and the
slowest time and the bytes of the answer. The last row is what a console
without folded listings would have to do to show the root: page through the
whole listing. Everything started or written is removed at the end.
"""

import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("ZNIPPY_BIN", ROOT / "target/release/znippy"))
FILES = int(os.environ.get("BENCH_FILES", "300000"))
DIRS = 300
RUNS = 50


def tar_stream(out):
    """Writes the archive's files as a tar stream into `out`, then closes it."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for i in range(FILES):
            data = f"file {i} of the console bench\n".encode()
            info = tarfile.TarInfo(f"d{i % DIRS:03d}/f{i:06d}.txt")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, fileobj=_Bytes(data))
    out.close()


class _Bytes:
    def __init__(self, data):
        self.data = data

    def read(self, n=-1):
        out, self.data = self.data, b""
        return out


def request(conn, path, method="GET", body=None, headers=None):
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    assert 200 <= r.status < 300, (path, r.status, data[:300])
    return data


def timed(conn, path):
    times, size = [], 0
    for _ in range(RUNS):
        t = time.perf_counter()
        size = len(request(conn, path))
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), max(times), size


def main():
    tmp = Path(tempfile.mkdtemp(prefix="znippy-console-bench-"))
    server = subprocess.Popen(
        [str(BIN), "serve", "--data", str(tmp / "data"), "--listen", "127.0.0.1:0", "--log", "warn"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        line = server.stdout.readline().decode()
        port = int(line.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port)
        request(conn, "/archives", "POST", json.dumps({"id": "big"}))

        read_end, write_end = os.pipe()
        writer = threading.Thread(target=tar_stream, args=(os.fdopen(write_end, "wb"),))
        writer.start()
        t = time.perf_counter()
        with os.fdopen(read_end, "rb") as body:
            up = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
            up.request("POST", "/archives/big/files", body=body,
                       headers={"Content-Type": "application/x-tar", "Transfer-Encoding": "chunked"},
                       encode_chunked=True)
            r = up.getresponse()
            receipt = json.loads(r.read())
        writer.join()
        upload_s = time.perf_counter() - t
        assert receipt["files"] == FILES, receipt

        rows = [
            ("the page (/)", "/"),
            ("its script", "/console/console.js"),
            ("archives list", "/archives"),
            ("archive header", "/archives/big"),
            ("root, folded: first page of 200", "/archives/big/files?prefix=&delimiter=%2F&limit=200"),
            ("root, folded: second page", "/archives/big/files?prefix=&delimiter=%2F&limit=200&after=d199%2F"),
            ("one directory of 1,000: first page of 200", "/archives/big/files?prefix=d150%2F&delimiter=%2F&limit=200"),
            ("filter within it (prefix d150/f0001)", "/archives/big/files?prefix=d150%2Ff0001&limit=200"),
            ("preview of one file", "/archives/big/files/d150/f000150.txt"),
            ("history", "/archives/big/history"),
        ]
        out = [
            f"`python3 benches/console.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
            f"{FILES:,} files in {DIRS} directories, uploaded as one tar stream in {upload_s:.1f} s; "
            f"each request {RUNS} times on one keep-alive connection.",
            "",
            "| console request | median (ms) | slowest (ms) | answer (bytes) |",
            "|---|---|---|---|",
        ]
        for name, path in rows:
            med, worst, size = timed(conn, path)
            out.append(f"| {name} | {med:.2f} | {worst:.2f} | {size:,} |")

        # Without folding, the root is the whole listing, page after page.
        t = time.perf_counter()
        after, total, received = None, 0, 0
        while True:
            q = "/archives/big/files?limit=10000" + (f"&after={urllib.parse.quote(after, safe='')}" if after else "")
            data = request(conn, q)
            received += len(data)
            page = json.loads(data)
            total += len(page["files"])
            after = page["next"]
            if after is None:
                break
        full_ms = (time.perf_counter() - t) * 1000
        assert total == FILES
        out.append(f"| the whole listing, unfolded, in pages of 10,000 | {full_ms:.0f} (once) | | {received:,} |")
        print("\n".join(out))
    finally:
        server.terminate()
        server.wait(timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
