#!/usr/bin/env bash
# benches/first_listing.sh: the first GET /archives after a clean restart of
# `znippy serve`, which opens every archive, for two builds taken in turn.
#
#   bash benches/first_listing.sh DIR_A DIR_B [ROUNDS]
#
# DIR_A and DIR_B each hold a `znippy` and its `znippy-server` (copy them
# out of target/release after `./scripts/build --release`). The data
# directory is made once, by build A: ARCHIVES archives (default 80) of
# PUTS one-file PUTs each (default 20), then a clean stop. Then A runs
# ROUNDS times (default 4) and B as many: each run starts the service,
# times the first listing with curl and stops it cleanly (SIGTERM). The
# builds are not taken in turn, because what a close leaves is what the
# next start finds: B's first run is an upgrade from A, its others restarts
# of B. Prints one line a run: the build and the seconds.
# BENCH_DIR (default /tmp/znippy-bench) holds the data directory; it is
# removed at the end.

set -euo pipefail
(($# >= 2)) || {
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
builds=("$1" "$2")
rounds=${3:-4}
archives=${ARCHIVES:-80}
puts=${PUTS:-20}
data=${BENCH_DIR:-/tmp/znippy-bench}/first-listing
trap 'rm -rf "$data"' EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts build $1 on $data at a free port; sets `pid` and `url`.
start() {
    local port
    port=$(free_port)
    url=http://127.0.0.1:$port
    "$1/znippy" serve --data "$data" --listen "127.0.0.1:$port" >/dev/null 2>&1 &
    pid=$!
    until curl -s -o /dev/null "$url/openapi.json"; do sleep 0.05; done
}

stop() {
    kill -TERM "$pid"
    wait "$pid" || true
}

rm -rf "$data"
start "${builds[0]}"
for ((a = 0; a < archives; a++)); do
    curl -sf -o /dev/null -X POST -H 'content-type: application/json' \
        -d "{\"id\": \"a$a\"}" "$url/archives"
    for ((i = 0; i < puts; i++)); do
        echo "file $a $i" | curl -sf -o /dev/null -X PUT --data-binary @- \
            "$url/archives/a$a/files/d/f$i.txt"
    done
done
stop

for side in 0 1; do
    for ((r = 0; r < rounds; r++)); do
        start "${builds[side]}"
        printf '%s %s\n' "$([[ $side == 0 ]] && echo A || echo B)" \
            "$(curl -sf -o /dev/null -w '%{time_total}' "$url/archives")"
        stop
    done
done
