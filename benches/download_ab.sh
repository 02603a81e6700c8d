#!/usr/bin/env bash
# Two znippy-server builds against each other on one large streamed GET.
#
#   benches/download_ab.sh BEFORE AFTER     # two znippy-server binaries
#   RUNS=5 GETS=10 benches/download_ab.sh BEFORE AFTER
#
# Each run starts `BIN serve` with its data on /dev/shm (so the disk is not
# what is measured), PUTs 256 MiB of random bytes as one file, and GETs it
# GETS times (default 6) with `curl -o /dev/null`; runs alternate BEFORE,
# AFTER, RUNS times (default 3). One line a run: MiB/s of each GET. Needs
# curl and python3 (for a free port).
set -euo pipefail

(($# == 2)) || { echo "usage: $0 BEFORE AFTER (znippy-server binaries)" >&2; exit 2; }
RUNS=${RUNS:-3}
GETS=${GETS:-6}
work=$(mktemp -d /dev/shm/znippy-download-ab.XXXXXX)
pid=
cleanup() {
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
head -c $((256 << 20)) /dev/urandom >"$work/big.bin"

run() {
    local bin=$1 port base
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    base=http://127.0.0.1:$port
    "$bin" serve --listen "127.0.0.1:$port" --log warn --data "$work/data" >"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
    curl -sf -X POST "$base/archives" -d '{"id": "g"}' >/dev/null
    curl -sf -X PUT --data-binary @"$work/big.bin" "$base/archives/g/files/big" >/dev/null
    echo -n "$2 "
    for _ in $(seq "$GETS"); do
        curl -sf -o /dev/null -w '%{speed_download}\n' "$base/archives/g/files/big"
    done | awk '{ printf "%.0f ", $1 / 1048576 } END { print "MiB/s" }'
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    rm -rf "$work/data"
}

for _ in $(seq "$RUNS"); do
    run "$(realpath "$1")" before
    run "$(realpath "$2")" after
done
