#!/usr/bin/env bash
# observe_10g.sh: wall time of `thplab observe --pid P` (table and --json) on a process that
# maps 10 GiB of private anonymous memory with a known mix of folio sizes.
#
#   crates/live/benches/observe_10g.sh            (as root; from anywhere)
#
# Environment:
#   THPLAB    thplab binary (default: <workspace>/target/release/thplab, built if missing)
#   RUNS      timed runs per mode (default 10, after 1 untimed warm-up run)
#   LAYOUT    regions, KIND:MiB[:PUNCH_KB][@KNOB=VALUE] (see observe_target.c; KNOB is held
#             through `thplab __hold` while the region faults; default below, 10 GiB)
#   THPMAPS   path of the kernel's tools/mm/thpmaps (python3 + numpy); when set, it is run
#             once on the same process (--rollup) and timed, for comparison
#   KEEP=1    do not kill the target at the end; print its pid and wait for Enter first
#
# The target (observe_target.c, compiled with cc into a temp dir) faults its regions in
# order. The default layout, on the machine's default knobs (enabled=madvise, per-size
# knobs never except hugepages-2048kB=inherit):
#   0 thp:4096        4 GiB MADV_HUGEPAGE        -> 2048 PMD-mapped 2048kB folios
#   1 plain:2048      2 GiB no advice            -> 524288 4kB folios
#   2 plain:2048@hugepages-64kB/enabled=always   -> 32768 64kB folios
#   3 plain:512:256@hugepages-256kB/enabled=always, last 4 KiB of every 256 KiB dropped
#                                                -> 2048 partially mapped 256kB folios
#   4 plain:512@hugepages-16kB/enabled=always    -> 32768 16kB folios
#   5 thp:1024:2048   1 GiB MADV_HUGEPAGE, last 4 KiB of every 2 MiB dropped
#                                                -> 512 PTE-mapped, partially mapped 2048kB folios
# Every region faults while a `thplab __hold` of ours holds the settings guard (its flock
# keeps other thplab runs from changing knobs meanwhile): with the region's @KNOB, or
# enabled=madvise (the default, normally no write) when it has none. The holder is stopped
# (SIGTERM: the guard restores) before the next region starts; folios keep their size.
# Knobs are changed ONLY through the guard. The script checks at the end that the THP sysfs
# knobs read as they did at the start. mTHP allocations can fall back to smaller sizes
# when memory is fragmented, so the counts are the expected ones, not guaranteed.
#
# Prints: the observe table (one sample), then min / median / max wall time per mode and
# the census time the JSON reports (census_ms); with THPMAPS, thpmaps' time and a table of
# thplab's folio counts per size next to thpmaps' (kB converted to folios) with agreement.
# Whatever happens, the target and any holder are killed on exit (trap).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ws=$(cd "$here/../../.." && pwd)
THPLAB=${THPLAB:-$ws/target/release/thplab}
RUNS=${RUNS:-10}
LAYOUT=${LAYOUT:-"thp:4096 plain:2048 plain:2048@hugepages-64kB/enabled=always
    plain:512:256@hugepages-256kB/enabled=always plain:512@hugepages-16kB/enabled=always
    thp:1024:2048"}
# Split LAYOUT into the target's arguments and the knob held for each region.
regions=()
region_knobs=()
for r in $LAYOUT; do
    regions+=("${r%%@*}")
    if [[ $r == *@* ]]; then region_knobs+=("${r#*@}"); else region_knobs+=("enabled=madvise"); fi
done

[ "$(id -u)" = 0 ] || { echo "observe_10g.sh: needs root (pagemap PFNs, kpageflags, THP knobs)" >&2; exit 1; }
if [ ! -x "$THPLAB" ]; then
    (cd "$ws" && cargo build --release -p thplab)
fi

tmp=$(mktemp -d /tmp/observe_10g.XXXXXX)
holder=""
knobs() { grep -r . /sys/kernel/mm/transparent_hugepage | grep -v -e /stats/ -e khugepaged/pages_collapsed -e khugepaged/full_scans | sort; }
knobs > "$tmp/knobs.before"

cleanup() {
    set +e
    if [ -n "$holder" ]; then kill -TERM "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; fi
    if [ -n "${TGT_PID:-}" ]; then kill -KILL "$TGT_PID" 2>/dev/null; wait "$TGT_PID" 2>/dev/null; fi
    knobs > "$tmp/knobs.after"
    if diff -u "$tmp/knobs.before" "$tmp/knobs.after" >&2; then
        echo "THP knobs: as found at the start"
    else
        echo "observe_10g.sh: THP knobs differ from the start (diff above)" >&2
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cc -O2 -Wall -o "$tmp/observe_target" "$here/observe_target.c"

coproc TGT { exec "$tmp/observe_target" "${regions[@]}"; }
pid=$TGT_PID
t_fault=$(date +%s%N)
while read -r -u "${TGT[0]}" word rest; do
    case $word in
    wait)
        knob=${region_knobs[$rest]}
        : > "$tmp/hold.out"
        "$THPLAB" __hold "$knob" > "$tmp/hold.out" &
        holder=$!
        until grep -q '^held' "$tmp/hold.out"; do
            kill -0 "$holder" 2>/dev/null || { echo "thplab __hold $knob failed" >&2; exit 1; }
            sleep 0.05
        done
        echo go >&"${TGT[1]}"
        read -r -u "${TGT[0]}" done_word _ && [ "$done_word" = done ]
        kill -TERM "$holder"
        wait "$holder" || true
        holder=""
        echo go >&"${TGT[1]}"
        echo "region $rest faulted holding $knob"
        ;;
    region) echo "region $rest" ;;
    ready) break ;;
    esac
done
t_ready=$(date +%s%N)
echo "target pid $pid ready: $(awk '/^VmRSS/ {print $2, $3}' /proc/$pid/status) resident, faulted in $(( (t_ready - t_fault) / 1000000 )) ms"
echo

"$THPLAB" observe --pid "$pid"
echo

# stats FILE LABEL: min / median / max of the numbers (ms) in FILE.
stats() {
    sort -n "$1" | awk -v l="$2" '{ v[NR] = $1 } END {
        med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
        printf "%-24s n=%-3d min %8.1f ms  median %8.1f ms  max %8.1f ms\n", l, NR, v[1], med, v[NR] }'
}
# ms CMD...: run CMD (stdout to $tmp/out), print its wall time in ms.
ms() {
    local t0 t1
    t0=$(date +%s%N)
    "$@" > "$tmp/out"
    t1=$(date +%s%N)
    awk -v d=$((t1 - t0)) 'BEGIN { printf "%.3f\n", d / 1e6 }'
}

# One untimed warm-up of each mode, then RUNS rounds, the two modes interleaved (so that
# other load on the machine hits both alike).
"$THPLAB" observe --pid "$pid" > /dev/null
"$THPLAB" observe --pid "$pid" --json > /dev/null
for _ in $(seq "$RUNS"); do
    ms "$THPLAB" observe --pid "$pid" >> "$tmp/t_table"
    ms "$THPLAB" observe --pid "$pid" --json >> "$tmp/t_json"
    grep -o '"census_ms":[0-9.]*' "$tmp/out" | cut -d: -f2 >> "$tmp/t_census"
done
cp "$tmp/out" "$tmp/observe.json"
echo "wall time of thplab observe, $RUNS runs each, interleaved:"
stats "$tmp/t_table" "observe"
stats "$tmp/t_json" "observe --json"
stats "$tmp/t_census" "  census_ms (from JSON)"

if [ -n "${THPMAPS:-}" ]; then
    # thpmaps counts kB per class; a folio of S kB that is fully and contiguously mapped
    # counts S kB in pmd-aligned-S (PMD-mapped) or pte-aligned-S / pte-unaligned-S (by PTEs),
    # a partially mapped one counts its mapped kB in pte-partial. So thplab's (folios -
    # partially_mapped - pmd_mapped) x S must equal pte-aligned-S + pte-unaligned-S, and
    # pmd_mapped x S pmd-aligned-S (anon + file each time; thpmaps ignores 4kB and 8kB).
    # This holds for the layout here, where no folio straddles a VMA boundary: thpmaps looks
    # at each VMA alone, so a folio mapped across two VMAs (e.g. after an mprotect of part of
    # a THP) is pte-partial in both there, while thplab sees it fully mapped (in the VMA of
    # its first page).
    ms python3 "$THPMAPS" --pid "$pid" --rollup --inc-empty > "$tmp/t_thpmaps"
    cp "$tmp/out" "$tmp/thpmaps.out"
    stats "$tmp/t_thpmaps" "thpmaps --rollup (once)"
    echo
    python3 - "$tmp/observe.json" "$tmp/thpmaps.out" <<'PY'
import json, re, sys
obs = json.load(open(sys.argv[1]))["total"]["sizes"]
tm = {}
for line in open(sys.argv[2]):
    m = re.match(r"(anon|file)-thp-(pmd|pte)-(aligned|unaligned|partial)(?:-(\d+)kB)?:\s+(\d+) kB", line)
    if m:
        key = (m[2], m[3], int(m[4]) if m[4] else None)
        tm[key] = tm.get(key, 0) + int(m[5])
sizes = sorted({int(k[:-2]) for k in obs} | {k[2] for k in tm if k[2]})
ok = True
print(f"{'size':>8} {'thplab folios':>13} {'pmd':>7} {'pte full':>9} {'partial':>8} | "
      f"{'thpmaps pmd':>11} {'pte-aligned':>11} {'unaligned':>10}  agree")
for s in sizes:
    e = obs.get(f"{s}kB", {})
    fol, pmd, part = e.get("folios", 0), e.get("pmd_mapped", 0), e.get("partially_mapped", 0)
    full = fol - pmd - part
    t_pmd = tm.get(("pmd", "aligned", s), 0)
    t_al, t_un = tm.get(("pte", "aligned", s), 0), tm.get(("pte", "unaligned", s), 0)
    if s < 16:
        agree = "n/a (thpmaps skips < 16kB)"
    else:
        good = pmd * s == t_pmd and full * s == t_al + t_un
        ok &= good
        agree = "yes" if good else "NO"
    print(f"{s:>6}kB {fol:>13} {pmd:>7} {full:>9} {part:>8} | "
          f"{t_pmd // s:>11} {t_al // s:>11} {t_un // s:>10}  {agree}")
t_part = tm.get(("pte", "partial", None), 0)
n_part = sum(e.get("partially_mapped", 0) for e in obs.values())
print(f"partially mapped: thplab {n_part} folios; thpmaps pte-partial {t_part} kB mapped")
print("thplab and thpmaps agree" if ok else "thplab and thpmaps DISAGREE")
PY
fi

if [ "${KEEP:-0}" = 1 ]; then
    echo "KEEP=1: target pid $pid; press Enter to kill it"
    read -r _
fi
