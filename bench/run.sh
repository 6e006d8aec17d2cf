#!/bin/sh
# bench/run.sh — what `make bench` runs: builds the release binary, the bench driver
# (examples/bench.rs, at opt-level 3 in target/bench-o3) and the static x86_64 musl build (into
# $BENCH_CROSS_DIR), raises the open-file limit for 500 relaying sessions and 1,000 arriving
# ones, runs every docs/design.md §8 resource measurement, the issue 6 burst and the issue 19
# memory-returned bursts (600 masked probers, 600 relayed sessions) once against the fake
# Telegram DC and a mask site on loopback, and writes a Markdown report to target/bench/ (also printed) and
# the burst runs' proxy logs to target/bench/burst/<stamp>/. Touches nothing outside target/ and
# $BENCH_CROSS_DIR (default /var/tmp/tg-ws-proxy-cross, where cross/build.sh builds too);
# results that go into BENCHMARKS.md are copied there by hand (the current table), the run's record
# and interpretation into bench/history/.
#
# Extra arguments go to the driver, e.g. `bench/run.sh --large 200 --gib 0.5` for a quick run,
# `bench/run.sh --only burst --burst-ref` for the burst alone (what `make bench-burst` runs),
# `bench/run.sh --only returned` for the memory-returned bursts (`make bench-returned`),
# `bench/run.sh --only direct` for issue 21's cheap relay end to end (`make bench-direct`).
set -eu
cd "$(dirname "$0")/.."

# 500 relaying sessions: the proxy holds ~1000 sockets, this process ~1500 (clients + fake DC).
# The 1,000-session burst: the proxy's default --max-connections is (limit - 32) / 3, and this
# process holds each client plus 2 per fake-front connection: ~3,100 each. The driver refuses to
# start the burst below what it needs, with that number.
want=4096
cur=$(ulimit -n)
if [ "$cur" != unlimited ] && [ "$cur" -lt "$want" ]; then
    hard=$(ulimit -H -n)
    if [ "$hard" = unlimited ] || [ "$hard" -ge "$want" ]; then
        ulimit -n "$want"
    else
        ulimit -n "$hard"
        echo "bench/run.sh: open-file hard limit is $hard (< $want); 500 sessions and the burst may not fit" >&2
    fi
fi

cargo build --release --locked --bin tg-ws-proxy
# The driver holds the CPU baselines (two AES-256-CTR passes, one TLS record pass): it is built at
# opt-level 3 whatever Cargo.toml's release profile says, in its own target dir so the product's
# build above is left as it is; the `"*"` override also lifts any per-package setting in Cargo.toml
# for dependencies. A slow baseline would flatter the ratio; the driver reports the
# opt-level it was built with and judges no CPU target at any other.
bench_dir=target/bench-o3
CARGO_PROFILE_RELEASE_OPT_LEVEL=3 cargo build --release --locked --example bench --target-dir "$bench_dir" \
    --config 'profile.release.package."*".opt-level = 3'
# The static x86_64 musl build (the shipping libc and malloc) for the memory and size rows, from
# this tree, into $BENCH_CROSS_DIR (where the driver looks). BENCH_MUSL=0 skips it; so does a
# missing cross toolchain (cross/README.md), with a note.
cross_dir=${BENCH_CROSS_DIR:-/var/tmp/tg-ws-proxy-cross}
if [ "${BENCH_MUSL:-1}" != 0 ]; then
    if cross/build.sh env >/dev/null 2>&1; then
        CROSS_TARGET_DIR="$cross_dir" cross/build.sh build x86_64-unknown-linux-musl >&2
    else
        echo "bench/run.sh: cross toolchain missing (cross/build.sh env failed): no fresh static musl build" >&2
    fi
fi

mkdir -p target/bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report="target/bench/report-$stamp.md"
body="target/bench/.body-$stamp.md"

BENCH_CROSS_DIR="$cross_dir" BENCH_CLK_TCK=$(getconf CLK_TCK) "$bench_dir"/release/examples/bench \
    --proxy target/release/tg-ws-proxy --ca tests/data/ca.pem \
    --burst-logs "target/bench/burst/$stamp" --out "$body" "$@" >/dev/null

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')
{
    echo "## Bench run $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- command: \`bench/run.sh$( [ $# -gt 0 ] && printf ' %s' "$@")\` (\`make bench\` runs it with \$BENCH_ARGS, \`make bench-burst\` with \`--only burst --burst-ref\`), release profile"
    echo "- tree: $rev ($dirty uncommitted paths), $(rustc -V); driver built at opt-level 3 in $bench_dir; musl builds from $cross_dir"
    echo "- nproc $(nproc), open-file limit $(ulimit -n), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
    echo
    cat "$body"
} >"$report"
rm -f "$body"
ln -sf "report-$stamp.md" target/bench/latest.md
cat "$report"
echo
echo "bench/run.sh: report written to $report (target/bench/latest.md)"
