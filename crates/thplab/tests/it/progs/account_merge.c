/* A test program for issue #8 (mispredicted programs): VMAs that differ only in commit
 * accounting stay apart, and a large folio never spans two VMAs. A JVM reserves its heap and
 * code cache with MAP_NORESERVE and commits parts with MAP_FIXED or mprotect: a private
 * writable mapping is charged (VM_ACCOUNT) unless it is VM_NORESERVE, and mprotect charges a
 * mapping that becomes writable (mm/vma.c: accountable_mapping, mm/mprotect.c: mprotect_fixup).
 * First: 96 KiB committed with MAP_FIXED (charged) beside 1 MiB of a MAP_NORESERVE reservation
 * made writable (not charged): two VMAs, so the 64 KiB block across their boundary gets no
 * 64 KiB folio. Second: the same beside 1 MiB mapped PROT_NONE without MAP_NORESERVE, then made
 * writable (charged): one VMA. Compiled by crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/mman.h>
static void fill(char *p, long len) {
    for (long i = 0; i < len; i += 4096) p[i] = 1;
}
int main(void) {
    char *r = mmap(NULL, 8 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return 1;
    char *a = r + (2 << 20);
    if (mprotect(a + (96 << 10), 1 << 20, PROT_READ | PROT_WRITE)) return 1;
    if (mmap(a, 96 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) return 1;
    fill(a, (96 << 10) + (1 << 20));
    char *b = r + (4 << 20);
    if (mmap(b, 96 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) return 1;
    if (mmap(b + (96 << 10), 1 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) return 1;
    if (mprotect(b + (96 << 10), 1 << 20, PROT_READ | PROT_WRITE)) return 1;
    fill(b, (96 << 10) + (1 << 20));
    return 0;
}
