/* O_DIRECT reads into an untouched buffer (issue #12): 4 MiB read from FILE in 512 KiB blocks,
 * the first half with read(2), the second with pread(2), into a 2 MiB-aligned anonymous buffer
 * the program never touches itself. The block layer pins each read's part of the buffer with
 * pin_user_pages_fast(FOLL_WRITE) (mm/gup.c), which faults in what is not mapped: those faults
 * are no page-fault exception, so only the replay's pins can predict them. Exit 77: the file
 * system refuses O_DIRECT. */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	size_t pmd = 2 << 20, len = 4 << 20, blk = 512 << 10, off;
	if (argc != 2)
		return 2;
	char *raw = mmap(NULL, len + pmd, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED)
		return 1;
	char *p = (char *)(((uintptr_t)raw + pmd - 1) & ~(uintptr_t)(pmd - 1));
	int fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0)
		return errno == EINVAL ? 77 : 1;
	for (off = 0; off < len / 2; off += blk)
		if (read(fd, p + off, blk) != (ssize_t)blk)
			return errno == EINVAL ? 77 : 1;
	for (; off < len; off += blk)
		if (pread(fd, p + off, blk, off) != (ssize_t)blk)
			return 1;
	return 0;
}
