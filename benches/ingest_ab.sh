#!/usr/bin/env bash
# Two znippy-server builds against each other on sequential small PUTs, each
# run on a fresh ext4 made for it, so that no run inherits the inodes the runs
# before it deleted.
#
#   sudo benches/ingest_ab.sh BEFORE AFTER          # two znippy-server binaries
#   sudo PAIRS=6 JOURNAL=1 benches/ingest_ab.sh BEFORE AFTER
#   sudo CLIENTS=8 PUTS=2400 benches/ingest_ab.sh BEFORE AFTER
#
# Why: on ext4 without a journal (this project's benchmark machine) every new
# file's inode is found past every inode deleted in the last minutes, and a
# commit makes four or five files while maintenance deletes as many. Runs on
# one filesystem, one after another, then drift by more than the differences
# worth measuring (docs/benchmarks.md, "Small-file ingest against SeaweedFS").
#
# Each run makes an ext4 (without a journal, or with one if JOURNAL=1) in a
# 2 GiB file on a loop device, starts `BIN serve` on it, sends 100 PUTs of 1-4
# KB to warm up and then PUTS (default 400) timed, from CLIENTS (default 1)
# keep-alive clients on one archive, each sending its next PUT once the last
# is answered, and removes the filesystem. Pairs alternate: BEFORE AFTER,
# AFTER BEFORE, ... One line a run: the p50, p90 and p99 of the timed PUTs,
# their PUTs a second, the PUTs a group commit carried (timed PUTs over the
# snapshots that answered them), and the server's CPU seconds. Needs root
# (mkfs, mount) and python3.
set -euo pipefail

(($# == 2)) || { echo "usage: $0 BEFORE AFTER (znippy-server binaries)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "$0: needs root to mount a loop device" >&2; exit 2; }
before=$(realpath "$1")
after=$(realpath "$2")
PAIRS=${PAIRS:-4}
PUTS=${PUTS:-400}
CLIENTS=${CLIENTS:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/znippy-ingest-ab.XXXXXX")
mnt=$work/mnt
pid=

cleanup() {
    [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    mountpoint -q "$mnt" && umount "$mnt"
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/put.py" <<'EOF'
import http.client, json, random, sys, threading, time
port, n, clients = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
warm = 100
def request(c, method, path, body=None):
    c.request(method, path, body=body)
    r = c.getresponse()
    return r.status, r.read()
status, body = request(http.client.HTTPConnection("127.0.0.1", port),
                       "POST", "/archives", b'{"id": "ab"}')
assert status in (200, 201), (status, body)
times, snapshots, spans = [], set(), []
warmed = threading.Barrier(clients)
def client(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    rng = random.Random(k + 1)
    for i in range(warm // clients + n // clients):
        if i == warm // clients:
            warmed.wait()
            begun = time.perf_counter()
        data = rng.randbytes(rng.randint(1024, 4096))
        t = time.perf_counter()
        status, body = request(c, "PUT", f"/archives/ab/files/c{k}-{i}", data)
        assert status in (200, 201), (status, body)
        if i >= warm // clients:
            times.append(time.perf_counter() - t)
            snapshots.add(json.loads(body)["snapshot_id"])
    spans.append((begun, time.perf_counter()))
threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
times.sort()
at = lambda q: times[min(len(times) - 1, int(len(times) * q))] * 1e3
took = max(e for _, e in spans) - min(b for b, _ in spans)
print(f"p50 {at(0.5):.3f} ms  p90 {at(0.9):.3f}  p99 {at(0.99):.3f}  "
      f"{len(times) / took:.0f} PUT/s  {len(times) / len(snapshots):.2f} PUTs a commit", end="")
EOF

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

run() {
    local bin=$1 port
    truncate -s 2G "$work/fs.img"
    if [[ ${JOURNAL:-} == 1 ]]; then
        mkfs.ext4 -q -F "$work/fs.img"
    else
        mkfs.ext4 -q -F -O ^has_journal "$work/fs.img"
    fi
    mkdir -p "$mnt"
    mount -o loop "$work/fs.img" "$mnt"
    port=$(free_port)
    env -u RUST_BACKTRACE "$bin" serve --listen "127.0.0.1:$port" --log warn \
        --data "$mnt/data" >"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1)" \
            2>/dev/null && break
        sleep 0.1
    done
    local line
    line=$(python3 "$work/put.py" "$port" "$PUTS" "$CLIENTS")
    local cpu
    cpu=$(awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$pid/stat")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=
    umount "$mnt"
    rm -f "$work/fs.img"
    echo "$2 $line  cpu ${cpu}s"
}

echo "$PAIRS pairs, $PUTS timed PUTs a run from $CLIENTS clients, each on a fresh ext4 $([[ ${JOURNAL:-} == 1 ]] && echo with || echo without) a journal"
for i in $(seq "$PAIRS"); do
    if ((i % 2)); then
        run "$before" before
        run "$after" after
    else
        run "$after" after
        run "$before" before
    fi
done
