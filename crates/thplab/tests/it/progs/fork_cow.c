/* A server that snapshots itself by fork, as Redis BGSAVE does (issue #9): it fills 32 MiB,
 * forks a saver that reads everything, writes 8 MiB while the saver lives (each write copies
 * a page the saver still maps; a THP's PMD is split first), lets the saver write its last
 * 4 MiB and exit, then writes 8 MiB more (its own pages again: reused, not copied). A pipe
 * orders the two processes, so every run has the same interleaving.
 *
 * Each write is followed by a load fence (FENCE): without it the CPU runs the loop ahead of a
 * write that waits to fault on a write-protected PMD and caches read-only translations of the
 * next pages, and once that fault has made the PMD writable (x86 flushes nothing then), a VM
 * whose host backs it with 4 KiB pages takes spurious faults on them: 3 to 14 more per reused
 * PMD on the test machine, a property of the CPU and the host, not of the kernel's rule that
 * the test judges (see store_page_byte in crates/live/src/executor/sys.rs). */
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__x86_64__)
#define FENCE() __asm__ volatile("lfence" ::: "memory")
#else
#define FENCE() __asm__ volatile("" ::: "memory")
#endif

int main(void)
{
	size_t len = 32 << 20, i;
	int go[2];
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char c = 0;
	if (p == MAP_FAILED || pipe(go))
		return 1;
	for (i = 0; i < len; i += 4096) {
		p[i] = 1;
		FENCE();
	}
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		volatile long sum = 0;
		for (i = 0; i < len; i += 4096)
			sum += p[i];
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		for (i = 28 << 20; i < len; i += 4096) {
			p[i] = 2;
			FENCE();
		}
		_exit(0);
	}
	for (i = 0; i < (8 << 20); i += 16384) {
		p[i] = 3;
		FENCE();
	}
	if (write(go[1], &c, 1) != 1)
		return 1;
	int st;
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
		return 1;
	for (i = 8 << 20; i < (16 << 20); i += 16384) {
		p[i] = 4;
		FENCE();
	}
	return 0;
}
