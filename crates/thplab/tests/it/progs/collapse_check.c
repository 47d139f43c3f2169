/* A program that checks what MADV_COLLAPSE and PR_GET_THP_DISABLE return, as a program nobody
 * here wrote might: 4 MiB of 2 MiB-aligned anonymous memory, touched, then
 * madvise(MADV_COLLAPSE); on failure perror (which allocates stdio's buffers) and a marker on
 * stdout. Prints "collapse 0" or "collapse failed ERRNO" and "thp_disable N". Exit 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#ifndef PR_GET_THP_DISABLE
#define PR_GET_THP_DISABLE 42
#endif

#define MIB (1UL << 20)

int main(void)
{
	char *raw = mmap(NULL, 6 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return 2;
	char *p = (char *)(((uintptr_t)raw + 2 * MIB - 1) & ~(2 * MIB - 1));
	for (size_t i = 0; i < 4 * MIB; i += 4096)
		p[i] = 1;
	if (madvise(p, 4 * MIB, MADV_COLLAPSE) != 0) {
		int e = errno;
		perror("madvise(MADV_COLLAPSE)");
		printf("collapse failed %d\n", e);
	} else {
		printf("collapse 0\n");
	}
	printf("thp_disable %d\n", prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
	return 0;
}
