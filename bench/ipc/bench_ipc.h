/*
 * bench_ipc.h — what one IPC transport under test provides to the driver.
 *
 * The driver forks a peer for every measurement; `self` runs in the parent
 * (the engine's role, pinned to one core), `peer` in the child (the daemon's
 * role, pinned to another).  Round trip: self sends a message, peer answers,
 * self times it.  Throughput: self streams, peer consumes and stamps the end.
 */
#ifndef MEMDECAY_BENCH_IPC_H
#define MEMDECAY_BENCH_IPC_H

#include <stdint.h>

#include "memdecay_clock.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define cpu_relax() __builtin_ia32_pause()
static inline uint64_t bench_ticks(void)
{
	_mm_lfence();
	return __rdtsc();
}
#else
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
static inline uint64_t bench_ticks(void)
{
	return md_now_ns();
}
#endif

#define BENCH_MSG_BYTES 64u

/* Shared between parent and child (MAP_SHARED|MAP_ANONYMOUS, one page). */
struct bench_shared {
	uint32_t peer_ready;      /* child finished its setup */
	uint32_t peer_error;      /* child saw a protocol error */
	uint64_t tput_start_ns;   /* parent, before the first message */
	uint64_t tput_end_ns;     /* child, after the last message */
	uint64_t doorbells;       /* doorbell writes by the parent */
	uint64_t wakeups;         /* times the peer actually slept and woke */
};

enum bench_mode { BENCH_RTT = 0, BENCH_TPUT = 1 };

struct bench_transport {
	const char *name;
	/* Before fork: create shared state. Returns 0 or -errno. */
	int (*setup)(void **state);
	/* In the child. Returns 0 on success. */
	int (*peer)(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n);
	/* In the parent. RTT: fills samples[n] with ticks. TPUT: streams n. */
	int (*self)(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n,
		    uint64_t *samples);
	void (*teardown)(void *state);
	/* Bytes self sends and peer returns per round trip. */
	unsigned bytes_out, bytes_back;
};

extern const struct bench_transport bench_floor, bench_ring_spin, bench_ring_doorbell;
extern const struct bench_transport bench_unix_socket, bench_zeromq;
/* RTT only: floor and ring_spin alternating in blocks in one process pair;
 * samples[0, n) floor, samples[n, 2n) ring_spin. */
extern const struct bench_transport bench_floor_ring_pair;

/* Ring geometry: the engine's page capacity; ring sizes follow the daemon. */
extern uint32_t bench_ring_page_capacity;
uint32_t bench_ring_stats_capacity(void);
uint32_t bench_ring_cmd_capacity(void);

/* Abort a spin that has waited this long: the other side is gone. */
#define BENCH_SPIN_DEADLINE_NS (30ull * 1000000000ull)
int bench_spin_expired(uint64_t *spins, uint64_t *deadline_ns);

/* Wait until the child says it is ready (sched_yield between looks). */
int bench_wait_peer_ready(struct bench_shared *sh);

#endif /* MEMDECAY_BENCH_IPC_H */
