/* epoll, eventfd, timerfd, signalfd and sockets between processes and threads, one mode each.
 *
 * Built statically with each cross compiler (-pthread) and run under kpsdk's Linux layer and
 * natively: every mode prints only what Linux decides (errno and signal names, event masks,
 * byte counts, whether two addresses agree), never a port number, a pid or a time, and the
 * processes it forks take turns (the parent waits), so the output is the same text on every
 * arch and every run.
 *
 * Usage: sockets MODE
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    /* one write per line, unbuffered: lines of several processes never mix */
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 1)
        n = sizeof line - 1;
    ssize_t w = write(1, line, (size_t)n);
    (void)w;
}

/* an errno's name: the same text on every arch whatever its number */
static const char *en(int e)
{
    const char *name = strerrorname_np(e);
    return name ? name : "?";
}
/* a call's result: its value, or the errno's name */
static char results[8][64];
static int next_result;
static const char *R(long r)
{
    char *out = results[next_result++ % 8];
    if (r < 0)
        snprintf(out, 64, "%s", en(errno));
    else
        snprintf(out, 64, "%ld", r);
    return out;
}
static const char *sig(int n)
{
    const char *name = n ? sigabbrev_np(n) : NULL;
    return name ? name : "none";
}
/* poll bits by name, in a fixed order */
static const char *bits(unsigned m)
{
    static char out[4][128];
    static int k;
    char *s = out[k++ % 4];
    s[0] = 0;
    static const struct { unsigned bit; const char *name; } names[] = {
        {EPOLLIN, "IN"}, {EPOLLPRI, "PRI"}, {EPOLLOUT, "OUT"}, {EPOLLERR, "ERR"}, {EPOLLHUP, "HUP"},
        {EPOLLRDNORM, "RDNORM"}, {EPOLLRDBAND, "RDBAND"}, {EPOLLWRNORM, "WRNORM"}, {EPOLLWRBAND, "WRBAND"},
        {EPOLLRDHUP, "RDHUP"}, {POLLNVAL, "NVAL"},
    };
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (m & names[i].bit) {
            strcat(s, s[0] ? "|" : "");
            strcat(s, names[i].name);
            m &= ~names[i].bit;
        }
    if (m)
        sprintf(s + strlen(s), "%s%#x", s[0] ? "|" : "", m);
    return s[0] ? s : "0";
}
static unsigned revents(int fd, short events)
{
    struct pollfd p = {fd, events, 0};
    return poll(&p, 1, 0) < 0 ? 0xdead : (unsigned)p.revents;
}
static void reap(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status))
        say("child ended badly: %#x\n", status);
}
static int caught;
static void on_signal(int s)
{
    caught = s;
}
static void handle(int s, int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = flags;
    sigaction(s, &sa, NULL);
}
static void msleep(int ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) < 0 && errno == EINTR)
        ;
}
static int epoll_list(int ep, int max, int timeout, char *out)
{
    struct epoll_event ev[16];
    int n = epoll_wait(ep, ev, max, timeout);
    out[0] = 0;
    for (int i = 0; i < n; i++)
        sprintf(out + strlen(out), "%s%llu:%s", i ? " " : "", (unsigned long long)ev[i].data.u64, bits(ev[i].events));
    return n;
}

/* -- epoll ------------------------------------------------------------------------------------ */

static void *epoll_waiter(void *arg)
{
    int ep = *(int *)arg;
    struct epoll_event ev;
    int n = epoll_wait(ep, &ev, 1, -1);
    say("thread: epoll_wait %d data %llu %s\n", n, (unsigned long long)ev.data.u64, bits(ev.events));
    return NULL;
}

static int mode_epoll(void)
{
    char list[256], c = 0;
    int p[2], q[2];
    pipe(p);
    pipe(q);
    const char *a = R(epoll_create(0)), *b = R(epoll_create1(1)), *x, *y;
    say("epoll_create(0): %s, epoll_create1(1): %s\n", a, b);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    say("FD_CLOEXEC: %d\n", fcntl(ep, F_GETFD) & FD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1}, evs[4];
    a = R(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
    b = R(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev));
    say("add: %s, again: %s\n", a, b);
    a = R(epoll_ctl(ep, EPOLL_CTL_MOD, p[1], &ev));
    b = R(epoll_ctl(ep, EPOLL_CTL_DEL, p[1], NULL));
    say("mod missing: %s, del missing: %s\n", a, b);
    a = R(epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
    b = R(epoll_ctl(ep, EPOLL_CTL_ADD, 999, &ev));
    x = R(epoll_ctl(p[0], EPOLL_CTL_ADD, p[1], &ev));
    y = R(epoll_ctl(ep, 99, p[0], &ev));
    say("add itself: %s, closed fd: %s, not an epoll: %s, bad op: %s\n", a, b, x, y);
    int file = open("/proc/self/exe", O_RDONLY), null = open("/dev/null", O_RDWR);
    a = R(epoll_ctl(ep, EPOLL_CTL_ADD, file, &ev));
    b = R(epoll_ctl(ep, EPOLL_CTL_ADD, null, &ev));
    say("regular file: %s, /dev/null: %s\n", a, b);
    struct epoll_event excl = {.events = EPOLLIN | EPOLLEXCLUSIVE};
    say("EPOLLEXCLUSIVE mod: %s\n", R(epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &excl)));
    a = R(epoll_wait(ep, &ev, 0, 0));
    b = R(read(ep, &c, 1));
    say("maxevents 0: %s, read the epoll fd: %s\n", a, b);
    say("nothing ready: %d\n", epoll_list(ep, 4, 0, list));
    say("nothing in 30 ms: %d\n", epoll_list(ep, 4, 30, list));

    char list2[256];
    int n;
    write(p[1], "ab", 2);
    epoll_list(ep, 4, 0, list);
    n = epoll_list(ep, 4, 0, list2);
    say("level: %s; again: %d %s\n", list, n, list2);
    ev.events = EPOLLIN | EPOLLET;
    epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev);
    epoll_list(ep, 4, 0, list);
    n = epoll_list(ep, 4, 0, list2);
    say("edge after mod: %s; again: %d\n", list, n);
    read(p[0], &c, 1);
    say("edge after a partial read: %d\n", epoll_list(ep, 4, 0, list));
    write(p[1], "c", 1);
    epoll_list(ep, 4, 0, list);
    n = epoll_list(ep, 4, 0, list2);
    say("edge after a write: %s; again: %d\n", list, n);
    ev.events = EPOLLIN | EPOLLONESHOT;
    epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev);
    epoll_list(ep, 4, 0, list);
    n = epoll_list(ep, 4, 0, list2);
    say("oneshot: %s; again: %d; ", list, n);
    write(p[1], "d", 1);
    say("after a write: %d; ", epoll_list(ep, 4, 0, list));
    epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev);
    epoll_list(ep, 4, 0, list);
    say("rearmed: %s\n", list);
    ev.events = EPOLLIN;
    epoll_ctl(ep, EPOLL_CTL_MOD, p[0], &ev);
    close(p[1]);
    epoll_list(ep, 4, 0, list);
    say("writer closed: %s; ", list);
    char buf[16];
    read(p[0], buf, sizeof buf);
    epoll_list(ep, 4, 0, list);
    say("drained: %s\n", list);
    epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL);
    struct epoll_event out = {.events = EPOLLOUT, .data.u64 = 2};
    epoll_ctl(ep, EPOLL_CTL_ADD, q[1], &out);
    epoll_list(ep, 4, 0, list);
    say("write end: %s; ", list);
    close(q[0]);
    epoll_list(ep, 4, 0, list);
    say("reader closed: %s\n", list);
    epoll_ctl(ep, EPOLL_CTL_DEL, q[1], NULL);
    close(q[1]);

    /* the ready list's order: maxevents leaves the rest first, level-triggered ones go last */
    int r[3][2];
    for (int i = 0; i < 3; i++) {
        pipe(r[i]);
        write(r[i][1], "x", 1);
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = 10 + i};
        epoll_ctl(ep, EPOLL_CTL_ADD, r[i][0], &e);
    }
    epoll_list(ep, 2, 0, list);
    say("order: [%s]", list);
    epoll_list(ep, 2, 0, list);
    say(" [%s]", list);
    epoll_list(ep, 3, 0, list);
    say(" [%s]\n", list);
    for (int i = 0; i < 3; i++)
        epoll_ctl(ep, EPOLL_CTL_DEL, r[i][0], NULL);

    /* an item goes when its file does, not when the fd it was added by is closed */
    int d = dup(r[0][0]);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = 20};
    epoll_ctl(ep, EPOLL_CTL_ADD, r[0][0], &e);
    close(r[0][0]);
    epoll_list(ep, 4, 0, list);
    say("closed fd with a dup: %s; ", list);
    close(d);
    say("the dup closed: %d\n", epoll_list(ep, 4, 0, list));

    /* nesting */
    int ep2 = epoll_create1(0);
    struct epoll_event nest = {.events = EPOLLIN, .data.u64 = 30};
    say("nest: %s; ", R(epoll_ctl(ep2, EPOLL_CTL_ADD, ep, &nest)));
    say("loop: %s; ", R(epoll_ctl(ep, EPOLL_CTL_ADD, ep2, &nest)));
    say("inner idle: %d; ", epoll_list(ep2, 4, 0, list));
    struct epoll_event e1 = {.events = EPOLLIN, .data.u64 = 11};
    epoll_ctl(ep, EPOLL_CTL_ADD, r[1][0], &e1);
    epoll_list(ep2, 4, 0, list);
    say("inner ready: %s; ", list);
    say("poll of it: %s\n", bits(revents(ep, POLLIN | POLLOUT)));
    epoll_ctl(ep, EPOLL_CTL_DEL, r[1][0], NULL);

    /* a wait that a signal ends, and one a signal the mask lets through ends */
    handle(SIGALRM, 0);
    struct itimerval it = {{0, 0}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    a = R(epoll_wait(ep, evs, 4, -1));
    say("epoll_wait and SIGALRM: %s, caught %s\n", a, sig(caught));
    sigset_t block, empty;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigemptyset(&empty);
    sigprocmask(SIG_BLOCK, &block, NULL);
    handle(SIGUSR1, SA_RESTART);
    raise(SIGUSR1);
    caught = 0;
    a = R(epoll_pwait(ep, evs, 4, -1, &empty));
    say("epoll_pwait letting a pending SIGUSR1 in: %s, caught %s; ", a, sig(caught));
    int idle[2];
    pipe(idle);
    raise(SIGUSR1);
    caught = 0;
    struct pollfd none = {idle[0], POLLIN, 0};
    a = R(ppoll(&none, 1, NULL, &empty));
    say("ppoll: %s, caught %s; ", a, sig(caught));
    raise(SIGUSR1);
    caught = 0;
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(idle[0], &rd);
    a = R(pselect(idle[0] + 1, &rd, NULL, NULL, NULL, &empty));
    say("pselect: %s, caught %s; ", a, sig(caught));
    raise(SIGUSR1);
    caught = 0;
    a = R(sigsuspend(&empty));
    say("sigsuspend: %s, caught %s\n", a, sig(caught));
    sigprocmask(SIG_UNBLOCK, &block, NULL);

    /* shared across fork: the child adds a pipe, the parent sees it; a child's write wakes the parent */
    int s[2];
    pipe(s);
    pid_t pid = fork();
    if (!pid) {
        struct epoll_event ce = {.events = EPOLLIN, .data.u64 = 40};
        say("child adds: %s\n", R(epoll_ctl(ep, EPOLL_CTL_ADD, s[0], &ce)));
        _exit(0);
    }
    reap(pid);
    pid = fork();
    if (!pid) {
        msleep(10);
        write(s[1], "y", 1);
        _exit(0);
    }
    n = epoll_list(ep, 4, -1, list);
    say("parent waits: %d %s\n", n, list);
    reap(pid);
    read(s[0], &c, 1);

    /* a thread waits, another writes */
    pthread_t t;
    pthread_create(&t, NULL, epoll_waiter, &ep);
    msleep(10);
    write(s[1], "z", 1);
    pthread_join(t, NULL);
    return 0;
}

/* -- eventfd, timerfd, signalfd ------------------------------------------------------------------ */

static void *eventfd_writer(void *arg)
{
    msleep(5);
    uint64_t one = 7;
    write(*(int *)arg, &one, 8);
    return NULL;
}

static int mode_eventfd(void)
{
    uint64_t v = 0;
    say("bad flags: %s\n", R(eventfd(0, 0x1234)));
    int fd = eventfd(3, EFD_NONBLOCK);
    say("poll: %s\n", bits(revents(fd, POLLIN | POLLOUT)));
    say("read 4 bytes: %s; ", R(read(fd, &v, 4)));
    const char *a = R(read(fd, &v, 8));
    say("read: %s value %llu; ", a, (unsigned long long)v);
    say("again: %s\n", R(read(fd, &v, 8)));
    v = 0xffffffffffffffffULL;
    say("write -1: %s; ", R(write(fd, &v, 8)));
    v = 0xfffffffffffffffeULL;
    say("write max: %s; ", R(write(fd, &v, 8)));
    v = 1;
    a = R(write(fd, &v, 8));
    say("one more: %s; poll: %s\n", a, bits(revents(fd, POLLIN | POLLOUT)));
    close(fd);
    fd = eventfd(2, EFD_SEMAPHORE | EFD_NONBLOCK);
    for (int i = 0; i < 3; i++) {
        v = 0;
        a = R(read(fd, &v, 8));
        say("semaphore read: %s value %llu\n", a, (unsigned long long)v);
    }
    close(fd);
    fd = eventfd(0, 0);
    pid_t pid = fork();
    if (!pid) {
        msleep(10);
        uint64_t two = 2;
        write(fd, &two, 8);
        _exit(0);
    }
    v = 0;
    a = R(read(fd, &v, 8));
    say("blocking read woken by a child: %s value %llu\n", a, (unsigned long long)v);
    reap(pid);
    pthread_t t;
    pthread_create(&t, NULL, eventfd_writer, &fd);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 5}, got;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    int n = epoll_wait(ep, &got, 1, -1);
    say("epoll woken by a thread: %d data %llu\n", n, (unsigned long long)got.data.u64);
    pthread_join(t, NULL);
    read(fd, &v, 8);
    say("value %llu\n", (unsigned long long)v);
    return 0;
}

static int mode_timerfd(void)
{
    uint64_t n = 0;
    const char *a = R(timerfd_create(12345, 0)), *b = R(timerfd_create(CLOCK_MONOTONIC, 0x1234)), *x;
    say("bad clock: %s, bad flags: %s\n", a, b);
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct itimerspec its = {{0, 0}, {0, 0}}, old;
    say("unarmed read: %s; ", R(read(fd, &n, 8)));
    timerfd_gettime(fd, &old);
    say("gettime: %ld %ld\n", (long)old.it_value.tv_sec, old.it_value.tv_nsec);
    its.it_value.tv_nsec = 2000000000L;
    a = R(timerfd_settime(fd, 0, &its, NULL));
    b = R(timerfd_settime(fd, 0x100, &its, NULL));
    x = R(timerfd_settime(0, 0, &its, NULL));
    say("bad nsec: %s, bad flags: %s, not a timerfd: %s\n", a, b, x);
    its.it_value.tv_sec = 0;
    its.it_value.tv_nsec = 20000000;
    its.it_interval.tv_nsec = 10000000;
    timerfd_settime(fd, 0, &its, NULL);
    timerfd_gettime(fd, &old);
    say("armed: interval %ld ms, value set: %d; poll: %s\n", old.it_interval.tv_nsec / 1000000,
        old.it_value.tv_nsec > 0 && old.it_value.tv_nsec <= 20000000, bits(revents(fd, POLLIN)));
    msleep(45);
    x = bits(revents(fd, POLLIN));
    a = R(read(fd, &n, 8));
    say("after 45 ms: poll %s read %s count %llu; ", x, a, (unsigned long long)n);
    say("again: %s\n", R(read(fd, &n, 8)));
    struct itimerspec off = {{0, 0}, {0, 0}};
    timerfd_settime(fd, 0, &off, &old);
    say("disarmed: old interval %ld ms\n", old.it_interval.tv_nsec / 1000000);
    close(fd);

    /* blocking, one-shot, on each clock, relative and absolute */
    int clocks[] = {CLOCK_MONOTONIC, CLOCK_REALTIME, CLOCK_BOOTTIME};
    const char *names[] = {"MONOTONIC", "REALTIME", "BOOTTIME"};
    for (int i = 0; i < 3; i++) {
        fd = timerfd_create(clocks[i], 0);
        struct timespec now;
        clock_gettime(clocks[i], &now);
        struct itimerspec abs = {{0, 0}, {now.tv_sec, now.tv_nsec + 15000000}};
        if (abs.it_value.tv_nsec >= 1000000000L) {
            abs.it_value.tv_sec++;
            abs.it_value.tv_nsec -= 1000000000L;
        }
        timerfd_settime(fd, TFD_TIMER_ABSTIME, &abs, NULL);
        n = 0;
        a = R(read(fd, &n, 8));
        say("%s absolute: read %s count %llu; ", names[i], a, (unsigned long long)n);
        struct itimerspec rel = {{0, 0}, {0, 5000000}};
        timerfd_settime(fd, 0, &rel, NULL);
        n = 0;
        a = R(read(fd, &n, 8));
        say("relative: read %s count %llu\n", a, (unsigned long long)n);
        close(fd);
    }
    fd = timerfd_create(CLOCK_MONOTONIC, 0);
    struct itimerspec past = {{0, 0}, {1, 0}};
    timerfd_settime(fd, TFD_TIMER_ABSTIME, &past, NULL);
    say("absolute time already past: poll %s\n", bits(revents(fd, POLLIN)));
    close(fd);

    /* epoll edge: one edge per expiry before a read, however many intervals passed */
    fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = 9}, got;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    struct itimerspec per = {{0, 10000000}, {0, 10000000}};
    timerfd_settime(fd, 0, &per, NULL);
    say("epoll: %d; ", epoll_wait(ep, &got, 1, -1));
    msleep(25);
    say("after 25 ms more: %d; ", epoll_wait(ep, &got, 1, 0));
    read(fd, &n, 8);
    say("read %llu; ", (unsigned long long)n);
    say("next edge: %d\n", epoll_wait(ep, &got, 1, -1));
    return 0;
}

static int mode_signalfd(void)
{
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGUSR2);
    sigaddset(&mask, SIGRTMIN + 1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    const char *a = R(syscall(SYS_signalfd4, -1, &mask, 4, 0)), *b = R(signalfd(-1, &mask, 0x1234));
    say("bad size: %s, bad flags: %s\n", a, b);
    int fd = signalfd(-1, &mask, SFD_NONBLOCK);
    struct signalfd_siginfo si;
    a = R(read(fd, &si, sizeof si));
    b = R(read(fd, &si, 8));
    say("nothing pending: %s, small buffer: %s, poll %s\n", a, b, bits(revents(fd, POLLIN)));
    raise(SIGUSR2);
    kill(getpid(), SIGUSR1);
    say("two pending, poll %s\n", bits(revents(fd, POLLIN)));
    struct signalfd_siginfo two[2];
    long got = read(fd, two, sizeof two);
    say("read %ld: %s code %d pid-is-mine %d; %s code %d\n", got, sig((int)two[0].ssi_signo), two[0].ssi_code,
        two[0].ssi_pid == (uint32_t)getpid(), sig((int)two[1].ssi_signo), two[1].ssi_code);
    sigset_t pending;
    sigpending(&pending);
    say("still pending: %d %d; poll %s\n", sigismember(&pending, SIGUSR1), sigismember(&pending, SIGUSR2),
        bits(revents(fd, POLLIN)));
    union sigval value = {.sival_int = 4242};
    sigqueue(getpid(), SIGRTMIN + 1, value);
    read(fd, &si, sizeof si);
    say("queued: %s+1 code %d int %d\n", si.ssi_signo == (uint32_t)SIGRTMIN + 1 ? "SIGRTMIN" : "?", si.ssi_code,
        si.ssi_int);

    /* a child's signal, read by a blocking read */
    int blocking = signalfd(-1, &mask, 0);
    pid_t parent = getpid(), pid = fork();
    if (!pid) {
        msleep(10);
        kill(parent, SIGUSR2);
        _exit(0);
    }
    read(blocking, &si, sizeof si);
    say("from the child: %s code %d pid-is-child %d\n", sig((int)si.ssi_signo), si.ssi_code, si.ssi_pid == (uint32_t)pid);
    reap(pid);

    /* the mask changed through the same descriptor; epoll on it */
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, SIGUSR1);
    int same = signalfd(fd, &only, 0) == fd;
    say("new mask: same fd %d; not a signalfd: %s\n", same, R(signalfd(0, &only, 0)));
    raise(SIGUSR2);
    say("USR2 outside the mask: poll %s; ", bits(revents(fd, POLLIN)));
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 3}, out;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    say("epoll: %d; ", epoll_wait(ep, &out, 1, 0));
    raise(SIGUSR1);
    say("USR1: epoll %d\n", epoll_wait(ep, &out, 1, 0));
    read(fd, &si, sizeof si);
    sigprocmask(SIG_SETMASK, NULL, &pending);
    sigpending(&pending);
    say("left pending: USR1 %d USR2 %d\n", sigismember(&pending, SIGUSR1), sigismember(&pending, SIGUSR2));
    return 0;
}

static int mode_inet(void);
static int mode_udp(void);
static int mode_offline(const char *host_socket);
static int mode_fuzz(void);
static uint64_t seed;

/* -- AF_UNIX ---------------------------------------------------------------------------------- */

static int optint(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    if (getsockopt(fd, level, name, &v, &len) < 0)
        return -errno;
    return v;
}
static const char *setint(int fd, int level, int name, int v)
{
    return R(setsockopt(fd, level, name, &v, sizeof v));
}
/* send descriptors (and one byte) with SCM_RIGHTS */
static long send_fds(int sock, const int *fds, int n)
{
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    return sendmsg(sock, &m, 0);
}
/* receive descriptors into fds (room for `room`): how many came, and the message's flags */
static int recv_fds(int sock, int *fds, int room, int *flags)
{
    char byte;
    struct iovec iov = {&byte, 1};
    union { char buf[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } u;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = CMSG_LEN(room * sizeof(int))};
    if (recvmsg(sock, &m, MSG_CMSG_CLOEXEC) < 0)
        return -errno;
    *flags = m.msg_flags;
    int got = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            got = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            memcpy(fds, CMSG_DATA(c), got * sizeof(int));
        }
    return got;
}
static struct sockaddr_un un_addr(const char *path, socklen_t *len)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (path[0]) {
        strcpy(a.sun_path, path);
        *len = offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1;
    } else {
        strcpy(a.sun_path + 1, path + 1);
        *len = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(path + 1);
    }
    return a;
}
static int pipes;
static void on_pipe(int s)
{
    (void)s;
    pipes++;
}

static void *unix_acceptor(void *arg)
{
    int l = *(int *)arg;
    int c = accept(l, NULL, NULL);
    char buf[16] = {0};
    read(c, buf, sizeof buf - 1);
    say("thread accepted and read: %s\n", buf);
    close(c);
    return NULL;
}

static int mode_unix(void)
{
    const char *a, *b;
    char buf[256];
    int sv[2];
    signal(SIGPIPE, on_pipe);
    say("socketpair(AF_INET): %s; type 99: %s\n", R(socketpair(AF_INET, SOCK_STREAM, 0, sv)),
        R(socketpair(AF_UNIX, 99, 0, sv)));
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    say("type %d domain %d protocol %d acceptconn %d error %d sndbuf %d rcvbuf %d cloexec %d\n",
        optint(sv[0], SOL_SOCKET, SO_TYPE), optint(sv[0], SOL_SOCKET, SO_DOMAIN), optint(sv[0], SOL_SOCKET, SO_PROTOCOL),
        optint(sv[0], SOL_SOCKET, SO_ACCEPTCONN), optint(sv[0], SOL_SOCKET, SO_ERROR), optint(sv[0], SOL_SOCKET, SO_SNDBUF),
        optint(sv[0], SOL_SOCKET, SO_RCVBUF), fcntl(sv[0], F_GETFD) & FD_CLOEXEC);
    a = setint(sv[0], SOL_SOCKET, SO_SNDBUF, 1000);
    say("SO_SNDBUF 1000: %s -> %d; ", a, optint(sv[0], SOL_SOCKET, SO_SNDBUF));
    a = setint(sv[0], SOL_SOCKET, SO_REUSEADDR, 5);
    say("SO_REUSEADDR: %s -> %d; ", a, optint(sv[0], SOL_SOCKET, SO_REUSEADDR));
    a = setint(sv[0], SOL_SOCKET, SO_REUSEPORT, 1);
    b = setint(sv[0], SOL_SOCKET, 9999, 1);
    say("SO_REUSEPORT: %s; unknown: %s; ", a, b);
    a = setint(sv[0], IPPROTO_TCP, TCP_NODELAY, 1);
    short small = 1;
    b = R(setsockopt(sv[0], SOL_SOCKET, SO_KEEPALIVE, &small, sizeof small));
    say("TCP_NODELAY: %s; short: %s; get TCP_NODELAY: %d\n", a, b, optint(sv[0], IPPROTO_TCP, TCP_NODELAY));
    struct sockaddr_un name;
    socklen_t len = sizeof name;
    getsockname(sv[0], (struct sockaddr *)&name, &len);
    say("pair name: len %d family %d; ", (int)len, name.sun_family);
    len = sizeof name;
    getpeername(sv[0], (struct sockaddr *)&name, &len);
    say("peer: len %d; of a pipe: %s\n", (int)len, R(getpeername(0, (struct sockaddr *)&name, &len)));
    say("poll fresh: %s; ", bits(revents(sv[0], POLLIN | POLLOUT | POLLRDHUP)));
    write(sv[1], "hello", 5);
    say("after a write: %s; FIONREAD ", bits(revents(sv[0], POLLIN | POLLOUT | POLLRDHUP)));
    int avail = -1;
    ioctl(sv[0], FIONREAD, &avail);
    say("%d\n", avail);
    memset(buf, 0, sizeof buf);
    a = R(recv(sv[0], buf, 3, MSG_PEEK));
    say("peek %s '%s'; ", a, buf);
    memset(buf, 0, sizeof buf);
    a = R(recv(sv[0], buf, sizeof buf, 0));
    say("recv %s '%s'; ", a, buf);
    say("empty, MSG_DONTWAIT: %s\n", R(recv(sv[0], buf, sizeof buf, MSG_DONTWAIT)));

    /* a child writes, the parent reads to the end */
    pid_t pid = fork();
    if (!pid) {
        close(sv[0]);
        write(sv[1], "from the child", 14);
        _exit(0);
    }
    close(sv[1]);
    long total = 0, n;
    while ((n = read(sv[0], buf, sizeof buf)) > 0)
        total += n;
    say("read to the end: %ld then %s; poll %s\n", total, R(n), bits(revents(sv[0], POLLIN | POLLOUT | POLLRDHUP)));
    pipes = 0;
    a = R(write(sv[0], "x", 1));
    b = R(send(sv[0], "x", 1, MSG_NOSIGNAL));
    say("write to a closed peer: %s, SIGPIPE %d; MSG_NOSIGNAL: %s, SIGPIPE %d\n", a, pipes, b, pipes);
    reap(pid);
    close(sv[0]);

    /* shutdown; a close with bytes unread resets the peer */
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    say("shutdown 7: %s; ", R(shutdown(sv[0], 7)));
    shutdown(sv[0], SHUT_WR);
    a = R(read(sv[1], buf, sizeof buf));
    say("SHUT_WR: peer reads %s, poll %s; ", a, bits(revents(sv[1], POLLIN | POLLOUT | POLLRDHUP)));
    a = R(write(sv[0], "x", 1));
    say("write %s SIGPIPE %d; peer writes %s\n", a, pipes, R(write(sv[1], "back", 4)));
    write(sv[0 + 1], "more", 4);
    close(sv[1]);
    a = R(read(sv[0], buf, sizeof buf));
    b = R(read(sv[0], buf, sizeof buf));
    say("peer closed: read %s, %s\n", a, b);
    close(sv[0]);
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    write(sv[1], "unread", 6);
    close(sv[1]);
    write(sv[0], "unread too", 10);
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    write(sv[0], "unread", 6);
    close(sv[1]);
    b = bits(revents(sv[0], POLLIN | POLLOUT));
    a = R(read(sv[0], buf, sizeof buf));
    say("closed with bytes unread: poll %s, read %s, ", b, a);
    say("then %s\n", R(read(sv[0], buf, sizeof buf)));
    close(sv[0]);

    /* Linux's buffer limits, non-blocking */
    static char big[1 << 20];
    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv);
    total = 0;
    while ((n = write(sv[0], big, sizeof big)) > 0)
        total += n;
    say("stream fills at %ld (%s), poll %s; ", total, en(errno), bits(revents(sv[0], POLLOUT)));
    total = 0;
    while ((n = read(sv[1], big, 4096)) > 0)
        total += n;
    say("read %ld, poll %s\n", total, bits(revents(sv[0], POLLOUT)));
    close(sv[0]);
    close(sv[1]);
    socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, sv);
    int count = 0;
    while (write(sv[0], "d", 1) == 1)
        count++;
    say("datagrams of 1 byte: %d (%s); ", count, en(errno));
    a = R(write(sv[0], big, 212992 - 31));
    say("too big: %s\n", a);
    close(sv[0]);
    close(sv[1]);

    /* a blocked writer and a slow reader across fork */
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pid = fork();
    if (!pid) {
        close(sv[0]);
        long w = write(sv[1], big, 300000);
        say("child wrote %ld\n", w);
        _exit(0);
    }
    close(sv[1]);
    msleep(10);
    total = 0;
    while ((n = read(sv[0], big, 50000)) > 0)
        total += n;
    reap(pid);
    say("parent read %ld\n", total);
    close(sv[0]);

    /* datagrams: boundaries, truncation, a closed peer */
    socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
    send(sv[0], "0123456789", 10, 0);
    send(sv[0], "ab", 2, 0);
    send(sv[0], "xyz", 3, 0);
    struct iovec iov = {buf, 4};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    n = recvmsg(sv[1], &m, 0);
    say("dgram: %ld flags %s; ", n, m.msg_flags & MSG_TRUNC ? "TRUNC" : "0");
    a = R(recv(sv[1], buf, 1, MSG_TRUNC));
    b = R(recv(sv[1], buf, sizeof buf, 0));
    say("MSG_TRUNC: %s; next %s\n", a, b);
    close(sv[1]);
    a = R(send(sv[0], "x", 1, 0));
    b = R(send(sv[0], "x", 1, 0));
    say("dgram to a closed peer: %s then %s\n", a, b);
    close(sv[0]);

    /* seqpacket keeps boundaries and ends */
    socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv);
    send(sv[0], "ab", 2, 0);
    send(sv[0], "cde", 3, 0);
    close(sv[0]);
    a = R(recv(sv[1], buf, sizeof buf, 0));
    b = R(recv(sv[1], buf, sizeof buf, 0));
    say("seqpacket: %s %s then %s\n", a, b, R(recv(sv[1], buf, sizeof buf, 0)));
    close(sv[1]);

    /* SCM_RIGHTS: a pipe's write end goes to a child, which writes through it */
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    int p[2];
    pipe(p);
    pid = fork();
    if (!pid) {
        close(sv[0]);
        int fds[4] = {-1, -1, -1, -1}, flags = 0;
        int got = recv_fds(sv[1], fds, 4, &flags);
        say("child got %d descriptor(s), cloexec %d\n", got, got > 0 ? fcntl(fds[0], F_GETFD) & FD_CLOEXEC : -1);
        write(fds[0], "through a passed fd", 19);
        _exit(0);
    }
    close(sv[1]);
    a = R(send_fds(sv[0], &p[1], 1));
    close(p[1]);
    reap(pid);
    say("sent a pipe end: %s\n", a);
    memset(buf, 0, sizeof buf);
    a = R(read(p[0], buf, sizeof buf));
    say("parent read '%s' (%s), then %s\n", buf, a, R(read(p[0], buf, sizeof buf)));
    close(p[0]);
    int two[2] = {0, 1}, got[4], flags = 0;
    socketpair(AF_UNIX, SOCK_DGRAM, 0, sv);
    send_fds(sv[0], two, 2);
    n = recv_fds(sv[1], got, 1, &flags);
    say("two fds, room for one: %ld %s; bad fd: %s\n", n, flags & MSG_CTRUNC ? "CTRUNC" : "0",
        R(send_fds(sv[0], (int[]){999}, 1)));
    close(sv[0]);
    close(sv[1]);

    /* names in the file system */
    char path[64], other[64];
    snprintf(path, sizeof path, "/tmp/kpsdk-sockets-%d.sock", (int)getpid());
    snprintf(other, sizeof other, "/tmp/kpsdk-sockets-%d.none", (int)getpid());
    unlink(path);
    socklen_t alen;
    struct sockaddr_un addr = un_addr(path, &alen), none = un_addr(other, &alen);
    alen = offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1;
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    say("listen unbound: %s; ", R(listen(l, 5)));
    say("bind: %s; ", R(bind(l, (struct sockaddr *)&addr, alen)));
    struct stat st;
    stat(path, &st);
    say("a socket file: %d; again: %s; ", S_ISSOCK(st.st_mode), R(bind(l, (struct sockaddr *)&addr, alen)));
    int l2 = socket(AF_UNIX, SOCK_STREAM, 0);
    say("another there: %s\n", R(bind(l2, (struct sockaddr *)&addr, alen)));
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    a = R(connect(c, (struct sockaddr *)&addr, alen));
    b = R(accept(l, NULL, NULL));
    say("not listening: connect %s accept %s; ", a, b);
    listen(l, 5);
    len = sizeof name;
    getsockname(l, (struct sockaddr *)&name, &len);
    say("name: the path's length %d same %d\n", len == alen, !strcmp(name.sun_path, path));
    pid = fork();
    if (!pid) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        const char *r = R(connect(s, (struct sockaddr *)&addr, alen));
        socklen_t plen = sizeof name;
        getpeername(s, (struct sockaddr *)&name, &plen);
        say("child connect: %s, peer is the path %d, again %s\n", r, !strcmp(name.sun_path, path),
            R(connect(s, (struct sockaddr *)&addr, alen)));
        write(s, "hi", 2);
        _exit(0);
    }
    len = sizeof name;
    int s = accept(l, (struct sockaddr *)&name, &len);
    reap(pid);
    memset(buf, 0, sizeof buf);
    read(s, buf, sizeof buf);
    say("accepted: client name len %d; read '%s'; ", (int)len, buf);
    len = sizeof name;
    getsockname(s, (struct sockaddr *)&name, &len);
    say("its own name is the path %d\n", !strcmp(name.sun_path, path));
    close(s);
    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    a = R(connect(d, (struct sockaddr *)&addr, alen));
    b = R(connect(c, (struct sockaddr *)&none, offsetof(struct sockaddr_un, sun_path) + strlen(other) + 1));
    say("dgram to a stream: %s; missing path: %s; ", a, b);
    int file = open(other, O_CREAT | O_WRONLY, 0600);
    close(file);
    a = R(connect(c, (struct sockaddr *)&none, offsetof(struct sockaddr_un, sun_path) + strlen(other) + 1));
    unlink(other);
    say("a regular file: %s\n", a);
    pthread_t t;
    pthread_create(&t, NULL, unix_acceptor, &l);
    msleep(5);
    int c2 = socket(AF_UNIX, SOCK_STREAM, 0);
    connect(c2, (struct sockaddr *)&addr, alen);
    write(c2, "to the thread", 13);
    pthread_join(t, NULL);
    close(l);
    a = R(connect(socket(AF_UNIX, SOCK_STREAM, 0), (struct sockaddr *)&addr, alen));
    unlink(path);
    b = R(connect(socket(AF_UNIX, SOCK_STREAM, 0), (struct sockaddr *)&addr, alen));
    say("listener closed: %s; unlinked: %s\n", a, b);

    /* abstract names, autobind, datagrams by name */
    char abstract[32];
    snprintf(abstract, sizeof abstract, "@kpsdk-%d", (int)getpid());
    abstract[0] = 0;
    socklen_t ablen;
    struct sockaddr_un ab = un_addr(abstract, &ablen);
    int d1 = socket(AF_UNIX, SOCK_DGRAM, 0), d2 = socket(AF_UNIX, SOCK_DGRAM, 0);
    a = R(bind(d1, (struct sockaddr *)&ab, ablen));
    b = R(bind(d2, (struct sockaddr *)&ab, ablen));
    int st1 = socket(AF_UNIX, SOCK_STREAM, 0);
    say("abstract: %s, taken %s, by a stream %s; ", a, b, R(bind(st1, (struct sockaddr *)&ab, ablen)));
    struct sockaddr_un auto_name = {.sun_family = AF_UNIX};
    a = R(bind(d2, (struct sockaddr *)&auto_name, offsetof(struct sockaddr_un, sun_path)));
    len = sizeof name;
    getsockname(d2, (struct sockaddr *)&name, &len);
    say("autobind %s: len %d abstract %d\n", a, (int)len, name.sun_path[0] == 0);
    sendto(d2, "to d1", 5, 0, (struct sockaddr *)&ab, ablen);
    struct sockaddr_un from;
    socklen_t flen = sizeof from;
    memset(buf, 0, sizeof buf);
    n = recvfrom(d1, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen);
    say("recvfrom %ld '%s': from d2 %d; ", n, buf, flen == len && !memcmp(&from, &name, len));
    flen = sizeof from;
    sendto(d, "anon", 4, 0, (struct sockaddr *)&ab, ablen);
    recvfrom(d1, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen);
    say("from an unbound one: len %d\n", (int)flen);

    /* credentials: SO_PEERCRED, SCM_CREDENTIALS with SO_PASSCRED */
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    struct ucred uc;
    len = sizeof uc;
    getsockopt(sv[0], SOL_SOCKET, SO_PEERCRED, &uc, &len);
    say("SO_PEERCRED: len %d pid-is-mine %d uid %d\n", (int)len, uc.pid == getpid(), uc.uid == getuid());
    setint(sv[1], SOL_SOCKET, SO_PASSCRED, 1);
    pid = fork();
    if (!pid) {
        write(sv[0], "c", 1);
        _exit(0);
    }
    reap(pid);
    char byte;
    struct iovec one = {&byte, 1};
    union { char b[CMSG_SPACE(sizeof(struct ucred))]; struct cmsghdr align; } cu;
    struct msghdr cm = {.msg_iov = &one, .msg_iovlen = 1, .msg_control = cu.b, .msg_controllen = sizeof cu.b};
    n = recvmsg(sv[1], &cm, 0);
    struct cmsghdr *ch = CMSG_FIRSTHDR(&cm);
    struct ucred sent;
    memcpy(&sent, CMSG_DATA(ch), sizeof sent);
    say("SCM_CREDENTIALS: %ld, level %d type %d, pid-is-child %d uid %d\n", n, ch->cmsg_level == SOL_SOCKET,
        ch->cmsg_type == SCM_CREDENTIALS, sent.pid == pid, sent.uid == getuid());

    /* readv takes what a read would, across the vectors; SHUT_RD stops the peer's writes */
    write(sv[0], "abcdefgh", 8);
    char x1[3] = {0}, x2[16] = {0};
    struct iovec two_v[2] = {{x1, 2}, {x2, 10}};
    n = readv(sv[1], two_v, 2);
    say("readv %ld '%s' '%s'; ", n, x1, x2);
    shutdown(sv[1], SHUT_RD);
    a = R(write(sv[0], "x", 1));
    say("after the peer's SHUT_RD: write %s, the reader reads %s\n", a, R(read(sv[1], buf, sizeof buf)));
    close(sv[0]);
    close(sv[1]);

    /* accept4's flags */
    snprintf(abstract, sizeof abstract, "@kpsdk-a-%d", (int)getpid());
    abstract[0] = 0;
    ab = un_addr(abstract, &ablen);
    l = socket(AF_UNIX, SOCK_STREAM, 0);
    bind(l, (struct sockaddr *)&ab, ablen);
    listen(l, 1);
    c = socket(AF_UNIX, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&ab, ablen);
    a = R(accept4(l, NULL, NULL, 0x1234));
    s = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    say("accept4 bad flags %s; O_NONBLOCK %d FD_CLOEXEC %d\n", a, !!(fcntl(s, F_GETFL) & O_NONBLOCK),
        fcntl(s, F_GETFD) & FD_CLOEXEC);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "epoll"))
        return mode_epoll();
    if (!strcmp(mode, "eventfd"))
        return mode_eventfd();
    if (!strcmp(mode, "timerfd"))
        return mode_timerfd();
    if (!strcmp(mode, "signalfd"))
        return mode_signalfd();
    if (!strcmp(mode, "unix"))
        return mode_unix();
    if (!strcmp(mode, "tcp"))
        return mode_inet();
    if (!strcmp(mode, "udp"))
        return mode_udp();
    if (!strcmp(mode, "offline") && argc > 2)
        return mode_offline(argv[2]);
    if (!strcmp(mode, "fuzz")) {
        seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 42;
        return mode_fuzz();
    }
    fprintf(stderr, "usage: sockets epoll|eventfd|timerfd|signalfd|unix|tcp|udp|offline PATH\n");
    return 2;
}

/* -- TCP on the loopback ------------------------------------------------------------------------ */

static struct sockaddr_in in4(const char *host, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, host, &a.sin_addr);
    return a;
}
static int port_of(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    return ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port : ((struct sockaddr_in6 *)&a)->sin6_port);
}
/* an address's host as text (no port: those are the kernel's choice) */
static const char *host_of(struct sockaddr_storage *a)
{
    static char out[4][INET6_ADDRSTRLEN];
    static int k;
    char *s = out[k++ % 4];
    if (a->ss_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)a)->sin_addr, s, INET6_ADDRSTRLEN);
    else if (a->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)a)->sin6_addr, s, INET6_ADDRSTRLEN);
    else
        snprintf(s, INET6_ADDRSTRLEN, "family %d", a->ss_family);
    return s;
}
static const char *peer_host(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    if (getpeername(fd, (struct sockaddr *)&a, &len) < 0)
        return en(errno);
    return host_of(&a);
}
static const char *own_host(int fd)
{
    struct sockaddr_storage a;
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    return host_of(&a);
}
/* a port nobody listens on: bound, then freed */
static int closed_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = in4("127.0.0.1", 0);
    bind(s, (struct sockaddr *)&a, sizeof a);
    int port = port_of(s);
    close(s);
    return port;
}

static void *echo_server(void *arg)
{
    int l = *(int *)arg;
    for (int i = 0; i < 2; i++) {
        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        char buf[64];
        long n;
        while ((n = read(c, buf, sizeof buf)) > 0)
            write(c, buf, n);
        close(c);
    }
    return NULL;
}

static int mode_inet(void)
{
    const char *a, *b;
    char buf[256];
    signal(SIGPIPE, on_pipe);
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    say("type %d protocol %d domain %d; port before bind %d, host %s; ", optint(l, SOL_SOCKET, SO_TYPE),
        optint(l, SOL_SOCKET, SO_PROTOCOL), optint(l, SOL_SOCKET, SO_DOMAIN), port_of(l), own_host(l));
    say("peer: %s\n", peer_host(l));
    struct sockaddr_in away = in4("192.0.2.1", 0), lo = in4("127.0.0.1", 0);
    a = R(bind(l, (struct sockaddr *)&away, sizeof away));
    b = R(bind(l, (struct sockaddr *)&lo, 8));
    say("bind 192.0.2.1: %s; short: %s; ", a, b);
    a = R(bind(l, (struct sockaddr *)&lo, sizeof lo));
    b = R(bind(l, (struct sockaddr *)&lo, sizeof lo));
    int port = port_of(l);
    say("bind: %s, ephemeral %d, again %s\n", a, port >= 32768 && port <= 60999, b);
    a = R(send(l, "x", 1, 0));
    say("send unconnected: %s SIGPIPE %d; ", a, pipes);
    say("recv unconnected: %s; ", R(recv(l, buf, 1, MSG_DONTWAIT)));
    say("accept unlistening: %s; ", R(accept(l, NULL, NULL)));
    a = R(listen(l, 4));
    say("listen: %s, acceptconn %d, poll %s\n", a, optint(l, SOL_SOCKET, SO_ACCEPTCONN),
        bits(revents(l, POLLIN | POLLOUT)));
    struct sockaddr_in at = in4("127.0.0.1", port);
    int l2 = socket(AF_INET, SOCK_STREAM, 0);
    a = R(bind(l2, (struct sockaddr *)&at, sizeof at));
    setint(l, SOL_SOCKET, SO_REUSEADDR, 1);
    setint(l2, SOL_SOCKET, SO_REUSEADDR, 1);
    b = R(bind(l2, (struct sockaddr *)&at, sizeof at));
    close(l2);
    say("same port: %s; both SO_REUSEADDR, one listening: %s\n", a, b);

    /* a child connects, the parent accepts */
    pid_t pid = fork();
    if (!pid) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        a = R(connect(c, (struct sockaddr *)&at, sizeof at));
        b = setint(c, IPPROTO_TCP, TCP_NODELAY, 1);
        write(c, "ping", 4);
        memset(buf, 0, sizeof buf);
        read(c, buf, sizeof buf); /* the parent has printed its lines: this one comes after them */
        say("child: connect %s, peer %s, own %s; ", a, peer_host(c), own_host(c));
        say("TCP_NODELAY %s -> %d\n", b, optint(c, IPPROTO_TCP, TCP_NODELAY));
        a = R(shutdown(c, SHUT_WR));
        say("child: got '%s', shut its side %s\n", buf, a);
        close(c);
        _exit(0);
    }
    struct sockaddr_storage from;
    socklen_t len = sizeof from;
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(l, &rd);
    a = R(select(l + 1, &rd, NULL, NULL, NULL));
    say("select on the listener: %s %d\n", a, FD_ISSET(l, &rd));
    int s = accept(l, (struct sockaddr *)&from, &len);
    say("accepted from %s, len %d, own %s, port %d\n", host_of(&from), (int)len, own_host(s), port_of(s) == port);
    memset(buf, 0, sizeof buf);
    long n = recv(s, buf, 4, MSG_WAITALL);
    say("read %ld '%s'\n", n, buf);
    write(s, "pong", 4);
    reap(pid);
    a = R(read(s, buf, sizeof buf));
    say("after the child: read %s, poll %s\n", a, bits(revents(s, POLLIN | POLLOUT | POLLRDHUP)));
    pipes = 0;
    a = R(write(s, "late", 4));
    msleep(10);
    b = bits(revents(s, POLLIN | POLLOUT | POLLRDHUP));
    say("a write to a closed peer: %s, then poll %s, ", a, b);
    a = R(write(s, "late", 4));
    say("write %s SIGPIPE %d; ", a, pipes);
    say("write %s\n", R(write(s, "late", 4)));
    close(s);

    /* refused, at once and through a non-blocking connect */
    struct sockaddr_in dead = in4("127.0.0.1", closed_port());
    int c = socket(AF_INET, SOCK_STREAM, 0);
    say("refused: %s; ", R(connect(c, (struct sockaddr *)&dead, sizeof dead)));
    close(c);
    c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    a = R(connect(c, (struct sockaddr *)&dead, sizeof dead));
    msleep(10);
    say("non-blocking: %s, poll %s, ", a, bits(revents(c, POLLIN | POLLOUT | POLLRDHUP)));
    int e1 = optint(c, SOL_SOCKET, SO_ERROR), e2 = optint(c, SOL_SOCKET, SO_ERROR);
    say("SO_ERROR %s then %s\n", en(e1), en(e2));
    close(c);
    c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    a = R(connect(c, (struct sockaddr *)&at, sizeof at));
    msleep(10);
    b = bits(revents(c, POLLOUT));
    int e = optint(c, SOL_SOCKET, SO_ERROR);
    say("non-blocking to a listener: %s, poll %s, SO_ERROR %s, ", a, b, en(e));
    a = R(connect(c, (struct sockaddr *)&at, sizeof at));
    b = R(connect(c, (struct sockaddr *)&at, sizeof at));
    say("connect again %s, and again %s\n", a, b);
    s = accept(l, NULL, NULL);
    write(c, "unread", 6);
    msleep(10);
    close(s);
    msleep(10);
    a = bits(revents(c, POLLIN | POLLOUT | POLLRDHUP));
    b = R(read(c, buf, sizeof buf));
    say("closed with bytes unread: poll %s, read %s, ", a, b);
    say("then %s\n", R(read(c, buf, sizeof buf)));
    close(c);

    /* a receive timeout, then a threaded echo server */
    c = socket(AF_INET, SOCK_STREAM, 0);
    connect(c, (struct sockaddr *)&at, sizeof at);
    s = accept(l, NULL, NULL);
    struct timeval tv = {0, 20000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct timeval got_tv;
    len = sizeof got_tv;
    getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &got_tv, &len);
    say("SO_RCVTIMEO %ld us; recv: %s\n", (long)got_tv.tv_usec, R(recv(s, buf, 1, 0)));
    close(s);
    close(c);
    pthread_t t;
    pthread_create(&t, NULL, echo_server, &l);
    for (int i = 0; i < 2; i++) {
        c = socket(AF_INET, SOCK_STREAM, 0);
        connect(c, (struct sockaddr *)&at, sizeof at);
        char msg[32];
        snprintf(msg, sizeof msg, "echo %d", i);
        write(c, msg, strlen(msg));
        shutdown(c, SHUT_WR);
        memset(buf, 0, sizeof buf);
        long total = 0;
        while ((n = read(c, buf + total, sizeof buf - total)) > 0)
            total += n;
        say("echoed '%s', both sides shut: peer %s\n", buf, peer_host(c));
        close(c);
    }
    pthread_join(t, NULL);
    close(l);
    a = R(connect(socket(AF_INET, SOCK_STREAM, 0), (struct sockaddr *)&at, sizeof at));
    say("listener closed: %s\n", a);

    /* IPv6, and IPv4 clients of a dual-stack listener */
    int l6 = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 any6 = {.sin6_family = AF_INET6};
    setint(l6, SOL_SOCKET, SO_REUSEADDR, 1);
    a = R(bind(l6, (struct sockaddr *)&any6, sizeof any6));
    listen(l6, 4);
    int p6 = port_of(l6);
    say("v6 listener: %s, own %s; ", a, own_host(l6));
    struct sockaddr_in v4 = in4("127.0.0.1", p6);
    c = socket(AF_INET, SOCK_STREAM, 0);
    a = R(connect(c, (struct sockaddr *)&v4, sizeof v4));
    s = accept(l6, (struct sockaddr *)&from, &(socklen_t){sizeof from});
    say("v4 client: %s, seen as %s, server's own %s\n", a, host_of(&from), own_host(s));
    close(s);
    close(c);
    struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT, .sin6_port = htons(p6)};
    c = socket(AF_INET6, SOCK_STREAM, 0);
    a = R(connect(c, (struct sockaddr *)&lo6, sizeof lo6));
    s = accept(l6, (struct sockaddr *)&from, &(socklen_t){sizeof from});
    say("v6 client: %s, seen as %s, own %s\n", a, host_of(&from), own_host(c));
    close(s);
    close(c);
    close(l6);
    l6 = socket(AF_INET6, SOCK_STREAM, 0);
    setint(l6, SOL_SOCKET, SO_REUSEADDR, 1); /* the closed connection's TIME_WAIT holds the port */
    a = setint(l6, IPPROTO_IPV6, IPV6_V6ONLY, 1);
    any6.sin6_port = htons(p6);
    b = R(bind(l6, (struct sockaddr *)&any6, sizeof any6));
    listen(l6, 4);
    c = socket(AF_INET, SOCK_STREAM, 0);
    say("IPV6_V6ONLY %s, bind %s, v4 client %s\n", a, b, R(connect(c, (struct sockaddr *)&v4, sizeof v4)));
    return 0;
}

/* -- UDP on the loopback ------------------------------------------------------------------------ */

static int mode_udp(void)
{
    const char *a, *b;
    static char buf[70000];
    int r = socket(AF_INET, SOCK_DGRAM, 0), w = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in lo = in4("127.0.0.1", 0);
    bind(r, (struct sockaddr *)&lo, sizeof lo);
    struct sockaddr_in to = in4("127.0.0.1", port_of(r));
    say("type %d protocol %d; poll %s; ", optint(r, SOL_SOCKET, SO_TYPE), optint(r, SOL_SOCKET, SO_PROTOCOL),
        bits(revents(r, POLLIN | POLLOUT)));
    a = R(send(w, "x", 1, 0));
    b = R(listen(r, 1));
    say("send without an address: %s; listen: %s; shutdown: %s\n", a, b, R(shutdown(w, SHUT_RD)));
    struct sockaddr_in zero = in4("127.0.0.1", 0);
    say("to port 0: %s; ", R(sendto(w, "x", 1, 0, (struct sockaddr *)&zero, sizeof zero)));
    a = R(sendto(w, "one", 3, 0, (struct sockaddr *)&to, sizeof to));
    b = bits(revents(r, POLLIN | POLLOUT));
    say("sendto: %s; poll %s; ", a, b);
    struct sockaddr_storage from;
    socklen_t len = sizeof from;
    memset(buf, 0, 16);
    long n = recvfrom(r, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
    say("recvfrom %ld '%s' from %s, the sender's port %d\n", n, buf, host_of(&from),
        ntohs(((struct sockaddr_in *)&from)->sin_port) == port_of(w));
    sendto(w, "0123456789", 10, 0, (struct sockaddr *)&to, sizeof to);
    sendto(w, "abcdef", 6, 0, (struct sockaddr *)&to, sizeof to);
    struct iovec iov = {buf, 4};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    n = recvmsg(r, &m, 0);
    say("cut: %ld flags %s; ", n, m.msg_flags & MSG_TRUNC ? "TRUNC" : "0");
    say("MSG_TRUNC: %s; ", R(recv(r, buf, 2, MSG_TRUNC)));
    a = R(sendto(w, buf, 65508, 0, (struct sockaddr *)&to, sizeof to));
    b = R(sendto(w, buf, 65507, 0, (struct sockaddr *)&to, sizeof to));
    say("65508 bytes: %s; 65507: %s; ", a, b);
    say("received %s\n", R(recv(r, buf, sizeof buf, 0)));

    /* datagrams from a child, in order */
    pid_t pid = fork();
    if (!pid) {
        for (int i = 0; i < 3; i++) {
            char msg[16];
            snprintf(msg, sizeof msg, "child %d", i);
            sendto(w, msg, strlen(msg), 0, (struct sockaddr *)&to, sizeof to);
        }
        _exit(0);
    }
    for (int i = 0; i < 3; i++) {
        memset(buf, 0, 16);
        recv(r, buf, sizeof buf, 0);
        say("%s%s", i ? ", " : "", buf);
    }
    say("\n");
    reap(pid);

    /* a connected socket hears that nobody listens */
    int c = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in dead = in4("127.0.0.1", port_of(w) == 40000 ? 40001 : 40000);
    close(w);
    a = R(connect(c, (struct sockaddr *)&dead, sizeof dead));
    say("connect: %s, peer %s, own %s; ", a, peer_host(c), own_host(c));
    a = R(send(c, "x", 1, 0));
    msleep(10);
    b = bits(revents(c, POLLIN | POLLOUT));
    say("send %s, poll %s, ", a, b);
    a = R(recv(c, buf, 1, MSG_DONTWAIT));
    say("recv %s then %s\n", a, R(recv(c, buf, 1, MSG_DONTWAIT)));
    struct sockaddr unspec = {.sa_family = AF_UNSPEC};
    a = R(connect(c, &unspec, sizeof unspec));
    say("disconnect: %s, peer %s\n", a, peer_host(c));

    /* two sockets on one port with SO_REUSEADDR; IPv6 */
    int u1 = socket(AF_INET, SOCK_DGRAM, 0), u2 = socket(AF_INET, SOCK_DGRAM, 0);
    setint(u1, SOL_SOCKET, SO_REUSEADDR, 1);
    bind(u1, (struct sockaddr *)&lo, sizeof lo);
    struct sockaddr_in same = in4("127.0.0.1", port_of(u1));
    a = R(bind(u2, (struct sockaddr *)&same, sizeof same));
    setint(u2, SOL_SOCKET, SO_REUSEADDR, 1);
    b = R(bind(u2, (struct sockaddr *)&same, sizeof same));
    say("same port: %s, with SO_REUSEADDR: %s\n", a, b);
    int v6 = socket(AF_INET6, SOCK_DGRAM, 0);
    struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bind(v6, (struct sockaddr *)&lo6, sizeof lo6);
    lo6.sin6_port = htons(port_of(v6));
    int v6b = socket(AF_INET6, SOCK_DGRAM, 0);
    sendto(v6b, "six", 3, 0, (struct sockaddr *)&lo6, sizeof lo6);
    len = sizeof from;
    memset(buf, 0, 16);
    n = recvfrom(v6, buf, sizeof buf, 0, (struct sockaddr *)&from, &len);
    say("v6: %ld '%s' from %s len %d\n", n, buf, host_of(&from), (int)len);

    /* MSG_PEEK, sendmmsg and recvmmsg, epoll_pwait2 */
    sendto(v6b, "peeked", 6, 0, (struct sockaddr *)&lo6, sizeof lo6);
    memset(buf, 0, 16);
    a = R(recv(v6, buf, 4, MSG_PEEK));
    say("peek %s '%s'; ", a, buf);
    memset(buf, 0, 16);
    a = R(recv(v6, buf, sizeof buf, 0));
    say("then %s '%s'\n", a, buf);
    struct mmsghdr mm[3];
    struct iovec iv[3];
    char bufs[3][16];
    const char *texts[] = {"first", "second", "third"};
    memset(mm, 0, sizeof mm);
    for (int i = 0; i < 3; i++) {
        iv[i].iov_base = (void *)texts[i];
        iv[i].iov_len = strlen(texts[i]);
        mm[i].msg_hdr.msg_iov = &iv[i];
        mm[i].msg_hdr.msg_iovlen = 1;
        mm[i].msg_hdr.msg_name = &lo6;
        mm[i].msg_hdr.msg_namelen = sizeof lo6;
    }
    a = R(sendmmsg(v6b, mm, 3, 0));
    say("sendmmsg %s lens %u %u %u; ", a, mm[0].msg_len, mm[1].msg_len, mm[2].msg_len);
    memset(mm, 0, sizeof mm);
    memset(bufs, 0, sizeof bufs);
    for (int i = 0; i < 3; i++) {
        iv[i].iov_base = bufs[i];
        iv[i].iov_len = sizeof bufs[i];
        mm[i].msg_hdr.msg_iov = &iv[i];
        mm[i].msg_hdr.msg_iovlen = 1;
    }
    a = R(recvmmsg(v6, mm, 3, MSG_DONTWAIT, NULL));
    say("recvmmsg %s: %s %s %s\n", a, bufs[0], bufs[1], bufs[2]);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 6}, got;
    epoll_ctl(ep, EPOLL_CTL_ADD, v6, &ev);
    /* epoll_pwait2 takes the 64-bit __kernel_timespec on every arch (a 32-bit arch's struct
     * timespec is half of it: its nanoseconds would be read as seconds, a wait for ever) */
    struct { long long tv_sec, tv_nsec; } ten = {0, 10000000};
    a = R(syscall(SYS_epoll_pwait2, ep, &got, 1, &ten, NULL, 8));
    sendto(v6b, "x", 1, 0, (struct sockaddr *)&lo6, sizeof lo6);
    b = R(syscall(SYS_epoll_pwait2, ep, &got, 1, &ten, NULL, 8));
    say("epoll_pwait2: idle %s, then %s\n", a, b);
    return 0;
}

/* -- what a guest never reaches (run under kpsdk only: a native run reaches them) --------------- */

static int mode_offline(const char *host_socket)
{
    struct sockaddr_in dns = in4("8.8.8.8", 53), lan = in4("192.168.1.1", 80);
    int t = socket(AF_INET, SOCK_STREAM, 0), u = socket(AF_INET, SOCK_DGRAM, 0);
    const char *a = R(connect(t, (struct sockaddr *)&dns, sizeof dns));
    const char *b = R(sendto(u, "q", 1, 0, (struct sockaddr *)&lan, sizeof lan));
    say("TCP to 8.8.8.8: %s; UDP to 192.168.1.1: %s; ", a, b);
    struct sockaddr_in6 far = {.sin6_family = AF_INET6, .sin6_port = htons(80)};
    inet_pton(AF_INET6, "2001:db8::1", &far.sin6_addr);
    int t6 = socket(AF_INET6, SOCK_STREAM, 0);
    say("TCP to 2001:db8::1: %s\n", R(connect(t6, (struct sockaddr *)&far, sizeof far)));
    a = R(socket(AF_NETLINK, SOCK_RAW, 0));
    b = R(socket(AF_PACKET, SOCK_RAW, 0));
    say("AF_NETLINK: %s; AF_PACKET: %s\n", a, b);
    socklen_t len;
    struct sockaddr_un host = un_addr(host_socket, &len);
    int c = socket(AF_UNIX, SOCK_STREAM, 0);
    say("a host's listening socket file: %s\n", R(connect(c, (struct sockaddr *)&host, len)));
    return 0;
}

/* -- random arguments (run under kpsdk only): every call ends with a result or an errno -------- */

static uint64_t rnd(void)
{
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return seed >> 17;
}
static long pick(const long *from, int n)
{
    return from[rnd() % n];
}

static int mode_fuzz(void)
{
    static unsigned char area[8192];
    static const int calls[] = {SYS_socket, SYS_socketpair, SYS_bind, SYS_connect, SYS_listen, SYS_accept4,
                                SYS_sendto, SYS_recvfrom, SYS_sendmsg, SYS_recvmsg, SYS_shutdown, SYS_setsockopt,
                                SYS_getsockopt, SYS_getsockname, SYS_getpeername, SYS_epoll_create1, SYS_epoll_ctl,
                                SYS_epoll_pwait, SYS_eventfd2, SYS_timerfd_create, SYS_timerfd_settime,
                                SYS_timerfd_gettime, SYS_signalfd4, SYS_read, SYS_write, SYS_ioctl, SYS_fcntl,
                                SYS_sendmmsg, SYS_recvmmsg, SYS_close, SYS_dup};
    const long small[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 16, 17, 28, 41, 110, 128, -1, 0x7fffffff, 0x80000000L,
                          -100, 0x800, 0x80000, 0x4000, 0x40, 0x1000000};
    for (int i = 0; i < 3000; i++) {
        for (unsigned j = 0; j < sizeof area; j++)
            area[j] = rnd() % 7 ? (unsigned char)rnd() : 0;
        if (rnd() % 2) { /* now and then a plausible sockaddr or msghdr at the start */
            ((unsigned short *)area)[0] = (unsigned short)pick((const long[]){1, 2, 10, 0, 16}, 5);
        }
        long args[6];
        for (int k = 0; k < 6; k++) {
            switch (rnd() % 5) {
            case 0: args[k] = pick(small, sizeof small / sizeof small[0]); break;
            case 1: args[k] = (long)(area + rnd() % 4096); break;
            case 2: args[k] = 0; break;
            case 3: args[k] = 3 + rnd() % 40; break; /* a descriptor, maybe open */
            default: args[k] = (long)(uintptr_t)0xdead0000UL; break;
            }
        }
        int nr = calls[rnd() % (sizeof calls / sizeof calls[0])];
        /* nothing may wait: non-blocking sockets and descriptors, MSG_DONTWAIT, no timeout */
        if (nr == SYS_socket || nr == SYS_socketpair || nr == SYS_accept4 || nr == SYS_eventfd2 ||
            nr == SYS_timerfd_create || nr == SYS_signalfd4 || nr == SYS_epoll_create1)
            args[nr == SYS_accept4 || nr == SYS_signalfd4 ? 3 : 1] |= SOCK_NONBLOCK;
        if (nr == SYS_sendto || nr == SYS_recvfrom)
            args[3] |= MSG_DONTWAIT;
        if (nr == SYS_sendmsg || nr == SYS_recvmsg)
            args[2] |= MSG_DONTWAIT;
        if (nr == SYS_sendmmsg || nr == SYS_recvmmsg)
            args[3] |= MSG_DONTWAIT, args[4] = 0;
        if (nr == SYS_epoll_pwait)
            args[3] = 0, args[4] = 0;
        if (nr == SYS_read || nr == SYS_write || nr == SYS_connect || nr == SYS_ioctl || nr == SYS_fcntl) {
            if (args[0] < 3)
                continue; /* the console and stdin: not what is tested */
            fcntl((int)args[0], F_SETFL, O_NONBLOCK);
        }
        if (nr == SYS_close && args[0] < 3)
            continue;
        if (nr == SYS_fcntl && args[1] != F_GETFL && args[1] != F_SETFL)
            args[1] = F_GETFL;
        syscall(nr, args[0], args[1], args[2], args[3], args[4], args[5]);
    }
    say("fuzzed\n");
    return 0;
}

