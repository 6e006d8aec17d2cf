#!/usr/bin/env bash
# cross/bench.sh — the measuring half of `make cross-bench` (`cross/build.sh bench TARGET` builds
# the three binaries, then runs this). Owns: the qemu-user CPU comparison of the proxy built the
# shipped way against the crypto floor built at opt-level 3, both running on TARGET under qemu
# in the same run, and the ws tier with `--tls-cipher aes-gcm` against `chacha20`. Must not
# touch: sources, the host target/ dir (it only runs the bench driver built there), anything
# outside $OUT.
#
# Usage: cross/bench.sh TARGET QEMU PROXY_BIN CRYPTO_BIN DRIVER OUT [SHIPPED_CRYPTO_BIN]
#   TARGET      e.g. mips-unknown-linux-musl (only named in the report)
#   QEMU        e.g. qemu-mips-static
#   PROXY_BIN   the TARGET release binary (shipped profile)
#   CRYPTO_BIN  examples/cross_crypto.rs built for TARGET at opt-level 3
#   DRIVER      the host bench driver (target/release/examples/bench)
#   OUT         directory for the wrappers, driver reports and the final report (report.md)
#   SHIPPED_CRYPTO_BIN  optional: the same example built with the release profile as shipped,
#               measured alongside (what the crypto costs inside the proxy as built)
# Environment (optional):
#   CROSS_BENCH_MIB    MiB per crypto floor measurement            (default 32)
#   CROSS_BENCH_GIB    GiB per proxy transfer (bench driver --gib) (default 0.05: the driver
#                      gives a transfer 60 s, and the ws tier with AES-GCM runs ~2 MiB/s here)
#
# How it measures: every number is user + sys CPU of a process running under qemu-user, read on
# the host (bash `time` for the floor, /proc/PID/stat by the bench driver for the proxy: the qemu
# wrapper `exec`s, so the PID it watches is the emulated proxy). The floor is measured before and
# after the proxy runs and averaged, and the two ciphers' proxy runs alternate (A B A B), so load
# from other work on the machine hits both sides.
# qemu time is not router time: compare the ratios, not the seconds.
set -euo pipefail

[ $# -eq 6 ] || [ $# -eq 7 ] || {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}
TARGET=$1 QEMU=$2 PROXY_BIN=$3 CRYPTO_BIN=$4 DRIVER=$5 OUT=$6 SHIPPED_BIN="${7:-}"
MIB="${CROSS_BENCH_MIB:-32}"
GIB="${CROSS_BENCH_GIB:-0.05}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT" # cross_crypto reads tests/data/ca.pem; the driver gets tests/data/ca.pem
mkdir -p "$OUT"

log() { printf '[cross-bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    printf '[cross-bench] ERROR: %s\n' "$*" >&2
    exit 1
}
for f in "$PROXY_BIN" "$CRYPTO_BIN" "$DRIVER"; do [ -x "$f" ] || die "$f missing"; done
command -v "$QEMU" >/dev/null 2>&1 || die "$QEMU not found; run: cross/build.sh install"

# cpu_s CMD...: runs CMD (stdout to $OUT/last.out), prints its user + sys CPU seconds.
cpu_s() {
    local t
    t="$({ TIMEFORMAT='%U %S'; time "$@" >"$OUT/last.out" 2>"$OUT/last.err"; } 2>&1)" ||
        die "$* failed: $(cat "$OUT/last.err")"
    awk '{printf "%.3f", $1 + $2}' <<<"$t"
}

# floor: CPU seconds of each crypto pass under qemu, appended to FLOOR[name] (averaged later);
# with SHIPPED_BIN also the same passes as built with the shipped profile (FLOOR[ship-name]).
declare -A FLOOR
floor() {
    local s bin pre c
    for bin in "$CRYPTO_BIN" ${SHIPPED_BIN:+"$SHIPPED_BIN"}; do
        pre=""
        [ "$bin" = "$CRYPTO_BIN" ] || pre="ship-"
        s="$(cpu_s "$QEMU" "$bin" ctr "$MIB")"
        FLOOR[${pre}ctr]="${FLOOR[${pre}ctr]:-} $s"
        log "${pre}floor: 2 x AES-256-CTR over $MIB MiB: $s s ($(cat "$OUT/last.out"))"
        for c in aes-gcm chacha20; do
            s="$(cpu_s "$QEMU" "$bin" tls "$c" "$MIB")"
            FLOOR[$pre$c]="${FLOOR[$pre$c]:-} $s"
            log "${pre}floor: TLS seal + open, $c, over $MIB MiB: $s s ($(cat "$OUT/last.out"))"
        done
    done
}

# avg_per_gib "S1 S2 ..." DIVISOR: mean seconds scaled to one GiB (MIB MiB measured; DIVISOR 2
# turns seal + open into one side).
avg_per_gib() {
    awk -v mib="$MIB" -v d="$2" '{s = 0; for (i = 1; i <= NF; i++) s += $i; printf "%.2f", s / NF / d * 1024 / mib}' <<<"$1"
}

# The bench driver's cpu table row for TIER, download direction, in REPORT:
# "proxy_s_per_gib user_plus_sys MiB_per_s". Columns are found by their header names, so new
# columns in the driver's table do not shift what is read.
row() {
    awk -F'|' -v tier="$2" '
        /^\| run \| tier \|/ {
            for (i = 1; i <= NF; i++) { h = $i; gsub(/^ +| +$/, "", h); col[h] = i }
            next
        }
        ("tier" in col) {
            t = $col["tier"]; gsub(/ /, "", t); d = $col["direction"]; gsub(/ /, "", d)
            if (t == tier && d == "download") {
                s = $col["proxy s/GiB"]; gsub(/ /, "", s)
                u = $col["proxy user + sys"]; gsub(/^ +| +$/, "", u)
                m = $col["MiB/s"]; gsub(/ /, "", m)
                print s "|" u "|" m; exit
            }
        }' "$1"
}

log "$TARGET under $QEMU: floor before"
floor
declare -A WS TCP
for round in 1 2; do
    for c in aes-gcm chacha20; do
        w="$OUT/proxy-$c.sh"
        printf '#!/bin/sh\n# the proxy under qemu with --tls-cipher %s (TG_TLS_CIPHER; exec keeps the PID)\nTG_TLS_CIPHER=%s exec %s %s "$@"\n' \
            "$c" "$c" "$QEMU" "$PROXY_BIN" >"$w"
        chmod 755 "$w"
        r="$OUT/driver-$c-$round"
        log "round $round, proxy --tls-cipher $c: bench driver --only cpu --gib $GIB (ws, then tcp)"
        BENCH_CLK_TCK=$(getconf CLK_TCK) "$DRIVER" --proxy "$w" --ca tests/data/ca.pem \
            --only cpu --reps 1 --streams 1 --gib "$GIB" --out "$r.md" >"$r.log" 2>&1 ||
            die "bench driver failed with $w: $(tail -20 "$r.log")"
        ws="$(row "$r.md" ws)" tcp="$(row "$r.md" tcp)"
        [ -n "$ws" ] && [ -n "$tcp" ] || die "no cpu rows in $r.md"
        WS[$c]="${WS[$c]:-}${WS[$c]:+; }$ws"
        TCP[$c]="${TCP[$c]:-}${TCP[$c]:+; }$tcp"
        log "  ws: $ws   tcp: $tcp   (s/GiB | user + sys | MiB/s)"
    done
done
log "floor after"
floor

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
sum() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a + b}'; }
# mean_s "x|..; y|..": mean of the first field of each sample.
mean_s() { tr ';' '\n' <<<"$1" | awk -F'|' '{s += $1; n++} END {printf "%.2f", s / n}'; }
ctr="$(avg_per_gib "${FLOOR[ctr]}" 1)"
tls_aes="$(avg_per_gib "${FLOOR[aes-gcm]}" 2)"
tls_cha="$(avg_per_gib "${FLOOR[chacha20]}" 2)"
ws_aes="$(mean_s "${WS[aes-gcm]}")" ws_cha="$(mean_s "${WS[chacha20]}")"
tcp="$(mean_s "${TCP[aes-gcm]}; ${TCP[chacha20]}")"

{
    echo "## Cross bench: $TARGET under $QEMU, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "- command: \`make cross-bench\` (\`cross/build.sh bench $TARGET\`), CROSS_BENCH_MIB=$MIB, CROSS_BENCH_GIB=$GIB"
    echo "- tree: $(git rev-parse --short HEAD 2>/dev/null || echo unknown) ($(git status --porcelain 2>/dev/null | wc -l | tr -d ' ') uncommitted paths); $("$QEMU" --version | sed -n 1p)"
    echo "- proxy: the release profile as shipped; floor: examples/cross_crypto.rs at opt-level 3; both $TARGET under qemu-user"
    echo "- CPU = user + sys of the emulated process, per GiB relayed (proxy, mean of 2 runs per cipher, 4 for tcp) or processed (floor, mean of a run before and one after the proxy runs); nproc $(nproc), load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| measurement | s/GiB | ratio |"
    echo "|---|---:|---:|"
    echo "| floor: 2 × AES-256-CTR (aes 0.8 + ctr 0.9, opt 3) | $ctr | — |"
    echo "| floor: one TLS side, AES-256-GCM (ring, opt 3) | $tls_aes | — |"
    echo "| floor: one TLS side, ChaCha20-Poly1305 (ring, opt 3) | $tls_cha | — |"
    if [ -n "$SHIPPED_BIN" ]; then
        echo "| as shipped: 2 × AES-256-CTR | $(avg_per_gib "${FLOOR[ship-ctr]}" 1) | — |"
        echo "| as shipped: one TLS side, AES-256-GCM | $(avg_per_gib "${FLOOR[ship-aes-gcm]}" 2) | — |"
        echo "| as shipped: one TLS side, ChaCha20-Poly1305 | $(avg_per_gib "${FLOOR[ship-chacha20]}" 2) | — |"
    fi
    echo "| proxy, tcp tier / 2 × CTR floor | $tcp | $(ratio "$tcp" "$ctr") |"
    echo "| proxy, ws tier, \`--tls-cipher aes-gcm\` / (2 × CTR + AES-GCM side) | $ws_aes | $(ratio "$ws_aes" "$(sum "$ctr" "$tls_aes")") |"
    echo "| proxy, ws tier, \`--tls-cipher chacha20\` / (2 × CTR + ChaCha20 side) | $ws_cha | $(ratio "$ws_cha" "$(sum "$ctr" "$tls_cha")") |"
    echo "| ws tier: aes-gcm / chacha20 | — | $(ratio "$ws_aes" "$ws_cha") |"
    echo "| TLS side alone (floor): AES-GCM / ChaCha20 | — | $(ratio "$tls_aes" "$tls_cha") |"
    echo
    echo "Proxy runs (s/GiB | user + sys | MiB/s): ws aes-gcm ${WS[aes-gcm]}; ws chacha20 ${WS[chacha20]}; tcp ${TCP[aes-gcm]}; ${TCP[chacha20]}."
    echo "Floor samples (CPU s per $MIB MiB, before and after):"
    for k in ctr aes-gcm chacha20 ship-ctr ship-aes-gcm ship-chacha20; do
        [ -z "${FLOOR[$k]:-}" ] || echo "$k${FLOOR[$k]};"
    done
    echo "The driver reports (with their host-side baselines, which are not the target's) are in $OUT."
} >"$OUT/report.md"
cat "$OUT/report.md"
