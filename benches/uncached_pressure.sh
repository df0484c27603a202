#!/usr/bin/env bash
# What a scan leaves of another file's page cache under memory pressure. A 1 GiB file is read
# into the page cache, then 2 GiB of other files are scanned (the scan example, one reader),
# both in one memory-limited cgroup, so the file's pages and the scan's compete for the same
# memory, as in a process whose own cache a startup scan must not evict. Per round, caches
# dropped first, each mode once (the order flips every round):
#
#   buffered   the default reads
#   uncached   --uncached: RWF_DONTCACHE where the filesystem takes it
#   fallback   --uncached --uncached-fallback: buffered reads whose pages are dropped behind,
#              as where the filesystem refuses RWF_DONTCACHE
#
# For each run: the 1 GiB file's bytes still cached after the scan (its share of 1 GiB), the
# scanned files' bytes left cached, and the scan's speed; then each mode's median and range.
#
#   benches/uncached_pressure.sh [ROUNDS]                  # default 3 rounds
#   PRESSURE_DIR=DIR benches/uncached_pressure.sh          # where the files are (default: beside target/)
#   PRESSURE_LIMIT_MIB=N ...                               # the cgroup's memory (default 1280)
#   PRESSURE_MODES="buffered uncached" ...                 # some of the modes
#   PRESSURE_SCAN_ARGS="--backend sync" ...                # more options for every scan
#
# Needs root (a cgroup, drop_caches), Linux with the memory controller (cgroup v2, or v1's
# memory hierarchy), fincore (util-linux), and 3 GiB free on the disk (files made once, kept).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-3}
data=${PRESSURE_DIR:-$PWD/target/uncached-pressure}
limit_mib=${PRESSURE_LIMIT_MIB:-1280}
modes=${PRESSURE_MODES:-buffered uncached fallback}
read -r -a scan_args <<<"${PRESSURE_SCAN_ARGS:-}"

if [ "$(id -u)" -ne 0 ]; then
    echo "needs root: a cgroup and drop_caches" >&2
    exit 1
fi

# The cgroup: v2 where its root offers the memory controller, else v1's memory hierarchy.
if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    echo +memory >/sys/fs/cgroup/cgroup.subtree_control
    cg=/sys/fs/cgroup/readahead-pressure
    limit_file=memory.max
elif [ -d /sys/fs/cgroup/memory ]; then
    cg=/sys/fs/cgroup/memory/readahead-pressure
    limit_file=memory.limit_in_bytes
else
    echo "no cgroup memory controller found" >&2
    exit 1
fi
mkdir -p "$cg"
echo $((limit_mib << 20)) >"$cg/$limit_file"
cleanup() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
    rmdir "$cg" 2>/dev/null || true
}
trap cleanup EXIT

# Runs a command inside the cgroup: the pages it brings into the cache are charged there.
in_cgroup() {
    sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" "$@"
}

# Bytes of the given files in the page cache.
cached() {
    fincore --bytes --noheadings --output RES "$@" | awk '{ s += $1 } END { print s + 0 }'
}

mkdir -p "$data/other"
if [ ! -f "$data/cached.bin" ]; then
    echo "making $data: 1 GiB to keep cached, 2 GiB (64 files of 32 MiB) to scan" >&2
    head -c $((1 << 30)) /dev/urandom >"$data/cached.bin.part"
    mv "$data/cached.bin.part" "$data/cached.bin"
    for i in $(seq -w 0 63); do
        head -c $((32 << 20)) /dev/urandom >"$data/other/$i.bin"
    done
    sync
fi

cargo build --release --example scan >&2
scan=$PWD/target/release/examples/scan

echo "cgroup $cg, memory limit $limit_mib MiB; $rounds rounds"
printf '%-9s %6s %14s %12s %8s\n' mode round "kept cached" "scan cached" "GiB/s"
results=$(mktemp)
for round in $(seq "$rounds"); do
    order=$modes
    if [ $((round % 2)) -eq 0 ]; then
        order=$(echo "$modes" | tr ' ' '\n' | tac | tr '\n' ' ')
    fi
    for mode in $order; do
        case $mode in
            buffered) flags=() ;;
            uncached) flags=(--uncached) ;;
            fallback) flags=(--uncached --uncached-fallback) ;;
            *) echo "unknown mode $mode" >&2; exit 1 ;;
        esac
        sync
        echo 3 >/proc/sys/vm/drop_caches
        in_cgroup cat "$data/cached.bin" >/dev/null
        before=$(cached "$data/cached.bin")
        line=$(in_cgroup "$scan" --json "${flags[@]}" "${scan_args[@]}" "$data/other")
        after=$(cached "$data/cached.bin")
        others=$(cached "$data"/other/*)
        speed=$(echo "$line" | sed -n 's/.*"gib_per_s":\([0-9.]*\).*/\1/p')
        kept=$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", b ? 100 * a / b : 0 }')
        printf '%-9s %6s %13s%% %8s MiB %8.2f\n' "$mode" "$round" "$kept" $((others >> 20)) "$speed"
        echo "$mode $kept $((others >> 20)) $speed" >>"$results"
    done
done

echo
echo "medians (range) of $rounds rounds: the 1 GiB file still cached; the scanned files cached; speed"
for mode in $modes; do
    awk -v m="$mode" '
        function median(a, n,   i, j, t) {
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        $1 == m { n++; k[n] = $2; c[n] = $3; s[n] = $4 }
        END {
            mk = median(k, n); mc = median(c, n); ms = median(s, n)
            printf "%-9s %.1f%% (%.1f-%.1f%%); %d MiB (%d-%d); %.2f GiB/s (%.2f-%.2f)\n", m,
                mk, k[1], k[n], mc, c[1], c[n], ms, s[1], s[n]
        }' "$results"
done
rm -f "$results"
