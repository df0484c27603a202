#!/usr/bin/env bash
# The b3sum example (examples/b3sum/) against the real b3sum, on three data sets:
#
#   tree   the Rust toolchain's own tree, $(rustc --print sysroot): every machine with Rust has
#          it. Ours: `b3sum -r .`; theirs: `find . -type f -print0 | sort -z | xargs -0 b3sum`
#          (b3sum hashes a large file on every core), and as a reference the same with
#          `xargs -P NPROC -n 1000`, NPROC b3sums at once. Cold and warm.
#   big    one file of 2 GiB: `b3sum FILE`, cold and warm.
#   tiny   20,000 files of 4 KiB (80 directories of 250): as tree, cold.
#
# Each round runs every program once, alternately (the order flips every round); cold runs
# start with `sync; echo 3 > /proc/sys/vm/drop_caches` (root; without it the cold runs are
# skipped, saying so), warm runs follow one untimed pass. For each program: the median wall
# time and the range of the rounds; then the ratio of the medians, b3sum / ours (above 1:
# ours is faster). Before timing, each data set's sums are checked equal (sorted, since
# ours walks in its own order).
#
#   benches/b3sum.sh [ROUNDS]            # default 5 rounds
#   B3SUM_BENCH_DIR=DIR benches/b3sum.sh # where big and tiny are made (default: beside target/)
#   B3SUM_BENCH_ONLY="tree big" ...      # some of the data sets
#
# Needs bash, GNU find/sort/xargs, awk, b3sum on PATH (`cargo install b3sum --locked`), and a disk
# with 2.2 GB free for the data sets (made once, kept for the next run).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-5}
only=${B3SUM_BENCH_ONLY:-tree big tiny}
data=${B3SUM_BENCH_DIR:-$PWD/target/b3sum-bench}
nproc=$(nproc)

theirs=$(command -v b3sum) || {
    echo "no b3sum on PATH: cargo install b3sum --locked" >&2
    exit 1
}
cargo build --release --example b3sum >&2
ours=$PWD/target/release/examples/b3sum

cold=1
if [ "$(id -u)" != 0 ] || [ ! -w /proc/sys/vm/drop_caches ]; then
    echo "not root: the cold runs are skipped (they drop the page cache)" >&2
    cold=0
fi

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# Seconds, to the millisecond, that running "$@" takes (its output thrown away).
seconds() {
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null
    end=$(date +%s%N)
    awk -v ns=$((end - start)) 'BEGIN { printf "%.3f", ns / 1e9 }'
}

# The median, least and greatest of the numbers on stdin.
stats() {
    sort -g | awk '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.3f %.3f %.3f\n", m, v[1], v[NR]
    }'
}

# The programs of a data set, as shell commands run in its directory: `name=command` lines.
programs_tree() {
    echo "ours=$ours -r ."
    echo "b3sum=find . -type f -print0 | sort -z | xargs -0 $theirs"
    echo "b3sum -P$nproc=find . -type f -print0 | sort -z | xargs -0 -P $nproc -n 1000 $theirs"
}
programs_big() {
    echo "ours=$ours big"
    echo "b3sum=$theirs big"
}
programs_tiny() { programs_tree | head -n 2; }

# Runs the programs of data set $1 in directory $2, $rounds rounds, cold ($3 = cold) or warm;
# prints one line per program and the ratio.
measure() {
    local set=$1 dir=$2 temp=$3 round name cmd
    local -a names cmds
    while IFS='=' read -r name cmd; do
        names+=("$name")
        cmds+=("$cmd")
    done < <("programs_$set")
    local results
    results=$(mktemp)
    if [ "$temp" = warm ]; then
        (cd "$dir" && bash -c "${cmds[0]}" >/dev/null)
    fi
    for round in $(seq 1 "$rounds"); do
        local order
        order=$(seq 0 $((${#names[@]} - 1)))
        if [ $((round % 2)) = 0 ]; then
            order=$(echo "$order" | tac)
        fi
        for i in $order; do
            if [ "$temp" = cold ]; then
                drop_caches
            fi
            echo "${names[$i]} $(cd "$dir" && seconds bash -c "${cmds[$i]}")" >>"$results"
        done
    done
    local ours_median=
    for name in "${names[@]}"; do
        read -r median least most < <(grep "^$name [0-9.]*$" "$results" | awk '{ print $NF }' | stats)
        if [ -z "$ours_median" ]; then
            ours_median=$median
        fi
        printf '  %-5s %-4s %-12s median %7.3f s   range %7.3f - %7.3f s   b3sum/ours %s\n' \
            "$set" "$temp" "$name" "$median" "$least" "$most" \
            "$(awk -v a="$median" -v b="$ours_median" 'BEGIN { printf "%.2fx", a / b }')"
    done
    rm -f "$results"
}

# Checks once that ours and b3sum give the same sums for the files of data set $1 in $2.
check() {
    local dir=$2
    if ! diff <(cd "$dir" && "$ours" -r . | sort) \
        <(cd "$dir" && find . -type f -print0 | sort -z | xargs -0 "$theirs" | sort) >/dev/null; then
        echo "the sums of $1 differ between ours and b3sum" >&2
        exit 1
    fi
}

make_big() {
    mkdir -p "$data"
    if [ ! -f "$data/big/big" ]; then
        echo "making $data/big/big (2 GiB)" >&2
        mkdir -p "$data/big"
        head -c $((2 << 30)) /dev/urandom >"$data/big/big.part"
        sync "$data/big/big.part"
        mv "$data/big/big.part" "$data/big/big"
    fi
}

make_tiny() {
    if [ ! -f "$data/tiny.complete" ]; then
        echo "making $data/tiny (20,000 files of 4 KiB)" >&2
        rm -rf "$data/tiny"
        local d f
        for d in $(seq -w 0 79); do
            mkdir -p "$data/tiny/$d"
            for f in $(seq -w 0 249); do
                head -c 4096 /dev/urandom >"$data/tiny/$d/$f"
            done
        done
        sync
        touch "$data/tiny.complete"
    fi
}

echo "b3sum benchmark: $rounds rounds, $nproc cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "ours: $ours; b3sum: $theirs ($("$theirs" --version))"
for set in $only; do
    case $set in
    tree) dir=$(rustc --print sysroot) ;;
    big) make_big; dir=$data/big ;;
    tiny) make_tiny; dir=$data/tiny ;;
    *) echo "unknown data set $set: use tree, big or tiny" >&2; exit 2 ;;
    esac
    files=$(find "$dir" -type f | wc -l)
    bytes=$(du -sb "$dir" | cut -f1)
    echo "$set: $dir, $files files, $((bytes >> 20)) MiB"
    check "$set" "$dir"
    temps="cold warm"
    if [ "$set" = tiny ]; then
        temps=cold
    fi
    for temp in $temps; do
        if [ "$temp" = cold ] && [ "$cold" = 0 ]; then
            continue
        fi
        measure "$set" "$dir" "$temp"
    done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
