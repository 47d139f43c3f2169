/*
 * observe_target: a process with a known folio layout, for benches/observe_10g.sh.
 *
 *   observe_target REGION...        REGION = KIND:MiB[:PUNCH_KB]
 *
 * KIND is
 *   thp    MADV_HUGEPAGE, then written (PMD-mapped 2 MiB THPs when enabled=madvise)
 *   plain  written with no advice (4 KiB pages when enabled=madvise, per-size knobs never;
 *          mTHPs of the sizes whose knob is "always" while it faults)
 *
 * Before faulting region N it prints "wait N" and waits for a line on stdin (the caller sets
 * the knobs, through thplab's settings guard); after, it prints "done N" and waits for
 * another line (the caller restores them) before going on.
 *
 * Every region is its own VMA, 2 MiB-aligned, with a PROT_NONE 2 MiB gap between regions
 * (so neighbouring regions never merge). Every page is written once, in address order.
 * With PUNCH_KB, after the region is written, the last 4 KiB page of every PUNCH_KB block
 * is dropped with MADV_DONTNEED (leaving partially mapped folios when PUNCH_KB is the folio
 * size), and the region gets MADV_NOHUGEPAGE first so khugepaged does not collapse it again.
 *
 * Prints "ready" and the address range of each region (one "region N KIND START END" line)
 * on stdout when done, then sleeps until killed.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE (4096UL)
#define PMD (2UL << 20)
#define MAX_REGIONS 64

struct region {
    char kind[16];
    unsigned long size;
    unsigned long punch;
    char *addr;
};

static void die(const char *what)
{
    perror(what);
    exit(1);
}

int main(int argc, char **argv)
{
    struct region r[MAX_REGIONS];
    int n = argc - 1;
    if (n < 1 || n > MAX_REGIONS) {
        fprintf(stderr, "usage: %s KIND:MiB[:PUNCH_KB]...\n", argv[0]);
        return 2;
    }
    unsigned long total = PMD; /* slack for aligning the base */
    for (int i = 0; i < n; i++) {
        unsigned long mib = 0, punch = 0;
        memset(r[i].kind, 0, sizeof r[i].kind);
        if (sscanf(argv[i + 1], "%15[a-z]:%lu:%lu", r[i].kind, &mib, &punch) < 2 || mib == 0) {
            fprintf(stderr, "bad region '%s'\n", argv[i + 1]);
            return 2;
        }
        if (strcmp(r[i].kind, "thp") && strcmp(r[i].kind, "plain")) {
            fprintf(stderr, "bad kind '%s'\n", r[i].kind);
            return 2;
        }
        r[i].size = mib << 20;
        r[i].punch = punch << 10;
        total += r[i].size + PMD;
    }
    char *res = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED)
        die("mmap reserve");
    char *p = (char *)(((uintptr_t)res + PMD - 1) & ~(PMD - 1));
    for (int i = 0; i < n; i++) {
        r[i].addr = mmap(p, r[i].size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (r[i].addr == MAP_FAILED)
            die("mmap region");
        if (!strcmp(r[i].kind, "thp") && madvise(r[i].addr, r[i].size, MADV_HUGEPAGE))
            die("madvise(MADV_HUGEPAGE)");
        p += r[i].size + PMD;
    }
    for (int i = 0; i < n; i++) {
        char line[64];
        printf("wait %d\n", i);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 3;
        for (unsigned long off = 0; off < r[i].size; off += PAGE)
            r[i].addr[off] = 1;
        if (r[i].punch) {
            if (madvise(r[i].addr, r[i].size, MADV_NOHUGEPAGE))
                die("madvise(MADV_NOHUGEPAGE)");
            for (unsigned long off = r[i].punch - PAGE; off < r[i].size; off += r[i].punch)
                if (madvise(r[i].addr + off, PAGE, MADV_DONTNEED))
                    die("madvise(MADV_DONTNEED)");
        }
        printf("done %d\n", i);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin))
            return 3;
    }
    for (int i = 0; i < n; i++)
        printf("region %d %s %lx %lx\n", i, r[i].kind, (unsigned long)r[i].addr,
               (unsigned long)r[i].addr + r[i].size);
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
