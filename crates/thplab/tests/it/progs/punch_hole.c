/* A test program for issue #8 (every shmem path, partial madvise of large folios): holes
 * punched in a shared memfd of 8 MiB, mapped 2 MiB-aligned (so that every folio size the shmem
 * knobs allow is used) and written whole first: MADV_REMOVE of 1 MiB starting 12 KiB past the
 * first MiB, then written again; fallocate(PUNCH_HOLE | KEEP_SIZE) of 600 KiB starting 20 KiB
 * past 5 MiB, then read. A hole's edges fall inside large folios: truncate_inode_partial_folio
 * splits them (a non-uniform split of a shmem folio leaves the page at the edge in a folio of
 * its own, the rest in halves), the folios inside the hole are freed and their mappings
 * zapped, and the next accesses fault the hole in again. A split file folio is unmapped whole,
 * so a later access anywhere in it faults live; recorded with 4 KiB pages, which nothing
 * splits, the same access is a hit, and a recording of faults cannot see it: the program
 * touches only the holes again. Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
    long mb = 1 << 20;
    int fd = memfd_create("punch", 0);
    if (fd < 0 || ftruncate(fd, 8 * mb) != 0) return 1;
    /* Mapped 2 MiB-aligned (in a reservation), so that every folio size can be used. */
    char *r = mmap(NULL, 10 * mb, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 2;
    char *at = (char *)(((unsigned long)r + 2 * mb - 1) & ~(2 * mb - 1));
    volatile char *p = mmap(at, 8 * mb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (p == MAP_FAILED) return 2;
    for (long i = 0; i < 8 * mb; i += 4096) p[i] = 1;
    if (madvise((char *)p + mb + 12288, mb, MADV_REMOVE) != 0) return 3;
    for (long i = mb + 12288; i < 2 * mb + 12288; i += 4096) p[i] = 2;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 5 * mb + 20480, 600 << 10) != 0) return 4;
    long sum = 0;
    for (long i = mb + 12288; i < 2 * mb + 12288; i += 4096) sum += p[i];
    for (long i = 5 * mb + 20480; i < 5 * mb + 20480 + (600 << 10); i += 4096) sum += p[i];
    return sum == 2 * 256 ? 0 : 5;
}
