#!/usr/bin/env bash
# fuzz/run.sh — what `make fuzz` and CI run: builds the cargo-fuzz targets (libFuzzer, release
# with debug assertions and overflow checks, no sanitizer: see README.md "Fuzzing") and runs each
# in turn for FUZZ_SECS seconds (default 60), or FUZZ_RUNS executions when that is set, starting
# from the committed seeds (fuzz/corpus/<target>/, read only) plus the growing local corpus
# (fuzz/work/<target>/, not committed). Any crash, panic, failed invariant, timeout or OOM fails
# the run; its input is left in fuzz/artifacts/<target>/. Prints (and writes to
# fuzz/work/summary-<UTC stamp>.md) executions, exec/s, coverage and corpus size per target.
#
#   fuzz/run.sh                 every target, FUZZ_SECS each
#   fuzz/run.sh framing ws_link only these
#   fuzz/run.sh seeds           regenerate fuzz/corpus/ from examples/seeds.rs
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). Builds with the stable toolchain (no
# -Z flag is needed without a sanitizer). Touches only fuzz/ (target/, work/, artifacts/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

TARGETS=(obfs2_init framing ws_frame ws_link ws_upgrade dns_reply res_pq faketls_hello proxy_header tls_record)
SECS=${FUZZ_SECS:-60}
RUNS=${FUZZ_RUNS:-}
# Same options for every target and run, so the numbers compare: inputs up to 4 KiB, a 10 s
# per-input timeout (a hang is a failure), libFuzzer's default 2 GiB RSS limit.
OPTS=(-max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
BUILD=(-O -a -s none)

if [ "${1:-}" = seeds ]; then
    cargo run --locked --example seeds
    find corpus -type f | sort | xargs ls -l
    exit 0
fi
if [ $# -gt 0 ]; then TARGETS=("$@"); fi

command -v cargo-fuzz >/dev/null || {
    echo "fuzz/run.sh: cargo-fuzz missing: cargo install cargo-fuzz --locked" >&2
    exit 1
}

cargo fuzz build "${BUILD[@]}" >&2

stamp=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p work/logs
summary=work/summary-$stamp.md
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | wc -l | tr -d ' ')
{
    echo "## Fuzz run $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- tree $rev ($dirty uncommitted paths), $(rustc -V), cargo-fuzz $(cargo fuzz --version 2>/dev/null | awk '{print $2}'), build \`cargo fuzz build ${BUILD[*]}\`"
    if [ -n "$RUNS" ]; then limit="-runs=$RUNS"; else limit="-max_total_time=$SECS"; fi
    echo "- per target: \`cargo fuzz run ${BUILD[*]} T work/T corpus/T -- $limit ${OPTS[*]}\`; nproc $(nproc), nice $(nice), load average at the start $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| target | executions | exec/s | cov | ft | corpus (units/bytes) | seconds | result |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|"
} >"$summary"

failed=0
for t in "${TARGETS[@]}"; do
    mkdir -p "work/$t" "artifacts/$t"
    log=work/logs/$t-$stamp.log
    if [ -n "$RUNS" ]; then limit=(-runs="$RUNS"); else limit=(-max_total_time="$SECS"); fi
    echo "fuzz/run.sh: $t (${limit[*]})" >&2
    t0=$SECONDS
    rc=0
    cargo fuzz run "${BUILD[@]}" "$t" "work/$t" "corpus/$t" -- "${limit[@]}" "${OPTS[@]}" \
        -artifact_prefix="artifacts/$t/" >"$log" 2>&1 || rc=$?
    secs=$((SECONDS - t0))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    # The last status line: "#N DONE cov: C ft: F corp: U/SIZE ..." (or the last pulse).
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$last")
    if [ "$rc" -eq 0 ] && [ -z "$(ls -A "artifacts/$t")" ]; then
        result=ok
    else
        result="**FAILED** (exit $rc; see $log, artifacts/$t/)"
        failed=1
        grep -E 'panicked|ERROR|SUMMARY' "$log" | head -5 >&2 || true
    fi
    echo "| $t | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $secs | $result |" >>"$summary"
done
echo >>"$summary"
cat "$summary"
echo "fuzz/run.sh: summary in fuzz/$summary, logs in fuzz/work/logs/" >&2
exit "$failed"
