/* A test program for `thplab record --accesses` (issue #11 item 5): maps 8 MiB and stores one
 * byte into each 4 KiB page of it, three passes, then unmaps it: 3 x 2048 stores to that
 * mapping and nothing else (the pointer is volatile, the loop counters live in registers).
 * Compiled by crates/thplab/tests/it/accesses.rs. */
#include <sys/mman.h>
#include <stddef.h>
int main(void) {
    size_t len = 8 << 20;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 1;
    volatile char *p = m;
    for (int pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < len; i += 4096)
            p[i] = (char)pass;
    munmap(m, len);
    return 0;
}
