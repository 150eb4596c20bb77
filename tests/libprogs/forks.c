/* Fork and exec under a kpsdk session (tests/test_libraries.py): the parent and the child
 * each call malloc with their own size; the parent reports both once the child is done. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    pid_t child = fork();
    if (child == 0) {
        free(malloc(7777));
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    free(malloc(5555));
    printf("child %d parent %d\n", 7777, 5555);
    return WEXITSTATUS(status);
}
