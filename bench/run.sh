#!/bin/sh
# bench/run.sh — what `make bench` runs: builds the release binary and the bench driver
# (examples/bench.rs), raises the open-file limit for 500 relaying sessions and 1,000 arriving
# ones, runs every docs/design.md §8 resource measurement and the issue 6 burst once against the
# fake Telegram DC on loopback, and writes a Markdown report to target/bench/ (also printed) and
# the burst runs' proxy logs to target/bench/burst/<stamp>/. Touches nothing outside target/;
# results that go into BENCHMARKS.md are copied there by hand, with their interpretation.
#
# Extra arguments go to the driver, e.g. `bench/run.sh --large 200 --gib 0.5` for a quick run,
# `bench/run.sh --only burst --burst-ref` for the burst alone (what `make bench-burst` runs).
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

cargo build --release --bin tg-ws-proxy
cargo build --release --example bench

mkdir -p target/bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report="target/bench/report-$stamp.md"
body="target/bench/.body-$stamp.md"

BENCH_CLK_TCK=$(getconf CLK_TCK) target/release/examples/bench \
    --proxy target/release/tg-ws-proxy --ca tests/data/ca.pem \
    --burst-logs "target/bench/burst/$stamp" --out "$body" "$@" >/dev/null

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')
{
    echo "## Bench run $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- command: \`bench/run.sh$( [ $# -gt 0 ] && printf ' %s' "$@")\` (\`make bench\` runs it with \$BENCH_ARGS, \`make bench-burst\` with \`--only burst --burst-ref\`), release profile"
    echo "- tree: $rev ($dirty uncommitted paths), $(rustc -V)"
    echo "- nproc $(nproc), open-file limit $(ulimit -n), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
    echo
    cat "$body"
} >"$report"
rm -f "$body"
ln -sf "report-$stamp.md" target/bench/latest.md
cat "$report"
echo
echo "bench/run.sh: report written to $report (target/bench/latest.md)"
