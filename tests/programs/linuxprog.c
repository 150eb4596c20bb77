/* A small real Linux program for the Unicorn target's ground-truth tests
   (tests/test_linux_programs.py): arguments, environment, stdin, malloc, printf,
   a file read from the sysroot and a nonzero exit status.  argv[1]: the file to
   read (/data.txt); argv[2]: how many mallocs; argv[3]: "fork", or a system call
   number to make with no arguments (its result and errno are printed).  Built static with
   each cross compiler; its output under qemu-user is the expected one. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

char greeting[64] = "hello, world";

int main(int argc, char **argv) {
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++)
        printf("argv[%d]=%s\n", i, argv[i]);
    const char *g = getenv("GREETING");
    printf("GREETING=%s\n", g ? g : "(unset)");
    char line[256];
    size_t total = 0;
    int lines = 0;
    while (fgets(line, sizeof line, stdin)) {
        total += strlen(line);
        lines++;
    }
    printf("stdin lines=%d bytes=%zu\n", lines, total);
    int count = argc > 2 ? atoi(argv[2]) : 3;
    for (int i = 1; i <= count; i++) {
        size_t size = (size_t)i * 100 + 7;
        char *p = malloc(size);
        memset(p, 'a' + i % 26, size);
        printf("malloc %zu -> %c\n", size, p[size - 1]);
    }
    if (argc > 3) {
        if (strcmp(argv[3], "fork") == 0) {
            fflush(stdout);
            printf("fork -> %d\n", fork() >= 0);
        } else {
            long r = syscall(atol(argv[3]));
            printf("syscall %s -> %ld errno=%d\n", argv[3], r, r < 0 ? errno : 0);
        }
    }
    FILE *f = fopen(argc > 1 ? argv[1] : "/data.txt", "r");
    if (!f) {
        printf("cannot open %s\n", argc > 1 ? argv[1] : "/data.txt");
        return 3;
    }
    while (fgets(line, sizeof line, f))
        printf("file: %s", line);
    fclose(f);
    return 42;
}
