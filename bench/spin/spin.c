/* spin.c - the live-target benchmark's workload: inc() called `iterations`
 * times.  The bench sets `iterations` through gdb before the run, so one
 * binary measures startup alone (0) and startup + N hits. */
#include "sys.h"

volatile int iterations = 20000;

__attribute__((noinline, noipa, used)) int inc(int x)
{
    return x + 1;
}

__attribute__((used)) int main(void)
{
    int s = 0;
    for (int i = 0; i < iterations; i++)
        s += inc(i);
    return s & 1;
}
