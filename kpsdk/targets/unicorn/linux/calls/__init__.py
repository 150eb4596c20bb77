"""The system calls of the Linux layer on Unicorn, one module per subsystem.

====================  =====================================================================
module                calls
====================  =====================================================================
:mod:`.fs`            open, creat, close, dup, fcntl, flock, pipe, ioctl, getdents(64),
                      readlink, getcwd, chdir, fadvise, fsync
:mod:`.names`         mkdir, rmdir, unlink, rename(at2), link, symlink, mknod
:mod:`.attrs`         chmod, chown, utimensat/utimes/utime, truncate, fallocate
:mod:`.rw`            read, write, their vector and positioned forms, sendfile,
                      copy_file_range, lseek
:mod:`.filestat`      the stat family, statx, statfs, access
:mod:`.xattr`         getxattr, listxattr, setxattr, removexattr and their l/f forms
:mod:`.mm`            brk, mmap, munmap, mprotect, mremap, madvise, mlock, mincore
:mod:`.thread`        arch_prctl, set_tls, set_thread_area, set_tid_address, robust lists,
                      rseq, futex, sched_yield
:mod:`.process`       the process ids, groups and sessions, prctl, clone/fork/vfork,
                      execve, exit/exit_group, wait4/waitpid/waitid
:mod:`.ids`           uid, gid (set only to themselves), groups, umask
:mod:`.signals`       rt_sigaction, rt_sigprocmask, sigaltstack, kill, tgkill, tkill,
                      rt_sigpending, rt_sigsuspend, pause, rt_sigreturn/sigreturn,
                      alarm, setitimer/getitimer
:mod:`.poll`          poll, ppoll, select, pselect6, epoll_create/ctl/wait/pwait/pwait2
:mod:`.eventfd`       eventfd, timerfd_create/settime/gettime, signalfd
:mod:`.clocks`        clock_gettime, gettimeofday, time, the sleeps
:mod:`.sockets`       socket, socketpair, bind, listen, accept, connect, shutdown,
                      get/setsockopt, getsockname/getpeername, socketcall
:mod:`.msgs`          send/recv, sendto/recvfrom, sendmsg/recvmsg, sendmmsg/recvmmsg
:mod:`.sysinfo`       uname, sysinfo, rlimits, getrandom, sched_getaffinity
====================  =====================================================================

:mod:`.core` is what they share (the process's state, the program's memory, path bases),
:mod:`.procself` the process's own ``/proc/self`` and :mod:`.paths` the walk from a ``dirfd``
(for the calls that walk paths), and
:mod:`.declare` the ``@syscall(NAME, ARGS)`` mark a handler carries: the call's name (the
kernel's) and its arguments as ``--strace`` prints them.  The modules avoid the names of the
standard library's modules they use (``stat``, ``signal``, ``time``, ``socket``).

Each subsystem is a class whose methods are its calls, all subclasses of
:class:`~.core.ProcessCore`; :class:`kpsdk.targets.unicorn.linux.syscalls.LinuxProcess`
combines them (mixins).  Why mixins rather than handler objects over a shared context: a
call's dispatch stays one dict lookup to a bound method (``handlers[nr]``, built once per
process from the marks, no context to fetch and no second call in between, on the path
every system call of a program takes); the subsystems share the process's state without
passing it, as the kernel's subsystems share ``current``; and mypy checks each class alone
against :class:`~.core.ProcessCore`, which declares every attribute a call may use.  What
one subsystem asks of another goes through a base (:class:`~.procself.ProcSelf` for the
path walkers), never through a sibling.
"""
