/*
 * memdecay_ring.h — the single-producer single-consumer ring both sides use.
 *
 * Indices are free-running u64 counters; slot = index & (capacity - 1).  The
 * producer owns `tail` (in its own segment), the consumer owns `head` (in its
 * own segment); each only reads the other's.  The producer fills a record,
 * then release-stores its `pos` stamp (first u32: the low 32 bits of its
 * index), then release-stores the tail.  The consumer treats the producer's
 * tail as untrusted: tail - head > capacity, or a tail that went backwards,
 * is a protocol violation, not a reason to read out of bounds.  Capacity and
 * the data pointer come from the reader's private copy of the geometry, never
 * from shared memory.
 *
 * Two ways to consume.  By tail (md_ring_available + md_ring_copy_next): one
 * tail load per batch, then the records; a pos mismatch is a torn or stale
 * record.  By stamp (md_ring_poll_stamped): the stamp is the publication
 * flag, so a spinning consumer touches one cache line per record instead of
 * two (the tail's, then the record's).  The tail stays the authoritative
 * index for validation (md_ring_check_tail), resync and bad-tail checks.
 *
 * Stamp polling relies on: every ring starts zero-filled at index 0 on a
 * fresh segment and indices never restart on a used one (so a slot holds
 * either 0 or the stamp of an index a multiple of capacity below the one
 * wanted; capacity < 2^32); and on a producer that writes the stamp last.
 * A zero stamp is ambiguous (fresh slot, a producer's memset mid-fill, or a
 * genuine index 0 mod 2^32), so a record whose want is 0 is taken only once a
 * validated tail covers it.
 *
 * Why a stamp-poll consumer never makes head exceed the producer's `next`
 * (which md_ring_reserve would treat as a broken consumer): the consumer
 * advances past index i only after an acquire load A that read the stamp
 * store S of record i, and it stores head = i + 1 (W) after A.  The producer
 * stores S in md_ring_publish{,_n} and increments `next` past i right after
 * S, in program order; it reads head (L) only in md_ring_reserve{,_at}.  If L
 * read W while L was sequenced before S, then L happens before S, which
 * synchronizes with A, which is sequenced before W: L would read a store that
 * happens after it, which C11 coherence forbids.  So any L that sees
 * head = i + 1 comes after S and so after next = i + 1.  The same holds for
 * md_ring_publish_n, which stamps a batch before advancing `next`, and for the
 * want-0 case, whose tail is stored even later.
 *
 * A hostile producer may stamp records ahead of its tail.  A stamp-poll
 * consumer then takes them (they are validated like any record; the same
 * producer could as well have advanced its tail) but never more than one
 * capacity past the last tail it validated: there md_ring_poll_stamped reloads
 * and validates the tail, and reports EMPTY until the tail catches up.  A
 * legitimate producer lags its stamps by at most the batch being published,
 * which fits in a capacity.  A consumer that polls stamps must validate the
 * tail with md_ring_check_tail (which allows that lag), never with
 * md_ring_available (which takes tail < head as a violation).  The daemon
 * drains the stats ring by tail, in bulk, and never stamp-polls it.
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
	uint64_t tail_seen;       /* last tail validated (stamp polling); 0 at start */
};

enum md_ring_status {
	MD_RING_OK = 0,
	MD_RING_EMPTY = 1,
	MD_RING_FULL = 2,
	MD_RING_BAD_TAIL = 3,     /* tail behind head or more than capacity ahead */
	MD_RING_TORN = 4,         /* record pos does not match its index */
};

/* A usable ring capacity: a non-zero power of two (slot = index & (capacity - 1)). */
static inline int md_ring_capacity_ok(uint32_t capacity)
{
	return capacity != 0 && (capacity & (capacity - 1)) == 0;
}

/* What both views need: non-NULL words, a usable capacity, room for the stamp. */
static inline int md_ring_geometry_ok(const void *data, uint32_t capacity, uint32_t rec_size,
				      const void *tail, const void *head)
{
	return data && tail && head && md_ring_capacity_ok(capacity) &&
	       rec_size >= sizeof(uint32_t);
}

/* The one way to build a view.  Every field is set from the ring's geometry:
 * `data` (capacity * rec_size bytes), `capacity` (power of two), `rec_size`
 * (at least the u32 pos stamp), the producer's `tail` word and the
 * consumer's `head` word (each in its owner's segment), and `start`, the
 * index the ring is at (0 on a fresh segment; a view re-made over a used one
 * passes the index its side last published).  The caller passes its private
 * copy of the geometry, never numbers read back from shared memory.
 *
 * Nothing is read from shared memory here.  The producer starts with
 * next = start and its cached head a full ring behind, so its first reserve
 * reads and checks the consumer's head (a reused ring with unread records is
 * never overwritten, a head ahead of start is refused as full); the consumer
 * starts with next = tail_seen = start.  Returns 0, or -1 with the view zeroed when
 * the capacity is not a power of two (or is 0), the record cannot hold its
 * stamp, or a pointer is NULL. */
static inline int md_ring_prod_init(struct md_ring_prod *r, void *data, uint32_t capacity,
				    uint32_t rec_size, uint64_t *tail, const uint64_t *head,
				    uint64_t start)
{
	memset(r, 0, sizeof(*r));
	if (!md_ring_geometry_ok(data, capacity, rec_size, tail, head))
		return -1;
	r->data = data;
	r->tail = tail;
	r->head = head;
	r->capacity = capacity;
	r->rec_size = rec_size;
	r->next = start;
	r->cached_head = start - capacity; /* unknown: the first reserve loads it */
	return 0;
}

static inline int md_ring_cons_init(struct md_ring_cons *r, const void *data, uint32_t capacity,
				    uint32_t rec_size, const uint64_t *tail, uint64_t *head,
				    uint64_t start)
{
	memset(r, 0, sizeof(*r));
	if (!md_ring_geometry_ok(data, capacity, rec_size, tail, head))
		return -1;
	r->data = data;
	r->tail = tail;
	r->head = head;
	r->capacity = capacity;
	r->rec_size = rec_size;
	r->next = start;
	r->tail_seen = start;
	return 0;
}

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

/* Stamp pos (first u32 of every record) last, with release, which publishes
 * the record to a stamp-poll consumer; then the tail, for everyone. */
static inline void md_ring_publish(struct md_ring_prod *r, void *rec)
{
	md_store_release((uint32_t *)rec, (uint32_t)r->next);
	r->next++;
	md_store_release(r->tail, r->next);
}

/* Several records reserved with md_ring_reserve_at() become visible at once:
 * md_ring_publish_n() stamps them (the last first, so a stamp-poll consumer
 * that sees the first sees the whole batch) and then releases the tail.  The
 * slot returned is not stamped; whatever pos the caller leaves is overwritten. */
static inline void *md_ring_reserve_at(struct md_ring_prod *r, uint32_t k)
{
	uint64_t idx = r->next + k;
	if (idx - r->cached_head >= r->capacity) {
		r->cached_head = md_load_acquire(r->head);
		if (r->cached_head > r->next || idx - r->cached_head >= r->capacity)
			return NULL;
	}
	char *slot = (char *)r->data + (size_t)(idx & (r->capacity - 1)) * r->rec_size;
	return slot;
}
static inline void md_ring_publish_n(struct md_ring_prod *r, uint32_t n)
{
	for (uint32_t k = n; k-- > 0;) {
		uint64_t idx = r->next + k;
		char *slot = (char *)r->data + (size_t)(idx & (r->capacity - 1)) * r->rec_size;
		md_store_release((uint32_t *)slot, (uint32_t)idx);
	}
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
/* A copied record's stamp check, the same on every ring (host stats and
 * commands, the CUDA stats ring): pos must be the low 32 bits of the index
 * the record was taken at. */
static inline int md_ring_stamp_ok(const void *rec, uint64_t index)
{
	uint32_t pos;
	memcpy(&pos, rec, sizeof(pos));
	return pos == (uint32_t)index;
}

static inline int md_ring_copy_next(struct md_ring_cons *r, void *dst)
{
	const char *src = (const char *)r->data + (size_t)(r->next & (r->capacity - 1)) * r->rec_size;
	memcpy(dst, src, r->rec_size);
	int ok = md_ring_stamp_ok(dst, r->next);
	r->next++;
	return ok ? MD_RING_OK : MD_RING_TORN;
}

static inline void md_ring_release(struct md_ring_cons *r)
{
	md_store_release(r->head, r->next);
}

/* Skip everything published so far (resynchronisation after a bad tail).
 * `index` is a tail the caller validated. */
static inline void md_ring_skip_to(struct md_ring_cons *r, uint64_t index)
{
	r->next = index;
	r->tail_seen = index;
	md_store_release(r->head, r->next);
}

/* Tail validation for a stamp-poll consumer, which may be ahead of the tail
 * by the batch the producer is publishing.  Violations: a tail behind the
 * last one validated, more than capacity ahead of the consumer, or more than
 * capacity behind it.  Returns the records the tail publishes past r->next
 * (0 when it lags) or -MD_RING_BAD_TAIL. */
static inline int64_t md_ring_check_tail(struct md_ring_cons *r)
{
	uint64_t tail = md_load_acquire(r->tail);
	if (tail < r->tail_seen)
		return -(int64_t)MD_RING_BAD_TAIL;
	if (tail >= r->next ? tail - r->next > r->capacity : r->next - tail > r->capacity)
		return -(int64_t)MD_RING_BAD_TAIL;
	r->tail_seen = tail;
	return tail > r->next ? (int64_t)(tail - r->next) : 0;
}

/* Take the record at r->next if its stamp says it is published: MD_RING_OK
 * (copied to dst, advanced), MD_RING_EMPTY (not stamped yet, or stamped more
 * than a capacity past the last validated tail), MD_RING_TORN (the stamp or
 * the copy's pos changed under the copy: only a hostile producer does that;
 * advanced past it), or MD_RING_BAD_TAIL (a tail reload failed
 * md_ring_check_tail; nothing taken).  The slot's address comes from the
 * consumer's private geometry only.  md_ring_release() publishes the head. */
static inline int md_ring_poll_stamped(struct md_ring_cons *r, void *dst)
{
	const char *src = (const char *)r->data + (size_t)(r->next & (r->capacity - 1)) * r->rec_size;
	const uint32_t *stamp = (const uint32_t *)src;
	uint32_t want = (uint32_t)r->next;
	if (md_load_acquire(stamp) != want)
		return MD_RING_EMPTY;
	/* want 0 is also a fresh or half-filled slot: only a tail vouches for it;
	 * and never run more than a capacity past the last validated tail. */
	uint64_t reach = want == 0 ? 0 : r->capacity;
	if (r->next >= r->tail_seen + reach) {
		if (md_ring_check_tail(r) < 0)
			return MD_RING_BAD_TAIL;
		if (r->next >= r->tail_seen + reach)
			return MD_RING_EMPTY;
	}
	memcpy(dst, src, r->rec_size);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	uint32_t again = md_load_relaxed(stamp), copied;
	memcpy(&copied, dst, sizeof(copied));
	r->next++;
	return again == want && copied == want ? MD_RING_OK : MD_RING_TORN;
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
