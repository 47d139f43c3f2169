/* A test program for issue #8 (every shmem path): MAP_PRIVATE of a shmem file. A memfd of 8 MiB
 * (on shm_mnt: shmem_enabled decides its huge pages) mapped MAP_PRIVATE: the first 2 MiB read
 * (do_read_fault: fault-around maps page-cache folios read-only, a PMD folio by a PMD), the next
 * 2 MiB written (do_cow_fault: the page cache folio is allocated, an order-0 anonymous copy is
 * mapped), every 4th page of the first MiB written after it was read (wp_page_copy; a PMD-mapped
 * file folio is split first: a file PMD is zapped, and the fault goes on as do_cow_fault), then
 * a forked child reads 2 MiB the parent never touched (fresh page-cache folios) and writes 64
 * pages the parent had written (copy-on-write of the anonymous copies, which the fork copied
 * with the file's read-only PTEs: the VMA has an anon_vma). Nothing reads a page again after a
 * setting may have unmapped it: such a read hits in the recording (4 KiB pages stay mapped)
 * and faults live under PMD THP (the split zapped the PMD), and a recording of faults cannot
 * see it.
 * Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    int fd = memfd_create("private", 0);
    if (fd < 0 || ftruncate(fd, 8 << 20) != 0) return 1;
    volatile char *p = mmap(NULL, 8 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return 2;
    long sum = 0;
    for (long i = 0; i < (2 << 20); i += 4096) sum += p[i];
    for (long i = 2 << 20; i < (4 << 20); i += 4096) p[i] = 1;
    for (long i = 0; i < (1 << 20); i += 4 * 4096) p[i] = 2;
    pid_t c = fork();
    if (c < 0) return 3;
    if (c == 0) {
        for (long i = 4 << 20; i < (6 << 20); i += 4096) sum += p[i];
        for (long i = 2 << 20; i < (2 << 20) + 64 * 4096; i += 4096) p[i] = 3;
        return sum == 0 ? 0 : 4;
    }
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 5;
    return sum == 0 ? 0 : 6;
}
