"""Schemathesis over the service's own OpenAPI description.

Starts `znippy serve` on a free loopback port with a temporary data directory
and a bearer token, then runs the schemathesis CLI over `/openapi.json` with a
fixed seed, one worker and a bounded number of examples per operation: every
check (no 5xx, answers that match their schemas and documented statuses,
valid input accepted, invalid input refused). Any failure fails the test,
with schemathesis' report in the message.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_openapi.py
Knobs (env): ZNIPPY_ST_MAX_EXAMPLES (default 30), ZNIPPY_ST_SEED (default 1),
ZNIPPY_ST_TIMEOUT (seconds for the whole run, default 120), ZNIPPY_OPENAPI (a
file to test instead of the served description, e.g. an edited
docs/openapi.json before the binary is rebuilt).
"""

import os
import queue
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from binary import znippy_bin

MAX_EXAMPLES = int(os.environ.get("ZNIPPY_ST_MAX_EXAMPLES", "30"))
SEED = int(os.environ.get("ZNIPPY_ST_SEED", "1"))
ST_TIMEOUT = float(os.environ.get("ZNIPPY_ST_TIMEOUT", "120"))

# Settings of the harness, each a rule JSON Schema cannot state, not a pass
# for the service:
# - a 416 for a range past the end of a file is right (RFC 9110) and
#   documented, but positive_data_acceptance counts every 4xx outside this
#   list (schemathesis' default plus 416) as valid input refused;
# - three rules span fields, which a schema cannot express, so input that
#   breaks them is "valid" to schemathesis and rightly refused: searchMeta
#   takes exactly one of key and prefix (bad_query), createArchive's
#   pack_threshold must be below chunk_size (bad_property), and appendFiles
#   refuses a path twice in one batch (bad_input).
CONFIG = """\
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", 401, 403, 404, 409, 416, 429, "5xx"]

[[operations]]
include-operation-id = "searchMeta"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "createArchive"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-operation-id = "appendFiles"
checks.positive_data_acceptance.enabled = false
"""

def _st_command():
    """The schemathesis CLI of this interpreter's environment."""
    st = Path(sys.executable).with_name("st")
    if st.exists():
        return [str(st)]
    return [sys.executable, "-m", "schemathesis.cli"]


@pytest.fixture
def service(tmp_path):
    """A running `znippy serve`: yields (base_url, token)."""
    binary = znippy_bin()
    token = secrets.token_hex(16)
    data = tmp_path / "data"
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(
        [binary, "serve", "--data", str(data), "--listen", "127.0.0.1:0",
         "--token", token, "--log", "warn"],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
    )
    lines = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    base = None
    try:
        while base is None:
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                pytest.fail("znippy serve printed no 'listening on' line within 30 s")
            if line is None:
                log.flush()
                pytest.fail("znippy serve exited: "
                            + (tmp_path / "serve.log").read_text(errors="replace")[-2000:])
            m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if m:
                base = m.group(1)
        yield base, token
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(data, ignore_errors=True)


def _request(method, url, token, body=None, content_type="application/json"):
    req = urllib.request.Request(url, data=body, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status


def test_openapi_conformance(service, tmp_path):
    base, token = service
    # Something for the path-parameter operations to find: schemathesis makes
    # its own archives in the stateful phase, but not files or metadata.
    assert _request("POST", f"{base}/archives", token, b'{"id": "a", "metadata": true}') == 201
    assert _request("PUT", f"{base}/archives/a/files/docs/x.txt", token,
                    b"hello world", "application/octet-stream") == 200
    assert _request("PUT", f"{base}/archives/a/meta", token,
                    b'{"set": [{"path": "docs/x.txt", "key": "lang", "value": "en"}]}') == 200

    schema = os.environ.get("ZNIPPY_OPENAPI")
    location = [str(Path(schema).resolve()), "--url", base] if schema else [f"{base}/openapi.json"]
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    cmd = _st_command() + [
        "--config-file", str(config),
        "run", *location,
        "--header", f"Authorization: Bearer {token}",
        # Every check is on by default; naming them here would override the
        # per-operation settings in CONFIG.
        "--max-examples", str(MAX_EXAMPLES),
        "--seed", str(SEED),
        "--workers", "1",                # reproducible order, no drop/read races
        "--generation-database", "none",  # no .hypothesis/ carrying examples between runs
        "--request-timeout", "10",
        # A static document; its body also seeds bogus stateful links ("{id}").
        "--exclude-operation-id", "openapi",
        "--no-color",
        "--report", "junit", "--report-dir", str(tmp_path / "report"),
    ]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=ST_TIMEOUT,
                             cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"})
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        pytest.fail(f"schemathesis ran past {ST_TIMEOUT} s\n{out[-5000:]}")
    report = run.stdout + run.stderr
    assert run.returncode == 0, (
        f"schemathesis found failures (exit {run.returncode}, seed {SEED}, "
        f"{MAX_EXAMPLES} examples per operation):\n" + report[-20000:]
    )
