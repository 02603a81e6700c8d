#!/usr/bin/env python3
"""What a client library costs per PUT, apart from any server: 400 PUTs of
1-4 KB (benches/ingest.py's payloads) to a loopback HTTP server that answers
each at once, by http.client and by boto3; prints each one's p50.

    python3 -m venv /tmp/cc && /tmp/cc/bin/pip install -q boto3
    /tmp/cc/bin/python benches/client_cost.py

Why: benches/ingest.py drove SeaweedFS through boto3 until 2026-12-06, and
what boto3 spends per request counted as SeaweedFS's latency
(docs/benchmarks.md, "Small-file ingest against SeaweedFS").
"""

import http.client
import http.server
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import payloads, pct  # noqa: E402


class Answer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("ETag", '"0"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def p50(put, files):
    lat = []
    for name, body in files:
        t = time.perf_counter()
        put(name, body)
        lat.append(time.perf_counter() - t)
    return pct(lat, 50) * 1e3


def main():
    import boto3
    from botocore.config import Config

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    files = payloads(400, 1)
    c = http.client.HTTPConnection("127.0.0.1", port)

    def plain(name, body):
        c.request("PUT", f"/bench/{name}", body=body)
        c.getresponse().read()

    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="a",
                      aws_secret_access_key="b", region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"},
                                    retries={"max_attempts": 0}))
    print(f"http.client: PUT p50 {p50(plain, files):.3f} ms")
    print(f"boto3:       PUT p50 "
          f"{p50(lambda n, b: s3.put_object(Bucket='bench', Key=n, Body=b), files):.3f} ms")
    server.shutdown()


if __name__ == "__main__":
    main()
