/* A test program for issue #8 (every shmem path): a shmem file shrunk over cached pages. A memfd
 * of 8 MiB, mapped shared and private, both 2 MiB-aligned (in reservations, so that every folio
 * size the shmem knobs allow is used); the shared mapping written whole, 64 KiB at 6 MiB of the
 * private one written (anonymous copies); then ftruncate to 5 MiB + 20 KiB: shmem_setattr
 * unmaps what lies beyond from every mapping, the private copies too (even_cows), and
 * shmem_truncate_range splits the folio across the new end there (non-uniform, pieces beyond
 * EOF dropped) and frees the folios beyond it. Grown again to 8 MiB, the last 2 MiB are written
 * through the shared mapping (new folios) and the 64 KiB read through the private one (the
 * file's pages, read-only). Nothing below the new end is touched again: a split file folio is
 * unmapped whole, so such an access faults live but hits in a recording with 4 KiB pages.
 * Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
static char *aligned_map(long len, int flags, int fd) {
    long two = 2 << 20;
    char *r = mmap(NULL, len + two, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return MAP_FAILED;
    char *at = (char *)(((unsigned long)r + two - 1) & ~(two - 1));
    return mmap(at, len, PROT_READ | PROT_WRITE, flags | MAP_FIXED, fd, 0);
}
int main(void) {
    long mb = 1 << 20;
    int fd = memfd_create("shrink", 0);
    if (fd < 0 || ftruncate(fd, 8 * mb) != 0) return 1;
    volatile char *p = (volatile char *)aligned_map(8 * mb, MAP_SHARED, fd);
    volatile char *q = (volatile char *)aligned_map(8 * mb, MAP_PRIVATE, fd);
    if (p == MAP_FAILED || q == MAP_FAILED) return 2;
    for (long i = 0; i < 8 * mb; i += 4096) p[i] = 1;
    for (long i = 6 * mb; i < 6 * mb + 65536; i += 4096) q[i] = 2;
    if (ftruncate(fd, 5 * mb + 20480) != 0 || ftruncate(fd, 8 * mb) != 0) return 3;
    for (long i = 6 * mb; i < 8 * mb; i += 4096) p[i] = 3;
    long sum = 0;
    for (long i = 6 * mb; i < 6 * mb + 65536; i += 4096) sum += q[i];
    return sum == 16 * 3 ? 0 : 4;
}
