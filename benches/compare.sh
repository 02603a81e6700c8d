#!/usr/bin/env bash
# benches/compare.sh: znippy side by side with tar|zstd, squashfs and zip, on this
# machine, in one run. Progress goes to stderr, a Markdown report to stdout:
#
#   bash benches/compare.sh | tee /tmp/bench-report.md
#
# Knobs (environment):
#   ZNIPPY          znippy binary (default: <repo>/target/release/znippy, built by
#                   ./scripts/build --release)
#   BENCH_DIR       work dir, needs ~15 GB free with set d (default /tmp/znippy-bench)
#   BENCH_OUT       extractions go to $BENCH_OUT/znippy-bench-out (default: BENCH_DIR);
#                   e.g. /dev/shm to time the tools rather than the file system
#   BENCH_SETS      data sets to run, any of "a b c d e f g" (default all)
#   BENCH_QUICK=1   1 timed run instead of 3, and skip set d
#   BENCH_RUNS      timed runs per measurement (default 3, or 1 with BENCH_QUICK)
#   BENCH_SHORT_RUNS  timed runs of a measurement whose warm-up took under 1 s
#                   (default 11, or BENCH_RUNS if larger; 1 with BENCH_QUICK)
#   BENCH_GET_RUNS  runs of each one-file extraction (default 20)
#   BENCH_GET_SAMPLES  files extracted one at a time (default 32)
#   BENCH_C_MB      set c: MB of shared libraries copied (default 800)
#   BENCH_C_DUP_MB  set c: MB of those copied again under dup/ (default 200)
#   BENCH_D_GIB     set d: size of the generated file in GiB (default 4)
#   BENCH_E_FILES   set e: number of files (default 20000)
#   BENCH_F_FILES   set f: number of files (default 100000)
#   BENCH_ZNIPPY_ARGS  more arguments for every `znippy compress`, split on
#                   spaces (e.g. "--chunk-size 1048576"; default none)
#
# Data sets:
#   a  the cargo registry's source cache (many small text files)
#   b  the cargo registry's .crate cache (already compressed)
#   c  shared libraries (binaries), symlinks skipped, part of them duplicated
#   d  one generated file, half text and half random, for peak memory
#   e  generated small JSON files, 30 to 500 bytes each (BENCH_E_FILES of them)
#   f  generated tiny files, 0 to 64 bytes each (BENCH_F_FILES of them)
#   g  the machine's man pages (/usr/share/man, regular files only)
#
# Every tool reads the same copy of the data from the page cache: it is run once
# untimed (warm-up), then timed; the median is reported. Archives and output
# directories are removed, and the disk synced, outside the timed region.

set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZNIPPY=${ZNIPPY:-$repo_root/target/release/znippy}
BENCH_DIR=${BENCH_DIR:-/tmp/znippy-bench}
BENCH_QUICK=${BENCH_QUICK:-0}
ALL_SETS="a b c d e f g"
BENCH_SETS=${BENCH_SETS:-$ALL_SETS}
if [[ $BENCH_QUICK == 1 ]]; then
    RUNS=${BENCH_RUNS:-1}
    BENCH_SETS=${BENCH_SETS//d/}
else
    RUNS=${BENCH_RUNS:-3}
fi
# At 50 ms a run, three runs are one scheduler hiccup away from another median.
SHORT_RUNS=${BENCH_SHORT_RUNS:-$((BENCH_QUICK == 1 ? RUNS : (RUNS > 11 ? RUNS : 11)))}
GET_RUNS=${BENCH_GET_RUNS:-20}
GET_SAMPLES=${BENCH_GET_SAMPLES:-32}
C_MB=${BENCH_C_MB:-800}
C_DUP_MB=${BENCH_C_DUP_MB:-200}
D_GIB=${BENCH_D_GIB:-4}
E_FILES=${BENCH_E_FILES:-20000}
F_FILES=${BENCH_F_FILES:-100000}
ZNIPPY_ARGS=${BENCH_ZNIPPY_ARGS:-}
CARGO_DIR=${CARGO_HOME:-$HOME/.cargo}
NPROC=$(nproc)
TOOLS=(znippy tarzstd squashfs zip)

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}
has_set() { [[ " $BENCH_SETS " == *" $1 "* ]]; }
# set -e ends the script at the first failing command; say which. (-E: in
# functions and command substitutions too, so no pipe may end early: a reader
# that stops before its writer finishes, like head, fails the pipeline.)
set -E
trap 'log "error: line $LINENO: $BASH_COMMAND"' ERR

# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------

install_missing() {
    local pkgs=() sudo=()
    command -v mksquashfs >/dev/null && command -v unsquashfs >/dev/null || pkgs+=(squashfs-tools)
    command -v zip >/dev/null || pkgs+=(zip)
    command -v unzip >/dev/null || pkgs+=(unzip)
    command -v zstd >/dev/null || pkgs+=(zstd)
    [[ -x /usr/bin/time ]] || pkgs+=(time)
    command -v python3 >/dev/null || pkgs+=(python3)
    command -v hyperfine >/dev/null || pkgs+=(hyperfine)
    ((${#pkgs[@]})) || return 0
    [[ $EUID -eq 0 ]] || sudo=(sudo)
    log "installing ${pkgs[*]}"
    "${sudo[@]}" apt-get update -qq >&2
    if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${pkgs[@]}" >&2; then
        # hyperfine is optional: retry without it.
        local p rest=()
        for p in "${pkgs[@]}"; do [[ $p == hyperfine ]] || rest+=("$p"); done
        ((${#rest[@]} == 0)) || DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${rest[@]}" >&2
    fi
}

# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

LOG=$BENCH_DIR/commands.log

# Runs a shell command line (with pipefail), its output into $LOG.
run_cmd() {
    printf '\n$ %s\n' "$1" >>"$LOG"
    if ! bash -o pipefail -c "$1" >>"$LOG" 2>&1; then
        log "command failed: $1"
        tail -n 20 "$LOG" >&2
        exit 1
    fi
}

# Prints the wall time of a command line in seconds.
time_cmd() {
    local t0 t1
    t0=$EPOCHREALTIME
    run_cmd "$1"
    t1=$EPOCHREALTIME
    awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.6f\n", b - a }'
}

# cpu_mark: "busy steal ours" in clock ticks: all CPU time of the machine except
# idle and iowait, the steal part of it, and this script with its reaped children.
cpu_mark() {
    local ours
    ours=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$$/stat")
    awk -v ours="$ours" '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $9, ours }' /proc/stat
}

# cpu_other MARK0 MARK1: prints "other_s steal_s", the CPU seconds spent between two
# marks by processes outside this benchmark, and stolen by the hypervisor.
cpu_other() {
    awk -v a="$1" -v b="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        steal = y[2] - x[2]
        other = (y[1] - x[1]) - steal - (y[3] - x[3])
        printf "%.1f %.1f\n", (other < 0 ? 0 : other) / hz, steal / hz }'
}

median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
        END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Float helpers: calc EXPR prints the awk expression's value; fmt FMT EXPR formats it.
calc() { awk "BEGIN { print $1 }"; }
fmt() { awk "BEGIN { printf \"$1\", $2 }"; }

# ---------------------------------------------------------------------------
# Commands. DIR is the input, ARC the archive, OUT the output directory.
# ---------------------------------------------------------------------------

ext_of() {
    case $1 in
        znippy) echo znippy ;;
        tarzstd) echo tar.zst ;;
        squashfs) echo sqfs ;;
        zip) echo zip ;;
    esac
}

label_of() {
    case $1 in
        znippy) echo "znippy" ;;
        tarzstd) echo "tar \| zstd -3 -T0" ;;
        squashfs) echo "squashfs (zstd 3)" ;;
        zip) echo "zip -1" ;;
    esac
}

# q WORD: shell-quoted; in the report (TEMPLATE=1) the placeholders and the
# znippy binary are printed bare.
TEMPLATE=0
q() {
    if [[ $TEMPLATE == 1 && $1 == "$ZNIPPY" ]]; then
        printf 'znippy'
        return
    fi
    case $1 in
        DIR | ARC | OUT | PATH_IN_ARCHIVE) printf '%s' "$1" ;;
        *) printf '%q' "$1" ;;
    esac
}

# short CMD: the znippy binary as "znippy", the work dir as $BENCH_DIR.
short() {
    local c=${1//"$(printf %q "$ZNIPPY")"/znippy}
    printf '%s' "${c//"$BENCH_DIR"/\$BENCH_DIR}"
}

# md CMD: a command as Markdown inline code, its pipes escaped for tables.
md() { printf '%s%s%s' '`' "${1//|/\\|}" '`'; }

cmd_compress() { # tool dir arc
    local d a
    d=$(q "$2")
    a=$(q "$3")
    case $1 in
        znippy) echo "$(q "$ZNIPPY") compress${ZNIPPY_ARGS:+ $ZNIPPY_ARGS} $d -o $a" ;;
        tarzstd) echo "tar -cf - -C $d . | zstd -3 -T0 -q -o $a" ;;
        squashfs) echo "mksquashfs $d $a -comp zstd -Xcompression-level 3 -processors $NPROC -noappend -quiet" ;;
        zip) echo "cd $d && zip -r -1 -q $a ." ;;
    esac
}

cmd_decompress() { # tool arc out
    local a o
    a=$(q "$2")
    o=$(q "$3")
    case $1 in
        znippy) echo "$(q "$ZNIPPY") decompress $a -o $o" ;;
        tarzstd) echo "mkdir -p $o && zstd -dc $a | tar -xf - -C $o" ;;
        squashfs) echo "unsquashfs -f -d $o $a" ;;
        zip) echo "unzip -q $a -d $o" ;;
    esac
}

cmd_get() { # tool arc path scratch
    local a p s
    a=$(q "$2")
    p=$(q "$3")
    s=$(q "$4")
    case $1 in
        znippy) echo "$(q "$ZNIPPY") get $a $p > /dev/null" ;;
        tarzstd) echo "zstd -dc $a | tar -xOf - ./$p > /dev/null" ;;
        squashfs)
            if [[ $SQFS_CAT == 1 ]]; then
                echo "unsquashfs -cat $a $p > /dev/null"
            else
                echo "unsquashfs -f -d $s $a $p > /dev/null"
            fi
            ;;
        zip) echo "unzip -p $a $p > /dev/null" ;;
    esac
}

cmd_list() { # tool arc
    local a
    a=$(q "$2")
    case $1 in
        znippy) echo "$(q "$ZNIPPY") list $a > /dev/null" ;;
        tarzstd) echo "zstd -dc $a | tar -tf - > /dev/null" ;;
        squashfs) echo "unsquashfs -l $a > /dev/null" ;;
        zip) echo "unzip -Z1 $a > /dev/null" ;;
    esac
}

cmd_verify() { # tool arc; squashfs has no checksums to verify
    local a
    a=$(q "$2")
    case $1 in
        znippy) echo "$(q "$ZNIPPY") verify $a > /dev/null" ;;
        tarzstd) echo "zstd -tq $a" ;;
        zip) echo "unzip -tq $a > /dev/null" ;;
    esac
}

# ---------------------------------------------------------------------------
# Data sets
# ---------------------------------------------------------------------------

DATA=$BENCH_DIR/data
ARCS=$BENCH_DIR/archives
OUTS=$BENCH_DIR/out
declare -A DESC

# copy_files SRC DEST [MAX_BYTES]: the regular files below SRC (never symlinks),
# in byte order of path, up to MAX_BYTES in all, to the same relative paths in DEST.
# awk reads the whole list even past MAX_BYTES: exiting early would kill sort
# with SIGPIPE, and pipefail would end the script without a word.
copy_files() {
    local src=$1 dest=$2 max=${3:-0} list
    list=$(mktemp)
    (cd "$src" && find . -type f -printf '%P\t%s\n') | LC_ALL=C sort |
        awk -F'\t' -v max="$max" '
            full || (max > 0 && sum + $2 > max) { full = 1; next }
            { sum += $2; print $1 }' >"$list"
    mkdir -p "$dest"
    tar -C "$src" --verbatim-files-from -T "$list" -cf - | tar -C "$dest" -xf -
    rm -f "$list"
}

prepare_a() {
    local srcs=("$CARGO_DIR"/registry/src/*/) s
    [[ -d ${srcs[0]} ]] || die "no cargo source cache under $CARGO_DIR/registry/src"
    rm -rf "$DATA/a"
    for s in "${srcs[@]}"; do copy_files "$s" "$DATA/a/$(basename "$s")"; done
    DESC[a]="cargo registry source cache (\`$CARGO_DIR/registry/src/*/\`, regular files only)"
}

prepare_b() {
    local srcs=("$CARGO_DIR"/registry/cache/*/) s
    [[ -d ${srcs[0]} ]] || die "no cargo crate cache under $CARGO_DIR/registry/cache"
    rm -rf "$DATA/b"
    for s in "${srcs[@]}"; do copy_files "$s" "$DATA/b/$(basename "$s")"; done
    DESC[b]="cargo registry \`.crate\` cache (\`$CARGO_DIR/registry/cache/*/\`, gzip'd tarballs)"
}

prepare_c() {
    local lib
    for lib in "/usr/lib/$(uname -m)-linux-gnu" /usr/lib64 /usr/lib; do
        if [[ -d $lib ]]; then break; fi
    done
    rm -rf "$DATA/c"
    copy_files "$lib" "$DATA/c/lib" $((C_MB * 1000000))
    copy_files "$DATA/c/lib" "$DATA/c/dup" $((C_DUP_MB * 1000000))
    DESC[c]="\`$lib\` regular files in path order up to ${C_MB} MB (no symlinks; hard links become copies), plus the first ${C_DUP_MB} MB of them again under \`dup/\`"
}

# One file of D_GIB GiB: 1 MiB blocks, each a block header and 512 KiB of text
# taken at a moving offset of a fixed word corpus, then 512 KiB of seeded random
# bytes. Deterministic, never all zeros, no two blocks alike.
prepare_d() {
    local f=$DATA/d/big.bin size=$((D_GIB << 30))
    if [[ -f $f && $(stat -c %s "$f") == "$size" && -f $DATA/d.gen-v1 ]]; then
        log "set d: reusing $f"
    else
        rm -rf "$DATA/d" "$DATA/d.gen-v1"
        mkdir -p "$DATA/d"
        python3 - "$f" "$size" <<'EOF'
import random, sys
path, size = sys.argv[1], int(sys.argv[2])
rng = random.Random(20240601)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 11))) for _ in range(20000)]
text = " ".join(rng.choice(words) for _ in range(300000)).encode()
half = 1 << 19
with open(path, "wb") as f:
    written, i = 0, 0
    while written < size:
        hdr = b"-- block %012d --\n" % i
        off = (i * 7919) % (len(text) - half)
        block = hdr + text[off:off + half - len(hdr)] + rng.randbytes(half)
        block = block[: size - written]
        f.write(block)
        written += len(block)
        i += 1
EOF
        touch "$DATA/d.gen-v1"
    fi
    DESC[d]="one generated file of ${D_GIB} GiB: 1 MiB blocks of half word text (moving offset in a fixed corpus), half seeded random bytes"
}

# E_FILES small JSON records of 30 to 500 bytes, 50 to a directory: the
# per-file overhead of each format, where the index is most of an archive.
# Deterministic.
prepare_e() {
    rm -rf "$DATA/e"
    python3 - "$DATA/e" "$E_FILES" <<'EOF'
import json, os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(20261204)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(2000)]
for i in range(n):
    d = os.path.join(root, f"part-{i // 50:05}")
    if i % 50 == 0:
        os.makedirs(d)
    want = rng.randint(30, 500)
    record = {"id": i}
    while len(json.dumps(record)) < want:
        key = rng.choice(words)
        kind = rng.random()
        if kind < 0.4:
            record[key] = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        elif kind < 0.8:
            record[key] = rng.randint(0, 10 ** rng.randint(1, 9))
        else:
            record[key] = rng.random() < 0.5
    with open(os.path.join(d, f"{rng.choice(words)}-{i}.json"), "w") as f:
        f.write(json.dumps(record))
EOF
    DESC[e]="$E_FILES generated JSON records of 30 to 500 bytes, 50 to a directory"
}

# F_FILES files of 0 to 64 bytes, words of a small vocabulary, 100 to a
# directory: the smallest files a tree holds (config fragments, lock files,
# markers), where everything but the bytes is index. Deterministic.
prepare_f() {
    rm -rf "$DATA/f"
    python3 - "$DATA/f" "$F_FILES" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(20261206)
words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 7))) for _ in range(500)]
for i in range(n):
    d = os.path.join(root, f"d{i // 100:04}")
    if i % 100 == 0:
        os.makedirs(d)
    size = rng.randint(0, 64)
    text = ""
    while len(text) < size:
        text += rng.choice(words) + " "
    with open(os.path.join(d, f"{rng.choice(words)}-{i}.txt"), "w") as f:
        f.write(text[:size])
EOF
    DESC[f]="$F_FILES generated files of 0 to 64 bytes, 100 to a directory"
}

prepare_g() {
    [[ -d /usr/share/man ]] || die "no /usr/share/man"
    rm -rf "$DATA/g"
    copy_files /usr/share/man "$DATA/g/man"
    DESC[g]="\`/usr/share/man\` (regular files only; gzip'd man pages)"
}

# Prints "files bytes distinct_bytes" of a directory (distinct: by content hash).
dir_stats() {
    python3 - "$1" <<'EOF'
import hashlib, os, sys
files = total = distinct = 0
seen = set()
for root, _, names in os.walk(sys.argv[1]):
    for n in names:
        p = os.path.join(root, n)
        h = hashlib.sha1()
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        size = os.path.getsize(p)
        files += 1
        total += size
        if h.digest() not in seen:
            seen.add(h.digest())
            distinct += size
print(files, total, distinct)
EOF
}

# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------

declare -A IN_FILES IN_BYTES IN_DISTINCT CT DT SZ BLOB INDEX_PER_FILE INDEX_NO_HASH SLICES SQ_META SPREAD OTHER

# spread OP SECONDS...: logs the samples to $SAMPLES (with $set and $tool from the
# caller) and prints " (min–max)", or nothing for a single run.
spread() {
    local op=$1 i=0 v
    shift
    for v in "$@"; do
        i=$((i + 1))
        printf '%s\t%s\t%s\t%s\t%s\n' "$set" "$tool" "$op" "$i" "$v" >>"$SAMPLES"
    done
    (($# > 1)) || return 0
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf " (%.2f–%.2f)", v[1], v[NR] }'
}

# runs_after WARMUP_SECONDS: how many timed runs the measurement gets.
runs_after() { awk -v t="$1" -v r="$RUNS" -v s="$SHORT_RUNS" 'BEGIN { print (t < 1 ? s : r) }'; }

# bench_set SET: compress and fully decompress SET with every tool.
bench_set() {
    local set=$1 dir=$DATA/$1 tool arc out c d i n t times
    local stats files bytes distinct info
    stats=$(dir_stats "$dir")
    read -r files bytes distinct <<<"$stats"
    IN_FILES[$set]=$files
    IN_BYTES[$set]=$bytes
    IN_DISTINCT[$set]=$distinct
    for tool in "${TOOLS[@]}"; do
        arc=$ARCS/$set.$(ext_of "$tool")
        out=$OUTS/$set-$tool
        c=$(cmd_compress "$tool" "$dir" "$arc")
        d=$(cmd_decompress "$tool" "$arc" "$out")

        rm -f "$arc"
        sync
        n=$(runs_after "$(time_cmd "$c")")
        log "set $set, $tool: compress (warm-up + $n)"
        times=()
        for ((i = 0; i < n; i++)); do
            rm -f "$arc"
            sync
            t=$(time_cmd "$c")
            times+=("$t")
        done
        CT[$set:$tool]=$(median "${times[@]}")
        SPREAD[$set:$tool:c]=$(spread compress "${times[@]}")
        SZ[$set:$tool]=$(stat -c %s "$arc")
        if [[ $tool == znippy ]]; then
            info=$("$ZNIPPY" info "$arc")
            BLOB[$set]=$(sed -n 's/^blob region .*(\([0-9]*\) bytes)$/\1/p' <<<"$info")
            INDEX_PER_FILE[$set]=$(sed -n 's/^index .*, \([0-9]*\) per file; .*$/\1/p' <<<"$info")
            INDEX_NO_HASH[$set]=$(sed -n 's/^index .*; \([0-9]*\) without .*$/\1/p' <<<"$info")
            SLICES[$set]=$(sed -n 's/^slices *\([0-9]*\)$/\1/p' <<<"$info")
        elif [[ $tool == squashfs ]]; then
            # squashfs's metadata: its superblock's bytes_used (offset 40)
            # less its inode table's start (offset 64), the inode, directory,
            # fragment, export and id tables that follow the data.
            SQ_META[$set]=$(($(od -An -t u8 -j 40 -N 8 "$arc") - $(od -An -t u8 -j 64 -N 8 "$arc")))
        fi

        rm -rf "$out"
        sync
        n=$(runs_after "$(time_cmd "$d")")
        log "set $set, $tool: decompress (warm-up + check + $n)"
        diff -rq "$dir" "$out" >&2 || die "set $set: $tool output differs from its input"
        times=()
        for ((i = 0; i < n; i++)); do
            rm -rf "$out"
            sync
            t=$(time_cmd "$d")
            times+=("$t")
        done
        DT[$set:$tool]=$(median "${times[@]}")
        SPREAD[$set:$tool:d]=$(spread decompress "${times[@]}")
        rm -rf "$out"
    done
}

# measure NAME RUNS WARMUP CMD...: median wall time of each command in ms, into MS[NAME:i].
declare -A MS
measure() {
    local name=$1 runs=$2 warmup=$3 i j t times json
    shift 3
    if [[ $HAVE_HYPERFINE == 1 ]]; then
        json=$BENCH_DIR/$name.json
        hyperfine --shell=bash --warmup "$warmup" --runs "$runs" --export-json "$json" \
            --style none "$@" >>"$LOG" 2>&1 || die "hyperfine failed on $name (see $LOG)"
        i=0
        while read -r t; do
            MS[$name:$i]=$t
            i=$((i + 1))
        done < <(python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("%.3f" % (r["median"] * 1000))' "$json")
    else
        for ((i = 1; i <= $#; i++)); do
            for ((j = 0; j < warmup; j++)); do run_cmd "${!i}"; done
            times=()
            for ((j = 0; j < runs; j++)); do
                t=$(time_cmd "${!i}")
                times+=("$t")
            done
            MS[$name:$((i - 1))]=$(fmt '%.3f' "$(median "${times[@]}") * 1000")
        done
    fi
}

# A python with pyarrow (benches/get_paths.py reads the archive's index),
# in a virtualenv under $BENCH_DIR made on first use.
bench_python() {
    local py=$BENCH_DIR/venv/bin/python
    if ! "$py" -c 'import pyarrow' 2>/dev/null; then
        log "installing pyarrow into $BENCH_DIR/venv"
        python3 -m venv "$BENCH_DIR/venv" >&2
        "$py" -m pip install -q --disable-pip-version-check pyarrow >&2
    fi
    echo "$py"
}

GET_SETS=()
declare -A GET_PATH GET_DEPTH GET_PAIR GET_SLOWER
# bench_get SET: one-file extraction of GET_SAMPLES files at evenly spaced
# quantiles of how deep into its blob each one ends: a reader decodes a pack
# from its start to the end of the file it wants, so the depth decides what
# a get costs, and one file would measure luck. MS[getSET:TOOL] is the mean
# over the files of each file's median, MS[getmaxSET:TOOL] the slowest
# file's median.
bench_get() {
    local set=$1 tool k i scratch=$OUTS/get-scratch cmds depth path py
    py=$(bench_python)
    k=0
    while IFS=$'\t' read -r depth path; do
        GET_DEPTH[$set:$k]=$depth
        GET_PATH[$set:$k]=$path
        k=$((k + 1))
    done < <("$py" "$repo_root/benches/get_paths.py" "$ARCS/$set.znippy" "$GET_SAMPLES")
    ((k == GET_SAMPLES)) || die "benches/get_paths.py gave $k files of set $set, not $GET_SAMPLES"
    GET_SETS+=("$set")
    mkdir -p "$scratch"
    log "set $set: one-file extraction of $GET_SAMPLES files, $GET_RUNS runs each"
    for ((k = 0; k < GET_SAMPLES; k++)); do
        cmds=()
        for tool in "${TOOLS[@]}"; do
            cmds+=("$(cmd_get "$tool" "$ARCS/$set.$(ext_of "$tool")" "${GET_PATH[$set:$k]}" "$scratch")")
        done
        measure "get$set$k" "$GET_RUNS" 3 "${cmds[@]}"
    done
    # The same files again, znippy and unsquashfs in pairs, for the per-file
    # verdict (benches/get_pairs.py says why).
    if [[ $SQFS_CAT == 1 ]]; then
        log "set $set: the same files, znippy and unsquashfs -cat in pairs, $GET_RUNS pairs each"
        local list=$BENCH_DIR/get-paths-$set.tsv
        for ((k = 0; k < GET_SAMPLES; k++)); do
            printf '%s\t%s\n' "${GET_DEPTH[$set:$k]}" "${GET_PATH[$set:$k]}"
        done >"$list"
        k=0
        GET_SLOWER[$set]=0
        while IFS=$'\t' read -r _ _ _ _ ratio; do
            GET_PAIR[$set:$k]=$ratio
            (($(ge 1 "$ratio"))) || GET_SLOWER[$set]=$((GET_SLOWER[$set] + 1))
            k=$((k + 1))
        done < <("$py" "$repo_root/benches/get_pairs.py" "$ZNIPPY" "$ARCS/$set.znippy" \
            "$ARCS/$set.sqfs" "$list" "$GET_RUNS")
        ((k == GET_SAMPLES)) || die "benches/get_pairs.py timed $k files of set $set, not $GET_SAMPLES"
        rm -f "$list"
    fi
    for ((i = 0; i < ${#TOOLS[@]}; i++)); do
        local all=()
        for ((k = 0; k < GET_SAMPLES; k++)); do all+=("${MS[get$set$k:$i]}"); done
        MS[get$set:$i]=$(printf '%s\n' "${all[@]}" | awk '{ s += $1 } END { printf "%.3f", s / NR }')
        MS[getmax$set:$i]=$(printf '%s\n' "${all[@]}" | sort -g | tail -n1)
        MS[getmin$set:$i]=$(printf '%s\n' "${all[@]}" | sort -g | head -n1)
        MS[getp50$set:$i]=$(printf '%s\n' "${all[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    done
    rm -rf "$scratch"
}

bench_list_verify() {
    local tool
    LIST_CMDS=()
    VERIFY_CMDS=()
    VERIFY_TOOLS=()
    for tool in "${TOOLS[@]}"; do
        LIST_CMDS+=("$(cmd_list "$tool" "$ARCS/a.$(ext_of "$tool")")")
        if [[ $tool != squashfs ]]; then
            VERIFY_CMDS+=("$(cmd_verify "$tool" "$ARCS/a.$(ext_of "$tool")")")
            VERIFY_TOOLS+=("$tool")
        fi
    done
    log "set a: list and verify"
    measure list 10 2 "${LIST_CMDS[@]}"
    measure verify "$RUNS" 1 "${VERIFY_CMDS[@]}"
}

# timed_rss CMD: prints "seconds max_rss_kib" of one run under /usr/bin/time.
timed_rss() {
    local tf=$BENCH_DIR/time.out
    printf '\n$ %s\n' "$1" >>"$LOG"
    /usr/bin/time -f '%e %M' -o "$tf" bash -o pipefail -c "$1" >>"$LOG" 2>&1 ||
        die "command failed: $1 (see $LOG)"
    cat "$tf"
}

declare -A MEM
bench_memory() {
    local dir=$DATA/d f=$DATA/d/big.bin tool c d i s k r cr dr
    local -a ct dt
    IN_BYTES[d]=$(stat -c %s "$f")
    IN_FILES[d]=1
    log "set d: warming the page cache"
    cat "$f" >/dev/null
    for tool in znippy zstd; do
        if [[ $tool == znippy ]]; then
            c="$(q "$ZNIPPY") compress${ZNIPPY_ARGS:+ $ZNIPPY_ARGS} $(q "$dir") -o $(q "$ARCS/d.znippy")"
            d="$(q "$ZNIPPY") decompress $(q "$ARCS/d.znippy") -o $(q "$OUTS/d-znippy")"
            MEM[arc:$tool]=$ARCS/d.znippy
        else
            c="zstd -3 -T0 -q -f $(q "$f") -o $(q "$ARCS/d.zst")"
            d="mkdir -p $(q "$OUTS/d-zstd") && zstd -dq $(q "$ARCS/d.zst") -o $(q "$OUTS/d-zstd/big.bin")"
            MEM[arc:$tool]=$ARCS/d.zst
        fi
        MEM[c:$tool]=$c
        MEM[d:$tool]=$d
        ct=() cr=0 dt=() dr=0
        for ((i = 0; i < RUNS; i++)); do
            log "set d, $tool: compress run $((i + 1))/$RUNS"
            rm -f "${MEM[arc:$tool]}"
            sync
            r=$(timed_rss "$c")
            read -r s k <<<"$r"
            ct+=("$s")
            if ((k > cr)); then cr=$k; fi
        done
        MEM[size:$tool]=$(stat -c %s "${MEM[arc:$tool]}")
        for ((i = 0; i < RUNS; i++)); do
            log "set d, $tool: decompress run $((i + 1))/$RUNS"
            rm -rf "$OUTS/d-$tool"
            sync
            r=$(timed_rss "$d")
            read -r s k <<<"$r"
            dt+=("$s")
            if ((k > dr)); then dr=$k; fi
        done
        cmp "$f" "$OUTS/d-$tool/big.bin" || die "set d: $tool output differs from its input"
        rm -rf "$OUTS/d-$tool"
        MEM[ct:$tool]=$(median "${ct[@]}")
        MEM[dt:$tool]=$(median "${dt[@]}")
        MEM[cr:$tool]=$cr
        MEM[dr:$tool]=$dr
    done
    rm -f "$ARCS/d.zst"
}

# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

# other_words KEY: "other / stolen" CPU seconds recorded for a set or the run.
other_words() {
    local o st
    read -r o st <<<"${OTHER[$1]:-? ?}"
    printf '%s / %s' "$o" "$st"
}
mb() { fmt '%.1f' "($1) / 1e6"; }
mbs() { fmt '%.1f' "($1) / 1e6 / ($2)"; }
mib() { fmt '%.1f' "$1 / 1024"; } # KiB -> MiB
x() { fmt '%.2fx' "$1"; }

declare -a TARGETS
# target DESC PASS? MEASURED
target() {
    local verdict
    case $2 in
        1) verdict=PASS ;;
        0) verdict=FAIL ;;
        *) verdict=SKIP ;;
    esac
    TARGETS+=("| $1 | $3 | **$verdict** |")
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { print (a >= b) ? 1 : 0 }'; }
lt() { awk -v a="$1" -v b="$2" 'BEGIN { print (a < b) ? 1 : 0 }'; }

report() {
    local set tool in z tz
    TEMPLATE=1
    echo "# znippy benchmark: znippy vs tar | zstd, squashfs, zip"
    echo
    echo "Generated by \`benches/compare.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), runtime $((SECONDS / 60)) min $((SECONDS % 60)) s."
    SPREAD_HDR=""
    if ((RUNS == 1)); then RUNS_WORDS="one timed run"; else RUNS_WORDS="median of $RUNS runs"; SPREAD_HDR=" (min–max)"; fi
    if ((SHORT_RUNS != RUNS)); then RUNS_WORDS+=", or of $SHORT_RUNS where the warm-up run took under 1 s"; SPREAD_HDR=" (min–max)"; fi
    echo "Sets: \`$BENCH_SETS\`; timed runs per measurement: $RUNS after one warm-up$( ((SHORT_RUNS != RUNS)) && echo " ($SHORT_RUNS where the warm-up took under 1 s)"); times are medians.$([[ $BENCH_QUICK == 1 ]] && echo " Quick mode (\`BENCH_QUICK=1\`).")"
    echo
    echo "## Machine"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| CPU | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') |"
    echo "| cores (nproc) | $NPROC |"
    echo "| RAM | $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) |"
    echo "| kernel | $(uname -sr) |"
    echo "| OS | $(awk -F= '$1 == "PRETTY_NAME" { gsub(/"/, "", $2); print $2 }' /etc/os-release) |"
    echo "| load average (1/5/15 min) at start / end | $LOAD_START / $(cut -d' ' -f1-3 /proc/loadavg) |"
    echo "| CPU-s used by other processes (incl. kernel threads) / stolen by the hypervisor, whole run | $(other_words run) |"
    echo "| work dir (data, archives) | \`$BENCH_DIR\` on $(df -T "$BENCH_DIR" | awk 'NR == 2 { print $2 " (" $1 ")" }') |"
    echo "| extraction dir | \`$OUTS\` on $(df -T "$OUTS" | awk 'NR == 2 { print $2 " (" $1 ")" }') |"
    echo
    echo "## Tools"
    echo
    echo "| tool | version |"
    echo "|---|---|"
    echo "| znippy | $("$ZNIPPY" --version) (\`$ZNIPPY\`, $(linkage "$ZNIPPY")) |"
    echo "| tar | $(tar --version | sed -n 1p) |"
    echo "| zstd | $(zstd --version | tr -d '*' | sed 's/^ *//; s/ *$//') |"
    echo "| mksquashfs | $(mksquashfs -version 2>&1 | sed -n 1p) |"
    echo "| zip | $(zip -v | sed -n 2p | sed 's/^ *//') |"
    echo "| unzip | $(unzip -v | sed -n 1p) |"
    if [[ $HAVE_HYPERFINE == 1 ]]; then
        echo "| hyperfine | $(hyperfine --version) |"
    else
        echo "| hyperfine | not installed (shell loop timing) |"
    fi
    echo
    echo "## Commands"
    echo
    echo "\`DIR\` is the data set, \`ARC\` the archive, \`OUT\` a fresh output directory (removed before each run, outside the timing)."
    echo "znippy, zstd \`-T0\` and mksquashfs/unsquashfs use all $NPROC cores; zip, unzip and tar are single-threaded."
    echo
    echo "| tool | compress | decompress |"
    echo "|---|---|---|"
    for tool in "${TOOLS[@]}"; do
        echo "| $(label_of "$tool") | $(md "$(cmd_compress "$tool" DIR ARC)") | $(md "$(cmd_decompress "$tool" ARC OUT)") |"
    done
    echo
    echo "## Data sets"
    echo
    echo "| set | what | files | bytes | distinct content | other CPU-s / stolen s during the set |"
    echo "|---|---|---|---|---|---|"
    for set in $ALL_SETS; do
        [[ -n ${IN_BYTES[$set]:-} ]] || continue
        if [[ -n ${IN_DISTINCT[$set]:-} ]]; then
            echo "| $set | ${DESC[$set]} | ${IN_FILES[$set]} | $(mb "${IN_BYTES[$set]}") MB | $(mb "${IN_DISTINCT[$set]}") MB | $(other_words "$set") |"
        else
            echo "| $set | ${DESC[$set]} | ${IN_FILES[$set]} | $(mb "${IN_BYTES[$set]}") MB | all | $(other_words "$set") |"
        fi
    done

    for set in ${ALL_SETS/d/}; do
        [[ -n ${CT[$set:znippy]:-} ]] || continue
        in=${IN_BYTES[$set]}
        echo
        echo "## Set $set: full compress and decompress"
        echo
        echo "Input $(mb "$in") MB in ${IN_FILES[$set]} files. MB/s = input MB / wall seconds ($RUNS_WORDS)."
        if [[ -n ${BLOB[$set]:-} ]]; then
            echo "The znippy archive is $(mb "${BLOB[$set]}") MB of compressed blobs and $(mb "${SZ[$set:znippy]} - ${BLOB[$set]}") MB of index, ${INDEX_PER_FILE[$set]} bytes per file, ${INDEX_NO_HASH[$set]} without the 32-byte BLAKE3 of each slice (\`znippy info\`)."
            echo "Without those ${SLICES[$set]} BLAKE3s it is $(mb "$((SZ[$set:znippy] - 32 * SLICES[$set]))") MB (the targets below compare it with tar | zstd and squashfs)."
        fi
        echo
        echo "| tool | archive MB | % of input | compress s$SPREAD_HDR | compress MB/s | decompress s$SPREAD_HDR | decompress MB/s |"
        echo "|---|---:|---:|---:|---:|---:|---:|"
        for tool in "${TOOLS[@]}"; do
            echo "| $(label_of "$tool") | $(mb "${SZ[$set:$tool]}") | $(fmt '%.1f' "100 * ${SZ[$set:$tool]} / $in") | $(fmt '%.2f' "${CT[$set:$tool]}")${SPREAD[$set:$tool:c]} | $(mbs "$in" "${CT[$set:$tool]}") | $(fmt '%.2f' "${DT[$set:$tool]}")${SPREAD[$set:$tool:d]} | $(mbs "$in" "${DT[$set:$tool]}") |"
        done
        echo
        echo "Against tar | zstd (above 1 is better for throughput, below 1 is better for size):"
        echo
        echo "| tool | compress throughput | decompress throughput | archive size |"
        echo "|---|---:|---:|---:|"
        for tool in znippy squashfs zip; do
            echo "| $(label_of "$tool") / tar+zstd | $(x "${CT[$set:tarzstd]} / ${CT[$set:$tool]}") | $(x "${DT[$set:tarzstd]} / ${DT[$set:$tool]}") | $(x "${SZ[$set:$tool]} / ${SZ[$set:tarzstd]}") |"
        done
    done

    local row slower k i
    for set in "${GET_SETS[@]}"; do
        echo
        echo "## Set $set: one file out of the archive"
        echo
        echo "$GET_SAMPLES files at evenly spaced quantiles of how deep into its blob each one ends, from ${GET_DEPTH[$set:0]} to ${GET_DEPTH[$set:$((GET_SAMPLES - 1))]} bytes (\`benches/get_paths.py\`): a reader decodes a compressed pack from its start to the end of the file it wants."
        echo "Each is extracted as a whole process, median of $GET_RUNS runs after 3 warm-ups$([[ $HAVE_HYPERFINE == 1 ]] && echo " (hyperfine, shell spawn subtracted)"); the table gives the mean of those medians and the slowest file's."
        [[ $SQFS_CAT == 1 ]] || echo "unsquashfs $(unsquashfs -v 2>&1 | sed -n 1p | awk '{print $2}') has no \`-cat\`, so it writes the one file to a scratch directory."
        echo
        echo "| tool | command | fastest file ms | median file ms | mean ms | slowest file ms |"
        echo "|---|---|---:|---:|---:|---:|"
        i=0
        for tool in "${TOOLS[@]}"; do
            echo "| $(label_of "$tool") | $(md "$(cmd_get "$tool" ARC PATH_IN_ARCHIVE OUT)") | $(fmt '%.1f' "${MS[getmin$set:$i]}") | $(fmt '%.1f' "${MS[getp50$set:$i]}") | $(fmt '%.1f' "${MS[get$set:$i]}") | $(fmt '%.1f' "${MS[getmax$set:$i]}") |"
            i=$((i + 1))
        done
        echo
        echo "Per file (median ms), by depth:"
        echo
        row="| depth, bytes | path |"
        for tool in "${TOOLS[@]}"; do row+=" $(label_of "$tool") |"; done
        [[ -n ${GET_SLOWER[$set]:-} ]] && row+=" znippy / unsquashfs, in pairs |"
        echo "$row"
        row="|---:|---|"
        for tool in "${TOOLS[@]}"; do row+="---:|"; done
        [[ -n ${GET_SLOWER[$set]:-} ]] && row+="---:|"
        echo "$row"
        slower=0
        for ((k = 0; k < GET_SAMPLES; k++)); do
            row="| ${GET_DEPTH[$set:$k]} | \`${GET_PATH[$set:$k]}\` |"
            for ((i = 0; i < ${#TOOLS[@]}; i++)); do row+=" $(fmt '%.1f' "${MS[get$set$k:$i]}") |"; done
            [[ -n ${GET_SLOWER[$set]:-} ]] && row+=" $(fmt '%.2f' "${GET_PAIR[$set:$k]}") |"
            echo "$row"
            (($(ge "${MS[get$set$k:2]}" "${MS[get$set$k:0]}"))) || slower=$((slower + 1))
        done
        echo
        echo "By the medians of the blocks of runs above, znippy is slower than unsquashfs on $slower of the $GET_SAMPLES files."
        if [[ -n ${GET_SLOWER[$set]:-} ]]; then
            echo "Run in pairs (\`benches/get_pairs.py\`, $GET_RUNS pairs a file, the ratio's median), it is slower on ${GET_SLOWER[$set]}: the pairs cancel the machine's drift between blocks, so they are the per-file verdict."
        fi
    done

    if has_set a; then
        echo
        echo "## Set a: list and verify"
        echo
        echo "Median of 10 runs (list) and $RUNS run(s) (verify), after warm-ups. squashfs stores no data checksums, so it has no verify."
        echo
        echo "| tool | list command | list ms | verify command | verify ms |"
        echo "|---|---|---:|---|---:|"
        local vi=0 vc vm
        i=0
        for tool in "${TOOLS[@]}"; do
            if [[ $tool == squashfs ]]; then
                vc="n/a"
                vm="n/a"
            else
                vc=$(md "$(cmd_verify "$tool" ARC)")
                vm=$(fmt '%.1f' "${MS[verify:$vi]}")
                vi=$((vi + 1))
            fi
            echo "| $(label_of "$tool") | $(md "$(cmd_list "$tool" ARC)") | $(fmt '%.1f' "${MS[list:$i]}") | $vc | $vm |"
            i=$((i + 1))
        done
    fi

    if [[ -n ${MEM[ct:znippy]:-} ]]; then
        in=${IN_BYTES[d]}
        echo
        echo "## Set d: peak memory on one $(fmt '%.1f' "$in / 1073741824") GiB file"
        echo
        echo "Peak RSS is \`/usr/bin/time -f %M\` (the largest of $RUNS run(s)); time is the median; page cache warm. Plain zstd on the bare file for contrast. \`\$BENCH_DIR\` is \`$BENCH_DIR\`."
        echo
        echo "| tool | command | archive MB | s | MB/s | peak RSS MiB |"
        echo "|---|---|---:|---:|---:|---:|"
        for tool in znippy zstd; do
            echo "| $tool compress | $(md "$(short "${MEM[c:$tool]}")") | $(mb "${MEM[size:$tool]}") | $(fmt '%.2f' "${MEM[ct:$tool]}") | $(mbs "$in" "${MEM[ct:$tool]}") | $(mib "${MEM[cr:$tool]}") |"
            echo "| $tool decompress | $(md "$(short "${MEM[d:$tool]}")") | | $(fmt '%.2f' "${MEM[dt:$tool]}") | $(mbs "$in" "${MEM[dt:$tool]}") | $(mib "${MEM[dr:$tool]}") |"
        done
    fi

    # Targets
    if [[ -n ${CT[a:znippy]:-} ]]; then
        target "compress throughput on (a) ≥ tar \| zstd" "$(ge "${CT[a:tarzstd]}" "${CT[a:znippy]}")" \
            "$(mbs "${IN_BYTES[a]}" "${CT[a:znippy]}") vs $(mbs "${IN_BYTES[a]}" "${CT[a:tarzstd]}") MB/s ($(x "${CT[a:tarzstd]} / ${CT[a:znippy]}"))"
    else
        target "compress throughput on (a) ≥ tar \| zstd" skip "set a not run"
    fi
    if [[ -n ${CT[b:znippy]:-} ]]; then
        target "compress throughput on (b) ≥ 2x tar \| zstd" "$(ge "${CT[b:tarzstd]}" "$(calc "2 * ${CT[b:znippy]}")")" \
            "$(mbs "${IN_BYTES[b]}" "${CT[b:znippy]}") vs $(mbs "${IN_BYTES[b]}" "${CT[b:tarzstd]}") MB/s ($(x "${CT[b:tarzstd]} / ${CT[b:znippy]}"))"
    else
        target "compress throughput on (b) ≥ 2x tar \| zstd" skip "set b not run"
    fi
    if [[ -n ${CT[a:znippy]:-} ]]; then
        target "full decompress on (a) no slower than zstd -dc \| tar -x" "$(ge "${DT[a:tarzstd]}" "${DT[a:znippy]}")" \
            "$(fmt '%.2f' "${DT[a:znippy]}") s vs $(fmt '%.2f' "${DT[a:tarzstd]}") s"
    else
        target "full decompress on (a) no slower than zstd -dc \| tar -x" skip "set a not run"
    fi
    for set in ${ALL_SETS/d/}; do
        if [[ -n ${CT[$set:znippy]:-} ]]; then
            target "one-file get on ($set) no slower than unsquashfs (mean of $GET_SAMPLES files)" "$(ge "${MS[get$set:2]}" "${MS[get$set:0]}")" \
                "$(fmt '%.1f' "${MS[get$set:0]}") ms vs $(fmt '%.1f' "${MS[get$set:2]}") ms"
            target "one-file get on ($set), slowest of $GET_SAMPLES files, no slower than unsquashfs's slowest" "$(ge "${MS[getmax$set:2]}" "${MS[getmax$set:0]}")" \
                "$(fmt '%.1f' "${MS[getmax$set:0]}") ms vs $(fmt '%.1f' "${MS[getmax$set:2]}") ms"
            if [[ -n ${GET_SLOWER[$set]:-} ]]; then
                target "one-file get on ($set) no slower than unsquashfs on any of $GET_SAMPLES files, in pairs" "$((GET_SLOWER[$set] == 0))" \
                    "slower on ${GET_SLOWER[$set]} of $GET_SAMPLES"
            fi
        else
            target "one-file get on ($set) no slower than unsquashfs" skip "set $set not run"
        fi
    done
    for set in a e; do
        if [[ -n ${CT[$set:znippy]:-} ]]; then
            z=${SZ[$set:znippy]}
            tz=${SZ[$set:tarzstd]}
            target "archive size on ($set) within 2% of tar \| zstd" "$(ge "$(calc "1.02 * $tz")" "$z")" \
                "$(mb "$z") MB vs $(mb "$tz") MB ($(fmt '%+.1f%%' "100 * ($z / $tz - 1)"))"
        else
            target "archive size on ($set) within 2% of tar \| zstd" skip "set $set not run"
        fi
    done
    if [[ -n ${CT[c:znippy]:-} ]]; then
        z=${SZ[c:znippy]}
        tz=${SZ[c:tarzstd]}
        target "archive size on (c) smaller than tar \| zstd" "$(lt "$z" "$tz")" \
            "$(mb "$z") MB vs $(mb "$tz") MB ($(fmt '%+.1f%%' "100 * ($z / $tz - 1)"))"
    else
        target "archive size on (c) smaller than tar \| zstd" skip "set c not run"
    fi
    # Issue 49: the archive without the 32-byte BLAKE3 of each slice, on
    # every set, against the smaller of tar | zstd and squashfs.
    local nohash smaller
    for set in ${ALL_SETS/d/}; do
        if [[ -n ${SLICES[$set]:-} && -n ${SZ[$set:squashfs]:-} ]]; then
            nohash=$((SZ[$set:znippy] - 32 * SLICES[$set]))
            smaller=$((SZ[$set:tarzstd] < SZ[$set:squashfs] ? SZ[$set:tarzstd] : SZ[$set:squashfs]))
            target "archive size without the BLAKE3s on ($set) ≤ the smaller of tar \| zstd and squashfs" "$(ge "$smaller" "$nohash")" \
                "$(mb "$nohash") MB vs $(mb "$smaller") MB ($(fmt '%+.1f%%' "100 * ($nohash / $smaller - 1)")); index ${INDEX_NO_HASH[$set]} B a file"
        fi
        if [[ -n ${SLICES[$set]:-} && -n ${SQ_META[$set]:-} ]]; then
            nohash=$((SZ[$set:znippy] - BLOB[$set] - 32 * SLICES[$set]))
            target "index without the BLAKE3s on ($set) ≤ squashfs's metadata" "$(ge "${SQ_META[$set]}" "$nohash")" \
                "$(fmt '%.1f' "$nohash / ${IN_FILES[$set]}") vs $(fmt '%.1f' "${SQ_META[$set]} / ${IN_FILES[$set]}") B a file (issue 49 asks ≤ 12 on tiny files)"
        fi
    done
    if [[ -n ${MEM[ct:znippy]:-} ]]; then
        target "peak RSS of compress on (d) < 300 MiB" "$(lt "${MEM[cr:znippy]}" 307200)" "$(mib "${MEM[cr:znippy]}") MiB"
        target "peak RSS of decompress on (d) < 300 MiB" "$(lt "${MEM[dr:znippy]}" 307200)" "$(mib "${MEM[dr:znippy]}") MiB"
    else
        target "peak RSS of compress on (d) < 300 MiB" skip "set d not run"
        target "peak RSS of decompress on (d) < 300 MiB" skip "set d not run"
    fi
    echo
    echo "## Targets"
    echo
    echo "| target | measured (znippy vs other) | result |"
    echo "|---|---|---|"
    printf '%s\n' "${TARGETS[@]}"
}

# How BINARY is linked: a get is a whole process, and the dynamic loader is
# part of its time (scripts/build links the archiver as a static PIE).
linkage() {
    if ! command -v readelf >/dev/null; then
        echo "linkage not checked: no readelf"
    elif readelf -l "$1" 2>/dev/null | grep -q 'program interpreter'; then
        echo "dynamically linked"
    else
        echo "static"
    fi
}

# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

main() {
    [[ -x $ZNIPPY ]] || die "no znippy binary at $ZNIPPY (build it: ./scripts/build --release)"
    ZNIPPY=$(realpath "$ZNIPPY")
    mkdir -p "$BENCH_DIR"
    BENCH_DIR=$(realpath "$BENCH_DIR")
    DATA=$BENCH_DIR/data ARCS=$BENCH_DIR/archives LOG=$BENCH_DIR/commands.log
    mkdir -p "${BENCH_OUT:-$BENCH_DIR}"
    OUTS=$(realpath "${BENCH_OUT:-$BENCH_DIR}")/znippy-bench-out
    SAMPLES=$BENCH_DIR/samples.tsv
    install_missing
    local t
    for t in mksquashfs unsquashfs zip unzip zstd tar python3; do
        command -v "$t" >/dev/null || die "$t is missing"
    done
    [[ -x /usr/bin/time ]] || die "/usr/bin/time is missing"
    HAVE_HYPERFINE=0
    command -v hyperfine >/dev/null && HAVE_HYPERFINE=1
    SQFS_CAT=0
    unsquashfs -help 2>&1 | grep -q -- '-cat' && SQFS_CAT=1
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    if [[ $(awk '{ print ($1 > 0.5) }' /proc/loadavg) == 1 ]]; then
        log "warning: load average $LOAD_START: something else is running, timings will suffer"
    fi
    log "work dir $BENCH_DIR ($(df -h --output=avail "$BENCH_DIR" | tail -n1 | tr -d ' ') free), sets: $BENCH_SETS, runs: $RUNS"
    rm -rf "$ARCS" "$OUTS"
    mkdir -p "$DATA" "$ARCS" "$OUTS"
    : >"$LOG"
    printf 'set\ttool\top\trun\tseconds\n' >"$SAMPLES"

    local set m0 run0 o st
    run0=$(cpu_mark)
    for set in $ALL_SETS; do
        has_set "$set" || continue
        log "set $set: preparing"
        "prepare_$set"
        m0=$(cpu_mark)
        if [[ $set == d ]]; then
            bench_memory
        else
            bench_set "$set"
            bench_get "$set"
            if [[ $set == a ]]; then
                bench_list_verify
            fi
        fi
        OTHER[$set]=$(cpu_other "$m0" "$(cpu_mark)")
        read -r o st <<<"${OTHER[$set]}"
        if [[ $(awk -v o="$o" 'BEGIN { print (o > 5) }') == 1 ]]; then
            log "warning: other processes used $o CPU-s during set $set: its timings are disturbed"
        fi
    done
    OTHER[run]=$(cpu_other "$run0" "$(cpu_mark)")
    log "done in $((SECONDS / 60)) min $((SECONDS % 60)) s; archives kept in $ARCS, command output in $LOG"
    report
    rm -rf "$OUTS"
}

main "$@"
