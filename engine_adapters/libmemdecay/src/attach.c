/*
 * attach.c — connecting to memdecayd: the HELLO line, the four file
 * descriptors that come back with SCM_RIGHTS, and the validation of both
 * segments.  The daemon is trusted to behave, not to be correct: every size,
 * magic, version, kind, geometry and offset is checked before anything is
 * mapped or dereferenced, so a buggy daemon yields MD_EPROTO, never a crash.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client_internal.h"
#include "memdecay_hello.h"
#include "memdecay_clock.h"

#define MD__REPLY_TIMEOUT_MS 5000
#define MD__SEGMENT_MAX (UINT64_C(1) << 40)

void md__set_error(struct md_client *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
	va_end(ap);
}

int md__resolve_socket_path(const char *cfg_path, char *buf, size_t len)
{
	const char *env;
	int n;
	if (cfg_path && *cfg_path)
		n = snprintf(buf, len, "%s", cfg_path);
	else if ((env = getenv("MEMDECAY_SOCKET")) && *env)
		n = snprintf(buf, len, "%s", env);
	else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
		n = snprintf(buf, len, "%s/memdecay/memdecayd.sock", env);
	else
		n = snprintf(buf, len, "/run/memdecay/memdecayd.sock");
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

/* region [off, off+size) inside [lo, seg) and 8-byte aligned */
static int region_ok(uint64_t off, uint64_t size, uint64_t lo, uint64_t seg)
{
	return off >= lo && (off & 7) == 0 && off <= seg && size <= seg - off;
}

static int overlap(uint64_t a, uint64_t asz, uint64_t b, uint64_t bsz)
{
	return a < b + bsz && b < a + asz;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void md__attach_close(struct md__attach *a)
{
	if (a->eseg && a->eseg != MAP_FAILED)
		munmap(a->eseg, a->g.eseg_size);
	if (a->dseg && a->dseg != MAP_FAILED)
		munmap((void *)a->dseg, a->g.dseg_size);
	a->eseg = NULL;
	a->dseg = NULL;
	close_fd(&a->sock_fd);
	close_fd(&a->eseg_fd);
	close_fd(&a->dseg_fd);
	close_fd(&a->db_daemon_fd);
	close_fd(&a->db_engine_fd);
}

static int send_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads one reply line; fds carried by any part of it land in fds[] (extra
 * ones are closed).  Returns the line length or a negative error. */
static int recv_reply(struct md_client *c, int sock, char *line, size_t cap, int *fds, int *nfds)
{
	size_t len = 0;
	uint64_t deadline = md_now_ns() + (uint64_t)MD__REPLY_TIMEOUT_MS * 1000000u;
	*nfds = 0;
	while (len + 1 < cap) {
		uint64_t now = md_now_ns();
		if (now >= deadline) {
			md__set_error(c, "no reply to HELLO within %d ms", MD__REPLY_TIMEOUT_MS);
			return -ETIMEDOUT;
		}
		struct pollfd pfd = { .fd = sock, .events = POLLIN };
		int pr = poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1);
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (pr == 0)
			continue;
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * 16)];
		} cm;
		struct iovec iov = { .iov_base = line + len, .iov_len = cap - 1 - len };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
		ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); h; h = CMSG_NXTHDR(&msg, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			int tmp[16];
			memcpy(tmp, CMSG_DATA(h), k * sizeof(int) > sizeof(tmp) ? sizeof(tmp) : k * sizeof(int));
			for (size_t i = 0; i < k && i < 16; i++) {
				if (*nfds < MD_ATTACH_FDS)
					fds[(*nfds)++] = tmp[i];
				else
					close(tmp[i]);
			}
		}
		if (msg.msg_flags & MSG_CTRUNC) {
			md__set_error(c, "HELLO reply: control data truncated");
			return MD_EPROTO;
		}
		if (n == 0) {
			md__set_error(c, "daemon closed the connection before replying");
			return -ECONNRESET;
		}
		char *nl = memchr(line + len, '\n', (size_t)n);
		len += (size_t)n;
		if (nl) {
			*nl = '\0';
			return (int)(nl - line);
		}
	}
	md__set_error(c, "HELLO reply longer than %zu bytes", cap);
	return MD_EPROTO;
}

/* Maps a received segment after checking its size and seals. */
static int map_segment(struct md_client *c, int fd, int prot, const char *what, void **out,
		       uint64_t *size_out)
{
	struct stat st;
	if (fstat(fd, &st) < 0) {
		md__set_error(c, "%s segment: fstat: %s", what, strerror(errno));
		return MD_EPROTO;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(struct md_segment_header) ||
	    (uint64_t)st.st_size > MD__SEGMENT_MAX) {
		md__set_error(c, "%s segment: bad size %lld", what, (long long)st.st_size);
		return MD_EPROTO;
	}
	/* A segment that may still shrink could SIGBUS us: require the seal. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		md__set_error(c, "%s segment: not sealed against shrinking", what);
		return MD_EPROTO;
	}
	void *p = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		md__set_error(c, "%s segment: mmap: %s", what, strerror(errno));
		return -errno;
	}
	*out = p;
	*size_out = (uint64_t)st.st_size;
	return 0;
}

static int check_header(struct md_client *c, const struct md_segment_header *h,
			uint32_t kind, uint64_t size, const char *what)
{
	if (h->magic != MD_ABI_MAGIC) {
		md__set_error(c, "%s segment: bad magic 0x%016" PRIx64, what, h->magic);
		return MD_EPROTO;
	}
	if (h->abi_major != MD_ABI_MAJOR) {
		md__set_error(c, "%s segment: ABI %u.%u, library speaks %u.%u", what, h->abi_major,
			      h->abi_minor, MD_ABI_MAJOR, MD_ABI_MINOR);
		return MD_EVERSION;
	}
	if (h->kind != kind) {
		md__set_error(c, "%s segment: kind %u, expected %u", what, h->kind, kind);
		return MD_EPROTO;
	}
	if (h->header_size < sizeof(struct md_segment_header) || h->header_size > size) {
		md__set_error(c, "%s segment: header_size %u", what, h->header_size);
		return MD_EPROTO;
	}
	if (h->segment_size != size) {
		md__set_error(c, "%s segment: header says %" PRIu64 " bytes, memfd has %" PRIu64,
			      what, h->segment_size, size);
		return MD_EPROTO;
	}
	return 0;
}

static int validate(struct md_client *c, struct md__attach *a, uint32_t engine_id,
		    uint64_t instance)
{
	struct md_segment_header eh, dh;
	/* The creator writes magic last: acquire it before copying the rest. */
	(void)__atomic_load_n(&((const struct md_segment_header *)a->eseg)->magic, __ATOMIC_ACQUIRE);
	memcpy(&eh, a->eseg, sizeof(eh));
	(void)__atomic_load_n(&((const struct md_segment_header *)a->dseg)->magic, __ATOMIC_ACQUIRE);
	memcpy(&dh, a->dseg, sizeof(dh));
	int rc = check_header(c, &eh, MD_SEGMENT_ENGINE, a->g.eseg_size, "engine");
	if (!rc)
		rc = check_header(c, &dh, MD_SEGMENT_DAEMON, a->g.dseg_size, "daemon");
	if (rc)
		return rc;
	if (eh.page_tokens != c->page_tokens || eh.page_capacity != c->page_capacity ||
	    eh.max_seqs != c->max_seqs) {
		md__set_error(c, "engine segment geometry %u/%u/%u differs from HELLO %u/%u/%u",
			      eh.page_tokens, eh.page_capacity, eh.max_seqs, c->page_tokens,
			      c->page_capacity, c->max_seqs);
		return MD_EPROTO;
	}
	if (!md_ring_capacity_ok(eh.stats_capacity) || eh.stats_capacity > MD_RING_CAPACITY_MAX ||
	    !md_ring_capacity_ok(dh.cmd_capacity) || dh.cmd_capacity > MD_RING_CAPACITY_MAX) {
		md__set_error(c, "ring capacities %u/%u not powers of two within limits",
			      eh.stats_capacity, dh.cmd_capacity);
		return MD_EPROTO;
	}
	if (eh.engine_id != engine_id || dh.engine_id != engine_id ||
	    eh.instance_id != instance || dh.instance_id != instance) {
		md__set_error(c, "segments belong to engine %u/%u instance %" PRIu64 "/%" PRIu64
			      ", reply said %u/%" PRIu64, eh.engine_id, dh.engine_id,
			      eh.instance_id, dh.instance_id, engine_id, instance);
		return MD_EPROTO;
	}
	const struct md_engine_offsets *eo = &eh.off.engine;
	const struct md_daemon_offsets *doff = &dh.off.daemon;
	uint64_t es = a->g.eseg_size, ds = a->g.dseg_size;
	uint64_t pt_sz = (uint64_t)c->page_capacity * sizeof(struct md_page_entry);
	uint64_t sc_sz = (uint64_t)c->max_seqs * sizeof(uint64_t);
	uint64_t sr_sz = (uint64_t)eh.stats_capacity * sizeof(struct md_stats_rec);
	uint64_t cr_sz = (uint64_t)dh.cmd_capacity * sizeof(struct md_cmd);
	uint64_t e_off[4] = { eo->ctrl, eo->page_table, eo->seq_clock, eo->stats_ring };
	uint64_t e_sz[4] = { sizeof(struct md_engine_ctrl), pt_sz, sc_sz, sr_sz };
	uint64_t d_off[3] = { doff->ctrl, doff->params, doff->cmd_ring };
	uint64_t d_sz[3] = { sizeof(struct md_daemon_ctrl), sizeof(struct md_param_block), cr_sz };
	for (int i = 0; i < 4; i++) {
		if (!region_ok(e_off[i], e_sz[i], eh.header_size, es))
			goto bad_off;
		for (int j = 0; j < i; j++)
			if (overlap(e_off[i], e_sz[i], e_off[j], e_sz[j]))
				goto bad_off;
	}
	/* The CUDA export record (docs/abi.md §6): only asked for, only checked,
	 * with stats_transport=cuda. */
	if (c->stats_cuda) {
		uint64_t x = eo->cuda_ring_export;
		if (!x || !region_ok(x, MD_CUDA_RING_EXPORT_SIZE, eh.header_size, es))
			goto bad_off;
		for (int j = 0; j < 4; j++)
			if (overlap(x, MD_CUDA_RING_EXPORT_SIZE, e_off[j], e_sz[j]))
				goto bad_off;
	}
	for (int i = 0; i < 3; i++) {
		if (!region_ok(d_off[i], d_sz[i], dh.header_size, ds))
			goto bad_off;
		for (int j = 0; j < i; j++)
			if (overlap(d_off[i], d_sz[i], d_off[j], d_sz[j]))
				goto bad_off;
	}
	/* 1.2: the per-sequence arrays.  Offset 0, or a segment of an older
	 * minor (whose table had reserved zeros there), means none. */
	struct md_engine_offsets eo2 = *eo;
	struct md_daemon_offsets do2 = *doff;
	if (eh.abi_minor < 2)
		eo2.seq_opts = 0;
	if (dh.abi_minor < 2)
		do2.seq_protect = 0;
	if (eo2.seq_opts) {
		uint64_t x = eo2.seq_opts, sz = (uint64_t)c->max_seqs * sizeof(struct md_seq_opts);
		if (!region_ok(x, sz, eh.header_size, es))
			goto bad_off;
		for (int j = 0; j < 4; j++)
			if (overlap(x, sz, e_off[j], e_sz[j]))
				goto bad_off;
		if (c->stats_cuda && overlap(x, sz, eo->cuda_ring_export, MD_CUDA_RING_EXPORT_SIZE))
			goto bad_off;
	}
	if (do2.seq_protect) {
		uint64_t x = do2.seq_protect, sz = (uint64_t)c->max_seqs * sizeof(uint32_t);
		if (!region_ok(x, sz, dh.header_size, ds))
			goto bad_off;
		for (int j = 0; j < 3; j++)
			if (overlap(x, sz, d_off[j], d_sz[j]))
				goto bad_off;
	}
	a->g.page_tokens = c->page_tokens;
	a->g.page_capacity = c->page_capacity;
	a->g.max_seqs = c->max_seqs;
	a->g.stats_capacity = eh.stats_capacity;
	a->g.cmd_capacity = dh.cmd_capacity;
	a->g.engine_id = engine_id;
	a->g.abi_minor = eh.abi_minor;
	a->g.instance_id = instance;
	a->g.eoff = eo2;
	a->g.doff = do2;
	return 0;
bad_off:
	md__set_error(c, "segment offsets table out of bounds or overlapping");
	return MD_EPROTO;
}

static int parse_ok(const char *line, uint32_t *engine_id, uint64_t *instance)
{
	const char *p = line + 2;
	int have_id = 0, have_inst = 0;
	while (*p) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		char *end;
		if (!strncmp(p, "engine_id=", 10)) {
			errno = 0;
			unsigned long long v = strtoull(p + 10, &end, 10);
			if (errno || end == p + 10 || v > UINT32_MAX)
				return -1;
			*engine_id = (uint32_t)v;
			have_id = 1;
			p = end;
		} else if (!strncmp(p, "instance=", 9)) {
			errno = 0;
			unsigned long long v = strtoull(p + 9, &end, 0);
			if (errno || end == p + 9)
				return -1;
			*instance = v;
			have_inst = 1;
			p = end;
		} else {
			while (*p && *p != ' ')   /* unknown key=value: a later minor */
				p++;
		}
		if (*p && *p != ' ')
			return -1;
	}
	return have_id && have_inst ? 0 : -1;
}

/* The HELLO line from the one field table (memdecay_hello.h): the fields this
 * client sets are marked given, the rest left to the daemon's defaults. */
static int format_hello(const struct md_client *c, char *buf, size_t len)
{
	struct md__hello h = { 0 };
	h.abi_major = MD_ABI_MAJOR;
	h.abi_minor = MD_ABI_MINOR;
	snprintf(h.name, sizeof(h.name), "%s", c->engine_name);
	h.page_tokens = c->page_tokens;
	h.page_capacity = c->page_capacity;
	h.max_seqs = c->max_seqs;
	h.given = 1u << MD__HF_ABI | 1u << MD__HF_NAME | 1u << MD__HF_PAGE_TOKENS |
		  1u << MD__HF_PAGE_CAPACITY | 1u << MD__HF_MAX_SEQS;
	if (c->tp_size > 0) {
		h.tp_rank = c->tp_rank;
		h.tp_size = c->tp_size;
		h.given |= 1u << MD__HF_TP_RANK | 1u << MD__HF_TP_SIZE;
	}
	if (c->policy) {
		snprintf(h.policy, sizeof(h.policy), "%s", c->policy);
		h.given |= 1u << MD__HF_POLICY;
	}
	h.budget_pages = c->budget_engine_pages;
	if (c->budget_engine_pages >= 0)
		h.given |= 1u << MD__HF_BUDGET_PAGES;
	h.budget_sequence_tokens = c->budget_sequence_tokens;
	if (c->budget_sequence_tokens >= 0)
		h.given |= 1u << MD__HF_BUDGET_SEQUENCE_TOKENS;
	h.weight = c->weight;
	if (c->weight > 0)
		h.given |= 1u << MD__HF_WEIGHT;
	h.stats_transport = c->stats_cuda;
	if (c->stats_cuda)
		h.given |= 1u << MD__HF_STATS_TRANSPORT;
	/* 1.4: a daemon of an older minor skips keys it does not know, and its
	 * parameter block then grants no tier (md_client_tier_budget: 0). */
	if (c->tier_capacity) {
		h.tier_pages = c->tier_capacity;
		h.page_bytes = c->page_bytes;
		h.given |= 1u << MD__HF_TIER_PAGES | 1u << MD__HF_PAGE_BYTES;
	}
	int n = md__hello_format(&h, buf, len);
	return n < 0 ? -ENAMETOOLONG : n;
}

int md__attach(struct md_client *c, struct md__attach *a)
{
	char line[MD_CTL_LINE_MAX];
	int fds[MD_ATTACH_FDS];
	int nfds = 0, rc;

	memset(a, 0, sizeof(*a));
	a->sock_fd = a->eseg_fd = a->dseg_fd = a->db_daemon_fd = a->db_engine_fd = -1;

	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(c->socket_path) >= sizeof(sa.sun_path)) {
		md__set_error(c, "socket path too long");
		return -ENAMETOOLONG;
	}
	strcpy(sa.sun_path, c->socket_path);
	a->sock_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (a->sock_fd < 0) {
		rc = -errno;
		md__set_error(c, "socket: %s", strerror(errno));
		return rc;
	}
	if (connect(a->sock_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		md__set_error(c, "connect %s: %s", c->socket_path, strerror(errno));
		goto fail;
	}
	rc = format_hello(c, line, sizeof(line));
	if (rc < 0) {
		md__set_error(c, "HELLO line too long");
		goto fail;
	}
	rc = send_all(a->sock_fd, line, (size_t)rc);
	if (rc < 0) {
		md__set_error(c, "send HELLO: %s", strerror(-rc));
		goto fail;
	}
	rc = recv_reply(c, a->sock_fd, line, sizeof(line), fds, &nfds);
	/* Take ownership of the fds first so every path below closes them. */
	if (nfds > 0) a->eseg_fd = fds[0];
	if (nfds > 1) a->dseg_fd = fds[1];
	if (nfds > 2) a->db_daemon_fd = fds[2];
	if (nfds > 3) a->db_engine_fd = fds[3];
	if (rc < 0)
		goto fail;
	if (!strncmp(line, "ERR", 3) && (line[3] == ' ' || line[3] == '\0')) {
		const char *msg = line[3] ? line + 4 : "refused";
		md__set_error(c, "%s", msg);
		/* Convention with the daemon: a refusal about the ABI starts with "abi" (any case). */
		rc = !strncasecmp(msg, "abi", 3) ? MD_EVERSION : MD_EREFUSED;
		goto fail;
	}
	uint32_t engine_id = 0;
	uint64_t instance = 0;
	if (strncmp(line, "OK", 2) || (line[2] != ' ' && line[2] != '\0') ||
	    parse_ok(line, &engine_id, &instance) < 0) {
		md__set_error(c, "malformed HELLO reply");
		rc = MD_EPROTO;
		goto fail;
	}
	if (nfds != MD_ATTACH_FDS) {
		md__set_error(c, "HELLO reply carried %d fds, expected %d", nfds, MD_ATTACH_FDS);
		rc = MD_EPROTO;
		goto fail;
	}
	void *p;
	rc = map_segment(c, a->eseg_fd, PROT_READ | PROT_WRITE, "engine", &p, &a->g.eseg_size);
	if (rc)
		goto fail;
	a->eseg = p;
	rc = map_segment(c, a->dseg_fd, PROT_READ, "daemon", &p, &a->g.dseg_size);
	if (rc)
		goto fail;
	a->dseg = p;
	rc = validate(c, a, engine_id, instance);
	if (rc)
		goto fail;
	/* The memfds are mapped; the mappings keep them alive. */
	close_fd(&a->eseg_fd);
	close_fd(&a->dseg_fd);

	char *e = a->eseg;
	const char *d = a->dseg;
	a->ectrl = (struct md_engine_ctrl *)(e + a->g.eoff.ctrl);
	a->ptab = (struct md_page_entry *)(e + a->g.eoff.page_table);
	a->seq_clock = (uint64_t *)(e + a->g.eoff.seq_clock);
	a->dctrl = (const struct md_daemon_ctrl *)(d + a->g.doff.ctrl);
	a->params = (const struct md_param_block *)(d + a->g.doff.params);
	a->seq_opts = a->g.eoff.seq_opts ? (struct md_seq_opts *)(e + a->g.eoff.seq_opts) : NULL;
	a->seq_protect = a->g.doff.seq_protect
		       ? (const uint32_t *)(d + a->g.doff.seq_protect) : NULL;

	/* Both words start at 0 on a fresh attachment, before the views read them. */
	md_store_release(&a->ectrl->stats_tail, 0);
	md_store_release(&a->ectrl->cmd_head, 0);
	if (md_ring_prod_init(&a->stats, e + a->g.eoff.stats_ring, a->g.stats_capacity,
			      sizeof(struct md_stats_rec), &a->ectrl->stats_tail,
			      &a->dctrl->stats_head, 0) < 0 ||
	    md_ring_cons_init(&a->cmds, d + a->g.doff.cmd_ring, a->g.cmd_capacity,
			      sizeof(struct md_cmd), &a->dctrl->cmd_tail, &a->ectrl->cmd_head, 0) < 0) {
		md__set_error(c, "ring capacities %u/%u are not powers of two",
			      a->g.stats_capacity, a->g.cmd_capacity);
		rc = MD_EPROTO;
		goto fail;
	}
	return 0;
fail:
	md__attach_close(a);
	return rc;
}
