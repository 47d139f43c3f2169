/* A test program for issue #8 (mispredicted programs): a heap grown with brk right above a
 * bss. The ELF loader maps the bss as an anonymous VMA ending at start_brk; the first brk makes
 * the heap a VMA of its own (mm/mmap.c brk: only vma_prev_limit(start_brk) is expanded), so a
 * large folio never spans the two. The bss's last pages stay untouched: a model that merged the
 * heap into the bss would give the aligned block around start_brk a large folio, where the kernel
 * gives it smaller ones. Then the heap shrinks to nothing and grows again. Compiled by
 * crates/thplab/tests/it/programs.rs. */
#define _GNU_SOURCE
#include <unistd.h>
static char bss[300 << 10];
static void fill(char *p, long len) {
    for (long i = 0; i < len; i += 4096) p[i] = 1;
}
int main(void) {
    bss[0] = 1;
    char *start = sbrk(0);
    if (sbrk(3 << 20) == (void *)-1) return 1;
    fill(start, 3 << 20);
    if (brk(start)) return 1;
    if (sbrk(1 << 20) == (void *)-1) return 1;
    fill(start, 1 << 20);
    return bss[0] == 1 ? 0 : 1;
}
