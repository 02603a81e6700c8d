"""A static file server for the remote-read tests: GET and HEAD of the files
of a directory, with single byte ranges (`bytes=a-b`, `bytes=a-`,
`bytes=-n`), a strong ETag, and `If-Match` (412 when it does not match), as
nginx or a CDN serves a file. It counts the requests and the ranges asked
for, and can misbehave on purpose:

- `ignore_range`: answer 200 with the whole file, as a server without range
  support does;
- `short_body`: announce the range's length but send half of it;
- `long_body`: announce and send a MiB more than the range (Content-Range
  says the range, Content-Length the more);
- `slow`: wait this many seconds before answering;
- `swap_after`: after this many requests, serve `swap_with` in place of the
  file (a new ETag): the object changed between two requests.

Python's own `http.server` has no ranges, hence this one. It runs in a thread
of the test process on a free loopback port.
"""

import contextlib
import http.server
import re
import threading
import time
from pathlib import Path


class Behaviour:
    def __init__(self):
        self.ignore_range = False
        self.short_body = False
        self.long_body = False
        self.slow = 0.0
        self.swap_after = None
        self.swap_with = None
        self.requests = []  # (method, path, range header or None)
        self.lock = threading.Lock()

    def reset(self):
        with self.lock:
            self.requests.clear()


def handler(root: Path, b: Behaviour):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: with Nagle's algorithm
        # on, every response after a connection's first waits out the
        # client's delayed ACK (40 ms here), as no real server lets it.
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.serve(body=False)

        def do_GET(self):
            self.serve(body=True)

        def serve(self, body):
            with b.lock:
                b.requests.append((self.command, self.path, self.headers.get("Range")))
                n = len(b.requests)
            if b.slow:
                time.sleep(b.slow)
            target = root / self.path.lstrip("/")
            if b.swap_after is not None and n > b.swap_after:
                target = b.swap_with
            if not target.is_file():
                return self.plain(404, b"not found\n")
            st = target.stat()
            size = st.st_size
            # As nginx makes it: from the file's size and modification time.
            etag = f'"{st.st_mtime_ns:x}-{size:x}"'
            match = self.headers.get("If-Match")
            if match is not None and match != "*" and etag not in [m.strip() for m in match.split(",")]:
                return self.plain(412, b"precondition failed\n")
            start, end, status = 0, size, 200
            want = self.headers.get("Range")
            if want and not b.ignore_range:
                m = re.fullmatch(r"bytes=(\d*)-(\d*)", want.strip())
                if not m or (m[1] == "" and m[2] == ""):
                    return self.plain(416, b"bad range\n")
                if m[1] == "":
                    start = max(0, size - int(m[2]))
                else:
                    start = int(m[1])
                    end = min(size, int(m[2]) + 1) if m[2] else size
                if start >= end:
                    return self.plain(416, b"unsatisfiable\n")
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            extra = (1 << 20) if b.long_body and body else 0
            self.send_header("Content-Length", str(end - start + extra))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Last-Modified", "Thu, 03 Dec 2026 12:00:00 GMT")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            if not body:
                return

            if b.short_body:
                end = start + (end - start) // 2
                self.close_connection = True
            with open(target, "rb") as f:
                f.seek(start)
                left = end - start
                while left > 0:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)
            self.wfile.write(b"x" * extra)

        def plain(self, status, text):
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(text)

    return Handler


@contextlib.contextmanager
def static_server(root: Path):
    """Serves `root` on a free loopback port; yields (base URL, Behaviour)."""
    behaviour = Behaviour()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler(root, behaviour))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", behaviour
    finally:
        server.shutdown()
        server.server_close()
