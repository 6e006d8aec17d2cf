#!/bin/sh
# bench/run.sh — what `make bench` runs: builds the release binary and the bench driver
# (examples/bench.rs), raises the open-file limit for 500 relaying sessions, runs every
# docs/design.md §8 resource measurement once against the fake Telegram DC on loopback, and
# writes a Markdown report to target/bench/ (also printed). Touches nothing outside target/;
# results that go into BENCHMARKS.md are copied there by hand, with their interpretation.
#
# Extra arguments go to the driver, e.g. `bench/run.sh --large 200 --gib 0.5` for a quick run.
set -eu
cd "$(dirname "$0")/.."

# 500 sessions: the proxy holds ~1000 sockets, this process ~1500 (clients + fake DC).
want=4096
cur=$(ulimit -n)
if [ "$cur" != unlimited ] && [ "$cur" -lt "$want" ]; then
    hard=$(ulimit -H -n)
    if [ "$hard" = unlimited ] || [ "$hard" -ge "$want" ]; then
        ulimit -n "$want"
    else
        ulimit -n "$hard"
        echo "bench/run.sh: open-file hard limit is $hard (< $want); 500 sessions may not fit" >&2
    fi
fi

cargo build --release --bin tg-ws-proxy
cargo build --release --example bench

mkdir -p target/bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report="target/bench/report-$stamp.md"
body="target/bench/.body-$stamp.md"

BENCH_CLK_TCK=$(getconf CLK_TCK) target/release/examples/bench \
    --proxy target/release/tg-ws-proxy --ca tests/data/ca.pem --out "$body" "$@" >/dev/null

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')
{
    echo "## Bench run $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- command: \`make bench\` (= \`bench/run.sh$( [ $# -gt 0 ] && printf ' %s' "$@")\`), release profile"
    echo "- tree: $rev ($dirty uncommitted paths), $(rustc -V)"
    echo "- nproc $(nproc), open-file limit $(ulimit -n)"
    echo
    cat "$body"
} >"$report"
rm -f "$body"
ln -sf "report-$stamp.md" target/bench/latest.md
cat "$report"
echo
echo "bench/run.sh: report written to $report (target/bench/latest.md)"
