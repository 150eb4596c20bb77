/* Costs of tasks on the embedded default (bench/tasks.py): a thread switch, a fork of a large
 * process, a pipe round trip between two processes.  Usage: tasksbench switch|fork|pipe N */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static long turn, rounds;

/* two threads take turns through a condition variable: each turn is a switch */
static void *player(void *arg)
{
    long me = (long)arg;
    pthread_mutex_lock(&lock);
    while (turn < rounds) {
        while (turn % 2 != me && turn < rounds)
            pthread_cond_wait(&cond, &lock);
        turn++;
        pthread_cond_signal(&cond);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 2 ? atol(argv[2]) : 1000;
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "switch")) {
        rounds = n;
        pthread_t a, b;
        pthread_create(&a, NULL, player, (void *)0);
        pthread_create(&b, NULL, player, (void *)1);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        printf("%ld turns\n", turn);
    } else if (!strcmp(mode, "fork")) {
        size_t size = 50 << 20;  /* a 50 MB process, every page touched */
        char *big = malloc(size);
        memset(big, 1, size);
        for (long i = 0; i < n; i++) {
            pid_t child = fork();
            if (child == 0)
                _exit(big[i % size]);
            int status;
            waitpid(child, &status, 0);
        }
        printf("%ld forks\n", n);
    } else if (!strcmp(mode, "pipe")) {
        int to[2], back[2];
        if (pipe(to) || pipe(back))
            return 1;
        char c = 0;
        if (fork() == 0) {
            while (read(to[0], &c, 1) == 1 && c)
                if (write(back[1], &c, 1) != 1)
                    _exit(1);
            _exit(0);
        }
        for (long i = 0; i < n; i++) {
            c = 1;
            if (write(to[1], &c, 1) != 1 || read(back[0], &c, 1) != 1)
                return 1;
        }
        c = 0;
        if (write(to[1], &c, 1) != 1)
            return 1;
        wait(NULL);
        printf("%ld round trips\n", n);
    } else {
        fprintf(stderr, "usage: tasksbench switch|fork|pipe N\n");
        return 2;
    }
    return 0;
}
