"""Package tables of a live archive: what the plugins read from the packages
uploaded over HTTP is in one Iceberg table per plugin (packages_maven, ...),
queried live by DuckDB and pyiceberg through the service's REST catalog,
answered by GET /archives/{id}/packages, and sealed into package sections,
byte for byte what `znippy compress` and `znippy append` make of the same
batches. Real packages: scripts/packages downloads them.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_live_packages.py
"""

import hashlib
import io
import json
import tarfile
import subprocess
import urllib.parse
from pathlib import Path

import pytest
from pyiceberg.catalog.rest import RestCatalog

from binary import znippy_bin
from service import LIVE_FILES_SQL, duckdb_connection, serving

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / ".packages"
AID = "mirror"

BATCH1 = ["closure-compiler.jar", "commons-lang3-3.12.0.jar", "fst-0.4.7.crate",
          "hello_2.10-3_amd64.deb", "idna-3.7-py3-none-any.whl", "semver-7.6.0.tgz"]
# Current package rows: those whose file is live at the append that wrote them.
CURRENT_SQL = """
    SELECT p.* FROM {packages} p JOIN (
        SELECT relative_path, any_value(append_seq) AS append_seq FROM (
            SELECT * FROM {files}
            QUALIFY append_seq = max(append_seq) OVER (PARTITION BY relative_path))
        GROUP BY relative_path HAVING NOT bool_or(tombstone)
    ) f ON f.relative_path = p.relative_path AND f.append_seq = p.append_seq"""


def read(name):
    assert (PACKAGES / ".stamp").exists(), "run ./scripts/packages first"
    return (PACKAGES / name).read_bytes()


@pytest.fixture
def server(tmp_path):
    with serving(["--data", str(tmp_path / "data")], tmp_path / "serve.log") as srv:
        yield srv


def create(server):
    body = json.dumps({"id": AID, "repo": "central"}).encode()
    server.ok("POST", "/archives", body, {"Content-Type": "application/json"}, status=201)


def packages(server, **q):
    return server.ok("GET", f"/archives/{AID}/packages?{urllib.parse.urlencode(q)}")


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tar_of(files):
    """A tar stream of `files` in order, each 0644."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def post_tar(server, tar):
    server.ok("POST", f"/archives/{AID}/files", tar, {"Content-Type": "application/x-tar"})


def test_live_package_tables_answer_sql_and_seal_as_compress(server, tmp_path):
    create(server)
    first = tar_of({"README.txt": b"hi\n"} | {n: read(n) for n in BATCH1})
    post_tar(server, first)

    # The service answers from its tables.
    guava = packages(server, type="maven", name="guava")["packages"]
    assert [(r["path"], r["columns"]["version"]) for r in guava] == \
        [("closure-compiler.jar", "33.4.6-jre")]
    assert guava[0]["repo"] == "central" and guava[0]["error"] is None
    deb = packages(server, type="deb")["packages"]
    assert [r["columns"]["package"] for r in deb] == ["hello"]
    assert packages(server, path="README.txt")["packages"] == []
    every = packages(server, limit=3)
    assert len(every["packages"]) == 3 and every["truncated"]

    # DuckDB through the REST catalog: one table per plugin, typed columns.
    con = duckdb_connection()
    con.execute(f"ATTACH 'wh' AS z (TYPE iceberg, ENDPOINT '{server.base}/iceberg', "
                "AUTHORIZATION_TYPE 'none')")
    t = lambda name: f'z."{AID}".{name}'  # noqa: E731
    tables = {n for _, s, n, *_ in con.execute("SHOW ALL TABLES").fetchall() if s == AID}
    assert tables == {"files", "meta", "packages_maven", "packages_python", "packages_npm",
                      "packages_crate", "packages_deb"}
    rows = con.execute(f"SELECT relative_path, group_id, version FROM {t('packages_maven')} "
                       "WHERE artifact_id = 'guava'").fetchall()
    assert rows == [("closure-compiler.jar", "com.google.guava", "33.4.6-jre")]
    deps = con.execute(f"SELECT name, dependencies['lru-cache'] FROM {t('packages_npm')}")
    assert deps.fetchall() == [("semver", "^6.0.0")]
    libc = con.execute(f"SELECT package FROM {t('packages_deb')} "
                       "WHERE len(list_filter(depends, d -> d LIKE 'libc6%')) > 0")
    assert libc.fetchall() == [("hello",)]

    # pyiceberg reads the same rows.
    rest = RestCatalog("znippy", uri=f"{server.base}/iceberg")
    crates = rest.load_table(f"{AID}.packages_crate").scan().to_arrow().to_pylist()
    assert [(c["name"], c["version"], c["pkg_type"]) for c in crates] == [("fst", "0.4.7", 4)]

    # Replace a jar with a text file and delete the .deb: their rows stay in
    # the log, but are no longer current, in SQL and in the service. The new
    # "jar" is claimed by its name, and is a damaged one.
    second = tar_of({"commons-lang3-3.12.0.jar": b"not a jar any more\n",
                     "is-number-7.0.0.tgz": read("is-number-7.0.0.tgz")})
    post_tar(server, second)
    server.delete(AID, "hello_2.10-3_amd64.deb")
    current = lambda p: CURRENT_SQL.format(packages=t(p), files=t("files"))  # noqa: E731
    lang3 = con.execute(f"SELECT artifact_id, error FROM ({current('packages_maven')}) "
                        "WHERE relative_path = 'commons-lang3-3.12.0.jar'").fetchall()
    assert len(lang3) == 1 and lang3[0][0] is None and "zip" in lang3[0][1], lang3
    assert con.execute(f"SELECT count(*) FROM ({current('packages_deb')})").fetchone() == (0,)
    served = packages(server, path="commons-lang3-3.12.0.jar")["packages"]
    assert [(r["columns"], r["error"]) for r in served] == [({}, lang3[0][1])]
    assert packages(server, type="deb")["packages"] == []
    npm = {r["columns"]["name"] for r in packages(server, type="npm")["packages"]}
    assert npm == {"semver", "is-number"}
    con.close()

    # Sealed: what `compress --tar` of the first upload's live files, then
    # `append --tar` of the second, make with the same plugins and repo.
    server.ok("POST", f"/archives/{AID}/seal")
    sealed = tmp_path / "sealed.znippy"
    sealed.write_bytes(server.request("GET", f"/archives/{AID}/archive.znippy").body)
    gone = {"hello_2.10-3_amd64.deb", "commons-lang3-3.12.0.jar"}
    live_first = tar_of({"README.txt": b"hi\n"} | {n: read(n) for n in BATCH1 if n not in gone})
    rebuilt = tmp_path / "rebuilt.znippy"
    z = znippy_bin()
    for args, stream in [(["compress", "--tar", "-", "-o", str(rebuilt)], live_first),
                         (["append", str(rebuilt), "--tar", "-"], second)]:
        subprocess.run([z, *args, "--repo", "central"], input=stream, check=True,
                       capture_output=True)
    assert sha(sealed) == sha(rebuilt)
    out = subprocess.run([z, "packages", str(sealed), "-t", "npm"], check=True,
                         capture_output=True, text=True).stdout
    assert [l.split("\t")[0] for l in out.splitlines()] == ["semver-7.6.0.tgz",
                                                           "is-number-7.0.0.tgz"]
