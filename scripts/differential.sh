#!/usr/bin/env bash
# Differential testing of the model against the live kernel: random workloads from
# `torture --emit-workload SEED`, each run by `thplab compare` under the settings the generator
# chose. Needs root and /sys/kernel/mm/transparent_hugepage (thplab's settings guard restores the
# knobs). Usage: scripts/differential.sh FIRST_SEED LAST_SEED
set -u
cd "$(dirname "$0")/.."
first=${1:-0}; last=${2:-20}
cargo build -q --release -p thplab -p torture || exit 2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0; pass=0
for seed in $(seq "$first" "$last"); do
    w="$tmp/w$seed.thpw"
    target/release/torture --emit-workload "$seed" > "$w"
    sets=$(grep '^#set ' "$w" | sed 's/^#set /--set /' | tr '\n' ' ')
    # shellcheck disable=SC2086
    if target/release/thplab compare "$w" $sets > "$tmp/out" 2>&1; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); echo "== seed $seed differs:"; grep -E 'differs|thplab:' "$tmp/out"; cp "$w" "/tmp/differential-$seed.thpw"
        echo "   workload kept in /tmp/differential-$seed.thpw"
    fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
