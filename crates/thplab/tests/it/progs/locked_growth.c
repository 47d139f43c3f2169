/* A test program for issue #8 item 4: memory that becomes locked and populated without a user
 * fault after mlockall(MCL_FUTURE): a PROT_NONE reservation made writable with mprotect (glibc's
 * heaps grow so; mprotect_fixup populates a private VM_LOCKED VMA that becomes writable) and a
 * locked mapping grown with mremap, in place and moved (do_mremap populates the new part).
 * Prints the faults each step took (minflt from getrusage) on stderr. Compiled by
 * crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>
#include <sys/resource.h>
static long minflt(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_minflt;
}
int main(void) {
    if (mlockall(MCL_FUTURE)) return 1;
    char *res = mmap(NULL, 4 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) return 1;
    long a = minflt();
    if (mprotect(res, 1 << 20, PROT_READ | PROT_WRITE)) return 1;   /* populated: 256 pages */
    long b = minflt();
    char *m = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    long c = minflt();                                                /* populated at mmap: 16 */
    char *g = mremap(m, 64 << 10, 1 << 20, MREMAP_MAYMOVE);          /* the new 960 KiB: 240 */
    long d = minflt();
    if (g == MAP_FAILED) return 1;
    munmap(res + (1 << 20), 3 << 20);
    long e = minflt();
    char *h = mremap(res, 1 << 20, 2 << 20, 0);                       /* in place: 256 more */
    long f = minflt();
    if (h == MAP_FAILED) return 1;
    fprintf(stderr, "mprotect %ld mmap %ld mremap moved %ld mremap in place %ld\n", b - a, c - b, d - c, f - e);
    return 0;
}
