/*
 * memdecay_clock.h — the one clock every MemDecay program reads.
 *
 * CLOCK_MONOTONIC in nanoseconds: the daemon's timers, the engines' heartbeat
 * and step stamps, and every benchmark's timings come from it, so times taken
 * in different processes on one machine compare directly.
 */
#ifndef MEMDECAY_CLOCK_H
#define MEMDECAY_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t md_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* MEMDECAY_CLOCK_H */
