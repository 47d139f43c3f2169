/* A program that uses every shmem path the recorder and the replay know: memfd mapped with a
 * NULL hint and written page by page, MAP_SHARED|MAP_ANONYMOUS, write() in 1 MiB blocks then
 * read through a mapping, POSIX shm unlinked before mmap, pwrite + fallocate + ftruncate, dup +
 * writev, and a linked file in /dev/shm. No THP-specific calls: what it gets depends on the
 * shmem knobs alone. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#define MiB (1024UL * 1024)
static volatile char sink;

static char *map(int fd, size_t len, int prot) {
    char *p = mmap(NULL, len, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(1); }
    return p;
}

static void read_all(char *p, size_t len) {
    for (size_t i = 0; i < len; i += 4096) sink += p[i];
}

int main(void) {
    static char block[MiB];
    memset(block, 7, sizeof block);

    int a = memfd_create("a", 0);
    if (a < 0 || ftruncate(a, 32 * MiB)) { perror("memfd a"); return 1; }
    char *pa = map(a, 32 * MiB, PROT_READ | PROT_WRITE);
    for (size_t i = 0; i < 32 * MiB; i += 4096) pa[i] = 1;

    char *sa = mmap(NULL, 8 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sa == MAP_FAILED) { perror("shared anon"); return 1; }
    for (size_t i = 0; i < 8 * MiB; i += 4 * 4096) sa[i] = 1;

    int b = memfd_create("b", MFD_CLOEXEC);
    for (int i = 0; i < 4; i++)
        if (write(b, block, MiB) != (ssize_t)MiB) { perror("write b"); return 1; }
    lseek(b, 0, SEEK_SET);
    char *pb = map(b, 4 * MiB, PROT_READ);
    read_all(pb, 4 * MiB);

    char name[64];
    snprintf(name, sizeof name, "/thplab-shm-prog-%d", getpid());
    int s = shm_open(name, O_CREAT | O_RDWR | O_EXCL, 0600);
    if (s < 0 || ftruncate(s, 8 * MiB)) { perror("shm_open"); return 1; }
    shm_unlink(name);
    char *ps = map(s, 8 * MiB, PROT_READ | PROT_WRITE);
    for (size_t i = 0; i < 8 * MiB; i += 2 * 4096) ps[i] = 1;

    int c = memfd_create("c", 0);
    if (pwrite(c, block, 64 * 1024, MiB) != 64 * 1024) { perror("pwrite c"); return 1; }
    if (fallocate(c, 0, 2 * MiB, 2 * MiB)) { perror("fallocate c"); return 1; }
    if (ftruncate(c, 6 * MiB)) { perror("ftruncate c"); return 1; }
    char *pc = map(c, 6 * MiB, PROT_READ);
    read_all(pc, 6 * MiB);

    int d = dup(c);
    struct iovec iov[2] = {{block, 512 * 1024}, {block, 512 * 1024}};
    lseek(d, 6 * MiB, SEEK_SET);
    if (writev(d, iov, 2) != (ssize_t)MiB) { perror("writev"); return 1; }

    char path[96];
    snprintf(path, sizeof path, "/dev/shm/thplab-shm-prog-file-%d", getpid());
    int f = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (f < 0) { perror("open"); return 1; }
    for (int i = 0; i < 2; i++)
        if (write(f, block, MiB) != (ssize_t)MiB) { perror("write f"); return 1; }
    char *pf = map(f, 2 * MiB, PROT_READ);
    read_all(pf, 2 * MiB);
    close(f);
    unlink(path);
    printf("%d\n", sink);
    return 0;
}
