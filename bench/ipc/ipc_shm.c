/*
 * ipc_shm.c — the shared-memory transports: the raw cache-line floor, and our
 * stats ring -> command ring (memdecay_ring.h over real memfd segments laid out
 * by memdecay_abi.h), spinning or with the daemon asleep on its doorbell.
 * The engine role sends a 64-byte struct md_stats_rec; the daemon role answers
 * with a 32-byte struct md_cmd, exactly as the real transport does.  Round
 * trips consume by stamp (md_ring_poll_stamped: one cache line per message,
 * as the engine library takes its commands); the stream consumes by tail in
 * bulk, as the daemon drains its stats rings.
 */
#define _GNU_SOURCE
#include "bench_ipc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "memdecay_abi.h"
#include "memdecay_ring.h"
#include "memdecay_clock.h"

/* ------------------------------------------------------------------ floor */

#define FLOOR_SLOTS 4096u

/* One message is one cache line: 56 payload bytes and the stamp that
 * publishes them. */
struct floor_line {
	uint64_t seq;
	uint8_t payload[BENCH_MSG_BYTES - 8];
} __attribute__((aligned(MD_CACHELINE)));

struct floor_state {
	struct floor_line ping;                 /* round trip: one line, both write */
	struct floor_line slots[FLOOR_SLOTS];   /* throughput: stamped lines */
	uint64_t cons_head __attribute__((aligned(MD_CACHELINE)));
	uint8_t pad[MD_CACHELINE - 8];
};

static int floor_setup(void **state)
{
	void *p = mmap(NULL, sizeof(struct floor_state), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	*state = p;
	return 0;
}

static void floor_teardown(void *state)
{
	munmap(state, sizeof(struct floor_state));
}

/* Round trips [base, base + n) on the ping line; usable in blocks. */
static int floor_rtt_peer(struct floor_state *f, uint64_t base, uint64_t n)
{
	struct floor_line copy;
	uint64_t spins = 0, deadline = 0;
	for (uint64_t i = base; i < base + n; i++) {
		while (md_load_acquire(&f->ping.seq) != 2 * i + 1) {
			cpu_relax();
			if (bench_spin_expired(&spins, &deadline))
				return -1;
		}
		memcpy(&copy, &f->ping, sizeof(copy));
		copy.payload[0]++;
		memcpy(f->ping.payload, copy.payload, sizeof(copy.payload));
		md_store_release(&f->ping.seq, 2 * i + 2);
	}
	return 0;
}

static int floor_rtt_self(struct floor_state *f, uint64_t base, uint64_t n, uint64_t *samples)
{
	struct floor_line copy;
	uint8_t payload[sizeof(copy.payload)];
	uint64_t spins = 0, deadline = 0;
	memset(payload, 0x5a, sizeof(payload));
	for (uint64_t i = base; i < base + n; i++) {
		uint64_t t0 = bench_ticks();
		memcpy(f->ping.payload, payload, sizeof(payload));
		md_store_release(&f->ping.seq, 2 * i + 1);
		while (md_load_acquire(&f->ping.seq) != 2 * i + 2) {
			cpu_relax();
			if (bench_spin_expired(&spins, &deadline))
				return -1;
		}
		memcpy(&copy, &f->ping, sizeof(copy));
		samples[i - base] = bench_ticks() - t0;
		payload[1] = copy.payload[0];
	}
	return 0;
}

static int floor_peer(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n)
{
	struct floor_state *f = state;
	struct floor_line copy;
	uint64_t spins = 0, deadline = 0;

	__atomic_store_n(&sh->peer_ready, 1, __ATOMIC_RELEASE);
	if (mode == BENCH_RTT)
		return floor_rtt_peer(f, 0, n);
	for (uint64_t i = 0; i < n; i++) {
		struct floor_line *s = &f->slots[i & (FLOOR_SLOTS - 1)];
		while (md_load_acquire(&s->seq) != i + 1) {
			cpu_relax();
			if (bench_spin_expired(&spins, &deadline))
				return -1;
		}
		memcpy(&copy, s, sizeof(copy));
		if ((i & 63) == 63)
			md_store_release(&f->cons_head, i + 1);
	}
	sh->tput_end_ns = md_now_ns();
	md_store_release(&f->cons_head, n);
	return 0;
}

static int floor_self(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n,
		      uint64_t *samples)
{
	struct floor_state *f = state;
	struct floor_line copy;
	uint8_t payload[sizeof(copy.payload)];
	uint64_t spins = 0, deadline = 0;

	memset(payload, 0x5a, sizeof(payload));
	if (mode == BENCH_RTT)
		return floor_rtt_self(f, 0, n, samples);
	uint64_t cached_head = 0;
	sh->tput_start_ns = md_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		while (i - cached_head >= FLOOR_SLOTS) {
			cached_head = md_load_acquire(&f->cons_head);
			if (i - cached_head >= FLOOR_SLOTS) {
				cpu_relax();
				if (bench_spin_expired(&spins, &deadline))
					return -1;
			}
		}
		struct floor_line *s = &f->slots[i & (FLOOR_SLOTS - 1)];
		memcpy(s->payload, payload, sizeof(payload));
		md_store_release(&s->seq, i + 1);
	}
	return 0;
}

/* ------------------------------------------------------------------ rings */

/* Geometry of one benchmark engine, rings sized by the daemon's rule
 * (sidecar/daemon/attach.c): stats = 4 x pages, commands = pages, powers of two. */
#define RING_MAX_SEQS 64u
uint32_t bench_ring_page_capacity = 16384u;
#define RING_PAGE_CAPACITY bench_ring_page_capacity
#define RING_STATS_CAPACITY bench_ring_stats_capacity()
#define RING_CMD_CAPACITY bench_ring_cmd_capacity()

static uint32_t pow2_at_least(uint64_t v)
{
	uint32_t p = 1;
	while (p < v && p < MD_RING_CAPACITY_MAX)
		p <<= 1;
	return p;
}

uint32_t bench_ring_stats_capacity(void)
{
	uint64_t want = 4ull * bench_ring_page_capacity;
	return pow2_at_least(want > 4096 ? want : 4096);
}

uint32_t bench_ring_cmd_capacity(void)
{
	return pow2_at_least(bench_ring_page_capacity > 1024 ? bench_ring_page_capacity : 1024);
}

struct ring_state {
	int engine_fd, daemon_fd;
	int bell_to_daemon, bell_to_engine;
	uint64_t engine_size, daemon_size;
	struct md_engine_offsets eoff;
	struct md_daemon_offsets doff;
	int doorbell;  /* the daemon sleeps on bell_to_daemon when idle */
};

/* One side's mappings and ring views, private to that process. */
struct ring_view {
	char *eng, *dae;
	struct md_engine_ctrl *ectrl;
	struct md_daemon_ctrl *dctrl;
	struct md_ring_prod prod;
	struct md_ring_cons cons;
};

static int ring_make_segment(const char *name, uint64_t size, const struct md_segment_header *hdr)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0)
		goto fail;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto fail;
	struct md_segment_header *h = p;
	memcpy(h, hdr, sizeof(*h));
	h->magic = 0;
	md_store_release(&h->magic, MD_ABI_MAGIC); /* written last: ready */
	munmap(p, size);
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto fail;
	return fd;
fail:;
	int e = -errno;
	close(fd);
	return e;
}

static int ring_setup_common(void **state, int doorbell)
{
	struct ring_state *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->doorbell = doorbell;
	r->engine_size = md_engine_layout(RING_PAGE_CAPACITY, RING_MAX_SEQS, RING_STATS_CAPACITY,
					  &r->eoff);
	r->daemon_size = md_daemon_layout(RING_CMD_CAPACITY, &r->doff);

	struct md_segment_header h;
	memset(&h, 0, sizeof(h));
	h.magic = MD_ABI_MAGIC;
	h.abi_major = MD_ABI_MAJOR;
	h.abi_minor = MD_ABI_MINOR;
	h.header_size = sizeof(h);
	h.engine_id = 1;
	h.page_tokens = MD_PAGE_TOKENS_DEFAULT;
	h.page_capacity = RING_PAGE_CAPACITY;
	h.max_seqs = RING_MAX_SEQS;
	h.stats_capacity = RING_STATS_CAPACITY;
	h.cmd_capacity = RING_CMD_CAPACITY;
	h.instance_id = 0xbe7c4;
	h.kind = MD_SEGMENT_ENGINE;
	h.segment_size = r->engine_size;
	h.off.engine = r->eoff;
	r->engine_fd = ring_make_segment("memdecay-bench-engine", r->engine_size, &h);
	h.kind = MD_SEGMENT_DAEMON;
	h.segment_size = r->daemon_size;
	memset(&h.off, 0, sizeof(h.off));
	h.off.daemon = r->doff;
	r->daemon_fd = ring_make_segment("memdecay-bench-daemon", r->daemon_size, &h);
	r->bell_to_daemon = eventfd(0, EFD_CLOEXEC);
	r->bell_to_engine = eventfd(0, EFD_CLOEXEC);
	if (r->engine_fd < 0 || r->daemon_fd < 0 || r->bell_to_daemon < 0 || r->bell_to_engine < 0) {
		int e = r->engine_fd < 0 ? r->engine_fd : r->daemon_fd < 0 ? r->daemon_fd : -EMFILE;
		free(r);
		return e;
	}
	*state = r;
	return 0;
}

static int ring_spin_setup(void **state)
{
	return ring_setup_common(state, 0);
}

static int ring_doorbell_setup(void **state)
{
	return ring_setup_common(state, 1);
}

static void ring_teardown(void *state)
{
	struct ring_state *r = state;
	close(r->engine_fd);
	close(r->daemon_fd);
	close(r->bell_to_daemon);
	close(r->bell_to_engine);
	free(r);
}

/* Map both segments the way each side does in production: the engine writes
 * its own segment and reads the daemon's, and the other way round. */
static int ring_attach(struct ring_state *r, struct ring_view *v, int as_engine)
{
	int eprot = as_engine ? PROT_READ | PROT_WRITE : PROT_READ;
	int dprot = as_engine ? PROT_READ : PROT_READ | PROT_WRITE;
	v->eng = mmap(NULL, r->engine_size, eprot, MAP_SHARED | MAP_POPULATE, r->engine_fd, 0);
	v->dae = mmap(NULL, r->daemon_size, dprot, MAP_SHARED | MAP_POPULATE, r->daemon_fd, 0);
	if (v->eng == MAP_FAILED || v->dae == MAP_FAILED)
		return -1;
	const struct md_segment_header *eh = (const void *)v->eng;
	const struct md_segment_header *dh = (const void *)v->dae;
	if (md_load_acquire(&eh->magic) != MD_ABI_MAGIC || md_load_acquire(&dh->magic) != MD_ABI_MAGIC)
		return -1;
	/* Geometry from our private copy (r), never from the shared headers. */
	v->ectrl = (struct md_engine_ctrl *)(v->eng + r->eoff.ctrl);
	v->dctrl = (struct md_daemon_ctrl *)(v->dae + r->doff.ctrl);
	/* Indices carry over from the previous measurement on these segments. */
	char *stats = v->eng + r->eoff.stats_ring, *cmds = v->dae + r->doff.cmd_ring;
	uint64_t *stail = &v->ectrl->stats_tail, *shead = &v->dctrl->stats_head;
	uint64_t *ctail = &v->dctrl->cmd_tail, *chead = &v->ectrl->cmd_head;
	if (as_engine)
		return md_ring_prod_init(&v->prod, stats, RING_STATS_CAPACITY,
					 sizeof(struct md_stats_rec), stail, shead,
					 md_load_acquire(stail)) |
		       md_ring_cons_init(&v->cons, cmds, RING_CMD_CAPACITY, sizeof(struct md_cmd),
					 ctail, chead, md_load_acquire(chead));
	return md_ring_prod_init(&v->prod, cmds, RING_CMD_CAPACITY, sizeof(struct md_cmd), ctail,
				 chead, md_load_acquire(ctail)) |
	       md_ring_cons_init(&v->cons, stats, RING_STATS_CAPACITY, sizeof(struct md_stats_rec),
				 stail, shead, md_load_acquire(shead));
}

static void ring_detach(struct ring_state *r, struct ring_view *v)
{
	munmap(v->eng, r->engine_size);
	munmap(v->dae, r->daemon_size);
}

static void ring_bell(int fd)
{
	uint64_t one = 1;
	ssize_t w = write(fd, &one, sizeof(one));
	(void)w;
}

/* Daemon side: wait for stats records.  Spins, or (doorbell) declares itself
 * asleep, fences, re-checks, and blocks on its eventfd. */
static int64_t ring_daemon_wait(struct ring_state *r, struct ring_view *v, struct bench_shared *sh,
				uint64_t *spins, uint64_t *deadline)
{
	for (;;) {
		int64_t avail = md_ring_available(&v->cons);
		if (avail != 0)
			return avail;
		if (!r->doorbell) {
			cpu_relax();
			if (bench_spin_expired(spins, deadline))
				return -1;
			continue;
		}
		md_store_relaxed(&v->dctrl->sleeping, 1u);
		md_fence_full();
		avail = md_ring_available(&v->cons);
		if (avail == 0) {
			uint64_t cnt;
			if (read(r->bell_to_daemon, &cnt, sizeof(cnt)) == (ssize_t)sizeof(cnt))
				sh->wakeups++;
		}
		md_store_relaxed(&v->dctrl->sleeping, 0u);
	}
}

/* The daemon's per-record validation: pos stamp, type, slot bounds. */
static int ring_take_rec(struct ring_view *v, struct md_stats_rec *rec)
{
	if (md_ring_copy_next(&v->cons, rec) != MD_RING_OK)
		return -1;
	if (rec->type != MD_REC_ATTN_PAGE || rec->slot >= RING_PAGE_CAPACITY)
		return -1;
	return 0;
}

/* Daemon side, round trips: wait for one record by its stamp, spinning or
 * (doorbell) sleeping as ring_daemon_wait does; the re-check after the fence
 * is the stamp, which the engine stores before its tail and its fence. */
static int ring_daemon_take(struct ring_state *r, struct ring_view *v, struct bench_shared *sh,
			    struct md_stats_rec *rec, uint64_t *spins, uint64_t *deadline)
{
	for (;;) {
		int st = md_ring_poll_stamped(&v->cons, rec);
		if (st == MD_RING_EMPTY && r->doorbell) {
			md_store_relaxed(&v->dctrl->sleeping, 1u);
			md_fence_full();
			st = md_ring_poll_stamped(&v->cons, rec);
			if (st == MD_RING_EMPTY) {
				uint64_t cnt;
				if (read(r->bell_to_daemon, &cnt, sizeof(cnt)) == (ssize_t)sizeof(cnt))
					sh->wakeups++;
			}
			md_store_relaxed(&v->dctrl->sleeping, 0u);
		}
		if (st != MD_RING_EMPTY)
			return st == MD_RING_OK ? 0 : -1;
		if (!r->doorbell) {
			cpu_relax();
			if (bench_spin_expired(spins, deadline))
				return -1;
		}
	}
}

/* Daemon side of n round trips: take one record, answer one command. */
static int ring_rtt_peer(struct ring_state *r, struct ring_view *v, struct bench_shared *sh,
			 uint64_t n)
{
	struct md_stats_rec rec;
	uint64_t spins = 0, deadline = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (ring_daemon_take(r, v, sh, &rec, &spins, &deadline) < 0)
			return -1;
		if (rec.type != MD_REC_ATTN_PAGE || rec.slot >= RING_PAGE_CAPACITY)
			return -1;
		md_ring_release(&v->cons);
		struct md_cmd *c;
		while (!(c = md_ring_reserve(&v->prod))) {
			cpu_relax();
			if (bench_spin_expired(&spins, &deadline))
				return -1;
		}
		struct md_cmd cmd = {
			.type = MD_CMD_EVICT,
			.reason = MD_EVICT_SEQUENCE_BUDGET,
			.seq = rec.seq,
			.slot = rec.slot,
			.gen = rec.gen,
			.decided_ns = rec.clock,
		};
		memcpy(c, &cmd, sizeof(cmd));
		md_ring_publish(&v->prod, c);
		if (r->doorbell) {
			md_fence_full();
			if (md_load_relaxed(&v->ectrl->sleeping))
				ring_bell(r->bell_to_engine);
		}
	}
	return 0;
}

/* Daemon side of a stream: drain whatever is there, release once per batch. */
static int ring_tput_peer(struct ring_state *r, struct ring_view *v, struct bench_shared *sh,
			  uint64_t n)
{
	struct md_stats_rec rec;
	uint64_t spins = 0, deadline = 0;
	for (uint64_t i = 0; i < n;) {
		int64_t avail = ring_daemon_wait(r, v, sh, &spins, &deadline);
		if (avail < 0)
			return -1;
		for (int64_t k = 0; k < avail; k++, i++)
			if (ring_take_rec(v, &rec) < 0)
				return -1;
		md_ring_release(&v->cons);
	}
	sh->tput_end_ns = md_now_ns();
	return 0;
}

static int ring_peer(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n)
{
	struct ring_state *r = state;
	struct ring_view v;
	if (ring_attach(r, &v, 0) < 0)
		return -1;
	__atomic_store_n(&sh->peer_ready, 1, __ATOMIC_RELEASE);
	int rc = mode == BENCH_RTT ? ring_rtt_peer(r, &v, sh, n) : ring_tput_peer(r, &v, sh, n);
	ring_detach(r, &v);
	return rc;
}

/* Engine side: publish one attention record, ringing the daemon's doorbell
 * only when it has declared itself asleep. */
static int ring_send(struct ring_state *r, struct ring_view *v, struct bench_shared *sh,
		     uint64_t i, uint64_t *spins, uint64_t *deadline)
{
	struct md_stats_rec *slot;
	while (!(slot = md_ring_reserve(&v->prod))) {
		cpu_relax();
		if (bench_spin_expired(spins, deadline))
			return -1;
	}
	struct md_stats_rec rec = {
		.type = MD_REC_ATTN_PAGE,
		.seq = (uint32_t)(i & (RING_MAX_SEQS - 1)),
		.slot = (uint32_t)(i % RING_PAGE_CAPACITY),
		.gen = (uint32_t)(i / RING_PAGE_CAPACITY) + 1,
		.clock = i,
	};
	rec.u.attn_page.mass = 0.25f;
	rec.u.attn_page.refresh = 0x1;
	memcpy(slot, &rec, sizeof(rec));
	md_ring_publish(&v->prod, slot);
	if (r->doorbell) {
		md_fence_full();
		if (md_load_relaxed(&v->dctrl->sleeping)) {
			ring_bell(r->bell_to_daemon);
			sh->doorbells++;
		}
	}
	return 0;
}

/* Engine side of round trips [base, base + n): publish one record, spin for
 * the command that answers it. */
static int ring_rtt_self(struct ring_state *r, struct ring_view *v, struct bench_shared *sh,
			 uint64_t base, uint64_t n, uint64_t *samples)
{
	uint64_t spins = 0, deadline = 0;
	for (uint64_t i = base; i < base + n; i++) {
		if (r->doorbell) {
			/* Let the daemon really fall asleep before we time the
			 * wake-up: it has raised its flag, then give it 20 us to
			 * enter the kernel.  Not part of the measurement. */
			while (!md_load_acquire(&v->dctrl->sleeping)) {
				cpu_relax();
				if (bench_spin_expired(&spins, &deadline))
					return -1;
			}
			uint64_t until = md_now_ns() + 20000;
			while (md_now_ns() < until)
				cpu_relax();
		}
		uint64_t t0 = bench_ticks();
		if (ring_send(r, v, sh, i, &spins, &deadline) < 0)
			return -1;
		struct md_cmd cmd;
		int st;
		while ((st = md_ring_poll_stamped(&v->cons, &cmd)) == MD_RING_EMPTY) {
			cpu_relax();
			if (bench_spin_expired(&spins, &deadline))
				return -1;
		}
		md_ring_release(&v->cons);
		samples[i - base] = bench_ticks() - t0;
		if (st != MD_RING_OK || cmd.slot != (uint32_t)(i % RING_PAGE_CAPACITY))
			return -1;
	}
	return 0;
}

static int ring_self(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n,
		     uint64_t *samples)
{
	struct ring_state *r = state;
	struct ring_view v;
	uint64_t spins = 0, deadline = 0;
	int rc = 0;

	if (ring_attach(r, &v, 1) < 0)
		return -1;
	if (mode == BENCH_RTT) {
		rc = ring_rtt_self(r, &v, sh, 0, n, samples);
	} else {
		sh->tput_start_ns = md_now_ns();
		for (uint64_t i = 0; i < n && rc == 0; i++)
			rc = ring_send(r, &v, sh, i, &spins, &deadline);
	}
	ring_detach(r, &v);
	return rc;
}

/* ------------------------------------------------- floor and ring, paired */

/* The floor and ring_spin round trips alternate in blocks inside one process
 * pair, so both see the same cores, the same host placement of the vCPUs and
 * the same neighbours: their ratio is measured, not inferred across runs.
 * samples[0, n) are the floor's, samples[n, 2n) the ring's. */
#define PAIR_BLOCK 500u

struct pair_state {
	struct floor_state *f;
	struct ring_state *r;
};

static int pair_setup(void **state)
{
	struct pair_state *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	void *f = NULL, *r = NULL;
	int rc = floor_setup(&f);
	if (rc == 0 && (rc = ring_spin_setup(&r)) < 0)
		floor_teardown(f);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->f = f;
	p->r = r;
	*state = p;
	return 0;
}

static void pair_teardown(void *state)
{
	struct pair_state *p = state;
	floor_teardown(p->f);
	ring_teardown(p->r);
	free(p);
}

static int pair_peer(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n)
{
	struct pair_state *p = state;
	struct ring_view v;
	int rc = 0;
	if (mode != BENCH_RTT || ring_attach(p->r, &v, 0) < 0)
		return -1;
	__atomic_store_n(&sh->peer_ready, 1, __ATOMIC_RELEASE);
	for (uint64_t b = 0; b < n && rc == 0; b += PAIR_BLOCK) {
		uint64_t k = n - b < PAIR_BLOCK ? n - b : PAIR_BLOCK;
		rc = floor_rtt_peer(p->f, b, k);
		if (rc == 0)
			rc = ring_rtt_peer(p->r, &v, sh, k);
	}
	ring_detach(p->r, &v);
	return rc;
}

static int pair_self(void *state, struct bench_shared *sh, enum bench_mode mode, uint64_t n,
		     uint64_t *samples)
{
	struct pair_state *p = state;
	struct ring_view v;
	int rc = 0;
	if (mode != BENCH_RTT || ring_attach(p->r, &v, 1) < 0)
		return -1;
	for (uint64_t b = 0; b < n && rc == 0; b += PAIR_BLOCK) {
		uint64_t k = n - b < PAIR_BLOCK ? n - b : PAIR_BLOCK;
		rc = floor_rtt_self(p->f, b, k, samples + b);
		if (rc == 0)
			rc = ring_rtt_self(p->r, &v, sh, b, k, samples + n + b);
	}
	ring_detach(p->r, &v);
	return rc;
}

const struct bench_transport bench_floor_ring_pair = {
	.name = "floor+ring_spin",
	.setup = pair_setup,
	.peer = pair_peer,
	.self = pair_self,
	.teardown = pair_teardown,
	.bytes_out = BENCH_MSG_BYTES,
	.bytes_back = BENCH_MSG_BYTES,
};

const struct bench_transport bench_floor = {
	.name = "floor",
	.setup = floor_setup,
	.peer = floor_peer,
	.self = floor_self,
	.teardown = floor_teardown,
	.bytes_out = BENCH_MSG_BYTES,
	.bytes_back = BENCH_MSG_BYTES,
};

const struct bench_transport bench_ring_spin = {
	.name = "ring_spin",
	.setup = ring_spin_setup,
	.peer = ring_peer,
	.self = ring_self,
	.teardown = ring_teardown,
	.bytes_out = sizeof(struct md_stats_rec),
	.bytes_back = sizeof(struct md_cmd),
};

const struct bench_transport bench_ring_doorbell = {
	.name = "ring_doorbell",
	.setup = ring_doorbell_setup,
	.peer = ring_peer,
	.self = ring_self,
	.teardown = ring_teardown,
	.bytes_out = sizeof(struct md_stats_rec),
	.bytes_back = sizeof(struct md_cmd),
};

