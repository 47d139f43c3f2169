/* A test program for issue #8 (every shmem path): a System V segment. 8 MiB from shmget,
 * attached with shmat and written over 6 MiB; a forked child attaches it again read-only and
 * reads all 8 MiB (the last 2 MiB were holes: the reads allocate them); the segment stays
 * attached at exit. shmat maps the segment's file on shm_mnt with shm_vm_ops (ipc/shm.c:
 * shm_mmap), placed by shmem_get_unmapped_area: shmem_enabled decides its huge pages, the
 * per-size shmem knobs do not (they are for anonymous shmem). The replay modelled none of it
 * before (its faults passed through as 4 KiB). Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
    int id = shmget(IPC_PRIVATE, 8 << 20, IPC_CREAT | 0600);
    if (id < 0) return 1;
    char *p = shmat(id, NULL, 0);
    if (p == (void *)-1) return 2;
    for (long i = 0; i < (6 << 20); i += 4096) p[i] = 1;
    pid_t c = fork();
    if (c < 0) return 3;
    if (c == 0) {
        char *q = shmat(id, NULL, SHM_RDONLY);
        if (q == (void *)-1) return 4;
        long sum = 0;
        for (long i = 0; i < (8 << 20); i += 4096) sum += q[i];
        return sum == 1536 ? 0 : 5;
    }
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 6;
    shmctl(id, IPC_RMID, NULL);
    return 0;
}
