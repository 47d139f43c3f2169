/* khugepaged during a program (issue #10): four 2 MiB ranges half filled with 4 KiB pages
 * (MADV_NOHUGEPAGE while faulting), then made eligible with MADV_HUGEPAGE, then 1.5 s of sleep
 * in which khugepaged (scan_sleep_millisecs=100 in the test) collapses them into PMD THPs. The
 * replay sees the collapses only when its clock follows the recording's timestamps. */
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>

int main(void)
{
	size_t pmd = 2 << 20, len = 4 * pmd, r, i;
	char *raw = mmap(NULL, len + pmd, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return 1;
	char *p = (char *)(((uintptr_t)raw + pmd - 1) & ~(uintptr_t)(pmd - 1));
	if (madvise(p, len, MADV_NOHUGEPAGE))
		return 1;
	for (r = 0; r < 4; r++)
		for (i = 0; i < pmd / 2; i += 4096)
			p[r * pmd + i] = 1;
	if (madvise(p, len, MADV_HUGEPAGE))
		return 1;
	struct timespec ts = { 1, 500000000 };
	nanosleep(&ts, NULL);
	return 0;
}
