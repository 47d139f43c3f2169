/* A test program for issue #8 item 4 (what the kernel populates without a user fault): three
 * calls by which the kernel reaches the program's pages through GUP, on buffers never touched:
 * vmsplice of 64 KiB into a pipe (a read: zero pages), io_uring_register(IORING_REGISTER_BUFFERS)
 * of 64 KiB (pinned for write), and process_vm_writev of 64 KiB into a forked child. Their
 * iovecs are in user memory: the recorder reads them at the call's entry and the replay
 * populates them. Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <linux/io_uring.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
static char *fresh(void) {
    char *m = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}
int main(void) {
    int p[2];
    char *a = fresh(), *b = fresh(), *c = fresh();
    if (!a || !b || !c || pipe(p)) return 1;
    struct iovec v = {a, 64 << 10};
    if (vmsplice(p[1], &v, 1, 0) < 0) return 2;
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    int ring = syscall(SYS_io_uring_setup, 4, &params);
    if (ring >= 0) {
        struct iovec r = {b, 64 << 10};
        if (syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS, &r, 1) < 0) return 3;
    }
    int go[2];
    if (pipe(go)) return 1;
    pid_t child = fork();
    if (child == 0) {
        char x;
        close(go[1]);
        return read(go[0], &x, 1) == 0 ? 0 : 4; /* until the parent has written */
    }
    char src[4096];
    memset(src, 7, sizeof src);
    struct iovec l = {src, sizeof src}, rv[16];
    for (int i = 0; i < 16; i++) rv[i] = (struct iovec){c + i * 4096, 4096};
    /* The same 4 KiB to each page of the child's copy of c (untouched in both). */
    struct iovec ls[16];
    for (int i = 0; i < 16; i++) ls[i] = l;
    if (process_vm_writev(child, ls, 16, rv, 16, 0) < 0) return 5;
    close(go[1]);
    int st;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 6;
}
