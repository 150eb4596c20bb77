/* A small real Linux program for the Unicorn target's ground-truth tests
   (tests/test_linux_programs.py): arguments, environment, stdin, malloc, printf,
   a file read from the sysroot and a nonzero exit status.  argv[1]: the file to
   read (/data.txt); argv[2]: how many mallocs; argv[3]: "fork", "sockets" (the
   socket calls on its descriptors), "proc" (its own /proc/self), "statfs", "sysinfo", "pid" (getpid
   and gettid), "mremap" (argv[1] mapped and grown: more than two pages, less than three), "calls" (the
   calls whose arguments --strace decodes, for tests/test_strace.py), or a system call
   number to make with no arguments (its result and errno are printed).  Built static with
   each cross compiler; its output under qemu-user is the expected one. */
#define _GNU_SOURCE /* mremap */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

char greeting[64] = "hello, world";

/* Asking a file or a pipe about its socket: ENOTSOCK; a closed descriptor: EBADF. */
static void sockets(void) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int type = 0, r;
    socklen_t tlen = sizeof type;
    errno = 0;
    r = getpeername(0, (struct sockaddr *)&sa, &len);
    printf("getpeername(0) -> %d errno=%d\n", r, errno);
    errno = 0;
    r = getsockname(1, (struct sockaddr *)&sa, &len);
    printf("getsockname(1) -> %d errno=%d\n", r, errno);
    errno = 0;
    r = getsockopt(2, SOL_SOCKET, SO_TYPE, &type, &tlen);
    printf("getsockopt(2) -> %d errno=%d\n", r, errno);
    errno = 0;
    r = getpeername(99, (struct sockaddr *)&sa, &len);
    printf("getpeername(99) -> %d errno=%d\n", r, errno);
}

/* statfs of the root and fstatfs of a file in it (the same file system), of a missing path. */
static void statfs_of_root(void) {
    struct statfs a, b;
    int fd = open("/data.txt", O_RDONLY);
    int ra = statfs("/", &a), rb = fstatfs(fd, &b);
    printf("statfs / -> %d type=%lx bsize=%ld blocks=%llu files=%llu namelen=%ld frsize=%ld fstatfs same=%d\n",
           ra, (long)a.f_type, (long)a.f_bsize, (unsigned long long)a.f_blocks, (unsigned long long)a.f_files,
           (long)a.f_namelen, (long)a.f_frsize, rb == 0 && a.f_type == b.f_type && a.f_blocks == b.f_blocks);
    errno = 0;
    ra = statfs("/missing", &a);
    printf("statfs /missing -> %d errno=%d\n", ra, errno);
    close(fd);
}

/* The name /proc/self/maps gives the mapping holding addr (its last path component). */
static void maps_name(const char *what, unsigned long addr) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512], name[256];
    unsigned long lo, hi;
    if (!f) {
        printf("%s: cannot open /proc/self/maps (errno=%d)\n", what, errno);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        name[0] = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255s", &lo, &hi, name) >= 2 && lo <= addr && addr < hi) {
            const char *base = strrchr(name, '/');
            printf("%s: %s\n", what, base ? base + 1 : name);
            fclose(f);
            return;
        }
    }
    printf("%s: not in /proc/self/maps\n", what);
    fclose(f);
}

/* A file of NUL-separated strings (cmdline, environ) into buf, each NUL made sep: 0, or -1 (buf
   empty) when it cannot be opened. */
static int read_joined(const char *path, char sep, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    if (f)
        fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!buf[i])
            buf[i] = sep;
    buf[n] = 0;
    return f ? 0 : -1;
}

/* The process's own /proc: its command line, its maps' stack and program, /proc/self's link. */
static void own_proc(void) {
    char buf[4096], link[64];
    int here = 0;
    FILE *f;
    read_joined("/proc/self/cmdline", ' ', buf, sizeof buf);
    printf("cmdline: %s\n", buf);
    maps_name("stack", (unsigned long)&here);
    maps_name("greeting", (unsigned long)greeting);
    ssize_t len = readlink("/proc/self", link, sizeof link - 1);
    printf("/proc/self is a link: %d\n", len > 0);
    /* a trailing slash follows the link: a directory; exe/ is no directory */
    struct stat st;
    errno = 0;
    len = readlink("/proc/self/", link, sizeof link - 1);
    printf("readlink /proc/self/ -> %zd errno=%d; lstat: a directory %d\n", len, errno,
           lstat("/proc/self/", &st) == 0 && S_ISDIR(st.st_mode));
    errno = 0;
    len = readlink("/proc/self/exe/", link, sizeof link - 1);
    printf("readlink /proc/self/exe/ -> %zd errno=%d\n", len, errno);
    /* /proc/self/fd/N of a directory leads into it */
    char path[64];
    int dir = open("/", O_RDONLY | O_DIRECTORY);
    snprintf(path, sizeof path, "/proc/self/fd/%d/data.txt", dir);
    f = fopen(path, "r");
    printf("through fd/%d: %s", dir, f && fgets(buf, sizeof buf, f) ? buf : "(nothing)\n");
    if (f)
        fclose(f);
    close(dir);
    /* from inside it: the working directory is the process's own /proc entry */
    if (chdir("/proc/self") == 0 && read_joined("environ", ';', buf, sizeof buf) == 0) {
        printf("environ from /proc/self as cwd: %s\n", buf);
        printf("then .. is %s\n", chdir("..") == 0 && getcwd(buf, sizeof buf) ? buf : "(failed)");
    }
}

/* The grown mapping m of the file fd (size bytes, less than span): its bytes are the file's, then
   zeros, and /proc/self/maps names its last page after the file. */
static void report_grown(const char *what, const char *m, int fd, long size, long span, long ps) {
    static char file[3 * 65536];
    long same = pread(fd, file, size, 0) == size && memcmp(m, file, size) == 0, zeros = 1;
    for (long i = size; i < span; i++)
        zeros &= m[i] == 0;
    printf("%s: the file's bytes %ld, zeros after them %ld, byte 4096 %d\n", what, same, zeros, m[4096]);
    maps_name(what, (unsigned long)m + 2 * ps);
}

/* The one-page file mapping at p grown to span bytes (MREMAP_MAYMOVE), whether it moved (where
   Linux must move it: qemu-user may move what Linux would grow in place), and report_grown's
   account of it. */
static void grow(const char *what, char *p, int fd, long size, long span, long ps, int must_move) {
    char *q = mremap(p, ps, span, MREMAP_MAYMOVE);
    if (q == MAP_FAILED) {
        printf("%s: mremap errno=%d\n", what, errno);
        return;
    }
    if (must_move)
        printf("%s: moved %d\n", what, q != p);
    report_grown(what, q, fd, size, span, ps);
}

/* mremap of a private file mapping: grown in place over pages given back, and moved (a page
   mapped right after it): the new pages must hold the file's next bytes, as Linux maps them. */
static void remap_file(const char *path) {
    long ps = sysconf(_SC_PAGESIZE), span = 3 * ps;
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 2 * ps || st.st_size >= span || span > 3 * 65536) {
        printf("mremap: %s must have more than 2 pages and less than 3\n", path);
        return;
    }
    char *p = mmap(0, span, PROT_READ, MAP_PRIVATE, fd, 0);
    munmap(p + ps, 2 * ps);
    grow("grown", p, fd, st.st_size, span, ps, 0);
    /* two anonymous pages, the file over the first: the second keeps it from growing in place */
    char *r = mmap(0, 2 * ps, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    mmap(r, ps, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0);
    grow("moved", r, fd, st.st_size, span, ps, 1);
    /* the first page of a three-page mapping grown to three: its second page is still mapped
       after it, so it moves, and goes on with the file's second page */
    grow("part", mmap(0, span, PROT_READ, MAP_PRIVATE, fd, 0), fd, st.st_size, span, ps, 1);
    close(fd);
}

static void on_usr1(int sig) { (void)sig; }

/* The calls whose arguments and results --strace decodes as strace does (tests/test_strace.py runs
   this natively under strace and compares): the stat family, access modes, open modes, mmap and
   mprotect flags, fcntl commands, ioctl requests, signals and signal sets, clone's flags, a wait
   status, socket families.  path: a readable regular file.  Prints the pids, which differ. */
static void strace_calls(const char *path) {
    struct stat st;
    struct termios tio;
    struct winsize ws;
    int fd = open(path, O_RDONLY);
    printf("pid %ld\n", (long)getpid());
    fstat(fd, &st);
    stat(path, &st);
    stat("/", &st);
    lstat("/no/such/file", &st);
    fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT);
    access(path, R_OK);
    access("/no/such/file", F_OK);
    faccessat(AT_FDCWD, path, R_OK, AT_EACCESS);
    close(open(path, O_WRONLY | O_CREAT | O_EXCL, 0600));
    close(open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 04751));
    umask(027);
    umask(022);
    char *p = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    mprotect(p, 4096, PROT_NONE);
    mprotect(p, 4096, PROT_READ | PROT_EXEC);
    munmap(p, 8192);
    munmap(mmap(0, 4096, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0), 4096);
    fcntl(fd, F_GETFD);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    fcntl(fd, F_GETFD);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    fcntl(fd, F_GETFL);
    close(fcntl(fd, F_DUPFD, 10));
    close(fcntl(fd, F_DUPFD_CLOEXEC, 0));
    ioctl(fd, TCGETS, &tio);
    ioctl(fd, TIOCGWINSZ, &ws);
    ioctl(fd, _IOC(_IOC_NONE, 0x56, 0x78, 0x1234), 0);
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGRTMIN + 2);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    sigaction(SIGUSR1, 0, &old);
    signal(SIGUSR2, SIG_IGN);
    sigset_t set, was;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, 0);
    sigprocmask(SIG_SETMASK, &set, &was);
    sigfillset(&set);
    sigprocmask(SIG_BLOCK, &set, &was);
    sigemptyset(&set);
    sigprocmask(SIG_SETMASK, &set, 0);
    kill(0, 0);
    kill(getpid(), SIGUSR2);
    kill(-1234567, SIGTERM);
    pid_t child = fork();
    if (child == 0)
        _exit(3);
    int status;
    waitpid(child, &status, 0);
    printf("child %ld\n", (long)child);
    waitpid(-1, &status, WNOHANG);
    socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socket(AF_UNIX, SOCK_DGRAM, 0);
    socket(AF_INET6, SOCK_RAW, IPPROTO_RAW);
    close(fd);
}

int main(int argc, char **argv) {
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    const char *g = getenv("GREETING");
    printf("GREETING=%s\n", g ? g : "(unset)");
    char line[256];
    size_t total = 0;
    int lines = 0;
    while (fgets(line, sizeof line, stdin)) {
        total += strlen(line);
        lines++;
    }
    printf("stdin lines=%d bytes=%zu\n", lines, total);
    int count = argc > 2 ? atoi(argv[2]) : 3;
    for (int i = 1; i <= count; i++) {
        size_t size = (size_t)i * 100 + 7;
        char *p = malloc(size);
        memset(p, 'a' + i % 26, size);
        printf("malloc %zu -> %c\n", size, p[size - 1]);
    }
    if (argc > 3) {
        if (strcmp(argv[3], "fork") == 0) {
            fflush(stdout);
            printf("fork -> %d\n", fork() >= 0);
        } else if (strcmp(argv[3], "sockets") == 0) {
            sockets();
        } else if (strcmp(argv[3], "proc") == 0) {
            own_proc();
        } else if (strcmp(argv[3], "statfs") == 0) {
            statfs_of_root();
        } else if (strcmp(argv[3], "mremap") == 0) {
            remap_file(argv[1]);
            return 42; /* argv[1] is binary: not printed */
        } else if (strcmp(argv[3], "calls") == 0) {
            strace_calls(argv[1]);
        } else if (strcmp(argv[3], "pid") == 0) {
            printf("pid %ld tid %ld\n", (long)getpid(), (long)syscall(SYS_gettid));
        } else if (strcmp(argv[3], "sysinfo") == 0) {
            struct sysinfo si;
            int r = sysinfo(&si);
            printf("sysinfo -> %d totalram=%llu freeram<=totalram=%d procs=%d uptime>0=%d\n", r,
                   (unsigned long long)si.totalram * si.mem_unit, si.freeram <= si.totalram, si.procs,
                   si.uptime > 0);
        } else {
            long r = syscall(atol(argv[3]));
            printf("syscall %s -> %ld errno=%d\n", argv[3], r, r < 0 ? errno : 0);
        }
    }
    FILE *f = fopen(argc > 1 ? argv[1] : "/data.txt", "r");
    if (!f) {
        printf("cannot open %s\n", argc > 1 ? argv[1] : "/data.txt");
        return 3;
    }
    while (fgets(line, sizeof line, f))
        printf("file: %s", line);
    fclose(f);
    return 42;
}
