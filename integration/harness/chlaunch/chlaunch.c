/*
 * chlaunch runs ClickHouse's clickhouse-local from libchdb.so as a server,
 * for the tests: chlaunch LIBCHDB [ARG]... dlopens LIBCHDB and calls
 * chdb_query_cmdline with "clickhouse" ARG... (clickhouse-local's command
 * line). The test harness compiles it with gcc (see clickhouse.go).
 *
 * When fd 3 is open, chlaunch watches it: the harness holds the other end of
 * a pipe, so when the test process dies, even by SIGKILL, the read returns
 * EOF and chlaunch kills its process group. No engine outlives its test.
 *
 * The engine prints the errors of its queries on stderr and keeps their
 * output in its result, which chlaunch drops; an error of the command line
 * (say, an unknown option) is in the result only, and chlaunch prints it.
 * Exit status: 1 on such an error, else 0 when the engine returns (the
 * harness's keep-alive query never ends: for it any exit is a failure);
 * 2 on bad usage, 3 when the library does not load.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

typedef void *(*query_cmdline_fn)(int, char **);
typedef const char *(*result_error_fn)(void *);

static void *watch_parent(void *arg) {
	char buf[64];
	ssize_t n;
	(void)arg;
	do {
		n = read(3, buf, sizeof buf);
	} while (n > 0 || (n < 0 && errno == EINTR));
	kill(0, SIGKILL);
	_exit(1);
	return NULL;
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: chlaunch LIBCHDB [ARG]...\n");
		return 2;
	}
	if (fcntl(3, F_GETFD) != -1) {
		/* Signals go to the engine's threads, never to the watcher. */
		sigset_t all, old;
		pthread_t th;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		if (pthread_create(&th, NULL, watch_parent, NULL) != 0) {
			fprintf(stderr, "chlaunch: cannot start the watcher thread\n");
			return 3;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (lib == NULL) {
		fprintf(stderr, "chlaunch: %s\n", dlerror());
		return 3;
	}
	query_cmdline_fn query = (query_cmdline_fn)dlsym(lib, "chdb_query_cmdline");
	result_error_fn result_error = (result_error_fn)dlsym(lib, "chdb_result_error");
	if (query == NULL || result_error == NULL) {
		fprintf(stderr, "chlaunch: %s: no chdb_query_cmdline or chdb_result_error\n", argv[1]);
		return 3;
	}
	argv[1] = "clickhouse";
	void *res = query(argc - 1, argv + 1);
	const char *err = res != NULL ? result_error(res) : NULL;
	if (err != NULL && err[0] != '\0') {
		fprintf(stderr, "chlaunch: %s\n", err);
		return 1;
	}
	return 0;
}
