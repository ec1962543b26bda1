/* The round trip of one cache line between two CPUs, in ns: the machine's own floor for any
 * shared-memory ping-pong between processes on those CPUs (scripts/machine-state.sh).
 *
 *   cc -O2 -pthread scripts/core_pingpong.c -o core_pingpong && ./core_pingpong [CPU_A CPU_B [N]]
 *
 * Two threads, pinned to CPU_A and CPU_B (default 0 and 1), pass a counter back and forth
 * through two cache lines N times (default 200000); prints the mean round trip in ns. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_long ping;
static _Alignas(64) atomic_long pong;
static long rounds = 200000;
static int cpu_a, cpu_b = 1;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static void *answer(void *unused) {
    (void)unused;
    pin(cpu_b);
    for (long i = 1; i <= rounds; i++) {
        while (atomic_load_explicit(&ping, memory_order_acquire) != i) {
        }
        atomic_store_explicit(&pong, i, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc >= 3) {
        cpu_a = atoi(argv[1]);
        cpu_b = atoi(argv[2]);
    }
    if (argc >= 4) rounds = atol(argv[3]);
    if (rounds < 1) {
        fprintf(stderr, "usage: %s [CPU_A CPU_B [ROUNDS >= 1]]\n", argv[0]);
        return 2;
    }
    pthread_t t;
    pin(cpu_a);
    pthread_create(&t, NULL, answer, NULL);
    struct timespec s, e;
    clock_gettime(CLOCK_MONOTONIC, &s);
    for (long i = 1; i <= rounds; i++) {
        atomic_store_explicit(&ping, i, memory_order_release);
        while (atomic_load_explicit(&pong, memory_order_acquire) != i) {
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &e);
    pthread_join(t, NULL);
    printf("%.1f\n", ((e.tv_sec - s.tv_sec) * 1e9 + (e.tv_nsec - s.tv_nsec)) / rounds);
    return 0;
}
