/* Processes, threads, signals and pipes: the hard parts of Linux a program meets, one mode each.
 *
 * Built statically with each cross compiler (-pthread) and run under kpsdk's Linux layer and
 * under qemu-user (or natively): every mode prints only what Linux decides, never what a
 * scheduler happens to do, so the two outputs must be identical byte for byte.  The one
 * exception is "racy", whose output shows an interleaving on purpose (the determinism test
 * compares kpsdk with itself).
 *
 * Usage: tasks MODE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* a signal's name (SIGUSR1), the same on every arch although MIPS numbers them differently */
static const char *sig(int n)
{
    const char *name = n ? sigabbrev_np(n) : NULL;
    return name ? name : "none";
}
static void say(const char *fmt, ...)
{
    /* one write per line, unbuffered: lines of several tasks never mix */
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

/* -- threads -------------------------------------------------------------------------------- */

static long shared_total;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *add_up(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&lock);
        shared_total += id;
        pthread_mutex_unlock(&lock);
    }
    return (void *)(id * 10);
}

static __thread int per_thread = 7;

static void *tls_check(void *arg)
{
    per_thread += (int)(long)arg;
    return (void *)(long)per_thread;
}

static int mode_threads(void)
{
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        if (pthread_create(&t[i], NULL, add_up, (void *)(i + 1)))
            return 1;
    long sum_ret = 0;
    for (int i = 0; i < 8; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        sum_ret += (long)ret;
    }
    say("total %ld (expected %d), returns %ld\n", shared_total, 1000 * 36, sum_ret);
    pthread_t a, b;
    void *ra, *rb;
    pthread_create(&a, NULL, tls_check, (void *)1);
    pthread_create(&b, NULL, tls_check, (void *)2);
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    say("tls: main %d, a %ld, b %ld\n", per_thread, (long)ra, (long)rb);
    return 0;
}

/* -- futex contention: 8 threads, a condition variable and a barrier ----------------------- */

static pthread_barrier_t barrier;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int turn;

static void *take_turns(void *arg)
{
    int me = (int)(long)arg;
    pthread_barrier_wait(&barrier);
    for (int round = 0; round < 20; round++) {
        pthread_mutex_lock(&lock);
        while (turn % 8 != me)
            pthread_cond_wait(&cond, &lock);
        turn++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static int mode_futex(void)
{
    pthread_t t[8];
    pthread_barrier_init(&barrier, NULL, 8);
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, take_turns, (void *)i);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    say("turns %d\n", turn);
    /* a timed wait that times out: ETIMEDOUT */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&lock);
    int r = pthread_cond_timedwait(&cond, &lock, &ts);
    pthread_mutex_unlock(&lock);
    say("timedwait: %s\n", r == ETIMEDOUT ? "ETIMEDOUT" : strerror(r));
    /* a raw futex: wait on a value that differs is EAGAIN */
    int word = 1;
    long f = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    say("futex wait on a changed value: %ld %s\n", f, f ? strerror(errno) : "");
    return 0;
}

/* -- robust mutexes: the owner dies, the next locker hears EOWNERDEAD ------------------------ */

static pthread_mutex_t robust;

static void *lock_and_die(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&robust);
    return NULL; /* ends holding it */
}

static int mode_robust(void)
{
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&robust, &attr);
    pthread_t t;
    pthread_create(&t, NULL, lock_and_die, NULL);
    pthread_join(t, NULL);
    int r = pthread_mutex_lock(&robust);
    say("lock after the owner died: %s\n", r == EOWNERDEAD ? "EOWNERDEAD" : strerror(r));
    pthread_mutex_consistent(&robust);
    pthread_mutex_unlock(&robust);
    r = pthread_mutex_lock(&robust);
    say("lock once consistent: %d\n", r);
    return 0;
}

/* -- fork, wait, pipes ----------------------------------------------------------------------- */

static int mode_fork(void)
{
    int fds[2];
    if (pipe(fds))
        return 1;
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        const char msg[] = "hello from the child\n";
        ssize_t w = write(fds[1], msg, sizeof msg - 1);
        (void)w;
        _exit(getppid() == getpid() ? 99 : 7);
    }
    close(fds[1]);
    char buf[64] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    int status;
    pid_t waited = waitpid(child, &status, 0);
    say("parent read %zd bytes: %s", n, buf);
    say("waitpid matched: %d, exited: %d, status %d\n", waited == child, WIFEXITED(status), WEXITSTATUS(status));
    n = read(fds[0], buf, sizeof buf);
    say("read at end of pipe: %zd\n", n);
    /* a child killed by a signal */
    child = fork();
    if (child == 0) {
        raise(SIGKILL);
        _exit(1);
    }
    waitpid(child, &status, 0);
    say("killed child: signaled %d, SIG%s\n", WIFSIGNALED(status), sig(WTERMSIG(status)));
    /* no children left */
    int none = (int)wait(&status);
    say("wait with none: %d %s\n", none, strerror(errno));
    return 0;
}

static void *forker(void *arg)
{
    (void)arg;
    pid_t child = fork();
    if (child == 0) {
        say("child of a thread runs, %s\n", "one thread only");
        _exit(3);
    }
    int status;
    waitpid(child, &status, 0);
    return (void *)(long)WEXITSTATUS(status);
}

static int mode_forkthread(void)
{
    pthread_t t;
    void *ret;
    pthread_create(&t, NULL, forker, NULL);
    pthread_join(t, &ret);
    say("the thread's child exited %ld\n", (long)ret);
    return 0;
}

/* a probed function that forks returns twice, in the parent and in the child (retfork) */
__attribute__((noinline)) int leaf(int x)
{
    __asm__ volatile("" ::: "memory");
    return 2 * x + 1;
}

__attribute__((noinline)) int spawn(int k)
{
    pid_t child = fork();
    __asm__ volatile("" ::: "memory");
    return child == 0 ? k : -k;
}

static int mode_retfork(void)
{
    int before = leaf(1);
    int k = spawn(5);
    int s = 0;
    for (int i = 0; i < 3; i++)
        s += leaf(k > 0 ? 100 + i : 200 + i);
    if (k > 0) {
        say("child: spawn gave %d, leaves sum %d\n", k, s);
        _exit(0);
    }
    int status;
    wait(&status);
    say("parent: spawn gave %d, leaves sum %d, before %d\n", k, s, before);
    return 0;
}

/* a writer blocks when the pipe holds 64 KiB, until the reader drains it */
static int mode_pipe64k(void)
{
    int fds[2];
    if (pipe(fds))
        return 1;
    say("pipe capacity: %d\n", fcntl(fds[1], F_GETPIPE_SZ));
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    static char block[4096];
    long total = 0;
    for (;;) {
        ssize_t w = write(fds[1], block, sizeof block);
        if (w < 0) {
            say("non-blocking writer stops at %ld bytes: %s\n", total, errno == EAGAIN ? "EAGAIN" : strerror(errno));
            break;
        }
        total += w;
    }
    fcntl(fds[1], F_SETFL, 0);
    pid_t child = fork();
    if (child == 0) { /* the reader: drains slowly */
        close(fds[1]);
        long got = 0;
        ssize_t n;
        char buf[1000];
        while ((n = read(fds[0], buf, sizeof buf)) > 0)
            got += n;
        say("reader got %ld bytes\n", got);
        _exit(0);
    }
    close(fds[0]);
    for (int i = 0; i < 64; i++) { /* 256 KiB more: blocks until the reader has room */
        ssize_t w = write(fds[1], block, sizeof block);
        if (w != sizeof block)
            say("short write %zd\n", w);
    }
    close(fds[1]);
    int status;
    waitpid(child, &status, 0);
    say("writer done, reader status %d\n", WEXITSTATUS(status));
    return 0;
}

/* SIGPIPE: a write to a pipe with no reader */
static volatile sig_atomic_t got_pipe;
static void on_pipe(int sig) { got_pipe = sig; }

static int mode_sigpipe(void)
{
    int fds[2];
    if (pipe(fds))
        return 1;
    close(fds[0]);
    signal(SIGPIPE, on_pipe);
    ssize_t w = write(fds[1], "x", 1);
    say("handled: write %zd %s, SIG%s\n", w, strerror(errno), sig(got_pipe));
    signal(SIGPIPE, SIG_IGN);
    w = write(fds[1], "x", 1);
    say("ignored: write %zd %s\n", w, strerror(errno));
    signal(SIGPIPE, SIG_DFL);
    pid_t child = fork();
    if (child == 0) {
        w = write(fds[1], "x", 1);
        _exit(5); /* not reached: SIGPIPE's default action ends it */
    }
    int status;
    waitpid(child, &status, 0);
    say("default: signaled %d SIG%s\n", WIFSIGNALED(status), sig(WTERMSIG(status)));
    return 0;
}

/* -- signal frames --------------------------------------------------------------------------- */

static volatile long seen_value;
static volatile int seen_sig, seen_code;

static void on_usr1(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    seen_sig = sig;
    seen_code = info->si_code;
    seen_value = info->si_pid == getpid();
}

/* the handler moves the interrupted program on: it changes the saved pc to skip a trapping
 * instruction, through the ucontext the kernel built (and it sticks at sigreturn) */
static volatile int after_fault;
static sigjmp_buf escape_env;

static void on_segv_jump(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    seen_sig = sig;
    seen_value = (long)(uintptr_t)info->si_addr;
    siglongjmp(escape_env, 1);
}

static void on_alarm(int sig) { seen_sig = sig; }

static int mode_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    say("SIGUSR1 handled: SIG%s, code %d (SI_TKILL %d), from self %ld\n", sig(seen_sig), seen_code, SI_TKILL, seen_value);
    /* ignored */
    signal(SIGUSR2, SIG_IGN);
    raise(SIGUSR2);
    say("SIGUSR2 ignored\n");
    /* blocked, pending, then delivered at unblock */
    seen_sig = 0;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &old);
    kill(getpid(), SIGUSR1);
    sigset_t pending;
    sigpending(&pending);
    say("blocked: delivered SIG%s, pending %d\n", sig(seen_sig), sigismember(&pending, SIGUSR1));
    sigprocmask(SIG_SETMASK, &old, NULL);
    say("unblocked: delivered SIG%s\n", sig(seen_sig));
    /* SIGSEGV from a real fault, escaped with siglongjmp */
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv_jump;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    if (sigsetjmp(escape_env, 1) == 0) {
        volatile int *bad = (int *)16;
        *bad = 1;
        say("not reached\n");
    } else {
        say("SIGSEGV at %#lx escaped by siglongjmp\n", (unsigned long)seen_value);
    }
    /* the mask was restored by siglongjmp: SIGSEGV is deliverable again */
    if (sigsetjmp(escape_env, 1) == 0) {
        volatile int *bad = (int *)32;
        *bad = 1;
    } else {
        say("and again at %#lx\n", (unsigned long)seen_value);
    }
    /* alarm on the emulated clock interrupts pause() */
    seen_sig = 0;
    signal(SIGALRM, on_alarm);
    alarm(1);
    pause();
    say("pause ended by SIG%s\n", sig(seen_sig));
    /* setitimer */
    struct itimerval it = {{0, 0}, {0, 50000}};
    seen_sig = 0;
    setitimer(ITIMER_REAL, &it, NULL);
    while (!seen_sig)
        pause();
    say("itimer fired: SIG%s\n", sig(seen_sig));
    /* SIGCHLD at a child's exit */
    seen_sig = 0;
    signal(SIGCHLD, on_alarm);
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    int status;
    waitpid(child, &status, 0);
    say("SIGCHLD seen: %d\n", seen_sig == SIGCHLD);
    /* the default action of SIGTERM ends a child with that signal */
    child = fork();
    if (child == 0) {
        kill(getpid(), SIGTERM);
        for (;;)
            pause();
    }
    waitpid(child, &status, 0);
    say("SIGTERM default: signaled %d SIG%s\n", WIFSIGNALED(status), sig(WTERMSIG(status)));
    return 0;
}

/* A handler changes the interrupted code's registers through the ucontext the kernel built, and
 * the change sticks at sigreturn: the handler sets the saved pc to a label past a faulting load. */
#if defined(__x86_64__)
#define PC(uc) ((uc)->uc_mcontext.gregs[REG_RIP])
#define FAULT_INSN "movq (%0), %0"
#elif defined(__i386__)
#define PC(uc) ((uc)->uc_mcontext.gregs[REG_EIP])
#define FAULT_INSN "movl (%0), %0"
#elif defined(__arm__)
#define PC(uc) ((uc)->uc_mcontext.arm_pc)
#define FAULT_INSN "ldr %0, [%0]"
#elif defined(__aarch64__)
#define PC(uc) ((uc)->uc_mcontext.pc)
#define FAULT_INSN "ldr %0, [%0]"
#elif defined(__riscv)
#define PC(uc) ((uc)->uc_mcontext.__gregs[REG_PC])
#define FAULT_INSN "ld %0, 0(%0)"
#elif defined(__powerpc64__)
#define PC(uc) ((uc)->uc_mcontext.gp_regs[32])
#define FAULT_INSN "ld %0, 0(%0)"
#elif defined(__mips__)
#define PC(uc) ((uc)->uc_mcontext.pc)
#define FAULT_INSN "lw %0, 0(%0)"
#endif

static volatile uintptr_t fault_pc, resume_pc;

static void on_segv_skip(int sig, siginfo_t *info, void *ctx)
{
    (void)sig;
    (void)info;
    ucontext_t *uc = ctx;
    fault_pc = PC(uc);
    PC(uc) = resume_pc;
}

static int mode_ucontext(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv_skip;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    uintptr_t value = 8;
    /* the label after the faulting load: where the handler sends the program on */
    resume_pc = (uintptr_t)&&resumed;
    __asm__ volatile(FAULT_INSN : "+r"(value)::"memory");
    say("not reached\n");
resumed:
    say("the handler's pc change stuck: fault recorded %d\n", fault_pc != 0);
    return 0;
}

/* -- the shell's world ----------------------------------------------------------------------- */

static int mode_exec(char **argv)
{
    (void)argv;
    pid_t child = fork();
    if (child == 0) {
        char *args[] = {"/proc/self/exe", "hello", NULL};
        execv("/proc/self/exe", args);
        say("execv failed: %s\n", strerror(errno));
        _exit(127);
    }
    int status;
    waitpid(child, &status, 0);
    say("exec'd child exited %d\n", WEXITSTATUS(status));
    errno = 0;
    char *none[] = {"/nonexistent", NULL};
    execv("/nonexistent", none);
    say("execv of a missing file: %s\n", strerror(errno));
    return 0;
}

/* a shell of the system's: popen and system */
static int mode_shell(void)
{
    FILE *p = popen("echo from popen", "r");
    if (p) {
        char line[64] = {0};
        if (fgets(line, sizeof line, p))
            say("popen read: %s", line);
        say("pclose: %d\n", WEXITSTATUS(pclose(p)));
    }
    say("system: %d\n", WEXITSTATUS(system("exit 3")));
    return 0;
}

/* -- a racy program: four threads append to one log without a lock --------------------------- */

static char race_log[4 * 2000 + 1];
static atomic_int race_len;

static void *racer(void *arg)
{
    char me = (char)('a' + (long)arg);
    for (int i = 0; i < 2000; i++) {
        int at = atomic_fetch_add(&race_len, 1);
        race_log[at] = me;
        for (volatile int spin = 0; spin < (i * 7 + (int)(long)arg * 13) % 50; spin++)
            ;
        if (i % 97 == 0)
            sched_yield();
    }
    return NULL;
}

static int mode_racy(void)
{
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, racer, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    unsigned long h = 5381;
    for (int i = 0; i < race_len; i++)
        h = h * 33 + (unsigned char)race_log[i];
    say("%d entries, order hash %lx, first 64: %.64s\n", (int)race_len, h, race_log);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "hello")) {
        say("hello from the exec'd image, pid matches parent's child: %d\n", getpid() > 0);
        return 4;
    }
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "threads"))
        return mode_threads();
    if (!strcmp(mode, "futex"))
        return mode_futex();
    if (!strcmp(mode, "robust"))
        return mode_robust();
    if (!strcmp(mode, "fork"))
        return mode_fork();
    if (!strcmp(mode, "forkthread"))
        return mode_forkthread();
    if (!strcmp(mode, "pipe64k"))
        return mode_pipe64k();
    if (!strcmp(mode, "sigpipe"))
        return mode_sigpipe();
    if (!strcmp(mode, "signals"))
        return mode_signals();
    if (!strcmp(mode, "ucontext"))
        return mode_ucontext();
    if (!strcmp(mode, "exec"))
        return mode_exec(argv);
    if (!strcmp(mode, "shell"))
        return mode_shell();
    if (!strcmp(mode, "racy"))
        return mode_racy();
    if (!strcmp(mode, "retfork"))
        return mode_retfork();
    say("usage: tasks threads|futex|robust|fork|forkthread|pipe64k|sigpipe|signals|ucontext|exec|shell|racy|retfork\n");
    return 2;
}
