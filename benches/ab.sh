#!/usr/bin/env bash
# benches/ab.sh: two command lines run alternately, the wall time of each run,
# and the median and quartiles of each side. For before/after comparisons on a
# shared machine: alternating puts both sides through the same drift.
#
#   bash benches/ab.sh N 'COMMAND A' 'COMMAND B'
#
# BEFORE='shell line' runs before every run, untimed (e.g. removing an output).
# Example, the engine before and after a change, on set b of compare.sh:
#
#   BEFORE='rm -f /tmp/o.znippy' bash benches/ab.sh 30 \
#     '/tmp/znippy-before compress /tmp/znippy-bench/data/b -o /tmp/o.znippy' \
#     'target/release/znippy compress /tmp/znippy-bench/data/b -o /tmp/o.znippy'

set -euo pipefail
(($# == 3)) || {
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
n=$1
cmds=("$2" "$3")
times=$(mktemp)
trap 'rm -f "$times"' EXIT
for ((i = 0; i < n; i++)); do
    for side in 0 1; do
        bash -c "${BEFORE:-:}"
        t0=$EPOCHREALTIME
        bash -o pipefail -c "${cmds[side]}" >/dev/null 2>&1 || {
            echo "failed: ${cmds[side]}" >&2
            exit 1
        }
        t1=$EPOCHREALTIME
        echo "$side $(awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.3f", (b - a) * 1000 }')"
    done
done >"$times"
for side in 0 1; do
    label=$([[ $side == 0 ]] && echo A || echo B)
    awk -v s="$side" '$1 == s { print $2 }' "$times" | sort -g | awk -v l="$label" -v c="${cmds[side]}" '
        { v[NR] = $1 }
        END { printf "%s  median %.1f ms  p25 %.1f  p75 %.1f  (%d runs)  %s\n",
              l, v[int((NR + 1) / 2)], v[int((NR + 3) / 4)], v[int((3 * NR + 3) / 4)], NR, c }'
done
