/* A long-running program for kpsdk's --pid tests (tests/test_gdbserver.py): step(i) every
 * millisecond, and every 100th step a line with i and the running sum of step's results, so
 * that a reader can check that no step was lost or changed while kpsdk was attached. */
#include <stdio.h>
#include <unistd.h>

__attribute__((noinline)) long step(long i) { return i * 3 + 1; }

int main(void)
{
    long acc = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (long i = 0;; i++) {
        acc += step(i);
        if (i % 100 == 0)
            printf("tick %ld %ld\n", i, acc);
        usleep(1000);
    }
}
