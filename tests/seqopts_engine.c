/*
 * seqopts_engine.c — an engine that speaks the ABI by hand (shm_layout/ only)
 * to check per-sequence options end to end (ABI 1.2 and 1.3, docs/abi.md): it
 * attaches with HELLO abi=1.MINOR and, as a 1.2 or 1.3 engine,
 *   A. gives sequence 0 its own budget of 16 tokens (entry and record) and
 *      fills sequences 0 and 1 with 32 tokens each: only sequence 0 is
 *      evicted, down to 16;
 *   B. gives sequence 2 policy h2o with 64 tokens (16 pages): the daemon
 *      publishes seq_protect[2] = h2o's window, floor(0.5 x 16) = 8, and
 *      1 + protect_recent = 2 for the others;
 *   C. sends three hostile option records (sequence past max_seqs, unknown
 *      policy, budget past the limit);
 *   D. writes sequence 3's entry (budget 8) without a record, then asks for
 *      a resync: the daemon reads the entry and evicts sequence 3 to 8;
 *   E. ends sequence 0 (its options reset) and fills it again: no eviction.
 * A 1.3 engine also gives each sequence a session (state and tag, memdecayctl
 * sessions shows them): sequence 0 retained "old-0" in A (its end in E makes
 * it running, no tag), sequence 1 running "run-1", sequence 2 retained
 * "conv-7" in B, sequence 3 retained "resync!" in D (the entry only: the
 * resync reads it); in C three more hostile records (state 2, a tag with a
 * blank, a tag with a byte after its NUL).  A 1.2 engine instead sends one
 * record whose reserved words hold the same garbage: ignored, as in 1.2.
 * As a 1.1 engine it checks that its engine segment has no options array,
 * sends one option record (an unknown record type for 1.1: rejected) and is
 * still served.  The engine frees every page the daemon evicts.
 * It prints one JSON line (what it saw; "errors" empty when every check
 * held), then stays attached, beating, until SIGTERM (at most 60 s), so that
 * daemon_suite.sh's `seqopts` scenario can read the daemon's stats.
 *
 *   seqopts_engine SOCK MINOR
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "memdecay_abi.h"
#include "memdecay_clock.h"
#include "memdecay_ring.h"

#define P 4u       /* page tokens */
#define CAP 64u    /* page slots */
#define SEQS 4u

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static char errors[2048];
static void bad(const char *fmt, ...)
{
	size_t n = strlen(errors);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errors + n, sizeof(errors) - n, fmt, ap);
	va_end(ap);
	n = strlen(errors);
	if (n + 2 < sizeof(errors))
		strcat(errors, "; ");
}

/* ---- the attachment ---- */
static int sock = -1, bell_d = -1;
static char *eseg;
static const char *dseg;
static uint64_t eseg_size, dseg_size;
static struct md_segment_header eh, dh;
static struct md_engine_ctrl *ectrl;
static struct md_page_entry *ptab;
static uint64_t *seq_clock;
static struct md_stats_rec *ring;
static struct md_seq_opts *seq_opts;
static const struct md_daemon_ctrl *dctrl;
static const struct md_cmd *cmds;
static const uint32_t *seq_protect;
static uint64_t tail;

static int attach(const char *path, unsigned minor)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	char hello[256];
	int n = snprintf(hello, sizeof(hello),
			 "HELLO abi=%u.%u name=seqopts-1.%u page_tokens=%u page_capacity=%u "
			 "max_seqs=%u\n", MD_ABI_MAJOR, minor, minor, P, CAP, SEQS);
	if (send(sock, hello, (size_t)n, MSG_NOSIGNAL) != n)
		return -1;
	char line[512];
	int fds[MD_ATTACH_FDS], nfds = 0;
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * MD_ATTACH_FDS)]; } cm;
	struct iovec iov = { line, sizeof(line) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			     .msg_controllen = sizeof(cm.b) };
	struct pollfd pf = { .fd = sock, .events = POLLIN };
	if (poll(&pf, 1, 30000) <= 0)
		return -1;
	ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (r <= 0)
		return -1;
	line[r] = 0;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h))
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
			nfds = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(h), sizeof(fds));
		}
	if (strncmp(line, "OK ", 3) || nfds != MD_ATTACH_FDS) {
		fprintf(stderr, "seqopts_engine: HELLO refused: %s", line);
		return -1;
	}
	bell_d = fds[2];
	struct stat st;
	fstat(fds[0], &st);
	eseg_size = (uint64_t)st.st_size;
	fstat(fds[1], &st);
	dseg_size = (uint64_t)st.st_size;
	eseg = mmap(NULL, eseg_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	dseg = mmap(NULL, dseg_size, PROT_READ, MAP_SHARED, fds[1], 0);
	if (eseg == MAP_FAILED || dseg == MAP_FAILED)
		return -1;
	memcpy(&eh, eseg, sizeof(eh));
	memcpy(&dh, dseg, sizeof(dh));
	ectrl = (struct md_engine_ctrl *)(eseg + eh.off.engine.ctrl);
	ptab = (struct md_page_entry *)(eseg + eh.off.engine.page_table);
	seq_clock = (uint64_t *)(eseg + eh.off.engine.seq_clock);
	ring = (struct md_stats_rec *)(eseg + eh.off.engine.stats_ring);
	if (eh.off.engine.seq_opts)
		seq_opts = (struct md_seq_opts *)(eseg + eh.off.engine.seq_opts);
	dctrl = (const struct md_daemon_ctrl *)(dseg + dh.off.daemon.ctrl);
	cmds = (const struct md_cmd *)(dseg + dh.off.daemon.cmd_ring);
	if (dh.off.daemon.seq_protect)
		seq_protect = (const uint32_t *)(dseg + dh.off.daemon.seq_protect);
	return 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static struct md_stats_rec *rec_next(uint16_t type, uint32_t seq)
{
	struct md_stats_rec *r = &ring[tail & (eh.stats_capacity - 1)];
	memset(r, 0, sizeof(*r));
	r->pos = (uint32_t)tail;
	r->type = type;
	r->seq = seq;
	r->clock = seq < SEQS ? seq_clock[seq] : 0;
	return r;
}

static void rec_push(void)
{
	tail++;
	md_store_release(&ectrl->stats_tail, tail);
	uint64_t one = 1;
	if (write(bell_d, &one, sizeof(one)) < 0)
		bad("doorbell");
}

/* ---- pages, the engine's way ---- */
static uint32_t gen[CAP];
static uint64_t next_pos[SEQS];
static uint32_t evicted[SEQS];

static void pt_write(uint32_t slot, uint32_t state, uint32_t seq, uint64_t first_pos)
{
	struct md_page_entry *d = &ptab[slot];
	uint32_t v = md_load_relaxed(&d->version) & ~1u;
	md_store_relaxed(&d->version, v + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	md_store_relaxed(&d->generation, gen[slot]);
	md_store_relaxed(&d->seq, seq);
	md_store_relaxed(&d->n_tokens, P);
	md_store_relaxed(&d->state, state);
	md_store_relaxed(&d->first_pos, first_pos);
	md_store_relaxed(&d->labels, 0x2222ull); /* user */
	md_store_release(&d->version, v + 2);
}

static int open_page(uint32_t seq)
{
	uint32_t slot = 0;
	while (slot < CAP && ptab[slot].state == MD_PAGE_LIVE)
		slot++;
	if (slot == CAP) {
		bad("out of slots");
		return -1;
	}
	gen[slot]++;
	uint64_t fp = next_pos[seq];
	next_pos[seq] += P;
	md_store_release(&seq_clock[seq], seq_clock[seq] + 1);
	pt_write(slot, MD_PAGE_LIVE, seq, fp);
	struct md_stats_rec *r = rec_next(MD_REC_PAGE_OPEN, seq);
	r->slot = slot;
	r->gen = gen[slot];
	r->u.page.first_pos = fp;
	r->u.page.n_tokens = P;
	r->u.page.labels = 0x2222ull;
	rec_push();
	return 0;
}

/* every evict command: the page leaves the cache (table and a FREE record) */
static void apply(void)
{
	md_store_relaxed(&ectrl->heartbeat_ns, md_now_ns());
	uint64_t head = md_load_relaxed(&ectrl->cmd_head);
	uint64_t t = md_load_acquire(&dctrl->cmd_tail);
	for (; head < t; head++) {
		const struct md_cmd *c = &cmds[head & (dh.cmd_capacity - 1)];
		uint32_t slot = c->slot;
		if (slot >= CAP || ptab[slot].state != MD_PAGE_LIVE || ptab[slot].generation != c->gen)
			continue;
		uint32_t seq = ptab[slot].seq;
		pt_write(slot, MD_PAGE_FREE, seq, ptab[slot].first_pos);
		struct md_stats_rec *r = rec_next(MD_REC_PAGE_FREE, seq);
		r->slot = slot;
		r->gen = gen[slot];
		r->u.free.reason = MD_FREE_EVICTED;
		rec_push();
		if (seq < SEQS)
			evicted[seq]++;
	}
	md_store_release(&ectrl->cmd_head, head);
}

/* applies commands for ms milliseconds, or until *v reaches want */
static int wait_for(const volatile uint32_t *v, uint32_t want, unsigned ms)
{
	for (unsigned i = 0; i < ms; i++) {
		apply();
		if (v && *v == want)
			return 0;
		sleep_ms(1);
	}
	return v ? -1 : 0;
}

/* the entry first (odd version while writing), then the record; state and
 * the tag's 8 bytes (tag NULL: none) go in the 1.3 words, which a 1.2 engine
 * leaves zero unless it means to test that they are ignored */
enum { ENTRY = 1, RECORD = 2 };
static void seq_session(uint32_t seq, uint32_t policy, uint64_t budget, uint32_t state,
			const char *tag, int how)
{
	uint8_t t[MD_SEQ_SESSION_LEN] = { 0 };
	if (tag)
		memcpy(t, tag, sizeof(t));   /* callers give 8 bytes, NUL-padded */
	if (seq_opts && seq < SEQS && (how & ENTRY)) {
		struct md_seq_opts *o = &seq_opts[seq];
		uint32_t v = md_load_relaxed(&o->version) & ~1u;
		md_store_relaxed(&o->version, v + 1);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		md_store_relaxed(&o->policy, policy);
		md_store_relaxed(&o->budget_sequence_tokens, budget);
		md_store_relaxed(&o->state, state);
		for (unsigned i = 0; i < MD_SEQ_SESSION_LEN; i++)
			md_store_relaxed(&o->session[i], t[i]);
		md_store_release(&o->version, v + 2);
	}
	if (!(how & RECORD))
		return;
	struct md_stats_rec *r = rec_next(MD_REC_SEQ_OPTS, seq);
	r->u.seq_opts.policy = policy;
	r->u.seq_opts.budget_sequence_tokens = budget;
	r->u.seq_opts.state = state;
	memcpy(r->u.seq_opts.session, t, sizeof(t));
	rec_push();
}

static void seq_options(uint32_t seq, uint32_t policy, uint64_t budget, int how)
{
	seq_session(seq, policy, budget, MD_SEQ_RUNNING, NULL, how);
}

static void end_seq(uint32_t seq)
{
	for (uint32_t s = 0; s < CAP; s++)
		if (ptab[s].state == MD_PAGE_LIVE && ptab[s].seq == seq) {
			pt_write(s, MD_PAGE_FREE, seq, ptab[s].first_pos);
			struct md_stats_rec *r = rec_next(MD_REC_PAGE_FREE, seq);
			r->slot = s;
			r->gen = gen[s];
			rec_push();
		}
	seq_options(seq, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64, ENTRY);
	md_store_release(&seq_clock[seq], 0);
	next_pos[seq] = 0;
	rec_next(MD_REC_SEQ_END, seq);
	rec_push();
}

static uint32_t protect(uint32_t seq)
{
	return seq_protect ? md_load_relaxed(&seq_protect[seq]) : 0;
}

static void run_12(unsigned minor)
{
	int v13 = minor >= 3;
	if (!seq_opts)
		bad("a 1.%u engine segment without seq_opts", minor);
	/* A: its own budget (1.3: and a session, which its end in E resets) */
	if (v13)
		seq_session(0, MD_SEQ_ENGINE_U32, 16, MD_SEQ_RETAINED, "old-0\0\0", ENTRY | RECORD);
	else
		seq_options(0, MD_SEQ_ENGINE_U32, 16, ENTRY | RECORD);
	for (int i = 0; i < 8; i++) {
		open_page(0);
		open_page(1);
	}
	if (wait_for(&evicted[0], 4, 5000))
		bad("A: sequence 0 lost %u pages, want 4", evicted[0]);
	wait_for(NULL, 0, 200);
	if (evicted[0] != 4 || evicted[1] != 0)
		bad("A: evicted %u/%u pages of sequences 0/1, want 4/0", evicted[0], evicted[1]);
	/* B: h2o's window on its own budget, published (1.3: retained, and
	 * sequence 1 a tag while it runs; 1.2: garbage in the reserved words) */
	if (v13) {
		seq_session(2, MD_POLICY_H2O, 64, MD_SEQ_RETAINED, "conv-7\0\0", ENTRY | RECORD);
		seq_session(1, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64, MD_SEQ_RUNNING, "run-1\0\0\0",
			    ENTRY | RECORD);
	} else {
		seq_options(2, MD_POLICY_H2O, 64, ENTRY | RECORD);
		seq_session(1, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64, 7, "a b\0c\x01\0\0", RECORD);
	}
	open_page(2);
	open_page(2);
	for (int i = 0; i < 5000 && protect(2) != 8; i++)
		wait_for(NULL, 0, 1);
	if (protect(2) != 8 || protect(1) != 2 || protect(0) != 2)
		bad("B: seq_protect %u %u %u, want 2 2 8", protect(0), protect(1), protect(2));
	/* C: hostile options (records only: the table stays clean) */
	seq_options(99, MD_SEQ_ENGINE_U32, 8, RECORD);
	seq_options(1, 77, MD_SEQ_ENGINE_U64, RECORD);
	seq_options(1, MD_SEQ_ENGINE_U32, 1ull << 60, RECORD);
	if (v13) {
		seq_session(1, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64, 2, NULL, RECORD);
		seq_session(1, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64, MD_SEQ_RUNNING,
			    "a b\0\0\0\0\0", RECORD);
		seq_session(1, MD_SEQ_ENGINE_U32, MD_SEQ_ENGINE_U64, MD_SEQ_RETAINED, "ab\0cdef\0",
			    RECORD);
	}
	/* D: the table's entry, read at a resync */
	for (int i = 0; i < 4; i++)
		open_page(3);
	wait_for(NULL, 0, 200);
	if (evicted[3])
		bad("D: sequence 3 lost pages before it had a budget");
	if (v13)
		seq_session(3, MD_SEQ_ENGINE_U32, 8, MD_SEQ_RETAINED, "resync!\0", ENTRY);
	else
		seq_options(3, MD_SEQ_ENGINE_U32, 8, ENTRY);
	wait_for(NULL, 0, 100);
	if (evicted[3])
		bad("D: sequence 3 lost pages with no record and no resync");
	md_store_release(&ectrl->resync_request, md_load_relaxed(&ectrl->resync_request) + 1);
	if (wait_for(&evicted[3], 2, 5000))
		bad("D: after the resync sequence 3 lost %u pages, want 2", evicted[3]);
	/* E: the end resets its options */
	end_seq(0);
	for (int i = 0; i < 8; i++)
		open_page(0);
	wait_for(NULL, 0, 300);
	if (evicted[0] != 4)
		bad("E: sequence 0 lost %u pages in all after its end, want 4", evicted[0]);
}

static void run_11(void)
{
	if (seq_opts)
		bad("a 1.1 engine segment with seq_opts");
	for (int i = 0; i < 8; i++)
		open_page(0);
	seq_options(0, MD_SEQ_ENGINE_U32, 16, RECORD); /* not in 1.1: rejected */
	for (int i = 0; i < 5000 && protect(0) != 2; i++)
		wait_for(NULL, 0, 1);
	wait_for(NULL, 0, 200);
	if (evicted[0])
		bad("1.1: a rejected option record evicted %u pages", evicted[0]);
	if (protect(0) != 2)
		bad("1.1: seq_protect[0] %u, want 2", protect(0));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: seqopts_engine SOCK MINOR\n");
		return 2;
	}
	unsigned minor = (unsigned)strtoul(argv[2], NULL, 10);
	signal(SIGTERM, on_term);
	if (attach(argv[1], minor) < 0) {
		fprintf(stderr, "seqopts_engine: attach failed\n");
		return 1;
	}
	struct md_daemon_offsets want;
	uint64_t size = md_daemon_layout_ex(dh.cmd_capacity, SEQS, &want);
	if (dseg_size != size || dh.off.daemon.seq_protect != want.seq_protect)
		bad("daemon segment %llu bytes, seq_protect at %llu; want %llu, %llu",
		    (unsigned long long)dseg_size, (unsigned long long)dh.off.daemon.seq_protect,
		    (unsigned long long)size, (unsigned long long)want.seq_protect);
	if (minor >= 2)
		run_12(minor);
	else
		run_11();
	printf("{\"minor\":%u,\"seq_opts_off\":%llu,\"seq_protect_off\":%llu,"
	       "\"evicted\":[%u,%u,%u,%u],\"seq_protect\":[%u,%u,%u,%u],\"errors\":\"%s\"}\n",
	       minor, (unsigned long long)eh.off.engine.seq_opts,
	       (unsigned long long)dh.off.daemon.seq_protect, evicted[0], evicted[1], evicted[2],
	       evicted[3], protect(0), protect(1), protect(2), protect(3), errors);
	fflush(stdout);
	for (int i = 0; i < 60000 && !stop; i++)
		wait_for(NULL, 0, 1);
	return errors[0] ? 1 : 0;
}
