/* A test program for issue #8 item 5 (a recording changes nothing the program does): the
 * program exits at once and leaves a forked child running, which then writes 4 MiB (python's
 * multiprocessing resource tracker and a shell's background jobs work so). The live run waits
 * for every process it started and measures the child at its exit; the recording must follow
 * the child to its end too (it stopped at the program's exit: the child's 1024 faults were
 * missing). Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <sys/mman.h>
#include <unistd.h>
int main(void) {
    int up[2];
    char x = 0;
    if (pipe(up)) return 1;
    pid_t p = fork();
    if (p < 0) return 1;
    /* The program exits once the child runs: the child's first writes after fork (its thread
     * pointer's TID, copy-on-write of a page of a large folio the two share) come before the
     * parent's exit in every run, recorded or live. */
    if (p > 0) return read(up[0], &x, 1) == 1 ? 0 : 1;
    if (write(up[1], &x, 1) != 1) return 1;
    usleep(100000);
    char *m = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 1;
    for (long i = 0; i < 4 << 20; i += 4096) m[i] = 1;
    return 0;
}
