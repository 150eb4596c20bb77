/* Ground truth for kpsdk's library probes (tests/test_libraries.py): calls libc's malloc,
 * strlen and write, and a dlopen'ed library's lib_mix, with known arguments, and prints
 * what it passed and got back.  The report is built with vsnprintf into a static buffer
 * (no stdio buffer, no malloc of its own) and written once at the end.  Each loaded object
 * is listed first, as dl_iterate_phdr(3) reports it: the link map kpsdk must read. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char report[16384];
static size_t used;

static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    used += vsnprintf(report + used, sizeof report - used, fmt, ap);
    va_end(ap);
}

static int object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    note("object %s %lx\n", info->dlpi_name[0] ? info->dlpi_name : "-", (unsigned long)info->dlpi_addr);
    return 0;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {37, 4096, 100003};
    static const char *words[] = {"alpha", "kprobes outside the kernel", ""};
    void *blocks[3];
    dl_iterate_phdr(object, NULL);
    for (int i = 0; i < 3; i++) {
        blocks[i] = malloc(sizes[i]);
        note("malloc %zu %lx\n", sizes[i], (unsigned long)blocks[i]);
    }
    for (int i = 0; i < 3; i++)
        note("strlen %zu %s\n", strlen(words[i]), words[i]);
    write(1, "hello\n", 6);
    for (int i = 0; i < 3; i++)
        free(blocks[i]);
    if (argc > 1) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            note("dlopen failed %s\n", dlerror());
        } else {
            long (*mix)(long, long) = (long (*)(long, long))dlsym(h, "lib_mix");
            for (long a = 1; a <= 3; a++)
                note("lib_mix %ld %ld %ld\n", a, a * 10, mix(a, a * 10));
            dlclose(h);
        }
    }
    write(1, report, used);
    return 0;
}
