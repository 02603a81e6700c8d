#!/usr/bin/env bash
# benches/get_scale.sh: one-file gets as the number of files grows, znippy
# against `unsquashfs -cat`, in one run. A Markdown report goes to stdout.
#
#   bash benches/get_scale.sh | tee /tmp/get-scale.md
#
# For each count N (GET_SCALE_FILES, default "20000 100000 300000") it
# generates N JSON records of 30 to 500 bytes as a tar stream (no files are
# created), makes `znippy compress --tar -` and `mksquashfs - -tar` (zstd
# level 3) archives of it, and times gets of 16 files at evenly spaced depths
# into their packs (benches/get_paths.py), each in 10 pairs
# (benches/get_pairs.py). What grows with N is what a reader has to load
# before it finds a file: znippy's trie, squashfs's directory and inode
# tables.
#
# Knobs: ZNIPPY (default <repo>/target/release/znippy), BENCH_DIR (default
# /tmp/znippy-bench; its venv/ is compare.sh's, with pyarrow), GET_SCALE_FILES.
# Everything else it writes is under BENCH_DIR/scale and removed at the end.

set -euo pipefail
repo_root=$(cd "$(dirname "$0")/.." && pwd)
ZNIPPY=${ZNIPPY:-$repo_root/target/release/znippy}
BENCH_DIR=${BENCH_DIR:-/tmp/znippy-bench}
COUNTS=${GET_SCALE_FILES:-20000 100000 300000}
work=$BENCH_DIR/scale
py=$BENCH_DIR/venv/bin/python

[[ -x $ZNIPPY ]] || { echo "no $ZNIPPY: run ./scripts/build --release" >&2; exit 1; }
command -v mksquashfs >/dev/null || { echo "needs mksquashfs (squashfs-tools)" >&2; exit 1; }
if ! "$py" -c 'import pyarrow' 2>/dev/null; then
    python3 -m venv "$BENCH_DIR/venv" >&2
    "$py" -m pip install -q --disable-pip-version-check pyarrow >&2
fi
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

# N records as a tar stream on stdout, the same for every run.
records() {
    python3 - "$1" <<'EOF'
import io, json, random, sys, tarfile
n = int(sys.argv[1])
rng = random.Random(20261205)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(2000)]
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.GNU_FORMAT)
for i in range(n):
    rec, want = {"id": i}, rng.randint(30, 500)
    while len(json.dumps(rec)) < want:
        rec[rng.choice(words)] = rng.randint(0, 10 ** rng.randint(1, 9))
    data = json.dumps(rec).encode()
    info = tarfile.TarInfo(f"part-{i // 50:05}/{rng.choice(words)}-{i}.json")
    info.size, info.mode = len(data), 0o644
    out.addfile(info, io.BytesIO(data))
out.close()
EOF
}

echo "| files | znippy archive | its trie | squashfs archive | files slower than unsquashfs, in pairs | znippy median / slowest ms | unsquashfs median / slowest ms |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in $COUNTS; do
    echo "set of $n files" >&2
    records "$n" >"$work/in.tar"
    "$ZNIPPY" compress --tar "$work/in.tar" -o "$work/a.znippy" >/dev/null
    mksquashfs - "$work/a.sqfs" -tar -comp zstd -Xcompression-level 3 -noappend -quiet \
        <"$work/in.tar" >/dev/null
    rm "$work/in.tar"
    trie=$("$ZNIPPY" info "$work/a.znippy" | awk '$2 == "__znippy_trie__" { print $4 }')
    "$py" "$repo_root/benches/get_paths.py" "$work/a.znippy" 16 >"$work/paths"
    "$py" "$repo_root/benches/get_pairs.py" "$ZNIPPY" "$work/a.znippy" "$work/a.sqfs" \
        "$work/paths" 10 >"$work/pairs"
    # depth, path, znippy ms, unsquashfs ms, ratio
    awk -F'\t' -v n="$n" -v za="$(stat -c %s "$work/a.znippy")" -v tr="$trie" \
        -v sa="$(stat -c %s "$work/a.sqfs")" '
        function median(a, k,   i, j, t) {
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
        }
        { z[NR] = $3; s[NR] = $4; if ($3 > zmax) zmax = $3; if ($4 > smax) smax = $4; if ($5 > 1) slower++ }
        END {
            printf "| %d | %d | %d | %d | %d of %d | %.1f / %.1f | %.1f / %.1f |\n",
                n, za, tr, sa, slower, NR, median(z, NR), zmax, median(s, NR), smax
        }' "$work/pairs"
    rm -f "$work"/a.*
done
echo
echo "\`bash benches/get_scale.sh\` with \`$("$ZNIPPY" --version)\` and \`$(mksquashfs -version 2>&1 | sed -n 1p)\`."
