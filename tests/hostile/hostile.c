/*
 * hostile.c — memdecay-hostile, a test tool that plays the engine the daemon
 * must survive.  It speaks the ABI directly (shm_layout/ only, no libmemdecay):
 * HELLO on the control socket, the four SCM_RIGHTS descriptors, then writes
 * into its own segment whatever a buggy or malicious engine could write.
 *
 *   --mode shm     garbage in the rings, the page table, the clocks and the
 *                  control words; tries to resize and write-map the segments
 *   --mode ctl     abuse of the control socket: random bytes, oversized lines,
 *                  half-open and slow connections, a thousand at once
 *   --mode replay  a well-formed engine whose page table is loaded from a
 *                  memdecay-loadgen --dump-pages file, then held (no steps, no
 *                  attention) and re-seeded after every daemon restart: the
 *                  fixed state the restart-determinism test compares
 *   --mode relabel one long valid sequence (--capacity pages), then valid
 *                  RELABEL records over all of it as fast as the ring takes
 *                  them: the most expensive records a correct engine may send
 *   --mode resync  a page table of --capacity live pages in one sequence,
 *                  positions ascending or descending with the slot (--order),
 *                  and resync requests (once, or every --round-us: --repeat)
 *   --mode idle    --count engines that attach and then sleep (no heartbeat
 *                  due), held for --duration-ms
 * One JSON line on stdout says what was done and what the daemon did.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "memdecay_abi.h"
#include "memdecay_ring.h"
#include "memdecay_clock.h"

static volatile sig_atomic_t g_stop, g_settle;
static void on_signal(int s) { (void)s; g_stop = 1; }
static void on_settle(int s) { (void)s; g_settle = 1; }

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

struct opts {
	const char *socket, *mode, *name, *replay, *attacks, *weight, *order;
	uint64_t duration_ms, seed;
	uint32_t capacity, seqs, conns, round_us, page_tokens, count;
	int repeat, regen;
} o = { .mode = "shm", .name = "hostile", .duration_ms = 3000, .seed = 1, .capacity = 64,
	.seqs = 4, .conns = 1000, .round_us = 1000, .page_tokens = 16, .order = "asc",
	.count = 1 };

/* ---- one attachment, done by hand ---- */
struct att {
	int sock, eseg_fd, dseg_fd, bell_d, bell_e;
	char *eseg;
	const char *dseg;
	uint64_t eseg_size, dseg_size;
	struct md_segment_header eh, dh;   /* copies taken at attach */
	struct md_engine_ctrl *ectrl;
	struct md_page_entry *ptab;
	uint64_t *clock;
	struct md_stats_rec *ring;
	const struct md_daemon_ctrl *dctrl;
	uint32_t engine_id;
	uint64_t instance;
	uint64_t tail;                      /* our producer index */
};

static int sock_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static void att_close(struct att *a)
{
	if (a->eseg)
		munmap(a->eseg, a->eseg_size);
	if (a->dseg)
		munmap((void *)a->dseg, a->dseg_size);
	int *fds[] = { &a->sock, &a->eseg_fd, &a->dseg_fd, &a->bell_d, &a->bell_e };
	for (int i = 0; i < 5; i++)
		if (*fds[i] >= 0)
			close(*fds[i]);
	memset(a, 0, sizeof(*a));
	a->sock = a->eseg_fd = a->dseg_fd = a->bell_d = a->bell_e = -1;
}

/* HELLO, then the reply line with its four descriptors.  0 or -errno; on a
 * refusal the daemon's line is left in err. */
static int att_open(struct att *a, char *err, size_t errlen)
{
	memset(a, 0, sizeof(*a));
	a->sock = a->eseg_fd = a->dseg_fd = a->bell_d = a->bell_e = -1;
	err[0] = 0;
	int fd = sock_connect(o.socket);
	if (fd < 0) {
		snprintf(err, errlen, "connect: %s", strerror(-fd));
		return fd;
	}
	a->sock = fd;
	char hello[512];
	int n = snprintf(hello, sizeof(hello),
			 "HELLO abi=%u.%u name=%s page_tokens=%u page_capacity=%u max_seqs=%u%s%s\n",
			 MD_ABI_MAJOR, MD_ABI_MINOR, o.name, o.page_tokens, o.capacity, o.seqs,
			 o.weight ? " weight=" : "", o.weight ? o.weight : "");
	if (send(fd, hello, (size_t)n, MSG_NOSIGNAL) != n) {
		snprintf(err, errlen, "send HELLO: %s", strerror(errno));
		att_close(a);
		return -EIO;
	}
	char line[1024];
	size_t len = 0;
	int fds[MD_ATTACH_FDS], nfds = 0;
	while (len + 1 < sizeof(line)) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 60000) <= 0) { /* huge geometries attach slowly under ASan */
			snprintf(err, errlen, "no reply to HELLO");
			att_close(a);
			return -ETIMEDOUT;
		}
		union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 8)]; } cm;
		struct iovec iov = { line + len, sizeof(line) - 1 - len };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				     .msg_controllen = sizeof(cm.b) };
		ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		if (r <= 0) {
			snprintf(err, errlen, "connection closed before a reply");
			att_close(a);
			return -ECONNRESET;
		}
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int tmp[8];
			memcpy(tmp, CMSG_DATA(h), (k > 8 ? 8 : k) * sizeof(int));
			for (size_t i = 0; i < k && i < 8; i++) {
				if (nfds < MD_ATTACH_FDS)
					fds[nfds++] = tmp[i];
				else
					close(tmp[i]);
			}
		}
		len += (size_t)r;
		line[len] = 0;
		if (memchr(line, '\n', len))
			break;
	}
	char *nl = strchr(line, '\n');
	if (nl)
		*nl = 0;
	if (nfds > 0) a->eseg_fd = fds[0];
	if (nfds > 1) a->dseg_fd = fds[1];
	if (nfds > 2) a->bell_d = fds[2];
	if (nfds > 3) a->bell_e = fds[3];
	unsigned id;
	unsigned long long inst;
	if (sscanf(line, "OK engine_id=%u instance=%llu", &id, &inst) != 2 || nfds != 4) {
		snprintf(err, errlen, "%.400s", line);
		att_close(a);
		return -EPERM;
	}
	a->engine_id = id;
	a->instance = inst;
	struct stat st;
	if (fstat(a->eseg_fd, &st) < 0 || st.st_size < (off_t)sizeof(struct md_segment_header))
		goto bad;
	a->eseg_size = (uint64_t)st.st_size;
	if (fstat(a->dseg_fd, &st) < 0 || st.st_size < (off_t)sizeof(struct md_segment_header))
		goto bad;
	a->dseg_size = (uint64_t)st.st_size;
	void *p = mmap(NULL, a->eseg_size, PROT_READ | PROT_WRITE, MAP_SHARED, a->eseg_fd, 0);
	if (p == MAP_FAILED)
		goto bad;
	a->eseg = p;
	p = mmap(NULL, a->dseg_size, PROT_READ, MAP_SHARED, a->dseg_fd, 0);
	if (p == MAP_FAILED)
		goto bad;
	a->dseg = p;
	memcpy(&a->eh, a->eseg, sizeof(a->eh));
	memcpy(&a->dh, a->dseg, sizeof(a->dh));
	if (a->eh.magic != MD_ABI_MAGIC || a->eh.page_capacity != o.capacity ||
	    a->eh.off.engine.stats_ring + (uint64_t)a->eh.stats_capacity * 64 > a->eseg_size ||
	    a->dh.off.daemon.ctrl + sizeof(struct md_daemon_ctrl) > a->dseg_size)
		goto bad;
	a->ectrl = (struct md_engine_ctrl *)(a->eseg + a->eh.off.engine.ctrl);
	a->ptab = (struct md_page_entry *)(a->eseg + a->eh.off.engine.page_table);
	a->clock = (uint64_t *)(a->eseg + a->eh.off.engine.seq_clock);
	a->ring = (struct md_stats_rec *)(a->eseg + a->eh.off.engine.stats_ring);
	a->dctrl = (const struct md_daemon_ctrl *)(a->dseg + a->dh.off.daemon.ctrl);
	return 0;
bad:
	snprintf(err, errlen, "bad segments");
	att_close(a);
	return -EPROTO;
}

/* 1 if the daemon closed our control connection (detached us). */
static int att_gone(const struct att *a)
{
	struct pollfd p = { .fd = a->sock, .events = POLLIN };
	if (poll(&p, 1, 0) <= 0)
		return 0;
	char b[256];
	ssize_t n = recv(a->sock, b, sizeof(b), MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

static void bell(const struct att *a)
{
	uint64_t one = 1;
	ssize_t n = write(a->bell_d, &one, sizeof(one));
	(void)n;
}

static void heartbeat(struct att *a)
{
	md_store_relaxed(&a->ectrl->heartbeat_ns, md_now_ns());
}

/* Next record slot, stamped with the right pos unless `torn`. */
static struct md_stats_rec *rec_at(struct att *a, int torn)
{
	struct md_stats_rec *r = &a->ring[a->tail & (a->eh.stats_capacity - 1)];
	memset(r, 0, sizeof(*r));
	r->pos = (uint32_t)a->tail + (torn ? 1u + (uint32_t)(rng() % 1000) : 0u);
	return r;
}

static void rec_push(struct att *a)
{
	a->tail++;
	md_store_release(&a->ectrl->stats_tail, a->tail);
}

/* Keep the producer index where the daemon can follow it: never more than a
 * ring ahead of what it consumed (the daemon resyncs or detaches otherwise). */
static int ring_room(struct att *a, uint32_t need)
{
	uint64_t head = md_load_acquire(&a->dctrl->stats_head);
	if (head > a->tail)
		a->tail = head;
	return a->tail - head + need <= a->eh.stats_capacity / 2;
}

static void pt_write(struct att *a, uint32_t slot, const struct md_page_entry *e)
{
	struct md_page_entry *d = &a->ptab[slot];
	uint32_t v = md_load_relaxed(&d->version) & ~1u;
	md_store_relaxed(&d->version, v + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	md_store_relaxed(&d->generation, e->generation);
	md_store_relaxed(&d->seq, e->seq);
	md_store_relaxed(&d->n_tokens, e->n_tokens);
	md_store_relaxed(&d->state, e->state);
	md_store_relaxed(&d->first_pos, e->first_pos);
	md_store_relaxed(&d->labels, e->labels);
	md_store_relaxed(&d->open_clock, e->open_clock);
	md_store_release(&d->version, v + 2);
}

/* ---- mode shm ---- */
enum attack {
	A_RANDOM, A_TORN, A_SLOT_OOB, A_TAIL_BACK, A_TAIL_AHEAD, A_BAD_MASS, A_WRONG_GEN,
	A_OTHER_SEQ, A_RELABEL, A_PAGE_TABLE, A_CLOCKS, A_CTRL, A_RESIZE, A_BELLS, A_COUNT
};
static const char *attack_name[A_COUNT] = {
	"random_records", "torn_records", "slot_past_capacity", "tail_backwards", "tail_far_ahead",
	"bad_attention", "wrong_generation", "page_of_other_sequence", "relabel_unknown_span",
	"page_table_garbage", "clock_garbage", "ctrl_garbage", "resize_segments", "doorbell_flood",
};

struct shm_result {
	uint64_t rounds[A_COUNT], records;
	int ftruncate_refused, ftruncate_errno, grow_refused, wmap_refused, wmap_errno;
	int mprotect_refused;
};

/* A legitimate page the attacks aim at (so a bad record fails for the reason meant). */
static uint32_t legit_gen;

static void open_legit(struct att *a)
{
	legit_gen++;
	struct md_page_entry e = { .generation = legit_gen, .seq = 0, .n_tokens = 4,
				   .state = MD_PAGE_LIVE, .first_pos = 0,
				   .labels = 0x3333, .open_clock = 0 };
	pt_write(a, 0, &e);
	struct md_stats_rec *r = rec_at(a, 0);
	r->type = MD_REC_PAGE_OPEN;
	r->seq = 0;
	r->slot = 0;
	r->gen = legit_gen;
	r->clock = 4;
	r->u.page.first_pos = 0;
	r->u.page.labels = 0x3333;
	r->u.page.n_tokens = 4;
	rec_push(a);
}

static void attack(struct att *a, enum attack k, struct shm_result *res)
{
	uint32_t cap = o.capacity, scap = a->eh.stats_capacity;
	struct md_stats_rec *r;
	res->rounds[k]++;
	switch (k) {
	case A_RANDOM:
		for (int i = 0; i < 8 && ring_room(a, 1); i++) {
			r = rec_at(a, 0);
			uint64_t *w = (uint64_t *)r;
			for (int j = 0; j < 8; j++)
				w[j] = rng();
			r->pos = (uint32_t)a->tail;
			rec_push(a);
			res->records++;
		}
		break;
	case A_TORN:
		for (int i = 0; i < 4 && ring_room(a, 1); i++) {
			r = rec_at(a, 1);
			r->type = MD_REC_STEP;
			r->seq = 0;
			r->clock = 1000000 + a->tail;
			rec_push(a);
			res->records++;
		}
		break;
	case A_SLOT_OOB:
		if (!ring_room(a, 3))
			break;
		for (int i = 0; i < 3; i++) {
			r = rec_at(a, 0);
			r->type = (uint16_t)(i == 0 ? MD_REC_PAGE_OPEN : i == 1 ? MD_REC_ATTN_PAGE
									: MD_REC_PAGE_FREE);
			r->seq = 1;
			r->slot = i == 0 ? cap : i == 1 ? UINT32_MAX - 1 : cap + (uint32_t)(rng() % 1000000);
			r->gen = 1;
			r->u.page.n_tokens = 1;
			rec_push(a);
			res->records++;
		}
		break;
	case A_TAIL_BACK: {
		uint64_t head = md_load_acquire(&a->dctrl->stats_head);
		if (head == 0)
			break;
		md_store_release(&a->ectrl->stats_tail, head - 1 - (rng() % head));
		bell(a);
		sleep_ms(2);
		md_store_release(&a->ectrl->stats_tail, a->tail); /* back to sanity */
		break;
	}
	case A_TAIL_AHEAD: {
		uint64_t head = md_load_acquire(&a->dctrl->stats_head);
		uint64_t far = (rng() & 1) ? UINT64_MAX - (rng() % 4096)
					   : head + (uint64_t)scap + 1 + (rng() % ((uint64_t)scap << 20));
		md_store_release(&a->ectrl->stats_tail, far);
		bell(a);
		sleep_ms(2);
		md_store_release(&a->ectrl->stats_tail, a->tail);
		break;
	}
	case A_BAD_MASS: {
		static const float bad[] = { NAN, INFINITY, -INFINITY, -1.0f, 1e30f, -0.0001f, 3e38f };
		for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]) && ring_room(a, 2); i++) {
			r = rec_at(a, 0);
			r->type = MD_REC_ATTN_PAGE;
			r->seq = 0;
			r->slot = 0;
			r->gen = legit_gen;
			r->u.attn_page.mass = bad[i];
			r->u.attn_page.refresh = 0xffff;
			rec_push(a);
			r = rec_at(a, 0);
			r->type = MD_REC_ATTN_TOKENS;
			r->seq = 0;
			r->slot = 0;
			r->gen = legit_gen;
			r->token0 = 0;
			r->count = 4;
			for (int j = 0; j < 4; j++)
				r->u.attn_tokens.mass[j] = j == 2 ? bad[i] : 0.1f;
			rec_push(a);
			res->records += 2;
		}
		break;
	}
	case A_WRONG_GEN:
		if (!ring_room(a, 3))
			break;
		for (int i = 0; i < 3; i++) {
			r = rec_at(a, 0);
			r->type = (uint16_t)(i == 0 ? MD_REC_ATTN_PAGE : i == 1 ? MD_REC_PAGE_GROW
									: MD_REC_PAGE_FREE);
			r->seq = 0;
			r->slot = 0;
			r->gen = legit_gen + 1 + (uint32_t)(rng() % 100);
			r->u.page.n_tokens = 5;
			r->u.page.labels = 0x33333;
			rec_push(a);
			res->records++;
		}
		break;
	case A_OTHER_SEQ:
		if (!ring_room(a, 3))
			break;
		/* slot 0 belongs to sequence 0: claim it for 1, and reopen it live */
		r = rec_at(a, 0);
		r->type = MD_REC_ATTN_PAGE;
		r->seq = 1;
		r->slot = 0;
		r->gen = legit_gen;
		r->u.attn_page.mass = 0.5f;
		rec_push(a);
		r = rec_at(a, 0);
		r->type = MD_REC_PAGE_OPEN;
		r->seq = 1;
		r->slot = 0;
		r->gen = legit_gen;
		r->u.page.n_tokens = 2;
		r->u.page.first_pos = 32;
		rec_push(a);
		r = rec_at(a, 0);
		r->type = MD_REC_PAGE_OPEN; /* sequence past max_seqs */
		r->seq = o.seqs + (uint32_t)(rng() % 100000);
		r->slot = 1 + (uint32_t)(rng() % (cap - 1));
		r->gen = 7;
		r->u.page.n_tokens = 1;
		rec_push(a);
		res->records += 3;
		break;
	case A_RELABEL:
		if (!ring_room(a, 3))
			break;
		for (int i = 0; i < 3; i++) {
			r = rec_at(a, 0);
			r->type = MD_REC_RELABEL;
			r->seq = 0;
			r->slot = UINT32_MAX;
			r->u.relabel.pos0 = i == 0 ? 10 : i == 1 ? 1000000 : 3;
			r->u.relabel.pos1 = i == 0 ? 5 : i == 1 ? 2000000 : 4;
			r->u.relabel.region = i == 2 ? 15 + (uint32_t)(rng() % 1000) : 2;
			rec_push(a);
			res->records++;
		}
		break;
	case A_PAGE_TABLE:
		/* garbage entries (even version: they look stable), then a resync */
		for (uint32_t s = 1; s < cap; s++) {
			struct md_page_entry e;
			uint64_t *w = (uint64_t *)&e;
			for (int j = 0; j < 6; j++)
				w[j] = rng();
			e.state = (uint8_t)(rng() % 3);
			if (rng() % 3 == 0) { /* plausible but conflicting */
				e.state = MD_PAGE_LIVE;
				e.seq = (uint32_t)(rng() % (o.seqs + 2));
				e.n_tokens = (uint16_t)(rng() % 20);
				e.first_pos = rng() % 64;
			}
			pt_write(a, s, &e);
		}
		/* an entry left odd: being written forever */
		md_store_release(&a->ptab[cap - 1].version, 1u | (uint32_t)rng());
		md_store_release(&a->ectrl->resync_request,
				 md_load_relaxed(&a->ectrl->resync_request) + 1);
		bell(a);
		break;
	case A_CLOCKS:
		for (uint32_t q = 0; q < o.seqs; q++)
			md_store_release(&a->clock[q], (rng() & 1) ? rng() : 0);
		if (ring_room(a, 2)) {
			r = rec_at(a, 0);
			r->type = MD_REC_STEP;
			r->seq = 0;
			r->clock = 1; /* backwards */
			rec_push(a);
			r = rec_at(a, 0);
			r->type = MD_REC_SEQ_END;
			r->seq = UINT32_MAX;
			rec_push(a);
			res->records += 2;
		}
		md_store_release(&a->ectrl->resync_request,
				 md_load_relaxed(&a->ectrl->resync_request) + 1);
		break;
	case A_CTRL:
		md_store_relaxed(&a->ectrl->cmd_head, rng());
		md_store_relaxed(&a->ectrl->attn_dropped, rng());
		md_store_relaxed(&a->ectrl->lifecycle_dropped, rng());
		md_store_relaxed(&a->ectrl->cmds_stale, rng());
		md_store_relaxed(&a->ectrl->flags, (uint32_t)rng());
		md_store_relaxed(&a->ectrl->sleeping, (uint32_t)rng());
		sleep_ms(1);
		md_store_relaxed(&a->ectrl->sleeping, 0);
		md_store_relaxed(&a->ectrl->cmd_head, md_load_acquire(&a->dctrl->cmd_tail));
		break;
	case A_RESIZE: {
		/* The seals must refuse all of it. */
		errno = 0;
		int r1 = ftruncate(a->eseg_fd, 4096);
		int e1 = errno;
		int r2 = ftruncate(a->dseg_fd, 0);
		int r3 = ftruncate(a->eseg_fd, (off_t)a->eseg_size * 4);
		res->ftruncate_refused = (r1 < 0 && r2 < 0) ? 1 : 0;
		res->ftruncate_errno = e1;
		res->grow_refused = r3 < 0;
		void *w = mmap(NULL, a->dseg_size, PROT_READ | PROT_WRITE, MAP_SHARED, a->dseg_fd, 0);
		res->wmap_refused = w == MAP_FAILED;
		res->wmap_errno = w == MAP_FAILED ? errno : 0;
		if (w != MAP_FAILED)
			munmap(w, a->dseg_size);
		res->mprotect_refused =
			mprotect((void *)a->dseg, a->dseg_size, PROT_READ | PROT_WRITE) < 0;
		if (!res->mprotect_refused)
			mprotect((void *)a->dseg, a->dseg_size, PROT_READ);
		break;
	}
	case A_BELLS:
		for (int i = 0; i < 200; i++)
			bell(a);
		break;
	case A_COUNT:
		break;
	}
	bell(a);
}

static uint32_t attack_mask = (1u << A_COUNT) - 1;

/* --attacks a,b,c: only these rounds (names as in the JSON "rounds"). */
static int parse_attacks(const char *list)
{
	attack_mask = 0;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", list);
	char *save = NULL;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k;
		for (k = 0; k < A_COUNT && strcmp(t, attack_name[k]); k++)
			;
		if (k == A_COUNT) {
			fprintf(stderr, "memdecay-hostile: unknown attack '%s'\n", t);
			return -1;
		}
		attack_mask |= 1u << k;
	}
	return attack_mask ? 0 : -1;
}

static int mode_shm(void)
{
	struct att a;
	char err[512];
	int rc = att_open(&a, err, sizeof(err));
	if (rc < 0) {
		printf("{\"mode\": \"shm\", \"attached\": false, \"error\": \"%s\"}\n", err);
		return 1;
	}
	struct shm_result res;
	memset(&res, 0, sizeof(res));
	uint64_t t0 = md_now_ns(), end = t0 + o.duration_ms * 1000000ull, detached_ns = 0;
	open_legit(&a);
	uint64_t round = 0;
	while (!g_stop && md_now_ns() < end) {
		heartbeat(&a);
		if (att_gone(&a)) {
			detached_ns = md_now_ns();
			break;
		}
		enum attack k = (enum attack)(round++ % A_COUNT);
		if (!(attack_mask & (1u << k)))
			continue;
		if (k == 0 && round > 1 && rng() % 4 == 0)
			open_legit(&a);
		attack(&a, k, &res);
		if (o.round_us)
			usleep(o.round_us);
	}
	printf("{\"mode\": \"shm\", \"attached\": true, \"engine_id\": %u, \"detached\": %s, "
	       "\"detached_after_ms\": %.1f, \"records_written\": %" PRIu64
	       ", \"ftruncate_refused\": %s, \"ftruncate_errno\": \"%s\", \"grow_refused\": %s, "
	       "\"write_map_refused\": %s, \"write_map_errno\": \"%s\", \"mprotect_refused\": %s, "
	       "\"rounds\": {",
	       a.engine_id, detached_ns ? "true" : "false",
	       detached_ns ? (double)(detached_ns - t0) / 1e6 : 0.0, res.records,
	       res.ftruncate_refused ? "true" : "false", strerror(res.ftruncate_errno),
	       res.grow_refused ? "true" : "false", res.wmap_refused ? "true" : "false",
	       strerror(res.wmap_errno), res.mprotect_refused ? "true" : "false");
	for (int k = 0; k < A_COUNT; k++)
		printf("%s\"%s\": %" PRIu64, k ? ", " : "", attack_name[k], res.rounds[k]);
	printf("}}\n");
	att_close(&a);
	return 0;
}

/* ---- mode ctl ---- */
static int nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int mode_ctl(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < o.conns + 64) {
		rl.rlim_cur = rl.rlim_max < o.conns + 64 ? rl.rlim_max : o.conns + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	uint64_t t0 = md_now_ns(), end = t0 + o.duration_ms * 1000000ull;
	uint64_t random_conns = 0, oversized = 0, half_open = 0, slow = 0, storms = 0;
	uint64_t storm_connected = 0, storm_refused = 0, err_replies = 0, hello_garbage = 0;
	int *storm = calloc(o.conns, sizeof(int));
	if (!storm)
		return 1;
	char buf[3 * MD_CTL_LINE_MAX];
	while (!g_stop && md_now_ns() < end) {
		/* random bytes, with and without newlines */
		for (int i = 0; i < 4; i++) {
			int fd = sock_connect(o.socket);
			if (fd < 0)
				continue;
			size_t n = 1 + rng() % 600;
			for (size_t j = 0; j < n; j++)
				buf[j] = (char)rng();
			if (i & 1)
				buf[n++] = '\n';
			ssize_t w = send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
			(void)w;
			close(fd);
			random_conns++;
		}
		/* garbage HELLOs */
		{
			static const char *const hellos[] = {
				"HELLO\n", "HELLO abi=1.0\n",
				"HELLO abi=1.0 name=x page_tokens=0 page_capacity=1 max_seqs=1\n",
				"HELLO abi=1.0 name=x page_tokens=16 page_capacity=99999999999 max_seqs=1\n",
				"HELLO abi=9.0 name=x page_tokens=16 page_capacity=8 max_seqs=1\n",
				"HELLO abi=1.0 name=x page_tokens=16 page_capacity=8 max_seqs=1 weight=nan\n",
				"HELLO abi=1.0 name=x name=y page_tokens=16 page_capacity=8 max_seqs=1\n",
			};
			int fd = sock_connect(o.socket);
			if (fd >= 0) {
				const char *h = hellos[rng() % (sizeof(hellos) / sizeof(hellos[0]))];
				ssize_t w = send(fd, h, strlen(h), MSG_NOSIGNAL);
				(void)w;
				struct pollfd p = { .fd = fd, .events = POLLIN };
				if (poll(&p, 1, 1000) > 0) {
					char rb[512];
					ssize_t r = recv(fd, rb, sizeof(rb) - 1, 0);
					if (r >= 3 && !memcmp(rb, "ERR", 3))
						err_replies++;
				}
				close(fd);
				hello_garbage++;
			}
		}
		/* oversized line */
		{
			int fd = sock_connect(o.socket);
			if (fd >= 0) {
				memset(buf, 'A', sizeof(buf));
				ssize_t w = send(fd, buf, sizeof(buf), MSG_NOSIGNAL | MSG_DONTWAIT);
				(void)w;
				struct pollfd p = { .fd = fd, .events = POLLIN };
				if (poll(&p, 1, 1000) > 0) {
					char rb[256];
					ssize_t r = recv(fd, rb, sizeof(rb), 0);
					if (r >= 3 && !memcmp(rb, "ERR", 3))
						err_replies++;
				}
				close(fd);
				oversized++;
			}
		}
		/* half-open: a partial line, then our write side shut, never read */
		int ho[8];
		for (int i = 0; i < 8; i++) {
			ho[i] = sock_connect(o.socket);
			if (ho[i] < 0)
				continue;
			ssize_t w = send(ho[i], "get memdecay.al", 15, MSG_NOSIGNAL);
			(void)w;
			if (i & 1)
				shutdown(ho[i], SHUT_WR);
			half_open++;
		}
		/* slow writers: one byte every few ms */
		int sw[4];
		for (int i = 0; i < 4; i++)
			sw[i] = sock_connect(o.socket);
		const char *slow_req = "stats --json\n";
		for (size_t b = 0; slow_req[b]; b++) {
			for (int i = 0; i < 4; i++)
				if (sw[i] >= 0) {
					ssize_t w = send(sw[i], slow_req + b, 1, MSG_NOSIGNAL);
					(void)w;
				}
			sleep_ms(3);
		}
		for (int i = 0; i < 4; i++)
			if (sw[i] >= 0) {
				close(sw[i]); /* never read the reply */
				slow++;
			}
		/* a thousand connections at once, held a moment */
		uint32_t nc = 0;
		for (uint32_t i = 0; i < o.conns; i++) {
			int fd = sock_connect(o.socket);
			if (fd < 0) {
				storm_refused++;
				continue;
			}
			nonblock(fd);
			storm[nc++] = fd;
		}
		storm_connected += nc;
		storms++;
		sleep_ms(150);
		for (uint32_t i = 0; i < nc; i++) {
			char rb[128];
			ssize_t r = recv(storm[i], rb, sizeof(rb), MSG_DONTWAIT);
			if (r >= 3 && !memcmp(rb, "ERR", 3))
				storm_refused++;
			close(storm[i]);
		}
		for (int i = 0; i < 8; i++)
			if (ho[i] >= 0)
				close(ho[i]);
		sleep_ms(20);
	}
	free(storm);
	printf("{\"mode\": \"ctl\", \"random_connections\": %" PRIu64 ", \"garbage_hellos\": %" PRIu64
	       ", \"oversized_lines\": %" PRIu64 ", \"half_open\": %" PRIu64 ", \"slow_writers\": %" PRIu64
	       ", \"storms\": %" PRIu64 ", \"storm_connected\": %" PRIu64
	       ", \"storm_refused\": %" PRIu64 ", \"err_replies\": %" PRIu64 ", \"wall_s\": %.3f}\n",
	       random_conns, hello_garbage, oversized, half_open, slow, storms, storm_connected,
	       storm_refused, err_replies, (double)(md_now_ns() - t0) / 1e9);
	return 0;
}

/* ---- modes relabel, resync, idle ---- */

/* One sequence (0) of `capacity` full pages; slot k at position k (asc) or
 * capacity-1-k (desc) pages in; then a resync request. */
static void fill_table(struct att *a, int desc, uint32_t gen)
{
	uint32_t pt = o.page_tokens;
	uint64_t labels = 0;
	for (unsigned k = 0; k < pt; k++)
		labels = md_label_set(labels, k, MD_REGION_USER);
	for (uint32_t slot = 0; slot < o.capacity; slot++) {
		uint64_t page = desc ? (uint64_t)(o.capacity - 1 - slot) : slot;
		struct md_page_entry e = { .generation = gen, .seq = 0, .n_tokens = (uint16_t)pt,
					   .state = MD_PAGE_LIVE, .first_pos = page * pt,
					   .labels = labels, .open_clock = page * pt };
		pt_write(a, slot, &e);
	}
	md_store_release(&a->clock[0], (uint64_t)o.capacity * pt);
	heartbeat(a);
	md_store_release(&a->ectrl->resync_request, md_load_relaxed(&a->ectrl->resync_request) + 1);
	bell(a);
}

static int mode_relabel(void)
{
	struct att a;
	char err[512];
	if (att_open(&a, err, sizeof(err)) < 0) {
		printf("{\"mode\": \"relabel\", \"attached\": false, \"error\": \"%s\"}\n", err);
		return 1;
	}
	fill_table(&a, 0, 1);
	sleep_ms(500); /* the resync builds the sequence */
	uint64_t end = md_now_ns() + o.duration_ms * 1000000ull, sent = 0;
	int gone = 0;
	while (!g_stop && md_now_ns() < end) {
		heartbeat(&a);
		if (att_gone(&a)) {
			gone = 1;
			break;
		}
		int pushed = 0;
		while (ring_room(&a, 1) && pushed < 256) {
			struct md_stats_rec *r = rec_at(&a, 0);
			r->type = MD_REC_RELABEL;
			r->seq = 0;
			r->u.relabel.pos0 = 0;
			r->u.relabel.pos1 = (uint64_t)o.capacity * o.page_tokens;
			r->u.relabel.region = (sent & 1) ? MD_REGION_USER : MD_REGION_ASSISTANT;
			rec_push(&a);
			sent++;
			pushed++;
		}
		if (md_load_acquire(&a.dctrl->sleeping))
			bell(&a);
		if (!pushed)
			sleep_ms(1);
	}
	printf("{\"mode\": \"relabel\", \"attached\": true, \"engine_id\": %u, \"relabels\": %" PRIu64
	       ", \"detached\": %s}\n", a.engine_id, sent, gone ? "true" : "false");
	att_close(&a);
	return 0;
}

static int mode_resync(void)
{
	struct att a;
	char err[512];
	if (att_open(&a, err, sizeof(err)) < 0) {
		printf("{\"mode\": \"resync\", \"attached\": false, \"error\": \"%s\"}\n", err);
		return 1;
	}
	int desc = !strcmp(o.order, "desc");
	uint32_t gen = 1;
	fill_table(&a, desc, gen);
	uint64_t end = md_now_ns() + o.duration_ms * 1000000ull, requests = 1;
	int gone = 0;
	while (!g_stop && md_now_ns() < end) {
		heartbeat(&a);
		if (att_gone(&a)) {
			gone = 1;
			break;
		}
		if (g_settle == 1) {
			/* SIGUSR1: the table stops changing; one more resync sees
			 * every entry whole (one taken during a rewrite skips the
			 * entries it caught mid-write) */
			g_settle = 2;
			md_store_release(&a.ectrl->resync_request,
					 md_load_relaxed(&a.ectrl->resync_request) + 1);
			requests++;
			bell(&a);
		} else if (g_settle) {
			/* settled: only heartbeats */
		} else if (o.repeat && o.regen) {
			/* every page replaced by a new generation: nothing is kept */
			fill_table(&a, desc, ++gen);
			requests++;
		} else if (o.repeat) {
			md_store_release(&a.ectrl->resync_request,
					 md_load_relaxed(&a.ectrl->resync_request) + 1);
			requests++;
			if (md_load_acquire(&a.dctrl->sleeping))
				bell(&a);
		}
		struct timespec ts = { 0, (long)o.round_us * 1000L };
		nanosleep(&ts, NULL);
	}
	printf("{\"mode\": \"resync\", \"attached\": true, \"engine_id\": %u, \"requests\": %" PRIu64
	       ", \"detached\": %s}\n", a.engine_id, requests, gone ? "true" : "false");
	att_close(&a);
	return 0;
}

static int mode_idle(void)
{
	struct att *as = calloc(o.count, sizeof(*as));
	if (!as)
		return 1;
	uint32_t ok = 0, refused = 0;
	char err[512], first_err[512] = "";
	for (uint32_t i = 0; i < o.count && !g_stop; i++) {
		if (att_open(&as[ok], err, sizeof(err)) < 0) {
			if (!refused++)
				snprintf(first_err, sizeof(first_err), "%s", err);
			continue;
		}
		/* asleep on the doorbell: no heartbeat is due */
		md_store_release(&as[ok].ectrl->sleeping, 1);
		ok++;
	}
	printf("{\"mode\": \"idle\", \"attached\": %u, \"refused\": %u, \"first_error\": \"%s\"}\n",
	       ok, refused, first_err);
	fflush(stdout);
	uint64_t end = md_now_ns() + o.duration_ms * 1000000ull;
	while (!g_stop && md_now_ns() < end)
		sleep_ms(20);
	for (uint32_t i = 0; i < ok; i++)
		att_close(&as[i]);
	free(as);
	return 0;
}

/* ---- mode replay ---- */
struct rpage {
	uint32_t slot, gen, seq, n;
	uint64_t first_pos, labels, open_clock;
};

static struct rpage *rpages;
static size_t n_rpages;

static int load_dump(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	char line[512];
	size_t cap = 0;
	while (fgets(line, sizeof(line), f)) {
		struct rpage p;
		unsigned long long fp, lab, oc;
		if (sscanf(line, " {\"slot\": %u, \"gen\": %u, \"seq\": %u, \"first_pos\": %llu, "
				 "\"n_tokens\": %u, \"labels\": \"0x%llx\", \"open_clock\": %llu",
			   &p.slot, &p.gen, &p.seq, &fp, &p.n, &lab, &oc) != 7)
			continue;
		p.first_pos = fp;
		p.labels = lab;
		p.open_clock = oc;
		if (p.slot >= o.capacity || p.seq >= o.seqs || p.n == 0 || p.n > 16)
			continue;
		if (n_rpages == cap) {
			cap = cap ? cap * 2 : 256;
			struct rpage *np = realloc(rpages, cap * sizeof(*np));
			if (!np) {
				fclose(f);
				return -ENOMEM;
			}
			rpages = np;
		}
		rpages[n_rpages++] = p;
	}
	fclose(f);
	return 0;
}

static void seed(struct att *a)
{
	for (size_t i = 0; i < n_rpages; i++) {
		const struct rpage *p = &rpages[i];
		struct md_page_entry e = { .generation = p->gen, .seq = p->seq, .n_tokens = (uint16_t)p->n,
					   .state = MD_PAGE_LIVE, .first_pos = p->first_pos,
					   .labels = p->labels, .open_clock = p->open_clock };
		pt_write(a, p->slot, &e);
		/* the sequence clock: tokens appended = end of its furthest page */
		uint64_t end = p->first_pos + p->n;
		if (end > a->clock[p->seq])
			md_store_release(&a->clock[p->seq], end);
	}
	heartbeat(a);
	md_store_release(&a->ectrl->resync_request, md_load_relaxed(&a->ectrl->resync_request) + 1);
	bell(a);
}

static int mode_replay(void)
{
	if (!o.replay) {
		fprintf(stderr, "memdecay-hostile: --mode replay needs --replay FILE\n");
		return 2;
	}
	int rc = load_dump(o.replay);
	if (rc < 0) {
		fprintf(stderr, "memdecay-hostile: %s: %s\n", o.replay, strerror(-rc));
		return 1;
	}
	struct att a;
	char err[512];
	uint64_t t0 = md_now_ns(), end = t0 + o.duration_ms * 1000000ull;
	uint64_t attaches = 0, lost_ns = 0, cmd_next = 0;
	int attached = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (!g_stop && (o.duration_ms == 0 || md_now_ns() < end)) {
		if (!attached) {
			if (att_open(&a, err, sizeof(err)) == 0) {
				attached = 1;
				attaches++;
				cmd_next = 0;
				seed(&a);
				printf("{\"event\": \"attached\", \"engine_id\": %u, \"instance\": %" PRIu64
				       ", \"pages\": %zu, \"after_loss_ms\": %.1f}\n",
				       a.engine_id, a.instance, n_rpages,
				       lost_ns ? (double)(md_now_ns() - lost_ns) / 1e6 : 0.0);
			} else {
				sleep_ms(50);
				continue;
			}
		}
		heartbeat(&a);
		/* Commands are reported and not applied: the state stays fixed. */
		uint64_t ctail = md_load_acquire(&a.dctrl->cmd_tail);
		const struct md_cmd *ring = (const struct md_cmd *)(a.dseg + a.dh.off.daemon.cmd_ring);
		if (ctail - cmd_next > a.dh.cmd_capacity)
			cmd_next = ctail; /* not ours to judge here */
		for (; cmd_next < ctail; cmd_next++) {
			struct md_cmd c = ring[cmd_next & (a.dh.cmd_capacity - 1)];
			printf("{\"event\": \"cmd\", \"instance\": %" PRIu64 ", \"seq\": %u, "
			       "\"slot\": %u, \"gen\": %u, \"reason\": %u}\n",
			       a.instance, c.seq, c.slot, c.gen, c.reason);
		}
		md_store_release(&a.ectrl->cmd_head, ctail);
		if (att_gone(&a) || md_load_acquire(&a.dctrl->shutting_down)) {
			att_close(&a);
			attached = 0;
			lost_ns = md_now_ns();
			printf("{\"event\": \"lost\"}\n");
			continue;
		}
		sleep_ms(5);
	}
	if (attached)
		att_close(&a);
	printf("{\"event\": \"done\", \"attaches\": %" PRIu64 "}\n", attaches);
	free(rpages);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: memdecay-hostile --socket PATH [--mode shm|ctl|replay|relabel|resync|idle] [options]\n"
		"  --duration-ms MS   how long to keep at it (default 3000; replay: 0 = until SIGTERM)\n"
		"  --seed S           RNG seed (default 1)\n"
		"  --engine-name N    name in HELLO (default hostile)\n"
		"  --capacity N       page slots asked in HELLO (default 64)\n"
		"  --seqs N           max_seqs asked in HELLO (default 4)\n"
		"  --round-us US      pause between shm attack rounds (default 1000)\n"
		"  --conns N          connections per storm in ctl mode (default 1000)\n"
		"  --replay FILE      page table to hold (memdecay-loadgen --dump-pages output)\n"
		"  --attacks A,B      shm mode: only these attacks (names as in the JSON rounds)\n"
		"  --page-tokens N    page_tokens asked in HELLO (default 16)\n"
		"  --weight W         weight=W in HELLO\n"
		"  --order asc|desc   resync mode: positions ascending or descending with the slot\n"
		"  --repeat           resync mode: request a resync every --round-us\n"
		"  --regen            resync mode, with --repeat: a new generation of every page each time\n"
		"                     (resync mode: SIGUSR1 stops the rewrites and requests one last resync)\n"
		"  --count N          idle mode: engines to attach (default 1)\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "socket", 1, 0, 's' }, { "mode", 1, 0, 'm' }, { "duration-ms", 1, 0, 'd' },
		{ "seed", 1, 0, 'r' }, { "engine-name", 1, 0, 'n' }, { "capacity", 1, 0, 'c' },
		{ "seqs", 1, 0, 'q' }, { "round-us", 1, 0, 'u' }, { "conns", 1, 0, 'k' },
		{ "replay", 1, 0, 'p' }, { "attacks", 1, 0, 'a' }, { "help", 0, 0, 'h' },
		{ "page-tokens", 1, 0, 't' }, { "weight", 1, 0, 'w' }, { "order", 1, 0, 'o' },
		{ "repeat", 0, 0, 'R' }, { "count", 1, 0, 'C' }, { "regen", 0, 0, 'G' },
		{ 0, 0, 0, 0 },
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		char *e = NULL;
		unsigned long long v = 0;
		if (ch != 's' && ch != 'm' && ch != 'n' && ch != 'p' && ch != 'a' && ch != 'h' &&
		    ch != 'w' && ch != 'o' && ch != 'R' && ch != 'G' && ch != '?') {
			errno = 0;
			v = strtoull(optarg, &e, 10);
			if (errno || !*optarg || *e || optarg[0] == '-') {
				fprintf(stderr, "memdecay-hostile: bad number '%s'\n", optarg);
				return 2;
			}
		}
		switch (ch) {
		case 's': o.socket = optarg; break;
		case 'm': o.mode = optarg; break;
		case 'n': o.name = optarg; break;
		case 'p': o.replay = optarg; break;
		case 'a': o.attacks = optarg; break;
		case 'd': o.duration_ms = v; break;
		case 'r': o.seed = v; break;
		case 'c': o.capacity = (uint32_t)v; break;
		case 'q': o.seqs = (uint32_t)v; break;
		case 'u': o.round_us = (uint32_t)v; break;
		case 'k': o.conns = (uint32_t)v; break;
		case 't': o.page_tokens = (uint32_t)v; break;
		case 'w': o.weight = optarg; break;
		case 'o': o.order = optarg; break;
		case 'R': o.repeat = 1; break;
		case 'G': o.regen = 1; break;
		case 'C': o.count = (uint32_t)v; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!o.socket || o.capacity < 2 || o.capacity > MD_PAGE_CAPACITY_MAX || o.seqs < 2 ||
	    o.seqs > MD_MAX_SEQS_MAX || o.page_tokens < 1 || o.page_tokens > MD_PAGE_TOKENS_MAX ||
	    o.count < 1 || o.count > 100000 || (strcmp(o.order, "asc") && strcmp(o.order, "desc"))) {
		usage(stderr);
		return 2;
	}
	rng_state ^= o.seed * 0xD1B54A32D192ED03ULL;
	if (o.attacks && parse_attacks(o.attacks) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGUSR1, on_settle);
	if (!strcmp(o.mode, "shm"))
		return mode_shm();
	if (!strcmp(o.mode, "ctl"))
		return mode_ctl();
	if (!strcmp(o.mode, "replay"))
		return mode_replay();
	if (!strcmp(o.mode, "relabel"))
		return mode_relabel();
	if (!strcmp(o.mode, "resync"))
		return mode_resync();
	if (!strcmp(o.mode, "idle"))
		return mode_idle();
	usage(stderr);
	return 2;
}
