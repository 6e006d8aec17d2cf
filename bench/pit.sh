#!/bin/sh
# bench/pit.sh — what `make bench-pit` runs: builds the release binary and the pit driver
# (examples/bench_pit.rs), then replays the field investigation's A/B (seed 000_*) on loopback
# against the real proxy: a black-holed direct tier with cooldowns expiring every ~20 s, probed
# once per second like the Telegram app does, at --ws-connect-timeout 4 and 1; a flapping direct
# tier; a healthy baseline; and the Worker request count while idle (docs/design.md §8). About 2.5
# minutes plus the build. Writes a Markdown report to target/bench/ (also printed) and the
# proxies' logs to target/bench/pit/. Touches nothing outside target/; numbers that go into
# BENCHMARKS.md are copied there by hand, with their interpretation.
#
# Extra arguments go to the driver, e.g. `bench/pit.sh --secs 20 --idle 30` for a quick run.
set -eu
cd "$(dirname "$0")/.."

cargo build --release --locked --bin tg-ws-proxy
cargo build --release --locked --example bench_pit

mkdir -p target/bench/pit
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report="target/bench/pit-$stamp.md"
body="target/bench/.pit-body-$stamp.md"
started=$(date -u '+%Y-%m-%d %H:%M UTC')

target/release/examples/bench_pit \
    --proxy target/release/tg-ws-proxy --ca tests/data/ca.pem --logs target/bench/pit \
    --out "$body" "$@" >/dev/null

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')
{
    echo "## Pit bench run $started"
    echo
    echo "- command: \`make bench-pit\` (= \`bench/pit.sh$( [ $# -gt 0 ] && printf ' %s' "$@")\`), release profile"
    echo "- tree: $rev ($dirty uncommitted paths), $(rustc -V)"
    echo "- nproc $(nproc), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
    echo "- proxy logs: target/bench/pit/*.log"
    echo
    cat "$body"
} >"$report"
rm -f "$body"
ln -sf "pit-$stamp.md" target/bench/pit-latest.md
cat "$report"
echo
echo "bench/pit.sh: report written to $report (target/bench/pit-latest.md)"
