/*
 * attach.c — turning a HELLO into an attached engine, and releasing it.
 *
 * The daemon creates both memfd segments (so it fixes the geometry), writes
 * their headers with the magic last, seals them against resizing (the daemon
 * segment also against future writable mappings: the engine can only map it
 * read-only), and passes them with two eventfds over SCM_RIGHTS.  From then on
 * the daemon uses only its private copy of the geometry (liburing setup.c
 * style); the shared header is for the engine's benefit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "ctl_parse.h"
#include "cuda_transport.h"
#include "daemon.h"
#include "log.h"
#include "memdecay_clock.h"

static uint32_t pow2_at_least(uint64_t v, uint32_t cap)
{
	uint64_t p = 1;
	while (p < v && p < cap)
		p <<= 1;
	return (uint32_t)(p > cap ? cap : p);
}

static void seg_header(struct md_segment_header *h, uint32_t kind, uint64_t size,
		       const struct md__peer *e, uint64_t instance)
{
	h->abi_major = MD_ABI_MAJOR;
	h->abi_minor = MD_ABI_MINOR;
	h->kind = kind;
	h->header_size = sizeof(*h);
	h->segment_size = size;
	h->engine_id = e->id;
	h->page_tokens = e->page_tokens;
	h->page_capacity = e->page_capacity;
	h->max_seqs = e->max_seqs;
	h->stats_capacity = e->stats_capacity;
	h->cmd_capacity = e->cmd_capacity;
	h->instance_id = instance;
}

static int make_memfd(const char *name, uint64_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int err = errno;
		close(fd);
		return -err;
	}
	return fd;
}

static void bell_cb(struct md__loop *l, struct md__watch *w, int res, const void *buf, void *ud)
{
	struct md__peer *e = ud;
	e->d->idle_wake = 1;
	if (res == (int)sizeof(uint64_t)) {
		uint64_t v;
		memcpy(&v, buf, sizeof(v));
		e->doorbells_in += v; /* writes since the last read */
	}
	if (res < 0 && res != -EAGAIN && res != -EINTR)
		md__warn("engine %u (%s): doorbell read failed: %s", e->id, e->name, strerror(-res));
}

static int send_reply_fds(int sock, const char *msg, const int fds[MD_ATTACH_FDS])
{
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = strlen(msg) };
	union {
		char buf[CMSG_SPACE(sizeof(int) * MD_ATTACH_FDS)];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * MD_ATTACH_FDS);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * MD_ATTACH_FDS);
	ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return (size_t)n == iov.iov_len ? 0 : -EAGAIN;
}

static void refuse(struct md__daemon *d, struct md__conn *c, const char *msg)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "ERR %s\n", msg);
	d->attach_refused++;
	uint64_t held;
	if (md__ratelimit_ok(&d->refuse_rl, md_now_ns(), &held))
		md__warn("attach refused (pid %d uid %u): %s (%llu refusal lines suppressed before this one)",
			 (int)c->pid, (unsigned)c->uid, msg, (unsigned long long)held);
	md__conn_send(d, c, line, (size_t)n);
	c->close_after_reply = 1;
}

/* HELLO → the engine's options, or a refusal reason in err (and an errno). */
static int hello_opts(struct md__daemon *d, const char *hello_line, struct md__hello *hello,
		      struct md__engine_opts *opts, char *err, size_t errlen)
{
	if (md__hello_parse(hello_line, hello, err, errlen) < 0)
		return -EINVAL;
	md__engine_opts_defaults(opts);
	snprintf(opts->name, sizeof(opts->name), "%s", hello->name);
	if (hello->policy[0]) {
		opts->policy = md__policy_from_name(hello->policy);
		if (opts->policy < 0) {
			snprintf(err, errlen, "HELLO field policy=%s: unknown policy", hello->policy);
			return -EINVAL;
		}
	}
	if (hello->stats_transport == MD__STATS_CUDA && md__cuda_transport_admit(err, errlen) < 0)
		return -ENOTSUP;
	/* The host tier (docs/tier.md): a 1.4 engine's, and a tier page keeps
	 * its page-table slot, so the tier cannot outgrow the table. */
	if ((hello->given & (1u << MD__HF_TIER_PAGES)) && hello->tier_pages) {
		if (hello->abi_minor < 4) {
			snprintf(err, errlen, "HELLO field tier_pages needs abi=1.4 (engine says 1.%u)",
				 hello->abi_minor);
			return -EINVAL;
		}
		if (hello->tier_pages > hello->page_capacity) {
			snprintf(err, errlen,
				 "HELLO field tier_pages=%u: more than page_capacity=%u (a tier "
				 "page keeps its slot)", hello->tier_pages, hello->page_capacity);
			return -EINVAL;
		}
	}
	opts->budget_engine_pages = hello->budget_pages;
	opts->budget_sequence_tokens = hello->budget_sequence_tokens;
	/* An engine's own word on its share of the global budget is believed
	 * only up to budget.max_engine_weight, whatever its uid: in a container
	 * every process usually runs as the daemon's.  Only memdecayctl weight
	 * sets more (docs/reliability.md, promise 14). */
	opts->weight = hello->weight;
	if (opts->weight > md__daemon_params(d)->max_engine_weight)
		opts->weight = md__daemon_params(d)->max_engine_weight;
	return 0;
}

/* What one peer may hold: engines in all, engines per uid.  Returns 0 with the
 * segment bytes the uid holds already, or -EUSERS with the reason in err. */
static int peer_limits(const struct md__daemon *d, const struct md__conn *c, uint64_t *uid_bytes,
		       char *err, size_t errlen)
{
	uint32_t uid_engines = 0;
	*uid_bytes = 0;
	for (const struct md__peer *k = d->engines; k; k = k->next)
		if (k->uid == c->uid) {
			uid_engines++;
			*uid_bytes += k->eseg_size + k->dseg_size;
		}
	if (d->n_engines >= md__daemon_params(d)->max_engines) {
		snprintf(err, errlen, "too many engines attached (%u, daemon.max_engines)",
			 d->n_engines);
		return -EUSERS;
	}
	if (uid_engines >= md__daemon_params(d)->max_engines_per_uid) {
		snprintf(err, errlen, "uid %u has %u engines attached (daemon.max_engines_per_uid)",
			 (unsigned)c->uid, uid_engines);
		return -EUSERS;
	}
	return 0;
}

/* A new peer with the geometry HELLO asked for: ring capacities by the
 * daemon's rule, segment sizes and offsets.  NULL when out of memory. */
static struct md__peer *peer_new(struct md__daemon *d, const struct md__conn *c,
				 const struct md__hello *hello, struct md_engine_offsets *eoff,
				 struct md_daemon_offsets *doff)
{
	struct md__peer *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->d = d;
	e->eseg_fd = e->dseg_fd = e->bell_to_daemon_fd = e->bell_to_engine_fd = -1;
	e->id = ++d->next_engine_id;
	snprintf(e->name, sizeof(e->name), "%s", hello->name);
	e->pid = c->pid;
	e->uid = c->uid;
	e->page_tokens = hello->page_tokens;
	e->page_capacity = hello->page_capacity;
	e->max_seqs = hello->max_seqs;
	e->tp_rank = hello->tp_rank;
	e->tp_size = hello->tp_size;
	uint64_t want_stats = 4ull * e->page_capacity;
	e->stats_capacity = pow2_at_least(want_stats > 4096 ? want_stats : 4096, MD_RING_CAPACITY_MAX);
	e->cmd_capacity = pow2_at_least(e->page_capacity > 1024 ? e->page_capacity : 1024,
					MD_RING_CAPACITY_MAX);
	e->stats_transport = hello->stats_transport;
	e->abi_minor = hello->abi_minor;
	uint32_t flags = 0;
	if (e->stats_transport == MD__STATS_CUDA)
		flags |= MD_ENGINE_LAYOUT_CUDA_EXPORT;
	if (e->abi_minor >= 2) /* per-sequence options: a 1.2 engine's segment only */
		flags |= MD_ENGINE_LAYOUT_SEQ_OPTS;
	e->eseg_size = md_engine_layout_ex(e->page_capacity, e->max_seqs, e->stats_capacity,
					   flags, eoff);
	e->cuda_export_off = eoff->cuda_ring_export;
	/* Every engine gets seq_protect: a 1.0/1.1 library checks the daemon
	 * segment's size against its header and the offsets it knows, and reads
	 * nothing past its command ring (docs/abi.md, "Compatibility"). */
	e->dseg_size = md_daemon_layout_ex(e->cmd_capacity, e->max_seqs, doff);
	return e;
}

/* The two memfds, mapped; the engine segment's header written and the
 * mapping made read-only; the daemon segment's header and control words
 * (its magic comes once the parameters are in).  On failure *step names
 * what failed. */
static int map_segments(struct md__daemon *d, struct md__peer *e,
			const struct md_engine_offsets *eoff, const struct md_daemon_offsets *doff,
			const char **step)
{
	char name[96];
	int rc;
	*step = "memfd";
	snprintf(name, sizeof(name), "memdecay-engine-%u", e->id);
	if ((rc = make_memfd(name, e->eseg_size)) < 0)
		return rc;
	e->eseg_fd = rc;
	snprintf(name, sizeof(name), "memdecay-daemon-%u", e->id);
	if ((rc = make_memfd(name, e->dseg_size)) < 0)
		return rc;
	e->dseg_fd = rc;

	*step = "mmap";
	void *em = mmap(NULL, e->eseg_size, PROT_READ | PROT_WRITE, MAP_SHARED, e->eseg_fd, 0);
	if (em == MAP_FAILED)
		return -errno;
	e->eseg = em;
	void *dm = mmap(NULL, e->dseg_size, PROT_READ | PROT_WRITE, MAP_SHARED, e->dseg_fd, 0);
	if (dm == MAP_FAILED)
		return -errno;
	e->dseg = dm;

	/* Engine segment: header only (the memfd is zero-filled: empty rings, free pages). */
	struct md_segment_header *eh = em;
	seg_header(eh, MD_SEGMENT_ENGINE, e->eseg_size, e, d->instance_id);
	eh->off.engine = *eoff;
	md_store_release(&eh->magic, MD_ABI_MAGIC);
	/* The daemon only reads the engine segment from now on. */
	*step = "mprotect";
	if (mprotect(em, e->eseg_size, PROT_READ) < 0)
		return -errno;
	e->ectrl = (const struct md_engine_ctrl *)((const char *)em + eoff->ctrl);
	e->page_table = (const struct md_page_entry *)((const char *)em + eoff->page_table);
	e->seq_clock = (const uint64_t *)((const char *)em + eoff->seq_clock);
	if (eoff->seq_opts)
		e->seq_opts = (const struct md_seq_opts *)((const char *)em + eoff->seq_opts);

	struct md_segment_header *dh = dm;
	seg_header(dh, MD_SEGMENT_DAEMON, e->dseg_size, e, d->instance_id);
	dh->off.daemon = *doff;
	e->dctrl = (struct md_daemon_ctrl *)((char *)dm + doff->ctrl);
	e->params = (struct md_param_block *)((char *)dm + doff->params);
	e->seq_protect = (uint32_t *)((char *)dm + doff->seq_protect);
	e->dctrl->instance_id = d->instance_id;
	e->dctrl->heartbeat_ns = md_now_ns();
	return 0;
}

/* After the host knows the engine: seals, doorbells, the private ring views
 * and the doorbell watch.  On failure *step names what failed; the caller
 * removes the engine from the host. */
static int wire_engine(struct md__daemon *d, struct md__peer *e,
		       const struct md_engine_offsets *eoff, const struct md_daemon_offsets *doff,
		       const char **step)
{
	*step = "seal";
	if (fcntl(e->eseg_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    fcntl(e->dseg_fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
		return -errno;

	*step = "eventfd";
	e->bell_to_daemon_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	e->bell_to_engine_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (e->bell_to_daemon_fd < 0 || e->bell_to_engine_fd < 0)
		return -errno;

	/* Private ring views: capacities and pointers from our own numbers
	 * (chosen by peer_new, so neither init can fail). */
	*step = "ring views";
	if (md_ring_cons_init(&e->stats, (const char *)e->eseg + eoff->stats_ring,
			      e->stats_capacity, sizeof(struct md_stats_rec),
			      &e->ectrl->stats_tail, &e->dctrl->stats_head, 0) < 0 ||
	    md_ring_prod_init(&e->cmds, (char *)e->dseg + doff->cmd_ring, e->cmd_capacity,
			      sizeof(struct md_cmd), &e->dctrl->cmd_tail, &e->ectrl->cmd_head, 0) < 0)
		return -EINVAL;
	e->attach_ns = md_now_ns();
	e->last_resync_request = 0;

	*step = "doorbell watch";
	e->bell_w = md__loop_watch(d->loop, e->bell_to_daemon_fd, MD__WATCH_READ, sizeof(uint64_t),
				   bell_cb, e);
	if (!e->bell_w)
		return -errno;
	return 0;
}

/* The engine holds its segments: list it, start its calibration, say so. */
static void peer_register(struct md__daemon *d, struct md__conn *c, struct md__peer *e,
			  const struct md__hello *hello)
{
	e->conn = c;
	c->engine = e;
	e->next = d->engines;
	d->engines = e;
	d->n_engines++;
	d->attaches++;
	d->dirty = 1;
	if (d->calib) {
		e->calib = (struct md__calib_engine){ .id = e->id, .page_tokens = e->page_tokens,
						      .page_capacity = e->page_capacity,
						      .max_seqs = e->max_seqs };
		md__calib_live_attach(d->calib, &e->calib);
		if (!e->calib.tracker)
			md__warn("engine %u (%s): no memory for calibration: its attention is not "
				 "measured", e->id, e->name);
	}
	md__info("engine %u (%s) attached: abi 1.%u pid %d uid %u page_tokens %u page_capacity %u "
		 "max_seqs %u stats_ring %u cmd_ring %u policy %s tier_pages %u",
		 e->id, e->name, e->abi_minor, (int)e->pid, (unsigned)e->uid, e->page_tokens,
		 e->page_capacity, e->max_seqs, e->stats_capacity, e->cmd_capacity,
		 hello->policy[0] ? hello->policy : "default", hello->tier_pages);
}

/* A HELLO weight above budget.max_engine_weight was cut to it: counted
 * (stats "weights_clamped") and said, at the refusals' rate. */
static void weight_clamped(struct md__daemon *d, const struct md__peer *e, double asked,
			   double got)
{
	d->weights_clamped++;
	uint64_t held;
	if (md__ratelimit_ok(&d->refuse_rl, md_now_ns(), &held))
		md__warn("engine %u (%s, pid %d uid %u): HELLO weight %g clamped to %g "
			 "(budget.max_engine_weight; memdecayctl weight sets more) (%llu refusal "
			 "or clamp lines suppressed before this one)",
			 e->id, e->name, (int)e->pid, (unsigned)e->uid, asked, got,
			 (unsigned long long)held);
}

int md__peer_attach(struct md__daemon *d, struct md__conn *c, const char *hello_line)
{
	char err[256];
	struct md__hello hello;
	struct md__engine_opts opts;
	uint64_t uid_bytes;
	int rc = hello_opts(d, hello_line, &hello, &opts, err, sizeof(err));
	if (!rc)
		rc = peer_limits(d, c, &uid_bytes, err, sizeof(err));
	if (rc) {
		refuse(d, c, err);
		return rc;
	}

	struct md_engine_offsets eoff;
	struct md_daemon_offsets doff;
	struct md__peer *e = peer_new(d, c, &hello, &eoff, &doff);
	if (!e) {
		refuse(d, c, "out of memory");
		return -ENOMEM;
	}
	if (uid_bytes + e->eseg_size + e->dseg_size > md__daemon_params(d)->max_segment_bytes_per_uid) {
		snprintf(err, sizeof(err),
			 "segments of %llu bytes would bring uid %u to %llu bytes "
			 "(daemon.max_segment_bytes_per_uid %llu)",
			 (unsigned long long)(e->eseg_size + e->dseg_size), (unsigned)c->uid,
			 (unsigned long long)(uid_bytes + e->eseg_size + e->dseg_size),
			 (unsigned long long)md__daemon_params(d)->max_segment_bytes_per_uid);
		free(e);
		refuse(d, c, err);
		return -ENOMEM;
	}

	const char *step = "memfd";
	if ((rc = map_segments(d, e, &eoff, &doff, &step)) < 0)
		goto fail;
	step = "policy host";
	if ((rc = md__host_engine_add(d->host, e->id, e->page_tokens, e->page_capacity,
				      e->max_seqs, &opts)) < 0)
		goto fail;
	md__host_engine_set_abi_minor(d->host, e->id, e->abi_minor);
	if (hello.tier_pages)
		md__host_engine_set_tier(d->host, e->id, hello.tier_pages, hello.page_bytes);
	e->params->seq = 0; /* md__peer_publish_params makes it 2 */
	md__peer_publish_params(d, e);
	md_store_release(&((struct md_segment_header *)e->dseg)->magic, MD_ABI_MAGIC);
	if ((rc = wire_engine(d, e, &eoff, &doff, &step)) < 0)
		goto fail_host;

	char ok[128];
	snprintf(ok, sizeof(ok), "OK engine_id=%u instance=%llu\n", e->id,
		 (unsigned long long)d->instance_id);
	int fds[MD_ATTACH_FDS] = { e->eseg_fd, e->dseg_fd, e->bell_to_daemon_fd,
				   e->bell_to_engine_fd };
	step = "sendmsg";
	if ((rc = send_reply_fds(c->fd, ok, fds)) < 0) {
		md__loop_unwatch(d->loop, e->bell_w);
		goto fail_host;
	}
	/* The engine holds the segments now; our mappings keep them alive. */
	close(e->eseg_fd);
	close(e->dseg_fd);
	e->eseg_fd = e->dseg_fd = -1;
	peer_register(d, c, e, &hello);
	if (opts.weight < hello.weight)
		weight_clamped(d, e, hello.weight, opts.weight);
	return 0;

fail_host:
	md__host_engine_remove(d->host, e->id);
fail:
	snprintf(err, sizeof(err), "attach failed at %s: %s", step, strerror(-rc));
	md__err("engine %u (%s): %s", e->id, e->name, err);
	md__peer_free(e);
	refuse(d, c, err);
	return rc;
}

