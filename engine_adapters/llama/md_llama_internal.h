/*
 * md_llama_internal.h — what the adapter's files share: the page and sequence
 * records, the adapter itself and the functions one file calls in another.
 * Not installed; md_llama.h is the public contract.
 *
 *   md_llama.c        create/bind/destroy, daemon link (libmemdecay's contract:
 *                     maintain, settle, commands), decode, fail-open, the API
 *   md_llama_cells.c  cell -> (seq, pos) map, read from the layer-0 K write
 *   md_llama_pages.c  the page mirror: declaration, registration, eviction
 *   md_llama_attn.c   cb_eval, the attention reduction, the step's records
 *   md_llama_tier.c   the host tier: a page's cells saved, restored, dropped
 */
#ifndef MD_LLAMA_INTERNAL_H
#define MD_LLAMA_INTERNAL_H

#include "md_llama.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <ggml.h>

#include "memdecay.h"
#include "memdecay_clock.h"

#define MD_LLAMA_RETRY_MS 100   /* first reattach try after a loss */

struct mdl_page {
	uint64_t labels;
	int64_t first_pos;
	int32_t seq;
	uint16_t n_tokens;
	uint8_t live;
	uint8_t registered;  /* the daemon knows it (slot, gen valid) */
	uint8_t dirty;       /* grew since the last PAGE_GROW */
	uint8_t tier;        /* evicted, its cells kept in the host tier (blob) */
	uint8_t order_ok;    /* order[] holds the blob's cell order */
	uint32_t slot, gen;
	/* host tier: llama_state_seq_get_data of the page's cells, and the token
	 * offset of each cell in the blob's order (the cells' index order) */
	uint8_t *blob;
	size_t blob_len;
	uint8_t order[MD_PAGE_TOKENS_MAX];
};

struct mdl_seq {
	int32_t *page_of;       /* page index (pos / P) -> local page, -1 */
	uint32_t page_of_cap;
	llama_pos pos_next;
	uint32_t live_tokens;
	int32_t copy_src;       /* a copy sees src's cells below copy_end */
	llama_pos copy_end;
};

struct md_llama {
	struct md_llama_config cfg;
	char *socket_path, *engine_name, *policy;
	const struct llama_model *model;
	struct llama_context *ctx;
	llama_memory_t mem;
	uint32_t P;
	uint32_t n_layer, n_layer_observed;
	uint32_t n_ctx, n_ubatch;
	uint32_t max_seqs;      /* tracked */
	uint32_t n_seq_all;     /* all sequence ids the map accepts */

	/* cell maps: n_maps blocks of n_ctx cells (map m at m * n_ctx).  Map 0 is
	 * the KV cache layer 0 writes to.  A model with sliding-window layers
	 * (llama_model_n_swa > 0: Gemma 2/3, ...) has two KV caches in llama.cpp
	 * (llama_kv_cache_iswa: SWA layers and full-attention layers), each with
	 * its own cell placement; map 1 is the other one, and layer_map says which
	 * map each layer's cells are in (docs/llama.md, "Sliding-window layers"). */
	uint32_t n_maps;
	int32_t *cell_seq, *cell_pos, *cell_page;
	uint8_t *cell_tok;
	uint8_t *layer_map;     /* [n_layer] */
	/* llama.cpp's search start in map 0's cache (its v_heads[0]), followed
	 * from the K writes and our seq_rm calls, so that a restore's cells can be
	 * placed as find_slot places them (md_llama_tier.c) */
	uint32_t kv_head;

	/* pages */
	struct mdl_page *pages;
	uint32_t page_cap;
	uint32_t *free_pages, n_free_pages;
	int32_t *slot_to_page;  /* by daemon slot */
	struct mdl_seq *seqs;   /* [n_seq_all] */

	/* attention reduction outputs */
	float *token_mass, *page_mass;
	uint16_t *refresh;
	/* one step's attention, gathered for md_publish_batch */
	uint32_t *batch_slot;
	float *batch_mass;
	uint16_t *batch_refresh;
	float *scratch;         /* device tensors copied to host */
	size_t scratch_floats;

	/* the ubatch being decoded */
	llama_seq_id cur_seq;
	llama_pos cur_pos0;
	uint32_t cur_n;
	int cur_tracked;
	int cur_idx_seen;
	unsigned cur_map_seen;  /* bit m: map m written in this ubatch */
	const struct ggml_tensor *cur_idx[2];  /* this ubatch's cell index tensor per map */
	int in_decode;

	/* daemon */
	md_client *client;
	int attached;
	struct md_params_view params;
	int have_params;

	/* host tier */
	int tier_on;
	llama_seq_id tier_seq;  /* scratch sequence: n_seq_max - 1, reserved */
	uint64_t tier_cap_pages, tier_cap_bytes;
	uint32_t tier_n;
	uint64_t tier_bytes;
	enum ggml_type type_k, type_v;

	struct llama_batch batch;  /* n_ubatch tokens, allocated once */
	uint64_t last_keepalive_ns;
	int have_batch;

	struct md_llama_stats st;
	double live_weighted_sum;
	uint64_t live_weight;
};

/* md_llama.c */
void mdl_keepalive(md_llama *a, uint64_t now);

/* md_llama_cells.c */
void mdl_observe_kv_write(md_llama *a, const struct ggml_tensor *t, long layer);
/* Clears every map's cells of seq at positions >= p0 (p0 < 0: page p only). */
void mdl_cells_clear(md_llama *a, llama_seq_id seq, llama_pos p0, int32_t page);

/* md_llama_pages.c */
void mdl_register_missing(md_llama *a);
int32_t mdl_page_at(const md_llama *a, llama_seq_id seq, llama_pos pos);
void mdl_page_release(md_llama *a, uint32_t p);
int mdl_page_is_tail(const md_llama *a, const struct mdl_page *pg);
int mdl_page_pinned(const md_llama *a, const struct mdl_page *pg);
/* 0: evicted; 1: evicted, its K/V kept in the host tier (keep and room). */
int mdl_evict(md_llama *a, uint32_t p, int by_daemon, int keep);
int mdl_pages_append(md_llama *a, llama_seq_id seq, llama_pos pos0,
		     const uint8_t *regions, uint32_t n);

/* md_llama_attn.c */
bool mdl_cb_eval(struct ggml_tensor *t, bool ask, void *user);
const void *mdl_tensor_host(md_llama *a, const struct ggml_tensor *t, size_t nbytes);
void mdl_publish_step(md_llama *a, llama_seq_id seq, uint32_t n);

/* md_llama_tier.c */
/* NULL when the tier is on, else why not (cfg.tier_mb > 0). */
const char *mdl_tier_setup(md_llama *a);
int mdl_tier_save(md_llama *a, uint32_t p);
void mdl_tier_stash(md_llama *a, uint32_t p);
int mdl_tier_restore(md_llama *a, uint32_t p);
void mdl_tier_drop(md_llama *a, uint32_t p);
void mdl_tier_seq_end(md_llama *a, llama_seq_id seq);

#endif
