// Wake-up latency of a thread sleeping in poll() on 3 descriptors against epoll_wait on the same
// 3 (registered once): a second thread writes one byte every 10 ms; the sleeper notes the time
// it returns. Prints per block the median and p90 of write -> return, in microseconds.
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#define N 300
static int sv[2][2], efd, mode;
static volatile long long t_write;
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static void *writer(void *a) {
  (void)a;
  for (int i = 0; i < N; i++) {
    usleep(10000);
    t_write = now();
    char c = 1; if (write(sv[i & 1][1], &c, 1) != 1) abort();
  }
  return 0;
}
static int cmp(const void *a, const void *b) { long long x = *(long long *)a, y = *(long long *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  int blocks = argc > 1 ? atoi(argv[1]) : 6;
  for (int b = 0; b < 2 * blocks; b++) {
    mode = b & 1;
    for (int i = 0; i < 2; i++) socketpair(AF_UNIX, SOCK_DGRAM, 0, sv[i]);
    efd = eventfd(0, EFD_NONBLOCK);
    struct pollfd p[3] = {{sv[0][0], POLLIN, 0}, {sv[1][0], POLLIN, 0}, {efd, POLLIN, 0}};
    int ep = epoll_create1(0);
    for (int i = 0; i < 3; i++) { struct epoll_event e = {.events = EPOLLIN, .data.fd = p[i].fd}; epoll_ctl(ep, EPOLL_CTL_ADD, p[i].fd, &e); }
    pthread_t th; pthread_create(&th, 0, writer, 0);
    long long lat[N]; int n = 0;
    while (n < N) {
      int r;
      if (mode) { struct epoll_event e; r = epoll_wait(ep, &e, 1, 100); }
      else r = poll(p, 3, 100);
      long long t = now();
      if (r <= 0) continue;
      lat[n++] = t - t_write;
      char c; for (int i = 0; i < 2; i++) while (recv(sv[i][0], &c, 1, MSG_DONTWAIT) == 1) {}
    }
    pthread_join(th, 0);
    qsort(lat, N, sizeof lat[0], cmp);
    printf("%-5s median %.1f us p90 %.1f us\n", mode ? "epoll" : "poll", lat[N / 2] / 1e3, lat[N * 9 / 10] / 1e3);
    fflush(stdout);
    close(ep); close(efd); for (int i = 0; i < 2; i++) { close(sv[i][0]); close(sv[i][1]); }
  }
}
