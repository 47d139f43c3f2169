#!/usr/bin/env bash
# Recording overhead: wall time of a program run plainly and under the recorder
# (thplab-record-helper, the same code as `thplab record`), median of N runs each, interleaved.
# The plain run also has THP disabled and no address randomisation (helper --plain), so the two
# differ only by the recording.
#   crates/record/benches/overhead.sh [N]        (needs root or perf_event_paranoid <= -1, cc)
# Prints one line per program: plain median, recorded median, slowdown, events, lost, bytes/event.
set -euo pipefail
N=${1:-5}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
cargo build --release -q -p record
HELPER=$ROOT/target/release/thplab-record-helper
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -O1 -pthread -o "$TMP/prog" crates/record/tests/prog.c
cat > "$TMP/touch.c" <<'C'
/* 1 GiB of anonymous memory written page by page: the fastest fault rate a program reaches. */
#include <sys/mman.h>
int main(void) {
    unsigned long len = 1UL << 30;
    char *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    for (unsigned long i = 0; i < len; i += 4096) p[i] = 1;
    return 0;
}
C
cc -O2 -o "$TMP/touch" "$TMP/touch.c"
PY=$(command -v pyenv >/dev/null 2>&1 && pyenv which python3 || command -v python3)

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

bench() {
    local name=$1; shift
    : > "$TMP/plain"; : > "$TMP/rec"
    for _ in $(seq "$N"); do
        local t0 t1
        t0=$(now); "$HELPER" --plain "$@" "$TMP/out.txt" > /dev/null 2>&1 || true; t1=$(now)
        echo "$t1 - $t0" | bc -l >> "$TMP/plain"
        t0=$(now); "$HELPER" "$TMP/t.thpt" "$@" "$TMP/out.txt" > /dev/null 2> "$TMP/err" || true; t1=$(now)
        echo "$t1 - $t0" | bc -l >> "$TMP/rec"
    done
    local p r
    p=$(median < "$TMP/plain"); r=$(median < "$TMP/rec")
    printf '%-28s plain %8.3f s  recorded %8.3f s  slowdown %5.2fx  %s\n' "$name" "$p" "$r" "$(echo "$r / $p" | bc -l)" "$(sed 's/^record: //' "$TMP/err" | tail -1)"
}

bench "C test program" "$TMP/prog"
bench "1 GiB page by page" "$TMP/touch"
bench "python3 dict 3M" "$PY" -c 'import sys; d={i:i for i in range(3_000_000)}'
