/* A test program for model-vs-live replay (issue #4): mmaps of odd sizes, zero-page reads then
 * writes, MADV_HUGEPAGE and MADV_NOHUGEPAGE regions, partial munmap, MADV_COLLAPSE, a reverse
 * walk. Compiled by crates/thplab/tests/it/programs.rs. */
#include <sys/mman.h>
#include <string.h>
#include <stdio.h>
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
static char *map(size_t len) {
    char *p = mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
int main(void) {
    volatile char sink = 0;
    char *a = map((5 << 20) + 12288);               /* odd size */
    for (size_t i = 0; i < (5 << 20) + 12288; i += 4096) a[i] = 1;
    char *b = map(3 << 20);                          /* read (zero page) then write half */
    for (size_t i = 0; i < (3 << 20); i += 4096) sink += b[i];
    for (size_t i = 0; i < (3 << 20); i += 8192) b[i] = 2;
    char *c = map(8 << 20);
    madvise(c, 8 << 20, MADV_HUGEPAGE);
    for (size_t i = 0; i < (8 << 20); i += 65536) c[i] = 3;
    char *d = map(6 << 20);
    madvise(d + (2 << 20), 2 << 20, MADV_NOHUGEPAGE);
    for (size_t i = 0; i < (6 << 20); i += 4096) d[i] = 4;
    munmap(a + (1 << 20), 8192);                     /* partial munmap */
    munmap(d + (4 << 20) + 4096, 4096);
    char *e = map(4 << 20);
    for (size_t i = 0; i < (4 << 20); i += 16384) e[i] = 5;
    int rc = madvise(e, 4 << 20, MADV_COLLAPSE);
    for (size_t i = 0; i < (4 << 20); i += 4096) e[i] = 6;
    char *f = map(777 * 4096);                       /* another odd size, reverse */
    for (long i = 777 - 1; i >= 0; i--) f[i * 4096] = 7;
    printf("collapse=%d\n", rc);
    return 0;
}
