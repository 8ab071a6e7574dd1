/*
 * kubesteer-pause: the pod sandbox ("infra") container process, for clusters that cannot pull
 * registry.k8s.io/pause. It sleeps until SIGINT or SIGTERM and then exits 0; as PID 1 of a
 * shared PID namespace it also reaps every zombie handed to it (SIGCHLD).
 *
 * Build: gcc -static -Os -s -o pause pause.c   (see hack/image.sh pause)
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#ifndef VERSION
#define VERSION "3.10"
#endif

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--version") == 0) {
      printf("kubesteer-pause %s\n", VERSION);
      return 0;
    }
  }
  if (getpid() != 1) {
    fprintf(stderr, "warning: pause should be the first process (pid 1)\n");
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_stop;
  if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
    perror("sigaction");
    return 1;
  }
  sa.sa_handler = on_child;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) < 0) {
    perror("sigaction");
    return 2;
  }

  for (;;) {
    pause();
  }
  fprintf(stderr, "error: infinite loop terminated\n");
  return 42;
}
