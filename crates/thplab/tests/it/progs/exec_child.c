/* Started many times by a shell script (tests/it/programs.rs: exec snapshots at every execve):
 * each run maps and writes anonymous memory that the kernel places top-down from this image's
 * own mmap_base, below its own ld.so and libc, which only its exec snapshot tells the replay. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(void)
{
	/* 4 MiB: a multiple of the PMD size, so the kernel aligns it (mm/huge_memory.c:
	 * thp_get_unmapped_area_vmflags) and it takes PMD THPs under PMD always. */
	size_t len = 4 << 20;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	for (size_t i = 0; i < len; i += 4096)
		p[i] = 1;
	/* Above glibc's mmap threshold (128 KiB): another anonymous mmap. */
	char *q = malloc(300000);
	if (!q)
		return 1;
	memset(q, 2, 300000);
	/* Below it: the heap (brk). */
	char *r = malloc(60000);
	if (!r)
		return 1;
	memset(r, 3, 60000);
	return 0;
}
