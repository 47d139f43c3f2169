/* A test program for issue #8 item 4 (what the kernel populates without a user fault):
 * userfaultfd. Pages of a registered range are filled by the program itself with UFFDIO_COPY and
 * UFFDIO_ZEROPAGE, not by the fault path, and a registered VMA takes no mTHP and no PMD THP at
 * fault. Three 4 MiB ranges, 2 MiB aligned, MADV_HUGEPAGE:
 *   a: MODE_MISSING, a handler thread answers each fault: a write with UFFDIO_COPY of 16 KiB
 *      (the faulting page and the three after it), a read with UFFDIO_ZEROPAGE of 4 KiB. The
 *      main thread writes the first 3 MiB every 8 KiB and reads the last MiB every 64 KiB.
 *   b: MODE_MISSING, filled ahead by the main thread (UFFDIO_COPY of 256 KiB at 1 MiB, then
 *      UFFDIO_ZEROPAGE of 64 KiB after it), then written page by page over its first 2 MiB
 *      (those beyond the copies fault to the handler), then unregistered: its second 2 MiB is
 *      written as plain memory.
 *   c: MODE_WP only: faults are the kernel's own (no THP below PMD size, PMD THP allowed).
 * Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MIB (1UL << 20)
static int uffd;
static char src[256 << 10];
static volatile int done;

static char *range(void) {
    char *m = mmap(NULL, 6 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char *a = (char *)(((uintptr_t)m + 2 * MIB - 1) & ~(2 * MIB - 1));
    madvise(a, 4 * MIB, MADV_HUGEPAGE);
    return a;
}

static int reg(char *p, unsigned long len, unsigned long mode) {
    struct uffdio_register r = {.range = {(unsigned long)p, len}, .mode = mode};
    return ioctl(uffd, UFFDIO_REGISTER, &r);
}

static void copy(unsigned long dst, unsigned long len) {
    struct uffdio_copy c = {.dst = dst, .src = (unsigned long)src, .len = len};
    ioctl(uffd, UFFDIO_COPY, &c);
}

static void zero(unsigned long dst, unsigned long len) {
    struct uffdio_zeropage z = {.range = {dst, len}};
    ioctl(uffd, UFFDIO_ZEROPAGE, &z);
}

static void *handler(void *arg) {
    (void)arg;
    while (!done) {
        struct pollfd p = {uffd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        struct uffd_msg m;
        if (read(uffd, &m, sizeof m) != sizeof m || m.event != UFFD_EVENT_PAGEFAULT) continue;
        unsigned long at = m.arg.pagefault.address & ~4095UL;
        if (m.arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE)
            copy(at, 16 << 10); /* EEXIST past a page already there: the kernel fills up to it */
        else
            zero(at, 4096);
    }
    return NULL;
}

int main(void) {
    memset(src, 7, sizeof src);
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (uffd < 0) return 1;
    struct uffdio_api api = {.api = UFFD_API};
    if (ioctl(uffd, UFFDIO_API, &api)) return 2;
    char *a = range(), *b = range(), *c = range();
    if (!a || !b || !c) return 3;
    if (reg(a, 4 * MIB, UFFDIO_REGISTER_MODE_MISSING) || reg(b, 4 * MIB, UFFDIO_REGISTER_MODE_MISSING)) return 4;
    if (reg(c, 4 * MIB, UFFDIO_REGISTER_MODE_WP)) return 5;
    pthread_t t;
    if (pthread_create(&t, NULL, handler, NULL)) return 6;
    for (unsigned long off = 0; off < 3 * MIB; off += 8192) a[off] = 1;
    for (unsigned long off = 3 * MIB; off < 4 * MIB; off += 64 << 10) (void)*(volatile char *)(a + off);
    copy((unsigned long)b + MIB, 256 << 10);
    zero((unsigned long)b + MIB + (256 << 10), 64 << 10);
    for (unsigned long off = 0; off < 2 * MIB; off += 4096) b[off] = 1;
    struct uffdio_range un = {(unsigned long)b, 4 * MIB};
    if (ioctl(uffd, UFFDIO_UNREGISTER, &un)) return 7;
    for (unsigned long off = 2 * MIB; off < 4 * MIB; off += 4096) b[off] = 1;
    for (unsigned long off = 0; off < 4 * MIB; off += 4096) c[off] = 1;
    done = 1;
    pthread_join(t, NULL);
    return 0;
}
