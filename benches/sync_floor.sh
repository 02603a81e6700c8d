#!/usr/bin/env bash
# The filesystem's floor under one acknowledged small PUT, by layout: the
# system calls of an embedded-catalog commit against SeaweedFS's append and
# fsync, with no server in the way (benches/sync_floor.rs says what each
# layout does).
#
#   bash benches/sync_floor.sh [DIR ...]      # RUNS=300 by default
#
# Each DIR is measured in an empty subdirectory, removed afterwards. Without
# DIR it measures ${TMPDIR:-/tmp}, and, as root, also a fresh journaled ext4
# (mkfs.ext4's defaults, tables zeroed up front) in a 2 GiB file on a loop device, as
# benches/ingest_ab.sh makes with JOURNAL=1. Needs rustc (no crates).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/znippy-sync-floor.XXXXXX")
mnt=$work/mnt
cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
    rm -rf "$work"
}
trap cleanup EXIT

rustc -O --edition 2021 -o "$work/sync-floor" "$root/benches/sync_floor.rs"

dirs=("$@")
if ((${#dirs[@]} == 0)); then
    dirs=("${TMPDIR:-/tmp}")
    if [[ $(id -u) == 0 ]]; then
        truncate -s 2G "$work/ext4.img"
        # Inode tables and journal zeroed now, not by a background thread
        # during the runs.
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$work/ext4.img"
        mkdir -p "$mnt"
        mount -o loop "$work/ext4.img" "$mnt"
        dirs+=("$mnt")
    fi
fi

for dir in "${dirs[@]}"; do
    at=$(mktemp -d "$dir/sync-floor.XXXXXX")
    fs=$(findmnt -n -o FSTYPE,OPTIONS --target "$at" | cut -c1-80)
    journal=no
    dev=$(findmnt -n -o SOURCE --target "$at")
    if [[ -b $dev ]] && command -v dumpe2fs >/dev/null &&
        dumpe2fs -h "$dev" 2>/dev/null | grep -q has_journal; then
        journal=yes
    fi
    echo
    echo "$at ($fs; ext4 journal: $journal), ${RUNS:-300} runs of each:"
    echo
    "$work/sync-floor" "$at"
    rm -rf "$at"
done
