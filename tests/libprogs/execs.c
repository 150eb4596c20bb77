/* Ground truth for exec under kpsdk (tests/test_libraries.py): mallocs 55 bytes, says so,
 * then replaces itself with the program in argv[1], which prints argv[2]. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    void *p = malloc(55);
    printf("malloc 55 %p\n", p);
    fflush(stdout);
    if (argc > 2)
        execl(argv[1], argv[1], argv[2], (char *)NULL);
    perror("execl");
    return 1;
}
