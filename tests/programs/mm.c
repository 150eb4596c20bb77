/* The memory calls at scale and at their edges, one mode each (tests/test_linux_mm.py).
 *
 * Built statically with each cross compiler and run under kpsdk's Linux layer and natively:
 * every mode prints only what Linux decides (errno names, counts, sums), so the outputs must
 * be identical byte for byte.
 *
 * Usage: mm many N      N anonymous 4 KiB mmaps, every other one unmapped, each remaining page
 *                       written and read back; prints the pages kept and a checksum
 *        mm holes       small anonymous mappings next to each other: a page unmapped between
 *                       two faults (SEGV_MAPERR), read-only and inaccessible pages fault
 *                       (SEGV_ACCERR), a page unmapped and mapped again reads zeros, a fork's
 *                       child has copies, a page made executable keeps its bytes
 *        mm huge        mmap of 2**46 bytes refused (ENOMEM), then a normal exit
 *        mm errnos      a fixed set of mmap/munmap/mprotect/mremap/brk/madvise calls at their
 *                       edges: each one's answer (OK or the errno's name)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *answer(long r)
{
    static char buf[32];
    if (r != -1)
        return "OK";
    const char *name = strerrorname_np(errno);
    if (name == NULL) {
        snprintf(buf, sizeof buf, "errno %d", errno);
        return buf;
    }
    return name;
}

static int many(long n)
{
    long page = sysconf(_SC_PAGESIZE);
    char **p = malloc(n * sizeof *p);
    if (p == NULL)
        return 1;
    for (long i = 0; i < n; i++) {
        p[i] = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p[i] == MAP_FAILED) {
            printf("mmap %ld: %s\n", i, answer(-1));
            return 1;
        }
    }
    for (long i = 0; i < n; i += 2)
        if (munmap(p[i], 4096) != 0) {
            printf("munmap %ld: %s\n", i, answer(-1));
            return 1;
        }
    unsigned long sum = 0, kept = 0;
    for (long i = 1; i < n; i += 2) {
        p[i][i % page] = (char)i;
        p[i][0] = 1;
        kept++;
    }
    for (long i = 1; i < n; i += 2)
        sum += (unsigned char)p[i][i % page] + (unsigned char)p[i][0];
    printf("kept %lu sum %lu\n", kept, sum);
    return 0;
}

#define SHOW(what, call) printf("%s: %s\n", what, answer((long)(call)))
#define MMAP(a, l, p, f, fd, o) ((intptr_t)mmap(a, l, p, f, fd, o) == -1 ? -1 : 0)
#define MREMAP(...) ((intptr_t)mremap(__VA_ARGS__) == -1 ? -1 : 0)
#define BIG ((size_t)1 << (sizeof(size_t) == 8 ? 46 : 31))

static sigjmp_buf escape;
static volatile int fault_code;

static void on_segv(int sig, siginfo_t *info, void *context)
{
    (void)sig, (void)context;
    fault_code = info->si_code;
    siglongjmp(escape, 1);
}

/* what touching p does: "ok", SEGV_MAPERR or SEGV_ACCERR */
static const char *touch(volatile char *p, int write)
{
    fault_code = 0;
    if (sigsetjmp(escape, 1) == 0) {
        if (write)
            *p = 7;
        else
            (void)*p;
        return "ok";
    }
    return fault_code == SEGV_MAPERR ? "SEGV_MAPERR" : fault_code == SEGV_ACCERR ? "SEGV_ACCERR" : "other";
}

static int holes(void)
{
    struct sigaction sa = {0};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    char *p[6];
    for (int i = 0; i < 6; i++) {
        p[i] = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memset(p[i], 'a' + i, 4096);
    }
    munmap(p[1], 4096);
    printf("unmapped: read %s, write %s\n", touch(p[1], 0), touch(p[1], 1));
    printf("neighbours: %c %c\n", p[0][4095], p[2][0]);
    errno = 0;
    long wrote = write(1, p[1], 10);
    printf("write from it: %ld %s\n", wrote, answer(wrote));
    errno = 0;
    long got = read(open("/proc/self/exe", O_RDONLY), p[1], 10);
    printf("read into it: %ld %s\n", got, answer(got));
    mprotect(p[2], 4096, PROT_READ);
    printf("read-only: read %s, write %s\n", touch(p[2], 0), touch(p[2], 1));
    mprotect(p[3], 4096, PROT_NONE);
    printf("no access: read %s, write %s\n", touch(p[3], 0), touch(p[3], 1));
    mprotect(p[3], 4096, PROT_READ | PROT_WRITE);
    printf("given back: %c, write %s\n", p[3][10], touch(p[3], 1));
    munmap(p[4], 4096);
    char *q = mmap(p[4], 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    printf("mapped again: %s, byte %d\n", q == p[4] ? "same place" : "elsewhere", q[100]);
    mprotect(p[5], 4096, PROT_READ | PROT_EXEC);
    printf("executable: %c, write %s\n", p[5][1], touch(p[5], 1));
    mprotect(p[5], 4096, PROT_READ | PROT_WRITE);
    const char *again = touch(p[5], 1);
    printf("writable again: write %s, %d\n", again, p[5][0]);
    pid_t pid = fork();
    if (pid == 0) {
        p[0][0] = 'z';
        printf("child: %c %c, unmapped read %s\n", p[0][0], p[3][0], touch(p[1], 0));
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("parent: %c, child status %d\n", p[0][0], WEXITSTATUS(status));
    return 0;
}

static int huge(void)
{
    void *p = mmap(0, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("huge mmap: %s\n", answer(p == MAP_FAILED ? -1 : 0));
    char *q = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    printf("small mmap after it: %s\n", answer(q == MAP_FAILED ? -1 : 0));
    if (q != MAP_FAILED)
        q[0] = 1;
    char *m = malloc(1 << 20);  /* malloc's own mmap */
    printf("malloc after it: %s\n", m != NULL ? "OK" : "failed");
    free(m);
    return 0;
}


static int errnos(const char *file)
{
    int ro = open(file, O_RDONLY);
    if (ro < 0) {
        printf("open %s: %s\n", file, answer(-1));
        return 1;
    }
    /* p: two pages with an unmapped page (hole) on each side, inside a reservation of ours */
    char *r = mmap(0, 16 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *p = mmap(r + 4 * 4096, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    char *hole = p + 2 * 4096;
    munmap(p - 4096, 4096);
    munmap(hole, 4096);
    size_t huge = (size_t)-8192;  /* page-aligned, past any address space */
    SHOW("mmap length 0", MMAP(0, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    SHOW("mmap huge read-write", MMAP(0, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    SHOW("mmap length -4096", MMAP(0, (size_t)-4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    SHOW("mmap length -1", MMAP(0, (size_t)-1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    SHOW("mmap no type", MMAP(0, 4096, PROT_READ, MAP_ANONYMOUS, -1, 0));
    SHOW("mmap unaligned hint", MMAP(hole + 1, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    SHOW("mmap unaligned fixed", MMAP(hole + 1, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
    SHOW("mmap offset 1", MMAP(0, 4096, PROT_READ, MAP_PRIVATE, ro, 1));
    SHOW("mmap bad fd", MMAP(0, 4096, PROT_READ, MAP_PRIVATE, 999, 0));
    SHOW("mmap shared writable of O_RDONLY", MMAP(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0));
    SHOW("mmap private writable of O_RDONLY", MMAP(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, ro, 0));
    SHOW("munmap unaligned", munmap(p + 1, 4096));
    SHOW("munmap length 0", munmap(p, 0));
    SHOW("munmap huge", munmap(p, huge));
    SHOW("munmap unmapped", munmap(hole, 4096));
    SHOW("mprotect unaligned", mprotect(p + 1, 4096, PROT_READ));
    SHOW("mprotect length 0", mprotect(p, 0, PROT_READ));
    SHOW("mprotect bad prot", mprotect(p, 4096, 0x100));
    SHOW("mprotect bad prot, length wraps", mprotect(p, huge, 0x100));
    SHOW("mprotect into a hole", mprotect(p, 3 * 4096, PROT_READ | PROT_WRITE));
    SHOW("mprotect of a hole", mprotect(hole, 4096, PROT_READ));
    SHOW("mprotect huge", mprotect(p, huge, PROT_READ | PROT_WRITE));
    SHOW("mremap old 0", MREMAP(p, 0, 4096, MREMAP_MAYMOVE));
    SHOW("mremap new 0", MREMAP(p, 4096, 0, MREMAP_MAYMOVE));
    SHOW("mremap huge", MREMAP(p, 4096, BIG, MREMAP_MAYMOVE));
    SHOW("mremap length wraps", MREMAP(p, 4096, (size_t)-1, MREMAP_MAYMOVE));
    SHOW("mremap unaligned", MREMAP(p + 1, 4096, 8192, MREMAP_MAYMOVE));
    SHOW("mremap bad flags", MREMAP(p, 4096, 8192, 0x80));
    SHOW("mremap fixed without maymove", MREMAP(p, 4096, 4096, MREMAP_FIXED, hole));
    SHOW("mremap unmapped", MREMAP(hole, 4096, 8192, MREMAP_MAYMOVE));
    SHOW("mremap across a hole", MREMAP(p, 3 * 4096, 4 * 4096, MREMAP_MAYMOVE));
    SHOW("mremap grow without maymove", MREMAP(p, 2 * 4096, 4 * 4096, 0));
    SHOW("mremap shrink a hole", MREMAP(hole, 2 * 4096, 4096, 0));
    SHOW("madvise unaligned", madvise(p + 1, 4096, MADV_DONTNEED));
    SHOW("madvise bad advice", madvise(p, 4096, 999));
    SHOW("madvise unmapped", madvise(hole, 4096, MADV_DONTNEED));
    SHOW("madvise into a hole", madvise(p, 3 * 4096, MADV_NORMAL));
    SHOW("madvise length 0", madvise(p, 0, MADV_DONTNEED));
    SHOW("madvise length wraps", madvise(p, (size_t)-1, MADV_NORMAL));
    p[5] = 9;
    SHOW("madvise dontneed", madvise(p, 4096, MADV_DONTNEED));
    printf("after dontneed: %d\n", p[5]);
    SHOW("brk 0", syscall(SYS_brk, 0) == 0 ? -1 : 0);
    char *to = r + 10 * 4096;
    p[1] = 'm';
    char *moved = mremap(p, 4096, 2 * 4096, MREMAP_MAYMOVE | MREMAP_FIXED, to);
    printf("mremap fixed: %s, %c %d\n", moved == to ? "there" : "elsewhere", moved == MAP_FAILED ? '-' : moved[1],
           moved == MAP_FAILED ? -1 : moved[4096 + 7]);
    SHOW("the old place after it", mprotect(p, 4096, PROT_READ));
    SHOW("mremap fixed onto itself", MREMAP(to, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, to));
    SHOW("mremap fixed unaligned", MREMAP(to, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, to + 3 * 4096 + 1));
    SHOW("mremap fixed shrinking", MREMAP(to, 2 * 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, r + 13 * 4096));
    printf("after it: %c\n", r[13 * 4096 + 1]);
    /* two mappings side by side with the same permissions: one to Linux */
    char *a = mmap(r + 14 * 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    mmap(r + 15 * 4096, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    a[4096] = 'b';
    char *both = mremap(a, 2 * 4096, 3 * 4096, MREMAP_MAYMOVE);
    printf("mremap of two merged: %s %c\n", both == MAP_FAILED ? answer(-1) : "OK", both == MAP_FAILED ? '-' : both[4096]);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && strcmp(argv[1], "many") == 0)
        return many(atol(argv[2]));
    if (argc >= 2 && strcmp(argv[1], "holes") == 0)
        return holes();
    if (argc >= 2 && strcmp(argv[1], "huge") == 0)
        return huge();
    if (argc >= 3 && strcmp(argv[1], "errnos") == 0)
        return errnos(argv[2]);
    fprintf(stderr, "usage: mm many N | holes | huge | errnos FILE\n");
    return 2;
}
