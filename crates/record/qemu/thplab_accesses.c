/*
 * thplab's access recorder for QEMU user-mode (`thplab record --accesses=qemu`): a TCG plugin
 * that writes the guest's data accesses as page-granular runs, and its memory system calls
 * with their results, to a file descriptor (argument `fd=N`), for crates/record/src/accesses/
 * qemu.rs to map onto the native recording. The stream (little-endian):
 *
 *   'P' u32 len, len bytes   /proc/self/maps when the first block is translated (the guest's
 *                            executable, interpreter and stack are loaded; under qemu-user on an
 *                            x86-64 host, guest addresses are host addresses)
 *   'R' u64 page, u32 count, u32 writes
 *                            `count` data accesses in a row on the 4 KiB page `page`
 *                            (address / 4096), `writes` of them stores
 *   'S' u64 nr, 6 x u64 args, i64 ret, u16 len, len bytes
 *                            a memory call (mmap, mprotect, munmap, brk, mremap, madvise)
 *                            or a call that names files by fd (open, openat, creat, close,
 *                            dup, dup2, dup3) and its result; for open, openat and creat the
 *                            path argument as the program passed it (read from the guest's
 *                            memory with process_vm_readv, which fails cleanly on a bad
 *                            pointer), so that mmaps of files are named as lackey's are
 *   'E' u64 instructions     at exit: the guest instructions executed
 *
 * A load and then a store of the same address by the same instruction (x86's read-modify-write
 * forms) are one access that writes, as valgrind lackey's `M`. Only the first process is
 * recorded: a child of fork carries the plugin on, its output is discarded (written only when
 * getpid() is the first process's). Threads: one stream, serialised by a spin lock once a
 * second vCPU exists.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qemu_plugin_api.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define BUF_BYTES (1 << 20)
#define PATH_MAX_LEN 4096
#define MAX_VCPUS 256

static int out_fd = -1;
static pid_t root_pid;
static unsigned char buf[BUF_BYTES];
static size_t used;
static uint64_t cur_page = ~0ull;
static uint32_t cur_count, cur_writes;
static void *prev_insn;
static uint64_t prev_addr;
static int prev_load;
static uint64_t instructions;
static int maps_sent;
static atomic_int vcpus;
static int multi;
static atomic_flag spin = ATOMIC_FLAG_INIT;

struct pending {
    int64_t nr;
    uint64_t args[6];
    uint16_t path_len;
    char path[PATH_MAX_LEN];
};
static struct pending pend[MAX_VCPUS];

static void lock(void) {
    if (multi)
        while (atomic_flag_test_and_set_explicit(&spin, memory_order_acquire)) {
        }
}

static void unlock(void) {
    if (multi)
        atomic_flag_clear_explicit(&spin, memory_order_release);
}

static void flush(void) {
    size_t off = 0;
    if (getpid() == root_pid)
        while (off < used) {
            ssize_t n = write(out_fd, buf + off, used - off);
            if (n <= 0)
                break;
            off += (size_t)n;
        }
    used = 0;
}

static void put(const void *p, size_t n) {
    if (used + n > BUF_BYTES)
        flush();
    if (n > BUF_BYTES) {
        return;
    }
    memcpy(buf + used, p, n);
    used += n;
}

static void emit_run(void) {
    if (cur_count == 0)
        return;
    unsigned char r[17];
    r[0] = 'R';
    memcpy(r + 1, &cur_page, 8);
    memcpy(r + 9, &cur_count, 4);
    memcpy(r + 13, &cur_writes, 4);
    put(r, sizeof r);
    cur_count = cur_writes = 0;
}

static void mem_cb(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t va, void *insn) {
    int store = qemu_plugin_mem_is_store(info);
    (void)vcpu;
    lock();
    if (store && prev_load && prev_insn == insn && prev_addr == va) {
        cur_writes++;
        prev_load = 0;
    } else {
        uint64_t page = va >> 12;
        if (page != cur_page || cur_count == UINT32_MAX) {
            emit_run();
            cur_page = page;
        }
        cur_count++;
        cur_writes += store;
        prev_load = !store;
        prev_insn = insn;
        prev_addr = va;
    }
    unlock();
}

static void send_maps(void) {
    static char maps[1 << 20];
    size_t n = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t k;
        while (n < sizeof maps && (k = read(fd, maps + n, sizeof maps - n)) > 0)
            n += (size_t)k;
        close(fd);
    }
    uint32_t len = (uint32_t)n;
    put("P", 1);
    put(&len, 4);
    put(maps, n);
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    if (!maps_sent) {
        maps_sent = 1;
        lock();
        send_maps();
        unlock();
    }
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &instructions, n);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        void *key = (void *)(uintptr_t)qemu_plugin_insn_vaddr(insn);
        qemu_plugin_register_vcpu_mem_cb(insn, mem_cb, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, key);
    }
}

static int is_traced_call(int64_t nr) {
    /* x86-64: mmap 9, mprotect 10, munmap 11, brk 12, mremap 25, madvise 28; open 2,
       openat 257, creat 85, close 3, dup 32, dup2 33, dup3 292 */
    switch (nr) {
    case 9: case 10: case 11: case 12: case 25: case 28:
    case 2: case 257: case 85: case 3: case 32: case 33: case 292:
        return 1;
    }
    return 0;
}

/* The NUL-terminated string at guest address `a` (guest addresses are host addresses). */
static uint16_t read_path(uint64_t a, char *to) {
    struct iovec local = {to, PATH_MAX_LEN - 1}, remote = {(void *)(uintptr_t)a, PATH_MAX_LEN - 1};
    ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    /* A string near the end of its mapping: read up to the page's end. */
    if (n < 0) {
        remote.iov_len = local.iov_len = 4096 - (a & 4095);
        n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    }
    if (n <= 0)
        return 0;
    to[n] = 0;
    return (uint16_t)strlen(to);
}

static void syscall_cb(qemu_plugin_id_t id, unsigned int vcpu, int64_t nr, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8) {
    (void)id;
    (void)a7;
    (void)a8;
    if (!is_traced_call(nr) || vcpu >= MAX_VCPUS)
        return;
    struct pending *p = &pend[vcpu];
    uint64_t a[6] = {a1, a2, a3, a4, a5, a6};
    p->nr = nr;
    memcpy(p->args, a, sizeof a);
    p->path_len = 0;
    if (nr == 2 || nr == 85)
        p->path_len = read_path(a1, p->path);
    else if (nr == 257)
        p->path_len = read_path(a2, p->path);
}

static void syscall_ret_cb(qemu_plugin_id_t id, unsigned int vcpu, int64_t nr, int64_t ret) {
    (void)id;
    if (!is_traced_call(nr) || vcpu >= MAX_VCPUS || pend[vcpu].nr != nr)
        return;
    struct pending *p = &pend[vcpu];
    lock();
    emit_run();
    cur_page = ~0ull;
    prev_load = 0;
    put("S", 1);
    put(&p->nr, 8);
    put(p->args, sizeof p->args);
    put(&ret, 8);
    put(&p->path_len, 2);
    put(p->path, p->path_len);
    unlock();
    p->nr = -1;
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu) {
    (void)id;
    (void)vcpu;
    if (atomic_fetch_add(&vcpus, 1) >= 1)
        multi = 1;
}

static void at_exit(qemu_plugin_id_t id, void *u) {
    (void)id;
    (void)u;
    lock();
    emit_run();
    put("E", 1);
    put(&instructions, 8);
    flush();
    unlock();
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    if (info->system_emulation)
        return -1;
    for (int i = 0; i < argc; i++)
        if (strncmp(argv[i], "fd=", 3) == 0)
            out_fd = atoi(argv[i] + 3);
    if (out_fd < 0)
        return -1;
    root_pid = getpid();
    for (int i = 0; i < MAX_VCPUS; i++)
        pend[i].nr = -1;
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, syscall_cb);
    qemu_plugin_register_vcpu_syscall_ret_cb(id, syscall_ret_cb);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
