/* A test program for issue #8 item 4: population without faults of file mappings, which the
 * model does not back (crates/sim/src/file_pages.rs): MADV_POPULATE_READ of a private read-only
 * mapping of a 1 MiB file after one read in it (fault-around), mlockall(MCL_CURRENT) over the
 * program's ELF, libc, ld.so, the vDSO and a private writable mapping of the file with one page
 * written (GUP writes it: a COW fault a page), and mlockall(MCL_CURRENT) in a forked child (the
 * file VMAs with an anon_vma are copied write-protected, the others not at all). The file is
 * made beside the program (argv[0] + ".data") and removed at the end. Compiled by
 * crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
int main(int argc, char **argv) {
    (void)argc;
    char path[4096];
    snprintf(path, sizeof path, "%s.data", argv[0]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 1;
    static char block[64 << 10];
    memset(block, 7, sizeof block);
    for (int i = 0; i < 16; i++)
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) return 1;
    char *heap = malloc(1 << 20);
    memset(heap, 1, 1 << 20);
    char *ro = mmap(NULL, 1 << 20, PROT_READ, MAP_PRIVATE, fd, 0);
    char *rw = mmap(NULL, 256 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (ro == MAP_FAILED || rw == MAP_FAILED) return 1;
    volatile char c = ro[5 * 4096 + 1];                 /* maps pages 0-15 (fault-around) */
    (void)c;
    if (madvise(ro, 1 << 20, MADV_POPULATE_READ)) return 1; /* 15 faults: one a 64 KiB window */
    rw[3 * 4096] = 1;                                   /* a COW fault: the VMA's anon_vma */
    if (mlockall(MCL_CURRENT)) return 1;                /* the other 63 pages of rw written */
    munlockall();
    pid_t child = fork();
    if (child == 0) {
        if (mlockall(MCL_CURRENT)) _exit(1);
        _exit(0);
    }
    int st = 0;
    waitpid(child, &st, 0);
    munmap(ro, 1 << 20);
    munmap(rw, 256 << 10);
    close(fd);
    unlink(path);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
