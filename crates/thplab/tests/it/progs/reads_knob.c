/* A test program for issue #8 item 3 (a recording changes nothing the program does): it reads
 * /sys/kernel/mm/transparent_hugepage/enabled and chooses by it, as HotSpot does with
 * -XX:+UseTransparentHugePages: when THP can be had it maps 6 MiB with MADV_HUGEPAGE, else
 * 3 MiB, and writes all of it. One recording cannot predict both: `compare --record` records it
 * again under each setting whose `enabled` differs from the recorded one. Compiled by
 * crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
    char buf[64] = {0};
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY);
    if (fd < 0 || read(fd, buf, sizeof buf - 1) <= 0) return 1;
    close(fd);
    int never = strstr(buf, "[never]") != NULL;
    size_t len = never ? 3 << 20 : 6 << 20;
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 1;
    if (!never) madvise(m, len, MADV_HUGEPAGE);
    for (size_t i = 0; i < len; i += 4096) m[i] = 1;
    return 0;
}
