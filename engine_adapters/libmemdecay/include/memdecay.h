/*
 * memdecay.h — libmemdecay, the engine-side client of memdecayd.
 *
 * An engine attaches over the daemon's Unix control socket, declares its KV
 * pages with per-token region labels, publishes attention statistics, polls
 * eviction commands at step boundaries and reports pages freed.  Publishing and
 * polling make no system call and no allocation (a doorbell is rung only when
 * the daemon has declared itself asleep).  Every function returns 0 (or a
 * count) on success and a negative errno or MD_E* code on failure; nothing
 * prints.  One md_client is used by one thread.
 *
 * libmemdecay 0.5 (SOVERSION 3) speaks ABI 1.4: the host tier and recall
 * (docs/tier.md).  struct md_client_config grew (tier_pages, page_bytes) and
 * struct md_evict grew (type): a program built against an older header must
 * be rebuilt, which the SOVERSION enforces.
 */
#ifndef MEMDECAY_H
#define MEMDECAY_H

#include <stddef.h>
#include <stdint.h>
#include "memdecay_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Project error codes (negative, below the errno range). */
enum md_error {
	MD_EVERSION = -1001,   /* daemon speaks another ABI major version */
	MD_EREFUSED = -1002,   /* daemon refused HELLO (message: md_client_last_error) */
	MD_EPROTO = -1003,     /* malformed reply or segment from the daemon */
	MD_EDETACHED = -1004,  /* no daemon attached (fail-open: keep serving) */
	MD_EFULL = -1005,      /* ring full: attention record dropped (counted) */
	MD_ENOSLOT = -1006,    /* no free page slot */
	MD_ESTALE = -1007,     /* slot/generation no longer matches */
};
const char *md_strerror(int err);

typedef struct md_client md_client;

struct md_client_config {
	const char *socket_path;      /* NULL: $MEMDECAY_SOCKET, $XDG_RUNTIME_DIR/memdecay/memdecayd.sock, /run/memdecay/memdecayd.sock */
	const char *engine_name;      /* shown by memdecayctl engines */
	uint32_t page_tokens;         /* P, 1..16; 0 = 16 */
	uint32_t page_capacity;       /* page slots */
	uint32_t max_seqs;
	uint32_t tp_rank, tp_size;    /* tensor parallel; 0/0 = single */
	const char *policy;           /* NULL: daemon default */
	int64_t budget_engine_pages;  /* -1: daemon config */
	int64_t budget_sequence_tokens; /* -1: daemon config */
	double weight;                /* share of a global budget; 0 = 1.0; the daemon
	                                 clamps it to budget.max_engine_weight */
	uint64_t tier_pages;          /* 1.4: pages the engine can keep in its host tier
	                                 (0: none; at most page_capacity: a tier page
	                                 keeps its slot).  Grew in SOVERSION 3 */
	uint64_t page_bytes;          /* 1.4: one page's K/V bytes over all layers, for
	                                 the daemon's tier byte counts (0: unknown;
	                                 at most UINT32_MAX) */
};
void md_client_config_init(struct md_client_config *cfg);

/* Creates the client and its private page mirror (all allocation happens
 * here), then tries to attach.  On a daemon that is not there it still
 * returns 0 with the client detached (md_client_attached() == 0), unless
 * cfg demands otherwise via md_client_create_attached. */
int md_client_create(const struct md_client_config *cfg, md_client **out);
/* Like create, but fails with the attach error when no daemon answers. */
int md_client_create_attached(const struct md_client_config *cfg, md_client **out);
void md_client_destroy(md_client *c);         /* detaches */

int md_client_attached(const md_client *c);
/* Attach or reattach after a daemon restart: re-publishes every live page to
 * the new daemon through the page table.  Returns 0 or the attach error. */
int md_client_reattach(md_client *c);
/* Cheap liveness check, call at step boundaries: returns 1 if attached and
 * the daemon looks alive, 0 if detached (it detaches on daemon shutdown,
 * control-socket EOF or a heartbeat older than timeout_ms).  The socket check
 * is a non-blocking peek done at most every 100 ms. */
int md_client_check(md_client *c, uint32_t timeout_ms);
const char *md_client_last_error(const md_client *c);
uint32_t md_client_engine_id(const md_client *c);
uint64_t md_client_instance_id(const md_client *c);

/* Every field of the parameter block the daemon publishes for this engine
 * (struct md_param_block, docs/abi.md §2), copied under its seqlock in one
 * read.  A block with a value outside the ranges below (NaN included) or an
 * unknown policy or norm mode is refused whole: MD_EPROTO, counted in
 * md_client_proto_errors, and *out gets the last good copy.  Before the first
 * good read seqlock is 0, the first fields hold the library's fail-open
 * defaults (memdecay, raw, tau 0.01, system pinned, protect_recent 1) and the
 * scoring fields from alpha on are 0: the daemon's values are not known yet.
 * Grew in SOVERSION 1 (alpha .. lambda). */
struct md_params_view {
	uint32_t policy;                 /* enum md_policy_id */
	uint32_t norm_mode;              /* enum md_norm_mode */
	double tau;                      /* refresh threshold: finite, >= 0 */
	uint64_t budget_sequence_tokens; /* 0: none */
	uint64_t budget_engine_pages;    /* 0: none; includes a global budget's share */
	uint32_t protect_recent;         /* newest full pages protected */
	uint32_t pinned_mask;            /* bit r: region r pinned (bits 0..15) */
	uint64_t seqlock;                /* changes whenever parameters change; 0: never read */
	double alpha;                    /* weight of attention in the score: finite, >= 0 */
	double beta;                     /* attention EWMA factor: [0, 1) */
	double low_watermark;            /* budgets evict down to this fraction: (0, 1] */
	double base[MD_REGIONS_MAX];     /* region r's base retention: finite, >= 0 */
	double lambda[MD_REGIONS_MAX];   /* region r's decay per token: finite, >= 0 */
};
int md_client_params(md_client *c, struct md_params_view *out);

/* ---- page lifecycle (never dropped: a full ring turns into a resync) ----
 * Fail-open: while detached these calls still update the private mirror
 * (md_page_open still fills *slot and *gen) and return MD_EDETACHED; treat
 * that as "done locally, no daemon saw it".  md_seq_end frees every live page
 * and every tier page of the sequence (one PAGE_FREE each, reason FINISHED),
 * then resets its clock to 0 and publishes SEQ_END; the sequence id may be
 * reused at once.  md_page_free: reason FINISHED or EVICTED for a live page,
 * FINISHED or DROPPED for a tier page (1.4), else -EINVAL. */
int md_page_open(md_client *c, uint32_t seq, uint64_t first_pos, uint32_t n_tokens,
		 uint64_t labels, uint32_t *slot, uint32_t *gen);
int md_page_grow(md_client *c, uint32_t slot, uint32_t n_tokens, uint64_t labels);
int md_page_free(md_client *c, uint32_t slot, uint32_t reason);
int md_seq_end(md_client *c, uint32_t seq);
/* Advance a sequence's clock by n appended tokens (docs/design.md §1 clock). */
int md_seq_step(md_client *c, uint32_t seq, uint32_t n_tokens);
uint64_t md_seq_clock(const md_client *c, uint32_t seq);
int md_relabel(md_client *c, uint32_t seq, uint64_t pos0, uint64_t pos1, uint32_t region);

/* ---- attention (may be dropped on overload: returns MD_EFULL, counted) ---- */
int md_attn_page(md_client *c, uint32_t slot, float mass, uint16_t refresh_bitmap);
int md_attn_tokens(md_client *c, uint32_t slot, uint32_t token0, uint32_t count,
		   const float *mass);

/* ---- commands ---- */
/* One command of the daemon.  Without a host tier every command is an evict
 * (type MD_CMD_EVICT).  Grew in SOVERSION 3 (type). */
struct md_evict {
	uint32_t seq, slot, gen, reason;  /* reason: enum md_evict_reason */
	uint64_t decided_ns;
	uint32_t type;                    /* enum md_cmd_type: EVICT, RESTORE, DROP (1.4) */
	uint32_t resv;
};
/* Copies up to cap pending commands whose generation still matches the slot
 * (stale ones are counted and skipped): an evict for a live page, a restore or
 * drop (1.4) for a page in the host tier.  An unknown type, or a restore or
 * drop from a daemon older than 1.4, is a protocol error (counted).  The
 * engine frees an evicted page and reports it with md_page_free(c, slot,
 * MD_FREE_EVICTED); md_apply_commands is the way to apply the tier's
 * commands (it keeps the mirror's tier state). */
int md_poll_commands(md_client *c, struct md_evict *out, size_t cap);
/* Blocks up to timeout_ms for a command (declares the engine asleep). */
int md_wait_commands(md_client *c, int timeout_ms);

/* Mirror of a slot as the engine last declared it (state MD_PAGE_TIER: in
 * the host tier, 1.4). */
int md_page_info(const md_client *c, uint32_t slot, struct md_page_entry *out);

struct md_client_counters {
	uint64_t attn_dropped, lifecycle_dropped, resyncs;
	uint64_t cmds_applied, cmds_stale;
	uint64_t reattaches;
};
void md_client_counters(const md_client *c, struct md_client_counters *out);

/* ---- additions (ABI 1.0, libmemdecay 0.1) ---- */
/* Result of the last attach attempt: 0 when attached, else the error
 * (e.g. -ENOENT / -ECONNREFUSED: no daemon, MD_EREFUSED, MD_EVERSION,
 * MD_EPROTO), MD_EDETACHED after a detach by check or by the engine. */
int md_client_attach_error(const md_client *c);
/* Drops the daemon connection (fail-open state; the mirror is kept). */
void md_client_detach(md_client *c);
/* The socket path resolved at create. */
const char *md_client_socket_path(const md_client *c);
/* One operator request on the daemon's control socket (docs/operations.md
 * "Control protocol"), without attaching: e.g. "policy --json" (the policy
 * names the daemon knows) or "get --json" (every key).  socket_path as in
 * md_client_config.  The reply's body lands in reply (NUL-terminated; cap
 * bytes at most) and its length is returned; a refusal returns MD_EREFUSED
 * with the daemon's message in reply; no daemon, a stall past timeout_ms or a
 * body over cap return a negative errno (-ENOENT, -ETIMEDOUT, -EMSGSIZE, ...)
 * or MD_EPROTO.  Touches no md_client: any thread may call it. */
int md_control(const char *socket_path, const char *request, char *reply, size_t cap,
	       int timeout_ms);
/* Records from the daemon that failed validation (torn or malformed commands,
 * bad parameter block). */
uint64_t md_client_proto_errors(const md_client *c);
/* Live (resident) pages in the mirror; pages in the host tier are not
 * counted (md_client_tier_pages). */
uint32_t md_client_live_pages(const md_client *c);
int md_client_geometry(const md_client *c, uint32_t *page_tokens, uint32_t *page_capacity,
		       uint32_t *max_seqs);

/* ---- batch publish: one step in one crossing (docs/abi.md §8) ----
 * Advances n_steps sequence clocks (step_seqs[i] by step_tokens[i], one STEP
 * record each, in order) and publishes one ATTN_PAGE record per live slot of
 * slots[0..n_pages) with mass[i] and refresh[i] (NULL: no refresh bits; masked
 * to the page's live tokens), as md_seq_step and md_attn_page would, but with
 * one tail store and at most one doorbell for the whole batch.  Records carry
 * the clocks after every step of the batch.  The whole input is checked first:
 * a sequence >= max_seqs, a slot >= page_capacity, a mass that is negative or
 * not finite, n_pages > page_capacity, or a NULL array with a non-zero count
 * is -EINVAL and changes nothing.  A slot that is not live is skipped (no
 * record; `skipped`).  The attention records go in together or not at all:
 * beyond 3/4 of the ring they are all dropped (counted in attn_dropped, and
 * MD_EFULL is returned; the STEP records are still published).  A STEP that
 * does not fit is a lifecycle drop (resync asked), as for md_seq_step.
 * Detached: the clocks advance in the mirror and MD_EDETACHED is returned.
 * No allocation, no system call unless the daemon sleeps.  res may be NULL. */
struct md_batch_result {
	uint32_t steps;      /* STEP records published */
	uint32_t published;  /* ATTN_PAGE records published */
	uint32_t skipped;    /* slots that were not live */
	uint32_t dropped;    /* ATTN_PAGE records dropped on a full ring */
};
int md_publish_batch(md_client *c, const uint32_t *step_seqs, const uint32_t *step_tokens,
		     uint32_t n_steps, const uint32_t *slots, const float *mass,
		     const uint16_t *refresh, uint32_t n_pages, struct md_batch_result *res);

/* ---- the engine contract (ABI 1.3, libmemdecay 0.4; docs/adapters.md) ----
 * What every adapter needs beside publishing, kept once here: a sequence's
 * own options, its pages in position order, the tokens the daemon will never
 * evict, the wait for the daemon's decision when a sequence is over budget,
 * and reattach after a daemon restart. */

/* A sequence's own options (struct md_seq_opts in the ABI).  A field left at
 * its init value means "the engine's setting" (state: running, no session
 * tag).  Set before or after the sequence's first page; the daemon sees the
 * change at once (a lifecycle record, never dropped) and again on every
 * resync and reattach.  md_seq_end resets them.  A 1.0/1.1 daemon cannot
 * honour them: -ENOTSUP (the mirror keeps them, and the library's floor and
 * wait use them).  A 1.2 daemon takes the policy and budget (0) but has no
 * words for the state and tag: the mirror keeps those and sends zeros (what
 * 1.2 reserved), and a later 1.3 daemon gets them at reattach.
 * -EINVAL: seq >= max_seqs, an unknown policy id or state, a session tag that
 * is not bytes 0x21..0x7e followed only by NULs (md_seq_session_tag makes
 * one), size too small.  Set every field: md_seq_set_options replaces them
 * all, so an engine that changes one reads the others with
 * md_seq_get_options first.  Grew in SOVERSION 2 (state, session). */
struct md_seq_options {
	uint32_t size;                  /* sizeof(struct md_seq_options) */
	uint32_t policy;                /* enum md_policy_id; MD_SEQ_ENGINE_U32: the engine's */
	int64_t budget_sequence_tokens; /* -1: the engine's; 0: none; else tokens */
	uint32_t state;                 /* enum md_seq_state: MD_SEQ_RUNNING, MD_SEQ_RETAINED
					   (its request done, KV kept for its next turn) */
	char session[MD_SEQ_SESSION_LEN]; /* the session tag, NUL-padded; all NUL: none */
};
void md_seq_options_init(struct md_seq_options *o);
int md_seq_set_options(md_client *c, uint32_t seq, const struct md_seq_options *o);
int md_seq_get_options(const md_client *c, uint32_t seq, struct md_seq_options *out);
/* A session tag from an engine's session id (len bytes, any encoding): its
 * first MD_SEQ_SESSION_LEN bytes, each outside 0x21..0x7e (blank, control,
 * non-ASCII) replaced by '?', NUL-padded; an empty id gives no tag. */
void md_seq_session_tag(const char *id, size_t len, char tag[MD_SEQ_SESSION_LEN]);
/* The sequence's budget in effect: its own, else the parameter block's
 * (0: none). */
uint64_t md_seq_budget_tokens(md_client *c, uint32_t seq);

/* Live pages and tokens of a sequence in the mirror, slots in the daemon's
 * page order (first position ascending).  md_seq_pages returns the count and
 * fills at most cap slots. */
uint32_t md_seq_live_tokens(const md_client *c, uint32_t seq);
int md_seq_pages(const md_client *c, uint32_t seq, uint32_t *slots, uint32_t cap);

/* Tokens of seq the daemon never evicts: its pages with a token of a pinned
 * region, and its newest protected pages: the count the daemon publishes for
 * the sequence (1.2: tail page, protect_recent and a policy's window such as
 * h2o's), else 1 + protect_recent. */
uint64_t md_seq_floor(md_client *c, uint32_t seq);
/* That count of newest protected pages (first position order, tail page
 * included): an engine that checks the daemon's decisions (memdecay-loadgen)
 * tells a protected page by its rank in md_seq_pages. */
uint32_t md_seq_protected_pages(md_client *c, uint32_t seq);

/* The engine applies one command (ev->type):
 *   MD_CMD_EVICT: it drops the page from its device cache.  Return 1 when the
 *     page is gone (the engine reports it with md_page_free(c, ev->slot,
 *     MD_FREE_EVICTED), or the library does), 2 when the engine kept its K/V
 *     in its host tier (1.4: do not free it; the library publishes PAGE_TIER
 *     IN and the page's state becomes MD_PAGE_TIER, slot, positions and
 *     labels kept), 0 when the engine kept the page resident (counted as
 *     deferred).  2 with no tier (md_client_tier_budget() == 0) is an error:
 *     md_apply_commands returns -ENOTSUP and the page stays live in the
 *     mirror, so the engine must bring it back or free it itself.
 *   MD_CMD_RESTORE (1.4): it copies the tier page back to a device block at
 *     the page's own positions.  Return 1 when done (the library publishes
 *     PAGE_TIER RESTORED: the page is live again), 0 when it cannot (no
 *     device block: the library publishes REFUSED, the page stays in the
 *     tier).
 *   MD_CMD_DROP (1.4): it releases the page's host copy.  Return 1 when done
 *     (the library publishes PAGE_FREE reason MD_FREE_DROPPED and frees the
 *     slot), 0 when it keeps it (the daemon may command it again).
 * < 0 stops.  An engine without a tier sees evict commands only. */
typedef int (*md_apply_fn)(void *ctx, const struct md_evict *ev);
/* Polls every pending command and hands each current one to apply; returns
 * the commands applied (apply returned 1, or 2 for an evict) or a negative
 * error from apply (the commands after it stay queued).  A page apply freed
 * without reporting it is reported by the library; a page apply kept may be
 * commanded again.  Detached: 0. */
int md_apply_commands(md_client *c, md_apply_fn apply, void *ctx);

/* Over-budget wait.  Before a step that appends n_next[i] tokens to seqs[i],
 * each sequence must hold at most max(budget, floor) + slack_tokens (slack:
 * what the engine cannot free at once, e.g. the page or block being
 * written).  While one does not, the library applies commands through apply
 * and waits for the daemon's decision, for at most timeout_ms.  It returns
 * when every sequence is within its limit (MD_SETTLE_OK), when the daemon
 * decided and evicted what it could and nothing more came
 * (MD_SETTLE_UNREACHABLE), on timeout (MD_SETTLE_TIMEOUT: later calls for the
 * same sequence return MD_SETTLE_SUPPRESSED without waiting until the daemon
 * evicts from it again), or detached (MD_SETTLE_DETACHED: fail-open).
 * Never waits when no sequence has a budget. */
enum md_settle_outcome {
	MD_SETTLE_OK = 0,
	MD_SETTLE_UNREACHABLE = 1,
	MD_SETTLE_TIMEOUT = 2,
	MD_SETTLE_SUPPRESSED = 3,
	MD_SETTLE_DETACHED = 4,
};
struct md_settle_result {
	uint32_t outcome;   /* enum md_settle_outcome */
	uint32_t applied;   /* pages apply freed */
	uint32_t waited;    /* 1 if it waited at all */
	uint32_t resv;
	uint64_t wait_ns;
};
int md_settle(md_client *c, const uint32_t *seqs, const uint32_t *n_next, uint32_t n_seqs,
	      uint32_t slack_tokens, int timeout_ms, md_apply_fn apply, void *ctx,
	      struct md_settle_result *res);

/* The same wait for the engine's page budget (the parameter block's
 * budget_engine_pages, which includes a global budget's share): before a step
 * that opens n_next_pages pages, the engine must hold at most budget +
 * slack_pages pages.  No floor (the daemon's engine scope spans every
 * sequence) and no suppression: UNREACHABLE ends a wait the daemon cannot
 * help.  Returns at once when the engine has no page budget. */
int md_settle_engine(md_client *c, uint32_t n_next_pages, uint32_t slack_pages,
		     int timeout_ms, md_apply_fn apply, void *ctx,
		     struct md_settle_result *res);

/* ---- the host tier and recall (ABI 1.4, libmemdecay 0.5; docs/tier.md) ----
 * An engine that keeps evicted pages' K/V in host memory says how many pages
 * it can keep (md_client_config.tier_pages) and returns 2 from its apply
 * callback for an evict it kept there.  Such a page is in the tier: its slot
 * stays allocated with its sequence, positions and labels, it is not resident
 * (md_seq_pages, md_seq_live_tokens, md_client_live_pages and the settle
 * waits leave it out) and gets no real attention (md_attn_page: MD_ESTALE).
 * memdecayd decides which tier pages come back (MD_CMD_RESTORE) and which
 * leave the tier (MD_CMD_DROP), applied through the same callback.
 * md_page_free works on a tier page (the engine's own limit: reason
 * MD_FREE_DROPPED; FINISHED too), md_seq_end frees a sequence's tier pages as
 * well (one PAGE_FREE each), and a reattach or resync gives the daemon the
 * tier pages through the page table (state MD_PAGE_TIER).
 * A 1.3 daemon has no tier: md_client_tier_budget() is 0 and tier pages kept
 * from an earlier daemon are not shown to it (free them). */

/* The pages this engine may hold in its tier: the parameter block's
 * budget_tier_pages (0: no tier; always 0 without tier_pages in the config or
 * against a daemon older than 1.4).  Detached: the last value read. */
uint64_t md_client_tier_budget(md_client *c);
/* Pages in the tier now (the mirror's). */
uint32_t md_client_tier_pages(const md_client *c);
/* A sequence's tier pages, first position ascending; returns the count and
 * fills at most cap slots (as md_seq_pages for the resident ones). */
int md_seq_tier_pages(const md_client *c, uint32_t seq, uint32_t *slots, uint32_t cap);
/* The engine's estimate of the attention the current queries would give its
 * tier pages (from a key digest it keeps), and may give its resident pages
 * measured the same way: one ATTN_PAGE record flagged MD_REC_F_ESTIMATE per
 * tier or resident slot of slots[0..n) with mass[i] and refresh[i] (NULL:
 * none; masked to the page's tokens).  For a resident page the daemon takes
 * the mass as its recent attention only, what a recall's candidate is
 * compared with (docs/tier.md).  Any other slot is skipped (`skipped`).
 * Against a daemon older than 1.4 nothing is published.  Validation,
 * all-or-nothing and overload as md_publish_batch (with no steps): -EINVAL
 * changes nothing; beyond 3/4 of the ring every record is dropped
 * (attn_dropped, MD_EFULL).  Detached: MD_EDETACHED.  res may be NULL. */
int md_publish_estimates(md_client *c, const uint32_t *slots, const float *mass,
			 const uint16_t *refresh, uint32_t n, struct md_batch_result *res);
/* The bounded wait at the end of a turn's prefill, after its estimates are
 * published: applies commands through apply (restores among them) until the
 * daemon has consumed every record published before the call and decided on
 * them, for at most timeout_ms.  The daemon has decided once its stats head
 * is at or past those records and either it declares itself asleep (it does
 * only with no work left) or 5 ms have passed since then and since the last
 * command applied (it decides in the pass that drains the ring, so a turn
 * that recalls nothing costs that quiet period).  Outcomes: MD_SETTLE_OK,
 * MD_SETTLE_TIMEOUT (fail-open: go on without the recall),
 * MD_SETTLE_DETACHED.  res->applied counts the commands applied.  -ENOTSUP
 * with the CUDA stats transport (its head is on the device), -EINVAL without
 * apply. */
int md_settle_recall(md_client *c, int timeout_ms, md_apply_fn apply, void *ctx,
		     struct md_settle_result *res);

/* Call at every step boundary: checks the daemon (md_client_check), and when
 * detached tries to reattach: one retry_ms (0: 1000) after the loss, then at
 * doubling periods up to 2 s (or retry_ms if longer), republishing every live
 * page and every sequence's options.  heartbeat_timeout_ms is also the one
 * md_settle checks while it waits.  Returns 1 attached, 0 not. */
int md_client_maintain(md_client *c, uint32_t heartbeat_timeout_ms, uint32_t retry_ms);

/* Names of the built-in regions and policies (the ABI's one list). */
const char *md_region_name(uint32_t region);   /* NULL beyond the built-ins */
const char *md_policy_name(uint32_t policy);   /* NULL beyond the ABI's */
int md_policy_from_name(const char *name);     /* id, or -EINVAL */

/* ---- GPU publisher (ABI 1.1, stats_transport=cuda; docs/abi.md §7) ----
 * For an engine whose attention lives in GPU memory.  md_gpu_create moves the
 * client to the CUDA stats ring: it allocates the device ring, re-attaches
 * with HELLO stats_transport=cuda and publishes the ring's export record.
 * From then on every record of the client goes through the device ring in
 * order: lifecycle calls (md_page_open, md_seq_step, ...) are staged in
 * private memory and queued on the stream by the next md_gpu_publish_* or
 * md_gpu_flush; attention is reduced to per-page mass on the device and the
 * records are completed there.  Per-token data never leaves the device and
 * nothing waits for the stream.  Pointers marked device are device memory of
 * `device`; `stream` is a cudaStream_t (NULL: the legacy default stream).  Use
 * one stream for every call of a publisher (or order the streams yourself):
 * the ring's tail is stored by work queued on it, in call order.
 *   -ENOTSUP   libmemdecay built without CUDA (MEMDECAY_CUDA=OFF)
 *   -ENODEV    no usable CUDA device or driver
 *   MD_EREFUSED the daemon refused the CUDA transport (built without CUDA, or
 *              no device on its side); the client is attached again with the
 *              host ring
 * A failed md_gpu_create leaves the client as it was: keep publishing with
 * md_attn_page / md_attn_tokens.  Messages: md_client_last_error. */
typedef struct md_gpu md_gpu;

struct md_gpu_config {
	int device;               /* CUDA device ordinal */
	uint32_t ring_capacity;   /* device ring records, power of two <= 2^24; 0 = 65536 */
	uint32_t max_pages;       /* dense pages per publish call; 0 = page_capacity */
};
void md_gpu_config_init(struct md_gpu_config *cfg);
int md_gpu_create(md_client *c, const struct md_gpu_config *cfg, md_gpu **out);
/* Back to the host ring (re-attaches when attached), frees the device ring.
 * Call before md_client_destroy. */
void md_gpu_destroy(md_gpu *g);

#define MD_GPU_NO_SLOT UINT32_MAX

/* One step's attention probabilities (md_kernels.h layout): probs[q][h][c]
 * rows of n_kv cells (row stride >= n_kv floats); rows may stack layers, the
 * mass is the mean over all n_query·n_head rows.  Cell c belongs to dense page
 * cell_page[c] (-1: untracked), token cell_token[c] < P.  Dense page i is the
 * client's slot slots[i] (host array; MD_GPU_NO_SLOT or a slot that is not
 * live: no record). */
struct md_gpu_probs {
	const float *probs;        /* device */
	uint32_t n_query, n_head, n_kv, row_stride;
	const int32_t *cell_page;  /* device [n_kv] */
	const uint8_t *cell_token; /* device [n_kv] */
	uint32_t n_pages;          /* dense pages, <= max_pages */
	const uint32_t *slots;     /* host [n_pages] */
};

/* One decode query of one sequence from a fused attention kernel
 * (md_kernels_flash.h): q, the paged K cache, the block table and the
 * per-head log-sum-exp; page i holds positions [i·P, min((i+1)·P, n_tokens))
 * and is the client's slot slots[i]. */
struct md_gpu_flash {
	const float *q;            /* device [n_head][head_dim] */
	const float *k_cache;      /* device [n_blocks][P][n_kv_head][head_dim] */
	const int32_t *block_table;/* device [n_pages] */
	const float *lse;          /* device [n_head] */
	uint32_t n_head, n_kv_head, head_dim, n_blocks;
	uint32_t n_pages, n_tokens;/* n_pages <= max_pages, n_tokens <= n_pages·P */
	uint32_t head_step;        /* 0 or 1: every head */
	float scale;               /* 0: 1/sqrt(head_dim) */
	const uint32_t *slots;     /* host [n_pages] */
};

/* Queue the staged lifecycle records, the page-mass kernels and the step's
 * ATTN_PAGE records on stream.  Returns the attention records queued (>= 0),
 * MD_EFULL when the ring had no room for them (all dropped, counted),
 * MD_EDETACHED, -EINVAL, or -EIO (the CUDA runtime failed; sticky). */
int md_gpu_publish_probs(md_gpu *g, const struct md_gpu_probs *in, void *stream);
int md_gpu_publish_flash(md_gpu *g, const struct md_gpu_flash *in, void *stream);
/* Queue the staged lifecycle records only (steps without attention). */
int md_gpu_flush(md_gpu *g, void *stream);

struct md_gpu_counters {
	uint64_t attn_records;      /* ATTN_PAGE records queued */
	uint64_t attn_dropped;      /* dropped on a full ring */
	uint64_t attn_skipped;      /* dense pages with no live slot */
	uint64_t lifecycle_records; /* staged records queued */
	uint64_t lifecycle_dropped; /* did not fit the device ring (resync asked) */
	uint64_t device_tail;       /* records ever queued on the device ring */
};
void md_gpu_counters(const md_gpu *g, struct md_gpu_counters *out);
/* Records queued and not yet seen consumed by the daemon (the view is
 * refreshed asynchronously on stream), or < 0. */
int64_t md_gpu_pending(md_gpu *g, void *stream);

#ifdef __cplusplus
}
#endif
#endif
