/* The recorder's test program (crates/record/tests/record.rs). Writes what it did to the file
 * named by argv[1], one "name value" per line, so the test can check the recording against it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
#define MiB (1024 * 1024)

static void *thread_main(void *arg) {
    char *t = arg;
    for (int i = 0; i < 8; i++) t[i * PAGE] = 1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    FILE *out = fopen(argv[1], "w");
    if (!out) return 2;
    /* The recorder answers PR_GET_THP_DISABLE as without its own flag (0); the kernel's view of
     * the flag is in /proc/self/status. */
    fprintf(out, "thp_disable %d\n", prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
    FILE *status = fopen("/proc/self/status", "r");
    char line[256];
    while (status && fgets(line, sizeof line, status)) {
        int v;
        if (sscanf(line, "THP_enabled: %d", &v) == 1)
            fprintf(out, "thp_enabled %d\n", v);
    }
    if (status)
        fclose(status);
    fprintf(out, "no_randomize %d\n", (personality(0xffffffff) & ADDR_NO_RANDOMIZE) != 0);
    fflush(out);

    char *a = mmap(NULL, 1 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return 2;
    for (int i = 0; i < 256; i++) a[i * PAGE] = 1;

    char *b = mmap(NULL, 3 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return 2;
    volatile char sum = 0;
    for (int i = 0; i < 768; i++) sum += b[i * PAGE];

    int um = munmap(b + 1 * MiB, 1 * MiB);
    int ma = madvise(a, 1 * MiB, MADV_HUGEPAGE);

    char *t = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) return 2;
    fprintf(out, "a %p\nb %p\nt %p\nmunmap %d\nmadvise %d\n", (void *)a, (void *)b, (void *)t, um, ma);
    fflush(out);

    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 5; i++) a[i * PAGE] = 2;
        _exit(7);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    fprintf(out, "child %d\nchild_status %d\n", (int)pid, WEXITSTATUS(st));
    fflush(out);

    pthread_t th;
    if (pthread_create(&th, NULL, thread_main, t) != 0) return 2;
    pthread_join(th, NULL);
    fprintf(out, "done 1\n");
    fclose(out);
    puts("prog: stdout passes through");
    return 3;
}
