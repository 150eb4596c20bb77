/* Ground truth for per-thread hits on gdbserver (tests/test_gdbserver.py): four threads each
 * call work() a known, different number of times (5, 10, 15, 20) and print their thread id
 * and count; kpsdk's hits, grouped by the thread the stub reports, must say the same. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) long work(long n) { return n * 2 + 1; }

static void *run(void *arg)
{
    long times = (long)arg, sum = 0;
    for (long i = 0; i < times; i++)
        sum += work(i);
    pthread_mutex_lock(&lock);
    printf("thread %ld %ld %ld\n", (long)syscall(SYS_gettid), times, sum);
    fflush(stdout);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void)
{
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, run, (void *)(5 * (i + 1)));
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    return 0;
}
