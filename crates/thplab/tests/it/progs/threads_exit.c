/* A test program for the live harness: four threads each write their own 1 MiB of a mapping
 * and end, and the program exits 5 ms after the last has written, while they are held at their
 * exit stops (the harness holds a thread that exits alone for up to 50 ms, in case its process
 * follows). exit_group's SIGKILL wakes the held threads and they finish exiting: the process's
 * snapshot must be read through a thread that still has the mm (it was read through the first
 * held thread, a zombie by then, and the live run failed: "process N does not exist"; python's
 * multiprocessing pools did so on every run). The threads neither malloc (each would make an
 * arena, placed by the order they run) nor call pthread_exit (which loads libgcc_s to unwind).
 * Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static int done;
static void *worker(void *slice) {
    memset(slice, 1, 1 << 20);
    __atomic_add_fetch(&done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}
int main(void) {
    char *m = mmap(NULL, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 1;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, worker, m + (i << 20))) return 1;
    while (__atomic_load_n(&done, __ATOMIC_SEQ_CST) < 4) usleep(100);
    usleep(5000);
    exit(0);
}
