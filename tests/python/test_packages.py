"""Package sections: the typed rows the plugins read out of real packages
(scripts/packages downloads them), queried with SQL from pyarrow and DuckDB
through examples/read_index.py alone, no znippy code.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python
"""

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path

import duckdb
import pytest

from binary import znippy_bin

REPO = Path(__file__).resolve().parents[2]
PACKAGES = REPO / ".packages"

_spec = importlib.util.spec_from_file_location("read_index", REPO / "examples" / "read_index.py")
ri = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ri)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    assert (PACKAGES / ".stamp").exists(), "run ./scripts/packages first"
    tree = tmp_path_factory.mktemp("mirror")
    for p in PACKAGES.iterdir():
        if not p.name.startswith("."):
            shutil.copy(p, tree / p.name)
    (tree / "README.txt").write_text("not a package\n")
    out = tmp_path_factory.mktemp("out") / "mirror.znippy"
    subprocess.run([znippy_bin(), "compress", str(tree), "-o", str(out), "--repo", "central"],
                   check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def con(archive):
    con = duckdb.connect()
    for (plugin, repo), table in ri.read_packages(archive).items():
        assert repo == "central"
        con.register(plugin, table)
    con.register("files", ri.read_section(archive, ri.DATA))
    return con


def test_which_jars_hold_an_artifact_below_a_version(con):
    # A shaded jar hides guava inside: its row names it, with its version.
    rows = con.execute("""
        SELECT relative_path, group_id, version FROM maven
        WHERE artifact_id = 'guava' AND version < '34'""").fetchall()
    assert rows == [("closure-compiler.jar", "com.google.guava", "33.4.6-jre")]
    n = con.execute("SELECT count(*) FROM maven WHERE relative_path = 'closure-compiler.jar'")
    assert n.fetchone() == (8,)


def test_package_rows_join_the_data_index_to_their_blobs(con):
    # chunk_seq names the file's first data row; its rows say where its bytes are.
    rows = con.execute("""
        SELECT m.relative_path, sum(f.uncompressed_size) = any_value(m.size)
        FROM maven m JOIN files f ON f.relative_path = m.relative_path
        WHERE m.artifact_id = 'commons-lang3' GROUP BY m.relative_path""").fetchall()
    assert rows == [("commons-lang3-3.12.0.jar", True)]
    first = con.execute("""
        SELECT f.relative_path, f.fdata_offset FROM maven m
        JOIN files f ON f.chunk_seq = m.chunk_seq WHERE m.artifact_id = 'commons-lang3'""")
    assert first.fetchall() == [("commons-lang3-3.12.0.jar", 0)]


def test_lists_and_maps_are_queryable(con):
    deps = con.execute("""
        SELECT name, dependencies['lru-cache'] FROM npm
        WHERE map_contains(dependencies, 'lru-cache')""").fetchall()
    assert deps == [("semver", "^6.0.0")]
    libc = con.execute("""
        SELECT package FROM deb
        WHERE len(list_filter(depends, d -> d LIKE 'libc6%')) > 0""").fetchall()
    assert libc == [("hello",)]
    tags = con.execute("SELECT name, tags FROM python WHERE kind = 'wheel' ORDER BY name")
    assert tags.fetchall() == [("idna", ["py3-none-any"]), ("py4j", ["py2-none-any", "py3-none-any"])]
    # Pygments' 5 MB sdist and numpy's 20 MB one keep PKG-INFO last: read
    # all the same, numpy's followed as it streams past, 68 MB of tar in.
    sdists = con.execute("""
        SELECT name, version, requires_python FROM python WHERE kind = 'sdist' ORDER BY name""")
    assert sdists.fetchall() == [("Pygments", "2.21.0", ">=3.9"), ("idna", "3.7", ">=3.5"),
                                 ("numpy", "2.1.3", ">=3.10")]


def test_every_package_section_shares_its_first_columns(con):
    # One query over every kind of package, on the common prefix.
    union = " UNION ALL ".join(
        f"SELECT relative_path, pkg_type, repo, error FROM {t}"
        for t in ("maven", "python", "npm", "crate", "deb"))
    rows = con.execute(f"SELECT pkg_type, count(*) FROM ({union}) GROUP BY 1 ORDER BY 1")
    assert rows.fetchall() == [(1, 10), (2, 5), (3, 2), (4, 1), (5, 2)]
    assert con.execute(f"SELECT count(*) FROM ({union}) WHERE error IS NOT NULL").fetchone() == (0,)
    # A file no plugin claims has no package row.
    assert con.execute(f"SELECT count(*) FROM ({union}) WHERE relative_path = 'README.txt'"
                       ).fetchone() == (0,)


def test_the_cli_agrees(archive):
    out = subprocess.run([znippy_bin(), "packages", str(archive), "-t", "maven",
                          "-w", "artifact_id=guava"], check=True, capture_output=True, text=True)
    assert out.stdout.startswith("closure-compiler.jar\tmaven/central\tgroup_id=com.google.guava")
    none = subprocess.run([znippy_bin(), "packages", str(archive), "-w", "artifact_id=log4j-core"],
                          capture_output=True)
    assert none.returncode == 1 and none.stdout == b""
    # A plugin or a column nobody has is a typo, not a query that matches
    # nothing: it exits 3 and says what the names are.
    typo = subprocess.run([znippy_bin(), "packages", str(archive), "-t", "mavne"],
                          capture_output=True, text=True)
    assert typo.returncode == 3 and typo.stdout == ""
    assert "no plugin is named mavne (they are maven, python, npm, crate, deb)" in typo.stderr
    typo = subprocess.run([znippy_bin(), "packages", str(archive), "-t", "npm",
                           "-w", "artifact_id=guava"], capture_output=True, text=True)
    assert typo.returncode == 3 and "npm has no column artifact_id (its columns: " in typo.stderr
    typo = subprocess.run([znippy_bin(), "packages", str(archive), "-w", "artefact_id=guava"],
                          capture_output=True, text=True)
    assert typo.returncode == 3 and "no plugin has a column artefact_id" in typo.stderr


def test_packages_of_a_published_archive_read_in_place(archive):
    # Over HTTP range requests: the footer, the manifest, the package
    # sections; no blob.
    from static_server import static_server

    local = subprocess.run([znippy_bin(), "packages", str(archive)], check=True,
                           capture_output=True).stdout
    with static_server(archive.parent) as (base, _):
        r = subprocess.run([znippy_bin(), "packages", f"{base}/{archive.name}"], check=True,
                           capture_output=True, env={**os.environ, "ZNIPPY_REMOTE_STATS": "1"})
    assert r.stdout == local and local.count(b"\n") == 20
    line = next(l for l in r.stderr.decode().splitlines() if " requests, " in l)
    received = int(line.split(" requests, ")[1].split()[0])
    assert received < 300_000, line  # an index's worth of a 37 MB archive
