/*
 * memdecay_ring.h — the single-producer single-consumer ring both sides use.
 *
 * Indices are free-running u64 counters; slot = index & (capacity - 1).  The
 * producer owns `tail` (in its own segment), the consumer owns `head` (in its
 * own segment); each only reads the other's.  The producer stamps every record
 * with the low 32 bits of its index (`pos`) before releasing the tail, so a
 * consumer detects a torn or stale record by a pos mismatch.  The consumer
 * treats the producer's tail as untrusted: tail - head > capacity, or a tail
 * that went backwards, is a protocol violation, not a reason to read out of
 * bounds.  Capacity and the data pointer come from the reader's private copy
 * of the geometry, never from shared memory.
 */
#ifndef MEMDECAY_RING_H
#define MEMDECAY_RING_H

#include <stdint.h>
#include <string.h>

#define md_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define md_load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define md_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define md_store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define md_fence_full() __atomic_thread_fence(__ATOMIC_SEQ_CST)

/* Producer-private view.  `cached_head` spares a shared read per record. */
struct md_ring_prod {
	void *data;               /* capacity * rec_size bytes */
	uint64_t *tail;           /* in the producer's segment */
	const uint64_t *head;     /* in the consumer's segment (read-only) */
	uint32_t capacity;        /* power of two */
	uint32_t rec_size;
	uint64_t next;            /* next index to write (private copy of tail) */
	uint64_t cached_head;
};

struct md_ring_cons {
	const void *data;
	const uint64_t *tail;     /* in the producer's segment (read-only) */
	uint64_t *head;           /* in the consumer's segment */
	uint32_t capacity;
	uint32_t rec_size;
	uint64_t next;            /* next index to read (private copy of head) */
};

enum md_ring_status {
	MD_RING_OK = 0,
	MD_RING_EMPTY = 1,
	MD_RING_FULL = 2,
	MD_RING_BAD_TAIL = 3,     /* tail behind head or more than capacity ahead */
	MD_RING_TORN = 4,         /* record pos does not match its index */
};

/* Reserve the next record; NULL when full.  Fill it, then md_ring_publish(). */
static inline void *md_ring_reserve(struct md_ring_prod *r)
{
	if (r->next - r->cached_head >= r->capacity) {
		r->cached_head = md_load_acquire(r->head);
		/* A consumer whose head runs ahead of what we produced is broken;
		 * treat the ring as full rather than overwrite unread records. */
		if (r->cached_head > r->next || r->next - r->cached_head >= r->capacity)
			return NULL;
	}
	char *slot = (char *)r->data + (size_t)(r->next & (r->capacity - 1)) * r->rec_size;
	return slot;
}

/* Stamp pos (first u32 of every record) and make the record visible. */
static inline void md_ring_publish(struct md_ring_prod *r, void *rec)
{
	*(uint32_t *)rec = (uint32_t)r->next;
	r->next++;
	md_store_release(r->tail, r->next);
}

/* Several records reserved with md_ring_reserve_at() become visible at once. */
static inline void *md_ring_reserve_at(struct md_ring_prod *r, uint32_t k)
{
	uint64_t idx = r->next + k;
	if (idx - r->cached_head >= r->capacity) {
		r->cached_head = md_load_acquire(r->head);
		if (r->cached_head > r->next || idx - r->cached_head >= r->capacity)
			return NULL;
	}
	char *slot = (char *)r->data + (size_t)(idx & (r->capacity - 1)) * r->rec_size;
	*(uint32_t *)slot = (uint32_t)idx;
	return slot;
}
static inline void md_ring_publish_n(struct md_ring_prod *r, uint32_t n)
{
	r->next += n;
	md_store_release(r->tail, r->next);
}

/* Records available to the consumer, validated against its own view.
 * Returns the count (0 when empty) or -MD_RING_BAD_TAIL. */
static inline int64_t md_ring_available(const struct md_ring_cons *r)
{
	uint64_t tail = md_load_acquire(r->tail);
	if (tail < r->next || tail - r->next > r->capacity)
		return -(int64_t)MD_RING_BAD_TAIL;
	return (int64_t)(tail - r->next);
}

/* Copy the next record out (the copy is what gets validated) and advance the
 * private index.  md_ring_release() publishes the head. */
static inline int md_ring_copy_next(struct md_ring_cons *r, void *dst)
{
	const char *src = (const char *)r->data + (size_t)(r->next & (r->capacity - 1)) * r->rec_size;
	memcpy(dst, src, r->rec_size);
	uint32_t pos = *(const uint32_t *)dst;
	uint32_t want = (uint32_t)r->next;
	r->next++;
	return pos == want ? MD_RING_OK : MD_RING_TORN;
}

static inline void md_ring_release(struct md_ring_cons *r)
{
	md_store_release(r->head, r->next);
}

/* Skip everything published so far (resynchronisation after a bad tail). */
static inline void md_ring_skip_to(struct md_ring_cons *r, uint64_t index)
{
	r->next = index;
	md_store_release(r->head, r->next);
}

/* ---- seqlock over the parameter block (daemon writes, engines read) ---- */
static inline void md_seqlock_write_begin(uint64_t *seq)
{
	uint64_t s = md_load_relaxed(seq);
	md_store_relaxed(seq, s + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}
static inline void md_seqlock_write_end(uint64_t *seq)
{
	uint64_t s = md_load_relaxed(seq);
	md_store_release(seq, s + 1);
}

/* Copy `size` bytes at src into dst consistently; returns the even sequence
 * number read plus 2 (so never 0, and distinct for distinct versions), or 0
 * after `tries` failed attempts. Word copies go through relaxed atomic loads
 * so a concurrent writer is not a data race. */
static inline uint64_t md_seqlock_read(const uint64_t *seq, void *dst, const void *src,
				       size_t size, int tries)
{
	for (int i = 0; i < tries; i++) {
		uint64_t s0 = md_load_acquire(seq);
		if (s0 & 1)
			continue;
		const uint64_t *s64 = (const uint64_t *)src;
		uint64_t *d64 = (uint64_t *)dst;
		for (size_t k = 0; k < size / 8; k++)
			d64[k] = md_load_relaxed(&s64[k]);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (md_load_relaxed(seq) == s0)
			return s0 + 2; /* never 0 on success, injective in s0 */
	}
	return 0;
}

#endif /* MEMDECAY_RING_H */
