/* A test program for issue #8 item 5: opens a path whose string lies alone in a page of its
 * read-only data that nothing touched before (64 KiB from any other data, so no fault-around
 * maps it), so that the kernel's read of the path (getname) is the page's first access: a
 * kernel read fault. Compiled by crates/thplab/tests/it/programs.rs. */
#include <fcntl.h>
#include <unistd.h>
static const char before[128 << 10] __attribute__((aligned(65536))) = {1};
static const char path[] __attribute__((aligned(65536))) = "/nonexistent/thplab-path-page";
static const char after[128 << 10] __attribute__((aligned(65536))) = {1};
int main(int argc, char **argv) {
    (void)argv;
    int fd = open(path, O_RDONLY);
    if (fd >= 0) close(fd);
    /* Keep the arrays (argc is 1: nothing is read from them). */
    return argc > 1 ? before[argc] + after[argc] : 0;
}
