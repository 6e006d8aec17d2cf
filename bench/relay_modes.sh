#!/bin/sh
# bench/relay_modes.sh — what the relay's cheap modes save (issue 21, BENCHMARKS.md "Relay modes"):
# instructions inside Relay::step per relayed byte, by mode and link, from callgrind over the
# relay core's unit-test rig (`relay::tests::modes::relay_cost`, in-memory pipes, reply check
# on, 512 KiB MTProto packets down and up). Ir(N MiB) - Ir(0) over the bytes removes set-up.
# Usage: sh bench/relay_modes.sh [MIB]   (default 8). Needs valgrind. Output: a table on stdout,
# callgrind files in target/bench/relay-modes/.
set -eu
MIB=${1:-8}
cd "$(dirname "$0")/.."
BIN=$(cargo test --lib --no-run --message-format=json 2>/dev/null | python3 -c '
import sys, json
for l in sys.stdin:
    try:
        m = json.loads(l)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["lib"]:
        print(m["executable"])
' | tail -1)
OUT=target/bench/relay-modes
mkdir -p "$OUT"
ir() { # mode link mib
    f="$OUT/$1-$2-$3.out"
    TG_RELAY_COST_MODE=$1 TG_RELAY_COST_LINK=$2 TG_RELAY_COST_MIB=$3 valgrind --tool=callgrind \
        --toggle-collect='tg_ws_proxy::relay::Relay::step*' --callgrind-out-file="$f" \
        "$BIN" --ignored --exact relay::tests::modes::relay_cost >/dev/null 2>&1
    sed -n 's/^totals: //p' "$f"
}
echo "| link | mode | Ir per relayed byte (down+up) | Ir per GiB relayed |"
echo "|---|---|---|---|"
for link in raw ws; do
    for mode in reencrypt plain passthrough; do
        a=$(ir $mode $link "$MIB"); b=$(ir $mode $link 0)
        python3 -c "
bytes = 2 * $MIB * 1048576
per = ($a - $b) / bytes
print('| $link | $mode | %.2f | %.2e |' % (per, per * 2**30))"
    done
done
