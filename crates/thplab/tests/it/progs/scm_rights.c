/* A test program for issue #8 (shmem shared between the processes of a recording): a memfd
 * created after a fork and passed to the child over a unix socket (SCM_RIGHTS), as Wayland
 * clients and browsers share buffers. The parent sizes it to 8 MiB and writes its first 4 MiB;
 * the child maps what it received and writes the rest, then maps it again privately and writes
 * 1 MiB there. Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1L << 20)

static int send_fd(int sock, int fd) {
    char c = 'x';
    struct iovec io = {&c, 1};
    char buf[CMSG_SPACE(sizeof fd)];
    memset(buf, 0, sizeof buf);
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof buf};
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock) {
    char c;
    struct iovec io = {&c, 1};
    char buf[CMSG_SPACE(sizeof(int))];
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = buf, .msg_controllen = sizeof buf};
    if (recvmsg(sock, &m, 0) != 1) return -1;
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    if (!h || h->cmsg_type != SCM_RIGHTS) return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(h), sizeof fd);
    return fd;
}

int main(void) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
    pid_t child = fork();
    if (child == 0) {
        close(sv[0]);
        int fd = recv_fd(sv[1]);
        if (fd < 0) return 2;
        char *s = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (s == MAP_FAILED) return 3;
        for (long off = 4 * MIB; off < 8 * MIB; off += 4096) s[off] = 2;
        char *p = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) return 4;
        for (long off = 0; off < MIB; off += 4096) p[off] = 3;
        return 0;
    }
    close(sv[1]);
    int fd = memfd_create("passed", 0);
    if (fd < 0 || ftruncate(fd, 8 * MIB)) return 5;
    char *s = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s == MAP_FAILED) return 6;
    for (long off = 0; off < 4 * MIB; off += 4096) s[off] = 1;
    if (send_fd(sv[0], fd)) return 7;
    int st;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 8;
}
