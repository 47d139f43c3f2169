/* A test program for issue #8 (shmem shared between processes): a memfd and a POSIX shm object
 * shared with a program started by fork + execve. The parent writes 2 of the memfd's 4 MiB
 * (mapped shared) and 1 MiB of the shm object, then runs itself again: the new program maps the
 * memfd through the descriptor it inherited across execve and reads all 4 MiB (the parent's
 * folios are found in the page cache and mapped around each fault; the rest is allocated), and
 * opens the shm object by name, reads its first MiB and writes the second. The replay gave an
 * execve'd program an empty descriptor table and its own file names, so both were new files
 * there. Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
static long touch(volatile char *p, long from, long to, int write) {
    long sum = 0;
    for (long i = from; i < to; i += 4096) {
        if (write) p[i] = 1; else sum += p[i];
    }
    return sum;
}
int main(int argc, char **argv) {
    long mb = 1 << 20;
    if (argc == 4) {
        int fd = atoi(argv[2]);
        volatile char *p = mmap(NULL, 4 * mb, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int sfd = shm_open(argv[3], O_RDWR, 0);
        if (p == MAP_FAILED || sfd < 0) return 10;
        volatile char *s = mmap(NULL, 2 * mb, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
        if (s == MAP_FAILED) return 11;
        long sum = touch(p, 0, 4 * mb, 0) + touch(s, 0, mb, 0);
        touch(s, mb, 2 * mb, 1);
        return sum == 512 + 256 ? 0 : 12;
    }
    int fd = memfd_create("exec", 0);
    if (fd < 0 || ftruncate(fd, 4 * mb) != 0) return 1;
    char name[64];
    snprintf(name, sizeof name, "/thplab-shm-exec-%d", getpid());
    int sfd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (sfd < 0 || ftruncate(sfd, 2 * mb) != 0) return 2;
    volatile char *p = mmap(NULL, 4 * mb, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    volatile char *s = mmap(NULL, 2 * mb, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    if (p == MAP_FAILED || s == MAP_FAILED) return 3;
    touch(p, 0, 2 * mb, 1);
    touch(s, 0, mb, 1);
    pid_t c = fork();
    if (c < 0) return 4;
    if (c == 0) {
        char fds[16];
        snprintf(fds, sizeof fds, "%d", fd);
        execl("/proc/self/exe", argv[0], "child", fds, name, (char *)NULL);
        _exit(13);
    }
    int st;
    int ok = waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    shm_unlink(name);
    return ok ? 0 : 5;
}
