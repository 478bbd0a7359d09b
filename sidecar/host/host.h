/*
 * host.h — the policy host: every attached engine's page state, the eviction
 * index and the decisions.  No I/O and no shared memory here: the transport
 * copies each record out of a ring and hands the copy to md__host_ingest(),
 * which validates its meaning (slot, generation, sequence, finite mass) and
 * updates the state.  Decisions are exact: they evict the pages the
 * brute-force oracle (oracle.h) would pick, under docs/design.md's tie rule.
 */
#ifndef MD_HOST_H
#define MD_HOST_H

#include <stddef.h>
#include <stdint.h>
#include "memdecay_abi.h"
#include "params.h"

struct md__host;

/* Rejection reasons for a record (returned negated by md__host_ingest). */
enum md__reject {
	MD__OK = 0,
	MD__REJ_TYPE = 1,          /* unknown record type */
	MD__REJ_SLOT = 2,          /* slot outside page capacity */
	MD__REJ_GEN = 3,           /* generation does not match the daemon's view */
	MD__REJ_SEQ = 4,           /* sequence outside max_seqs, or not the page's */
	MD__REJ_STATE = 5,         /* open of a live slot, grow/attn of a free slot ... */
	MD__REJ_TOKENS = 6,        /* n_tokens / token0 / count out of range, shrink */
	MD__REJ_MASS = 7,          /* NaN, Inf, negative or huge attention */
	MD__REJ_CLOCK = 8,         /* clock going backwards */
	MD__REJ_REGION = 9,        /* region id unknown */
	MD__REJ_SPAN = 10,         /* relabel span empty, reversed or unknown */
	MD__REJ_POS = 11,          /* first_pos overlaps another page of the sequence */
	MD__REJ_OPTIONS = 12,      /* sequence options: unknown policy, budget past the limit,
				      (1.3) unknown state, a session tag not printable */
	MD__REJ_COUNT = 13,
};
const char *md__reject_name(int reason);   /* "slot", "generation", ... */

/* Engine-level overrides from HELLO or `memdecayctl policy/budget --engine`. */
struct md__engine_opts {
	int policy;                   /* -1: the configured default */
	int64_t budget_engine_pages;  /* -1: config value; 0: none */
	int64_t budget_sequence_tokens; /* -1: config value; 0: none */
	double weight;                /* share of the global budget; default 1.0 */
	char name[64];
};
void md__engine_opts_defaults(struct md__engine_opts *o);

struct md__host *md__host_new(const struct md__params *p);
void md__host_free(struct md__host *h);

/* Replaces the parameters; effective at the next decision (no stale keys). */
void md__host_set_params(struct md__host *h, const struct md__params *p);
const struct md__params *md__host_params(const struct md__host *h);

/* Engines are identified by the id the transport chose (unique while attached). */
int md__host_engine_add(struct md__host *h, uint32_t engine_id, uint32_t page_tokens,
			uint32_t page_capacity, uint32_t max_seqs,
			const struct md__engine_opts *opts);
void md__host_engine_remove(struct md__host *h, uint32_t engine_id);
int md__host_engine_set_opts(struct md__host *h, uint32_t engine_id,
			     const struct md__engine_opts *opts);
int md__host_engine_get_opts(const struct md__host *h, uint32_t engine_id,
			     struct md__engine_opts *opts);

/* The largest budget_sequence_tokens a sequence may ask for itself, as the
 * parameter budget.sequence_tokens (params.c). */
#define MD__SEQ_BUDGET_MAX (1ull << 48)

/* ABI 1.4: the engine's host tier (HELLO tier_pages, page_bytes; 0 pages:
 * none).  The engine's tier budget is the smaller of tier_pages and the
 * parameter tier.pages when that is set.  0 or -ENOENT. */
int md__host_engine_set_tier(struct md__host *h, uint32_t engine_id, uint64_t tier_pages,
			     uint64_t page_bytes);

/* The ABI minor the engine speaks (its HELLO; default MD_ABI_MINOR): a
 * 1.0/1.1 engine's MD_REC_SEQ_OPTS is an unknown record type. */
int md__host_engine_set_abi_minor(struct md__host *h, uint32_t engine_id, uint32_t minor);

/* One record, already copied out of shared memory.  Returns 0 or -reason. */
int md__host_ingest(struct md__host *h, uint32_t engine_id, const struct md_stats_rec *rec);
/* The same, and *refreshed gets the bitmap of the page's tokens whose refresh
 * clock the record set (attention records; 0 for the others or when
 * rejected): the host's refresh rule, for observers such as calibration. */
int md__host_ingest_refreshed(struct md__host *h, uint32_t engine_id,
			      const struct md_stats_rec *rec, uint16_t *refreshed);

/* A RELABEL applied in pieces of at most max_pages pages each, so that the
 * caller can bound the time one record takes (docs/reliability.md, promise 8).
 * Start with *cursor = rec->u.relabel.pos0 and *touched = 0; call again while
 * it returns 1 (the engine's later records must wait).  Then it returns 0 or
 * -reason, counted exactly as md__host_ingest counts the whole record, and the
 * state is what md__host_ingest would have made of it. */
int md__host_relabel_step(struct md__host *h, uint32_t engine_id, const struct md_stats_rec *rec,
			  uint64_t *cursor, uint32_t max_pages, int *touched);

/* A batch of one engine's records (e.g. a drained ring span), in order, each
 * checked and counted exactly as by md__host_ingest; prefetches ahead, so it is
 * the fast path at large page counts.  rcs (may be NULL) gets each result and
 * refreshed (may be NULL) each record's refresh bitmap, as by
 * md__host_ingest_refreshed.  Returns the number of records accepted. */
size_t md__host_ingest_batch(struct md__host *h, uint32_t engine_id,
			     const struct md_stats_rec *recs, size_t n, int *rcs,
			     uint16_t *refreshed);

/* Rebuild an engine's state from its page table (attach after a daemon
 * restart, or after the engine dropped lifecycle records).  Pages whose slot
 * and generation are unchanged keep their attention state.  Entries are copies;
 * each is validated like a record (invalid ones are skipped and counted by the
 * return value of _page: 0 ok, -reason). */
void md__host_resync_begin(struct md__host *h, uint32_t engine_id);
int md__host_resync_seq_clock(struct md__host *h, uint32_t engine_id, uint32_t seq,
			      uint64_t clock);
int md__host_resync_page(struct md__host *h, uint32_t engine_id, uint32_t slot,
			 const struct md_page_entry *e);
/* Optional, between _begin and the first _page: given the whole snapshot
 * (page_capacity entries), drops at once every page _page would replace or
 * _end would drop, which keeps a resync O(n log n) in any table layout. */
void md__host_resync_prune(struct md__host *h, uint32_t engine_id,
			   const struct md_page_entry *table);
void md__host_resync_end(struct md__host *h, uint32_t engine_id);
/* A sequence's options as its engine's table holds them (ABI 1.2, a copy
 * taken under the entry's version word; version 0: never written, the
 * engine's options; the state and session tag from a 1.3 engine only).
 * Validated as an MD_REC_SEQ_OPTS record: 0 or -reason, counted by the
 * caller. */
int md__host_resync_seq_opts(struct md__host *h, uint32_t engine_id, uint32_t seq,
			     const struct md_seq_opts *o);

/* The protection counts the host applies (each sequence's k_protect: tail
 * page, protect_recent and its policy's window) that changed since the last
 * call, or every sequence's after an index rebuild: fn(ctx, seq, k) for each.
 * Cost: the sequences whose count moved (docs/abi.md, seq_protect). */
void md__host_protect_changes(struct md__host *h, uint32_t engine_id,
			      void (*fn)(void *ctx, uint32_t seq, uint32_t k), void *ctx);
/* One sequence's options and protection count (tests, operators):
 * policy/budget as stored (MD_SEQ_ENGINE_x: the engine's).  0 or -ENOENT. */
struct md__seq_opts_info {
	uint32_t policy;           /* own, or MD_SEQ_ENGINE_U32 */
	uint32_t policy_effective;
	uint64_t budget;           /* own, or MD_SEQ_ENGINE_U64 */
	uint64_t budget_effective; /* 0: none */
	uint32_t k_protect;
	uint32_t state;            /* enum md_seq_state (1.3) */
	uint8_t session[MD_SEQ_SESSION_LEN]; /* its session tag, all NUL: none (1.3) */
};
int md__host_seq_opts_get(const struct md__host *h, uint32_t engine_id, uint32_t seq,
			  struct md__seq_opts_info *out);

/* One command the transport must send. */
struct md__decision {
	uint32_t engine_id;
	uint32_t seq;
	uint32_t slot;
	uint32_t gen;
	uint32_t reason;   /* enum md_evict_reason (MD_RESTORE_RECALL, MD_DROP_TIER_BUDGET) */
	uint32_t type;     /* enum md_cmd_type: EVICT, RESTORE or DROP (ABI 1.4) */
};

/* Runs every scope that is over budget (sequence, engine, global) and returns
 * up to cap commands.  Chosen pages leave the index and stop counting toward
 * occupancy at once (state "evicting") until the engine reports them freed
 * or kept in its tier.  Then, for an engine with a host tier (ABI 1.4,
 * docs/tier.md): tier pages over the tier budget are dropped, lowest score
 * first (state "dropping"), and tier pages with a new estimate are restored,
 * highest estimate first, when it exceeds the latest attention of the
 * resident page they would displace (the evictable page with the lowest
 * latest attention in the scope whose budget the restore would exceed) by
 * more than recall.margin times that attention, at most recall.max_per_pass
 * per engine and pass (state "restoring"; they count as resident from the
 * decision on, and are not evicted until the engine reports them restored).
 * A restore that displaces a page comes right after that page's evict
 * command; a candidate is considered only while both fit in cap (the others
 * wait for the next call).  Call again while it returns cap. */
size_t md__host_decide(struct md__host *h, struct md__decision *out, size_t cap);

/* Fills the engine's parameter-block view (effective policy, norm, tau,
 * budgets incl. its share of the global budget).  `seq` is left alone. */
int md__host_engine_param_view(const struct md__host *h, uint32_t engine_id,
			       struct md_param_block *out);

/* Lowest-scored evictable pages across engines (engine_id = UINT32_MAX) or
 * one engine, with each term of the score. */
struct md__top_entry {
	uint32_t engine_id, seq, slot, gen;
	uint64_t first_pos;
	uint32_t n_tokens;
	uint32_t dominant_region;  /* most frequent region among live tokens */
	double score;              /* the policy's score */
	double decay_term;         /* mean b_r exp(-lambda_r dt) */
	double attn_term;          /* alpha * mean a_i (or cumulative mass for h2o) */
};
size_t md__host_top(const struct md__host *h, uint32_t engine_id,
		    struct md__top_entry *out, size_t n);

/* The transport's clock (monotonic ns) for the records it hands over next:
 * each sequence remembers when it last stepped or opened a page, so an
 * operator sees how long a session has been idle between turns. */
void md__host_set_now(struct md__host *h, uint64_t now_ns);

/* A live sequence (one page or more): what `memdecayctl sessions` shows.  An
 * engine that keeps a conversation's cache across requests keeps its sequence,
 * so a sequence is a session (docs/operations.md, "Sessions"). */
struct md__seq_info {
	uint32_t engine_id, seq;
	uint32_t pages;            /* live pages (not counting ones being evicted) */
	uint32_t turns;            /* region turns seen (docs/policies.md, memdecay-turn) */
	uint64_t tokens_live;      /* tokens held */
	uint64_t span_tokens;      /* positions up to the end of its last page */
	uint64_t clock;            /* its step clock */
	uint64_t idle_ns;          /* since its last step or page open (UINT64_MAX: unknown) */
	uint64_t budget_tokens;    /* its effective token budget (0: none) */
	uint32_t policy;           /* its effective policy */
	uint32_t own_options;      /* 1: it has options of its own (ABI 1.2) */
	uint32_t state;            /* enum md_seq_state (ABI 1.3; older engines: running) */
	uint8_t session[MD_SEQ_SESSION_LEN]; /* its session tag, all NUL: none (ABI 1.3) */
	uint32_t tier_pages;       /* its pages in the host tier (ABI 1.4) */
	uint32_t recalls;          /* its pages restored from the tier */
};
/* Fills up to cap entries, engine (attach order) then sequence order, for
 * every engine (engine_id = UINT32_MAX) or one, idle times as of now_ns (the
 * clock of md__host_set_now); returns how many there are. */
size_t md__host_seqs(const struct md__host *h, uint32_t engine_id, uint64_t now_ns,
		     struct md__seq_info *out, size_t cap);

struct md__engine_stats {
	uint32_t engine_id;
	uint32_t policy;
	uint64_t pages_live;
	uint64_t pages_evicting;
	uint64_t tokens_live;
	uint64_t seqs_live;
	uint64_t records;
	uint64_t rejected[MD__REJ_COUNT];
	uint64_t evictions;
	uint64_t evictions_by_region[MD_REGIONS_MAX]; /* by dominant region */
	uint64_t evictions_by_reason[MD_EVICT_REASON_COUNT];
	uint64_t budget_engine_pages;                 /* effective (own, or global share), 0 = none */
	uint64_t decisions;
	uint64_t decision_ns_total;
	uint64_t seqs_own_options;   /* sequences with own options now */
	uint64_t seqs_retained;      /* sequences retained for a session's next turn (1.3) */
	uint64_t seq_options_applied; /* MD_REC_SEQ_OPTS records taken */
	/* the host tier (1.4, docs/tier.md) */
	uint64_t page_bytes;         /* HELLO page_bytes (0: not given) */
	uint64_t tier_capacity;      /* HELLO tier_pages (0: no tier) */
	uint64_t tier_budget;        /* effective tier budget, pages */
	uint64_t tier_pages;         /* pages in the tier now (restoring and dropping
					not included) */
	uint64_t tier_in;            /* pages that entered the tier (MD_TIER_IN) */
	uint64_t estimates;          /* estimate records taken */
	uint64_t restores;           /* restore commands decided */
	uint64_t recalls;            /* restores applied (MD_TIER_RESTORED) */
	uint64_t restores_refused;   /* MD_TIER_REFUSED */
	uint64_t recall_hits;        /* recalled pages attended (refreshed by real
					attention) after their restore, once each */
	uint64_t drops;              /* drop commands decided */
	uint64_t tier_freed;         /* tier pages freed (dropped, their sequence ended) */
};
int md__host_engine_stats(const struct md__host *h, uint32_t engine_id,
			  struct md__engine_stats *out);
/* Engine ids currently attached, in attach order; returns the count. */
size_t md__host_engine_ids(const struct md__host *h, uint32_t *ids, size_t cap);

/* The split of budget.global_pages (docs/policies.md, "Budgets"): share[i] of
 * engine i holding held[i] pages with weight[i] > 0, by weighted max-min in
 * integer pages; the shares sum to at most global.  The host splits over
 * every attached engine with what each holds (live and evicting pages).
 * Returns 0, or -1 without memory (share untouched). */
int md__global_split(uint64_t global, size_t n, const uint64_t *held, const double *weight,
		     uint64_t *share);

#endif
