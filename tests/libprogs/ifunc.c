/* Ground truth for IFUNC resolution (tests/test_ifunc.py): prints where strlen is (taking its
 * address makes the loader resolve the IFUNC for this program: the implementation it chose),
 * then calls it on known strings and prints each length and string. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char report[4096];

int main(void)
{
    static const char *words[] = {"first", "a longer second string", "3"};
    size_t (*volatile fn)(const char *) = strlen;
    int used = snprintf(report, sizeof report, "strlen-at %lx\n", (unsigned long)fn);
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        used += snprintf(report + used, sizeof report - used, "strlen %zu %s\n", n, words[i]);
    }
    write(1, report, used);
    return 0;
}
