#!/usr/bin/env bash
# benches/plugins.sh: what the package plugins cost a compress, on a tree of
# real packages: wheels and sdists from PyPI, npm tarballs, and cargo's .crate
# cache. Compresses the tree with the plugins and with --no-plugins, in turn,
# RUNS times each, and prints a Markdown report: medians, their ratio, and
# the index bytes the package sections take per package.
#
#   bash benches/plugins.sh | tee /tmp/plugins-report.md
#
# Knobs: ZNIPPY (default target/release/znippy), BENCH_DIR (default
# /tmp/znippy-plugins-bench; the downloads are kept there between runs),
# RUNS (default 7), THREADS (default: all cores), COLD=1 (drop the page
# cache before every compress, as root: the tree read from the disk, as a
# mirror's packages arriving from elsewhere would be).
set -euo pipefail
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ZNIPPY=${ZNIPPY:-$repo_root/target/release/znippy}
BENCH_DIR=${BENCH_DIR:-/tmp/znippy-plugins-bench}
RUNS=${RUNS:-7}
THREADS=${THREADS:-$(nproc)}
COLD=${COLD:-0}
if [[ $COLD == 1 && ! -w /proc/sys/vm/drop_caches ]]; then
    echo "COLD=1 drops the page cache: run as root" >&2
    exit 2
fi
tree=$BENCH_DIR/tree
log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

# About fifty projects' wheel and sdist, a hundred npm packages, and every
# .crate cargo has downloaded.
PYPI="requests urllib3 idna certifi charset-normalizer six attrs packaging
pyparsing click jinja2 markupsafe itsdangerous werkzeug flask pytz
python-dateutil tzdata pyyaml toml tomli wheel setuptools pip decorator
docutils pygments sqlalchemy psutil pluggy iniconfig pytest filelock
platformdirs virtualenv distlib typing-extensions zipp importlib-metadata
colorama tabulate tqdm wrapt cffi pycparser cryptography rsa pyasn1 jmespath
botocore"
NPM="lodash react react-dom express chalk commander debug ms semver uuid
axios moment async bluebird underscore request yargs minimist glob mkdirp
rimraf fs-extra body-parser cookie-parser morgan cors dotenv jsonwebtoken
bcryptjs mongoose mysql pg redis ws socket.io classnames prop-types
react-router redux react-redux immutable rxjs typescript tslib core-js
regenerator-runtime @babel/core @babel/runtime webpack rollup esbuild vite
eslint prettier jest mocha chai sinon supertest nodemon concurrently
cross-env inquirer ora boxen figlet colors cli-table3 marked highlight.js
dayjs date-fns luxon validator joi yup zod ajv qs querystring node-fetch
got superagent cheerio jsdom xml2js js-yaml ini toml handlebars ejs pug
mustache nunjucks sharp jimp canvas"

if [[ ! -e $BENCH_DIR/.downloaded ]]; then
    rm -rf "$tree"
    mkdir -p "$tree/pypi" "$tree/npm" "$tree/crates"
    log "downloading wheels and sdists"
    for p in $PYPI; do
        python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tree/pypi" "$p" || true
        python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
            -d "$tree/pypi" "$p" 2>/dev/null || true
    done
    log "packing npm packages"
    (cd "$tree/npm" && for p in $NPM; do npm pack -q "$p" >/dev/null 2>&1 || true; done)
    log "copying the .crate cache"
    cp "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/*.crate "$tree/crates/"
    touch "$BENCH_DIR/.downloaded"
fi

files=$(find "$tree" -type f | wc -l)
bytes=$(du -sb "$tree" | cut -f1)
log "tree: $files packages, $bytes bytes"
out=$BENCH_DIR/out.znippy
run() { # run LABEL ARGS... : prints the wall seconds of one compress
    local t0 t1
    # Each compress writes a new file: renaming over the last run's would
    # time its eviction, and ext4's flush of a file renamed over another.
    rm -f "$out"
    sync
    [[ $COLD == 1 ]] && echo 3 > /proc/sys/vm/drop_caches
    t0=$(date +%s.%N)
    "$ZNIPPY" compress "$tree" -o "$out" --threads "$THREADS" --repo bench "$@" 2>/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
with=() without=() ratios=()
run >/dev/null; run --no-plugins >/dev/null  # warm-up: the tree in the page cache
for _ in $(seq "$RUNS"); do
    a=$(run); b=$(run --no-plugins)
    with+=("$a"); without+=("$b"); ratios+=("$(echo "$b / $a" | bc -l)")
done
"$ZNIPPY" compress "$tree" -o "$out" --threads "$THREADS" --repo bench 2>/dev/null
info=$("$ZNIPPY" info "$out")
rows=$("$ZNIPPY" packages "$out" | wc -l)
damaged=$("$ZNIPPY" packages "$out" | grep -c $'\terror=' || true)
pkg_bytes=$(awk '/^ +[0-9]+ / && $1 > 0 {s += $5} END {print s + 0}' <<<"$info")
index=$(awk '/^index/ {gsub(/[(]/, "", $4); print $4}' <<<"$info")
"$ZNIPPY" compress "$tree" -o "$out" --threads "$THREADS" --no-plugins 2>/dev/null
plain_len=$(stat -c %s "$out")
rm -f "$out"
mw=$(printf '%s\n' "${with[@]}" | median)
mo=$(printf '%s\n' "${without[@]}" | median)
mr=$(printf '%s\n' "${ratios[@]}" | median)
cat <<MD
| tree | packages | bytes | threads | runs | page cache |
|---|---:|---:|---:|---:|---|
| pypi + npm + crates | $files | $bytes | $THREADS | $RUNS | $([[ $COLD == 1 ]] && echo dropped before each || echo warm) |

| compress | median s | MB/s |
|---|---:|---:|
| with plugins | $mw | $(echo "$bytes / $mw / 1000000" | bc -l | xargs printf '%.0f') |
| --no-plugins | $mo | $(echo "$bytes / $mo / 1000000" | bc -l | xargs printf '%.0f') |

Throughput with plugins / without, median of the pairs: $(printf '%.3f' "$mr")
(pairs: $(printf '%.3f ' "${ratios[@]}")).

Package rows: $rows ($damaged with an error); package sections: $pkg_bytes
bytes, $(echo "$pkg_bytes / $rows" | bc -l | xargs printf '%.0f') bytes per row; whole index $index bytes;
archive without plugins $plain_len bytes.
MD
