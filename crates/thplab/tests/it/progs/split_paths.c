/* A test program for issue #8 item 2: every way a large folio becomes partially mapped or is
 * split from its PMD, on PMD THPs and mTHPs alike: mprotect through folios (VMA split, then
 * teardown at exit zaps VMA by VMA), partial munmap, MADV_DONTNEED and MADV_FREE over part of
 * folios, mremap moving part of a VMA. Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
static char *map_aligned(size_t len) {
    /* 2 MiB-aligned: over-map and trim, so the layout is the same under every setting */
    char *p = mmap(NULL, len + (2 << 20), PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)p + (2 << 20) - 1) & ~(uintptr_t)((2 << 20) - 1));
    if (a > p) munmap(p, a - p);
    munmap(a + len, (p + len + (2 << 20)) - (a + len));
    return a;
}
int main(void) {
    char *a = map_aligned(16 << 20);
    if (!a) return 1;
    memset(a, 1, 16 << 20);
    mprotect(a + (1 << 20) + 4096, 4096, PROT_READ);              /* VMA split inside folios */
    mprotect(a + (2 << 20) + 8192, 64 << 10, PROT_READ);
    munmap(a + (3 << 20) + 12288, 8192);                          /* hole in a folio */
    madvise(a + (4 << 20) + 4096, 16384, MADV_DONTNEED);          /* zap part of folios */
    madvise(a + (5 << 20) + 4096, 4096, MADV_FREE);               /* split by MADV_FREE */
    madvise(a + (6 << 20), 2 << 20, MADV_FREE);                   /* whole: lazyfree only */
    madvise(a + (8 << 20) + (1 << 20), 68 << 10, MADV_FREE);
    /* mremap part of a VMA (through a folio) to a fresh place */
    char *dst = map_aligned(4 << 20);
    char *moved = mremap(a + (10 << 20) + 4096, 1 << 20, 1 << 20, MREMAP_MAYMOVE | MREMAP_FIXED, dst + 8192);
    for (size_t i = 0; i < (16 << 20); i += 4096) {
        if (i >= (3 << 20) + 12288 && i < (3 << 20) + 20480) continue;
        if (i >= (10 << 20) + 4096 && i < (11 << 20) + 4096) continue;
        volatile char c = a[i]; (void)c;
    }
    printf("moved=%d\n", moved != MAP_FAILED);
    return 0;
}
