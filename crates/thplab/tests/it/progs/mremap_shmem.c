/* A test program for issue #8 (every shmem path): mremap of shmem mappings. In a 2 MiB-aligned
 * reservation, a memfd mapped shared (2 MiB) and written, grown in place to 4 MiB and the new
 * half written, then moved whole (MREMAP_FIXED) to a 2 MiB-aligned address and read: the page
 * tables move with the VMA (a PMD that maps a whole aligned 2 MiB moves as one entry), so the
 * reads are hits. Then 1 MiB of the same file mapped private and written (anonymous copies),
 * moved and grown to 2 MiB in one mremap, and its new half written. The replay turned a
 * remapped shmem VMA into a placeholder before (counted in shmem_unmodelled).
 * Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
    long mb = 1 << 20;
    int fd = memfd_create("mremap", 0);
    if (fd < 0 || ftruncate(fd, 8 * mb) != 0) return 1;
    char *r = mmap(NULL, 18 * mb, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 2;
    char *base = (char *)(((unsigned long)r + 2 * mb - 1) & ~(2 * mb - 1));
    volatile char *p = mmap(base, 2 * mb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) return 3;
    for (long i = 0; i < 2 * mb; i += 4096) p[i] = 1;
    if (munmap(base + 2 * mb, 2 * mb) != 0) return 4;
    p = mremap((char *)p, 2 * mb, 4 * mb, 0);
    if (p == MAP_FAILED) return 5;
    for (long i = 2 * mb; i < 4 * mb; i += 4096) p[i] = 2;
    p = mremap((char *)p, 4 * mb, 4 * mb, MREMAP_MAYMOVE | MREMAP_FIXED, base + 8 * mb);
    if (p == MAP_FAILED) return 6;
    long sum = 0;
    for (long i = 0; i < 4 * mb; i += 4096) sum += p[i];
    volatile char *q = mmap(base + 14 * mb, mb, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0);
    if (q == MAP_FAILED) return 7;
    for (long i = 0; i < mb; i += 4096) q[i] = 3;
    q = mremap((char *)q, mb, 2 * mb, MREMAP_MAYMOVE | MREMAP_FIXED, base + 4 * mb);
    if (q == MAP_FAILED) return 8;
    for (long i = mb; i < 2 * mb; i += 4096) q[i] = 4;
    return sum == 512 + 1024 ? 0 : 9;
}
