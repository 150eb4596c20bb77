/* Calls with the arguments issue 36 (item 10) found kpsdk answering unlike Linux: each call's
 * result, or its errno's name, one line each.  tests/test_fuzz_guest_calls.py runs it natively
 * (RLIMIT_NOFILE 1024, kpsdk's) and on kpsdk and compares the lines.  Calls go through syscall()
 * where libc would check or convert the arguments itself. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static const char *name(int e) {
    switch (e) {
    case EINVAL: return "EINVAL"; case ENOENT: return "ENOENT"; case EFAULT: return "EFAULT";
    case EBADF: return "EBADF"; case EMFILE: return "EMFILE"; case EINTR: return "EINTR";
    case ESPIPE: return "ESPIPE"; case ENOTDIR: return "ENOTDIR"; case EACCES: return "EACCES";
    default: return "E?";
    }
}

static void show(const char *what, long r) {
    if (r < 0) printf("%s = -1 %s\n", what, name(errno));
    else printf("%s = %ld\n", what, r);
    fflush(stdout);
}

struct ts { long sec, nsec; };  /* the arch's own struct timespec (old time32 on 32-bit arches) */

static void on_alarm(int sig) { (void)sig; }

int main(void) {
    char b[64];
    int fd = open("/etc/hostname", O_RDONLY);
    show("open /etc/hostname >= 0", fd >= 0 ? 0 : -1);
    show("pread64(fd, b, 10, -1)", pread64(fd, b, 10, -1));
    show("pwrite64(fd, b, 10, -1)", pwrite64(fd, b, 10, -1));
    show("pread64(fd, b, 10, LLONG_MAX - 5)", pread64(fd, b, 10, LLONG_MAX - 5));
    int cmd = open("/proc/self/cmdline", O_RDONLY);
    show("pread64(/proc/self/cmdline, b, 10, -4)", pread(cmd, b, 10, -4));
    show("pread64(/proc/self/cmdline, b, 10, 0) > 0", pread(cmd, b, 10, 0) > 0 ? 0 : -1);
    show("open(\"/proc/self/fd/\\xc2\\xb2\")", open("/proc/self/fd/\xc2\xb2", O_RDONLY));
    show("open(\"/proc/self/fd/\\xd9\\xa3\")", open("/proc/self/fd/\xd9\xa3", O_RDONLY));
    show("open(\"/proc/self/fd/+3\")", open("/proc/self/fd/+3", O_RDONLY));
    show("open(\"/proc/self/fd/ 3\")", open("/proc/self/fd/ 3", O_RDONLY));
    show("open(\"/proc/self/fd/03\") >= 0", open("/proc/self/fd/03", O_RDONLY) >= 0 ? 0 : -1);
    show("fcntl(fd, F_DUPFD, -5)", syscall(SYS_fcntl, fd, F_DUPFD, -5L));
    show("fcntl(fd, F_DUPFD, 5000)", syscall(SYS_fcntl, fd, F_DUPFD, 5000L));
    show("fcntl(fd, F_DUPFD, 1024)", syscall(SYS_fcntl, fd, F_DUPFD, 1024L));
    show("fcntl(fd, F_DUPFD_CLOEXEC, -1)", syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, -1L));
    show("fcntl(fd, F_DUPFD, 1023)", syscall(SYS_fcntl, fd, F_DUPFD, 1023L));
#ifdef SYS_stat
    show("stat(NULL)", syscall(SYS_stat, NULL, b));
#endif
#ifdef SYS_newfstatat
    show("newfstatat(AT_FDCWD, NULL, 0)", syscall(SYS_newfstatat, AT_FDCWD, NULL, b, 0));
#endif
    show("open(NULL)", syscall(SYS_openat, AT_FDCWD, NULL, O_RDONLY));
    show("readlink(NULL)", syscall(SYS_readlinkat, AT_FDCWD, NULL, b, sizeof b));
    struct ts t = {0, 1000000000L};
    show("nanosleep({0, 1e9})", syscall(SYS_nanosleep, &t, NULL));
    t.nsec = -1;
    show("nanosleep({0, -1})", syscall(SYS_nanosleep, &t, NULL));
    t.sec = -5; t.nsec = 0;
    show("nanosleep({-5, 0})", syscall(SYS_nanosleep, &t, NULL));
    show("clock_nanosleep(MONOTONIC, 0, {-5, 0})", syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &t, NULL));
    show("clock_nanosleep(MONOTONIC, ABSTIME, {-5, 0})",
         syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL));
    show("nanosleep(NULL)", syscall(SYS_nanosleep, NULL, NULL));
    signal(SIGALRM, on_alarm);
    alarm(1);
    t.sec = LONG_MAX; t.nsec = 0;
    struct ts left;
    show("nanosleep({LONG_MAX, 0}) until an alarm", syscall(SYS_nanosleep, &t, &left));
    show("rem.tv_sec > 1000", left.sec > 1000 ? 0 : -1);
    struct ts now;
#ifdef SYS_time
    show("time() > 0", syscall(SYS_time, NULL) > 0 ? 0 : -1);
#endif
    show("clock_gettime(REALTIME) > 0", syscall(SYS_clock_gettime, CLOCK_REALTIME, &now) == 0 && now.sec > 0 ? 0 : -1);
    show("lseek(fd, -1, SEEK_SET)", syscall(SYS_lseek, fd, -1L, SEEK_SET));
    show("dup2(fd, -1)", syscall(SYS_dup3, fd, -1, 0));
    show("dup3(fd, 1024, 0)", syscall(SYS_dup3, fd, 1024, 0));
    show("dup3(fd, fd, 0)", syscall(SYS_dup3, fd, fd, 0));
    show("read(fd, NULL, 10)", syscall(SYS_read, fd, NULL, 10L));
    show("read(-1, b, 10)", syscall(SYS_read, -1, b, 10L));
#if LONG_MAX > INT_MAX
    show("read(0x100000000 + fd, b, 0)", syscall(SYS_read, 0x100000000L + fd, b, 0L));
#endif
    return 0;
}
