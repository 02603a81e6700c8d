"""`znippy serve --catalog rest` on SeaweedFS: the tables in its Iceberg REST
catalog, their files and the blobs in its S3 buckets. DuckDB and pyiceberg
attach SeaweedFS's catalog themselves, with no znippy in the path, and run
docs/store.md's latest-wins queries while appends go on: every append
acknowledged before a query started is in its answer, nothing that was never
sent is, and once the writer stops both agree with the service's listing.
The service's own read-only /iceberg/v1 facade shows the same tables, and
every file reads back through the service byte for byte.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_object_storage.py
"""

import hashlib
import random
import threading

import pytest
from pyiceberg.catalog.rest import RestCatalog

import seaweed
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

    # Sealing on object storage is not there yet, and says so.
    r = node.request("POST", f"/archives/{ARCHIVE}/seal")
    assert r.status == 501 and r.json()["error"]["code"] == "unsupported", r
