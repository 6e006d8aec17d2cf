#!/bin/sh
# bench/freeze.sh — what `make bench-freeze` runs: the "16 KB freeze" (docs/design.md §4 rule 7
# and §8) against the real binary, both forms × the three client behaviours, 20 attempts each
# 2 s apart (examples/bench_freeze.rs). With OLD=PATH (an older tg-ws-proxy build) the same
# matrix runs against it too, for a before/after table. The kernel form needs `unshare -rn`,
# `ip` and `nft` (it runs in a network namespace of its own: loopback only). About 15 minutes per
# binary. Writes target/bench/freeze-<stamp>.md and prints it; proxy logs in
# target/bench/freeze/. Touches nothing outside target/.
#
# Extra arguments go to the driver, e.g. `bench/freeze.sh --attempts 6 --gap 0.5`.
set -eu
cd "$(dirname "$0")/.."

cargo build --release --locked --bin tg-ws-proxy
cargo build --release --locked --example bench_freeze

mkdir -p target/bench/freeze
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report="target/bench/freeze-$stamp.md"
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')
{
    echo "## Freeze bench run $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- command: \`make bench-freeze\` (= \`bench/freeze.sh$( [ $# -gt 0 ] && printf ' %s' "$@")\`)$( [ -n "${OLD:-}" ] && printf ', OLD=%s' "$OLD")"
    echo "- tree: $rev ($dirty uncommitted paths), $(rustc -V); nproc $(nproc)"
    echo
    echo "| binary | form | client | completed | hung on the frozen front | ended ≤ 10 s after their last byte | Worker upgrades |"
    echo "|---|---|---|---|---:|---|---:|"
} >"$report"
for pair in "target/release/tg-ws-proxy|this tree" ${OLD:+"$OLD|before ($OLD)"}; do
    bin=${pair%%|*}
    label=${pair#*|}
    for form in middlebox kernel; do
        for client in give-up once re-ask; do
            if ! target/release/examples/bench_freeze --proxy "$bin" --ca tests/data/ca.pem \
                --form "$form" --client "$client" --label "$label" "$@" \
                2>>target/bench/freeze/driver.log >>"$report"; then
                echo "| $label | $form | $client | FAILED: see target/bench/freeze/driver.log | | | |" >>"$report"
            fi
        done
    done
done
cat "$report"
echo
echo "bench/freeze.sh: report written to $report"
