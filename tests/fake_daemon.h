/*
 * fake_daemon.h — the fake memdecayd shared by check_client and
 * check_contract: a thread that accepts one HELLO on a Unix socket in a temp
 * directory, builds the engine and daemon memfd segments with the ABI layout
 * (1.1, or 1.2 with seq_opts in the engine segment and seq_protect in the
 * daemon segment, or the same layout saying 1.3: a daemon that takes a
 * sequence's session state and tag, or 1.4: one that knows the host tier),
 * seals them as the daemon does and passes them with two
 * doorbell eventfds by SCM_RIGHTS.  The test then reads the stats ring
 * (fake_next, fake_find, fake_drain), writes commands (fake_evict,
 * fake_command) and sets
 * the parameter block and the controls through the fake's own mappings.
 * fake_mode makes it misbehave (bad magic, sizes, offsets, seals, replies)
 * for the attach validation tests.  Each test names its daemon (ids, the ABI
 * minor of a 1.1 segment, the initial parameters) in a struct fake_profile.
 * Everything here is static: include it once, after check.h.
 */
#ifndef MEMDECAY_TESTS_FAKE_DAEMON_H
#define MEMDECAY_TESTS_FAKE_DAEMON_H

#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "memdecay.h"
#include "memdecay_clock.h"
#include "memdecay_ring.h"

enum fake_mode {
	FK_OK = 0, FK_BAD_MAGIC, FK_BAD_SIZE, FK_BAD_MAJOR, FK_ERR, FK_ERR_ABI, FK_FEW_FDS,
	FK_BAD_GEOMETRY, FK_BAD_OFFSETS, FK_NONPOW2, FK_NO_SEAL, FK_GARBAGE, FK_BAD_KIND,
	FK_OVERLAP, FK_MODE_COUNT,
};

/* The segments the fake builds: 1.1 (no per-sequence arrays; the minor is
 * the profile's), 1.2 (the arrays) or 1.3 and 1.4 (the same layout: only the
 * minor says that the session words of seq_opts are read, and that the
 * daemon knows the host tier: budget_tier_pages, restore and drop). */
enum fake_abi { FAKE_ABI_11 = 0, FAKE_ABI_12 = 1, FAKE_ABI_13 = 2, FAKE_ABI_14 = 3 };

/* Who the fake daemon is; fixed for a test file. */
struct fake_profile {
	const char *tag;            /* temp directory /tmp/md<tag>.XXXXXX */
	uint32_t engine_id;
	uint64_t instance_id;
	uint32_t abi_minor;         /* what a segment without the 1.2 arrays claims */
	void (*params)(struct md_param_block *p);   /* the initial parameter block */
};

struct fake {
	char dir[64], path[128];
	int lfd, conn;
	const struct fake_profile *prof;
	enum fake_mode mode;
	int abi;                    /* enum fake_abi */
	uint32_t stats_cap, cmd_cap, P, cap, seqs;
	int db_d, db_e;             /* the daemon's copies of the doorbells */
	char *eseg, *dseg;
	uint64_t esz, dsz;
	struct md_engine_offsets eo;
	struct md_daemon_offsets doff;
	struct md_daemon_ctrl *dctrl;
	struct md_engine_ctrl *ectrl;
	struct md_param_block *params;
	uint32_t *protect;          /* seq_protect (1.2) */
	struct md_ring_cons stats;  /* the daemon reads the stats ring */
	struct md_ring_prod cmds;   /* the daemon writes commands */
	char hello[4096];
	pthread_t th;
};

static inline uint32_t hello_u32(const char *line, const char *key)
{
	const char *p = strstr(line, key);
	return p ? (uint32_t)strtoul(p + strlen(key), NULL, 10) : 0;
}

static inline int make_memfd(uint64_t size)
{
	int fd = memfd_create("fake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
	return fd;
}

static inline void fake_segments(struct fake *f)
{
	uint32_t flags = f->abi >= FAKE_ABI_12 ? MD_ENGINE_LAYOUT_SEQ_OPTS : 0;
	f->esz = md_engine_layout_ex(f->cap, f->seqs, f->stats_cap, flags, &f->eo);
	f->dsz = f->abi >= FAKE_ABI_12 ? md_daemon_layout_ex(f->cmd_cap, f->seqs, &f->doff)
				       : md_daemon_layout(f->cmd_cap, &f->doff);
}

/* The reply: "OK ..." with the segments and doorbells (two fds for FK_FEW_FDS). */
static inline void fake_reply(struct fake *f, int efd, int dfd)
{
	int fds[4] = { efd, dfd, f->db_d, f->db_e };
	int nfds = f->mode == FK_FEW_FDS ? 2 : 4;
	char line[96];
	int ll = snprintf(line, sizeof(line), "OK engine_id=%u instance=%llu\n",
			  f->prof->engine_id, (unsigned long long)f->prof->instance_id);
	struct iovec iov = { line, (size_t)ll };
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 4)]; } cm;
	memset(&cm, 0, sizeof(cm));
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			     .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	ssize_t w = sendmsg(f->conn, &mh, MSG_NOSIGNAL);
	(void)w;
}

static inline void *fake_serve(void *arg)
{
	struct fake *f = arg;
	f->conn = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (f->conn < 0)
		return NULL;
	size_t len = 0;
	while (len < sizeof(f->hello) - 1 && !strchr(f->hello, '\n')) {
		ssize_t n = read(f->conn, f->hello + len, sizeof(f->hello) - 1 - len);
		if (n <= 0)
			return NULL;
		len += (size_t)n;
		f->hello[len] = 0;
	}
	f->P = hello_u32(f->hello, "page_tokens=");
	f->cap = hello_u32(f->hello, "page_capacity=");
	f->seqs = hello_u32(f->hello, "max_seqs=");
	if (f->mode == FK_ERR || f->mode == FK_ERR_ABI || f->mode == FK_GARBAGE) {
		const char *m = f->mode == FK_ERR ? "ERR budget_pages=-3: must be positive\n"
			      : f->mode == FK_ERR_ABI ? "ERR ABI major version 1 not supported\n"
			      : "HI THERE\n";
		ssize_t w = write(f->conn, m, strlen(m));
		(void)w;
		return NULL;
	}
	fake_segments(f);
	int efd = make_memfd(f->esz), dfd = make_memfd(f->dsz);
	f->eseg = mmap(NULL, f->esz, PROT_READ | PROT_WRITE, MAP_SHARED, efd, 0);
	f->dseg = mmap(NULL, f->dsz, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
	struct md_segment_header *eh = (void *)f->eseg, *dh = (void *)f->dseg;
	struct md_segment_header h = {
		.abi_major = MD_ABI_MAJOR,
		.abi_minor = f->abi == FAKE_ABI_14 ? 4 : f->abi == FAKE_ABI_13 ? 3
			   : f->abi == FAKE_ABI_12 ? 2 : f->prof->abi_minor,
		.header_size = sizeof(struct md_segment_header), .engine_id = f->prof->engine_id,
		.page_tokens = f->P, .page_capacity = f->cap, .max_seqs = f->seqs,
		.stats_capacity = f->stats_cap, .cmd_capacity = f->cmd_cap,
		.instance_id = f->prof->instance_id,
	};
	*eh = h;
	eh->kind = MD_SEGMENT_ENGINE;
	eh->segment_size = f->esz;
	eh->off.engine = f->eo;
	*dh = h;
	dh->kind = MD_SEGMENT_DAEMON;
	dh->segment_size = f->dsz;
	dh->off.daemon = f->doff;
	switch (f->mode) {
	case FK_BAD_SIZE: eh->segment_size += 4096; break;
	case FK_BAD_MAJOR: dh->abi_major = 2; break;
	case FK_BAD_GEOMETRY: eh->page_capacity = f->cap + 1; break;
	case FK_BAD_OFFSETS: eh->off.engine.stats_ring = f->esz - 64; break;
	case FK_NONPOW2: dh->cmd_capacity = 1000; break;
	case FK_BAD_KIND: dh->kind = MD_SEGMENT_ENGINE; break;
	case FK_OVERLAP: eh->off.engine.page_table = eh->off.engine.ctrl + 64; break;
	default: break;
	}
	f->dctrl = (void *)(f->dseg + f->doff.ctrl);
	f->ectrl = (void *)(f->eseg + f->eo.ctrl);
	f->params = (void *)(f->dseg + f->doff.params);
	f->protect = f->abi >= FAKE_ABI_12 ? (void *)(f->dseg + f->doff.seq_protect) : NULL;
	f->dctrl->instance_id = f->prof->instance_id;
	f->prof->params(f->params);
	md_store_release(&f->dctrl->heartbeat_ns, 1);
	md_store_release(&eh->magic, f->mode == FK_BAD_MAGIC ? 0x1234 : MD_ABI_MAGIC);
	md_store_release(&dh->magic, MD_ABI_MAGIC);
	if (f->mode != FK_NO_SEAL) {
		ck_assert_int_eq(fcntl(efd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
		ck_assert_int_eq(fcntl(dfd, F_ADD_SEALS,
				       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE), 0);
	}
	f->db_d = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	f->db_e = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ck_assert_int_eq(md_ring_cons_init(&f->stats, f->eseg + f->eo.stats_ring, f->stats_cap,
					   sizeof(struct md_stats_rec), &f->ectrl->stats_tail,
					   &f->dctrl->stats_head, 0), 0);
	ck_assert_int_eq(md_ring_prod_init(&f->cmds, f->dseg + f->doff.cmd_ring, f->cmd_cap,
					   sizeof(struct md_cmd), &f->dctrl->cmd_tail,
					   &f->ectrl->cmd_head, 0), 0);
	fake_reply(f, efd, dfd);
	close(efd);
	close(dfd);   /* the mappings keep the segments; the doorbells stay open */
	return NULL;
}

/* A new fake daemon serving one HELLO; dir != NULL reuses a socket directory
 * (a restart). */
static inline void fake_start_at(struct fake *f, const struct fake_profile *prof,
				 enum fake_mode mode, int abi, const char *dir)
{
	memset(f, 0, sizeof(*f));
	f->prof = prof;
	f->mode = mode;
	f->abi = abi;
	f->conn = f->db_d = f->db_e = -1;
	f->stats_cap = 64;
	f->cmd_cap = 16;
	if (dir) {
		snprintf(f->dir, sizeof(f->dir), "%s", dir);
	} else {
		snprintf(f->dir, sizeof(f->dir), "/tmp/md%s.XXXXXX", prof->tag);
		ck_assert_ptr_nonnull(mkdtemp(f->dir));
	}
	snprintf(f->path, sizeof(f->path), "%s/d.sock", f->dir);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, f->path);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 4), 0);
	ck_assert_int_eq(pthread_create(&f->th, NULL, fake_serve, f), 0);
}

static inline void fake_join(struct fake *f)
{
	pthread_join(f->th, NULL);
}

/* The daemon goes away: its connection and socket (the directory stays). */
static inline void fake_kill(struct fake *f)
{
	if (f->conn >= 0)
		close(f->conn);
	f->conn = -1;
	close(f->lfd);
	unlink(f->path);
}

static inline void fake_stop(struct fake *f)
{
	fake_kill(f);
	rmdir(f->dir);
}

/* Start a well-behaved fake and attach to it with cfg (whose socket_path is
 * f->path); the attach must succeed. */
static inline md_client *fake_attach(struct fake *f, const struct fake_profile *prof, int abi,
				     const struct md_client_config *cfg)
{
	md_client *c = NULL;
	fake_start_at(f, prof, FK_OK, abi, NULL);
	int rc = md_client_create_attached(cfg, &c);
	fake_join(f);
	ck_assert_msg(rc == 0, "attach: %s", md_strerror(rc));
	return c;
}

/* The next record of the stats ring (0: none). */
static inline int fake_next(struct fake *f, struct md_stats_rec *r)
{
	int64_t n = md_ring_available(&f->stats);
	ck_assert_int_ge(n, 0);
	if (n == 0)
		return 0;
	ck_assert_int_eq(md_ring_copy_next(&f->stats, r), MD_RING_OK);
	md_ring_release(&f->stats);
	return 1;
}

/* The next record of a type the fake has not consumed yet (0: none). */
static inline int fake_find(struct fake *f, uint16_t type, struct md_stats_rec *out)
{
	struct md_stats_rec r;
	while (fake_next(f, &r)) {
		if (r.type == type) {
			*out = r;
			return 1;
		}
	}
	return 0;
}

static inline void fake_drain(struct fake *f)
{
	struct md_stats_rec r;
	while (fake_next(f, &r))
		;
}

/* The daemon sends a command of any type (1.4: restore, drop). */
static inline void fake_command(struct fake *f, uint16_t type, uint16_t reason, uint32_t seq,
				uint32_t slot, uint32_t gen, uint64_t decided_ns)
{
	struct md_cmd *m = md_ring_reserve(&f->cmds);
	ck_assert_ptr_nonnull(m);
	*m = (struct md_cmd){ .type = type, .reason = reason,
			      .seq = seq, .slot = slot, .gen = gen, .decided_ns = decided_ns };
	md_ring_publish(&f->cmds, m);
}

/* The daemon commands an eviction. */
static inline void fake_evict(struct fake *f, uint16_t reason, uint32_t seq, uint32_t slot,
			      uint32_t gen, uint64_t decided_ns)
{
	fake_command(f, MD_CMD_EVICT, reason, seq, slot, gen, decided_ns);
}

#endif
