/*
 * md_llama.c — the llama.cpp adapter: create/bind, the daemon link, commands,
 * decoding and fail-open.  The engine contract (reattach, the budget wait and
 * its floor, applying commands) is libmemdecay's (docs/adapters.md); this file
 * keeps what is llama.cpp's: freeing a page is llama_memory_seq_rm and the
 * cell maps.  The cell map is in
 * md_llama_cells.c, the page mirror in md_llama_pages.c, cb_eval and the
 * attention reduction in md_llama_attn.c.  See md_llama.h for the contract and
 * docs/llama.md for why the cell map comes from SET_ROWS and why ubatches are
 * one sequence.
 */
#include "md_llama_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "md_kernels.h"
#include "memdecay_clock.h"

static char *md__strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

void md_llama_config_init(struct md_llama_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->budget_sequence_tokens = -1;
	cfg->page_tokens = MD_PAGE_TOKENS_DEFAULT;
	cfg->max_seqs = 1;
	cfg->attach = 1;
	cfg->capture_attention = 1;
	cfg->layer_stride = 1;
}

int md_llama_create(const struct md_llama_config *cfg, const struct llama_model *model,
		    md_llama **out)
{
	md_llama *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->cfg = *cfg;
	a->socket_path = md__strdup(cfg->socket_path);
	a->engine_name = md__strdup(cfg->engine_name ? cfg->engine_name : "llama.cpp");
	a->policy = md__strdup(cfg->policy);
	a->cfg.socket_path = a->socket_path;
	a->cfg.engine_name = a->engine_name;
	a->cfg.policy = a->policy;
	a->P = cfg->page_tokens ? cfg->page_tokens : MD_PAGE_TOKENS_DEFAULT;
	if (a->P > MD_PAGE_TOKENS_MAX) {
		md_llama_destroy(a);
		return -EINVAL;
	}
	if (!a->cfg.layer_stride)
		a->cfg.layer_stride = 1;
	if (!a->cfg.budget_wait_ms)
		a->cfg.budget_wait_ms = 250;
	if (!a->cfg.heartbeat_timeout_ms)
		a->cfg.heartbeat_timeout_ms = 2000;
	a->max_seqs = cfg->max_seqs ? cfg->max_seqs : 1;
	a->model = model;
	a->n_layer = (uint32_t)llama_model_n_layer(model);
	a->n_layer_observed = (a->n_layer + a->cfg.layer_stride - 1) / a->cfg.layer_stride;
	a->cur_seq = -1;
	a->tier_seq = -1;
	a->type_k = a->type_v = GGML_TYPE_F16;
	*out = a;
	return 0;
}

void md_llama_destroy(md_llama *a)
{
	if (!a)
		return;
	if (a->client)
		md_client_destroy(a->client);
	if (a->seqs) {
		for (uint32_t s = 0; s < a->n_seq_all; s++)
			free(a->seqs[s].page_of);
	}
	for (uint32_t p = 0; a->pages && p < a->page_cap; p++)
		free(a->pages[p].blob);
	free(a->seqs);
	if (a->have_batch)
		llama_batch_free(a->batch);
	free(a->cell_seq);
	free(a->cell_pos);
	free(a->cell_page);
	free(a->cell_tok);
	free(a->layer_map);
	free(a->pages);
	free(a->free_pages);
	free(a->slot_to_page);
	free(a->token_mass);
	free(a->page_mass);
	free(a->refresh);
	free(a->batch_slot);
	free(a->batch_mass);
	free(a->batch_refresh);
	free(a->scratch);
	free(a->socket_path);
	free(a->engine_name);
	free(a->policy);
	free(a);
}

void md_llama_context_params(md_llama *a, struct llama_context_params *cp)
{
	cp->cb_eval = mdl_cb_eval;
	cp->cb_eval_user_data = a;
	cp->flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	/* One stream: one cell index space and kq_soft_max ne[3] == 1. */
	cp->kv_unified = true;
	/* Sliding-window layers: their KV cache as large as the other one, so that
	 * whatever fits one fits both (a probe's copy, the budget's slack); cells
	 * that slid out of the window may still be reused, which the second cell
	 * map follows (docs/llama.md, "Sliding-window layers"). */
	if (llama_model_n_swa(a->model) > 0)
		cp->swa_full = true;
	if (cp->n_seq_max < a->max_seqs)
		cp->n_seq_max = a->max_seqs;
	/* The host tier saves and restores a page through a sequence of its own:
	 * the last id, past every id the caller uses. */
	if (a->cfg.tier_mb)
		cp->n_seq_max++;
	a->type_k = cp->type_k;
	a->type_v = cp->type_v;
}

/* ---- daemon link ---- */

static void md__notice(md_llama *a, const char *fmt, const char *detail)
{
	if (!a->cfg.quiet) {
		fprintf(stderr, fmt, detail ? detail : "");
		fputc('\n', stderr);
	}
}

static void md__refresh_params(md_llama *a)
{
	if (a->attached && md_client_params(a->client, &a->params) == 0)
		a->have_params = 1;
}

static void md__on_attached(md_llama *a, int first)
{
	char buf[64];
	a->attached = 1;
	a->st.instance_id = md_client_instance_id(a->client);
	snprintf(buf, sizeof(buf), "%llx", (unsigned long long)a->st.instance_id);
	if (!first) {
		a->st.reattaches++;
		md__notice(a, "memdecay: reattached to memdecayd (instance %s)", buf);
	}
	md__refresh_params(a);
	mdl_register_missing(a);
}

static void md__on_detached(md_llama *a)
{
	a->attached = 0;
	a->st.detaches++;
	md__notice(a, "memdecay: memdecayd unreachable (%s); decoding continues without evictions",
		   a->client ? md_client_last_error(a->client) : "no client");
}

/* libmemdecay may have dropped the daemon inside a call (a wait, a keepalive
 * check): tell the user once, as for a loss found at a step boundary. */
static void md__note_lost(md_llama *a)
{
	if (a->attached && !md_client_attached(a->client))
		md__on_detached(a);
}

int md_llama_bind(md_llama *a, struct llama_context *ctx)
{
	a->ctx = ctx;
	a->mem = llama_get_memory(ctx);
	a->n_ctx = llama_n_ctx(ctx);
	a->n_ubatch = llama_n_ubatch(ctx);
	a->n_seq_all = llama_n_seq_max(ctx);
	if (a->n_seq_all < a->max_seqs)
		return -EINVAL;
	const char *why = mdl_tier_setup(a);
	if (why) {
		md__notice(a, "memdecay: host tier off: %s", why);
		a->cfg.tier_mb = 0;
	}
	/* a tier page keeps its record and its daemon slot */
	a->page_cap = a->n_ctx / a->P + 2 * a->max_seqs + 8 + (uint32_t)a->tier_cap_pages;
	a->n_maps = llama_model_n_swa(a->model) > 0 ? 2 : 1;
	size_t n_cells = (size_t)a->n_maps * a->n_ctx;

	a->cell_seq = malloc(sizeof(int32_t) * n_cells);
	a->cell_pos = malloc(sizeof(int32_t) * n_cells);
	a->cell_page = malloc(sizeof(int32_t) * n_cells);
	a->cell_tok = calloc(n_cells, 1);
	a->layer_map = calloc(a->n_layer ? a->n_layer : 1, 1);
	a->pages = calloc(a->page_cap, sizeof(*a->pages));
	a->free_pages = malloc(sizeof(uint32_t) * a->page_cap);
	a->slot_to_page = malloc(sizeof(int32_t) * a->page_cap);
	a->seqs = calloc(a->n_seq_all, sizeof(*a->seqs));
	a->token_mass = calloc((size_t)a->page_cap * a->P, sizeof(float));
	a->page_mass = calloc(a->page_cap, sizeof(float));
	a->refresh = calloc(a->page_cap, sizeof(uint16_t));
	a->batch_slot = malloc(sizeof(uint32_t) * a->page_cap);
	a->batch_mass = malloc(sizeof(float) * a->page_cap);
	a->batch_refresh = malloc(sizeof(uint16_t) * a->page_cap);
	if (!a->cell_seq || !a->cell_pos || !a->cell_page || !a->cell_tok || !a->layer_map || !a->pages ||
	    !a->free_pages || !a->slot_to_page || !a->seqs || !a->token_mass || !a->page_mass ||
	    !a->refresh || !a->batch_slot || !a->batch_mass || !a->batch_refresh)
		return -ENOMEM;
	for (size_t c = 0; c < n_cells; c++) {
		a->cell_seq[c] = -1;
		a->cell_pos[c] = -1;
		a->cell_page[c] = -1;
	}
	for (uint32_t s = 0; s < a->n_seq_all; s++)
		a->seqs[s].copy_src = -1;
	for (uint32_t i = 0; i < a->page_cap; i++) {
		a->free_pages[i] = a->page_cap - 1 - i;
		a->slot_to_page[i] = -1;
	}
	a->n_free_pages = a->page_cap;
	a->batch = llama_batch_init((int32_t)a->n_ubatch, 0, 1);
	a->have_batch = 1;

	if (!a->cfg.attach)
		return 0;
	struct md_client_config cc;
	md_client_config_init(&cc);
	cc.socket_path = a->socket_path;
	cc.engine_name = a->engine_name;
	cc.page_tokens = a->P;
	cc.page_capacity = a->page_cap;
	cc.max_seqs = a->max_seqs;
	cc.policy = a->policy;
	cc.budget_sequence_tokens = a->cfg.budget_sequence_tokens;
	if (a->tier_on) {
		cc.tier_pages = a->tier_cap_pages;
		cc.page_bytes = a->st.tier_page_bytes;
	}
	int rc = md_client_create(&cc, &a->client);
	if (rc < 0) {
		a->client = NULL;
		md__notice(a, "memdecay: no client (%s); decoding continues without evictions",
			   md_strerror(rc));
		return 0;
	}
	if (md_client_attached(a->client))
		md__on_attached(a, 1);
	else
		md__on_detached(a);
	return 0;
}

/* One command, as libmemdecay hands it over (md_apply_fn).  Evict: the page
 * leaves llama.cpp's cache, and with a granted tier and room its cells stay
 * in host memory (2), else it leaves the library's mirror too (1).  Restore:
 * its cells go back at their positions (1), or llama.cpp has no free cells
 * (0: REFUSED).  Drop: the host copy goes (1).  A command for a page this
 * adapter no longer has, or an evict it refuses (the tail page, a pinned
 * page), keeps the page. */
static int md__apply_one(void *ctx, const struct md_evict *ev)
{
	md_llama *a = ctx;
	int32_t p = ev->slot < a->page_cap ? a->slot_to_page[ev->slot] : -1;
	if (p < 0 || !a->pages[p].registered || a->pages[p].gen != ev->gen) {
		a->st.cmds_stale++;
		return 0;
	}
	struct mdl_page *pg = &a->pages[p];
	if (ev->type == MD_CMD_RESTORE || ev->type == MD_CMD_DROP) {
		if (!pg->tier) {
			a->st.cmds_stale++;
			return 0;
		}
		if (ev->type == MD_CMD_DROP) {
			mdl_tier_drop(a, (uint32_t)p);
			return 1;
		}
		return mdl_tier_restore(a, (uint32_t)p) == 0;
	}
	if (ev->type != MD_CMD_EVICT || !pg->live) {
		a->st.cmds_stale++;
		return 0;
	}
	int keep = a->tier_on && md_client_tier_budget(a->client) > 0;
	int rc = mdl_evict(a, (uint32_t)p, 1, keep);
	return rc < 0 ? 0 : rc == 1 ? 2 : 1;
}

/* A daemon without a tier for us (a 1.3 daemon, or tier budget 0 after a
 * reattach) never restores or drops: free what the tier holds. */
static void md__tier_revoke(md_llama *a)
{
	if (!a->tier_n || md_client_tier_budget(a->client) > 0)
		return;
	for (uint32_t p = 0; p < a->page_cap; p++) {
		if (!a->pages[p].tier)
			continue;
		md_page_free(a->client, a->pages[p].slot, MD_FREE_DROPPED);
		mdl_tier_drop(a, p);
	}
}

int md_llama_step(md_llama *a)
{
	if (!a->client)
		return 0;
	md__note_lost(a);
	int was = a->attached;
	/* checks the daemon; detached, reattaches (backing off from 100 ms to
	 * 2 s) and republishes every page */
	int up = md_client_maintain(a->client, a->cfg.heartbeat_timeout_ms, MD_LLAMA_RETRY_MS);
	if (!up) {
		if (was)
			md__on_detached(a);
		return 0;
	}
	if (!was)
		md__on_attached(a, 0);   /* a new daemon rebuilt our pages */
	md__refresh_params(a);
	md_apply_commands(a->client, md__apply_one, a);
	md__tier_revoke(a);
	return 0;
}

/* Over budget: libmemdecay gives the daemon a bounded time to evict (it sees
 * the pages just published), down to max(budget, floor) + one page (the page
 * being written).  Fail-open: on timeout decoding goes on. */
static void md__budget_wait(md_llama *a, llama_seq_id seq, uint32_t n_next)
{
	if (!a->attached)
		return;
	uint32_t q = (uint32_t)seq;
	struct md_settle_result res;
	if (md_settle(a->client, &q, &n_next, 1, a->P, (int)a->cfg.budget_wait_ms, md__apply_one,
		      a, &res) < 0)
		return;
	a->st.budget_waits += res.waited;
	if (res.outcome == MD_SETTLE_UNREACHABLE)
		a->st.budget_unreachable++;
	/* a daemon lost during the wait ends it as a timeout did */
	if (res.outcome == MD_SETTLE_TIMEOUT || (res.outcome == MD_SETTLE_DETACHED && res.waited))
		a->st.budget_wait_timeouts++;
	md__note_lost(a);
	md__refresh_params(a);
}

/* The daemon takes an engine whose heartbeat is stale for hung.  A long
 * prefill or a probe on a copy (no tracked step, so no command poll) must
 * still beat: md_client_check refreshes it and is cheap (rate-limited here,
 * its socket peek is limited to every 100 ms in libmemdecay). */
void mdl_keepalive(md_llama *a, uint64_t now)
{
	if (!a->client || !a->attached || now - a->last_keepalive_ns < 50000000ull)
		return;
	a->last_keepalive_ns = now;
	md_client_check(a->client, a->cfg.heartbeat_timeout_ms);
}

/* ---- decode ---- */

/* Full cache with no daemon: free the oldest evictable page of seq so that
 * decoding goes on (docs/design.md §3 local fallback). */
static int md__local_fallback(md_llama *a, llama_seq_id seq)
{
	struct mdl_seq *s = &a->seqs[seq];
	for (uint32_t i = 0; i < s->page_of_cap; i++) {
		int32_t p = s->page_of[i];
		if (p >= 0 && mdl_evict(a, (uint32_t)p, 0, 0) == 0) {
			a->st.local_evictions++;
			return 0;
		}
	}
	return -ENOSPC;
}

static int md__decode_one(md_llama *a, struct llama_batch *b, llama_seq_id seq,
			  const llama_token *tok, const uint8_t *regions, uint32_t n,
			  int logits_mode, int last_piece)
{
	int tracked = regions != NULL && (uint32_t)seq < a->max_seqs;
	struct mdl_seq *s = &a->seqs[seq];
	llama_pos pos0 = s->pos_next;
	if (tracked) {
		uint64_t tw = md_now_ns();
		md__budget_wait(a, seq, n);
		a->st.budget_wait_ns += md_now_ns() - tw;
		int rc = mdl_pages_append(a, seq, pos0, regions, n);
		if (rc < 0)
			return rc;
	}
	b->n_tokens = (int32_t)n;
	for (uint32_t i = 0; i < n; i++) {
		b->token[i] = tok[i];
		b->pos[i] = pos0 + (llama_pos)i;
		b->n_seq_id[i] = 1;
		b->seq_id[i][0] = seq;
		b->logits[i] = logits_mode == 2 || (logits_mode == 1 && last_piece && i == n - 1);
	}
	if (tracked && a->cfg.capture_attention) {
		struct mdk_cell_map map = {
			.page = a->cell_page, .token = a->cell_tok, .n_kv = a->n_ctx,
			.n_pages = a->page_cap, .page_tokens = a->P,
		};
		struct mdk_page_out out = {a->token_mass, a->page_mass, a->refresh};
		mdk_page_mass_zero(&map, &out);
	}
	a->cur_seq = seq;
	a->cur_pos0 = pos0;
	a->cur_n = n;
	a->cur_tracked = tracked;
	a->cur_idx_seen = 0;
	a->cur_map_seen = 0;
	a->cur_idx[0] = a->cur_idx[1] = NULL;
	a->in_decode = 1;
	uint64_t td = md_now_ns();
	int rc = llama_decode(a->ctx, *b);
	a->st.decode_ns += md_now_ns() - td;
	while (rc == 1 && !a->attached && tracked && md__local_fallback(a, seq) == 0)
		rc = llama_decode(a->ctx, *b);
	a->in_decode = 0;
	if (rc != 0)
		return rc;  /* llama.cpp kept its state; our pages stay declared */
	if (!a->cur_idx_seen)
		a->st.map_missing++;
	s->pos_next = pos0 + (llama_pos)n;
	a->st.ubatches++;
	if (tracked) {
		a->st.tokens_tracked += n;
		if (s->live_tokens > a->st.peak_live_tokens)
			a->st.peak_live_tokens = s->live_tokens;
		a->live_weighted_sum += (double)s->live_tokens * n;
		a->live_weight += n;
		uint64_t t0 = md_now_ns();
		if (a->client)
			mdl_publish_step(a, seq, n);
		a->st.publish_ns += md_now_ns() - t0;
		/* Commands wait for the tracked sequence's own step: a probe copy
		 * shares its cells and must not see them vanish. */
		md_llama_step(a);
	} else {
		mdl_keepalive(a, md_now_ns());
	}
	return 0;
}

int md_llama_decode(md_llama *a, llama_seq_id seq, const llama_token *tok,
		    const uint8_t *regions, uint32_t n, int logits)
{
	if (!a->ctx || seq < 0 || (uint32_t)seq >= a->n_seq_all || seq == a->tier_seq)
		return -EINVAL;
	if (!n)
		return 0;
	uint32_t cap = a->n_ubatch;
	int rc = 0;
	uint32_t done = 0;
	while (done < n) {
		uint32_t k = n - done < cap ? n - done : cap;
		int tracked = regions != NULL && (uint32_t)seq < a->max_seqs;
		/* Under a budget, go page by page so the daemon can keep occupancy
		 * within budget + one page.  Otherwise keep llama.cpp's batches. */
		uint64_t budget = tracked && a->attached
				? md_seq_budget_tokens(a->client, (uint32_t)seq) : 0;
		if (budget) {
			uint64_t live = a->seqs[seq].live_tokens;
			if (live + k > budget) {
				uint32_t in_page = a->P - (uint32_t)(a->seqs[seq].pos_next % a->P);
				if (k > in_page)
					k = in_page;
			}
		}
		rc = md__decode_one(a, &a->batch, seq, tok + done, regions ? regions + done : NULL, k,
				    logits, done + k == n);
		if (rc != 0)
			break;
		done += k;
	}
	return rc;
}

llama_pos md_llama_pos_next(const md_llama *a, llama_seq_id seq)
{
	if (seq < 0 || (uint32_t)seq >= a->n_seq_all)
		return -1;
	return a->seqs[seq].pos_next;
}

int md_llama_seq_copy(md_llama *a, llama_seq_id src, llama_seq_id dst)
{
	if (src < 0 || dst < 0 || (uint32_t)src >= a->n_seq_all || (uint32_t)dst >= a->n_seq_all ||
	    (uint32_t)dst < a->max_seqs || src == dst || src == a->tier_seq || dst == a->tier_seq)
		return -EINVAL;
	md_llama_seq_truncate(a, dst, 0);
	llama_memory_seq_cp(a->mem, src, dst, -1, -1);
	/* Shared cells stay mapped to src: the copy only ever adds its own. */
	a->seqs[dst].pos_next = a->seqs[src].pos_next;
	a->seqs[dst].copy_src = src;
	a->seqs[dst].copy_end = a->seqs[src].pos_next;
	return 0;
}

int md_llama_seq_truncate(md_llama *a, llama_seq_id seq, llama_pos p0)
{
	if (seq < 0 || (uint32_t)seq >= a->n_seq_all)
		return -EINVAL;
	int tracked = (uint32_t)seq < a->max_seqs;
	if (tracked && p0 > 0)
		return -EINVAL;
	if (p0 < 0)
		p0 = 0;
	llama_memory_seq_rm(a->mem, seq, p0, -1);
	mdl_cells_clear(a, seq, p0, -1);
	struct mdl_seq *s = &a->seqs[seq];
	if (tracked) {
		for (uint32_t i = 0; i < s->page_of_cap; i++) {
			int32_t p = s->page_of[i];
			if (p < 0)
				continue;
			if (a->pages[p].registered && a->client)
				md_page_free(a->client, a->pages[p].slot, MD_FREE_FINISHED);
			mdl_page_release(a, (uint32_t)p);
		}
		mdl_tier_seq_end(a, seq);
		if (a->client)
			md_seq_end(a->client, (uint32_t)seq);
		s->live_tokens = 0;
	}
	s->pos_next = p0;
	if (p0 == 0)
		s->copy_src = -1;
	return 0;
}

uint32_t md_llama_live_tokens(const md_llama *a, llama_seq_id seq)
{
	if (seq < 0 || (uint32_t)seq >= a->n_seq_all)
		return 0;
	return a->seqs[seq].live_tokens;
}

void md_llama_get_stats(const md_llama *a, struct md_llama_stats *out)
{
	*out = a->st;
	out->mean_live_tokens = a->live_weight ? a->live_weighted_sum / (double)a->live_weight : 0;
	out->attached = a->attached;
	out->tier_on = a->tier_on;
	out->tier_cap_pages = a->tier_cap_pages;
	out->tier_cap_bytes = a->tier_cap_bytes;
	out->tier_pages = a->tier_n;
	out->tier_bytes = a->tier_bytes;
	if (a->client && a->attached) {
		struct md_client_counters cc;
		md_client_counters(a->client, &cc);
		out->attn_dropped += cc.attn_dropped;
	}
}
