/* A test program for issue #8 item 4: memory populated without user faults (get_user_pages):
 * MAP_POPULATE, MADV_POPULATE_WRITE and _READ after MADV_HUGEPAGE, mlock, mlock2(MLOCK_ONFAULT),
 * MAP_LOCKED, mlockall(MCL_FUTURE | MCL_ONFAULT) then mmap and brk. Compiled by
 * crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MCL_ONFAULT
#define MCL_ONFAULT 4
#endif
#ifndef MLOCK_ONFAULT
#define MLOCK_ONFAULT 1
#endif
static char *map(size_t len, int extra) {
    char *p = mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS|extra, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
int main(void) {
    size_t len = 8 << 20;
    char *a = map(len, MAP_POPULATE);                              /* populated at mmap */
    char *b = map(len, 0);
    madvise(b, len, MADV_HUGEPAGE);
    madvise(b, len, MADV_POPULATE_WRITE);
    char *c = map(len, 0);
    madvise(c, len, MADV_HUGEPAGE);
    madvise(c, len, MADV_POPULATE_READ);                           /* zero pages, then written */
    char *d = map(len, 0);
    mlock(d, len);
    char *e = map(len, 0);
    mlock2(e, len, MLOCK_ONFAULT);                                 /* locked, not populated */
    char *f = map(3 << 20, MAP_LOCKED);
    mlockall(MCL_FUTURE | MCL_ONFAULT);                            /* later maps: locked on fault */
    char *g = map(len, 0);
    munlockall();
    for (size_t i = 0; i < len; i += 4096) a[i] = b[i] = c[i] = d[i] = e[i] = g[i] = 1;
    for (size_t i = 0; i < (3 << 20); i += 4096) f[i] = 1;
    printf("ok\n");
    return 0;
}
