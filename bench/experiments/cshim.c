/* cshim: the floor for a C front end to a runner, in the two shapes of
 * bench/cmd/execshim, so that bench/exec-explain.sh can show what the bwrap goal
 * (within 1.15x of raw bwrap) leaves to a front end written in any language.
 * A measurement tool only: toh-exec is Go, and nothing ships this.
 *
 *   cshim ARGV...          execve ARGV (no fork, no wait)
 *   cshim -parent ARGV...  fork ARGV in its own session, copy its stderr through a
 *                          pipe, forward termination signals, wait, exit with its status
 *   cshim                  exit 0 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static volatile pid_t child;

static void forward(int sig) { if (child > 0) kill(child, sig); }

int main(int argc, char **argv) {
	if (argc < 2) return 0;
	if (strcmp(argv[1], "-parent") != 0) {
		execve(argv[1], argv + 1, environ);
		fprintf(stderr, "cshim: %s: %s\n", argv[1], strerror(errno));
		return 127;
	}
	if (argc < 3) { fputs("cshim: -parent needs a command\n", stderr); return 2; }
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0) return 127;
	struct sigaction sa = {0};
	sa.sa_handler = forward;
	sigaction(SIGINT, &sa, 0); sigaction(SIGTERM, &sa, 0);
	sigaction(SIGHUP, &sa, 0); sigaction(SIGQUIT, &sa, 0);
	child = fork();
	if (child < 0) return 127;
	if (child == 0) {
		setsid();
		dup2(p[1], 2);
		signal(SIGINT, SIG_DFL); signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL); signal(SIGQUIT, SIG_DFL);
		execve(argv[2], argv + 2, environ);
		_exit(127);
	}
	close(p[1]);
	char buf[4096];
	ssize_t n;
	while ((n = read(p[0], buf, sizeof buf)) != 0) {
		if (n < 0) { if (errno == EINTR) continue; break; }
		if (write(2, buf, n) < 0) break;
	}
	int st;
	while (waitpid(child, &st, 0) < 0 && errno == EINTR) {}
	if (WIFEXITED(st)) return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}
