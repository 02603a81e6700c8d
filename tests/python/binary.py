"""The znippy binary the Python tests drive: `ZNIPPY_BIN`, else the debug
build. A test without it skips where a person runs it by hand, and fails in
CI, which never skips one."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def znippy_bin():
    env = os.environ.get("ZNIPPY_BIN")
    if env:
        return env
    built = REPO / "target" / "debug" / "znippy"
    if built.exists():
        return str(built)
    if os.environ.get("CI"):
        pytest.fail("no znippy binary: set ZNIPPY_BIN (CI never skips these tests)")
    pytest.skip("set ZNIPPY_BIN to a built znippy binary")
