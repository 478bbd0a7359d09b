/*
 * calibrate.h — attention lifetimes per region and the half-life estimator
 * behind `memdecayctl calibrate` (docs/calibration.md).  Pure: no I/O, no
 * daemon state.  The tracker follows one engine's pages from the records the
 * host accepted (or a journal replays) and turns every token that leaves, or
 * is still there at the end, into one lifetime sample; the estimator turns a
 * region's samples into a half-life with a confidence interval.
 *
 * Lifetime L of a token: steps from its birth (the sequence clock when it was
 * appended) to its last refresh (the last step its attention exceeded τ).
 * Observed ("event") when the token then stayed `grace` steps or more without
 * a refresh; otherwise right-censored at L (its true lifetime is ≥ L).
 */
#ifndef MD_CALIBRATE_H
#define MD_CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "memdecay_abi.h"

#define MD__CALIB_HIST_BINS 4096u      /* exact steps 0..4094, last bin: ≥ 4095 */
#define MD__CALIB_GRACE_DEFAULT 32u
#define MD__CALIB_MIN_EVENTS 20u       /* fewer events: no estimate is applied */
#define MD__CALIB_CONF 0.95

/* Sufficient statistics of one region's samples. */
struct md__calib_region {
	uint64_t events, censored;
	double sum_life;                          /* Σ L over all samples */
	uint64_t ev_hist[MD__CALIB_HIST_BINS];    /* events by L */
	uint64_t cen_hist[MD__CALIB_HIST_BINS];   /* censored by L */
};

struct md__calib_stats {
	struct md__calib_region r[MD_REGIONS_MAX];
};

void md__calib_add(struct md__calib_region *r, uint64_t life_steps, int event);
void md__calib_merge(struct md__calib_stats *dst, const struct md__calib_stats *src);

enum md__calib_status {
	MD__CALIB_OK = 0,        /* enough events: an estimate to apply */
	MD__CALIB_FEW = 1,       /* some samples, fewer than min_events events */
	MD__CALIB_NONE = 2,      /* no samples */
	MD__CALIB_ZERO = 3,      /* every lifetime is 0: no token refreshed after birth */
};

struct md__calib_estimate {
	int status;                       /* enum md__calib_status */
	uint64_t samples, events, censored;
	double exposure_steps;            /* Σ L + events: per-step trials at risk */
	double half_life, half_life_lo, half_life_hi;  /* steps; interval at conf */
	double lambda, lambda_lo, lambda_hi;           /* ln 2 / half-life */
	double km_half_life;              /* Kaplan–Meier: -1 if survival stays > 0.5 */
};

/* Geometric (discrete exponential) MLE with a χ² interval, plus the
 * Kaplan–Meier half-life as a model check.  conf in (0, 1). */
int md__calib_estimate(const struct md__calib_region *r, double conf, uint64_t min_events,
		       struct md__calib_estimate *out);

const char *md__calib_status_name(int status);

/* ---- lifetime tracker: one engine's pages ---- */
struct md__calib_tracker;

struct md__calib_tracker *md__calib_tracker_new(uint32_t page_tokens, uint32_t page_capacity,
						uint32_t max_seqs, uint32_t grace_steps);
void md__calib_tracker_free(struct md__calib_tracker *t);

/* Record handlers.  Each checks its indices (a journal is input too) and
 * returns 0 or -EINVAL; samples go to st. */
int md__calib_page_open(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t slot,
			uint32_t gen, uint32_t seq, uint64_t first_pos, uint32_t n_tokens,
			uint64_t labels, uint64_t clock);
int md__calib_page_grow(struct md__calib_tracker *t, uint32_t slot, uint32_t gen,
			uint32_t n_tokens, uint64_t labels, uint64_t clock);
int md__calib_page_labels(struct md__calib_tracker *t, uint32_t slot, uint32_t gen,
			  uint64_t labels);
/* Warms the lines md__calib_attn(slot) will touch (batched ingest). */
void md__calib_prefetch(const struct md__calib_tracker *t, uint32_t slot);
int md__calib_attn(struct md__calib_tracker *t, uint32_t slot, uint32_t gen, uint32_t refresh,
		   uint64_t clock);
int md__calib_page_free(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t slot,
			uint32_t gen, uint64_t clock);
int md__calib_seq_clock(struct md__calib_tracker *t, uint32_t seq, uint64_t clock);
int md__calib_seq_end(struct md__calib_tracker *t, struct md__calib_stats *st, uint32_t seq,
		      uint64_t clock);

/* Relabel [pos0, pos1) of seq to region; calls fn for every page whose labels
 * changed (the journal records the new labels).  Returns pages changed. */
typedef void (*md__calib_labels_fn)(uint32_t slot, uint32_t gen, uint32_t seq, uint64_t labels,
				    void *ud);
int md__calib_relabel(struct md__calib_tracker *t, uint32_t seq, uint64_t pos0, uint64_t pos1,
		      uint32_t region, md__calib_labels_fn fn, void *ud);

/* Every live page ends now (resync, detach, end of a journal): its tokens
 * become samples as if freed at their sequence's clock. */
void md__calib_tracker_flush(struct md__calib_tracker *t, struct md__calib_stats *st);
/* The same into st without changing the tracker (live `calibrate`). */
void md__calib_tracker_peek(const struct md__calib_tracker *t, struct md__calib_stats *st);

/* Facts the daemon needs to decide ATTN_TOKENS refreshes. */
uint32_t md__calib_page_seq(const struct md__calib_tracker *t, uint32_t slot, uint32_t gen);
uint64_t md__calib_seq_tokens(const struct md__calib_tracker *t, uint32_t seq);
uint64_t md__calib_seq_clock_of(const struct md__calib_tracker *t, uint32_t seq);

#endif
