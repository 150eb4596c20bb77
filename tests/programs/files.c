/* The file calls, each with its result or errno name: run natively, under qemu-user and on
 * kpsdk's Linux layer, the lines must be the same.  argv[1] is a directory to work in (it
 * makes "area" there and works inside it, with relative paths); nothing printed depends on the
 * file system's own numbers (inodes, devices, block counts, directory order, times not set). */
#define _GNU_SOURCE
#define _FILE_OFFSET_BITS 64  /* 32-bit arches: readdir64, stat64 (qemu-user gives the host's 64-bit cookies) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static const char *ename(int e) {
    switch (e) {
#define E(x) case x: return #x;
    E(EPERM) E(ENOENT) E(EIO) E(ENXIO) E(EBADF) E(EAGAIN) E(EACCES) E(EFAULT) E(EBUSY) E(EEXIST) E(EXDEV)
    E(ENODEV) E(ENOTDIR) E(EISDIR) E(EINVAL) E(EMFILE) E(ENOSPC) E(ESPIPE) E(EROFS) E(EMLINK) E(EPIPE)
    E(ENAMETOOLONG) E(ENOTEMPTY) E(ELOOP) E(ENODATA) E(EOPNOTSUPP) E(EOVERFLOW) E(ENOSYS) E(ERANGE)
#undef E
    default: return "E?";
    }
}

/* one call: its label and result, or -1 and the errno's name */
static long show(const char *label, long r) {
    if (r < 0)
        printf("%s -> -1 %s\n", label, ename(errno));
    else
        printf("%s -> %ld\n", label, r);
    return r;
}
#define T(expr) show(#expr, (long)(expr))

static const char *kind(mode_t m) {
    return S_ISREG(m) ? "reg" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "lnk" : S_ISFIFO(m) ? "fifo"
         : S_ISCHR(m) ? "chr" : S_ISBLK(m) ? "blk" : S_ISSOCK(m) ? "sock" : "?";
}

static void st(const char *path, int follow) {
    struct stat s;
    int r = follow ? stat(path, &s) : lstat(path, &s);
    if (r < 0) {
        printf("  %sstat %s: %s\n", follow ? "" : "l", path, ename(errno));
        return;
    }
    /* a directory's size is its file system's own (4096 on ext4, 40 + 20 per entry on tmpfs) */
    printf("  %sstat %s: %s %04o nlink=%lu size=%lld blocks_ok=%d mine=%d\n", follow ? "" : "l", path,
           kind(s.st_mode), (unsigned)(s.st_mode & 07777), (unsigned long)s.st_nlink,
           S_ISDIR(s.st_mode) ? -1LL : (long long)s.st_size,
           (long long)s.st_blocks * 512 >= (long long)s.st_size, s.st_uid == getuid() && s.st_gid == getgid());
}

static void cat(const char *path) {
    char buf[256];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("  cat %s: %s\n", path, ename(errno));
        return;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n < 0 ? 0 : n] = 0;
    for (ssize_t i = 0; i < n; i++)
        if (buf[i] == 0) buf[i] = '@';
    printf("  cat %s: [%s]\n", path, buf);
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void list(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        printf("  ls %s: %s\n", path, ename(errno));
        return;
    }
    char *names[128];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 128) {
        char *s = malloc(300);
        snprintf(s, 300, "%s:%d", e->d_name, e->d_type);
        names[n++] = s;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    printf("  ls %s:", path);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
}

static void times_of(const char *path) {
    struct stat s;
    if (lstat(path, &s) < 0) {
        printf("  times %s: %s\n", path, ename(errno));
        return;
    }
    printf("  times %s: a=%lld.%09ld m=%lld.%09ld\n", path, (long long)s.st_atim.tv_sec, s.st_atim.tv_nsec,
           (long long)s.st_mtim.tv_sec, s.st_mtim.tv_nsec);
}

static int same_file(const char *a, const char *b) {
    struct stat x, y;
    return lstat(a, &x) == 0 && lstat(b, &y) == 0 && x.st_ino == y.st_ino && x.st_dev == y.st_dev;
}

int main(int argc, char **argv) {
    char buf[8192];
    int fd, fd2;
    struct stat s;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || chdir(argv[1]) < 0) {
        printf("usage: files DIR\n");
        return 2;
    }
    umask(022);
    T(mkdir("area", 0755));
    T(chdir("area"));
    time_t start = time(NULL);

    printf("== create, write, read\n");
    fd = T(open("f", O_CREAT | O_EXCL | O_WRONLY, 0666));
    T(write(fd, "hello world\n", 12));
    T(close(fd));
    st("f", 1);
    T(open("f", O_CREAT | O_EXCL | O_WRONLY, 0644));
    T(open("nofile", O_RDONLY));
    T(open("f/", O_RDONLY));
    T(open("newdir/", O_CREAT | O_WRONLY, 0644));
    T(open("nodir/x", O_CREAT | O_WRONLY, 0644));
    T(open(".", O_WRONLY));
    T(open(".", O_RDONLY | O_CREAT, 0644));
    T(open("f", O_RDONLY | O_DIRECTORY));
    fd = T(open("f", O_RDONLY));
    T(read(fd, buf, 5));
    printf("  read [%.5s]\n", buf);
    T(pread(fd, buf, 5, 6));
    printf("  pread [%.5s]\n", buf);
    T(write(fd, "x", 1));
    T(lseek(fd, 0, SEEK_END));
    T(lseek(fd, -100, SEEK_SET));
    T(lseek(fd, 0, 7));
    T(close(fd));
    T(close(fd));
    fd = T(open("f", O_WRONLY));
    T(read(fd, buf, 1));
    T(lseek(fd, 20, SEEK_SET));
    T(write(fd, "after a hole", 12));
    T(close(fd));
    st("f", 1);
    cat("f");
    fd = T(open("f", O_WRONLY | O_APPEND));
    T(lseek(fd, 0, SEEK_SET));
    T(write(fd, "+tail", 5));
    T(pwrite(fd, "P", 1, 0));
    T(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    T(fcntl(fd, F_SETFL, O_NONBLOCK));
    T(fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    T(close(fd));
    cat("f");
    fd = T(open("f", O_RDWR | O_TRUNC | O_CLOEXEC));
    T(fcntl(fd, F_GETFD));
    st("f", 1);
    T(write(fd, "0123456789", 10));
    T(lseek(fd, 2, SEEK_SET));
    T(read(fd, buf, 3));
    printf("  read [%.3s]\n", buf);
    T(pwrite(fd, "AB", 2, 8));
    T(pread(fd, buf, 100, 0));
    printf("  pread [%.10s]\n", buf);
    struct iovec iov[2] = {{buf, 3}, {buf + 100, 4}};
    T(preadv(fd, iov, 2, 1));
    printf("  preadv [%.3s|%.4s]\n", buf, buf + 100);
    memcpy(buf, "xyz", 3);
    memcpy(buf + 100, "UVWX", 4);
    T(pwritev(fd, iov, 2, 12));
    T(pread(fd, buf, 100, 0));
    printf("  after pwritev [%.19s]\n", buf);
    fd2 = T(dup(fd));
    T(lseek(fd2, 0, SEEK_CUR));
    T(close(fd2));
    T(dup3(fd, fd, O_CLOEXEC));

    printf("== sizes\n");
    T(ftruncate(fd, 4));
    st("f", 1);
    T(ftruncate(fd, 6000));
    T(fstat(fd, &s));
    printf("  size %lld\n", (long long)s.st_size);
    T(pread(fd, buf, 10, 3));
    printf("  bytes %d %d %d\n", buf[0], buf[1], buf[9]);
    T(ftruncate(fd, -1));
    T(truncate("f", 3));
    st("f", 1);
    T(truncate(".", 0));
    T(truncate("nofile", 0));
    T(fallocate(fd, 0, 0, 100));
    st("f", 1);
    T(close(fd));
    fd = T(open("f", O_RDONLY));
    T(ftruncate(fd, 0));
    T(close(fd));

    printf("== directories\n");
    T(mkdir("d", 0777));
    T(mkdir("d", 0755));
    T(mkdir("d/e", 0700));
    T(mkdir("d/e/", 0700));
    T(mkdir("f/x", 0755));
    T(mkdir("no/x", 0755));
    st("d", 1);
    st("d/e", 1);
    T(rmdir("d"));
    T(rmdir("d/e/."));
    T(rmdir("d/e/.."));
    T(rmdir("f"));
    T(rmdir("nothere"));
    T(rmdir("d/e"));
    st("d", 1);
    list(".");
    list("d");
    T(mkdir("d/e2", 0755));
    T(open("d/e2/inner", O_CREAT | O_WRONLY, 0600) >= 0);
    T(chdir("d/e2"));
    T(getcwd(buf, sizeof buf) != NULL);
    printf("  cwd ends with [%s]\n", strrchr(buf, '/'));
    fd = T(open("..", O_RDONLY | O_DIRECTORY));
    T(chdir("../.."));
    T(fchdir(fd));
    T(getcwd(buf, sizeof buf) != NULL);
    printf("  cwd ends with [%s]\n", strrchr(buf, '/'));
    T(chdir(".."));
    T(openat(fd, "e2/inner", O_RDONLY) >= 0);
    T(mkdirat(fd, "made", 0755));
    T(unlinkat(fd, "made", 0));
    T(unlinkat(fd, "made", AT_REMOVEDIR));
    T(unlinkat(fd, "made", AT_REMOVEDIR));
    T(close(fd));

    printf("== renames\n");
    T(rename("f", "g"));
    st("f", 1);
    st("g", 1);
    T(rename("g", "g"));
    T(open("h", O_CREAT | O_WRONLY, 0600) >= 0);
    T(rename("g", "h"));
    st("h", 1);
    T(rename("h", "d"));
    T(rename("d", "h"));
    T(rename("d", "d/e2/sub"));
    T(rename("d", "d/e2"));
    T(mkdir("empty", 0755));
    T(rename("d", "empty"));
    T(rename("empty", "d"));
    T(rename("nothere", "x"));
    T(rename("h", "nodir/x"));
    T(rename("h", "h/"));
    T(mkdir("d2", 0755));
    T(renameat2(AT_FDCWD, "d2", AT_FDCWD, "empty", RENAME_NOREPLACE));
    T(open("a", O_CREAT | O_WRONLY, 0644) >= 0);
    T(open("b", O_CREAT | O_WRONLY, 0600) >= 0);
    fd = open("a", O_WRONLY);
    T(write(fd, "AAA", 3));
    close(fd);
    T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE));
    cat("a");
    cat("b");
    st("a", 1);
    T(renameat2(AT_FDCWD, "a", AT_FDCWD, "zz", RENAME_EXCHANGE));
    T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE | RENAME_NOREPLACE));
    T(rename(".", "x"));
    T(rename("a", "."));
    list(".");

    printf("== unlink and links\n");
    T(unlink("nothere"));
    T(unlink("d"));
    T(unlink("d/"));
    fd = T(open("b", O_RDWR));
    T(unlink("b"));
    st("b", 1);
    T(read(fd, buf, 10));
    T(fstat(fd, &s));
    printf("  fstat: nlink=%lu size=%lld\n", (unsigned long)s.st_nlink, (long long)s.st_size);
    T(close(fd));
    T(link("h", "h2"));
    st("h", 1);
    printf("  same inode %d\n", same_file("h", "h2"));
    fd = open("h2", O_WRONLY | O_TRUNC);
    T(write(fd, "through h2", 10));
    close(fd);
    cat("h");
    T(link("h", "h2"));
    T(link("d", "dlink"));
    T(link("nothere", "x"));
    T(link("h", "nodir/x"));
    T(linkat(AT_FDCWD, "h", AT_FDCWD, "h3", 0));
    T(unlink("h"));
    st("h2", 1);
    T(unlink("h3"));

    printf("== symbolic links\n");
    T(symlink("h2", "s"));
    T(readlink("s", buf, sizeof buf));
    printf("  readlink [%.*s]\n", 2, buf);
    st("s", 0);
    st("s", 1);
    T(symlink("x", "s"));
    T(symlink("", "s0"));
    T(open("s", O_RDONLY | O_NOFOLLOW));
    T(symlink("nothere", "dang"));
    st("dang", 1);
    st("dang", 0);
    T(open("dang", O_CREAT | O_WRONLY, 0640) >= 0);
    st("nothere", 1);
    T(open("dang", O_CREAT | O_EXCL | O_WRONLY, 0640));
    T(symlink("l2", "l1"));
    T(symlink("l1", "l2"));
    st("l1", 1);
    T(open("l1", O_RDONLY));
    T(readlink("h2", buf, sizeof buf));
    T(readlink("nothere2", buf, sizeof buf));
    T(symlink("d", "sd"));
    st("sd/", 0);
    st("sd/e2", 1);
    T(symlinkat("../h2", AT_FDCWD, "d/up"));
    cat("d/up");
    T(readlinkat(AT_FDCWD, "d/up", buf, 3));
    T(unlink("sd"));
    st("d", 1);

    printf("== modes, owners, times\n");
    T(chmod("h2", 0600));
    st("h2", 1);
    fd = open("h2", O_RDONLY);
    T(fchmod(fd, 0640));
    st("h2", 1);
    T(fchmodat(AT_FDCWD, "s", 0604, 0));
    st("h2", 1);
    st("s", 0);
    T(chmod("nothere3", 0600));
    T(chmod("d", 01777));
    st("d", 1);
    T(chown("h2", getuid(), getgid()));
    T(fchown(fd, -1, -1));
    long r = chown("h2", 1234, 5678);
    printf("chown other -> %s\n", r == 0 ? "0" : ename(errno));
    if (r == 0) {
        T(stat("h2", &s));
        printf("  owner %u %u\n", (unsigned)s.st_uid, (unsigned)s.st_gid);
        T(lchown("s", 4321, 8765));
        T(lstat("s", &s));
        printf("  link owner %u %u\n", (unsigned)s.st_uid, (unsigned)s.st_gid);
        T(fchownat(AT_FDCWD, "h2", getuid(), getgid(), 0));
    }
    struct timespec ts[2] = {{1000000000, 123456789}, {1500000000, 500000000}};
    T(utimensat(AT_FDCWD, "h2", ts, 0));
    times_of("h2");
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = 1600000000;
    ts[1].tv_nsec = 0;
    T(futimens(fd, ts));
    times_of("h2");
    ts[0].tv_sec = 7;
    ts[0].tv_nsec = 0;
    T(utimensat(AT_FDCWD, "s", ts, AT_SYMLINK_NOFOLLOW));
    times_of("s");
    times_of("h2");
    ts[1].tv_nsec = 2000000000;
    T(utimensat(AT_FDCWD, "h2", ts, 0));
    T(utimensat(AT_FDCWD, "h2", NULL, 0));
    T(stat("h2", &s));
    printf("  recent %d\n", s.st_mtime >= start && s.st_mtime < start + 100);
    T(close(fd));

    printf("== special files\n");
    T(mkfifo("p", 0644));
    st("p", 1);
    T(open("p", O_WRONLY | O_NONBLOCK));
    fd = T(open("p", O_RDONLY | O_NONBLOCK));
    T(read(fd, buf, 10));
    fd2 = T(open("p", O_WRONLY | O_NONBLOCK));
    T(write(fd2, "through the fifo", 16));
    T(read(fd, buf, 100));
    printf("  [%.16s]\n", buf);
    T(read(fd, buf, 100));
    T(lseek(fd, 0, SEEK_SET));
    T(close(fd2));
    T(read(fd, buf, 100));
    T(close(fd));
    fd = T(open("p", O_RDWR));
    T(write(fd, "rw", 2));
    T(read(fd, buf, 10));
    T(close(fd));
    T(mkfifo("p", 0644));
    T(mknod("r", S_IFREG | 0600, 0));
    st("r", 1);
    r = mknod("c", S_IFCHR | 0600, makedev(1, 3));
    printf("mknod chr -> %s\n", r == 0 ? "0" : ename(errno));
    T(mknod("bad", 0170000 | 0600, 0));

    printf("== unnamed files\n");
    fd = T(open(".", O_TMPFILE | O_RDWR, 0600));
    T(write(fd, "tmpfile", 7));
    T(fstat(fd, &s));
    printf("  nlink=%lu size=%lld %s\n", (unsigned long)s.st_nlink, (long long)s.st_size, kind(s.st_mode));
    snprintf(buf, sizeof buf, "/proc/self/fd/%d", fd);
    T(linkat(AT_FDCWD, buf, AT_FDCWD, "named", AT_SYMLINK_FOLLOW));
    cat("named");
    st("named", 1);
    T(close(fd));
    T(open(".", O_TMPFILE | O_RDONLY, 0600));
    T(open("h2", O_TMPFILE | O_RDWR, 0600));

    printf("== descriptors as directories\n");
    fd = T(open("d", O_RDONLY | O_DIRECTORY));
    T(fstatat(fd, "e2", &s, 0));
    printf("  e2 is %s\n", kind(s.st_mode));
    T(fstatat(fd, "", &s, AT_EMPTY_PATH));
    printf("  itself is %s\n", kind(s.st_mode));
    T(faccessat(fd, "e2/inner", R_OK | W_OK, 0));
    T(faccessat(fd, "nothere", F_OK, 0));
    T(renameat(fd, "e2/inner", fd, "inner2"));
    T(linkat(fd, "inner2", AT_FDCWD, "fromdir", 0));
    T(read(fd, buf, 1));
    T(write(fd, buf, 1));
    T(close(fd));
    fd = open("h2", O_RDONLY);
    T(openat(fd, "x", O_RDONLY));
    T(close(fd));
    list("d");

    printf("== copies\n");
    fd = open("src", O_CREAT | O_RDWR, 0644);
    T(write(fd, "copy me, please", 15));
    fd2 = T(open("dst", O_CREAT | O_RDWR, 0644));
    loff_t in = 5, out = 2;
    T(copy_file_range(fd, &in, fd2, &out, 100, 0));
    printf("  offsets %lld %lld\n", (long long)in, (long long)out);
    T(lseek(fd, 0, SEEK_SET));
    T(sendfile(fd2, fd, NULL, 4));
    cat("dst");
    T(close(fd));
    T(close(fd2));

    printf("== mappings\n");
    fd = open("src", O_RDWR);
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    printf("mmap private -> %s\n", m == MAP_FAILED ? ename(errno) : "ok");
    if (m != MAP_FAILED) {
        printf("  [%.15s] %d\n", m, m[20]);
        m[0] = 'C';
        cat("src");
        munmap(m, 4096);
    }
    m = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    printf("mmap shared read-only -> %s\n", m == MAP_FAILED ? ename(errno) : "ok");
    if (m != MAP_FAILED) {
        printf("  [%.15s]\n", m);
        munmap(m, 4096);
    }
    T(close(fd));
    fd = open("src", O_RDONLY);
    m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    printf("mmap shared writable of a read-only fd -> %s\n", m == MAP_FAILED ? ename(errno) : "ok");
    T(close(fd));

    printf("== devices\n");
    fd = T(open("/dev/null", O_RDWR));
    T(read(fd, buf, 10));
    T(write(fd, "gone", 4));
    T(close(fd));
    fd = T(open("/dev/zero", O_RDONLY));
    buf[0] = 1;
    T(read(fd, buf, 8));
    printf("  zero %d%d\n", buf[0], buf[7]);
    T(close(fd));
    fd = T(open("/dev/full", O_WRONLY));
    T(write(fd, "x", 1));
    T(close(fd));
    fd = T(open("/dev/urandom", O_RDONLY));
    T(read(fd, buf, 16));
    T(close(fd));
    fd = T(open("/dev/random", O_RDONLY));
    T(read(fd, buf, 16));
    T(close(fd));
    T(open("/dev/tty", O_RDWR));
    st("/dev/null", 1);
    T(stat("/dev/null", &s));
    printf("  null is %u,%u\n", major(s.st_rdev), minor(s.st_rdev));
    T(stat("/dev/zero", &s));
    printf("  zero is %u,%u\n", major(s.st_rdev), minor(s.st_rdev));
    T(readlink("/dev/stdin", buf, sizeof buf));
    printf("  [%.15s]\n", buf);
    T(readlink("/dev/fd", buf, sizeof buf));
    printf("  [%.13s]\n", buf);
    T(stat("/tmp", &s));
    printf("  /tmp %s %04o\n", kind(s.st_mode), (unsigned)(s.st_mode & 07777));

    printf("== limits\n");
    memset(buf, 'n', 300);
    buf[256] = 0;
    T(open(buf, O_CREAT | O_WRONLY, 0644));
    T(mkdir(buf, 0755));
    buf[255] = 0;
    T(mkdir(buf, 0755));
    T(rmdir(buf));
    memset(buf, 'a', 5000);
    for (int i = 1; i < 5000; i += 2) buf[i] = '/';
    buf[4999] = 0;
    T(open(buf, O_RDONLY));
    struct statfs fs;
    T(statfs(".", &fs));
    printf("  namelen=%ld bsize_ok=%d\n", (long)fs.f_namelen, fs.f_bsize > 0);
    T(access("h2", R_OK | W_OK));
    T(access("d", X_OK));
    T(access("nothere", F_OK));
    T(access("h2", 8));

    printf("== removing the tree\n");
    T(unlink("d/up"));
    T(unlink("d/inner2"));
    T(rmdir("d/e2"));
    T(rmdir("d"));
    list(".");
    return 0;
}
