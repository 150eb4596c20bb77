/* The hot-libc workload of bench/linuxprogs.py: calls libc's atoi N times (N from argv[1])
   on strings it changes, so nothing is folded away, and prints N and the sum: the true
   hit count a probe on atoi must see.  Built static with the system gcc at bench time, -O0
   (optimized, glibc's header inlines atoi as a call to strtol). */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    char text[] = "1000";
    long sum = 0;
    for (long i = 0; i < n; i++) {
        text[3] = (char)('0' + i % 10);
        sum += atoi(text);
    }
    printf("calls %ld sum %ld\n", n, sum);
    return 0;
}
