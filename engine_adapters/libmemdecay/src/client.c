/*
 * client.c — the engine side of MemDecay: the page mirror, lifecycle and
 * attention publishing, command polling, liveness and fail-open.
 *
 * The private mirror is the engine's truth about its pages.  While attached,
 * every change is written to the shared page table first (seqlock-style
 * version word, odd while writing) and then announced on the stats ring; a
 * lifecycle record that does not fit is not lost: the page table already
 * holds it and resync_request tells the daemon to re-read the table.  While
 * detached, calls keep the mirror and return MD_EDETACHED; reattaching copies
 * the mirror into the new daemon's segment.  Publish and poll paths make no
 * allocation and no system call (the doorbell is rung only for a sleeping
 * daemon).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client_internal.h"
#include "memdecay_clock.h"

#define MD__SOCK_CHECK_NS (100u * 1000000u)
#define MD__EXPORT __attribute__((visibility("default")))
#define MD__STATE_NONE 0xffu   /* a page state no slot is in */

/* ---- errors ---- */

MD__EXPORT const char *md_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case MD_EVERSION: return "daemon speaks another ABI major version";
	case MD_EREFUSED: return "daemon refused the engine";
	case MD_EPROTO: return "malformed reply or segment from the daemon";
	case MD_EDETACHED: return "no daemon attached";
	case MD_EFULL: return "stats ring full, attention record dropped";
	case MD_ENOSLOT: return "no free page slot";
	case MD_ESTALE: return "slot or generation no longer matches";
	default:
		if (err < 0 && err > -4096)
			return strerror(-err);
		return "unknown error";
	}
}

/* ---- configuration ---- */

MD__EXPORT void md_client_config_init(struct md_client_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->engine_name = "engine";
	cfg->page_tokens = MD_PAGE_TOKENS_DEFAULT;
	cfg->page_capacity = 4096;
	cfg->max_seqs = 64;
	cfg->budget_engine_pages = -1;
	cfg->budget_sequence_tokens = -1;
}

/* Values go into a space-separated key=value line. */
static int word_ok(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch <= ' ' || ch == '=' || ch >= 0x7f)
			return 0;
	}
	return 1;
}

static void set_default_params(struct md_params_view *v)
{
	memset(v, 0, sizeof(*v));
	v->policy = MD_POLICY_MEMDECAY;
	v->norm_mode = MD_NORM_RAW;
	v->tau = 0.01;
	v->pinned_mask = 1u << MD_REGION_SYSTEM;
	v->protect_recent = 1;
}

/* ---- page table writes (seqlock on the entry's version word) ---- */

/* 1: the attached daemon knows the host tier (ABI 1.4). */
int md__daemon_has_tier(const struct md_client *c)
{
	return c->attached && c->a.g.abi_minor >= 4;
}

static void pt_write(struct md_client *c, uint32_t slot)
{
	struct md_page_entry *m = &c->mirror[slot];
	uint32_t v = m->version;
	m->version = v + 2;
	if (!c->attached)
		return;
	struct md_page_entry *e = &c->a.ptab[slot];
	/* A daemon older than 1.4 has no word for a tier page: to it the slot
	 * is free (it never saw the page, or saw it evicted). */
	uint8_t state = m->state;
	if (state == MD_PAGE_TIER && !md__daemon_has_tier(c))
		state = MD_PAGE_FREE;
	md_store_relaxed(&e->version, v + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	md_store_relaxed(&e->generation, m->generation);
	md_store_relaxed(&e->seq, m->seq);
	md_store_relaxed(&e->n_tokens, m->n_tokens);
	md_store_relaxed(&e->state, state);
	md_store_relaxed(&e->first_pos, m->first_pos);
	md_store_relaxed(&e->labels, m->labels);
	md_store_relaxed(&e->open_clock, m->open_clock);
	md_store_release(&e->version, v + 2);
}

void md__request_resync(struct md_client *c)
{
	if (!c->attached)
		return;
	struct md_engine_ctrl *ec = c->a.ectrl;
	md_store_release(&ec->resync_request, md_load_relaxed(&ec->resync_request) + 1);
	c->ctr.resyncs++;
}

/* ---- the stats ring ---- */

/* io_uring's NEED_WAKEUP: full fence between publishing the tail and reading
 * the peer's sleeping flag (the daemon does the mirror image).  A doorbell
 * already rung for records the daemon has not consumed yet needs no repeat:
 * the daemon re-checks the ring before it sleeps again. */
static void notify_daemon(struct md_client *c)
{
	if (c->stats_cuda)
		return; /* staged: md_gpu_* queues them and rings (gpu.c) */
	md_fence_full();
	if (!md_load_relaxed(&c->a.dctrl->sleeping))
		return;
	if (c->rang && md_load_acquire(&c->a.dctrl->stats_head) < c->rang_tail)
		return;
	uint64_t one = 1;
	ssize_t n = write(c->a.db_daemon_fd, &one, sizeof(one));
	(void)n;
	c->rang = 1;
	c->rang_tail = c->a.stats.next;
}

static struct md_stats_rec *rec_reserve(struct md_client *c)
{
	struct md_stats_rec *r = md_ring_reserve(&c->a.stats);
	if (r)
		memset(r, 0, sizeof(*r));
	return r;
}

static void rec_publish(struct md_client *c, struct md_stats_rec *r)
{
	md_ring_publish(&c->a.stats, r);
	notify_daemon(c);
}

/* Doorbell for a daemon that sleeps, after records were queued on the
 * device ring (gpu.c): they arrive later, the daemon's drain waits for them. */
void md__ring_daemon(struct md_client *c)
{
	md_fence_full();
	if (md_load_relaxed(&c->a.dctrl->sleeping)) {
		uint64_t one = 1;
		ssize_t n = write(c->a.db_daemon_fd, &one, sizeof(one));
		(void)n;
	}
}

/* Lifecycle records are never lost: on a full ring the page table (already
 * written) is the truth and the daemon is asked to re-read it. */
void md__lifecycle_dropped(struct md_client *c)
{
	struct md_engine_ctrl *ec = c->a.ectrl;
	md_store_relaxed(&ec->lifecycle_dropped, md_load_relaxed(&ec->lifecycle_dropped) + 1);
	c->ctr.lifecycle_dropped++;
	md__request_resync(c);
	/* The daemon may be asleep: wake it so the resync happens. */
	md_fence_full();
	if (md_load_relaxed(&c->a.dctrl->sleeping)) {
		uint64_t one = 1;
		ssize_t n = write(c->a.db_daemon_fd, &one, sizeof(one));
		(void)n;
	}
}

/* Reserves a zeroed lifecycle record with its common header filled in; on a
 * full ring counts the drop, asks for a resync and returns NULL. */
static struct md_stats_rec *lifecycle_rec(struct md_client *c, uint16_t type, uint32_t seq,
					  uint32_t slot, uint32_t gen, uint64_t clock)
{
	struct md_stats_rec *r = rec_reserve(c);
	if (!r) {
		md__lifecycle_dropped(c);
		return NULL;
	}
	r->type = type;
	r->seq = seq;
	r->slot = slot;
	r->gen = gen;
	r->clock = clock;
	return r;
}

/* The same, for the files beside this one (seq.c): lifecycle records are
 * never on the hot path, so a call across files costs nothing that matters. */
struct md_stats_rec *md__lifecycle_rec(struct md_client *c, uint16_t type, uint32_t seq,
				       uint32_t slot, uint32_t gen, uint64_t clock)
{
	return lifecycle_rec(c, type, seq, slot, gen, clock);
}

void md__rec_publish(struct md_client *c, struct md_stats_rec *r)
{
	rec_publish(c, r);
}

/* ---- create / destroy ---- */

static void detach(struct md_client *c)
{
	if (!c->attached)
		return;
	md__attach_close(&c->a);
	c->attached = 0;
	c->rang = 0;
}

static void seed_segment(struct md_client *c)
{
	/* Fill the new page table and clocks from the mirror, then tell the
	 * daemon to rebuild from them if there is anything to rebuild. */
	int any = 0, tier = md__daemon_has_tier(c);
	for (uint32_t s = 0; s < c->page_capacity; s++) {
		uint8_t st = c->mirror[s].state;
		if (st != MD_PAGE_FREE || c->mirror[s].generation) {
			pt_write(c, s);
			/* tier pages too: the daemon's resync reads them as
			 * MD_PAGE_TIER entries and rebuilds its tier */
			any |= st == MD_PAGE_LIVE || (st == MD_PAGE_TIER && tier);
		}
	}
	for (uint32_t q = 0; q < c->max_seqs; q++) {
		if (c->clock[q]) {
			md_store_release(&c->a.seq_clock[q], c->clock[q]);
			any = 1;
		}
	}
	any |= md__seq_opts_seed(c);
	uint64_t now = md_now_ns();
	md_store_relaxed(&c->a.ectrl->heartbeat_ns, now);
	if (any)
		md__request_resync(c);
}

static int do_attach(struct md_client *c)
{
	int rc = md__attach(c, &c->a);
	c->attach_error = rc;
	if (rc)
		return rc;
	c->attached = 1;
	c->attach_ns = md_now_ns();
	c->last_sock_check_ns = c->attach_ns;
	c->rang = 0;
	memset(c->pending, 0, c->page_capacity);
	if (c->stats_cuda && c->gpu_attached)
		c->gpu_attached(c);
	seed_segment(c);
	c->last_error[0] = '\0';
	struct md_params_view v;
	(void)md_client_params(c, &v);
	return 0;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

MD__EXPORT void md_client_destroy(md_client *c)
{
	if (!c)
		return;
	if (c->gpu && c->gpu_client_gone)
		c->gpu_client_gone(c->gpu);
	detach(c);
	free(c->socket_path);
	free(c->engine_name);
	free(c->policy);
	free(c->mirror);
	free(c->pending);
	free(c->free_stack);
	free(c->slot_next);
	free(c->slot_prev);
	free(c->seq_head);
	free(c->seq_tail);
	free(c->tier_head);
	free(c->tier_tail);
	free(c->seq_tokens);
	free(c->clock);
	md__seq_state_free(c);
	free(c);
}

static int client_new(const struct md_client_config *cfg, md_client **out)
{
	*out = NULL;
	if (!cfg)
		return -EINVAL;
	uint32_t P = cfg->page_tokens ? cfg->page_tokens : MD_PAGE_TOKENS_DEFAULT;
	if (P > MD_PAGE_TOKENS_MAX || cfg->page_capacity == 0 ||
	    cfg->page_capacity > MD_PAGE_CAPACITY_MAX || cfg->max_seqs == 0 ||
	    cfg->max_seqs > MD_MAX_SEQS_MAX || (cfg->tp_size && cfg->tp_rank >= cfg->tp_size) ||
	    !(cfg->weight >= 0) || isinf(cfg->weight) ||
	    cfg->tier_pages > cfg->page_capacity || cfg->page_bytes > UINT32_MAX)
		return -EINVAL;   /* a tier page keeps its slot: the tier fits the table */
	const char *name = cfg->engine_name ? cfg->engine_name : "engine";
	if (!word_ok(name, 63) || (cfg->policy && !word_ok(cfg->policy, 63)))
		return -EINVAL;
	char path[256];
	int rc = md__resolve_socket_path(cfg->socket_path, path, sizeof(path));
	if (rc)
		return rc;

	md_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->a.sock_fd = c->a.eseg_fd = c->a.dseg_fd = c->a.db_daemon_fd = c->a.db_engine_fd = -1;
	c->page_tokens = P;
	c->page_capacity = cfg->page_capacity;
	c->max_seqs = cfg->max_seqs;
	c->tp_rank = cfg->tp_rank;
	c->tp_size = cfg->tp_size;
	c->budget_engine_pages = cfg->budget_engine_pages;
	c->budget_sequence_tokens = cfg->budget_sequence_tokens;
	c->weight = cfg->weight;
	c->tier_capacity = (uint32_t)cfg->tier_pages;
	c->page_bytes = (uint32_t)cfg->page_bytes;
	c->socket_path = strdup(path);
	c->engine_name = strdup(name);
	c->policy = dup_or_null(cfg->policy);
	c->mirror = calloc(c->page_capacity, sizeof(*c->mirror));
	c->pending = calloc(c->page_capacity, 1);
	c->free_stack = malloc((size_t)c->page_capacity * sizeof(uint32_t));
	c->slot_next = malloc((size_t)c->page_capacity * sizeof(uint32_t));
	c->slot_prev = malloc((size_t)c->page_capacity * sizeof(uint32_t));
	c->seq_head = malloc((size_t)c->max_seqs * sizeof(uint32_t));
	c->seq_tail = malloc((size_t)c->max_seqs * sizeof(uint32_t));
	c->tier_head = malloc((size_t)c->max_seqs * sizeof(uint32_t));
	c->tier_tail = malloc((size_t)c->max_seqs * sizeof(uint32_t));
	c->seq_tokens = calloc(c->max_seqs, sizeof(uint64_t));
	c->clock = calloc(c->max_seqs, sizeof(uint64_t));
	if (!c->socket_path || !c->engine_name || (cfg->policy && !c->policy) || !c->mirror ||
	    !c->pending || !c->free_stack || !c->slot_next || !c->slot_prev || !c->seq_head ||
	    !c->seq_tail || !c->tier_head || !c->tier_tail || !c->seq_tokens || !c->clock ||
	    md__seq_state_alloc(c) < 0) {
		md_client_destroy(c);
		return -ENOMEM;
	}
	/* Lowest slot first. */
	for (uint32_t i = 0; i < c->page_capacity; i++) {
		c->free_stack[i] = c->page_capacity - 1 - i;
		c->slot_next[i] = c->slot_prev[i] = MD__NO_SLOT;
	}
	c->free_top = c->page_capacity;
	for (uint32_t q = 0; q < c->max_seqs; q++)
		c->seq_head[q] = c->seq_tail[q] = c->tier_head[q] = c->tier_tail[q] = MD__NO_SLOT;
	set_default_params(&c->params_cache);
	c->attach_error = MD_EDETACHED;
	*out = c;
	return 0;
}

MD__EXPORT int md_client_create(const struct md_client_config *cfg, md_client **out)
{
	md_client *c;
	int rc = client_new(cfg, &c);
	if (rc)
		return rc;
	(void)do_attach(c);   /* fail-open: detached is a valid state */
	*out = c;
	return 0;
}

MD__EXPORT int md_client_create_attached(const struct md_client_config *cfg, md_client **out)
{
	md_client *c;
	int rc = client_new(cfg, &c);
	if (rc)
		return rc;
	rc = do_attach(c);
	if (rc) {
		md_client_destroy(c);
		return rc;
	}
	*out = c;
	return 0;
}

MD__EXPORT int md_client_attached(const md_client *c)
{
	return c && c->attached;
}

MD__EXPORT int md_client_attach_error(const md_client *c)
{
	return c->attached ? 0 : c->attach_error;
}

MD__EXPORT void md_client_detach(md_client *c)
{
	if (c->attached) {
		md__set_error(c, "detached by the engine");
		c->attach_error = MD_EDETACHED;
	}
	detach(c);
}

MD__EXPORT int md_client_reattach(md_client *c)
{
	detach(c);
	int rc = do_attach(c);
	if (!rc)
		c->ctr.reattaches++;
	return rc;
}

MD__EXPORT const char *md_client_last_error(const md_client *c)
{
	return c->last_error;
}

MD__EXPORT uint32_t md_client_engine_id(const md_client *c)
{
	return c->attached ? c->a.g.engine_id : 0;
}

MD__EXPORT uint64_t md_client_instance_id(const md_client *c)
{
	return c->attached ? c->a.g.instance_id : 0;
}

MD__EXPORT const char *md_client_socket_path(const md_client *c)
{
	return c->socket_path;
}

static void heartbeat(struct md_client *c, uint64_t now)
{
	md_store_relaxed(&c->a.ectrl->heartbeat_ns, now);
}

static void lost(struct md_client *c, const char *why)
{
	md__set_error(c, "%s", why);
	c->attach_error = MD_EDETACHED;
	detach(c);
	/* md_client_maintain's first reattach comes one retry period later */
	c->retry_ns = c->retry_base_ns;
	c->next_retry_ns = md_now_ns() + c->retry_base_ns;
}

MD__EXPORT int md_client_check(md_client *c, uint32_t timeout_ms)
{
	if (!c->attached)
		return 0;
	uint64_t now = md_now_ns();
	const struct md_daemon_ctrl *dc = c->a.dctrl;
	if (md_load_acquire(&dc->shutting_down)) {
		lost(c, "daemon is shutting down");
		return 0;
	}
	if (timeout_ms) {
		uint64_t hb = md_load_acquire(&dc->heartbeat_ns);
		uint64_t ref = hb > c->attach_ns ? hb : c->attach_ns;
		if (now > ref && now - ref > (uint64_t)timeout_ms * 1000000u) {
			lost(c, "daemon heartbeat stale");
			return 0;
		}
	}
	if (now - c->last_sock_check_ns >= MD__SOCK_CHECK_NS) {
		c->last_sock_check_ns = now;
		char b;
		ssize_t n = recv(c->a.sock_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			lost(c, "daemon closed the control connection");
			return 0;
		}
	}
	heartbeat(c, now);
	return 1;
}

static int finite_nonneg(double x)
{
	return isfinite(x) && x >= 0;
}

/* The ranges of memdecay.h's struct md_params_view (the daemon's own key
 * ranges, docs/operations.md); a NaN fails every comparison. */
static int param_block_ok(const struct md_param_block *pb)
{
	if (!finite_nonneg(pb->tau) || !finite_nonneg(pb->alpha) || !(pb->beta >= 0 && pb->beta < 1) ||
	    !(pb->low_watermark > 0 && pb->low_watermark <= 1) || pb->policy >= MD_POLICY_COUNT ||
	    pb->norm_mode > MD_NORM_RELATIVE)
		return 0;
	for (unsigned r = 0; r < MD_REGIONS_MAX; r++)
		if (!finite_nonneg(pb->base[r]) || !finite_nonneg(pb->lambda[r]))
			return 0;
	return 1;
}

MD__EXPORT int md_client_params(md_client *c, struct md_params_view *out)
{
	if (!c->attached) {
		*out = c->params_cache;
		return MD_EDETACHED;
	}
	struct md_param_block pb = { 0 };
	uint64_t s = md_seqlock_read(&c->a.params->seq, &pb, c->a.params, sizeof(pb), 64);
	if (!s) {
		*out = c->params_cache;
		return -EAGAIN;
	}
	if (!param_block_ok(&pb)) {
		c->proto_errors++;
		*out = c->params_cache;
		return MD_EPROTO;
	}
	struct md_params_view v = {
		.policy = pb.policy,
		.norm_mode = pb.norm_mode,
		.tau = pb.tau,
		.budget_sequence_tokens = pb.budget_sequence_tokens,
		.budget_engine_pages = pb.budget_engine_pages,
		.protect_recent = pb.protect_recent,
		.pinned_mask = pb.pinned_mask & 0xffffu,
		.seqlock = s,
		.alpha = pb.alpha,
		.beta = pb.beta,
		.low_watermark = pb.low_watermark,
	};
	memcpy(v.base, pb.base, sizeof(v.base));
	memcpy(v.lambda, pb.lambda, sizeof(v.lambda));
	c->params_cache = v;
	/* 1.3 reserved the word (zero); an engine that offered no tier has none,
	 * whatever the block says. */
	c->tier_budget = md__daemon_has_tier(c) && c->tier_capacity ? pb.budget_tier_pages : 0;
	*out = v;
	return 0;
}

/* ---- page lifecycle ---- */

/* A sequence's pages stay in first-position order, the daemon's page order
 * (md_seq_pages, md_seq_floor).  Engines open pages at growing positions, so
 * the walk back from the newest page stops at once: O(1) in practice.  Its
 * live pages and its tier pages are two such lists (head and tail arrays):
 * everything that counts resident pages walks the first one only. */
static void list_add(struct md_client *c, uint32_t *head, uint32_t *tail, uint32_t seq,
		     uint32_t slot)
{
	uint64_t pos = c->mirror[slot].first_pos;
	uint32_t p = tail[seq];
	while (p != MD__NO_SLOT && c->mirror[p].first_pos > pos)
		p = c->slot_prev[p];
	uint32_t n = p == MD__NO_SLOT ? head[seq] : c->slot_next[p];
	c->slot_prev[slot] = p;
	c->slot_next[slot] = n;
	if (p != MD__NO_SLOT)
		c->slot_next[p] = slot;
	else
		head[seq] = slot;
	if (n != MD__NO_SLOT)
		c->slot_prev[n] = slot;
	else
		tail[seq] = slot;
}

static void list_del(struct md_client *c, uint32_t *head, uint32_t *tail, uint32_t seq,
		     uint32_t slot)
{
	uint32_t p = c->slot_prev[slot], n = c->slot_next[slot];
	if (p != MD__NO_SLOT)
		c->slot_next[p] = n;
	else
		head[seq] = n;
	if (n != MD__NO_SLOT)
		c->slot_prev[n] = p;
	else
		tail[seq] = p;
	c->slot_next[slot] = c->slot_prev[slot] = MD__NO_SLOT;
}

static int live_slot(const struct md_client *c, uint32_t slot)
{
	return slot < c->page_capacity && c->mirror[slot].state == MD_PAGE_LIVE;
}

MD__EXPORT int md_page_open(md_client *c, uint32_t seq, uint64_t first_pos, uint32_t n_tokens,
			    uint64_t labels, uint32_t *slot, uint32_t *gen)
{
	if (seq >= c->max_seqs || n_tokens == 0 || n_tokens > c->page_tokens)
		return -EINVAL;
	if (c->free_top == 0)
		return MD_ENOSLOT;
	uint32_t s = c->free_stack[--c->free_top];
	struct md_page_entry *m = &c->mirror[s];
	m->generation++;
	m->seq = seq;
	m->n_tokens = (uint16_t)n_tokens;
	m->state = MD_PAGE_LIVE;
	m->first_pos = first_pos;
	m->labels = labels;
	m->open_clock = c->clock[seq];
	c->pending[s] = 0;
	list_add(c, c->seq_head, c->seq_tail, seq, s);
	c->seq_tokens[seq] += n_tokens;
	c->live_pages++;
	if (slot)
		*slot = s;
	if (gen)
		*gen = m->generation;
	pt_write(c, s);
	if (!c->attached)
		return MD_EDETACHED;
	struct md_stats_rec *r =
		lifecycle_rec(c, MD_REC_PAGE_OPEN, seq, s, m->generation, c->clock[seq]);
	if (!r)
		return 0;
	r->u.page.first_pos = first_pos;
	r->u.page.labels = labels;
	r->u.page.n_tokens = (uint16_t)n_tokens;
	rec_publish(c, r);
	return 0;
}

MD__EXPORT int md_page_grow(md_client *c, uint32_t slot, uint32_t n_tokens, uint64_t labels)
{
	if (slot >= c->page_capacity || n_tokens == 0 || n_tokens > c->page_tokens)
		return -EINVAL;
	struct md_page_entry *m = &c->mirror[slot];
	if (m->state != MD_PAGE_LIVE)
		return MD_ESTALE;
	if (n_tokens < m->n_tokens)
		return -EINVAL;
	c->seq_tokens[m->seq] += n_tokens - m->n_tokens;
	m->n_tokens = (uint16_t)n_tokens;
	m->labels = labels;
	pt_write(c, slot);
	if (!c->attached)
		return MD_EDETACHED;
	struct md_stats_rec *r =
		lifecycle_rec(c, MD_REC_PAGE_GROW, m->seq, slot, m->generation, c->clock[m->seq]);
	if (!r)
		return 0;
	r->u.page.first_pos = m->first_pos;
	r->u.page.labels = labels;
	r->u.page.n_tokens = (uint16_t)n_tokens;
	rec_publish(c, r);
	return 0;
}

static void cmd_applied(struct md_client *c)
{
	c->ctr.cmds_applied++;
	if (c->attached) {
		struct md_engine_ctrl *ec = c->a.ectrl;
		md_store_relaxed(&ec->cmds_applied, md_load_relaxed(&ec->cmds_applied) + 1);
	}
}

/* Frees one live or tier slot in the mirror and page table; publishes
 * PAGE_FREE. */
static int page_free(struct md_client *c, uint32_t slot, uint32_t reason)
{
	struct md_page_entry *m = &c->mirror[slot];
	uint32_t seq = m->seq;
	int tier = m->state == MD_PAGE_TIER;
	/* a drop the daemon commanded, reported by the engine or by apply */
	int commanded = reason == MD_FREE_EVICTED || (reason == MD_FREE_DROPPED && c->pending[slot]);
	m->state = MD_PAGE_FREE;
	c->pending[slot] = 0;
	if (tier) {
		list_del(c, c->tier_head, c->tier_tail, seq, slot);
		c->tier_pages--;
	} else {
		list_del(c, c->seq_head, c->seq_tail, seq, slot);
		c->seq_tokens[seq] -= m->n_tokens;
		c->live_pages--;
	}
	c->free_stack[c->free_top++] = slot;
	pt_write(c, slot);
	if (reason == MD_FREE_EVICTED)
		c->seq_evicted[seq]++;
	if (commanded)
		cmd_applied(c);
	if (!c->attached)
		return MD_EDETACHED;
	if (tier && !md__daemon_has_tier(c))
		return 0;   /* a page this daemon never saw in the tier */
	struct md_stats_rec *r =
		lifecycle_rec(c, MD_REC_PAGE_FREE, seq, slot, m->generation, c->clock[seq]);
	if (!r)
		return 0;
	r->u.free.reason = reason;
	rec_publish(c, r);
	return 0;
}

MD__EXPORT int md_page_free(md_client *c, uint32_t slot, uint32_t reason)
{
	if (slot >= c->page_capacity || reason > MD_FREE_DROPPED)
		return -EINVAL;
	uint8_t st = c->mirror[slot].state;
	if (st == MD_PAGE_FREE)
		return MD_ESTALE;
	/* A resident page has no host copy to drop; a tier page was evicted
	 * already. */
	if ((st == MD_PAGE_LIVE && reason == MD_FREE_DROPPED) ||
	    (st == MD_PAGE_TIER && reason == MD_FREE_EVICTED))
		return -EINVAL;
	return page_free(c, slot, reason);
}

/* ---- the host tier (ABI 1.4, docs/tier.md) ----
 * A page the engine kept in its host tier moves from its sequence's live list
 * to its tier list: the slot, generation, positions and labels stay, so a
 * restore puts it back exactly where it was and the daemon's resync finds it
 * in the page table as MD_PAGE_TIER. */

/* One MD_REC_PAGE_TIER record for the slot as the mirror has it. */
void md__tier_event(struct md_client *c, uint32_t slot, uint32_t event)
{
	const struct md_page_entry *m = &c->mirror[slot];
	if (!md__daemon_has_tier(c))
		return;
	struct md_stats_rec *r =
		lifecycle_rec(c, MD_REC_PAGE_TIER, m->seq, slot, m->generation, c->clock[m->seq]);
	if (!r)
		return;   /* resync asked: the page table has the state */
	r->u.tier.event = event;
	rec_publish(c, r);
}

/* An evict command applied with the page kept in the tier (apply returned 2). */
void md__page_tier_in(struct md_client *c, uint32_t slot)
{
	struct md_page_entry *m = &c->mirror[slot];
	uint32_t seq = m->seq;
	m->state = MD_PAGE_TIER;
	c->pending[slot] = 0;
	list_del(c, c->seq_head, c->seq_tail, seq, slot);
	c->seq_tokens[seq] -= m->n_tokens;
	c->live_pages--;
	list_add(c, c->tier_head, c->tier_tail, seq, slot);
	c->tier_pages++;
	c->seq_evicted[seq]++;   /* it left the device: a settle wait sees it */
	cmd_applied(c);
	pt_write(c, slot);
	md__tier_event(c, slot, MD_TIER_IN);
}

/* A restore command applied: resident again at its own positions. */
void md__page_restored(struct md_client *c, uint32_t slot)
{
	struct md_page_entry *m = &c->mirror[slot];
	uint32_t seq = m->seq;
	m->state = MD_PAGE_LIVE;
	c->pending[slot] = 0;
	list_del(c, c->tier_head, c->tier_tail, seq, slot);
	c->tier_pages--;
	list_add(c, c->seq_head, c->seq_tail, seq, slot);
	c->seq_tokens[seq] += m->n_tokens;
	c->live_pages++;
	cmd_applied(c);
	pt_write(c, slot);
	md__tier_event(c, slot, MD_TIER_RESTORED);
}

MD__EXPORT uint64_t md_client_tier_budget(md_client *c)
{
	if (!c)
		return 0;
	if (c->attached) {
		struct md_params_view v;
		(void)md_client_params(c, &v);   /* refreshes c->tier_budget when good */
	}
	return c->tier_budget;
}

MD__EXPORT uint32_t md_client_tier_pages(const md_client *c)
{
	return c ? c->tier_pages : 0;
}

MD__EXPORT int md_seq_end(md_client *c, uint32_t seq)
{
	if (seq >= c->max_seqs)
		return -EINVAL;
	/* Pages first, newest first, one PAGE_FREE each, so the daemon never
	 * holds a page of a sequence that no longer exists. */
	while (c->seq_tail[seq] != MD__NO_SLOT)
		(void)page_free(c, c->seq_tail[seq], MD_FREE_FINISHED);
	while (c->tier_tail[seq] != MD__NO_SLOT)
		(void)page_free(c, c->tier_tail[seq], MD_FREE_FINISHED);
	uint64_t clock = c->clock[seq];
	c->clock[seq] = 0;
	md__seq_opts_reset(c, seq);   /* SEQ_END resets the daemon's copy too */
	if (!c->attached)
		return MD_EDETACHED;
	md_store_release(&c->a.seq_clock[seq], 0);
	struct md_stats_rec *r = lifecycle_rec(c, MD_REC_SEQ_END, seq, UINT32_MAX, 0, clock);
	if (!r)
		return 0;
	rec_publish(c, r);
	return 0;
}

MD__EXPORT int md_seq_step(md_client *c, uint32_t seq, uint32_t n_tokens)
{
	if (seq >= c->max_seqs)
		return -EINVAL;
	c->clock[seq] += n_tokens;
	if (!c->attached)
		return MD_EDETACHED;
	md_store_release(&c->a.seq_clock[seq], c->clock[seq]);
	struct md_stats_rec *r =
		lifecycle_rec(c, MD_REC_STEP, seq, UINT32_MAX, 0, c->clock[seq]);
	if (!r)
		return 0;
	rec_publish(c, r);
	return 0;
}

MD__EXPORT uint64_t md_seq_clock(const md_client *c, uint32_t seq)
{
	return seq < c->max_seqs ? c->clock[seq] : 0;
}

MD__EXPORT int md_relabel(md_client *c, uint32_t seq, uint64_t pos0, uint64_t pos1,
			  uint32_t region)
{
	if (seq >= c->max_seqs || pos1 <= pos0 || region >= MD_REGIONS_MAX)
		return -EINVAL;
	/* tier pages keep their labels for their return: relabel them too */
	const uint32_t *heads[2] = { c->seq_head, c->tier_head };
	for (int l = 0; l < 2; l++) {
		for (uint32_t s = heads[l][seq]; s != MD__NO_SLOT; s = c->slot_next[s]) {
			struct md_page_entry *m = &c->mirror[s];
			uint64_t lo = m->first_pos, hi = m->first_pos + m->n_tokens;
			if (hi <= pos0 || lo >= pos1)
				continue;
			for (uint32_t k = 0; k < m->n_tokens; k++)
				if (lo + k >= pos0 && lo + k < pos1)
					m->labels = md_label_set(m->labels, k, region);
			pt_write(c, s);
		}
	}
	if (!c->attached)
		return MD_EDETACHED;
	struct md_stats_rec *r =
		lifecycle_rec(c, MD_REC_RELABEL, seq, UINT32_MAX, 0, c->clock[seq]);
	if (!r)
		return 0;
	r->u.relabel.pos0 = pos0;
	r->u.relabel.pos1 = pos1;
	r->u.relabel.region = region;
	rec_publish(c, r);
	return 0;
}

/* ---- attention ---- */

/* Attention may use the ring only up to capacity - capacity/4: the rest is
 * kept for lifecycle records, so overload drops attention first and turns
 * into a resync only when even the reserve is gone. */
static int attn_room(struct md_client *c, uint32_t nrec)
{
	struct md_ring_prod *r = &c->a.stats;
	uint64_t limit = r->capacity - r->capacity / 4;
	if (r->next - r->cached_head + nrec <= limit)
		return 1;
	r->cached_head = md_load_acquire(r->head);
	return r->cached_head <= r->next && r->next - r->cached_head + nrec <= limit;
}

static int attn_dropped(struct md_client *c)
{
	struct md_engine_ctrl *ec = c->a.ectrl;
	md_store_relaxed(&ec->attn_dropped, md_load_relaxed(&ec->attn_dropped) + 1);
	c->ctr.attn_dropped++;
	return MD_EFULL;
}

/* An ATTN_PAGE record for a live slot (a tier slot with MD_REC_F_ESTIMATE),
 * as every publish path writes it. */
static void fill_attn_page(const struct md_client *c, struct md_stats_rec *r, uint32_t slot,
			   float mass, uint16_t refresh_bitmap, uint16_t flags)
{
	const struct md_page_entry *m = &c->mirror[slot];
	r->type = MD_REC_ATTN_PAGE;
	r->flags = flags;
	r->seq = m->seq;
	r->slot = slot;
	r->gen = m->generation;
	r->clock = c->clock[m->seq];
	r->u.attn_page.mass = mass;
	r->u.attn_page.refresh = (uint16_t)(refresh_bitmap & ((1u << m->n_tokens) - 1u));
}

MD__EXPORT int md_attn_page(md_client *c, uint32_t slot, float mass, uint16_t refresh_bitmap)
{
	if (!live_slot(c, slot))
		return slot < c->page_capacity ? MD_ESTALE : -EINVAL;
	if (!(mass >= 0) || isinf(mass))
		return -EINVAL;
	if (!c->attached)
		return MD_EDETACHED;
	struct md_stats_rec *r = attn_room(c, 1) ? rec_reserve(c) : NULL;
	if (!r)
		return attn_dropped(c);
	fill_attn_page(c, r, slot, mass, refresh_bitmap, 0);
	rec_publish(c, r);
	return 0;
}

MD__EXPORT int md_attn_tokens(md_client *c, uint32_t slot, uint32_t token0, uint32_t count,
			      const float *mass)
{
	if (!live_slot(c, slot))
		return slot < c->page_capacity ? MD_ESTALE : -EINVAL;
	const struct md_page_entry *m = &c->mirror[slot];
	if (count == 0 || token0 >= m->n_tokens || count > m->n_tokens - token0 || !mass)
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (!(mass[i] >= 0) || isinf(mass[i]))
			return -EINVAL;
	if (!c->attached)
		return MD_EDETACHED;
	/* All records of the call or none: reserve them all, publish once. */
	uint32_t nrec = (count + MD_ATTN_TOKENS_PER_REC - 1) / MD_ATTN_TOKENS_PER_REC;
	if (!attn_room(c, nrec))
		return attn_dropped(c);
	for (uint32_t k = 0; k < nrec; k++) {
		struct md_stats_rec *r = md_ring_reserve_at(&c->a.stats, k);
		if (!r)
			return attn_dropped(c);
	}
	for (uint32_t k = 0; k < nrec; k++) {
		struct md_stats_rec *r = md_ring_reserve_at(&c->a.stats, k);
		uint32_t t0 = token0 + k * MD_ATTN_TOKENS_PER_REC;
		uint32_t n = count - k * MD_ATTN_TOKENS_PER_REC;
		if (n > MD_ATTN_TOKENS_PER_REC)
			n = MD_ATTN_TOKENS_PER_REC;
		memset(r, 0, sizeof(*r));   /* pos: md_ring_publish_n stamps it */
		r->type = MD_REC_ATTN_TOKENS;
		r->seq = m->seq;
		r->slot = slot;
		r->gen = m->generation;
		r->token0 = (uint8_t)t0;
		r->count = (uint8_t)n;
		r->clock = c->clock[m->seq];
		memcpy(r->u.attn_tokens.mass, mass + k * MD_ATTN_TOKENS_PER_REC, n * sizeof(float));
	}
	md_ring_publish_n(&c->a.stats, nrec);
	notify_daemon(c);
	return 0;
}

/* ---- one step in one crossing (docs/abi.md §8) ----
 * The STEP records and the step's ATTN_PAGE records are reserved together,
 * stamped by one md_ring_publish_n (one tail store) and announced by one
 * notify_daemon, so a step costs at most one doorbell however many pages it
 * has (one per record before: a daemon on an idle core drains each record and
 * sleeps again before the next, docs/llama.md "Overhead").
 * The estimates of tier pages (1.4) take the same path without steps: only
 * the state a slot must be in (`state`) and the record's flags differ. */
/* a page in one of the states a record is for (state2: MD__STATE_NONE or a
 * second one) */
static inline int wanted(const md_client *c, uint32_t slot, uint8_t state, uint8_t state2)
{
	uint8_t st = c->mirror[slot].state;
	return st == state || (state2 != MD__STATE_NONE && st == state2);
}

static int publish_attn(md_client *c, const uint32_t *step_seqs, const uint32_t *step_tokens,
			uint32_t n_steps, const uint32_t *slots, const float *mass,
			const uint16_t *refresh, uint32_t n_pages, uint8_t state, uint8_t state2,
			uint16_t flags, struct md_batch_result *res)
{
	struct md_batch_result out = { 0 };
	if (res)
		*res = out;
	if (!c || (n_steps && (!step_seqs || !step_tokens)) ||
	    (n_pages && (!slots || !mass)) || n_pages > c->page_capacity)
		return -EINVAL;
	/* A daemon older than 1.4 sees no tier page (the page table shows it
	 * free): an estimate for one would name a page it does not hold. */
	if (state == MD_PAGE_TIER && c->attached && !md__daemon_has_tier(c))
		state = state2 = MD__STATE_NONE;
	/* Whole batch validated first: a bad entry changes nothing. */
	for (uint32_t i = 0; i < n_steps; i++)
		if (step_seqs[i] >= c->max_seqs)
			return -EINVAL;
	uint32_t live = 0;
	for (uint32_t i = 0; i < n_pages; i++) {
		if (slots[i] >= c->page_capacity || !(mass[i] >= 0) || isinf(mass[i]))
			return -EINVAL;
		live += wanted(c, slots[i], state, state2);
	}
	out.skipped = n_pages - live;
	if (!c->attached) {
		for (uint32_t i = 0; i < n_steps; i++)
			c->clock[step_seqs[i]] += step_tokens[i];
		if (res)
			*res = out;
		return MD_EDETACHED;
	}
	struct md_ring_prod *ring = &c->a.stats;
	uint32_t k = 0;
	for (uint32_t i = 0; i < n_steps; i++) {
		uint32_t q = step_seqs[i];
		c->clock[q] += step_tokens[i];
		md_store_release(&c->a.seq_clock[q], c->clock[q]);
		if (k < i)
			continue;   /* an earlier STEP did not fit: resync already asked */
		struct md_stats_rec *r = md_ring_reserve_at(ring, k);
		if (!r) {
			md__lifecycle_dropped(c);
			continue;
		}
		memset(r, 0, sizeof(*r));
		r->type = MD_REC_STEP;
		r->seq = q;
		r->slot = UINT32_MAX;
		r->clock = c->clock[q];
		k++;
	}
	out.steps = k;
	if (live) {
		if (k < n_steps || !attn_room(c, k + live)) {
			struct md_engine_ctrl *ec = c->a.ectrl;
			md_store_relaxed(&ec->attn_dropped, md_load_relaxed(&ec->attn_dropped) + live);
			c->ctr.attn_dropped += live;
			out.dropped = live;
		} else {
			for (uint32_t i = 0; i < n_pages; i++) {
				if (!wanted(c, slots[i], state, state2))
					continue;
				struct md_stats_rec *r = md_ring_reserve_at(ring, k++);
				memset(r, 0, sizeof(*r));
				fill_attn_page(c, r, slots[i], mass[i], refresh ? refresh[i] : 0,
					       flags);
			}
			out.published = live;
		}
	}
	if (k) {
		md_ring_publish_n(ring, k);
		notify_daemon(c);
	}
	if (res)
		*res = out;
	return out.dropped ? MD_EFULL : 0;
}

MD__EXPORT int md_publish_batch(md_client *c, const uint32_t *step_seqs,
				const uint32_t *step_tokens, uint32_t n_steps,
				const uint32_t *slots, const float *mass,
				const uint16_t *refresh, uint32_t n_pages,
				struct md_batch_result *res)
{
	return publish_attn(c, step_seqs, step_tokens, n_steps, slots, mass, refresh, n_pages,
			    MD_PAGE_LIVE, MD__STATE_NONE, 0, res);
}

MD__EXPORT int md_publish_estimates(md_client *c, const uint32_t *slots, const float *mass,
				    const uint16_t *refresh, uint32_t n,
				    struct md_batch_result *res)
{
	/* tier pages (candidates) and resident ones (what a restore would
	 * displace, measured alike: docs/tier.md) */
	return publish_attn(c, NULL, NULL, 0, slots, mass, refresh, n, MD_PAGE_TIER, MD_PAGE_LIVE,
			    MD_REC_F_ESTIMATE, res);
}

/* ---- commands ---- */

MD__EXPORT int md_poll_commands(md_client *c, struct md_evict *out, size_t cap)
{
	if (!c->attached)
		return MD_EDETACHED;
	heartbeat(c, md_now_ns());
	struct md_ring_cons *cr = &c->a.cmds;
	size_t n = 0;
	int tail_checked = 0;
	struct md_engine_ctrl *ec = c->a.ectrl;
	while (n < cap && n < INT32_MAX) {
		struct md_cmd cmd;
		/* The stamp publishes a command (one cache line per command); the
		 * tail, checked once per call when the stamps run out, is what
		 * validates the daemon and exposes published but misstamped ones. */
		int st = md_ring_poll_stamped(cr, &cmd);
		if (st == MD_RING_EMPTY) {
			if (!tail_checked) {
				tail_checked = 1;
				if (md_ring_check_tail(cr) < 0)
					st = MD_RING_BAD_TAIL;
			}
			if (st == MD_RING_EMPTY) {
				if (cr->next >= cr->tail_seen)
					break;
				st = md_ring_copy_next(cr, &cmd);
			}
		}
		if (st == MD_RING_BAD_TAIL) {
			lost(c, "command ring: tail out of range");
			c->proto_errors++;
			return MD_EPROTO;
		}
		/* A restore or a drop comes only from a daemon that knows the
		 * tier (1.4); anything else is not a command. */
		int tier_cmd = cmd.type == MD_CMD_RESTORE || cmd.type == MD_CMD_DROP;
		if (st != MD_RING_OK || (cmd.type != MD_CMD_EVICT && !tier_cmd) ||
		    (tier_cmd && !md__daemon_has_tier(c)) || cmd.slot >= c->page_capacity) {
			c->proto_errors++;
			continue;
		}
		/* An evict names a resident page, a restore or drop a tier page. */
		const struct md_page_entry *m = &c->mirror[cmd.slot];
		uint8_t want = tier_cmd ? MD_PAGE_TIER : MD_PAGE_LIVE;
		if (m->state != want || m->generation != cmd.gen || m->seq != cmd.seq ||
		    c->pending[cmd.slot]) {
			c->ctr.cmds_stale++;
			md_store_relaxed(&ec->cmds_stale, md_load_relaxed(&ec->cmds_stale) + 1);
			continue;
		}
		c->pending[cmd.slot] = 1;
		out[n].seq = cmd.seq;
		out[n].slot = cmd.slot;
		out[n].gen = cmd.gen;
		out[n].reason = cmd.reason;
		out[n].decided_ns = cmd.decided_ns;
		out[n].type = cmd.type;
		out[n].resv = 0;
		n++;
	}
	md_ring_release(cr);
	return (int)n;
}

MD__EXPORT int md_wait_commands(md_client *c, int timeout_ms)
{
	if (!c->attached)
		return MD_EDETACHED;
	struct md_engine_ctrl *ec = c->a.ectrl;
	md_store_relaxed(&ec->sleeping, 1);
	md_fence_full();
	int64_t avail = md_ring_check_tail(&c->a.cmds);
	if (avail == 0) {
		struct pollfd pfd = { .fd = c->a.db_engine_fd, .events = POLLIN };
		int pr = poll(&pfd, 1, timeout_ms);
		if (pr > 0 && (pfd.revents & POLLIN)) {
			uint64_t v;
			ssize_t k = read(c->a.db_engine_fd, &v, sizeof(v));
			(void)k;
		}
		avail = md_ring_check_tail(&c->a.cmds);
	}
	md_store_relaxed(&ec->sleeping, 0);
	heartbeat(c, md_now_ns());
	if (avail < 0)
		return MD_EPROTO;
	return avail > INT32_MAX ? INT32_MAX : (int)avail;
}

/* ---- introspection ---- */

MD__EXPORT int md_page_info(const md_client *c, uint32_t slot, struct md_page_entry *out)
{
	if (slot >= c->page_capacity)
		return -EINVAL;
	*out = c->mirror[slot];
	return 0;
}

MD__EXPORT void md_client_counters(const md_client *c, struct md_client_counters *out)
{
	*out = c->ctr;
}

MD__EXPORT uint64_t md_client_proto_errors(const md_client *c)
{
	return c->proto_errors;
}

MD__EXPORT uint32_t md_client_live_pages(const md_client *c)
{
	return c->live_pages;
}

MD__EXPORT int md_client_geometry(const md_client *c, uint32_t *page_tokens,
				  uint32_t *page_capacity, uint32_t *max_seqs)
{
	if (page_tokens)
		*page_tokens = c->page_tokens;
	if (page_capacity)
		*page_capacity = c->page_capacity;
	if (max_seqs)
		*max_seqs = c->max_seqs;
	return 0;
}
