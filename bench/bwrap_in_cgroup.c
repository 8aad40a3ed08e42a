/* The baseline "bwrap with the same limits as a shellgate sandbox", as fast
 * as it can honestly be done: make a memory, pids and CPU cgroup, write the
 * limits, start bwrap inside it (fork, enrol, exec), wait, remove the
 * cgroup. No shell in between. Built and run by bench/cli.py.
 *
 * usage: bwrap_in_cgroup v1|v2 BWRAP-ARGS...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void put(const char *path, const char *value) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, value, strlen(value)) < 0) { perror(path); _exit(1); }
    close(fd);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int v2 = strcmp(argv[1], "v2") == 0;
    const char *v1[] = {"memory", "pids", "cpu"};
    int n = v2 ? 1 : 3;
    char dirs[3][256], path[300], pid[32];
    for (int i = 0; i < n; i++) {
        if (v2) snprintf(dirs[i], sizeof dirs[i], "/sys/fs/cgroup/bwrap-bench-%d", getpid());
        else snprintf(dirs[i], sizeof dirs[i], "/sys/fs/cgroup/%s/bwrap-bench-%d", v1[i], getpid());
        if (mkdir(dirs[i], 0755) < 0) { perror(dirs[i]); return 1; }
    }
    snprintf(path, sizeof path, "%s/%s", dirs[0], v2 ? "memory.max" : "memory.limit_in_bytes");
    put(path, "1073741824");
    snprintf(path, sizeof path, "%s/pids.max", dirs[v2 ? 0 : 1]);
    put(path, "512");
    pid_t child = fork();
    if (child == 0) {
        snprintf(pid, sizeof pid, "%d", getpid());
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/cgroup.procs", dirs[i]);
            put(path, pid);
        }
        argv[1] = "bwrap";
        execv("/usr/bin/bwrap", argv + 1);
        _exit(127);
    }
    int status = 0;
    waitpid(child, &status, 0);
    /* A cgroup its last task just left can still be busy for a moment (its
     * css_set is released after an RCU grace period): tried again, at most
     * a second, so no run leaves a cgroup behind. */
    for (int i = 0; i < n; i++)
        for (int tries = 0; rmdir(dirs[i]) < 0 && errno == EBUSY && tries < 1000; tries++)
            usleep(1000);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
