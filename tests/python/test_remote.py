"""`znippy list|get|verify|info|meta` on archives where they are published,
read in place by range requests: a static file server with ranges and ETags
(`static_server.py`), the service's own `GET /archives/{id}/archive.znippy`,
and SeaweedFS's S3 API.

What is counted is counted at the server: a cold one-file `get` is three
requests (the last 256 KiB, one batch of the data index, the blob), a second one through
the index cache is one (the blob), and `list --prefix` asks only for bytes of
the index. Hostile servers (a range ignored, a short body, a body that goes
on past its range, the object
replaced between requests, a server slower than the timeout) give an error
and never a file; a cached index of an archive since replaced is noticed and
the new archive read.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_remote.py
"""

import base64
import os
import random
import subprocess
import sys
import time

import pyarrow.fs
import pytest

import seaweed
from binary import REPO, znippy_bin
from service import serving
from static_server import static_server

PIECE = 2 * 1024 * 1024


def tree(seed, n=12000):
    """Many small text files, so that the data index (47 batches) does not
    fit in the first request's window; one file of three pieces."""
    rng = random.Random(seed)
    files = {f"src/m{i // 100:03}/f{i:05}.txt":
             (f"file {i} of seed {seed}\n" * rng.randrange(1, 60)).encode() for i in range(n)}
    files["big/blob.bin"] = rng.randbytes(2 * PIECE + 1000)
    # Text that packs into one compressed blob of about 1.5 MB: a file at its
    # end needs all of it, in one request.
    for i in range(40):
        files[f"a/t{i:02}.txt"] = base64.b64encode(rng.randbytes(37_500))
    return files


def compress(tmp_path, name, files):
    root = tmp_path / f"{name}-tree"
    for p, data in files.items():
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_bytes(data)
    out = tmp_path / "served" / f"{name}.znippy"
    out.parent.mkdir(exist_ok=True)
    # The piece and pack sizes the requests counted below assume, whatever the
    # defaults.
    subprocess.run([znippy_bin(), "compress", str(root), "-o", str(out), "--chunk-size", str(PIECE),
                    "--pack-size", str(PIECE),
                    "--meta", "src/m000/f00001.txt=lang=en", "--meta-archive", "built=42"],
                   check=True, capture_output=True)
    return out


def znippy(*args, env=None, check=True):
    r = subprocess.run([znippy_bin(), *args], capture_output=True, env=env, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r


def requests(stderr):
    """The request count `ZNIPPY_REMOTE_STATS` reports."""
    line = next(l for l in stderr.decode().splitlines() if " requests, " in l)
    return int(line.rsplit(": ", 1)[1].split()[0])


def blob_end(archive):
    for line in znippy("info", str(archive)).stdout.decode().splitlines():
        if line.startswith("blob region"):
            return int(line.split("(")[1].split()[0])
    raise AssertionError("no blob region line")


@pytest.fixture
def cache_env(tmp_path):
    return os.environ | {"ZNIPPY_CACHE_DIR": str(tmp_path / "cache")}


@pytest.fixture
def served(tmp_path):
    files = tree(1)
    archive = compress(tmp_path, "a", files)
    with static_server(archive.parent) as (base, behaviour):
        yield files, archive, f"{base}/a.znippy", behaviour


def gets(behaviour):
    return [r for r in behaviour.requests if r[0] == "GET"]


def test_one_file_in_three_requests_then_one_through_the_cache(served, cache_env):
    files, _, url, b = served
    path = "src/m007/f00712.txt"
    assert znippy("get", url, path, env=cache_env).stdout == files[path]
    assert len(gets(b)) == 3, b.requests
    assert all(r[2] and r[2].startswith("bytes=") for r in b.requests), "ranged, every one"

    b.reset()
    assert znippy("get", url, path, env=cache_env).stdout == files[path]
    assert len(b.requests) == 1, b.requests
    b.reset()
    # Its neighbour is in the same cached batch of the data index.
    assert znippy("get", url, "src/m007/f00713.txt", env=cache_env).stdout \
        == files["src/m007/f00713.txt"]
    assert len(b.requests) == 1, b.requests

    # The last file of a pack that compresses to several hundred KiB: the
    # blob comes in one request, not in 128 KiB pieces as from a local file.
    b.reset()
    assert znippy("get", url, "a/t39.txt", env=cache_env).stdout == files["a/t39.txt"]
    lengths = [int(hi) + 1 - int(lo) for lo, hi in
               (r[2].split("=")[1].split("-") for r in b.requests)]
    assert len(lengths) <= 2 and sum(n > 1 << 20 for n in lengths) == 1, b.requests

    # A file of three pieces: one request for each, after the index.
    b.reset()
    off = os.environ | {"ZNIPPY_CACHE_MAX": "0"}
    assert znippy("get", url, "big/blob.bin", env=off).stdout == files["big/blob.bin"]
    assert len(b.requests) == 2 + 3, b.requests

    # Without the cache, the same get costs three requests again.
    b.reset()
    assert znippy("get", url, path, env=off).stdout == files[path]
    assert len(b.requests) == 3, b.requests


def test_list_reads_only_the_index_and_verify_info_meta_agree_with_a_local_read(served,
                                                                                cache_env):
    files, archive, url, b = served
    end = blob_end(archive)
    listed = znippy("list", "--prefix", "src/m003/", url, env=cache_env).stdout.decode().split()
    assert listed == sorted(p for p in files if p.startswith("src/m003/"))
    for method, _, rng in b.requests:
        start = rng.split("=")[1].split("-")[0]
        assert start == "" or int(start) >= end, f"list read a blob: {rng}"

    for args in (["verify"], ["info"], ["meta", "--key", "lang"], ["meta", "--prefix", "b"]):
        remote = znippy(*args, url, env=cache_env).stdout.decode()
        local = znippy(*args, str(archive)).stdout.decode()
        assert remote.replace(url, "ARCHIVE") == local.replace(str(archive), "ARCHIVE"), args
    assert znippy("meta", "--key", "nope", url, env=cache_env, check=False).returncode == 1


def refused(url, path, out, env, *words):
    r = znippy("get", url, path, "-o", str(out), env=env, check=False)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert any(w in err for w in words), err
    assert not out.exists() and not list(out.parent.glob("*.partial")), "no file, not even half"
    return err


def test_hostile_servers_give_an_error_never_a_file(served, tmp_path):
    files, archive, url, b = served
    env = os.environ | {"ZNIPPY_CACHE_MAX": "0", "ZNIPPY_REMOTE_TIMEOUT": "1"}
    out = tmp_path / "out" / "got"
    out.parent.mkdir()

    b.ignore_range = True
    refused(url, "src/m000/f00001.txt", out, env, "Range request not supported")
    b.ignore_range = False

    b.short_body = True
    refused(url, "src/m000/f00001.txt", out, env, "sent", "error", "body")
    b.short_body = False

    b.long_body = True
    refused(url, "src/m000/f00001.txt", out, env, "sent")
    b.long_body = False

    # Replaced after the first request: the next one's If-Match fails.
    other = compress(tmp_path, "other", tree(2))
    b.reset()
    b.swap_after, b.swap_with = 1, other
    err = refused(url, "src/m000/f00001.txt", out, env, "changed")
    assert "run the command again" in err
    b.swap_after = None

    b.slow = 3
    started = time.monotonic()
    refused(url, "src/m000/f00001.txt", out, env, "timed out", "timeout", "Timeout")
    assert time.monotonic() - started < 30
    b.slow = 0

    assert znippy("get", url, "src/m000/f00001.txt", env=env).stdout == files["src/m000/f00001.txt"]


def test_a_cached_index_of_a_replaced_archive_is_noticed(served, tmp_path, cache_env):
    files, archive, url, b = served
    path = "src/m000/f00001.txt"
    assert znippy("get", url, path, env=cache_env).stdout == files[path]
    newer = tree(3)
    replacement = compress(tmp_path, "newer", newer)
    b.swap_after, b.swap_with = 0, replacement
    b.reset()
    r = znippy("get", url, path, env=cache_env | {"ZNIPPY_REMOTE_STATS": "1"})
    assert r.stdout == newer[path] != files[path]
    # The cached blob request failed its If-Match; then a cold read.
    assert len(b.requests) == 1 + 3, b.requests

    # A command that needs no blob checks the cached index with a HEAD first.
    b.swap_after = None
    info = znippy("info", url, env=cache_env).stdout.decode()
    assert info.replace(url, "X") == znippy("info", str(archive)).stdout.decode().replace(
        str(archive), "X")
    b.swap_after = 0
    b.reset()
    info = znippy("info", url, env=cache_env).stdout.decode()
    assert info.replace(url, "X") == znippy("info", str(replacement)).stdout.decode().replace(
        str(replacement), "X")
    assert b.requests[0][0] == "HEAD", b.requests


def test_the_service_download_reads_in_place(tmp_path, cache_env):
    files = {f"d/{i}.txt": f"served {i}\n".encode() * (i + 1) for i in range(50)}
    with serving(["--data", str(tmp_path / "data")], tmp_path / "serve.log") as srv:
        srv.create("s")
        srv.post_multipart("s", files)
        receipt = srv.ok("POST", "/archives/s/seal")
        url = f"{srv.base}/archives/s/archive.znippy"
        r = znippy("get", url, "d/7.txt", env=cache_env | {"ZNIPPY_REMOTE_STATS": "1"})
        assert r.stdout == files["d/7.txt"]
        # The whole archive fits in the first request's window.
        assert requests(r.stderr) == 1, r.stderr
        # Its index, cut from that window, is cached: the next get opens
        # without a request and asks only for the blob.
        r = znippy("get", url, "d/8.txt", env=cache_env | {"ZNIPPY_REMOTE_STATS": "1"})
        assert r.stdout == files["d/8.txt"]
        assert requests(r.stderr) == 1 and "index from the cache" in r.stderr.decode(), r.stderr
        listed = znippy("list", url, env=cache_env).stdout.decode().split()
        assert listed == sorted(files)
        assert f"identity       {receipt['identity']}" in znippy("info", url).stdout.decode()


def test_an_archive_in_s3_reads_in_place(tmp_path, cache_env):
    files = tree(4)
    archive = compress(tmp_path, "s3", files)
    with seaweed.seaweed(tmp_path) as sw:
        s3 = pyarrow.fs.S3FileSystem(access_key=seaweed.KEY_ID, secret_key=seaweed.SECRET,
                                     endpoint_override=sw.s3, scheme="http",
                                     region="us-east-1")
        with s3.open_output_stream(f"{seaweed.BUCKET}/published/a.znippy") as f:
            f.write(archive.read_bytes())
        env = sw.env() | cache_env | {"AWS_ENDPOINT_URL": sw.s3, "ZNIPPY_REMOTE_STATS": "1"}
        url = f"s3://{seaweed.BUCKET}/published/a.znippy"
        path = "src/m001/f00150.txt"
        r = znippy("get", url, path, env=env)
        assert r.stdout == files[path]
        assert requests(r.stderr) == 3, r.stderr
        r = znippy("get", url, path, env=env)
        assert r.stdout == files[path]
        assert requests(r.stderr) == 1, r.stderr
        assert znippy("verify", url, env=env).stdout.startswith(b"ok: ")
        missing = znippy("get", f"s3://{seaweed.BUCKET}/published/none.znippy", path,
                         env=env, check=False)
        assert missing.returncode == 1 and b"not found" in missing.stderr.lower(), missing.stderr


def test_the_python_example_of_docs_remote_md_runs_as_written(served):
    """docs/remote.md's pyarrow + DuckDB example, verbatim but for its URL."""
    doc = (REPO / "docs" / "remote.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    files, _, url, b = served
    example = "http://127.0.0.1:7878/archives/docs/archive.znippy"
    assert example in code
    r = subprocess.run([sys.executable, "-c", code.replace(example, url)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "big/blob.bin" in r.stdout and str(len(files["big/blob.bin"])) in r.stdout, r.stdout
    assert len(b.requests) <= 2, b.requests
