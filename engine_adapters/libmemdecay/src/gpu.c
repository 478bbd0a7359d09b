/*
 * gpu.c — libmemdecay's GPU publisher (memdecay.h "GPU publisher",
 * docs/abi.md §7): the CUDA stats ring on the engine's side.
 *
 * One ring carries every record of the client, so the daemon sees them in
 * the order the engine made them (it does not order records across two
 * rings, docs/abi.md §6): lifecycle calls write into a private staging ring
 * (client.c's producer pointed at private memory), and each publish call
 * queues, on the engine's stream, first the staged records, then the
 * page-mass kernels, then the step's ATTN_PAGE records, which a kernel
 * completes in the device ring from the token masses (md_cuda_attn_rec.h).
 * The host supplies only per-page headers (slot, generation, sequence,
 * clock); per-token data stays on the device.  Nothing here waits for the
 * stream: the ring learns the daemon's head through an asynchronous copy,
 * and a ring that looks full drops attention (counted) and turns lifecycle
 * records that do not fit into a resync, as on the host ring.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "md_cuda_attn_rec.h"
#include "md_cuda_ring.h"

#define MD__EXPORT __attribute__((visibility("default")))
#define MD__GPU_RING_DEFAULT 65536u

_Static_assert(sizeof(struct mdk_cuda_ring_export) == MD_CUDA_RING_EXPORT_SIZE,
	       "export record size is part of the ABI");
_Static_assert(sizeof(struct md_stats_rec) == MDK_CUDA_RING_REC_SIZE, "device ring record");
_Static_assert(offsetof(struct md_stats_rec, u.attn_page.mass) == MDK_REC_OFF_MASS, "mass");
_Static_assert(offsetof(struct md_stats_rec, u.attn_page.refresh) == MDK_REC_OFF_REFRESH,
	       "refresh");
_Static_assert(offsetof(struct md_stats_rec, u.attn_page.resv) == MDK_REC_OFF_RESV, "resv");
_Static_assert(offsetof(struct md_stats_rec, u.attn_page.resv1) == MDK_REC_OFF_PAGE, "resv1");

struct md_gpu {
	md_client *c;
	int device;
	struct mdk_cuda_ring *ring;
	uint32_t ring_capacity, attn_limit;
	float *token_mass;            /* device [max_pages · P] */
	float *page_mass;             /* device [max_pages] (the flash kernel wants one) */
	uint32_t max_pages, P;
	struct md_stats_rec *stage;   /* private staging ring for lifecycle records */
	uint32_t stage_capacity;
	uint64_t stage_tail, stage_head;
	struct md_stats_rec *hdr;     /* [max_pages]: the step's attention headers */
	uint32_t *seq_live;           /* [max_seqs]: live tokens, valid when seq_mark == epoch */
	uint64_t *seq_mark;
	uint64_t epoch;
	int failed;                   /* sticky: the CUDA runtime refused work */
	struct md_gpu_counters ctr;
};

MD__EXPORT void md_gpu_config_init(struct md_gpu_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
}

/* After every attach with stats_transport=cuda: point the client's stats
 * producer at the staging ring (records of an earlier attachment are the old
 * daemon's; the page table carries the state) and publish the export record,
 * magic last. */
static void gpu_attached(struct md_client *c)
{
	struct md_gpu *g = c->gpu;
	g->stage_head = g->stage_tail = 0;
	/* the staging ring's geometry is our own, checked when it was made */
	(void)md_ring_prod_init(&c->a.stats, g->stage, g->stage_capacity,
				sizeof(struct md_stats_rec), &g->stage_tail, &g->stage_head, 0);

	struct mdk_cuda_ring_export ex;
	if (mdk_cuda_ring_get_export(g->ring, &ex) < 0)
		return; /* the daemon finds no magic and never opens a ring */
	uint64_t *dst = (uint64_t *)((char *)c->a.eseg + c->a.g.eoff.cuda_ring_export);
	const uint64_t *src = (const uint64_t *)&ex;
	for (size_t k = 1; k < sizeof(ex) / 8; k++)
		md_store_relaxed(&dst[k], src[k]);
	md_store_release(&dst[0], src[0]);
}

static void gpu_client_gone(struct md_gpu *g)
{
	g->c = NULL;
}

static void gpu_free(struct md_gpu *g)
{
	if (!g)
		return;
	mdk_cuda_ring_destroy(g->ring);
	mdk_cuda_free(g->token_mass);
	mdk_cuda_free(g->page_mass);
	free(g->stage);
	free(g->hdr);
	free(g->seq_live);
	free(g->seq_mark);
	free(g);
}

MD__EXPORT int md_gpu_create(md_client *c, const struct md_gpu_config *cfg, md_gpu **out)
{
	if (out)
		*out = NULL;
	if (!c || !out)
		return -EINVAL;
	struct md_gpu_config def;
	md_gpu_config_init(&def);
	if (!cfg)
		cfg = &def;
	uint32_t cap = cfg->ring_capacity ? cfg->ring_capacity : MD__GPU_RING_DEFAULT;
	uint32_t max_pages = cfg->max_pages ? cfg->max_pages : c->page_capacity;
	if (!md_ring_capacity_ok(cap) || cap > (1u << 24) || cap < 4 || max_pages > c->page_capacity ||
	    cfg->device < 0) {
		md__set_error(c, "md_gpu_create: ring_capacity must be a power of two in 4..2^24, "
			      "max_pages at most page_capacity, device >= 0");
		return -EINVAL;
	}
	if (c->gpu) {
		md__set_error(c, "md_gpu_create: this client already has a GPU publisher");
		return -EBUSY;
	}
	if (!mdk_cuda_built()) {
		md__set_error(c, "libmemdecay was built without CUDA (configure with "
			      "-DMEMDECAY_CUDA=ON); publish through the host ring");
		return -ENOTSUP;
	}
	int rc = mdk_cuda_probe(NULL);
	if (rc < 0) {
		md__set_error(c, "md_gpu_create: %s; publish through the host ring",
			      mdk_cuda_last_error());
		return rc;
	}
	struct md_gpu *g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->c = c;
	g->device = cfg->device;
	g->ring_capacity = cap;
	g->attn_limit = cap - cap / 4; /* the rest is the lifecycle reserve (docs/abi.md §3) */
	g->max_pages = max_pages;
	g->P = c->page_tokens;
	g->stage_capacity = cap;
	g->stage = calloc(cap, sizeof(*g->stage));
	g->hdr = calloc(max_pages ? max_pages : 1, sizeof(*g->hdr));
	g->seq_live = calloc(c->max_seqs, sizeof(*g->seq_live));
	g->seq_mark = calloc(c->max_seqs, sizeof(*g->seq_mark));
	if (!g->stage || !g->hdr || !g->seq_live || !g->seq_mark) {
		gpu_free(g);
		return -ENOMEM;
	}
	size_t pages = max_pages ? max_pages : 1;
	if ((rc = mdk_cuda_ring_create(&g->ring, cap, cfg->device)) < 0 ||
	    (rc = mdk_cuda_alloc((void **)&g->token_mass, pages * g->P * sizeof(float),
				 cfg->device)) < 0 ||
	    (rc = mdk_cuda_alloc((void **)&g->page_mass, pages * sizeof(float), cfg->device)) < 0) {
		md__set_error(c, "md_gpu_create: %s", mdk_cuda_last_error());
		gpu_free(g);
		return rc;
	}
	c->gpu = g;
	c->gpu_attached = gpu_attached;
	c->gpu_client_gone = gpu_client_gone;
	c->stats_cuda = 1;
	if (!c->attached) {
		/* No daemon now: the next md_client_reattach asks for the CUDA ring. */
		*out = g;
		return 0;
	}
	rc = md_client_reattach(c);
	if (rc == 0) {
		*out = g;
		return 0;
	}
	/* Refused (or the daemon went away): back to the host ring as before. */
	char why[MD__ERRMSG_MAX];
	memcpy(why, c->last_error, sizeof(why));
	c->stats_cuda = 0;
	c->gpu = NULL;
	(void)md_client_reattach(c);
	md__set_error(c, "md_gpu_create: the daemon refused stats_transport=cuda: %.200s", why);
	gpu_free(g);
	return rc;
}

MD__EXPORT void md_gpu_destroy(md_gpu *g)
{
	if (!g)
		return;
	md_client *c = g->c;
	if (c) {
		c->stats_cuda = 0;
		c->gpu = NULL;
		c->gpu_attached = NULL;
		c->gpu_client_gone = NULL;
		/* The host transport needs a new attachment; the daemon closes
		 * its side of the device ring when this one ends. */
		if (c->attached)
			(void)md_client_reattach(c);
	}
	gpu_free(g);
}

static int gpu_usable(struct md_gpu *g)
{
	if (!g || !g->c)
		return -EINVAL;
	if (g->failed)
		return -EIO;
	if (!g->c->attached)
		return MD_EDETACHED;
	return 0;
}

static int cuda_failed(struct md_gpu *g, int rc)
{
	if (rc == -EIO || rc == -ENODEV) {
		g->failed = 1;
		md__set_error(g->c, "GPU publisher: %s", mdk_cuda_last_error());
	}
	return rc;
}

/* Queue the staged records on the device ring.  Returns 0 or < 0. */
static int flush_stage(struct md_gpu *g, void *stream)
{
	struct md_client *c = g->c;
	uint64_t head = g->stage_head, tail = md_load_relaxed(&g->stage_tail);
	if (head == tail)
		return 0;
	uint64_t n = tail - head, queued = 0;
	const uint32_t mask = g->stage_capacity - 1;
	while (queued < n) {
		uint32_t at = (uint32_t)((head + queued) & mask);
		uint64_t run = g->stage_capacity - at;
		if (run > n - queued)
			run = n - queued;
		int k = mdk_cuda_ring_push(g->ring, &g->stage[at], (uint32_t)run, stream);
		if (k < 0)
			return cuda_failed(g, k);
		queued += (uint64_t)k;
		if ((uint64_t)k < run)
			break;
	}
	g->ctr.lifecycle_records += queued;
	if (queued < n) {
		/* The page table already holds every change: have it re-read. */
		g->ctr.lifecycle_dropped += n - queued;
		md__lifecycle_dropped(c);
	}
	md_store_relaxed(&g->stage_head, tail);
	return 0;
}

MD__EXPORT int md_gpu_flush(md_gpu *g, void *stream)
{
	int rc = gpu_usable(g);
	if (rc)
		return rc;
	uint64_t before = g->ctr.lifecycle_records;
	rc = flush_stage(g, stream);
	if (rc)
		return rc;
	if (g->ctr.lifecycle_records != before)
		md__ring_daemon(g->c);
	return 0;
}

static uint32_t seq_live_tokens(struct md_gpu *g, uint32_t seq)
{
	struct md_client *c = g->c;
	if (g->seq_mark[seq] == g->epoch)
		return g->seq_live[seq];
	uint32_t n = 0;
	for (uint32_t s = c->seq_head[seq]; s != MD__NO_SLOT; s = c->slot_next[s])
		n += c->mirror[s].n_tokens;
	g->seq_mark[seq] = g->epoch;
	g->seq_live[seq] = n;
	return n;
}

/* Headers of the step's attention records, one per dense page with a live
 * slot, as md_attn_page fills them; returns their count. */
static uint32_t build_headers(struct md_gpu *g, const uint32_t *slots, uint32_t n_pages,
			      int relative)
{
	struct md_client *c = g->c;
	g->epoch++;
	uint32_t n = 0;
	for (uint32_t i = 0; i < n_pages; i++) {
		uint32_t slot = slots[i];
		if (slot >= c->page_capacity || c->mirror[slot].state != MD_PAGE_LIVE) {
			g->ctr.attn_skipped++;
			continue;
		}
		const struct md_page_entry *m = &c->mirror[slot];
		struct md_stats_rec *r = &g->hdr[n++];
		memset(r, 0, sizeof(*r));
		r->type = MD_REC_ATTN_PAGE;
		r->seq = m->seq;
		r->slot = slot;
		r->gen = m->generation;
		r->clock = c->clock[m->seq];
		float norm = relative ? (float)seq_live_tokens(g, m->seq) : 1.0f;
		mdk_attn_rec_stage((uint8_t *)r, i, norm, (uint16_t)((1u << m->n_tokens) - 1u));
	}
	return n;
}

/* Drops the step's records, counted as on the host ring. */
static int attn_drop(struct md_gpu *g, uint32_t n_hdr)
{
	g->ctr.attn_dropped += n_hdr;
	struct md_engine_ctrl *ec = g->c->a.ectrl;
	md_store_relaxed(&ec->attn_dropped, md_load_relaxed(&ec->attn_dropped) + n_hdr);
	return MD_EFULL;
}

/* Before any kernel is queued: would the step's records fit under the
 * attention limit?  1 yes, 0 no (dropped), < 0 error.  Also queues a refresh
 * of the engine's view of the head, so a full ring recovers. */
static int attn_fits(struct md_gpu *g, uint32_t n_hdr, void *stream)
{
	int64_t pending = mdk_cuda_ring_pending(g->ring, stream);
	if (pending < 0)
		return cuda_failed(g, (int)pending);
	if ((uint64_t)pending + n_hdr <= g->attn_limit)
		return 1;
	attn_drop(g, n_hdr);
	return 0;
}

/* Common tail of both publish calls: the page-mass kernels already queued
 * their token masses; stage and complete the records. */
static int push_attention(struct md_gpu *g, uint32_t n_hdr, uint32_t n_pages, float tau,
			  void *stream)
{
	int k = mdk_cuda_ring_push_attn(g->ring, g->hdr, n_hdr, g->token_mass, n_pages, g->P, tau,
					g->attn_limit, stream);
	if (k < 0)
		return cuda_failed(g, k);
	md__ring_daemon(g->c);
	if ((uint32_t)k < n_hdr)
		return attn_drop(g, n_hdr);
	g->ctr.attn_records += (uint64_t)k;
	return k;
}

/* Threshold and normalization the daemon published (docs/abi.md §2). */
static float step_tau(struct md_gpu *g, int *relative)
{
	struct md_params_view v;
	(void)md_client_params(g->c, &v); /* falls back to the last good copy */
	*relative = v.norm_mode == MD_NORM_RELATIVE;
	return (float)v.tau;
}

MD__EXPORT int md_gpu_publish_probs(md_gpu *g, const struct md_gpu_probs *in, void *stream)
{
	int rc = gpu_usable(g);
	if (rc)
		return rc;
	if (!in || in->n_pages > g->max_pages || (in->n_pages && !in->slots))
		return -EINVAL;
	struct mdk_probs p = {
		.probs = in->probs, .n_query = in->n_query, .n_head = in->n_head,
		.n_kv = in->n_kv, .row_stride = in->row_stride,
	};
	struct mdk_cell_map map = {
		.page = in->cell_page, .token = in->cell_token, .n_kv = in->n_kv,
		.n_pages = in->n_pages, .page_tokens = g->P,
	};
	struct mdk_page_out out = { .token_mass = g->token_mass };
	/* Geometry first, so a refused call queues nothing. */
	if (in->row_stride < in->n_kv ||
	    (in->n_query && in->n_head && in->n_kv &&
	     (!in->probs || !in->cell_page || !in->cell_token)))
		return -EINVAL;
	if ((rc = flush_stage(g, stream)))
		return rc;
	int relative;
	float tau = step_tau(g, &relative);
	uint32_t n_hdr = build_headers(g, in->slots, in->n_pages, relative);
	if (n_hdr == 0) {
		md__ring_daemon(g->c);
		return 0;
	}
	if ((rc = attn_fits(g, n_hdr, stream)) <= 0) {
		md__ring_daemon(g->c);
		return rc < 0 ? rc : MD_EFULL;
	}
	if ((rc = mdk_cuda_page_mass_zero(&map, &out, stream)) ||
	    (rc = mdk_cuda_page_mass_accumulate(&p, &map, 1.0f, &out, stream)))
		return rc == -EINVAL ? rc : cuda_failed(g, rc);
	return push_attention(g, n_hdr, in->n_pages, tau, stream);
}

MD__EXPORT int md_gpu_publish_flash(md_gpu *g, const struct md_gpu_flash *in, void *stream)
{
	int rc = gpu_usable(g);
	if (rc)
		return rc;
	if (!in || in->n_pages > g->max_pages || (in->n_pages && !in->slots) || in->n_head == 0 ||
	    in->n_kv_head == 0 || in->n_head % in->n_kv_head || in->head_dim == 0 ||
	    (uint64_t)in->n_tokens > (uint64_t)in->n_pages * g->P ||
	    (in->n_pages && (!in->q || !in->k_cache || !in->block_table || !in->lse)))
		return -EINVAL;
	struct mdk_flash_in f = {
		.q = in->q, .k_cache = in->k_cache, .block_table = in->block_table, .lse = in->lse,
		.n_head = in->n_head, .n_kv_head = in->n_kv_head, .head_dim = in->head_dim,
		.page_tokens = g->P, .n_blocks = in->n_blocks, .n_pages = in->n_pages,
		.n_tokens = in->n_tokens, .head_step = in->head_step, .scale = in->scale,
	};
	struct mdk_flash_out out = { .page_mass = g->page_mass, .token_mass = g->token_mass };
	if ((rc = flush_stage(g, stream)))
		return rc;
	int relative;
	float tau = step_tau(g, &relative);
	uint32_t n_hdr = build_headers(g, in->slots, in->n_pages, relative);
	if (n_hdr == 0) {
		md__ring_daemon(g->c);
		return 0;
	}
	if ((rc = attn_fits(g, n_hdr, stream)) <= 0) {
		md__ring_daemon(g->c);
		return rc < 0 ? rc : MD_EFULL;
	}
	if ((rc = mdk_cuda_flash_page_mass(&f, &out, stream)))
		return rc == -EINVAL ? rc : cuda_failed(g, rc);
	return push_attention(g, n_hdr, in->n_pages, tau, stream);
}

MD__EXPORT void md_gpu_counters(const md_gpu *g, struct md_gpu_counters *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!g)
		return;
	*out = g->ctr;
	out->device_tail = mdk_cuda_ring_tail(g->ring);
}

MD__EXPORT int64_t md_gpu_pending(md_gpu *g, void *stream)
{
	if (!g)
		return -EINVAL;
	int64_t n = mdk_cuda_ring_pending(g->ring, stream);
	return n < 0 ? cuda_failed(g, (int)n) : n;
}
