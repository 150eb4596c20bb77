/* Ground truth for PLT stub probes (tests/test_plt.py): calls puts through its PLT stub as
 * many times as argv[1] says, malloc once, and prints how often it called each.  The
 * counts are printed with printf, whose own stub is not probed. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 3, calls = 0;
    for (int i = 0; i < n; i++, calls++)
        puts("line");
    char *p = malloc(10);
    free(p);
    printf("puts %d malloc 1\n", calls);
    return 0;
}
