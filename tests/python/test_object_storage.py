"""`znippy serve --catalog rest` on SeaweedFS: the tables in its Iceberg REST
catalog, their files and the blobs in its S3 buckets. DuckDB and pyiceberg
attach SeaweedFS's catalog themselves, with no znippy in the path, and run
docs/store.md's latest-wins queries while appends go on: every append
acknowledged before a query started is in its answer, nothing that was never
sent is, and once the writer stops both agree with the service's listing.
The service's own read-only /iceberg/v1 facade shows the same tables, and
every file reads back through the service byte for byte. A seal publishes one
object that every node serves, or redirects to with --presign.

Faults: with SeaweedFS down every request fails with a 503
`storage_unavailable` JSON error (never a 500, never a corrupt table) and
succeeds again once it is back; a node killed with SIGKILL in the middle of
an upload loses nothing acknowledged, leaves no object behind, and the other
node goes on serving.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_object_storage.py
"""

import hashlib
import http.client
import random
import subprocess
import threading
import urllib.parse
import urllib.request

import pyarrow.fs

import pytest
from pyiceberg.catalog.rest import RestCatalog

import seaweed
from binary import znippy_bin
from service import (HTTP_TIMEOUT, LIVE_FILES_SQL, LIVE_META_SQL, duckdb_connection, meta_fact,
                     py_live, py_meta, serving)

ARCHIVE = "shared"
BATCHES = 8


@pytest.fixture
def stack(tmp_path):
    """SeaweedFS and one `znippy serve` node on it."""
    with seaweed.seaweed(tmp_path) as sw:
        with serving(sw.znippy_args(), tmp_path / "serve.log", env=sw.env()) as node:
            yield sw, node


def duck_live(con):
    return dict(con.execute(LIVE_FILES_SQL.format(files=f'sw."znippy.{ARCHIVE}".files')).fetchall())


def duck_meta(con):
    sql = LIVE_META_SQL.format(meta=f'sw."znippy.{ARCHIVE}".meta')
    return {meta_fact(p, k, vt, vals) for p, k, vt, *vals in con.execute(sql).fetchall()}


def batch(i):
    rng = random.Random(i)
    files = {f"b{i}/f{j}.txt": rng.randbytes(rng.randrange(1, 4000)) for j in range(4)}
    if i == 2:
        # Larger than a segment's first part: a multipart upload.
        files["b2/big.bin"] = rng.randbytes(9 * 1024 * 1024 + 17)
    return files


def test_shared_catalog_readers_follow_appends(stack):
    sw, node = stack
    node.create(ARCHIVE)
    sent = {}
    for i in range(BATCHES):
        sent |= batch(i)

    acked = {}
    lock = threading.Lock()
    failed = []

    def writer():
        try:
            for i in range(BATCHES):
                files = batch(i)
                node.post_multipart(ARCHIVE, files, meta=[f"b{i}/f0.txt=batch={i}"])
                with lock:
                    acked.update({p: len(d) for p, d in files.items()})
        except BaseException as e:  # reported by the main thread
            failed.append(e)

    con = duckdb_connection()
    sw.attach_duckdb(con)
    catalog = RestCatalog("seaweed", **sw.pyiceberg_props())
    sizes = {p: len(d) for p, d in sent.items()}

    w = threading.Thread(target=writer)
    w.start()
    queries = 0
    while w.is_alive() or queries < 2:
        with lock:
            before = dict(acked)
        for live in (duck_live(con),
                     py_live(catalog.load_table(("znippy", ARCHIVE, "files")))):
            assert before.items() <= live.items(), "an acknowledged append is missing"
            assert live.items() <= sizes.items(), "a file that was never sent"
        queries += 1
    w.join(HTTP_TIMEOUT)
    assert not failed, failed

    # Every file reads back through the service, byte for byte.
    for path, data in sent.items():
        r = node.request("GET", f"/archives/{ARCHIVE}/files/{path}")
        assert r.status == 200 and hashlib.sha256(r.body).digest() == hashlib.sha256(data).digest(), path

    node.delete(ARCHIVE, "b0/f1.txt")
    del sizes["b0/f1.txt"]
    expected_meta = {(f"b{i}/f0.txt", "batch", "i64", i) for i in range(BATCHES)}
    assert node.listing(ARCHIVE) == sizes
    assert node.meta(ARCHIVE) == expected_meta
    assert duck_live(con) == sizes
    assert duck_meta(con) == expected_meta
    assert py_live(catalog.load_table(("znippy", ARCHIVE, "files"))) == sizes
    assert py_meta(catalog.load_table(("znippy", ARCHIVE, "meta"))) == expected_meta
    con.close()

    # The service's facade names the same tables, on S3.
    facade = RestCatalog("znippy", uri=f"{node.base}/iceberg",
                         **{k: v for k, v in sw.pyiceberg_props().items() if k.startswith("s3.")})
    files = facade.load_table((ARCHIVE, "files"))
    assert files.metadata_location.startswith(f"s3://{seaweed.TABLE_BUCKET}/")
    assert py_live(files) == sizes

    # The seal's snapshot adds no rows: outside readers see the same files.
    assert node.ok("POST", f"/archives/{ARCHIVE}/seal")["in_place"] is False
    assert py_live(catalog.load_table(("znippy", ARCHIVE, "files"))) == sizes


def segment_objects(sw, archive_id):
    """The keys of the objects under an archive's blob prefix, straight from S3."""
    s3 = pyarrow.fs.S3FileSystem(access_key=seaweed.KEY_ID, secret_key=seaweed.SECRET,
                                 endpoint_override=sw.s3, region="us-east-1")
    sel = pyarrow.fs.FileSelector(f"{seaweed.BUCKET}/znippy/{archive_id}", allow_not_found=True,
                                  recursive=True)
    prefix = f"{seaweed.BUCKET}/"
    return {i.path[len(prefix):] for i in s3.get_file_info(sel) if i.is_file}


def named_segments(sw, archive_id):
    catalog = RestCatalog("seaweed", **sw.pyiceberg_props())
    rows = catalog.load_table(("znippy", archive_id, "files")).scan(
        selected_fields=("segment",)).to_arrow().to_pylist()
    return {r["segment"] for r in rows if r["segment"] is not None}


def test_an_outage_is_a_503_and_service_resumes(stack):
    sw, node = stack
    node.create("outage")
    node.put("outage", "before.txt", b"before")
    sw.kill()
    for method, path, body in [("PUT", "/archives/outage/files/during.txt", b"x"),
                               ("GET", "/archives/outage/files/before.txt", None),
                               ("GET", "/archives/outage/files", None),
                               ("DELETE", "/archives/outage/files/before.txt", None)]:
        r = node.request(method, path, body, {"Content-Type": "application/octet-stream"})
        assert r.status == 503, (method, path, r, node.logs())
        assert r.json()["error"]["code"] == "storage_unavailable", r
    sw.start()
    node.put("outage", "after.txt", b"after")
    expected = {"before.txt": 6, "after.txt": 5}
    assert node.listing("outage") == expected
    assert node.request("GET", "/archives/outage/files/before.txt").body == b"before"
    catalog = RestCatalog("seaweed", **sw.pyiceberg_props())
    assert py_live(catalog.load_table(("znippy", "outage", "files"))) == expected


def test_a_killed_node_loses_nothing_acknowledged(tmp_path):
    with seaweed.seaweed(tmp_path) as sw:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with serving(sw.znippy_args(), tmp_path / "a" / "serve.log", env=sw.env(),
                     killed=True) as a, \
                serving(sw.znippy_args(), tmp_path / "b" / "serve.log", env=sw.env()) as b:
            b.create("k")
            acked = {}
            for i in range(3):
                data = random.Random(i).randbytes(20000)
                b.put("k", f"b{i}", data)
                a.put("k", f"a{i}", data[::-1])
                acked |= {f"b{i}": data, f"a{i}": data[::-1]}

            # A large upload to node A, cut off by SIGKILL past its first
            # segment part (8 MiB), so a multipart upload is under way.
            url = urllib.parse.urlsplit(a.base)
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=HTTP_TIMEOUT)
            conn.putrequest("PUT", "/archives/k/files/big.bin")
            conn.putheader("Content-Type", "application/octet-stream")
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            piece = random.Random(7).randbytes(1 << 20)
            for _ in range(20):
                conn.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
            a.proc.kill()
            a.proc.wait()
            conn.close()

            for path, data in acked.items():
                r = b.request("GET", f"/archives/k/files/{path}")
                assert r.status == 200 and r.body == data, path
            b.put("k", "after", b"still serving")
            assert set(b.listing("k")) == set(acked) | {"after"}
            assert segment_objects(sw, "k") == named_segments(sw, "k"), \
                "the killed upload left an object behind"


def test_a_sealed_archive_downloads_through_any_node(tmp_path):
    """Sealed on node A, the archive is one object in the bucket: node A
    serves it (ranges too), node B with --presign redirects GET and HEAD to
    a presigned URL of that object, the bytes are the same, and the CLI
    reads the download as an ordinary archive."""
    with seaweed.seaweed(tmp_path) as sw:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with serving(sw.znippy_args(), tmp_path / "a" / "serve.log", env=sw.env()) as a, \
                serving(sw.znippy_args() + ["--presign"], tmp_path / "b" / "serve.log",
                        env=sw.env()) as b:
            a.create("s")
            sent = batch(2)
            a.post_multipart("s", {p: d for p, d in sent.items() if p.endswith(".txt")})
            b.put("s", "b2/big.bin", sent["b2/big.bin"])
            a.delete("s", "b2/f3.txt")
            del sent["b2/f3.txt"]
            receipt = a.ok("POST", "/archives/s/seal")
            again = b.ok("POST", "/archives/s/seal")
            same = ("size", "identity", "download")
            assert {k: again[k] for k in same} == {k: receipt[k] for k in same}, "sealed once"
            assert receipt["in_place"] is False

            whole = a.request("GET", "/archives/s/archive.znippy")
            assert whole.status == 200 and len(whole.body) == receipt["size"], whole
            part = a.request("GET", "/archives/s/archive.znippy", headers={"Range": "bytes=-64"})
            assert part.status == 206 and part.body == whole.body[-64:], part

            url = urllib.parse.urlsplit(b.base)
            for method in ("GET", "HEAD"):
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=HTTP_TIMEOUT)
                conn.request(method, "/archives/s/archive.znippy")
                r = conn.getresponse()
                r.read()
                conn.close()
                assert r.status == 307, (method, r.status, b.logs())
                location = r.getheader("Location")
                assert location.startswith(sw.s3 + "/"), location
                with urllib.request.urlopen(urllib.request.Request(location, method=method),
                                            timeout=HTTP_TIMEOUT) as direct:
                    body = direct.read()
                    assert int(direct.headers["Content-Length"]) == receipt["size"]
                if method == "GET":
                    assert hashlib.sha256(body).digest() == hashlib.sha256(whole.body).digest()

            r = b.request("PUT", "/archives/s/files/late.txt", b"late",
                          {"Content-Type": "application/octet-stream"})
            assert r.status == 409 and r.json()["error"]["code"] == "sealed", r
            for path, data in sent.items():
                assert b.request("GET", f"/archives/s/files/{path}").body == data, path

    downloaded = tmp_path / "s.znippy"
    downloaded.write_bytes(whole.body)
    listed = subprocess.run([znippy_bin(), "list", str(downloaded)], check=True,
                            capture_output=True, text=True).stdout.split()
    assert sorted(listed) == sorted(sent)
    subprocess.run([znippy_bin(), "verify", str(downloaded)], check=True, capture_output=True)


def test_package_tables_on_seaweedfs_answer_sql_through_its_catalog(stack, tmp_path):
    """The plugins' tables on the shared catalog: DuckDB and pyiceberg read
    them through SeaweedFS's catalog, and the sealed object has the package
    sections."""
    from pathlib import Path

    sw, node = stack
    packages = Path(__file__).resolve().parents[2] / ".packages"
    node.create("mirror")
    names = ["closure-compiler.jar", "hello_2.10-3_amd64.deb", "semver-7.6.0.tgz"]
    node.post_multipart("mirror", {n: (packages / n).read_bytes() for n in names})
    con = duckdb_connection()
    sw.attach_duckdb(con)
    rows = con.execute("""SELECT relative_path, version FROM sw."znippy.mirror".packages_maven
                          WHERE artifact_id = 'guava'""").fetchall()
    assert rows == [("closure-compiler.jar", "33.4.6-jre")]
    con.close()
    catalog = RestCatalog("seaweed", **sw.pyiceberg_props())
    deb = catalog.load_table("znippy.mirror.packages_deb").scan().to_arrow().to_pylist()
    assert [(r["package"], r["version"]) for r in deb] == [("hello", "2.10-3")]
    served = node.ok("GET", "/archives/mirror/packages?type=npm")["packages"]
    assert [r["columns"]["name"] for r in served] == ["semver"]
    node.ok("POST", "/archives/mirror/seal")
    sealed = tmp_path / "mirror.znippy"
    sealed.write_bytes(node.request("GET", "/archives/mirror/archive.znippy").body)
    out = subprocess.run([znippy_bin(), "packages", str(sealed), "-w", "artifact_id=guava"],
                         check=True, capture_output=True, text=True).stdout
    assert out.startswith("closure-compiler.jar\tmaven\tgroup_id=com.google.guava")
