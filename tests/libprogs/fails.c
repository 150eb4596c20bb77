/* Ground truth for kpsdk probe --failed (tests/test_cli_returns.py): two C library calls that
 * fail, each returning -1 and setting errno, which the program prints. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    int fd = open("/nonexistent/file", O_RDONLY);
    printf("open %d %d\n", fd, errno);
    int r = close(12345);
    printf("close %d %d\n", r, errno);
    return 0;
}
