/*
 * md_llama.h — the MemDecay adapter for an unmodified llama.cpp.
 *
 * It observes attention through cb_eval (kq_soft_max-<layer>, flash attention
 * off), rebuilds the KV-cell -> (sequence, position) map from the layer-0 K
 * write (SET_ROWS cache_k_l0, whose src[1] holds one cell index per ubatch
 * token), declares pages of P consecutive positions with per-token regions to
 * memdecayd through libmemdecay, publishes page mass and refresh bitmaps, and
 * applies eviction commands with llama_memory_seq_rm at step boundaries
 * (positions kept, holes masked, new tokens at pos_max + 1).  With no daemon it
 * keeps decoding (fail-open) and reattaches when one returns.
 *
 * Decode through md_llama_decode(): it keeps each ubatch to one sequence and
 * one llama ubatch, which is what makes the cell map exact.  Errors are
 * negative errno or MD_E* codes; a positive value is llama_decode's own.
 */
#ifndef MD_LLAMA_H
#define MD_LLAMA_H

#include <stdint.h>
#include <llama.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct md_llama md_llama;

struct md_llama_config {
	const char *socket_path;          /* NULL: libmemdecay's default lookup */
	const char *engine_name;          /* NULL: "llama.cpp" */
	const char *policy;               /* NULL: daemon default */
	int64_t budget_sequence_tokens;   /* -1: daemon config, 0: none */
	uint32_t page_tokens;             /* P, 1..16; 0 = 16 */
	uint32_t max_seqs;                /* tracked sequence ids 0..max_seqs-1; 0 = 1 */
	int attach;                       /* 0: never talk to a daemon (observe only) */
	int capture_attention;            /* 0: cell map only, no kq_soft_max */
	uint32_t layer_stride;            /* observe layers 0, k, 2k, ...; 0 = 1 */
	uint32_t budget_wait_ms;          /* wait for evictions when over budget; 0 = 250 */
	uint32_t heartbeat_timeout_ms;    /* daemon liveness; 0 = 2000 */
	int check_rows;                   /* test: measure row sums over live cells */
	int quiet;                        /* 1: no fail-open notices on stderr */
	uint32_t tier_mb;                 /* host tier for evicted pages, MiB; 0: none
	                                     (docs/llama.md, "Host tier") */
};
void md_llama_config_init(struct md_llama_config *cfg);

int md_llama_create(const struct md_llama_config *cfg, const struct llama_model *model,
		    md_llama **out);
void md_llama_destroy(md_llama *a);

/* Sets cb_eval and what the adapter needs (flash attention off, unified KV). */
void md_llama_context_params(md_llama *a, struct llama_context_params *cp);
/* Binds the created context; tries to attach to memdecayd when cfg->attach. */
int md_llama_bind(md_llama *a, struct llama_context *ctx);

/* Appends n tokens to seq at positions pos_next.. .  regions[i] is token i's
 * region (enum md_region); regions == NULL or seq >= max_seqs: an untracked
 * sequence (a probe copy): no pages, no statistics, cells still mapped.
 * logits: 0 none, 1 the last token, 2 every token. */
int md_llama_decode(md_llama *a, llama_seq_id seq, const llama_token *tok,
		    const uint8_t *regions, uint32_t n, int logits);
llama_pos md_llama_pos_next(const md_llama *a, llama_seq_id seq);

/* Step boundary outside decode: liveness, reattach, commands. */
int md_llama_step(md_llama *a);

/* dst becomes a copy of src (llama_memory_seq_cp); dst must be untracked. */
int md_llama_seq_copy(md_llama *a, llama_seq_id src, llama_seq_id dst);
/* Removes [p0, end) of an untracked sequence, or the whole of any sequence
 * when p0 <= 0 (a tracked one then ends: its pages are freed). */
int md_llama_seq_truncate(md_llama *a, llama_seq_id seq, llama_pos p0);
/* Evicts the page holding pos, as a daemon command would (tests, local
 * fallback).  Refuses pinned regions (by the current parameters) and the tail. */
int md_llama_evict_page(md_llama *a, llama_seq_id seq, llama_pos pos);
/* With a host tier and no daemon client (cfg.attach 0), md_llama_evict_page
 * keeps the page's K/V in the tier; this puts it back at its own positions, as
 * a daemon's restore command would (tests).  -ENOENT: not in the tier,
 * -ENOSPC: no free cells, -EPERM: a daemon client decides restores. */
int md_llama_restore_page(md_llama *a, llama_seq_id seq, llama_pos pos);
/* The sequence id the tier reserves as scratch (n_seq_max - 1), -1 without a tier. */
llama_seq_id md_llama_tier_seq(const md_llama *a);

/* The adapter's view of cell c: seq -1 when free.  md_llama_cell reads map 0
 * (the KV cache layer 0 writes to). */
int md_llama_cell(const md_llama *a, uint32_t cell, llama_seq_id *seq, llama_pos *pos);
uint32_t md_llama_n_cells(const md_llama *a);
/* Models with sliding-window layers (llama_model_n_swa > 0) have two KV caches
 * in llama.cpp, so two cell maps: 2 maps after md_llama_bind, else 1.  Map 0
 * is layer 0's cache (for Gemma 3: the sliding-window one), map 1 the other.
 * A cell that slid out of the window and was purged by llama.cpp may keep its
 * old entry in map 0 until it is written again; no attention falls on it. */
uint32_t md_llama_n_maps(const md_llama *a);
int md_llama_cell_in(const md_llama *a, uint32_t map, uint32_t cell, llama_seq_id *seq,
		     llama_pos *pos);
/* The map a layer's cells are in (learned from its K write), -1 if unknown. */
int md_llama_layer_map(const md_llama *a, uint32_t layer);
uint32_t md_llama_live_tokens(const md_llama *a, llama_seq_id seq);
/* Region of the live token at pos, or -1 when not live. */
int md_llama_token_region(const md_llama *a, llama_seq_id seq, llama_pos pos);

struct md_llama_stats {
	uint64_t tokens_tracked;
	uint64_t ubatches;
	uint64_t peak_live_tokens;       /* max over tracked seqs and steps */
	double mean_live_tokens;         /* token-weighted over appends, seq 0..max */
	uint64_t evictions;
	uint64_t evictions_by_region[16];/* by the page's majority region */
	uint64_t evicted_tokens;
	uint64_t cmds_stale, cmds_refused, seq_rm_failed;
	uint64_t attn_records, attn_dropped;
	uint64_t layers_observed;        /* kq_soft_max tensors reduced */
	uint64_t map_writes;             /* tokens mapped from SET_ROWS */
	uint64_t map_missing;            /* ubatches whose SET_ROWS was not seen */
	uint64_t budget_waits, budget_wait_timeouts;
	uint64_t budget_unreachable;     /* daemon evicted all it could, still over */
	uint64_t detaches, reattaches;
	uint64_t local_evictions;        /* fail-open fallback under a full cache */
	double row_sum_max_err;          /* check_rows: max |sum over live cells - 1| */
	double row_dead_mass_max;        /* check_rows: max mass on cells not of seq */
	uint64_t decode_ns;              /* inside llama_decode (graph incl. cb_eval) */
	uint64_t observe_ns;             /* of which in the adapter's cb_eval work */
	uint64_t publish_ns;             /* the step and its page records (one batch) after each ubatch */
	uint64_t budget_wait_ns;         /* waiting for the daemon over budget */
	int attached;
	uint64_t instance_id;
	/* host tier (cfg.tier_mb; docs/llama.md "Host tier") */
	int tier_on;                     /* granted by this model and context */
	uint64_t tier_cap_pages, tier_cap_bytes;
	uint64_t tier_pages, tier_bytes; /* held now */
	uint64_t tier_peak_pages, tier_peak_bytes;
	uint64_t tier_kept, tier_restored, tier_restore_refused, tier_dropped;
	uint64_t tier_full;              /* evicts freed because the tier had no room */
	uint64_t tier_unmapped;          /* restores whose cells could not be predicted */
	uint64_t tier_page_bytes;        /* one page's state blob, measured */
	uint64_t tier_save_ns, tier_restore_ns;
};
void md_llama_get_stats(const md_llama *a, struct md_llama_stats *out);

#ifdef __cplusplus
}
#endif
#endif
