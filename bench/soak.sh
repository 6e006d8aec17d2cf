#!/bin/sh
# bench/soak.sh — what `make bench-soak` runs: builds the release binary and the bench driver
# (examples/bench.rs, at opt-level 3 in target/bench-o3, as bench/run.sh does), raises the
# open-file soft limit to 8192, and runs the driver's soak scenario (examples/bench/soak.rs):
# 1,000 held sessions and 20 new sessions per second for 30 minutes against the fake Telegram DC
# on loopback, the proxy's fds and RSS sampled every 30 s. Writes target/bench/soak-<stamp>.md
# (target/bench/soak-latest.md points at it) and prints it. Touches nothing outside target/
# (and a control socket in the temp dir). Exits 1 if any session was taken for frozen or a route
# was left suspect or down (the held sessions are idle sessions with pings: rule 7's soak).
#
# Extra arguments go to the driver, e.g. a quick check:
#   bench/soak.sh --soak-secs 120 --soak-held 100 --soak-interval 10
set -eu
cd "$(dirname "$0")/.."

# 1,000 held sessions: the proxy's default --max-connections is (limit - 32) / 3, and this
# process holds each client plus the fake front's 2 descriptors per upstream (~3,000 + churn).
want=8192
cur=$(ulimit -n)
if [ "$cur" != unlimited ] && [ "$cur" -lt "$want" ]; then
    hard=$(ulimit -H -n)
    if [ "$hard" = unlimited ] || [ "$hard" -ge "$want" ]; then
        ulimit -n "$want"
    else
        ulimit -n "$hard"
        echo "bench/soak.sh: open-file hard limit is $hard (< $want); 1,000 sessions may not fit" >&2
    fi
fi

cargo build --release --locked --bin tg-ws-proxy
bench_dir=target/bench-o3
CARGO_PROFILE_RELEASE_OPT_LEVEL=3 cargo build --release --locked --example bench --target-dir "$bench_dir" \
    --config 'profile.release.package."*".opt-level = 3'

mkdir -p target/bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)
report="target/bench/soak-$stamp.md"
body="target/bench/.soak-body-$stamp.md"
start=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
# The tree the binaries were just built from (a 30-minute run may end on a later commit).
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')

BENCH_CLK_TCK=$(getconf CLK_TCK) "$bench_dir"/release/examples/bench \
    --proxy target/release/tg-ws-proxy --ca tests/data/ca.pem --only soak --out "$body" "$@" >/dev/null

{
    echo "## Soak run $start – $(date -u '+%H:%M:%S UTC')"
    echo
    echo "- command: \`bench/soak.sh$( [ $# -gt 0 ] && printf ' %s' "$@")\` (\`make bench-soak\` runs it with \$BENCH_ARGS), release profile"
    echo "- tree at the build: $rev ($dirty uncommitted paths), $(rustc -V); driver built at opt-level 3 in $bench_dir"
    echo "- nproc $(nproc), open-file limit $(ulimit -n), nice $(nice), load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
    echo
    cat "$body"
} >"$report"
rm -f "$body"
ln -sf "soak-$stamp.md" target/bench/soak-latest.md
cat "$report"
echo
echo "bench/soak.sh: report written to $report (target/bench/soak-latest.md)"
# The assertion of docs/design.md §4 rule 7: no quiet session taken for frozen, no route left
# suspect or down by it.
if ! grep -q 'sessions taken for frozen: \*\*0\*\*; DC 2 routes left suspect or down: \*\*0\*\*' "$report"; then
    echo "bench/soak.sh: SOAK ASSERTION FAILED: sessions were taken for frozen or routes left (see the report)" >&2
    exit 1
fi
