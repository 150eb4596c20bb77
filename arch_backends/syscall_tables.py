"""Linux system-call numbers of each architecture, as data (the Linux layer dispatches on the name).

Generated from the kernel's uapi headers as Debian 12's cross toolchains ship them
(``echo '#include <asm/unistd.h>' | TRIPLE-gcc -E -dM -``): Linux
arch/x86/entry/syscalls/syscall_{64,32}.tbl, arch/arm/tools/syscall.tbl (EABI, plus the ARM
private calls at 0xf0000: arch/arm/include/uapi/asm/unistd.h), include/uapi/asm-generic/unistd.h
(riscv64) and arch/powerpc/kernel/syscalls/syscall.tbl (64-bit).  Only the calls the Linux layer
knows by name are listed; any other number is "unimplemented" (-ENOSYS, recorded).
"""

from __future__ import annotations

#: x86_64
X86_64: dict[str, int] = {
    "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "poll": 7, "lseek": 8,
    "mmap": 9, "mprotect": 10, "munmap": 11, "brk": 12, "rt_sigaction": 13, "rt_sigprocmask": 14,
    "rt_sigreturn": 15, "ioctl": 16, "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "access": 21,
    "pipe": 22, "select": 23, "mremap": 25, "madvise": 28, "dup": 32, "dup2": 33, "nanosleep": 35,
    "getpid": 39, "socket": 41, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "exit": 60, "wait4": 61,
    "kill": 62, "uname": 63, "fcntl": 72, "fsync": 74, "ftruncate": 77, "getcwd": 79, "chdir": 80,
    "rename": 82, "mkdir": 83, "unlink": 87, "readlink": 89, "umask": 95, "gettimeofday": 96, "getrlimit": 97,
    "sysinfo": 99, "times": 100, "getuid": 102, "getgid": 104, "geteuid": 107, "getegid": 108, "setpgid": 109,
    "getppid": 110, "getpgrp": 111, "getpgid": 121, "getsid": 124, "sigaltstack": 131, "prctl": 157,
    "arch_prctl": 158, "gettid": 186, "time": 201, "futex": 202, "sched_getaffinity": 204,
    "set_thread_area": 205, "getdents64": 217, "set_tid_address": 218, "fadvise64": 221, "clock_gettime": 228,
    "clock_nanosleep": 230, "exit_group": 231, "tgkill": 234, "openat": 257, "mkdirat": 258,
    "newfstatat": 262, "unlinkat": 263, "renameat": 264, "readlinkat": 267, "faccessat": 269, "pselect6": 270,
    "ppoll": 271, "set_robust_list": 273, "dup3": 292, "pipe2": 293, "prlimit64": 302, "getrandom": 318,
    "statx": 332, "rseq": 334, "clone3": 435, "faccessat2": 439,
    "sendfile": 40,
    "getsockname": 51, "getpeername": 52, "getsockopt": 55, "mincore": 27,
    "fchdir": 81, "statfs": 137, "fstatfs": 138, "mlock": 149, "munlock": 150, "mlockall": 151, "munlockall": 152,
    "getxattr": 191, "lgetxattr": 192, "fgetxattr": 193, "listxattr": 194, "llistxattr": 195, "flistxattr": 196,
}

#: i386
I386: dict[str, int] = {
    "exit": 1, "fork": 2, "read": 3, "write": 4, "open": 5, "close": 6, "unlink": 10, "execve": 11,
    "chdir": 12, "time": 13, "lseek": 19, "getpid": 20, "getuid": 24, "access": 33, "kill": 37, "rename": 38,
    "mkdir": 39, "dup": 41, "pipe": 42, "times": 43, "brk": 45, "getgid": 47, "geteuid": 49, "getegid": 50,
    "ioctl": 54, "fcntl": 55, "setpgid": 57, "umask": 60, "dup2": 63, "getppid": 64, "getpgrp": 65,
    "getrlimit": 76, "gettimeofday": 78, "select": 82, "readlink": 85, "mmap": 90, "munmap": 91,
    "ftruncate": 93, "stat": 106, "lstat": 107, "fstat": 108, "wait4": 114, "sysinfo": 116, "fsync": 118,
    "sigreturn": 119, "clone": 120, "uname": 122, "mprotect": 125, "getpgid": 132, "_llseek": 140,
    "_newselect": 142, "readv": 145, "writev": 146, "getsid": 147, "nanosleep": 162, "mremap": 163,
    "poll": 168, "prctl": 172, "rt_sigreturn": 173, "rt_sigaction": 174, "rt_sigprocmask": 175,
    "pread64": 180, "pwrite64": 181, "getcwd": 183, "sigaltstack": 186, "vfork": 190, "ugetrlimit": 191,
    "mmap2": 192, "ftruncate64": 194, "stat64": 195, "lstat64": 196, "fstat64": 197, "getuid32": 199,
    "getgid32": 200, "geteuid32": 201, "getegid32": 202, "madvise": 219, "getdents64": 220, "fcntl64": 221,
    "gettid": 224, "futex": 240, "sched_getaffinity": 242, "set_thread_area": 243, "fadvise64": 250,
    "exit_group": 252, "set_tid_address": 258, "clock_gettime": 265, "clock_nanosleep": 267, "tgkill": 270,
    "fadvise64_64": 272, "openat": 295, "mkdirat": 296, "fstatat64": 300, "unlinkat": 301, "renameat": 302,
    "readlinkat": 305, "faccessat": 307, "pselect6": 308, "ppoll": 309, "set_robust_list": 311, "dup3": 330,
    "pipe2": 331, "prlimit64": 340, "getrandom": 355, "socket": 359, "statx": 383, "arch_prctl": 384,
    "rseq": 386, "clock_gettime64": 403, "clock_nanosleep_time64": 407, "clone3": 435, "faccessat2": 439,
    "sendfile64": 239,
    "getsockname": 367, "getpeername": 368, "getsockopt": 365, "mincore": 218, "socketcall": 102,
    "fchdir": 133, "statfs64": 268, "fstatfs64": 269, "mlock": 150, "munlock": 151, "mlockall": 152,
    "munlockall": 153,
    "getxattr": 229, "lgetxattr": 230, "fgetxattr": 231, "listxattr": 232, "llistxattr": 233, "flistxattr": 234,
}

#: arm
ARM: dict[str, int] = {
    "exit": 1, "fork": 2, "read": 3, "write": 4, "open": 5, "close": 6, "unlink": 10, "execve": 11,
    "chdir": 12, "lseek": 19, "getpid": 20, "getuid": 24, "access": 33, "kill": 37, "rename": 38, "mkdir": 39,
    "dup": 41, "pipe": 42, "times": 43, "brk": 45, "getgid": 47, "geteuid": 49, "getegid": 50, "ioctl": 54,
    "fcntl": 55, "setpgid": 57, "umask": 60, "dup2": 63, "getppid": 64, "getpgrp": 65, "gettimeofday": 78,
    "readlink": 85, "munmap": 91, "ftruncate": 93, "stat": 106, "lstat": 107, "fstat": 108, "wait4": 114,
    "sysinfo": 116, "fsync": 118, "sigreturn": 119, "clone": 120, "uname": 122, "mprotect": 125,
    "getpgid": 132, "_llseek": 140, "_newselect": 142, "readv": 145, "writev": 146, "getsid": 147,
    "nanosleep": 162, "mremap": 163, "poll": 168, "prctl": 172, "rt_sigreturn": 173, "rt_sigaction": 174,
    "rt_sigprocmask": 175, "pread64": 180, "pwrite64": 181, "getcwd": 183, "sigaltstack": 186, "vfork": 190,
    "ugetrlimit": 191, "mmap2": 192, "ftruncate64": 194, "stat64": 195, "lstat64": 196, "fstat64": 197,
    "getuid32": 199, "getgid32": 200, "geteuid32": 201, "getegid32": 202, "getdents64": 217, "madvise": 220,
    "fcntl64": 221, "gettid": 224, "futex": 240, "sched_getaffinity": 242, "exit_group": 248,
    "set_tid_address": 256, "clock_gettime": 263, "clock_nanosleep": 265, "tgkill": 268, "socket": 281,
    "openat": 322, "mkdirat": 323, "fstatat64": 327, "unlinkat": 328, "renameat": 329, "readlinkat": 332,
    "faccessat": 334, "pselect6": 335, "ppoll": 336, "set_robust_list": 338, "dup3": 358, "pipe2": 359,
    "prlimit64": 369, "getrandom": 384, "statx": 397, "rseq": 398, "clock_gettime64": 403,
    "clock_nanosleep_time64": 407, "clone3": 435, "faccessat2": 439, "cacheflush": 0xf0002,
    "set_tls": 0xf0005,
    "sendfile64": 239,
    "getsockname": 286, "getpeername": 287, "getsockopt": 295, "mincore": 219,
    "fchdir": 133, "arm_fadvise64_64": 270, "statfs64": 266, "fstatfs64": 267, "mlock": 150, "munlock": 151,
    "mlockall": 152, "munlockall": 153,
    "getxattr": 229, "lgetxattr": 230, "fgetxattr": 231, "listxattr": 232, "llistxattr": 233, "flistxattr": 234,
}

#: riscv64
RISCV64: dict[str, int] = {
    "getcwd": 17, "dup": 23, "dup3": 24, "fcntl": 25, "ioctl": 29, "mkdirat": 34, "unlinkat": 35,
    "ftruncate": 46, "faccessat": 48, "chdir": 49, "openat": 56, "close": 57, "pipe2": 59, "getdents64": 61,
    "lseek": 62, "read": 63, "write": 64, "readv": 65, "writev": 66, "pread64": 67, "pwrite64": 68,
    "pselect6": 72, "ppoll": 73, "readlinkat": 78, "newfstatat": 79, "fstat": 80, "fsync": 82, "exit": 93,
    "exit_group": 94, "set_tid_address": 96, "futex": 98, "set_robust_list": 99, "nanosleep": 101,
    "clock_gettime": 113, "clock_nanosleep": 115, "sched_getaffinity": 123, "kill": 129, "tgkill": 131,
    "sigaltstack": 132, "rt_sigaction": 134, "rt_sigprocmask": 135, "rt_sigreturn": 139, "times": 153,
    "setpgid": 154, "getpgid": 155, "getsid": 156, "uname": 160, "getrlimit": 163, "umask": 166, "prctl": 167,
    "gettimeofday": 169, "getpid": 172, "getppid": 173, "getuid": 174, "geteuid": 175, "getgid": 176,
    "getegid": 177, "gettid": 178, "sysinfo": 179, "socket": 198, "brk": 214, "munmap": 215, "mremap": 216,
    "clone": 220, "execve": 221, "mmap": 222, "fadvise64": 223, "mprotect": 226, "madvise": 233, "wait4": 260,
    "prlimit64": 261, "getrandom": 278, "statx": 291, "rseq": 293, "clone3": 435, "faccessat2": 439,
    "sendfile": 71,
    "getsockname": 204, "getpeername": 205, "getsockopt": 209, "mincore": 232,
    "fchdir": 50, "statfs": 43, "fstatfs": 44, "mlock": 228, "munlock": 229, "mlockall": 230, "munlockall": 231,
    # Linux 6.4's arch/riscv/include/uapi/asm/unistd.h (__NR_arch_specific_syscall + 14): newer than
    # Debian 12's headers; Debian 13's glibc asks it
    "riscv_hwprobe": 258,
    "getxattr": 8, "lgetxattr": 9, "fgetxattr": 10, "listxattr": 11, "llistxattr": 12, "flistxattr": 13,
}

#: ppc64
PPC64: dict[str, int] = {
    "exit": 1, "fork": 2, "read": 3, "write": 4, "open": 5, "close": 6, "unlink": 10, "execve": 11,
    "chdir": 12, "time": 13, "lseek": 19, "getpid": 20, "getuid": 24, "access": 33, "kill": 37, "rename": 38,
    "mkdir": 39, "dup": 41, "pipe": 42, "times": 43, "brk": 45, "getgid": 47, "geteuid": 49, "getegid": 50,
    "ioctl": 54, "fcntl": 55, "setpgid": 57, "umask": 60, "dup2": 63, "getppid": 64, "getpgrp": 65,
    "getrlimit": 76, "gettimeofday": 78, "select": 82, "readlink": 85, "mmap": 90, "munmap": 91,
    "ftruncate": 93, "stat": 106, "lstat": 107, "fstat": 108, "wait4": 114, "sysinfo": 116, "fsync": 118,
    "sigreturn": 119, "clone": 120, "uname": 122, "mprotect": 125, "getpgid": 132, "_llseek": 140,
    "_newselect": 142, "readv": 145, "writev": 146, "getsid": 147, "nanosleep": 162, "mremap": 163,
    "poll": 167, "prctl": 171, "rt_sigreturn": 172, "rt_sigaction": 173, "rt_sigprocmask": 174,
    "pread64": 179, "pwrite64": 180, "getcwd": 182, "sigaltstack": 185, "vfork": 189, "ugetrlimit": 190,
    "getdents64": 202, "madvise": 205, "gettid": 207, "futex": 221, "sched_getaffinity": 223,
    "set_tid_address": 232, "fadvise64": 233, "exit_group": 234, "clock_gettime": 246, "clock_nanosleep": 248,
    "tgkill": 250, "pselect6": 280, "ppoll": 281, "openat": 286, "mkdirat": 287, "newfstatat": 291,
    "unlinkat": 292, "renameat": 293, "readlinkat": 296, "faccessat": 298, "set_robust_list": 300,
    "dup3": 316, "pipe2": 317, "prlimit64": 325, "socket": 326, "getrandom": 359, "statx": 383, "rseq": 387,
    "clone3": 435, "faccessat2": 439,
    "sendfile": 186,
    "getsockname": 331, "getpeername": 332, "getsockopt": 340, "mincore": 206, "socketcall": 102,
    "fchdir": 133, "statfs64": 252, "fstatfs64": 253, "mlock": 150, "munlock": 151, "mlockall": 152,
    "munlockall": 153,
    "getxattr": 212, "lgetxattr": 213, "fgetxattr": 214, "listxattr": 215, "llistxattr": 216, "flistxattr": 217,
}


# -- struct stat as each kernel fills it (asm/stat.h of each architecture) --------------------------

#: x86_64's struct stat (arch/x86/include/uapi/asm/stat.h); ppc64's has the same offsets
#: (arch/powerpc/include/uapi/asm/stat.h, __powerpc64__)
STAT_X86_64: tuple[int, tuple[tuple[str, int, str], ...]] = (144, (
    ("st_dev", 0, "Q"), ("st_ino", 8, "Q"), ("st_nlink", 16, "Q"), ("st_mode", 24, "I"), ("st_uid", 28, "I"),
    ("st_gid", 32, "I"), ("st_rdev", 40, "Q"), ("st_size", 48, "q"), ("st_blksize", 56, "q"),
    ("st_blocks", 64, "q"), ("st_atime", 72, "q"), ("st_atime_nsec", 80, "Q"), ("st_mtime", 88, "q"),
    ("st_mtime_nsec", 96, "Q"), ("st_ctime", 104, "q"), ("st_ctime_nsec", 112, "Q"),
))
#: the generic 64-bit struct stat (include/uapi/asm-generic/stat.h): riscv64
STAT_GENERIC64: tuple[int, tuple[tuple[str, int, str], ...]] = (128, (
    ("st_dev", 0, "Q"), ("st_ino", 8, "Q"), ("st_mode", 16, "I"), ("st_nlink", 20, "I"), ("st_uid", 24, "I"),
    ("st_gid", 28, "I"), ("st_rdev", 32, "Q"), ("st_size", 48, "q"), ("st_blksize", 56, "i"),
    ("st_blocks", 64, "q"), ("st_atime", 72, "q"), ("st_atime_nsec", 80, "Q"), ("st_mtime", 88, "q"),
    ("st_mtime_nsec", 96, "Q"), ("st_ctime", 104, "q"), ("st_ctime_nsec", 112, "Q"),
))
#: i386's struct stat64 (arch/x86/include/uapi/asm/stat.h: 4-byte aligned long longs)
STAT64_I386: tuple[int, tuple[tuple[str, int, str], ...]] = (96, (
    ("st_dev", 0, "Q"), ("st_ino", 12, "I"), ("st_mode", 16, "I"), ("st_nlink", 20, "I"), ("st_uid", 24, "I"),
    ("st_gid", 28, "I"), ("st_rdev", 32, "Q"), ("st_size", 44, "q"), ("st_blksize", 52, "I"),
    ("st_blocks", 56, "Q"), ("st_atime", 64, "I"), ("st_atime_nsec", 68, "I"), ("st_mtime", 72, "I"),
    ("st_mtime_nsec", 76, "I"), ("st_ctime", 80, "I"), ("st_ctime_nsec", 84, "I"), ("st_ino", 88, "Q"),
))
#: ARM's struct stat64 (arch/arm/include/uapi/asm/stat.h: EABI aligns long longs to 8)
STAT64_ARM: tuple[int, tuple[tuple[str, int, str], ...]] = (104, (
    ("st_dev", 0, "Q"), ("st_ino", 12, "I"), ("st_mode", 16, "I"), ("st_nlink", 20, "I"), ("st_uid", 24, "I"),
    ("st_gid", 28, "I"), ("st_rdev", 32, "Q"), ("st_size", 48, "q"), ("st_blksize", 56, "I"),
    ("st_blocks", 64, "Q"), ("st_atime", 72, "I"), ("st_atime_nsec", 76, "I"), ("st_mtime", 80, "I"),
    ("st_mtime_nsec", 84, "I"), ("st_ctime", 88, "I"), ("st_ctime_nsec", 92, "I"), ("st_ino", 96, "Q"),
))
